//! What a broker call can fail with. Its own module, below both `broker` (the trait) and
//! `tenants` (the registry trait every broker also implements), so neither imports the other
//! for it; the API maps it to HTTP in one place (api-server `error.rs`).

use crucible_shared::TenantId;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// Accepting the submission would take the queue past its cap.
    #[error("queue is full ({queued} queued, cap {cap})")]
    QueueFull { queued: u64, cap: u64 },
    /// Accepting the submission would take the tenant past its `max_queued`.
    #[error("tenant quota reached ({queued} queued, max_queued {max_queued})")]
    QuotaExceeded { queued: u64, max_queued: u64 },
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
}
