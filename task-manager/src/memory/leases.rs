//! The transitions of a leased task in process: renewing, completing and releasing it (each
//! fenced by its lease token), and the reaper's requeue of expired leases; the Redis broker's
//! `lua/renew.lua`, `complete.lua`, `release.lua` and `reap.lua`, kept equal by the contract
//! suite.

use super::state::Retry;
use super::{Expiring, MemoryBroker};
use crate::broker::{AckOutcome, BrokerError, Lease, LeaseState, ReapReport};
use crucible_shared::{EvalResult, TaskId, TaskStatus};
use std::time::Instant;

impl MemoryBroker {
    pub(super) async fn renew_lease(&self, lease: &Lease) -> Result<LeaseState, BrokerError> {
        let mut st = self.lock();
        let Some(rec) = st.tasks.get(&lease.task_id) else {
            return Ok(LeaseState::Lost);
        };
        if rec.status == TaskStatus::Cancelled {
            return Ok(LeaseState::Cancelled);
        }
        if st.current_mut(lease).is_none() {
            return Ok(LeaseState::Lost);
        }
        st.leases
            .insert(lease.task_id.clone(), Instant::now() + self.cfg.lease_ttl);
        Ok(LeaseState::Held)
    }

    pub(super) async fn complete_lease(
        &self,
        lease: &Lease,
        result: EvalResult,
    ) -> Result<AckOutcome, BrokerError> {
        let mut st = self.lock();
        let Some(rec) = st.current_mut(lease) else {
            tracing::info!(task_id = %lease.task_id, worker_id = %lease.worker_id, "stale result ignored");
            return Ok(AckOutcome::Stale);
        };
        let cache_key = rec.result_key();
        rec.result = Some(result.clone());
        st.leases.remove(&lease.task_id);
        st.transition(&lease.task_id, TaskStatus::Done, self.cfg.result_ttl);
        let until = Instant::now() + self.cfg.result_ttl;
        st.result_cache.insert(cache_key.clone(), (result, until));
        st.expiries.push_back((until, Expiring::Cached(cache_key)));
        drop(st);
        self.task_finished.notify_waiters();
        Ok(AckOutcome::Accepted)
    }

    pub(super) async fn release_lease(
        &self,
        lease: &Lease,
        reason: &str,
    ) -> Result<AckOutcome, BrokerError> {
        let mut st = self.lock();
        if st.current_mut(lease).is_none() {
            return Ok(AckOutcome::Stale);
        }
        let outcome = st.requeue_or_fail(&lease.task_id, |_| reason.to_owned(), &self.cfg);
        drop(st);
        let outcome = match outcome {
            Retry::Requeued => {
                self.task_queued.notify_waiters();
                "requeued"
            }
            Retry::Failed => {
                self.task_finished.notify_waiters();
                "failed"
            }
        };
        tracing::info!(task_id = %lease.task_id, worker_id = %lease.worker_id, outcome, reason, "task released");
        Ok(AckOutcome::Accepted)
    }

    pub(super) async fn reap_leases(&self) -> Result<ReapReport, BrokerError> {
        let mut st = self.lock();
        let now = Instant::now();
        let expired: Vec<TaskId> = st
            .leases
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let mut report = ReapReport::default();
        let max = self.cfg.max_attempts;
        for id in expired {
            let outcome = st.requeue_or_fail(
                &id,
                |rec| {
                    let worker = rec.worker_id.as_ref().map_or("?", |w| w.as_str());
                    format!(
                        "lease expired on attempt {} of {max} (worker {worker} stopped renewing)",
                        rec.attempts
                    )
                },
                &self.cfg,
            );
            match outcome {
                Retry::Requeued => report.requeued += 1,
                Retry::Failed => report.failed += 1,
            }
        }
        drop(st);
        if report.requeued > 0 {
            self.task_queued.notify_waiters();
        }
        if report.failed > 0 {
            self.task_finished.notify_waiters();
        }
        Ok(report)
    }
}
