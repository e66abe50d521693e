//! Where a process's connections go ([`Nodes`]: the one server of a `redis://` URL, or the
//! primary the Sentinels name) and the pool that keeps them ([`Pool`]). A pooled connection is
//! checked (`PING`) each time it is taken, and dropped when the primary has changed since it was
//! made: after a failover, every connection taken is one to the new primary. The broker's Lua
//! scripts need no reloading step: `EVALSHA` answered `NOSCRIPT` by a server that never saw a
//! script makes redis-rs send the script and retry (`Script::invoke_async`).

use super::sentinel::Primary;
use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, RedisError, RedisFuture, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Where connections are made. One per process, behind an `Arc`: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Nodes {
    /// The one server of a `redis://` or `rediss://` URL.
    Direct(redis::Client),
    /// The primary that the Sentinels of a `redis+sentinel://` URL name at the time.
    Sentinel(Primary),
}

impl Nodes {
    /// A connection to the server (the primary of the moment) with `cfg`'s timeouts, and the
    /// primary's epoch it belongs to (always 0 for a single server).
    pub(crate) async fn connect(
        &self,
        cfg: &AsyncConnectionConfig,
        timeout: Duration,
    ) -> Result<(MultiplexedConnection, u64), RedisError> {
        match self {
            Self::Direct(client) => Ok((
                client
                    .get_multiplexed_async_connection_with_config(cfg)
                    .await?,
                0,
            )),
            Self::Sentinel(primary) => {
                let (client, epoch) = primary.client(timeout).await?;
                let conn = client
                    .get_multiplexed_async_connection_with_config(cfg)
                    .await?;
                Ok((conn, epoch))
            }
        }
    }

    /// The current epoch: a connection of an earlier one was made to a former primary.
    pub(crate) fn epoch(&self) -> u64 {
        match self {
            Self::Direct(_) => 0,
            Self::Sentinel(primary) => primary.epoch(),
        }
    }
}

/// A connection and the primary's epoch it was made in.
pub(crate) struct Node {
    conn: MultiplexedConnection,
    epoch: u64,
}

/// Makes and checks the pool's connections.
pub(crate) struct Manager {
    nodes: Arc<Nodes>,
    cfg: AsyncConnectionConfig,
    connect_timeout: Duration,
    /// Each check's `PING` carries a fresh number, so a reply meant for another is noticed.
    pings: AtomicUsize,
}

impl Manager {
    pub(crate) fn new(
        nodes: Arc<Nodes>,
        cfg: AsyncConnectionConfig,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            nodes,
            cfg,
            connect_timeout,
            pings: AtomicUsize::new(0),
        }
    }
}

impl managed::Manager for Manager {
    type Type = Node;
    type Error = RedisError;

    async fn create(&self) -> Result<Node, RedisError> {
        let (conn, epoch) = self.nodes.connect(&self.cfg, self.connect_timeout).await?;
        Ok(Node { conn, epoch })
    }

    async fn recycle(&self, node: &mut Node, _: &Metrics) -> RecycleResult<RedisError> {
        if node.epoch != self.nodes.epoch() {
            return Err(RecycleError::message("made to a former primary"));
        }
        let n = self.pings.fetch_add(1, Ordering::Relaxed).to_string();
        let reply: String = redis::cmd("PING")
            .arg(&n)
            .query_async(&mut node.conn)
            .await?;
        if reply == n {
            Ok(())
        } else {
            Err(RecycleError::message("PING answered with another reply"))
        }
    }
}

/// The pool of a broker's ordinary (non-blocking) commands.
pub(crate) type Pool = managed::Pool<Manager>;

/// A connection taken from the [`Pool`]; it goes back when dropped.
pub(crate) struct Connection(managed::Object<Manager>);

impl From<managed::Object<Manager>> for Connection {
    fn from(o: managed::Object<Manager>) -> Self {
        Self(o)
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, Value> {
        self.0.conn.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.conn.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.conn.get_db()
    }
}
