//! The OpenAPI document: the contract clients are written against. Authentication is added to
//! it in one place ([`doc`]), from the same list of public paths the middleware uses, so no
//! protected path can go undocumented. The statuses the layers around the handlers answer are
//! listed in `statuses.rs`.

mod statuses;

use crate::auth::{PAGE_PATHS, PUBLIC_PATHS, is_public};
use crate::routes;
use statuses::{COMMON_STATUSES, Scope, add_error_headers, common_response};
use utoipa::OpenApi;
use utoipa::openapi::RefOr;
use utoipa::openapi::path::ParameterIn;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};

/// The name of the bearer scheme in `components.securitySchemes`.
pub const BEARER_SCHEME: &str = "bearer";

#[derive(OpenApi)]
#[openapi(
    info(title = "Crucible", description = "GPU kernel evaluation for RL trainers: KernelBench semantics, isolated children, leases and retries."),
    paths(
        routes::evaluate,
        routes::evaluate_batch,
        routes::get_task,
        routes::cancel_task,
        routes::get_batch,
        routes::cancel_batch,
        crate::rollouts::submit_rollouts,
        crate::rollouts::batch_results,
        routes::list_problems,
        routes::get_problem,
        routes::workers_status,
        routes::queue_status,
        crate::status_page::status_json,
        crate::status_page::page,
        crate::admin::create_tenant,
        crate::admin::list_tenants,
        crate::admin::delete_tenant,
        crate::admin::drain_worker,
        routes::health,
        routes::metrics,
        // psets (issue 17): problem sets and batch reports.
        crate::problem_sets::get_problem_set,
        crate::problem_sets::post_problem_batch,
        crate::report::batch_report,
        // episodes (issue 17)
        crate::episodes::start_episodes,
        crate::episodes::post_turn,
        crate::episodes::get_episode,
        crate::episodes::get_turn,
        // prompts branch (issue 17): first-turn prompts.
        crate::prompts::problem_prompt,
        crate::prompts::prompt,
        // OpenEnv sessions over episodes.
        crate::openenv::http_reset,
        crate::openenv::http_step,
        crate::openenv::http_state,
        crate::openenv::health,
        crate::openenv::metadata,
        crate::openenv::schema,
        crate::openenv::ws::websocket,
        // KernelGYM's evaluation API.
        crate::kernelgym::evaluate,
        crate::kernelgym::status,
        crate::kernelgym::results,
    ),
    components(schemas(
        crucible_shared::DrainRequested,
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
        crucible_shared::TimingRequest,
        crucible_shared::TimingMode,
        crucible_shared::Precision,
        crucible_shared::TimingMethod,
        crucible_shared::ReferenceBackend,
        crucible_shared::RuntimeStats,
        crucible_shared::TimingCheck,
        crucible_shared::WorkerInfo,
        crucible_shared::QueueStatus,
        crucible_shared::ClassQueue,
        crucible_shared::DeviceClass,
        crucible_shared::DeviceInfo,
        crucible_shared::DeviceKind,
        crucible_shared::BatchStatus,
        crucible_shared::HealthStatus,
        crucible_shared::ProblemRef,
        crucible_shared::ProblemInfo,
        crucible_shared::Problem,
        crucible_shared::ProblemList,
        crucible_rl::rollout::Rollout,
        crucible_rl::rollout::RolloutEvalSettings,
        crucible_rl::rollout::RolloutBatchRequest,
        crucible_rl::rollout::RolloutBatchResponse,
        crucible_rl::rollout::RolloutResult,
        crucible_rl::rollout::RolloutStatus,
        crucible_rl::rollout::RolloutResultsPage,
        crucible_rl::reward::RewardProfile,
        crucible_rl::reward::DecoyReward,
        crucible_rl::reward::WeightsOverride,
        crucible_rl::reward::RewardComponents,
        crucible_shared::CreateTenantRequest,
        crucible_shared::CreatedTenant,
        crucible_shared::TenantInfo,
        crucible_shared::TenantList,
        crucible_shared::DeletedTenant,
        crucible_shared::TenantCounts,
        routes::BatchSubmitResponse,
        crucible_shared::CancelResponse,
        crucible_shared::BatchCancelResponse,
        routes::WorkersResponse,
        crucible_shared::StatusPage,
        crucible_shared::StatusWorker,
        crucible_shared::WorkerHealth,
        crucible_shared::Activity,
        crucible_shared::ActivityWindow,
        crucible_shared::VerdictCounts,
        crucible_shared::RecentFailure,
        crucible_shared::CacheRate,
        // psets (issue 17): problem sets and batch reports.
        crucible_rl::problem_set::ProblemSetSelection,
        crucible_rl::problem_set::ProblemSet,
        crucible_rl::problem_set::Split,
        crucible_rl::problem_set::ProblemBatchRequest,
        crucible_rl::problem_set::BatchProblem,
        crucible_rl::problem_set::ProblemBatch,
        crucible_rl::report::BatchReport,
        crucible_rl::report::GroupReport,
        crucible_rl::report::FastP,
        crucible_rl::report::ReportSource,
        // episodes (issue 17)
        crucible_rl::episode::EpisodeRequest,
        crucible_rl::episode::EpisodesStarted,
        crucible_rl::episode::TurnRequest,
        crucible_rl::episode::TurnStatus,
        crucible_rl::episode::TurnView,
        crucible_rl::episode::EpisodeView,
        // prompts branch (issue 17): first-turn prompts.
        crucible_rl::prompt::PromptOption,
        crucible_rl::prompt::PromptSettings,
        crucible_rl::prompt::PromptRequest,
        crucible_rl::prompt::Prompt,
        // OpenEnv sessions over episodes.
        crucible_rl::openenv::OpenEnvReset,
        crucible_rl::openenv::OpenEnvAction,
        crucible_rl::openenv::OpenEnvStepRequest,
        crucible_rl::openenv::OpenEnvObservation,
        crucible_rl::openenv::OpenEnvResult,
        crucible_rl::openenv::OpenEnvState,
        crucible_rl::openenv::OpenEnvMetadata,
        crucible_rl::openenv::OpenEnvHealth,
        // KernelGYM's evaluation API.
        crucible_rl::kernelgym::KernelGymRequest,
        crucible_rl::kernelgym::KernelGymResult,
        crucible_rl::kernelgym::KernelGymStatus,
    )),
    tags((name = "tasks", description = "Submit, follow and cancel evaluations"), (name = "rollouts", description = "Model completions in, rewards and next-turn feedback out"), (name = "episodes", description = "Multi-turn episodes: a first prompt, turns scored as rollouts, next prompts with feedback, discounted returns"), (name = "openenv", description = "OpenEnv's reset/step/state over episodes, over HTTP and a WebSocket session (docs/TRAINERS.md)"), (name = "kernelgym", description = "KernelGYM's /evaluate, /status and /results, for its reward clients (docs/MIGRATION-KERNELGYM.md)"), (name = "problems", description = "The problem registry requests may name by level and id"), (name = "status", description = "Workers, queue, recent activity, the status page, health, metrics"), (name = "admin", description = "Tenants and their tokens, worker drains (admin token only)"))
)]
/// The OpenAPI document of every route and schema, derived from the handlers' annotations
/// and the wire types' doc comments.
pub struct ApiDoc;

