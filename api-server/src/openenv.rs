//! OpenEnv over episodes: `reset`, `step` and `state` as OpenEnv's environment servers answer
//! them, over HTTP (`/openenv/reset`, `/openenv/step`, `/openenv/state`, with `health`,
//! `metadata` and `schema`) and over a WebSocket session (`/openenv/ws`, `openenv/ws.rs`,
//! what openenv-core's `EnvClient` speaks). Every answer is made by the episode handlers
//! (`episodes.rs`): a session is an episode, a step is one of its turns, so OpenEnv clients
//! get the same queue, checks, rewards and records as `POST /episodes`, and any replica
//! serves any step of an HTTP session (its state is the episode's, in the broker).

pub mod ws;

use crate::auth::Caller;
use crate::episodes::{get_episode, get_turn, post_turn, start_episodes};
use crate::error::HttpError;
use crate::extract::{ApiJson, ApiQuery, WaitQuery};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use crucible_rl::episode::{EpisodeView, TurnRequest, TurnStatus, TurnView};
use crucible_rl::openenv::{
    OpenEnvAction, OpenEnvHealth, OpenEnvMetadata, OpenEnvReset, OpenEnvResult, OpenEnvState,
    OpenEnvStepRequest, default_episode, episode_observation, episode_state, pick_problem,
    started_observation, turn_observation,
};
use crucible_rl::problem_set::{Split, problem_set};
use crucible_shared::bounds::{OPENENV_STEP_RETRIES, WAIT_S};
use crucible_shared::{ApiError, EpisodeId};
use serde::Deserialize;
use std::time::Duration;
use tokio::time::Instant;
use utoipa::IntoParams;

/// The episode `id` as the caller may read it, its turns scored as far as they are.
async fn read_episode(
    state: &AppState,
    caller: &Caller,
    id: &EpisodeId,
) -> Result<EpisodeView, HttpError> {
    let Json(view) = get_episode(
        State(state.clone()),
        Extension(caller.clone()),
        Path(id.0.clone()),
        ApiQuery(WaitQuery { wait: None }),
    )
    .await?;
    Ok(view)
}

/// A seed from the OS RNG, for a `reset` that names neither a problem nor a seed.
fn random_seed() -> Result<u64, HttpError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| {
        ApiError::new(
            crucible_shared::ApiErrorCode::Internal,
            format!("os rng: {e}"),
        )
    })?;
    Ok(u64::from_le_bytes(bytes))
}

/// `reset`: attach to the episode `episode_id` names, or start one (of the problem the episode
/// names, else the one `seed` picks from the problem set's split), and observe its prompt.
pub(crate) async fn reset(
    state: &AppState,
    caller: &Caller,
    reset: OpenEnvReset,
) -> Result<OpenEnvResult, HttpError> {
    reset.validate()?;
    if let Some(id) = &reset.episode_id {
        return Ok(episode_observation(&read_episode(state, caller, id).await?));
    }
    let mut episode = reset.episode.clone().unwrap_or_else(default_episode);
    if !reset.names_problem() {
        if state.problems.list().is_empty() {
            return Err(ApiError::invalid(
                "episode",
                "this server has no problem registry (CRUCIBLE_PROBLEMS or KERNELBENCH_ROOT) \
                 to pick from: name the problem with episode.problem or episode.reference_code",
            )
            .into());
        }
        let selection = reset.problem_set.clone().unwrap_or_default();
        let set = problem_set(&selection, &state.problems.list(), "problem_set.")?;
        let split = match reset.split {
            Split::Train => &set.train,
            Split::Test => &set.test,
        };
        let seed = match reset.seed {
            Some(seed) => seed,
            None => random_seed()?,
        };
        episode.problem = Some(pick_problem(split, seed).ok_or_else(|| {
            ApiError::invalid(
                "split",
                format!("the problem set's {} split is empty", reset.split.as_str()),
            )
        })?);
    }
    let problem = episode.problem;
    let (_, Json(started)) = start_episodes(
        State(state.clone()),
        Extension(caller.clone()),
        ApiJson(episode),
    )
    .await
    .map_err(|HttpError(mut e)| {
        // The episode's fields are `episode.*` here.
        if let Some(field) = &mut e.field {
            *field = format!("episode.{field}");
        }
        HttpError(e)
    })?;
    Ok(started_observation(&started, problem))
}

/// `step`: post `action` as turn `turn` of `episode` (left out, the API's default: the next
/// turn, or the last one for the same completion again) and wait up to `wait` for its score.
/// A turn the service failed to evaluate is evaluated again, [`OPENENV_STEP_RETRIES`] times;
/// the turn returned is scored, still pending at `wait`, or failed after those.
pub(crate) async fn step(
    state: &AppState,
    caller: &Caller,
    episode: &EpisodeView,
    turn: Option<u32>,
    action: OpenEnvAction,
    wait: Duration,
) -> Result<TurnView, HttpError> {
    let deadline = Instant::now() + wait;
    // Each long-poll at most `?wait=`'s longest.
    let poll = || {
        let left = deadline.saturating_duration_since(Instant::now());
        Some(left.min(Duration::from_secs_f64(WAIT_S.max)).as_secs_f64())
    };
    let mut target = turn;
    let mut evaluations = 0;
    loop {
        let (_, Json(mut view)) = post_turn(
            State(state.clone()),
            Extension(caller.clone()),
            Path(episode.episode_id.0.clone()),
            ApiQuery(WaitQuery { wait: poll() }),
            ApiJson(TurnRequest {
                completion: action.completion.clone(),
                turn: target,
            }),
        )
        .await?;
        evaluations += 1;
        // Posted again, the same completion names this turn (and evaluates it again if failed).
        target = Some(view.turn);
        while view.status == TurnStatus::Pending && Instant::now() < deadline {
            let Json(next) = get_turn(
                State(state.clone()),
                Extension(caller.clone()),
                Path((episode.episode_id.0.clone(), view.turn.to_string())),
                ApiQuery(WaitQuery { wait: poll() }),
            )
            .await?;
            view = next;
        }
        if view.status != TurnStatus::Failed || evaluations > OPENENV_STEP_RETRIES {
            return Ok(view);
        }
        tracing::info!(
            episode_id = %episode.episode_id,
            turn = view.turn,
            evaluations,
            "openenv step evaluated again after a service failure"
        );
    }
}

