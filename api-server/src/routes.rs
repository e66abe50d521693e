//! Route handlers. Each validates, calls the broker, and shapes the answer; none keeps state.
//! Every handler but the public ones acts for the [`Caller`] that `access::authenticate` found:
//! its submissions are its own, and another tenant's task or batch is answered 404.

use crate::access::{authorize_batch, authorize_task};
use crate::auth::Caller;
use crate::error::HttpError;
use crate::extract::{ApiJson, ApiQuery, ProblemPath, WaitQuery, problem_not_found, wait_duration};
use crate::placement;
use crate::state::AppState;
use crate::submission::{resolve_request, spec_of};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use crucible_shared::{
    ApiError, ApiErrorCode, BatchCancelResponse, BatchId, BatchRequest, BatchStatus,
    CancelResponse, EvaluateRequest, HealthStatus, Problem, ProblemList, QueueStatus,
    SubmitResponse, TaskId, TaskStatus, TaskView, TenantCounts, WorkerInfo, WorkerState,
};
use crucible_task_manager::CancelOutcome;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use utoipa::{IntoParams, ToSchema};

/// Submit one evaluation.
#[utoipa::path(
    post, path = "/evaluate", tag = "tasks",
    request_body = EvaluateRequest,
    params(WaitQuery),
    responses(
        (status = 202, description = "Queued, joined to an identical open task (`coalesced`), answered from the result cache (`cached`, status `done`), or still running after `wait`", body = SubmitResponse),
        (status = 200, description = "Finished within `wait` (at once for a cache hit)", body = TaskView),
        (status = 400, description = "Malformed JSON", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
        (status = 422, description = "A field is out of range (`VALIDATION`), or no live worker has the `device_class` (`DEVICE_CLASS_UNAVAILABLE`)", body = ApiError),
        (status = 429, description = "Queue full (`QUEUE_FULL`) or the tenant's `max_queued` reached (`QUOTA_EXCEEDED`)", body = ApiError),
    )
)]
pub async fn evaluate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(query): ApiQuery<WaitQuery>,
    ApiJson(request): ApiJson<EvaluateRequest>,
) -> Result<Response, HttpError> {
    let wait = wait_duration(query.wait)?;
    let submitted = submit_evaluation(&state, &caller, request).await?;
    if let Some(wait) = wait
        && let Some(view) = state.broker.wait_terminal(&submitted.task_id, wait).await?
        && view.status.is_terminal()
    {
        state.deliveries.served(&view.task_id, view.status);
        return Ok((StatusCode::OK, Json(view)).into_response());
    }
    let body = SubmitResponse {
        task_id: submitted.task_id,
        status: submitted.status,
        deduplicated: submitted.deduplicated,
        coalesced: submitted.coalesced,
        cached: submitted.cached,
    };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// What every single submission does: the problem resolved, the request validated and placed,
/// the task submitted under the caller's tenant and counted (`POST /evaluate`, and KernelGYM's
/// `POST /kernelgym/evaluate`).
pub(crate) async fn submit_evaluation(
    state: &AppState,
    caller: &Caller,
    mut request: EvaluateRequest,
) -> Result<crucible_task_manager::Submitted, HttpError> {
    resolve_request(&mut request, &state.problems, "")?;
    request.validate()?;
    placement::check(state, &request).await?;
    let labels = [
        serde_json::to_value(request.backend)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        request.priority.as_str().to_owned(),
    ];
    let submitted = state
        .broker
        .submit(caller.tenant_id(), spec_of(request, caller))
        .await?;
    // Only a new task counts; a cached answer is one (already done), a joined task is not.
    if !submitted.deduplicated && !submitted.coalesced {
        state
            .metrics
            .submitted
            .with_label_values(&[labels[0].as_str(), labels[1].as_str()])
            .inc();
    }
    tracing::info!(
        task_id = %submitted.task_id,
        tenant = %caller.tenant.name,
        deduplicated = submitted.deduplicated,
        coalesced = submitted.coalesced,
        cached = submitted.cached,
        "task submitted"
    );
    Ok(submitted)
}

/// Answer to `POST /evaluate/batch`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchSubmitResponse {
    /// Follow the batch with `GET /batches/{id}`.
    pub batch_id: BatchId,
    /// One per submitted task, in the order of `tasks` (a deduplicated or coalesced task
    /// gives the id of the earlier task).
    pub task_ids: Vec<TaskId>,
}

