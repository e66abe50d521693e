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
        crate::rollouts::submit_rollouts,
        crate::rollouts::batch_results,
        routes::list_problems,
        routes::get_problem,
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
        crucible_shared::ProblemRef,
        crucible_shared::ProblemInfo,
        crucible_shared::Problem,
        crucible_shared::ProblemList,
        crucible_shared::rollout::Rollout,
        crucible_shared::rollout::RolloutEvalSettings,
        crucible_shared::rollout::RolloutBatchRequest,
        crucible_shared::rollout::RolloutBatchResponse,
        crucible_shared::rollout::RolloutResult,
        crucible_shared::rollout::RolloutStatus,
        crucible_shared::rollout::RolloutResultsPage,
        crucible_shared::reward::RewardProfile,
        crucible_shared::reward::WeightsOverride,
        crucible_shared::reward::RewardComponents,
        routes::BatchSubmitResponse,
        routes::CancelResponse,
        routes::WorkersResponse,
    )),
    tags((name = "tasks", description = "Submit, follow and cancel evaluations"), (name = "rollouts", description = "Model completions in, rewards and next-turn feedback out"), (name = "problems", description = "The problem registry requests may name by level and id"), (name = "status", description = "Workers, queue, health, metrics"))
)]
pub struct ApiDoc;
