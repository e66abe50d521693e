//! The accept loop: HTTP/1 connections served by hyper with a header read timeout (which is also
//! the keep-alive idle timeout) and a connection cap, which `axum::serve` offers neither of.
//! Beyond the cap the oldest *idle* connection (between requests, nothing arriving) is closed,
//! so a flood of idle clients makes room for new ones (a `/health` probe among them) instead of
//! locking them out; a connection with a request in flight, or one whose request is arriving,
//! is never closed under it (`activity`). Past the hard limit the loop waits for the closed
//! connections to leave before it accepts again, and closes a new socket unread only when every
//! connection is busy, so the process never runs out of file descriptors.

mod activity;

use crate::limits::ServeLimits;
use crate::metrics::{Metrics, SHED_CLOSED_OLDEST, SHED_REFUSED};
use activity::{Activity, Tracked, Watched};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::os::fd::AsRawFd as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The pause after `accept` fails (out of file descriptors despite the cap, or a socket reset
/// before it was accepted), so that the loop does not spin while nothing can be accepted.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// How long the loop, at the hard limit, waits for connections it closed (or busy ones) to
/// leave before it closes the next new socket unread. Closed idle connections leave within
/// microseconds; this bounds the wait when every connection is busy.
const ROOM_WAIT: Duration = Duration::from_secs(2);

/// One open connection, as the accept loop sees it.
struct Open {
    /// Asks the connection to close (once idle).
    close: CancellationToken,
    /// Whether it is idle, so that it may be closed to make room.
    activity: Arc<Activity>,
}

/// The connections being served.
#[derive(Default)]
struct Connections {
    next_id: u64,
    /// Those not yet asked to close, oldest first.
    open: BTreeMap<u64, Open>,
    /// All of them, those asked to close but still finishing a response included: what holds
    /// descriptors, so what the limits count.
    live: usize,
}

impl Connections {
    /// Asks the oldest idle connection to close; false when every open one is busy.
    fn shed_oldest_idle(&mut self) -> bool {
        let Some(id) = self
            .open
            .iter()
            .find_map(|(id, open)| open.activity.idle().then_some(*id))
        else {
            return false;
        };
        if let Some(open) = self.open.remove(&id) {
            open.activity.mark_closing();
            open.close.cancel();
        }
        true
    }
}

/// What to do with a connection just accepted, given how many are live and how many of those
/// are already leaving (asked to close).
#[derive(Debug, PartialEq)]
enum Admission {
    /// Serve it.
    Serve,
    /// Serve it and close the oldest idle connection.
    ServeAndShedOldest,
    /// At the hard limit: close the oldest idle connection, if any, and wait for one to leave.
    WaitForRoom,
    /// Close it unread: at the hard limit and nothing is leaving or idle.
    Refuse,
}

fn admission(live: usize, leaving: usize, any_idle: bool, limits: &ServeLimits) -> Admission {
    if live < limits.max_connections {
        Admission::Serve
    } else if live < limits.hard_connection_limit() {
        Admission::ServeAndShedOldest
    } else if leaving > 0 || any_idle {
        Admission::WaitForRoom
    } else {
        Admission::Refuse
    }
}

/// A connection's place in [`Connections`], given back when its task ends, even by a panic.
struct Registered {
    connections: Arc<Mutex<Connections>>,
    left: Arc<Notify>,
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
        drop(c);
        self.left.notify_one();
    }
}

/// The accept loop's state: the connections and what it tells the operator.
struct Acceptor {
    connections: Arc<Mutex<Connections>>,
    /// Told whenever a connection's task ends: the loop waits on it at the hard limit.
    left: Arc<Notify>,
    metrics: Arc<Metrics>,
    limits: ServeLimits,
    /// Whether the last connection was refused: logged when refusing starts and when it
    /// stops, not once per connection of a flood.
    refusing: bool,
}