/// Submit up to 1000 evaluations at once; all are accepted or none (queue cap). Each is
/// answered as `POST /evaluate` would answer it: `task_ids` may name an identical open task
/// (coalesced) or a task already done with a cached result. Tasks without a `device_class` are
/// placed at submission on one live class per group (the tasks of one reference), so a group's
/// timings never come from two kinds of device (`GET /tasks/{id}` shows `device_class`).
#[utoipa::path(
    post, path = "/evaluate/batch", tag = "tasks",
    request_body = BatchRequest,
    responses(
        (status = 202, description = "Queued", body = BatchSubmitResponse),
        (status = 400, description = "Malformed JSON", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
        (status = 422, description = "A field is out of range (`VALIDATION`), or no live worker has a task's `device_class` (`DEVICE_CLASS_UNAVAILABLE`)", body = ApiError),
        (status = 429, description = "Queue full (`QUEUE_FULL`) or the tenant's `max_queued` reached (`QUOTA_EXCEEDED`); no task was accepted", body = ApiError),
    )
)]
pub async fn evaluate_batch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(mut batch): ApiJson<BatchRequest>,
) -> Result<(StatusCode, Json<BatchSubmitResponse>), HttpError> {
    for (i, request) in batch.tasks.iter_mut().enumerate() {
        resolve_request(request, &state.problems, &format!("tasks[{i}]."))?;
    }
    batch.validate()?;
    placement::place_batch(&state, &mut batch.tasks, |i| {
        format!("tasks[{i}].device_class")
    })
    .await?;
    let n = batch.tasks.len();
    let specs = batch
        .tasks
        .into_iter()
        .map(|request| spec_of(request, &caller))
        .collect();
    let (batch_id, submitted) = state.broker.submit_batch(caller.tenant_id(), specs).await?;
    let cached = submitted.iter().filter(|s| s.cached).count();
    let coalesced = submitted.iter().filter(|s| s.coalesced).count();
    tracing::info!(
        batch_id = %batch_id,
        tenant = %caller.tenant.name,
        tasks = n,
        cached,
        coalesced,
        "batch submitted"
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(BatchSubmitResponse {
            batch_id,
            task_ids: submitted.into_iter().map(|s| s.task_id).collect(),
        }),
    ))
}

/// A task, its status and (when finished) its result.
#[utoipa::path(
    get, path = "/tasks/{id}", tag = "tasks",
    params(("id" = String, Path, description = "Task id"), WaitQuery),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 404, description = "Unknown (or expired) task, or another tenant's", body = ApiError),
    )
)]
pub async fn get_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<WaitQuery>,
) -> Result<Json<TaskView>, HttpError> {
    let id = TaskId(id);
    let wait = wait_duration(query.wait)?;
    authorize_task(&state, &caller, &id).await?;
    let view = match wait {
        Some(wait) => state.broker.wait_terminal(&id, wait).await?,
        None => state.broker.get_task(&id).await?,
    };
    if let Some(view) = &view {
        state.deliveries.served(&view.task_id, view.status);
    }
    view.map(Json)
        .ok_or_else(|| ApiError::not_found(format!("task {id}")).into())
}

/// Cancel a task: a queued task never runs; a running one has its child killed.
#[utoipa::path(
    delete, path = "/tasks/{id}", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "Cancelled", body = CancelResponse),
        (status = 404, description = "Unknown task, or another tenant's", body = ApiError),
        (status = 409, description = "Already finished", body = ApiError),
    )
)]
pub async fn cancel_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<CancelResponse>, HttpError> {
    let id = TaskId(id);
    authorize_task(&state, &caller, &id).await?;
    match state.broker.cancel(&id).await? {
        CancelOutcome::Cancelled { was } => {
            tracing::info!(task_id = %id, was = was.as_str(), "task cancelled");
            Ok(Json(CancelResponse {
                task_id: id,
                status: TaskStatus::Cancelled,
                was,
            }))
        }
        CancelOutcome::AlreadyFinished(status) => Err(ApiError::new(
            ApiErrorCode::Conflict,
            format!("task {id} already finished as {}", status.as_str()),
        )
        .into()),
        CancelOutcome::NotFound => Err(ApiError::not_found(format!("task {id}")).into()),
    }
}

