//! `WAIT` after a terminal transition (`CRUCIBLE_REDIS_WAIT_REPLICAS`): the broker answers a
//! submission or a verdict only once that many replicas have the write, or the timeout has
//! passed. It narrows, without closing, what a failover with asynchronous replication can lose:
//! a write acknowledged by the old primary and not yet copied (docs/REDIS.md). `WAIT` counts
//! the writes of the connection it is sent on, so it follows the script on the same one.

use super::{RedisBroker, redis_err};
use crate::broker::BrokerError;
use crate::redis_conn::Connection;

impl RedisBroker {
    /// After the write of `transition` on `c`: `WAIT` for the configured replicas, when any.
    /// Fewer replicas within the timeout is logged, not an error: the transition stands on the
    /// primary, and undoing it would lose more than it saves.
    pub(super) async fn await_replicas(
        &self,
        c: &mut Connection,
        transition: &'static str,
    ) -> Result<(), BrokerError> {
        let wanted = self.cfg.redis_wait_replicas;
        if wanted == 0 {
            return Ok(());
        }
        let timeout_ms = super::ms(self.cfg.redis_wait_timeout);
        let acked: u64 = redis::cmd("WAIT")
            .arg(wanted)
            .arg(timeout_ms)
            .query_async(c)
            .await
            .map_err(redis_err)?;
        if acked < u64::from(wanted) {
            tracing::warn!(
                transition,
                acked,
                wanted,
                timeout_ms,
                "fewer redis replicas than CRUCIBLE_REDIS_WAIT_REPLICAS have the write; a failover now could lose it"
            );
        }
        Ok(())
    }
}
