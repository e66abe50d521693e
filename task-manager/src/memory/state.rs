//! The memory broker's state transitions: sweeping expired records, moving a task between
//! statuses (and its batch's counts), coalescing, requeue-or-fail. Called under the lock.

use super::activity::Finished;
use super::*;
use crate::activity::Outcome;

/// What happened to a running task that ended without a verdict.
pub(super) enum Retry {
    Requeued,
    Failed,
}

impl State {
    /// Drops terminal records whose result_ttl has passed.
    pub(super) fn sweep(&mut self, now: Instant) {
        while self.expiries.front().is_some_and(|(at, _)| *at <= now) {
            let Some((_, what)) = self.expiries.pop_front() else {
                break;
            };
            match what {
                Expiring::Task(id) => {
                    if let Some(rec) = self.tasks.remove(&id)
                        && let Some(key) = rec.idempotency_key
                    {
                        let key = (rec.tenant, key);
                        if self.idempotency.get(&key) == Some(&id) {
                            self.idempotency.remove(&key);
                        }
                    }
                }
                Expiring::Batch(id) => {
                    self.batches.remove(&id);
                }
                Expiring::Cached(key) => {
                    if self
                        .result_cache
                        .get(&key)
                        .is_some_and(|(_, until)| *until <= now)
                    {
                        self.result_cache.remove(&key);
                    }
                }
                Expiring::Idempotency(key, id) => {
                    if self.idempotency.get(&key) == Some(&id) {
                        self.idempotency.remove(&key);
                    }
                }
            }
        }
    }

    /// Moves a task to `to`, keeping batch counters, lifetime stats, recent activity and
    /// expiries in step.
    pub(super) fn transition(&mut self, id: &TaskId, to: TaskStatus, ttl: Duration) {
        let now = Instant::now();
        let Some(rec) = self.tasks.get_mut(id) else {
            return;
        };
        let from = rec.status;
        rec.status = to;
        let finished = to.is_terminal();
        if finished && !from.is_terminal() {
            self.open_bytes = self.open_bytes.saturating_sub(rec.spec_bytes);
        }
        if finished {
            let finished_at = Utc::now();
            rec.finished_at = Some(finished_at);
            self.activity.record(
                finished_at,
                Finished {
                    id,
                    tenant: &rec.tenant,
                    status: to,
                    outcome: (to == TaskStatus::Done)
                        .then(|| rec.result.as_ref().map(Outcome::of))
                        .flatten(),
                    error: rec.error.as_deref(),
                },
            );
            self.expiries
                .push_back((now + ttl, Expiring::Task(id.clone())));
            match to {
                TaskStatus::Done => self.stats.done += 1,
                TaskStatus::Failed => self.stats.failed += 1,
                TaskStatus::Cancelled => self.stats.cancelled += 1,
                TaskStatus::Queued | TaskStatus::Running => {}
            }
            let flight = rec.flight_key();
            if self.in_flight.get(&flight) == Some(id) {
                self.in_flight.remove(&flight);
            }
        }
        for (i, batch_id) in rec.counted_in.iter().enumerate() {
            let Some(batch) = self.batches.get_mut(batch_id) else {
                continue;
            };
            let from_count = count_mut(&mut batch.counts, from);
            *from_count = from_count.saturating_sub(1);
            *count_mut(&mut batch.counts, to) += 1;
            // A batch that counts the task more than once logs it once.
            if finished && !rec.counted_in[..i].contains(batch_id) {
                batch.finished.push(id.clone());
            }
            if finished && batch.counts.queued + batch.counts.running == 0 {
                self.expiries
                    .push_back((now + ttl, Expiring::Batch(batch_id.clone())));
            }
        }
    }

    /// Another submission reuses task `id`: an open one moves `batch_id`'s counters from now
    /// on as well. Returns its status.
    pub(super) fn join(
        &mut self,
        id: &TaskId,
        batch_id: Option<&BatchId>,
    ) -> Result<TaskStatus, BrokerError> {
        let rec = self
            .tasks
            .get_mut(id)
            .ok_or_else(|| BrokerError::Corrupt(format!("task {id} vanished")))?;
        if let Some(b) = batch_id
            && !rec.status.is_terminal()
        {
            rec.counted_in.push(b.clone());
        }
        Ok(rec.status)
    }

    /// The open task evaluating `key` for its tenant, if any.
    pub(super) fn in_flight(&self, key: &TenantKey) -> Option<&TaskId> {
        self.in_flight
            .get(key)
            .filter(|id| self.tasks.get(*id).is_some_and(|t| !t.status.is_terminal()))
    }

    /// Ends a running attempt without a verdict: back to the head of its queue (it has waited
    /// longest), or failed with `reason` once every attempt is used.
    pub(super) fn requeue_or_fail(
        &mut self,
        id: &TaskId,
        reason: impl FnOnce(&TaskRec) -> String,
        cfg: &BrokerConfig,
    ) -> Retry {
        self.leases.remove(id);
        let Some(rec) = self.tasks.get_mut(id) else {
            return Retry::Failed;
        };
        if rec.attempts >= cfg.max_attempts {
            rec.error = Some(reason(rec));
            self.transition(id, TaskStatus::Failed, cfg.result_ttl);
            return Retry::Failed;
        }
        rec.worker_id = None;
        rec.token = None;
        rec.started_at = None;
        let (place, order) = (rec.place(), rec.queue_order);
        self.transition(id, TaskStatus::Queued, cfg.result_ttl);
        // Back into its own class's queue, ahead of what was queued after it.
        self.queues.push_front(&place, order, id.clone());
        self.stats.requeued += 1;
        Retry::Requeued
    }

    /// The task running under `lease`, if the lease is still current.
    pub(super) fn current_mut(&mut self, lease: &Lease) -> Option<&mut TaskRec> {
        self.tasks.get_mut(&lease.task_id).filter(|rec| {
            rec.status == TaskStatus::Running && rec.token.as_ref() == Some(&lease.token)
        })
    }
}
