//! The OpenAPI document: the contract clients are written against.

use crate::routes;
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(title = "Crucible", description = "GPU kernel evaluation for RL trainers: KernelBench semantics, isolated children, leases and retries."),
    paths(
        routes::evaluate,
        routes::evaluate_batch,
        routes::get_task,
        routes::cancel_task,
        routes::get_batch,
        routes::workers_status,
        routes::queue_status,
        routes::health,
        routes::metrics,
    ),
    components(schemas(
        crucible_shared::EvaluateRequest,
        crucible_shared::BatchRequest,
        crucible_shared::TaskView,
        crucible_shared::EvalResult,
        crucible_shared::BuildSource,
        crucible_shared::ApiError,
        crucible_shared::ApiErrorCode,
        crucible_shared::VerdictCode,
        crucible_shared::Verdict,
        crucible_shared::Flag,
        crucible_shared::ScreeningAction,
        crucible_shared::WorkerInfo,
        crucible_shared::QueueStatus,
        crucible_shared::BatchStatus,
        crucible_shared::HealthStatus,
        routes::BatchSubmitResponse,
        routes::CancelResponse,
        routes::WorkersResponse,
    )),
    tags((name = "tasks", description = "Submit, follow and cancel evaluations"), (name = "status", description = "Workers, queue, health, metrics"))
)]
pub struct ApiDoc;
