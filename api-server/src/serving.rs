//! The accept loop: HTTP/1 connections served by hyper with a header read timeout (which is also
//! the keep-alive idle timeout) and a connection cap, which `axum::serve` offers neither of.
//! Beyond the cap the oldest connection is asked to close, so a flood of idle or slow clients
//! makes room for new ones (a `/health` probe among them) instead of locking them out; past the
//! hard limit new sockets are closed unread, so the process never runs out of file descriptors.

use crate::limits::ServeLimits;
use crate::metrics::{Metrics, SHED_CLOSED_OLDEST, SHED_REFUSED};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The pause after `accept` fails (out of file descriptors despite the cap, or a socket reset
/// before it was accepted), so that the loop does not spin while nothing can be accepted.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// The connections being served.
#[derive(Default)]
struct Connections {
    next_id: u64,
    /// Those not yet asked to close, oldest first, each with the token that asks it to.
    open: BTreeMap<u64, CancellationToken>,
    /// All of them, those asked to close but still finishing a response included: what holds
    /// descriptors, so what the limits count.
    live: usize,
}

/// What to do with a connection just accepted, given how many are open.
#[derive(Debug, PartialEq)]
enum Admission {
    /// Serve it.
    Serve,
    /// Serve it and ask the oldest open connection to close.
    ServeAndShedOldest,
    /// Close it unread: too many are open already, closing ones included.
    Refuse,
}

/// A connection's place in [`Connections`], given back when its task ends, even by a panic.
struct Registered {
    connections: Arc<Mutex<Connections>>,
    metrics: Arc<Metrics>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut c = self
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        c.open.remove(&self.id);
        c.live -= 1;
        self.metrics.connections_open.set(c.live as i64);
    }
}

fn admission(open: usize, limits: &ServeLimits) -> Admission {
    if open >= limits.hard_connection_limit() {
        Admission::Refuse
    } else if open >= limits.max_connections {
        Admission::ServeAndShedOldest
    } else {
        Admission::Serve
    }
}

/// Serves `app` on `listener` until `shutdown` is cancelled, then lets every open connection
/// finish its current response and waits for them.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let connections = Arc::new(Mutex::new(Connections::default()));
    let tracker = TaskTracker::new();
    // Whether the last connection was refused: logged when refusing starts and when it stops,
    // not once per connection of a flood.
    let mut refusing = false;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let (id, close) = {
            let mut c = connections.lock().unwrap_or_else(PoisonError::into_inner);
            let admitted = admission(c.live, &limits);
            if (admitted == Admission::Refuse) != refusing {
                refusing = !refusing;
                match refusing {
                    true => {
                        tracing::warn!(%peer, live = c.live, "refusing connections: at the hard limit")
                    }
                    false => tracing::info!(live = c.live, "accepting connections again"),
                }
            }
            match admitted {
                Admission::Refuse => {
                    metrics
                        .connections_shed
                        .with_label_values(&[SHED_REFUSED])
                        .inc();
                    continue;
                }
                Admission::ServeAndShedOldest => {
                    if let Some((_, oldest)) = c.open.pop_first() {
                        oldest.cancel();
                        metrics
                            .connections_shed
                            .with_label_values(&[SHED_CLOSED_OLDEST])
                            .inc();
                    }
                }
                Admission::Serve => {}
            }
            let id = c.next_id;
            c.next_id += 1;
            let close = shutdown.child_token();
            c.open.insert(id, close.clone());
            c.live += 1;
            metrics.connections_open.set(c.live as i64);
            (id, close)
        };
        let conn =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let registered = Registered {
            connections: connections.clone(),
            metrics: metrics.clone(),
            id,
        };
        tracker.spawn(async move {
            let _registered = registered;
            let mut conn = std::pin::pin!(conn);
            let served = tokio::select! {
                served = conn.as_mut() => served,
                () = close.cancelled() => {
                    // Closes at once when idle or mid-headers, after the response otherwise.
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
        });
    }
    tracker.close();
    tracker.wait().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_sheds_the_oldest_past_the_cap_and_refuses_past_the_hard_limit() {
        let limits = ServeLimits {
            max_connections: 8,
            ..ServeLimits::default()
        };
        assert_eq!(admission(7, &limits), Admission::Serve);
        assert_eq!(admission(8, &limits), Admission::ServeAndShedOldest);
        assert_eq!(admission(9, &limits), Admission::Refuse);
    }
}
