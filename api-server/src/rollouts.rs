//! `POST /rollouts` and `GET /batches/{id}/results`: completions in, rewards out. A rollout
//! batch is an evaluation batch in the broker plus, in the broker's key-value cache, one
//! [`RolloutRecord`] per rollout (what scoring needs, none of the text); rewards and feedback
//! are computed when results are read, from the records and the finished tasks. A rollout
//! batch is its tenant's: its records are read only after the batch's owner is checked, and
//! batch idempotency keys are kept per tenant.

use crate::access::authorize_batch;
use crate::auth::Caller;
use crate::error::HttpError;
use crate::extract::{ApiJson, ApiQuery, wait_duration};
use crate::placement;
use crate::problems::ProblemRegistry;
use crate::state::AppState;
use crate::submission::{resolve_reference, spec_of};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use crucible_rl::reward::parse_completion;
use crucible_rl::rollout::{
    MAX_RESULTS_PAGE, RolloutBatchRequest, RolloutBatchResponse, RolloutRecord, RolloutResultsPage,
    page_start, rollout_results,
};
use crucible_shared::{ApiError, BatchId, EvaluateRequest, TenantId, problem_hash};
use crucible_task_manager::{KvNamespace, Submitted};
use serde::Deserialize;
use std::time::Duration;
use utoipa::IntoParams;

/// Key-value namespace of the rollout records of a batch (key: batch id).
const RECORDS_NAMESPACE: KvNamespace = KvNamespace::Rollouts;
/// Key-value namespace of batch idempotency keys (value: batch id).
const BATCH_KEYS_NAMESPACE: KvNamespace = KvNamespace::RolloutBatchKeys;
/// The key-value key of a tenant's batch idempotency key: tenant ids hold no ':', so no two
/// (tenant, key) pairs spell the same key and one tenant's key never finds another's batch.
fn batch_key(tenant: &TenantId, key: &str) -> String {
    format!("{tenant}:{key}")
}

/// Records outlive the result TTL by this factor: a batch's tasks expire `result_ttl` after
/// they finish, and a batch may take a while to finish.
const RECORDS_TTL_FACTOR: u32 = 2;

/// The evaluations a rollout batch needs and the records that score it: each rollout's
/// problem resolved, its completion parsed, its weights settled. `requests[k]` is the
/// evaluation of the rollout `evaluated[k]` names; rollouts without a kernel have none.
pub struct RolloutPlan {
    /// One per rollout, in the batch's order: what scores it once its evaluation is done.
    pub records: Vec<RolloutRecord>,
    /// The evaluations to submit, one per rollout with a kernel.
    pub requests: Vec<EvaluateRequest>,
    /// For each of `requests`, the index of its rollout in `records`.
    pub evaluated: Vec<usize>,
}

/// Validates a rollout batch and turns it into its [`RolloutPlan`], before anything is
/// submitted: an error names the offending rollout (`rollouts[3].problem`).
pub fn plan(
    batch: &RolloutBatchRequest,
    problems: &ProblemRegistry,
) -> Result<RolloutPlan, ApiError> {
    batch.validate()?;
    let mut out = RolloutPlan {
        records: Vec::with_capacity(batch.rollouts.len()),
        requests: Vec::new(),
        evaluated: Vec::new(),
    };
    for (i, rollout) in batch.rollouts.iter().enumerate() {
        let prefix = format!("rollouts[{i}].");
        let reference_code = resolve_reference(
            rollout.problem,
            rollout.reference_code.clone(),
            problems,
            &prefix,
        )?;
        let parsed = parse_completion(&rollout.completion);
        let weights = rollout
            .weights
            .unwrap_or_default()
            .apply(rollout.profile.weights());
        if let Some(kernel) = parsed.kernel.clone() {
            let mut request = batch
                .eval
                .request(reference_code.clone(), kernel, rollout.backend);
            request.problem = rollout.problem;
            request.validate_with_prefix(&prefix)?;
            out.requests.push(request);
            out.evaluated.push(i);
        }
        out.records.push(RolloutRecord {
            id: rollout.id.clone(),
            task_id: None,
            problem: rollout.problem,
            problem_hash: problem_hash(&reference_code),
            turn: rollout.turn,
            profile: rollout.profile,
            weights,
            facts: parsed.facts(),
            decoy_reward: rollout.decoy_reward,
        });
    }
    Ok(out)
}

