//! Cancelling in Redis: one task (`lua/cancel.lua`), or every open task of a batch
//! (`lua/cancel_batch.lua`) in chunks of distinct tasks, each chunk one atomic script call.

use super::{RedisBroker, corrupt, ms, parse_status, redis_err};
use crate::broker::Broker;
use crate::broker::{BrokerError, CancelOutcome};
use crate::policy::{CANCELLED_BY_REQUEST, batch_cancel_reason, distinct_tasks};
use crucible_shared::{BatchCancelCounts, BatchId, TaskId};

/// Distinct tasks of a batch cancelled per script call. A call costs a few dozen commands per
/// task, so a chunk holds Redis for a few milliseconds at most: a batch of any size never
/// blocks the other clients for long (the API caps a batch at 1,000 tasks, but the broker does
/// not rely on it).
const CANCEL_CHUNK: usize = 200;

impl RedisBroker {
    /// [`Broker::cancel`](crate::Broker::cancel).
    pub(super) async fn cancel_task(&self, id: &TaskId) -> Result<CancelOutcome, BrokerError> {
        let mut c = self.conn().await?;
        let reply: Vec<String> = self
            .scripts
            .cancel
            .arg(self.prefix())
            .arg(id.as_str())
            .arg(ms(self.cfg.result_ttl))
            .arg(CANCELLED_BY_REQUEST)
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        match reply.as_slice() {
            [what] if what == "not_found" => Ok(CancelOutcome::NotFound),
            [what, status] if what == "finished" => {
                Ok(CancelOutcome::AlreadyFinished(parse_status(status)?))
            }
            [what, status] if what == "cancelled" => {
                let was = parse_status(status)?;
                tracing::info!(task_id = %id, was = was.as_str(), "task cancelled");
                Ok(CancelOutcome::Cancelled { was })
            }
            _ => Err(corrupt(format!("unexpected cancel reply {reply:?}"))),
        }
    }

    /// [`Broker::cancel_batch`]: the batch's task list is read once (it never changes after
    /// submission), then its distinct tasks are cancelled [`CANCEL_CHUNK`] at a time.
    pub(super) async fn cancel_batch_tasks(
        &self,
        id: &BatchId,
    ) -> Result<Option<BatchCancelCounts>, BrokerError> {
        let Some(batch) = self.batch_status(id, false).await? else {
            return Ok(None);
        };
        let tasks = distinct_tasks(batch.task_ids);
        let mut c = self.conn().await?;
        let reason = batch_cancel_reason(id);
        let mut counts = BatchCancelCounts::default();
        for chunk in tasks.chunks(CANCEL_CHUNK) {
            let (queued, running, finished): (u64, u64, u64) = self
                .scripts
                .cancel_batch
                .arg(self.prefix())
                .arg(ms(self.cfg.result_ttl))
                .arg(&reason)
                .arg(chunk.iter().map(TaskId::as_str).collect::<Vec<_>>())
                .invoke_async(&mut c)
                .await
                .map_err(redis_err)?;
            counts.add(BatchCancelCounts {
                cancelled_queued: queued,
                cancelled_running: running,
                already_finished: finished,
            });
        }
        Ok(Some(counts))
    }
}
