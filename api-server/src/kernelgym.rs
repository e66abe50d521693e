//! KernelGYM's evaluation API (`/kernelgym/evaluate`, `/kernelgym/status/{task_id}`,
//! `/kernelgym/results/{task_id}`), so a KernelGYM or Dr.Kernel reward client runs against
//! Crucible with its server URL changed to `…/kernelgym`. The shapes and the mapping are
//! `crucible_rl::kernelgym`'s; this module submits through `routes::submit_evaluation`
//! and keeps the client's task id.
//!
//! The client names its evaluations (`task_id`). That name is kept per tenant in the broker's
//! key-value cache (namespace `kernelgym`) with a digest of the request, so every replica
//! answers `/status` and `/results` for it, the same id with the same request is the same
//! evaluation (also when two replicas race: the submission carries an idempotency key made from
//! the id), and the same id with another request is 409, as in KernelGYM.

use crate::auth::Caller;
use crate::error::HttpError;
use crate::extract::{ApiJson, ApiQuery, WaitQuery, wait_duration};
use crate::routes::submit_evaluation;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::{Extension, Json};
use crucible_rl::kernelgym::{
    KernelGymRequest, KernelGymResult, KernelGymStatus, result_of, status_of,
};
use crucible_shared::bounds::WAIT_S;
use crucible_shared::{ApiError, ApiErrorCode, TaskId, TaskView};
use crucible_task_manager::KvNamespace;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// Key-value namespace of the clients' task ids.
const NAMESPACE: KvNamespace = KvNamespace::KernelGym;
/// How long `POST /kernelgym/evaluate` waits for the verdict by default before it answers with
/// the task still `pending`/`processing` (KernelGYM's clients then poll `/status`): `?wait=`'s
/// longest, since KernelGYM's own `/evaluate` answers only once finished.
const EVALUATE_WAIT: Duration = Duration::from_secs(WAIT_S.max as u64);
/// The names outlive the result TTL by this factor, as episode records do.
const TTL_FACTOR: u32 = 2;

/// What the cache keeps of a client's task id.
#[derive(Debug, Serialize, Deserialize)]
struct Named {
    /// Our task.
    task_id: TaskId,
    /// SHA-256 of the request as sent (less `force_refresh`): the same id with another request
    /// is a conflict.
    request_digest: String,
}

fn key(caller: &Caller, task_id: &str) -> String {
    format!("{}:{task_id}", caller.tenant_id())
}

fn digest(request: &KernelGymRequest) -> String {
    let mut same = request.clone();
    same.force_refresh = false;
    let json = serde_json::to_vec(&same).expect("a request serializes");
    format!("{:x}", Sha256::digest(json))
}

fn internal(what: &str, e: impl std::fmt::Display) -> HttpError {
    ApiError::new(ApiErrorCode::Internal, format!("{what}: {e}")).into()
}

/// What the caller's `task_id` names, if anything.
async fn lookup(
    state: &AppState,
    caller: &Caller,
    task_id: &str,
) -> Result<Option<Named>, HttpError> {
    match state
        .broker
        .kv_get(NAMESPACE, &key(caller, task_id))
        .await?
    {
        Some(json) => serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| internal("stored kernelgym task", e)),
        None => Ok(None),
    }
}

async fn named(state: &AppState, caller: &Caller, task_id: &str) -> Result<Named, HttpError> {
    lookup(state, caller, task_id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("task {task_id}")).into())
}

async fn task(state: &AppState, named: &Named, task_id: &str) -> Result<TaskView, HttpError> {
    state
        .broker
        .get_task(&named.task_id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("task {task_id} (expired)")).into())
}

