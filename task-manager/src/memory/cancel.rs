//! Cancelling in process: one task, or every open task of a batch, each under one hold of the
//! lock. A batch's queued tasks leave their queues in one pass over each tenant's queues, so
//! cancelling thousands of them costs one walk of the queues, not one per task.

use super::{MemoryBroker, State};
use crate::broker::CancelOutcome;
use crate::policy::{CANCELLED_BY_REQUEST, batch_cancel_reason, distinct_tasks};
use crucible_shared::{BatchCancelCounts, BatchId, TaskId, TaskStatus, TenantId};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

impl State {
    /// Ends an open task as `cancelled` with `error`. A running one loses its lease entry but
    /// keeps its token, so that its worker learns of the cancellation at its next renewal; a
    /// queued one's queue entry is the caller's to remove.
    pub(super) fn cancel_open(&mut self, id: &TaskId, error: String, ttl: Duration) {
        if let Some(rec) = self.tasks.get_mut(id) {
            rec.error = Some(error);
        }
        self.leases.remove(id);
        self.transition(id, TaskStatus::Cancelled, ttl);
    }
}

impl MemoryBroker {
    /// [`Broker::cancel`](crate::Broker::cancel).
    pub(super) fn cancel_task(&self, id: &TaskId) -> CancelOutcome {
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(rec) = st.tasks.get(id) else {
            return CancelOutcome::NotFound;
        };
        let was = rec.status;
        if was.is_terminal() {
            return CancelOutcome::AlreadyFinished(was);
        }
        if was == TaskStatus::Queued {
            st.queues.remove(&rec.place(), id);
        }
        st.cancel_open(id, CANCELLED_BY_REQUEST.to_owned(), self.cfg.result_ttl);
        drop(guard);
        self.task_finished.notify_waiters();
        tracing::info!(task_id = %id, was = was.as_str(), "task cancelled");
        CancelOutcome::Cancelled { was }
    }

    /// [`Broker::cancel_batch`](crate::Broker::cancel_batch): the whole batch at once.
    pub(super) fn cancel_batch_tasks(&self, id: &BatchId) -> Option<BatchCancelCounts> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let tasks = distinct_tasks(st.batches.get(id)?.task_ids.iter().cloned());
        let reason = batch_cancel_reason(id);
        let mut counts = BatchCancelCounts::default();
        let mut dequeue: HashMap<TenantId, HashSet<TaskId>> = HashMap::new();
        for task in tasks {
            match st.tasks.get(&task).map(|rec| (rec.status, &rec.tenant)) {
                Some((TaskStatus::Queued, tenant)) => {
                    dequeue
                        .entry(tenant.clone())
                        .or_default()
                        .insert(task.clone());
                    counts.cancelled_queued += 1;
                }
                Some((TaskStatus::Running, _)) => counts.cancelled_running += 1,
                // Finished, or finished so long ago that its record expired.
                _ => {
                    counts.already_finished += 1;
                    continue;
                }
            }
            st.cancel_open(&task, reason.clone(), self.cfg.result_ttl);
        }
        for (tenant, ids) in &dequeue {
            st.queues.remove_all(tenant, ids);
        }
        drop(guard);
        if counts.cancelled_queued + counts.cancelled_running > 0 {
            self.task_finished.notify_waiters();
        }
        Some(counts)
    }
}