impl Acceptor {
    fn lock(&self) -> std::sync::MutexGuard<'_, Connections> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn shed(&self, c: &mut Connections) -> bool {
        let shed = c.shed_oldest_idle();
        if shed {
            self.metrics
                .connections_shed
                .with_label_values(&[SHED_CLOSED_OLDEST])
                .inc();
        }
        shed
    }

    /// Makes room for a connection just accepted and registers it, or says it is refused.
    async fn admit(&mut self, shutdown: &CancellationToken) -> Option<(Registered, Open)> {
        let deadline = tokio::time::Instant::now() + ROOM_WAIT;
        loop {
            // Asked for before the count is read, so that a departure in between is not missed.
            let left = self.left.clone();
            let departure = left.notified();
            {
                let connections = self.connections.clone();
                let mut c = connections.lock().unwrap_or_else(PoisonError::into_inner);
                let leaving = c.live - c.open.len();
                let any_idle = c.open.values().any(|o| o.activity.idle());
                match admission(c.live, leaving, any_idle, &self.limits) {
                    Admission::Serve => return Some(self.register(&mut c, shutdown)),
                    Admission::ServeAndShedOldest => {
                        self.shed(&mut c);
                        return Some(self.register(&mut c, shutdown));
                    }
                    Admission::WaitForRoom => {
                        self.shed(&mut c);
                    }
                    Admission::Refuse => {
                        self.note_refusing(true, c.live);
                        return None;
                    }
                }
            }
            tokio::select! {
                () = departure => {}
                () = tokio::time::sleep_until(deadline) => {
                    let live = self.lock().live;
                    self.note_refusing(true, live);
                    return None;
                }
                () = shutdown.cancelled() => return None,
            }
        }
    }

    fn register(
        &mut self,
        c: &mut Connections,
        shutdown: &CancellationToken,
    ) -> (Registered, Open) {
        self.note_refusing(false, c.live);
        let id = c.next_id;
        c.next_id += 1;
        let open = Open {
            close: shutdown.child_token(),
            activity: Arc::new(Activity::default()),
        };
        c.open.insert(
            id,
            Open {
                close: open.close.clone(),
                activity: open.activity.clone(),
            },
        );
        c.live += 1;
        self.metrics.connections_open.set(c.live as i64);
        let registered = Registered {
            connections: self.connections.clone(),
            left: self.left.clone(),
            metrics: self.metrics.clone(),
            id,
        };
        (registered, open)
    }

    fn note_refusing(&mut self, refusing: bool, live: usize) {
        if refusing {
            self.metrics
                .connections_shed
                .with_label_values(&[SHED_REFUSED])
                .inc();
        }
        if refusing != self.refusing {
            self.refusing = refusing;
            match refusing {
                true => tracing::warn!(
                    live,
                    "refusing connections: every one is busy at the hard limit"
                ),
                false => tracing::info!(live, "accepting connections again"),
            }
        }
    }
}

/// Serves `app` on `listener` until `shutdown` is cancelled, then lets every open connection
/// finish what it is answering and waits for them.
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
    let mut acceptor = Acceptor {
        connections: Arc::new(Mutex::new(Connections::default())),
        left: Arc::new(Notify::new()),
        metrics,
        limits,
        refusing: false,
    };
    let tracker = TaskTracker::new();
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
        let Some((registered, open)) = acceptor.admit(&shutdown).await else {
            // Dropped unread.
            continue;
        };
        let fd = stream.as_raw_fd();
        let io = Watched {
            inner: stream,
            activity: open.activity.clone(),
        };
        let service = Tracked {
            inner: app.clone(),
            activity: open.activity.clone(),
        };
        // With upgrades, for the OpenEnv WebSocket sessions (`openenv/ws.rs`): an upgraded
        // connection leaves this loop's tracking and is bounded there.
        let conn = http
            .serve_connection(TokioIo::new(io), TowerToHyperService::new(service))
            .with_upgrades();
        tracker.spawn(async move {
            let _registered = registered;
            let mut conn = std::pin::pin!(conn);
            let served = tokio::select! {
                served = conn.as_mut() => served,
                () = open.close.cancelled() => {
                    open.activity.mark_closing();
                    // A request in flight or arriving is answered first (with
                    // `Connection: close`); an idle connection closes at once. The socket
                    // lives as long as `conn`, so `fd` is its own here.
                    tokio::select! {
                        served = conn.as_mut() => served,
                        () = open.activity.until_idle(fd) => {
                            conn.as_mut().graceful_shutdown();
                            conn.await
                        }
                    }
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
    fn admission_sheds_an_idle_one_past_the_cap_and_refuses_only_when_all_are_busy() {
        let limits = ServeLimits {
            max_connections: 8,
            ..ServeLimits::default()
        };
        assert_eq!(admission(7, 0, true, &limits), Admission::Serve);
        assert_eq!(
            admission(8, 0, true, &limits),
            Admission::ServeAndShedOldest
        );
        // At the hard limit: wait while something is leaving or can be closed.
        assert_eq!(admission(9, 1, false, &limits), Admission::WaitForRoom);
        assert_eq!(admission(9, 0, true, &limits), Admission::WaitForRoom);
        assert_eq!(admission(9, 0, false, &limits), Admission::Refuse);
    }

    #[test]
    fn only_idle_connections_are_shed_oldest_first() {
        let mut c = Connections::default();
        for id in 0..3 {
            c.open.insert(
                id,
                Open {
                    close: CancellationToken::new(),
                    activity: Arc::new(Activity::default()),
                },
            );
        }
        c.live = 3;
        // The oldest is busy: a request is arriving on it.
        c.open[&0].activity.mark_receiving_for_test();
        let oldest_idle = c.open[&1].close.clone();
        assert!(c.shed_oldest_idle());
        assert!(oldest_idle.is_cancelled(), "the oldest idle one is closed");
        assert!(!c.open[&0].close.is_cancelled(), "the busy one is kept");
        assert!(c.shed_oldest_idle());
        assert!(!c.shed_oldest_idle(), "only the busy one is left");
        assert_eq!(c.open.keys().copied().collect::<Vec<_>>(), vec![0]);
    }
}
