//! Queue, batch and health views.

use crate::ids::{BatchId, TaskId};
use crate::task::TaskView;
use crate::tenant::TenantCounts;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Task counts by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StatusCounts {
    pub queued: u64,
    pub running: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
}

impl StatusCounts {
    pub fn total(&self) -> u64 {
        self.queued + self.running + self.done + self.failed + self.cancelled
    }

    pub fn finished(&self) -> u64 {
        self.done + self.failed + self.cancelled
    }
}

/// `GET /queue/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QueueStatus {
    /// Queued tasks per priority.
    pub queued_high: u64,
    pub queued_normal: u64,
    pub queued_low: u64,
    /// Tasks holding a lease right now.
    pub running: u64,
    /// Submissions beyond this many queued tasks are refused with 429.
    pub queue_cap: u64,
    /// Lifetime counters of this broker.
    pub submitted_total: u64,
    pub done_total: u64,
    pub failed_total: u64,
    pub cancelled_total: u64,
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
    /// Open tasks per tenant: every tenant for the admin, the caller's own for a tenant.
    /// Filled in by the API (the broker's view has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<TenantCounts>>,
}

impl QueueStatus {
    pub fn queued(&self) -> u64 {
        self.queued_high + self.queued_normal + self.queued_low
    }
}

/// `GET /batches/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchStatus {
    pub batch_id: BatchId,
    pub total: u64,
    pub counts: StatusCounts,
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
    pub broker: String,
    pub broker_ok: bool,
    pub workers_alive: u64,
    pub workers_unhealthy: u64,
    pub version: String,
}
