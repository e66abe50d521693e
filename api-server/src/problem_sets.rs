//! `GET /problem-sets` and `POST /problem-sets/batches`: the registry's problems as a training
//! run's train and test splits, and the problems of each step of each epoch. Both are pure
//! functions of the request and the registry (`crucible_rl::problem_set`), which every
//! replica loads from the same files: any replica answers any step the same way.

use crate::error::HttpError;
use crate::extract::{ApiJson, ApiQuery};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use crucible_rl::problem_set::{
    ProblemBatch, ProblemBatchRequest, ProblemSet, ProblemSetSelection, problem_batch, problem_set,
};
use crucible_shared::{ApiError, Backend};
use serde::Deserialize;
use utoipa::IntoParams;

/// Query of `GET /problem-sets`: the fields of `ProblemSetSelection`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProblemSetQuery {
    /// KernelBench level of the set's problems.
    #[param(schema_with = crucible_shared::bounds::problem_set_level_schema)]
    pub level: Option<u32>,
    /// Smallest problem id taken (inclusive); left out, the level's first.
    pub start: Option<u32>,
    /// Largest problem id taken (inclusive); left out, the level's last.
    pub end: Option<u32>,
    /// `triton` (default) or `cuda`; carried through, the split does not depend on it.
    #[param(value_type = Option<Backend>)]
    pub backend: Option<String>,
    /// Share of the problems held out.
    #[param(schema_with = crucible_shared::bounds::test_fraction_schema)]
    pub test_fraction: Option<f64>,
    /// Seed of the split and of every epoch's shuffle (default 0).
    pub seed: Option<u64>,
}

impl ProblemSetQuery {
    /// The selection this query names, defaults filled in; an unknown backend is a 422 naming
    /// `backend` (read as text so the error can name it).
    fn selection(self) -> Result<ProblemSetSelection, ApiError> {
        let defaults = ProblemSetSelection::default();
        let backend = match self.backend {
            None => defaults.backend,
            Some(name) => {
                serde_json::from_value(serde_json::Value::String(name.clone())).map_err(|_| {
                    ApiError::invalid(
                        "backend",
                        format!("unknown backend {name:?}; use triton or cuda"),
                    )
                })?
            }
        };
        Ok(ProblemSetSelection {
            level: self.level.unwrap_or(defaults.level),
            start: self.start,
            end: self.end,
            backend,
            test_fraction: self.test_fraction.unwrap_or(defaults.test_fraction),
            seed: self.seed.unwrap_or(defaults.seed),
        })
    }
}

/// A problem set's train and test splits: the registry's problems of `level` with
/// `start ≤ id ≤ end`, held out by SHA-256 of the seed and each problem's content hash
/// (docs/ENVIRONMENT.md), so every replica and every run agree.
#[utoipa::path(
    get, path = "/problem-sets", tag = "problems",
    params(ProblemSetQuery),
    responses(
        (status = 200, description = "The split", body = ProblemSet),
        (status = 422, description = "No problem at that level or in that range, start after end, test_fraction outside [0, 1), or an unknown backend (`field` names it)", body = ApiError),
    )
)]
pub async fn get_problem_set(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ProblemSetQuery>,
) -> Result<Json<ProblemSet>, HttpError> {
    let selection = query.selection()?;
    Ok(Json(problem_set(&selection, &state.problems.list(), "")?))
}

/// The problems of one step of an epoch: the split's problems shuffled by seed and epoch,
/// `batch_size` of them per step, each with its `group_size`; with `steps_per_epoch` and
/// `last_step`, so a trainer's loop is `for epoch: for step in 0..steps_per_epoch`.
#[utoipa::path(
    post, path = "/problem-sets/batches", tag = "problems",
    request_body = ProblemBatchRequest,
    responses(
        (status = 200, description = "The step's problems", body = ProblemBatch),
        (status = 422, description = "A bad selection (as `GET /problem-sets`), a step past the epoch, an empty split, or batch_size × group_size over one `POST /rollouts`", body = ApiError),
    )
)]
pub async fn post_problem_batch(
    State(state): State<AppState>,
    ApiJson(request): ApiJson<ProblemBatchRequest>,
) -> Result<Json<ProblemBatch>, HttpError> {
    Ok(Json(problem_batch(&request, &state.problems.list())?))
}
