//! The transitions of a leased task: renewing, completing and releasing it (each fenced by its
//! lease token, in `lua/renew.lua`, `lua/complete.lua`, `lua/release.lua`), and the reaper's
//! requeue of expired leases (`lua/reap.lua`, in chunks).

use super::{REAP_CHUNK, RedisBroker, corrupt, ms, redis_err};
use crate::activity::Outcome;
use crate::broker::{AckOutcome, BrokerError, Lease, LeaseState, ReapReport};
use crucible_shared::{EvalResult, wire_name};

impl RedisBroker {
    pub(super) async fn renew_lease(&self, lease: &Lease) -> Result<LeaseState, BrokerError> {
        let mut c = self.conn().await?;
        let reply: String = self
            .scripts
            .renew
            .arg(self.prefix())
            .arg(lease.task_id.as_str())
            .arg(lease.token.as_str())
            .arg(ms(self.cfg.lease_ttl))
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        match reply.as_str() {
            "held" => Ok(LeaseState::Held),
            "cancelled" => Ok(LeaseState::Cancelled),
            "lost" => Ok(LeaseState::Lost),
            other => Err(corrupt(format!("unexpected renew reply {other:?}"))),
        }
    }

    pub(super) async fn complete_lease(
        &self,
        lease: &Lease,
        result: EvalResult,
    ) -> Result<AckOutcome, BrokerError> {
        let json = serde_json::to_string(&result).map_err(|e| corrupt(format!("result: {e}")))?;
        let outcome = Outcome::of(&result);
        let mut c = self.conn().await?;
        let reply: String = self
            .scripts
            .complete
            .arg(self.prefix())
            .arg(lease.task_id.as_str())
            .arg(lease.token.as_str())
            .arg(json)
            .arg(ms(self.cfg.result_ttl))
            .arg(wire_name(&outcome.verdict))
            .arg(
                outcome
                    .error_code
                    .map(|c| wire_name(&c))
                    .unwrap_or_default(),
            )
            .arg(outcome.message.unwrap_or_default())
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        match reply.as_str() {
            "accepted" => {
                self.await_replicas(&mut c, "complete").await?;
                Ok(AckOutcome::Accepted)
            }
            "stale" => {
                tracing::info!(task_id = %lease.task_id, worker_id = %lease.worker_id, "stale result ignored");
                Ok(AckOutcome::Stale)
            }
            other => Err(corrupt(format!("unexpected complete reply {other:?}"))),
        }
    }

    pub(super) async fn release_lease(
        &self,
        lease: &Lease,
        reason: &str,
    ) -> Result<AckOutcome, BrokerError> {
        let mut c = self.conn().await?;
        let reply: String = self
            .scripts
            .release
            .arg(self.prefix())
            .arg(lease.task_id.as_str())
            .arg(lease.token.as_str())
            .arg(reason)
            .arg(self.cfg.max_attempts)
            .arg(ms(self.cfg.result_ttl))
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        match reply.as_str() {
            "requeued" | "failed" => {
                tracing::info!(task_id = %lease.task_id, worker_id = %lease.worker_id, outcome = reply.as_str(), reason, "task released");
                Ok(AckOutcome::Accepted)
            }
            "stale" => Ok(AckOutcome::Stale),
            other => Err(corrupt(format!("unexpected release reply {other:?}"))),
        }
    }

    pub(super) async fn reap_leases(&self) -> Result<ReapReport, BrokerError> {
        let mut report = ReapReport::default();
        let mut c = self.conn().await?;
        loop {
            let (requeued, failed, examined): (u64, u64, u64) = self
                .scripts
                .reap
                .arg(self.prefix())
                .arg(self.cfg.max_attempts)
                .arg(ms(self.cfg.result_ttl))
                .arg(REAP_CHUNK)
                .invoke_async(&mut c)
                .await
                .map_err(redis_err)?;
            report.requeued += requeued;
            report.failed += failed;
            if examined < REAP_CHUNK {
                break;
            }
        }
        Ok(report)
    }
}