/// Query of `GET /batches/{id}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BatchQuery {
    /// `tasks` to include every task with its result.
    #[param(inline)]
    pub include: Option<BatchInclude>,
}

/// What `GET /batches/{id}?include=` may add to the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BatchInclude {
    /// Every task with its result.
    Tasks,
}

/// Counts by status for a batch, and its tasks when asked.
#[utoipa::path(
    get, path = "/batches/{id}", tag = "tasks",
    params(("id" = String, Path, description = "Batch id"), BatchQuery),
    responses(
        (status = 200, description = "The batch", body = BatchStatus),
        (status = 404, description = "Unknown batch, or another tenant's", body = ApiError),
    )
)]
pub async fn get_batch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<BatchQuery>,
) -> Result<Json<BatchStatus>, HttpError> {
    // An unknown value is refused by the query's deserialisation (422, naming the values).
    let include_tasks = query.include == Some(BatchInclude::Tasks);
    let id = BatchId(id);
    authorize_batch(&state, &caller, &id, "batch").await?;
    state
        .broker
        .batch_status(&id, include_tasks)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("batch {id}")).into())
}

/// Cancel a batch: its queued tasks never run, its running ones have their children killed
/// (at their workers' next lease renewal, within a third of the lease), its finished ones keep
/// their results. Answers with what became of each distinct task; cancelling a batch again
/// (or one that already finished) is not an error: everything counts as already finished. A
/// rollout batch's cancelled rollouts read back as `cancelled`, without a reward.
#[utoipa::path(
    delete, path = "/batches/{id}", tag = "tasks",
    params(("id" = String, Path, description = "Batch id of `POST /evaluate/batch` or `POST /rollouts`")),
    responses(
        (status = 200, description = "Cancelled: counts of distinct tasks", body = BatchCancelResponse),
        (status = 404, description = "Unknown (or expired) batch, or another tenant's", body = ApiError),
        (status = 503, description = "Broker unavailable", body = ApiError),
    )
)]
pub async fn cancel_batch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<BatchCancelResponse>, HttpError> {
    let id = BatchId(id);
    authorize_batch(&state, &caller, &id, "batch").await?;
    let counts = state
        .broker
        .cancel_batch(&id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("batch {id}")))?;
    tracing::info!(
        batch_id = %id,
        tenant = %caller.tenant.name,
        cancelled_queued = counts.cancelled_queued,
        cancelled_running = counts.cancelled_running,
        already_finished = counts.already_finished,
        "batch cancelled"
    );
    Ok(Json(BatchCancelResponse::new(id, counts)))
}

/// The registered problems (without their sources).
#[utoipa::path(
    get, path = "/problems", tag = "problems",
    responses((status = 200, description = "Problems by level and id; empty without a registry", body = ProblemList))
)]
pub async fn list_problems(State(state): State<AppState>) -> Json<ProblemList> {
    let problems = state.problems.list();
    Json(ProblemList {
        total: problems.len(),
        problems,
    })
}

/// One registered problem with its source and content hash.
#[utoipa::path(
    get, path = "/problems/{level}/{id}", tag = "problems",
    params(("level" = u32, Path, description = "KernelBench level"), ("id" = u32, Path, description = "Problem id within the level")),
    responses(
        (status = 200, description = "The problem", body = Problem),
        (status = 404, description = "Not registered", body = ApiError),
    )
)]
pub async fn get_problem(
    State(state): State<AppState>,
    ProblemPath(key): ProblemPath,
) -> Result<Json<Problem>, HttpError> {
    state
        .problems
        .get(key)
        .cloned()
        .map(Json)
        .ok_or_else(|| problem_not_found(key.level, key.id).into())
}