/// Places and submits a plan's evaluations as one batch of `caller`'s tenant and sets each
/// record's task: the one submission path of rollouts and episode turns (`episodes`).
pub async fn submit_plan(
    state: &AppState,
    caller: &Caller,
    plan: &mut RolloutPlan,
) -> Result<(BatchId, Vec<Submitted>), HttpError> {
    // One class per group of rollouts of a problem (or the batch's `eval.device_class`).
    placement::place_batch(state, &mut plan.requests, |_| {
        "eval.device_class".to_owned()
    })
    .await?;
    let specs = std::mem::take(&mut plan.requests)
        .into_iter()
        .map(|request| spec_of(request, caller))
        .collect();
    // A batch even when nothing is evaluated: its results are read the same way.
    let (batch_id, submitted) = state.broker.submit_batch(caller.tenant_id(), specs).await?;
    for (k, s) in submitted.iter().enumerate() {
        plan.records[plan.evaluated[k]].task_id = Some(s.task_id.clone());
    }
    Ok((batch_id, submitted))
}

/// Score a batch of model completions: each rollout's kernel is extracted and evaluated,
/// and `GET /batches/{batch_id}/results` streams its reward, components, result and feedback.
/// Without `eval.device_class`, the rollouts of each problem (a GRPO group) are placed together
/// on one live device class, so their speedups are comparable.
#[utoipa::path(
    post, path = "/rollouts", tag = "rollouts",
    request_body = RolloutBatchRequest,
    responses(
        (status = 202, description = "Accepted; read results from `GET /batches/{batch_id}/results`", body = RolloutBatchResponse),
        (status = 400, description = "Malformed JSON", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
        (status = 422, description = "A field is out of range, or an unknown problem (`VALIDATION`); no live worker has `eval.device_class` (`DEVICE_CLASS_UNAVAILABLE`)", body = ApiError),
        (status = 429, description = "Queue full (`QUEUE_FULL`) or the tenant's `max_queued` reached (`QUOTA_EXCEEDED`); no rollout was accepted", body = ApiError),
    )
)]
pub async fn submit_rollouts(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(batch): ApiJson<RolloutBatchRequest>,
) -> Result<(StatusCode, Json<RolloutBatchResponse>), HttpError> {
    let mut plan = plan(&batch, &state.problems)?;
    let broker = &state.broker;
    let ttl = broker.config().result_ttl;
    let (rollouts, evaluated) = (plan.records.len(), plan.requests.len());
    let answer = |batch_id, deduplicated| RolloutBatchResponse {
        batch_id,
        rollouts,
        evaluated,
        deduplicated,
    };
    let tenant = caller.tenant_id();
    let idempotency_key = batch
        .idempotency_key
        .as_deref()
        .map(|k| batch_key(tenant, k));
    if let Some(key) = &idempotency_key
        && let Some(earlier) = broker.kv_get(BATCH_KEYS_NAMESPACE, key).await?
    {
        return Ok((StatusCode::ACCEPTED, Json(answer(BatchId(earlier), true))));
    }
    let (batch_id, submitted) = submit_plan(&state, &caller, &mut plan).await?;
    let records = serde_json::to_string(&plan.records)
        .map_err(|e| ApiError::new(crucible_shared::ApiErrorCode::Internal, e.to_string()))?;
    broker
        .kv_put(
            RECORDS_NAMESPACE,
            batch_id.as_str(),
            &records,
            ttl * RECORDS_TTL_FACTOR,
        )
        .await?;
    if let Some(key) = &idempotency_key {
        broker
            .kv_put(BATCH_KEYS_NAMESPACE, key, batch_id.as_str(), ttl)
            .await?;
    }
    state.metrics.rollouts_submitted.inc_by(rollouts as u64);
    tracing::info!(
        batch_id = %batch_id,
        tenant = %caller.tenant.name,
        rollouts,
        evaluated,
        cached = submitted.iter().filter(|s| s.cached).count(),
        coalesced = submitted.iter().filter(|s| s.coalesced).count(),
        "rollouts submitted"
    );
    Ok((StatusCode::ACCEPTED, Json(answer(batch_id, false))))
}

