//! The client side of Crucible: a typed async HTTP client (a bearer token when the server
//! requires one; retries with backoff on 429, 503 and connection errors; rollout batches
//! resubmitted under one idempotency key) used by
//! trainers and by the `crucible` CLI, the multi-turn return helpers
//! (`returns`, from `crucible_rl::returns`) and the
//! summary of a scored batch (`summary`).
//!
//! Modules by concept: `transport` (the [`Client`], one request and its retries), `retry`
//! (which failures are retried and the pauses), `error` ([`ClientError`]), `calls` (one
//! method per single-request endpoint), `rollouts` (rollout batches and their results'
//! stream), `episodes` (multi-turn episodes).

mod calls;
mod episodes;
mod error;
mod retry;
pub mod returns;
mod rollouts;
pub mod summary;
mod transport;

pub use calls::{BatchSubmitted, problem_set_query};
pub use error::ClientError;
pub use retry::{MAX_RETRY_AFTER, backoff, retry_after};
pub use transport::Client;
