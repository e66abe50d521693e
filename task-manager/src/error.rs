//! What a broker call can fail with. Its own module, below both `broker` (the trait) and
//! `tenants` (the registry trait every broker also implements), so neither imports the other
//! for it; the API maps it to HTTP in one place (api-server `error.rs`).

use crucible_shared::TenantId;

/// Why a broker call failed; each variant has one HTTP status (api-server `error.rs`).
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// Accepting the submission would take the queue past its cap.
    #[error("queue is full ({queued} queued, cap {cap})")]
    QueueFull {
        /// Tasks queued when the submission was refused.
        queued: u64,
        /// The queue cap (`BrokerConfig::queue_cap`).
        cap: u64,
    },
    /// Accepting the submission would take the tenant past its `max_queued`.
    #[error("tenant quota reached ({queued} queued, max_queued {max_queued})")]
    QuotaExceeded {
        /// The tenant's tasks queued when the submission was refused.
        queued: u64,
        /// The tenant's quota.
        max_queued: u64,
    },
    /// The submitting tenant does not exist (it was deleted).
    #[error("unknown tenant {0}")]
    UnknownTenant(TenantId),
    /// A tenant of this name exists already.
    #[error("a tenant named {0:?} exists already")]
    TenantExists(String),
    /// The broker's backing store cannot be reached.
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    /// Stored data could not be decoded (a bug or a foreign writer).
    #[error("corrupt broker data: {0}")]
    Corrupt(String),
    /// Accepting the submission would take the spec bytes of open tasks past the queue's byte
    /// budget.
    #[error("queue is full ({bytes} bytes of open tasks, cap {cap_bytes} bytes)")]
    QueueBytesFull {
        /// Spec bytes of open tasks when the submission was refused.
        bytes: u64,
        /// The byte budget (`BrokerConfig::queue_cap_bytes`).
        cap_bytes: u64,
    },
    /// The broker's store refuses writes: it is at its memory limit (Redis `maxmemory` with
    /// `noeviction`). Nothing was written.
    #[error("broker out of memory: {0}")]
    OutOfMemory(String),
}
