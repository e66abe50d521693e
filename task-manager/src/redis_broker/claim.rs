//! Claiming on Redis: one claim script call, and the blocking wait on the class's wake list
//! between attempts (kept connections, reconnect once when a kept one died).

use super::{RedisBroker, corrupt, ms, redis_err};
use crate::broker::{BrokerError, Lease};
use crate::policy::PASS_SCALE;
use crate::redis_conn::CONNECT_TIMEOUT;
use crucible_shared::{DeviceClass, LeaseToken, TaskId, WorkerId};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use std::sync::PoisonError;
use std::time::Duration;
use tokio::time::Instant;

/// Shortest BLPOP worth issuing; a shorter remaining wait ends the claim instead.
const MIN_BLOCK: Duration = Duration::from_millis(10);
/// Slack over the BLPOP timeout before the client gives up on the reply.
const BLOCK_MARGIN: Duration = Duration::from_secs(2);
/// Connections kept for blocking waits; more waiters than this open their own.
const MAX_IDLE_BLOCKING: usize = 16;

impl RedisBroker {
    /// `claim`: the next task for `worker` of `class`, waiting up to `wait` for one.
    pub(super) async fn claim_within(
        &self,
        worker: &WorkerId,
        class: &DeviceClass,
        wait: Duration,
    ) -> Result<Option<Lease>, BrokerError> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(lease) = self.try_claim(worker, class).await? {
                return Ok(Some(lease));
            }
            // An empty claim deletes the class's wake list, so a token arriving from here on
            // is fresh.
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining < MIN_BLOCK {
                return Ok(None);
            }
            self.wait_for_wake(class, remaining).await?;
        }
    }

    async fn try_claim(
        &self,
        worker: &WorkerId,
        class: &DeviceClass,
    ) -> Result<Option<Lease>, BrokerError> {
        let token = LeaseToken::random();
        let mut c = self.conn().await?;
        let reply: Option<(String, String, u32, u64)> = self
            .scripts
            .claim
            .arg(self.prefix())
            .arg(worker.as_str())
            .arg(token.as_str())
            .arg(ms(self.cfg.lease_ttl))
            .arg(&self.claim_cycle)
            .arg(PASS_SCALE)
            .arg(class.as_str())
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        let Some((id, spec, attempt, queued_ms)) = reply else {
            return Ok(None);
        };
        let task_id = TaskId(id);
        // The task is leased already; a spec that cannot be decoded is left to the reaper,
        // which fails it once its attempts are used.
        let spec = serde_json::from_str(&spec)
            .map_err(|e| corrupt(format!("spec of task {task_id}: {e}")))?;
        tracing::debug!(task_id = %task_id, worker_id = %worker, class = %class, attempt, "task claimed");
        Ok(Some(Lease {
            task_id,
            token,
            worker_id: worker.clone(),
            spec,
            attempt,
            queued_for: Duration::from_millis(queued_ms),
        }))
    }

    /// Blocks until a submit pushes a wake token for `class` or `timeout` passes.
    async fn wait_for_wake(
        &self,
        class: &DeviceClass,
        timeout: Duration,
    ) -> Result<(), BrokerError> {
        // A kept connection made to a former primary (a Sentinel failover) would wait on a
        // list nobody pushes to any more: it is dropped.
        let epoch = self.nodes.epoch();
        let idle = {
            let mut idle = self
                .idle_blocking
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            idle.retain(|(_, e)| *e == epoch);
            idle.pop()
        };
        let reused = idle.is_some();
        let (mut conn, made_in) = match idle {
            Some(c) => c,
            None => self.blocking_conn().await?,
        };
        let result = self.blpop_wake(&mut conn, class, timeout).await;
        match result {
            Ok(()) => {
                let mut idle = self
                    .idle_blocking
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if idle.len() < MAX_IDLE_BLOCKING {
                    idle.push((conn, made_in));
                }
                Ok(())
            }
            // A kept connection may have died while idle (e.g. Redis restarted); one fresh
            // attempt tells that apart from Redis being down.
            Err(e) if reused => {
                tracing::debug!(error = %e, "idle blocking connection failed, reconnecting");
                let (mut fresh, _) = self.blocking_conn().await?;
                self.blpop_wake(&mut fresh, class, timeout).await
            }
            Err(e) => Err(e),
        }
    }

    /// A connection of its own for a blocking wait, and the primary's epoch it was made in.
    async fn blocking_conn(&self) -> Result<(MultiplexedConnection, u64), BrokerError> {
        let cfg = AsyncConnectionConfig::new().set_connection_timeout(Some(CONNECT_TIMEOUT));
        self.nodes
            .connect(&cfg, CONNECT_TIMEOUT)
            .await
            .map_err(redis_err)
    }

    async fn blpop_wake(
        &self,
        conn: &mut MultiplexedConnection,
        class: &DeviceClass,
        timeout: Duration,
    ) -> Result<(), BrokerError> {
        conn.set_response_timeout(timeout + BLOCK_MARGIN);
        let _token: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(self.keys().wake(class))
            .arg(format!("{:.3}", timeout.as_secs_f64()))
            .query_async(conn)
            .await
            .map_err(redis_err)?;
        Ok(())
    }
}
