//! Workers as the registry reports them.

use crate::ids::{TaskId, WorkerId};
use crate::sandbox::SandboxStatus;
use crate::task::DeviceInfo;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a worker is doing; only `idle` and `busy` workers count as alive in `GET /health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// Checking its device and warming up; takes no tasks yet.
    Starting,
    /// Ready, waiting for a task.
    Idle,
    /// Running a task on its device (`current_task`).
    Busy,
    /// The device failed a health check; the worker takes no tasks until it passes one.
    Unhealthy,
    /// Draining (SIGTERM, or `POST /admin/workers/{id}/drain`): takes no new tasks, gave back
    /// the ones it claimed ahead, finishes the evaluations already on its device (up to its
    /// drain bound), then deregisters and exits.
    Draining,
    /// Shutting down: takes no new tasks, gives back the ones it cannot finish.
    Stopping,
    /// No heartbeat for longer than the liveness window (derived by the registry).
    Lost,
}

impl WorkerState {
    /// Whether a worker in this state may take a task now or soon: starting, idle, busy, or
    /// unhealthy (until its device passes a check again). Draining, stopping and lost ones will not.
    pub fn takes_tasks(self) -> bool {
        match self {
            WorkerState::Starting
            | WorkerState::Idle
            | WorkerState::Busy
            | WorkerState::Unhealthy => true,
            WorkerState::Draining | WorkerState::Stopping | WorkerState::Lost => false,
        }
    }
}

/// The answer to `POST /admin/workers/{id}/drain`: the drain is asked of the worker, which
/// starts it at its next heartbeat (state `draining`), finishes the evaluations on its device,
/// deregisters and exits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DrainRequested {
    /// The worker asked to drain.
    pub worker_id: WorkerId,
}

/// One worker, as written by its own heartbeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkerInfo {
    /// The worker, stable across its heartbeats (not across restarts).
    pub worker_id: WorkerId,
    /// Host name of the node the worker runs on.
    pub node: String,
    /// The device it evaluates on, with its class (`device.class`): the tasks it claims are
    /// those of its class and those of no class.
    pub device: DeviceInfo,
    /// Device index on its node (`None` for CPU workers).
    pub device_index: Option<u32>,
    /// What it is doing, as of `last_heartbeat` (or `lost`).
    pub state: WorkerState,
    /// The task on its device, when `busy`.
    pub current_task: Option<TaskId>,
    /// Tasks it has completed with a verdict since it started.
    pub tasks_done: u64,
    /// When the worker process started.
    pub started_at: DateTime<Utc>,
    /// When it last wrote this record; `lost` once this is older than the liveness window.
    pub last_heartbeat: DateTime<Utc>,
    /// The sandbox layers in force for this worker's task children (absent until its
    /// start-up self-test has run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxStatus>,
}
