//! `GET /batches/{id}/report`: the checkpoint evaluation of a batch, per level and overall
//! (correct rate, fast_p, mean and geometric-mean speedup, hacks and decoys). The arithmetic is
//! `crucible_rl::report`'s; this module only gathers the samples: a rollout batch's
//! records (one sample per rollout, its level from the problem it named), or an evaluation
//! batch's tasks (one per task, its level from the problem its request named).

use crate::access::authorize_batch;
use crate::auth::Caller;
use crate::error::HttpError;
use crate::rollouts::stored_records;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::{Extension, Json};
use crucible_rl::report::{BatchReport, ReportSource, Sample, SampleOutcome};
use crucible_shared::{ApiError, BatchId, TaskId, TaskView};
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;

/// Task specs read from the broker at once for an evaluation batch's report: a 1,000-task
/// batch costs tens of round trips' time, not a thousand, and the broker's connection is
/// never asked for more than this many answers at a time.
const SPEC_READS_IN_FLIGHT: usize = 32;

/// A batch's report: per KernelBench level (samples of no registered problem in a group with
/// `level` null) and overall. Every rate is over all samples: one without a verdict (failed,
/// cancelled, expired, still running, or a rollout with no kernel) counts as not correct.
/// Works on `POST /rollouts` and `POST /evaluate/batch` batches alike, while their tasks are
/// kept (the result TTL); `done` says whether any sample is still running.
#[utoipa::path(
    get, path = "/batches/{id}/report", tag = "rollouts",
    params(("id" = String, Path, description = "Batch id of `POST /rollouts` or `POST /evaluate/batch`")),
    responses(
        (status = 200, description = "The report", body = BatchReport),
        (status = 404, description = "Unknown or expired batch, or another tenant's", body = ApiError),
    )
)]
pub async fn batch_report(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<BatchReport>, HttpError> {
    let batch_id = BatchId(id);
    authorize_batch(&state, &caller, &batch_id, "batch").await?;
    let status = state
        .broker
        .batch_status(&batch_id, true)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("batch {batch_id}")))?;
    let views: HashMap<TaskId, TaskView> = status
        .tasks
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.task_id.clone(), t))
        .collect();
    let (source, samples): (_, Vec<Sample>) = match stored_records(&state, &batch_id).await? {
        Some(records) => {
            let samples = records
                .iter()
                .map(|r| Sample {
                    level: r.problem.map(|p| p.level),
                    outcome: match &r.task_id {
                        None => SampleOutcome::NoKernel,
                        Some(t) => SampleOutcome::of_task(views.get(t)),
                    },
                })
                .collect();
            (ReportSource::Rollouts, samples)
        }
        None => {
            // The request's `problem` is kept in its spec (the view does not carry it).
            // Owned ids: a stream of borrowed ones trips the `Send` check of axum's handler.
            let (state, views) = (&state, &views);
            let samples = futures::stream::iter(status.task_ids.iter().cloned())
                .map(|id| async move {
                    let spec = state.broker.get_spec(&id).await?;
                    Ok::<_, HttpError>(Sample {
                        level: spec.and_then(|s| s.request.problem).map(|p| p.level),
                        outcome: SampleOutcome::of_task(views.get(&id)),
                    })
                })
                .buffered(SPEC_READS_IN_FLIGHT)
                .try_collect()
                .await?;
            (ReportSource::Evaluations, samples)
        }
    };
    let report = BatchReport::of(batch_id, source, &samples);
    tracing::debug!(batch_id = %report.batch_id, samples = samples.len(), "batch report");
    Ok(Json(report))
}