/// Query of `GET /batches/{id}/results`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ResultsQuery {
    /// The `cursor` of the previous page (0, the default, for the first).
    #[param(minimum = 0)]
    pub after: Option<u64>,
    /// Seconds to wait for a result when none is ready yet ([`crucible_shared::bounds::WAIT_S`]).
    #[param(schema_with = crucible_shared::bounds::wait_schema)]
    pub wait: Option<f64>,
    /// Most finished evaluations in this page ([`crucible_shared::bounds::RESULTS_PAGE`]).
    #[param(schema_with = crucible_shared::bounds::results_limit_schema)]
    pub limit: Option<usize>,
}

/// A rollout batch's results in the order they finished, from the `after` cursor on; with
/// `wait`, long-polls until at least one is ready. Pass the returned `cursor` as `after`.
#[utoipa::path(
    get, path = "/batches/{id}/results", tag = "rollouts",
    params(("id" = String, Path, description = "Batch id of `POST /rollouts`"), ResultsQuery),
    responses(
        (status = 200, description = "The next results", body = RolloutResultsPage),
        (status = 404, description = "Unknown or expired rollout batch, or another tenant's", body = ApiError),
        (status = 422, description = "A parameter is out of range", body = ApiError),
    )
)]
pub async fn batch_results(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<ResultsQuery>,
) -> Result<Json<RolloutResultsPage>, HttpError> {
    let wait = wait_duration(query.wait)?.unwrap_or(Duration::ZERO);
    let limit = query.limit.unwrap_or(MAX_RESULTS_PAGE);
    if !(1..=MAX_RESULTS_PAGE).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("{limit} is out of range 1-{MAX_RESULTS_PAGE}"),
        )
        .into());
    }
    let after = query.after.unwrap_or(0);
    let batch_id = BatchId(id);
    authorize_batch(&state, &caller, &batch_id, "rollout batch").await?;
    let not_found = || ApiError::not_found(format!("rollout batch {batch_id}"));
    let Some(records) = stored_records(&state, &batch_id).await? else {
        return Err(not_found().into());
    };
    let has_no_kernel = records.iter().any(|r| r.task_id.is_none());
    let (include_no_kernel, log_after) = page_start(has_no_kernel, after);
    // The rollouts without a kernel are ready now: no reason to wait.
    let wait = if include_no_kernel {
        Duration::ZERO
    } else {
        wait
    };
    let task_limit = limit.saturating_sub(usize::from(include_no_kernel)).max(1);
    let page = state
        .broker
        .batch_finished(&batch_id, log_after, task_limit, wait)
        .await?
        .ok_or_else(not_found)?;
    for (id, view) in &page.tasks {
        if let Some(view) = view {
            state.deliveries.served(id, view.status);
        }
    }
    let results = rollout_results(&records, include_no_kernel, &page.tasks);
    let offset = u64::from(has_no_kernel);
    let cursor = offset + log_after + page.tasks.len() as u64;
    Ok(Json(RolloutResultsPage {
        batch_id,
        results,
        cursor,
        done: cursor >= offset + page.distinct,
        total: records.len(),
    }))
}

/// The rollout records of a batch; None when it is not a rollout batch (or they expired).
/// Read only after the caller's ownership of the batch is checked.
pub async fn stored_records(
    state: &AppState,
    batch_id: &BatchId,
) -> Result<Option<Vec<RolloutRecord>>, HttpError> {
    let Some(json) = state
        .broker
        .kv_get(RECORDS_NAMESPACE, batch_id.as_str())
        .await?
    else {
        return Ok(None);
    };
    let records = serde_json::from_str(&json).map_err(|e| {
        ApiError::new(
            crucible_shared::ApiErrorCode::Internal,
            format!("stored rollout records: {e}"),
        )
    })?;
    Ok(Some(records))
}
