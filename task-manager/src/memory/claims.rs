//! Claims on the memory broker (the next task a worker of a class may take, in the fair share's
//! order), the queue view with its per-class rows, and the worker registry as it is read.

use super::{MemoryBroker, State};
use crate::broker::Lease;
use crate::kv::{KvCounts, KvNamespace};
use crate::policy::worker_retention;
use chrono::Utc;
use crucible_shared::{
    BrokerConfig, DeviceClass, LeaseToken, LiveClasses, QueueStatus, TaskStatus, WorkerId,
    WorkerInfo, WorkerState,
};
use std::time::{Duration, Instant};

impl MemoryBroker {
    /// `claim`: the next task for `worker` of `class`, waiting up to `wait` for one.
    pub(super) async fn claim_within(
        &self,
        worker: &WorkerId,
        class: &DeviceClass,
        wait: Duration,
    ) -> Option<Lease> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before looking at the queues, so a submit in between still wakes us.
            let queued = self.task_queued.notified();
            tokio::pin!(queued);
            queued.as_mut().enable();
            if let Some(lease) = self.try_claim(worker, class) {
                return Some(lease);
            }
            if tokio::time::timeout_at(deadline, queued).await.is_err() {
                return self.try_claim(worker, class);
            }
        }
    }

    fn try_claim(&self, worker: &WorkerId, class: &DeviceClass) -> Option<Lease> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let tenants = &st.tenants;
        let (_, id) = st.queues.pop(class, |t| tenants.weight(t))?;
        let rec = st.tasks.get_mut(&id)?;
        let token = LeaseToken::random();
        rec.attempts += 1;
        rec.worker_id = Some(worker.clone());
        rec.token = Some(token.clone());
        let now = Utc::now();
        rec.started_at = Some(now);
        let lease = Lease {
            task_id: id.clone(),
            token,
            worker_id: worker.clone(),
            spec: rec.spec.clone(),
            attempt: rec.attempts,
            queued_for: (now - rec.submitted_at).to_std().unwrap_or_default(),
        };
        st.leases
            .insert(id.clone(), Instant::now() + self.cfg.lease_ttl);
        st.transition(&id, TaskStatus::Running, self.cfg.result_ttl);
        tracing::debug!(task_id = %id, worker_id = %worker, class = %class, attempt = lease.attempt, "task claimed");
        Some(lease)
    }

    /// `queue_status`: depths by priority and class, leases and lifetime counters.
    pub(super) fn queue_view(&self) -> QueueStatus {
        let mut st = self.lock();
        let workers = st.workers_now(&self.cfg);
        let [queued_high, queued_normal, queued_low] = st.queues.queued_by_priority();
        let KvCounts {
            hits: ref_hits,
            misses: ref_misses,
        } = st.stats.kv[KvNamespace::Ref.index()];
        QueueStatus {
            queued_high,
            queued_normal,
            queued_low,
            running: st.leases.len() as u64,
            queue_cap: self.cfg.queue_cap,
            submitted_total: st.stats.submitted,
            done_total: st.stats.done,
            failed_total: st.stats.failed,
            cancelled_total: st.stats.cancelled,
            requeued_total: st.stats.requeued,
            cache_hits_total: st.stats.cache_hits,
            cache_misses_total: st.stats.cache_misses,
            coalesced_total: st.stats.coalesced,
            ref_cache_hits_total: ref_hits,
            ref_cache_misses_total: ref_misses,
            classes: Some(LiveClasses::of(&workers).queues(&st.queues.queued_by_class())),
            tenants: None,
        }
    }
}

impl State {
    /// Every registered worker, `lost` once silent past the liveness window; those silent
    /// past the retention are forgotten.
    pub(super) fn workers_now(&mut self, cfg: &BrokerConfig) -> Vec<WorkerInfo> {
        let liveness = cfg.worker_liveness;
        let retention = worker_retention(liveness);
        self.workers
            .retain(|_, (_, seen)| seen.elapsed() <= retention);
        let mut out: Vec<WorkerInfo> = self
            .workers
            .values()
            .map(|(info, seen)| {
                let mut info = info.clone();
                if seen.elapsed() > liveness {
                    info.state = WorkerState::Lost;
                }
                info
            })
            .collect();
        out.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        out
    }
}
