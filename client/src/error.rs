//! What a call can fail with, after its retries.

use crucible_shared::ApiError;

/// Why a call failed, after any retries: the variant says whether retrying later can help.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error body.
    #[error("HTTP {status}: {error}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The body: `error.code` says what to do about it.
        error: ApiError,
    },
    /// The request could not be sent or its answer read, and the failure was not one that
    /// is retried (a connection refused or a timeout is).
    #[error("transport: {0}")]
    Transport(#[from] reqwest::Error),
    /// The answer is not what the API sends: a 2xx body of the wrong shape, or an error
    /// without an [`ApiError`] body (a proxy's page, a server of another version).
    #[error("unexpected answer (HTTP {status}): {body}")]
    Unexpected {
        /// The HTTP status.
        status: u16,
        /// The body as received (lossily decoded).
        body: String,
    },
    /// Every attempt met a retryable refusal (429, 503) or connection error: the server is
    /// overloaded or down.
    #[error("gave up after {attempts} attempts: {last}")]
    Exhausted {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's error.
        last: String,
    },
    /// A wait for results passed its deadline; what says which.
    #[error("timed out: {0}")]
    TimedOut(String),
}
