//! Workers as the registry reports them.

use crate::ids::{TaskId, WorkerId};
use crate::sandbox::SandboxStatus;
use crate::task::DeviceInfo;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    Starting,
    Idle,
    Busy,
    /// The device failed a health check; the worker takes no tasks until it passes one.
    Unhealthy,
    Stopping,
    /// No heartbeat for longer than the liveness window (derived by the registry).
    Lost,
}

/// One worker, as written by its own heartbeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkerInfo {
    pub worker_id: WorkerId,
    /// Host name of the node the worker runs on.
    pub node: String,
    pub device: DeviceInfo,
    /// Device index on its node (`None` for CPU workers).
    pub device_index: Option<u32>,
    pub state: WorkerState,
    pub current_task: Option<TaskId>,
    pub tasks_done: u64,
    pub started_at: DateTime<Utc>,
    pub last_heartbeat: DateTime<Utc>,
    /// The sandbox layers in force for this worker's task children (absent until its
    /// start-up self-test has run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxStatus>,
}
