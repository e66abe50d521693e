//! Cancelling: the answers of `DELETE /tasks/{id}` and `DELETE /batches/{id}`. Here rather than
//! in the API so that the clients (which depend on this crate alone) decode the same types.

use crate::ids::{BatchId, TaskId};
use crate::task::TaskStatus;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Answer to `DELETE /tasks/{id}` when the task was cancelled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CancelResponse {
    /// The cancelled task.
    pub task_id: TaskId,
    /// Its status now: always `cancelled`.
    pub status: TaskStatus,
    /// The status the task had when it was cancelled.
    pub was: TaskStatus,
}

/// What a broker's batch cancel did, per distinct task of the batch (the fields of
/// [`BatchCancelResponse`], which says what each means).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCancelCounts {
    /// Queued tasks now cancelled.
    pub cancelled_queued: u64,
    /// Running tasks now cancelled.
    pub cancelled_running: u64,
    /// Tasks already finished (or expired), left as they were.
    pub already_finished: u64,
}

impl BatchCancelCounts {
    /// Every distinct task the cancel looked at.
    pub fn total(&self) -> u64 {
        self.cancelled_queued + self.cancelled_running + self.already_finished
    }

    /// Adds the counts of another part (a chunk) of the same batch.
    pub fn add(&mut self, other: BatchCancelCounts) {
        self.cancelled_queued += other.cancelled_queued;
        self.cancelled_running += other.cancelled_running;
        self.already_finished += other.already_finished;
    }
}

/// `DELETE /batches/{id}`: the batch and what became of each distinct task of it (identical
/// requests in one batch share a task, which is counted once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BatchCancelResponse {
    /// The batch.
    pub batch_id: BatchId,
    /// Tasks that were waiting in the queue: they will never run.
    pub cancelled_queued: u64,
    /// Tasks a worker was running: its child is killed at the worker's next lease renewal.
    pub cancelled_running: u64,
    /// Tasks that had already finished (`done`, `failed` or `cancelled`, or expired since):
    /// left as they were, results included.
    pub already_finished: u64,
}

impl BatchCancelResponse {
    /// The answer for `batch_id` with the broker's counts.
    pub fn new(batch_id: BatchId, counts: BatchCancelCounts) -> Self {
        Self {
            batch_id,
            cancelled_queued: counts.cancelled_queued,
            cancelled_running: counts.cancelled_running,
            already_finished: counts.already_finished,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_carries_the_counts() {
        let counts = BatchCancelCounts {
            cancelled_queued: 2,
            cancelled_running: 1,
            already_finished: 4,
        };
        let answer = BatchCancelResponse::new(BatchId::from("b_1"), counts);
        let json = serde_json::to_value(&answer).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"batch_id": "b_1", "cancelled_queued": 2,
                               "cancelled_running": 1, "already_finished": 4})
        );
        assert_eq!(
            serde_json::from_value::<BatchCancelResponse>(json).unwrap(),
            answer
        );
        assert_eq!(counts.total(), 7);
    }
}
