//! Queue, batch and health views.

use crate::ids::{BatchId, TaskId};
use crate::placement::ClassQueue;
use crate::task::TaskView;
use crate::tenant::TenantCounts;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Task counts by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StatusCounts {
    /// Waiting for a worker.
    pub queued: u64,
    /// Leased by a worker now.
    pub running: u64,
    /// Finished with a verdict, whatever it is.
    pub done: u64,
    /// Given up on without a verdict: an outage, not a kernel.
    pub failed: u64,
    /// Cancelled before they finished.
    pub cancelled: u64,
}

impl StatusCounts {
    /// Every task counted, whatever its status.
    pub fn total(&self) -> u64 {
        self.queued + self.running + self.done + self.failed + self.cancelled
    }

    /// Tasks in a terminal status: these will not change again.
    pub fn finished(&self) -> u64 {
        self.done + self.failed + self.cancelled
    }
}

/// `GET /queue/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QueueStatus {
    /// Queued tasks of priority `high`.
    pub queued_high: u64,
    /// Queued tasks of priority `normal`.
    pub queued_normal: u64,
    /// Queued tasks of priority `low`.
    pub queued_low: u64,
    /// Tasks holding a lease right now.
    pub running: u64,
    /// Submissions beyond this many queued tasks are refused with 429.
    pub queue_cap: u64,
    /// Tasks submitted over the broker's lifetime (every counter `_total` is such a lifetime
    /// counter).
    pub submitted_total: u64,
    /// Tasks that ended `done`.
    pub done_total: u64,
    /// Tasks that ended `failed`.
    pub failed_total: u64,
    /// Tasks that ended `cancelled`.
    pub cancelled_total: u64,
    /// Attempts that ended without a verdict (lease expired, worker gave the task back) and
    /// sent the task back to its queue; a high rate means workers are dying or unhealthy.
    pub requeued_total: u64,
    /// Submissions answered from the result cache.
    #[serde(default)]
    pub cache_hits_total: u64,
    /// Submissions that were looked up, found nothing cached or in flight, and were queued.
    #[serde(default)]
    pub cache_misses_total: u64,
    /// Submissions that joined an identical queued or running task.
    #[serde(default)]
    pub coalesced_total: u64,
    /// Reference timings found in the reference cache by a worker (the reference was not
    /// timed again).
    #[serde(default)]
    pub ref_cache_hits_total: u64,
    /// Reference cache lookups that found nothing, so the worker timed the reference.
    #[serde(default)]
    pub ref_cache_misses_total: u64,
    /// Queued tasks and live workers per device class (a row without `device_class` for the
    /// tasks any worker may run); `unservable` marks a class with queued tasks and no live
    /// worker. Absent from brokers of before classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<ClassQueue>>,
    /// Open tasks per tenant: every tenant for the admin, the caller's own for a tenant.
    /// Filled in by the API (the broker's view has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<TenantCounts>>,
}

impl QueueStatus {
    /// Queued tasks of every priority.
    pub fn queued(&self) -> u64 {
        self.queued_high + self.queued_normal + self.queued_low
    }
}

/// `GET /batches/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchStatus {
    /// The id `POST /evaluate/batch` or `POST /rollouts` returned.
    pub batch_id: BatchId,
    /// Tasks in the batch.
    pub total: u64,
    /// The batch's tasks by status: it is finished when `counts.finished()` reaches `total`.
    pub counts: StatusCounts,
    /// Every task of the batch, in submission order.
    pub task_ids: Vec<TaskId>,
    /// Present with `?include=tasks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<TaskView>>,
}

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HealthStatus {
    /// `ok`, `degraded` (broker up, no live worker) or `unavailable` (broker down).
    pub status: String,
    /// The broker's kind: `redis`, or `memory` for a single-process deployment.
    pub broker: String,
    /// Whether the broker answered a ping within two seconds.
    pub broker_ok: bool,
    /// Workers that can take a task now (`idle` or `busy`); starting and stopping ones do
    /// not count.
    pub workers_alive: u64,
    /// Workers whose device failed a health check (`unhealthy`).
    pub workers_unhealthy: u64,
    /// The API server's version.
    pub version: String,
}
