//! The task queue. Owns every Redis key and Lua script, the [`Broker`] trait and its two
//! implementations ([`RedisBroker`] for deployments, [`MemoryBroker`] for a single process),
//! leases with fencing tokens, retries, the reaper, cancellation, idempotency keys, batches and their logs of finished tasks,
//! result TTLs, the worker registry, the result cache with coalescing, a small key-value
//! cache (reference timings), tenants (tokens by hash, quotas, per-tenant caches and keys),
//! the fair share between them, the recent activity the status page shows (`activity`), and how a process reaches Redis (credentials, TLS:
//! `redis_conn`). It knows nothing about HTTP or Python.

pub mod activity;
pub mod broker;
pub mod error;
pub mod fair;
pub mod kv;
pub mod memory;
pub mod policy;
pub mod reaper;
pub mod redis_broker;
pub mod redis_conn;
pub mod tenants;

pub use activity::{ActivityReport, FailureRecord};
pub use broker::{
    AckOutcome, Broker, BrokerError, CancelOutcome, FinishedPage, HeartbeatAnswer, Lease,
    LeaseState, ReapReport, Submitted,
};
pub use kv::{KvCounts, KvNamespace};
pub use memory::MemoryBroker;
pub use reaper::{ReaperSettings, run_reaper};
pub use redis_broker::RedisBroker;
pub use redis_conn::{ConnectError, RedisTarget, TlsFiles, redact_url};
pub use tenants::{SHARED_CACHE_NAMESPACE, Tenant, TenantLoad, TenantRegistry};
