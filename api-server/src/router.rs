//! The router: every route with its body limit, the OpenAPI document and Swagger UI, and the
//! layers every request passes (authentication, timeout, traces, metrics). It is the only
//! module that names the handlers of every other one, and no handler names it back.

use crate::auth::{PAGE_PATH, SCRIPT_PATH, STYLE_PATH};
use crate::error::not_found;
use crate::state::AppState;
use crate::status_page::{self, JSON_PATH};
use crate::{admin, episodes, kernelgym, openenv, problem_sets, prompts, report, rollouts, routes};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use std::time::Duration;
use utoipa_swagger_ui::SwaggerUi;

/// Largest `POST /evaluate` body: two codes at the limit, JSON-escaped, plus the fields.
pub const EVALUATE_BODY_LIMIT: usize = 4 << 20;
/// Largest `POST /evaluate/batch` body.
pub const BATCH_BODY_LIMIT: usize = 64 << 20;
/// Longest time one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(90);

/// The whole API: every route under its body limit, `/openapi.json` and `/docs`, behind
/// authentication, the request timeout, tracing and metrics.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route(
            "/evaluate",
            post(routes::evaluate).layer(DefaultBodyLimit::max(EVALUATE_BODY_LIMIT)),
        )
        .route(
            "/evaluate/batch",
            post(routes::evaluate_batch).layer(DefaultBodyLimit::max(BATCH_BODY_LIMIT)),
        )
        .route(
            "/rollouts",
            post(rollouts::submit_rollouts).layer(DefaultBodyLimit::max(BATCH_BODY_LIMIT)),
        )
        .route(
            "/tasks/{id}",
            get(routes::get_task).delete(routes::cancel_task),
        )
        .route(
            "/batches/{id}",
            get(routes::get_batch).delete(routes::cancel_batch),
        )
        .route("/batches/{id}/results", get(rollouts::batch_results))
        .route("/problems", get(routes::list_problems))
        .route("/problems/{level}/{id}", get(routes::get_problem))
        .route(
            "/problems/{level}/{id}/prompt",
            get(prompts::problem_prompt),
        )
        .route(
            "/prompts",
            post(prompts::prompt).layer(DefaultBodyLimit::max(EVALUATE_BODY_LIMIT)),
        )
        .route("/workers/status", get(routes::workers_status))
        .route("/queue/status", get(routes::queue_status))
        .route(
            "/admin/tenants",
            post(admin::create_tenant).get(admin::list_tenants),
        )
        .route("/admin/tenants/{name}", delete(admin::delete_tenant))
        .route("/admin/workers/{id}/drain", post(admin::drain_worker))
        .route("/", get(status_page::page))
        .route(PAGE_PATH, get(status_page::page))
        .route(JSON_PATH, get(status_page::status_json))
        .route(SCRIPT_PATH, get(status_page::script))
        .route(STYLE_PATH, get(status_page::stylesheet))
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics))
        // psets (issue 17): problem sets and batch reports.
        .route("/problem-sets", get(problem_sets::get_problem_set))
        .route(
            "/problem-sets/batches",
            post(problem_sets::post_problem_batch)
                .layer(DefaultBodyLimit::max(EVALUATE_BODY_LIMIT)),
        )
        .route("/batches/{id}/report", get(report::batch_report))
        // episodes (issue 17)
        .route(
            "/episodes",
            post(episodes::start_episodes).layer(DefaultBodyLimit::max(EVALUATE_BODY_LIMIT)),
        )
        .route("/episodes/{id}", get(episodes::get_episode))
        .route(
            "/episodes/{id}/turns",
            post(episodes::post_turn).layer(DefaultBodyLimit::max(EVALUATE_BODY_LIMIT)),
        )
        .route("/episodes/{id}/turns/{turn}", get(episodes::get_turn))
        // OpenEnv sessions over episodes: `base_url` `…/openenv` for OpenEnv's clients.
        .route(
            "/openenv/reset",
            post(openenv::http_reset).layer(DefaultBodyLimit::max(EVALUATE_BODY_LIMIT)),
        )
        .route(
            "/openenv/step",
            post(openenv::http_step).layer(DefaultBodyLimit::max(EVALUATE_BODY_LIMIT)),
        )
        .route("/openenv/state", get(openenv::http_state))
        .route("/openenv/health", get(openenv::health))
        .route("/openenv/metadata", get(openenv::metadata))
        .route("/openenv/schema", get(openenv::schema))
        .route("/openenv/ws", get(openenv::ws::websocket))
        // KernelGYM's evaluation API: its clients' server URL `…/kernelgym`.
        .route(
            "/kernelgym/evaluate",
            post(kernelgym::evaluate).layer(DefaultBodyLimit::max(EVALUATE_BODY_LIMIT)),
        )
        .route("/kernelgym/status/{task_id}", get(kernelgym::status))
        .route("/kernelgym/results/{task_id}", get(kernelgym::results));
    Router::new()
        .merge(api)
        .merge(SwaggerUi::new(crate::auth::DOCS_PATH).url("/openapi.json", crate::openapi::doc()))
        .fallback(not_found)
        // Inside authentication, so an unauthenticated client never holds body bytes.
        .layer(axum::middleware::from_fn_with_state(
            std::sync::Arc::new(crate::body_budget::BodyBudget::new(
                state.limits.body_bytes_in_flight,
                state.limits.body_read_timeout,
                BATCH_BODY_LIMIT,
            )),
            crate::body_budget::admit_body,
        ))
        // Innermost of the rest, so traces and metrics count the requests it refuses.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::access::authenticate,
        ))
        // Longer than the longest `?wait=`; a request stuck past it is cut, not kept forever.
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(axum::middleware::from_fn_with_state(
            state.metrics.clone(),
            crate::metrics::track,
        ))
        .with_state(state)
}
