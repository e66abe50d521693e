//! The evaluation service's wire types, shared by every Crucible process: requests and their
//! settings (written once, `settings`), task views, results and verdicts, cancel answers, worker
//! and queue views, device classes and where tasks may run, recent activity and the status
//! page's view, tenants, problems, the measurement options (`parity`) (all serde + utoipa
//! schemas), the bounds of every field, the API error codes with their one HTTP mapping,
//! request validation and configuration parsing. Nothing here does I/O. The RL environment
//! built on these (rollouts, episodes, rewards, prompts, problem sets, reports, the trainer
//! protocols) is `crucible-rl`.

// First: the one list of settings is a macro, expanded in `request`.
#[macro_use]
mod settings;

pub mod activity;
pub mod bounds;
pub mod cancel;
pub mod config;
pub mod device;
pub mod error;
pub mod ids;
pub mod parity;
pub mod placement;
pub mod problem;
pub mod request;
pub mod sandbox;
pub mod status;
pub mod task;
pub mod tenant;
pub mod timing;
pub mod wire;
pub mod worker;

pub use activity::{
    Activity, ActivityWindow, CacheRate, RecentFailure, StatusPage, StatusWorker, VerdictCounts,
    WorkerHealth, clip,
};
pub use bounds::{
    Bounds, CORRECT_TRIALS, MAX_BATCH_TASKS, MAX_CODE_BYTES, MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_SCREENING_RULES, MAX_SPEEDUP, MAX_TIME_MS, MIN_ADAPTIVE_TRIALS, PERF_TRIALS,
    TARGET_REL_ERROR, TIMEOUT_S, TOLERANCE,
};
pub use cancel::{BatchCancelCounts, BatchCancelResponse, CancelResponse};
pub use config::{BrokerConfig, ConfigError};
pub use device::{DeviceClass, InvalidDeviceClass};
pub use error::{ApiError, ApiErrorCode};
pub use ids::{BatchId, EpisodeGroupId, EpisodeId, LeaseToken, TaskId, TenantId, WorkerId};
pub use parity::{Precision, ReferenceBackend, TimingMethod};
pub use placement::{ClassQueue, LiveClasses, QueuedByClass};
pub use problem::{Problem, ProblemInfo, ProblemList, ProblemRef, problem_hash};
pub use request::{
    Backend, BatchRequest, CodeError, EvaluateRequest, HarnessSettings, MeasurementOptions,
    Priority, ScreeningAction, TaskSpec, check_code,
};
pub use sandbox::{LayerState, LayerStatus, SandboxLayer, SandboxStatus};
pub use status::{BatchStatus, HealthStatus, QueueStatus, StatusCounts};
pub use task::{
    BuildSource, DeviceInfo, DeviceKind, EvalResult, Flag, RuntimeStats, SEVERITY_FLAG,
    SEVERITY_HACK, SEVERITY_REJECT, SubmitResponse, TaskStatus, TaskView, TimingCheck, Verdict,
    VerdictCode,
};
pub use tenant::{
    BUILTIN_TENANT_NAME, CreateTenantRequest, CreatedTenant, DeletedTenant, TenantCounts,
    TenantInfo, TenantList,
};
pub use timing::{HarnessTiming, TimingMode, TimingRequest};
pub use wire::wire_name;
pub use worker::{DrainRequested, WorkerInfo, WorkerState};
