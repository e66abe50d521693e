//! Process plumbing shared by the three binaries (`crucible-api`, `crucible-worker`,
//! `crucible`), so that they log alike and stop alike.
//!
//! - [`init_tracing`]: the one log set-up (`RUST_LOG`, `info` by default; the CLI logs on
//!   stderr because its stdout carries JSON).
//! - [`shutdown_signal`]: resolves on SIGINT or SIGTERM.
//! - [`Shutdown`]: the process's one cancellation token. Every long-running loop of a binary
//!   is stopped through it; [`Shutdown::watch`] hands the same decision to the library loops
//!   that still take a `watch::Receiver<bool>` (`Worker::run`, `run_reaper`).
//!
//! It exists so that the binaries do not each carry a copy of this code, and so that a crate
//! that needs none of it (the HTTP client) does not depend on a binary to get it.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
pub use tokio_util::sync::CancellationToken;

/// Where a binary's logs go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogTo {
    /// The services (`crucible-api`, `crucible-worker`): stdout, as the fmt default.
    Stdout,
    /// The CLI: its stdout is the commands' JSON, so logs must stay off it.
    Stderr,
}

/// Installs the global subscriber: human-readable lines filtered by `RUST_LOG` (`info` when it
/// is unset or does not parse).
pub fn init_tracing(to: LogTo) {
    let builder = tracing_subscriber::fmt().with_env_filter(
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
    );
    match to {
        LogTo::Stdout => builder.init(),
        LogTo::Stderr => builder.with_writer(std::io::stderr).init(),
    }
}

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

    /// Starts the shutdown; every holder of the token (or of a [`Shutdown::watch`]) sees it.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// Whether the shutdown has started, for loops that check between steps.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The same shutdown as a `watch::Receiver<bool>` (true once cancelled), for the library
    /// loops whose signature takes one. Must be called inside a Tokio runtime: a small task
    /// forwards the cancellation.
    pub fn watch(&self) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(self.token.is_cancelled());
        let token = self.token.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = token.cancelled() => {}
                // Every receiver is gone: nobody is left to tell.
                () = tx.closed() => return,
            }
            let _ = tx.send(true);
            // Held until the last receiver is gone, as the binaries' own senders were held
            // until exit: a loop that waits for a further change must not see the channel
            // close under it.
            tx.closed().await;
        });
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn watch_sees_the_cancellation() {
        let shutdown = Shutdown::new();
        let mut rx = shutdown.watch();
        assert!(!*rx.borrow());
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|stop| *stop))
            .await
            .expect("the receiver learns of the shutdown")
            .expect("the sender lives until it has told");
        assert!(shutdown.is_cancelled());
    }

    #[tokio::test]
    async fn watch_after_cancel_starts_true() {
        let shutdown = Shutdown::new();
        shutdown.cancel();
        assert!(*shutdown.watch().borrow());
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
