//! Process plumbing shared by the three binaries (`crucible-api`, `crucible-worker`,
//! `crucible`), so that they log alike and stop alike.
//!
//! - [`init_tracing`]: the one log set-up (`RUST_LOG`, `info` by default;
//!   `CRUCIBLE_LOG_FORMAT` `text` or `json`; colours only on a terminal; the CLI logs on stderr
//!   because its stdout carries JSON).
//! - [`shutdown_signal`]: resolves on SIGINT or SIGTERM.
//! - [`Shutdown`]: the process's one cancellation token. Every long-running loop of a binary
//!   is stopped through it, the library loops (`Worker::run`, `run_reaper`, the server)
//!   included: they take its [`Shutdown::token`].
//! - [`shield_from_oom_killer`]: the services' `oom_score_adj`, so that a task's allocation
//!   never costs the node its worker or its API.
//! - [`metrics`]: `crucible_build_info`, which every binary exports, and the endpoint a
//!   standalone worker serves its metrics on.
//!
//! It exists so that the binaries do not each carry a copy of this code, and so that a crate
//! that needs none of it (the HTTP client) does not depend on a binary to get it.

mod logging;
pub mod metrics;

pub use logging::{
    DEFAULT_LOG_FILTER, LOG_FORMAT_ENV, LogFormat, LogSetupError, LogTo, colours, init_tracing,
};

use tokio::signal::unix::{SignalKind, signal};
pub use tokio_util::sync::CancellationToken;

/// Resolves when the process gets SIGINT (Ctrl-C) or SIGTERM (what an orchestrator sends).
/// Fails only if the SIGTERM handler cannot be installed.
pub async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}

/// The process's shutdown: one token, cancelled once, seen by every loop of the binary.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    token: CancellationToken,
}

impl Shutdown {
    /// A shutdown not yet started; clone it into every loop that must see it.
    pub fn new() -> Self {
        Self::default()
    }

    /// The token itself, for `select!` and for futures that must be `'static`
    /// (`token().cancelled_owned()`).
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Starts the shutdown; every holder of the token sees it.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// Whether the shutdown has started, for loops that check between steps.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }
}

/// The services' `oom_score_adj`: the kernel's OOM killer takes a task child (1000, set by the
/// worker at each child's start) and nearly anything else before a worker or an API process.
pub const SERVICE_OOM_SCORE_ADJ: i32 = -900;

/// Sets this process's `oom_score_adj` to [`SERVICE_OOM_SCORE_ADJ`] (lowering it needs
/// `CAP_SYS_RESOURCE`: root, as deployed); where that is refused the process runs on, logged.
pub fn shield_from_oom_killer() {
    match std::fs::write(
        "/proc/self/oom_score_adj",
        SERVICE_OOM_SCORE_ADJ.to_string(),
    ) {
        Ok(()) => tracing::debug!(
            oom_score_adj = SERVICE_OOM_SCORE_ADJ,
            "shielded from the oom killer"
        ),
        Err(e) => {
            tracing::info!(error = %e, "oom_score_adj left as inherited (needs CAP_SYS_RESOURCE)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn cancel_is_seen_by_the_token() {
        let shutdown = Shutdown::new();
        let token = shutdown.token();
        assert!(!token.is_cancelled());
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), token.cancelled())
            .await
            .expect("the token learns of the shutdown");
        assert!(shutdown.is_cancelled());
    }

    #[tokio::test]
    async fn token_after_cancel_starts_cancelled() {
        let shutdown = Shutdown::new();
        shutdown.cancel();
        assert!(shutdown.token().is_cancelled());
    }

    #[tokio::test]
    async fn clones_share_one_token() {
        let shutdown = Shutdown::new();
        let token = shutdown.clone().token();
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), token.cancelled())
            .await
            .expect("a clone's token is cancelled too");
    }
}
