//! The task queue. Owns every Redis key and Lua script, the [`Broker`] trait and its two
//! implementations ([`RedisBroker`] for deployments, [`MemoryBroker`] for a single process),
//! leases with fencing tokens, retries, the reaper, cancellation, idempotency keys, batches and their logs of finished tasks,
//! result TTLs, the worker registry, the result cache with coalescing, and a small key-value
//! cache (reference timings), and how a process reaches Redis (credentials, TLS: `redis_conn`).
//! It knows nothing about HTTP or Python.

pub mod broker;
pub mod memory;
pub mod reaper;
pub mod redis_broker;
pub mod redis_conn;

pub use broker::{
    AckOutcome, Broker, BrokerError, CancelOutcome, FinishedPage, Lease, LeaseState,
    REF_CACHE_NAMESPACE, ReapReport, Submitted,
};
pub use memory::MemoryBroker;
pub use reaper::run_reaper;
pub use redis_broker::RedisBroker;
pub use redis_conn::{ConnectError, RedisTarget, TlsFiles, redact_url};