/// Answers OpenEnv's `GET /health`: this replica serves sessions.
#[utoipa::path(
    get, path = "/openenv/health", tag = "openenv",
    responses((status = 200, description = "Serving", body = OpenEnvHealth))
)]
pub async fn health() -> Json<OpenEnvHealth> {
    Json(OpenEnvHealth {
        status: "healthy".into(),
    })
}

/// Answers OpenEnv's `GET /metadata`: what this environment is.
#[utoipa::path(
    get, path = "/openenv/metadata", tag = "openenv",
    responses((status = 200, description = "The environment", body = OpenEnvMetadata))
)]
pub async fn metadata() -> Json<OpenEnvMetadata> {
    Json(OpenEnvMetadata {
        name: "crucible".into(),
        description: "Write a CUDA or Triton kernel for a KernelBench problem; each step is one \
                      turn, compiled, checked against the PyTorch reference, timed and scored \
                      on a GPU (multi-turn refinement, docs/ENVIRONMENT.md)"
            .into(),
        version: env!("CARGO_PKG_VERSION").into(),
        documentation_url: "docs/TRAINERS.md#openenv".into(),
    })
}

/// Answers OpenEnv's `GET /schema`: the JSON schemas of an action, an observation and the
/// state, from the same types the routes read and write.
#[utoipa::path(
    get, path = "/openenv/schema", tag = "openenv",
    responses((status = 200, description = "`{action, observation, state}` JSON schemas", body = Object))
)]
pub async fn schema() -> Json<serde_json::Value> {
    Json(crucible_rl::openenv::schemas())
}

/// Starts an episode (or attaches to one) and answers its first observation. Over HTTP the
/// session is the observation's `episode_id`: name it in every step.
#[utoipa::path(
    post, path = "/openenv/reset", tag = "openenv",
    request_body(content = OpenEnvReset, description = "Which episode; `{}` takes every default"),
    responses(
        (status = 200, description = "The episode's first (or next) prompt", body = OpenEnvResult),
        (status = 404, description = "`episode_id` names no episode of the caller's", body = ApiError),
        (status = 409, description = "`prompt_option` raicl on a server without a kernel corpus", body = ApiError),
        (status = 422, description = "A field is out of range, an unknown problem, or no problem to pick from", body = ApiError),
    )
)]
pub async fn http_reset(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<OpenEnvReset>,
) -> Result<Json<OpenEnvResult>, HttpError> {
    Ok(Json(reset(&state, &caller, body).await?))
}

/// One turn of the episode `episode_id` names: its reward, feedback and next prompt.
#[utoipa::path(
    post, path = "/openenv/step", tag = "openenv",
    request_body = OpenEnvStepRequest,
    responses(
        (status = 200, description = "The turn, scored (or failed after its evaluations again: `observation.last_turn.status`)", body = OpenEnvResult),
        (status = 202, description = "Not scored within `timeout_s`: post the same step again to go on waiting", body = OpenEnvResult),
        (status = 404, description = "Unknown or expired episode, or another tenant's", body = ApiError),
        (status = 409, description = "The episode is done, or the turn was posted with another completion (`CONFLICT`)", body = ApiError),
        (status = 422, description = "A field is out of range", body = ApiError),
        (status = 429, description = "Queue full or the tenant's quota reached", body = ApiError),
    )
)]
pub async fn http_step(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<OpenEnvStepRequest>,
) -> Result<(StatusCode, Json<OpenEnvResult>), HttpError> {
    let wait = Duration::from_secs_f64(body.wait_s()?);
    let episode = read_episode(&state, &caller, &body.episode_id).await?;
    if let Some(request_id) = &body.request_id {
        tracing::debug!(episode_id = %body.episode_id, request_id, "openenv step");
    }
    let view = step(&state, &caller, &episode, body.turn, body.action, wait).await?;
    let status = if view.status == TurnStatus::Pending {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(turn_observation(&episode, &view))))
}

/// Query of `GET /openenv/state`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StateQuery {
    /// The episode, from `reset`'s observation (required: HTTP has no session; a query
    /// parameter is optional in the document as every one of ours is, and its absence a 422).
    pub episode_id: Option<String>,
}

/// Where the episode `episode_id` names stands: turns posted, rewards, done.
#[utoipa::path(
    get, path = "/openenv/state", tag = "openenv",
    params(StateQuery),
    responses(
        (status = 200, description = "The episode's state", body = OpenEnvState),
        (status = 404, description = "Unknown or expired episode, or another tenant's", body = ApiError),
    )
)]
pub async fn http_state(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(query): ApiQuery<StateQuery>,
) -> Result<Json<OpenEnvState>, HttpError> {
    let id = query.episode_id.map(EpisodeId).ok_or_else(|| {
        ApiError::invalid(
            "episode_id",
            "is required over HTTP, which has no session: the episode_id of reset's observation",
        )
    })?;
    Ok(Json(episode_state(
        &read_episode(&state, &caller, &id).await?,
    )))
}