/// KernelGYM's `POST /evaluate`: submits the evaluation (or finds the one this `task_id`
/// already names) and answers its result once finished, or after `wait` (default 60 s) with
/// its status.
#[utoipa::path(
    post, path = "/kernelgym/evaluate", tag = "kernelgym",
    request_body = KernelGymRequest,
    params(WaitQuery),
    responses(
        (status = 200, description = "The evaluation: finished (`completed`, `failed`, `timeout`) or still `pending`/`processing` after `wait` (left out, 60 s; then poll `/kernelgym/status/{task_id}`)", body = KernelGymResult),
        (status = 409, description = "`task_id` names another request of this tenant (`CONFLICT`): use a new id", body = ApiError),
        (status = 422, description = "A field Crucible cannot honour or out of range, named in `field` (`VALIDATION`)", body = ApiError),
        (status = 429, description = "Queue full (`QUEUE_FULL`) or the tenant's `max_queued` reached (`QUOTA_EXCEEDED`)", body = ApiError),
    )
)]
pub async fn evaluate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(query): ApiQuery<WaitQuery>,
    ApiJson(body): ApiJson<KernelGymRequest>,
) -> Result<Json<KernelGymResult>, HttpError> {
    let wait = wait_duration(query.wait)?.unwrap_or(EVALUATE_WAIT);
    let mut request = body.to_evaluate_request()?;
    let request_digest = digest(&body);
    let name = key(&caller, &body.task_id);
    let known = lookup(&state, &caller, &body.task_id).await?;
    if let Some(known) = &known
        && known.request_digest != request_digest
    {
        return Err(ApiError::new(
            ApiErrorCode::Conflict,
            format!(
                "task_id {} was used for another request; use a new id",
                body.task_id
            ),
        )
        .into());
    }
    let task_id = match known {
        Some(known) if !body.force_refresh => known.task_id,
        _ => {
            // Two replicas racing for a new name submit one task; `force_refresh` makes another.
            if !body.force_refresh {
                request.idempotency_key = Some(format!("kernelgym:{}", body.task_id));
            }
            let submitted = submit_evaluation(&state, &caller, request).await?;
            let record = Named {
                task_id: submitted.task_id.clone(),
                request_digest,
            };
            let json = serde_json::to_string(&record).map_err(|e| internal("kernelgym task", e))?;
            let ttl = state.broker.config().result_ttl * TTL_FACTOR;
            state.broker.kv_put(NAMESPACE, &name, &json, ttl).await?;
            submitted.task_id
        }
    };
    let view = match state.broker.wait_terminal(&task_id, wait).await? {
        Some(view) => view,
        None => state
            .broker
            .get_task(&task_id)
            .await?
            .ok_or_else(|| internal("submitted task", "gone"))?,
    };
    if view.status.is_terminal() {
        state.deliveries.served(&view.task_id, view.status);
    }
    Ok(Json(result_of(&body.task_id, &view)))
}

/// KernelGYM's `GET /status/{task_id}`.
#[utoipa::path(
    get, path = "/kernelgym/status/{task_id}", tag = "kernelgym",
    params(("task_id" = String, Path, description = "The client's `task_id`")),
    responses(
        (status = 200, description = "Where it stands", body = KernelGymStatus),
        (status = 404, description = "No evaluation of this tenant has this `task_id` (or it expired)", body = ApiError),
    )
)]
pub async fn status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(task_id): Path<String>,
) -> Result<Json<KernelGymStatus>, HttpError> {
    let named = named(&state, &caller, &task_id).await?;
    Ok(Json(status_of(
        &task_id,
        &task(&state, &named, &task_id).await?,
    )))
}

/// KernelGYM's `GET /results/{task_id}`: the result (still `pending`/`processing` while it
/// runs).
#[utoipa::path(
    get, path = "/kernelgym/results/{task_id}", tag = "kernelgym",
    params(("task_id" = String, Path, description = "The client's `task_id`")),
    responses(
        (status = 200, description = "The evaluation", body = KernelGymResult),
        (status = 404, description = "No evaluation of this tenant has this `task_id` (or it expired)", body = ApiError),
    )
)]
pub async fn results(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(task_id): Path<String>,
) -> Result<Json<KernelGymResult>, HttpError> {
    let named = named(&state, &caller, &task_id).await?;
    let view = task(&state, &named, &task_id).await?;
    if view.status.is_terminal() {
        state.deliveries.served(&view.task_id, view.status);
    }
    Ok(Json(result_of(&task_id, &view)))
}