/// The document with its bearer scheme (every path but [`PUBLIC_PATHS`] and [`PAGE_PATHS`]
/// requires it) and the [`COMMON_STATUSES`] of each operation.
pub fn doc() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    let scheme = HttpBuilder::new()
        .scheme(HttpAuthScheme::Bearer)
        .bearer_format("opaque")
        .description(Some(
            "A tenant's token from `POST /admin/tenants`, or the admin token \
             (`CRUCIBLE_ADMIN_TOKEN`). Not needed when the server runs with `CRUCIBLE_AUTH=off` \
             (the default on a loopback address).",
        ))
        .build();
    doc.components
        .get_or_insert_with(Default::default)
        .add_security_scheme(BEARER_SCHEME, SecurityScheme::Http(scheme));
    for (path, item) in doc.paths.paths.iter_mut() {
        let public = is_public(path);
        debug_assert!(
            !public || PUBLIC_PATHS.contains(&path.as_str()) || PAGE_PATHS.contains(&path.as_str())
        );
        let admin = path.starts_with("/admin/");
        for op in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            if !public {
                op.security = Some(vec![SecurityRequirement::new(
                    BEARER_SCHEME,
                    Vec::<String>::new(),
                )]);
            }
            let has_body = op.request_body.is_some();
            let has_query = op
                .parameters
                .iter()
                .flatten()
                .any(|p| matches!(p, RefOr::T(p) if p.parameter_in == ParameterIn::Query));
            for &(scope, status, description) in COMMON_STATUSES {
                let applies = match scope {
                    Scope::Every => true,
                    Scope::Protected => !public,
                    Scope::Admin => admin,
                    Scope::WithBody => has_body,
                    Scope::WithQuery => has_query,
                };
                if !applies {
                    continue;
                }
                // A handler's own description of the status (more precise) is kept.
                op.responses
                    .responses
                    .entry(status.to_string())
                    .or_insert_with(|| common_response(scope, status, description).into());
            }
            for (status, response) in op.responses.responses.iter_mut() {
                if let RefOr::T(response) = response {
                    add_error_headers(status, response);
                }
            }
        }
    }
    doc
}

#[cfg(test)]
mod tests;