/// Answer to `GET /workers/status`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkersResponse {
    /// Every registered worker, `lost` ones included.
    pub workers: Vec<WorkerInfo>,
    /// How many there are.
    pub total: usize,
    /// Workers with a recent heartbeat (not `lost`).
    pub alive: usize,
    /// Open tasks of every tenant that has any (admin only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<TenantCounts>>,
}

/// Every worker on every node, as the shared registry knows them. A tenant sees no worker's
/// `current_task` (it may be another tenant's); the admin also sees every tenant's counts.
#[utoipa::path(
    get, path = "/workers/status", tag = "status",
    responses((status = 200, description = "Workers", body = WorkersResponse), (status = 503, body = ApiError))
)]
pub async fn workers_status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<WorkersResponse>, HttpError> {
    let workers = crate::admin::visible_workers(&state, &caller).await?;
    let alive = workers
        .iter()
        .filter(|w| w.state != WorkerState::Lost)
        .count();
    let tenants = if caller.admin {
        Some(crate::admin::visible_counts(&state, &caller).await?)
    } else {
        None
    };
    Ok(Json(WorkersResponse {
        total: workers.len(),
        alive,
        workers,
        tenants,
    }))
}

/// Queue depth by priority and by device class (`classes`, `unservable` where no live worker
/// has the class), running tasks and lifetime counters of the whole service, and the open
/// tasks per tenant: every tenant's for the admin, the caller's own for a tenant.
#[utoipa::path(
    get, path = "/queue/status", tag = "status",
    responses((status = 200, description = "Queue", body = QueueStatus), (status = 503, body = ApiError))
)]
pub async fn queue_status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<QueueStatus>, HttpError> {
    let mut status = state.broker.queue_status().await?;
    status.tenants = Some(crate::admin::visible_counts(&state, &caller).await?);
    Ok(Json(status))
}

/// Whether the broker answers and how many workers are alive. 200 when the broker is up
/// (`degraded` without live workers), 503 when it is not.
#[utoipa::path(
    get, path = "/health", tag = "status",
    responses((status = 200, description = "Broker reachable", body = HealthStatus), (status = 503, description = "Broker unreachable", body = HealthStatus))
)]
pub async fn health(State(state): State<AppState>) -> (StatusCode, Json<HealthStatus>) {
    let broker = state.broker.kind().to_owned();
    let version = env!("CARGO_PKG_VERSION").to_owned();
    let ping = tokio::time::timeout(Duration::from_secs(2), state.broker.ping()).await;
    if !matches!(ping, Ok(Ok(()))) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(HealthStatus {
                status: "unavailable".into(),
                broker,
                broker_ok: false,
                workers_alive: 0,
                workers_unhealthy: 0,
                version,
            }),
        );
    }
    let workers = state.broker.list_workers().await.unwrap_or_default();
    let alive = workers
        .iter()
        // Only a worker that can take a task now counts: one still starting (GPU check,
        // template warm-up) or stopping does not.
        .filter(|w| matches!(w.state, WorkerState::Idle | WorkerState::Busy))
        .count() as u64;
    let unhealthy = workers
        .iter()
        .filter(|w| w.state == WorkerState::Unhealthy)
        .count() as u64;
    (
        StatusCode::OK,
        Json(HealthStatus {
            status: if alive > 0 { "ok" } else { "degraded" }.into(),
            broker,
            broker_ok: true,
            workers_alive: alive,
            workers_unhealthy: unhealthy,
            version,
        }),
    )
}

/// Prometheus text exposition.
#[utoipa::path(
    get, path = "/metrics", tag = "status",
    responses((status = 200, description = "Prometheus metrics", body = String, content_type = "text/plain"))
)]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let queue = state.broker.queue_status().await;
    let workers = state.broker.list_workers().await;
    let broker = match (&queue, &workers) {
        (Ok(q), Ok(w)) => Some((q, w.as_slice())),
        _ => None,
    };
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        state.metrics.render(broker),
    )
}
