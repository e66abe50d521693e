//! Episodes (Kevin-style multi-turn refinement): `POST /episodes` starts one (or a GRPO group)
//! with the problem's first prompt ([`first_prompt`]); `POST /episodes/{id}/turns` evaluates a
//! turn's completion as a one-rollout batch through the rollouts' own plan and submission
//! (`rollouts.rs`), so a turn takes the same queue, integrity checks and scoring as
//! `POST /rollouts`; reads score it from the finished task (`episodes/views.rs`).
//!
//! State lives in the broker's key-value cache (namespace `episodes`): the episode's record
//! under its id, each turn's under `{id}:{turn}`, so any replica serves any turn. A turn is
//! taken with a put-if-absent: of two replicas racing for a turn one stores its record; the
//! other answers that record (same completion: identical evaluations coalesce into one task)
//! or 409 (another completion), and cancels the task it made in vain.

mod views;

use crate::auth::Caller;
use crate::error::HttpError;
use crate::extract::{ApiJson, ApiQuery, WaitQuery, wait_duration};
use crate::prompts::first_prompt;
use crate::rollouts::{plan, submit_plan};
use crate::state::AppState;
use crate::submission::resolve_reference;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use crucible_rl::episode::{
    EpisodeRecord, EpisodeRequest, EpisodeView, EpisodesStarted, TurnRecord, TurnRequest,
    TurnStatus, TurnView, completion_digest, turn_status,
};
use crucible_rl::prompt::PromptSettings;
use crucible_rl::reward::parse_completion;
use crucible_rl::rollout::{Rollout, RolloutBatchRequest};
use crucible_shared::{
    ApiError, ApiErrorCode, EpisodeGroupId, EpisodeId, MAX_CODE_BYTES,
    bounds::MAX_PROMPT_KERNEL_BYTES,
};
use crucible_task_manager::KvNamespace;
use std::time::Duration;
use views::{score_turns, turn_views};

/// Key-value namespace of episodes and their turns.
const NAMESPACE: KvNamespace = KvNamespace::Episodes;
/// Episode and turn records outlive the result TTL by this factor, as rollout records do; the
/// episode's record is written again at each new turn, so an episode lives this long past its
/// latest turn.
const TTL_FACTOR: u32 = 2;

/// The key of turn `turn` of `episode`.
fn turn_key(episode: &EpisodeId, turn: u32) -> String {
    format!("{episode}:{turn}")
}

fn internal(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::new(ApiErrorCode::Internal, format!("{what}: {e}"))
}

fn conflict(message: String) -> HttpError {
    ApiError::new(ApiErrorCode::Conflict, message).into()
}

/// Start an episode of a problem (or `group_size` of them: a GRPO group): its first prompt,
/// and the ids to post turns to.
#[utoipa::path(
    post, path = "/episodes", tag = "episodes",
    request_body = EpisodeRequest,
    responses(
        (status = 201, description = "Started; post the first turn's completion to `POST /episodes/{episode_id}/turns`", body = EpisodesStarted),
        (status = 409, description = "`prompt_option` raicl on a server without a kernel corpus (`CRUCIBLE_CORPUS`)", body = ApiError),
        (status = 422, description = "A field is out of range, an unknown problem, or a prompt option the server cannot serve", body = ApiError),
    )
)]
pub async fn start_episodes(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(request): ApiJson<EpisodeRequest>,
) -> Result<(StatusCode, Json<EpisodesStarted>), HttpError> {
    request.validate()?;
    let reference_code = resolve_reference(
        request.problem,
        request.reference_code.clone(),
        &state.problems,
        "",
    )?;
    // The evaluation settings are checked now rather than at the first turn: the same check a
    // turn's request gets, on a stand-in kernel.
    request
        .eval
        .request(
            reference_code.clone(),
            "class ModelNew: pass".into(),
            request.backend,
        )
        .validate_with_prefix("eval.")?;
    let settings = PromptSettings {
        option: request.prompt_option,
        backend: request.backend,
        thinking: request.asks_for_thinking(),
        // few_shot and raicl carry the server's default number of examples (kernel_rl's
        // raicl_k, 3).
        k: None,
    };
    let prompt = first_prompt(&state, &reference_code, request.problem, &settings)?;
    let group_id = request.group_size.map(|_| EpisodeGroupId::random());
    let record = EpisodeRecord {
        tenant: caller.tenant_id().clone(),
        group_id: group_id.clone(),
        problem: request.problem,
        reference_code,
        profile: request.profile,
        weights: request.weights,
        decoy_reward: request.decoy_reward,
        backend: request.backend,
        max_turns: request.max_turns,
        gamma: request.gamma,
        early_stop_on_correct: request.early_stop_on_correct,
        speedup_threshold: request.speedup_threshold,
        eval: request.eval.clone(),
        prompt: prompt.clone(),
    };
    let json = serde_json::to_string(&record).map_err(|e| internal("episode record", e))?;
    let ttl = state.broker.config().result_ttl * TTL_FACTOR;
    let episode_ids: Vec<EpisodeId> = (0..request.group_size.unwrap_or(1))
        .map(|_| EpisodeId::random())
        .collect();
    for id in &episode_ids {
        state
            .broker
            .kv_put(NAMESPACE, id.as_str(), &json, ttl)
            .await?;
    }
    tracing::info!(
        tenant = %caller.tenant.name,
        episodes = episode_ids.len(),
        group_id = group_id.as_ref().map(|g| g.as_str()),
        max_turns = record.max_turns,
        "episodes started"
    );
    Ok((
        StatusCode::CREATED,
        Json(EpisodesStarted {
            episode_id: episode_ids[0].clone(),
            episode_ids,
            group_id,
            prompt,
            max_turns: record.max_turns,
            gamma: record.gamma,
        }),
    ))
}

/// The episode's record, if `caller` may see it (its tenant; reads also the admin): 404 for
/// anyone else, as for an unknown episode.
async fn load_episode(
    state: &AppState,
    caller: &Caller,
    id: &EpisodeId,
    continuing: bool,
) -> Result<EpisodeRecord, HttpError> {
    let not_found = || ApiError::not_found(format!("episode {id}"));
    let json = state
        .broker
        .kv_get(NAMESPACE, id.as_str())
        .await?
        .ok_or_else(not_found)?;
    let record: EpisodeRecord =
        serde_json::from_str(&json).map_err(|e| internal("stored episode", e))?;
    let allowed = if continuing {
        &record.tenant == caller.tenant_id()
    } else {
        caller.owns(Some(&record.tenant))
    };
    if !allowed {
        return Err(not_found().into());
    }
    Ok(record)
}

/// The turns posted so far, in order (a turn is only ever posted after the one before it).
async fn load_turns(
    state: &AppState,
    id: &EpisodeId,
    max_turns: u32,
) -> Result<Vec<TurnRecord>, HttpError> {
    // Every possible turn's key at once (max_turns, at most 16): one round trip's
    // time instead of one per turn; the turns are the stored prefix.
    let keys: Vec<String> = (0..max_turns).map(|t| turn_key(id, t)).collect();
    let stored =
        futures::future::try_join_all(keys.iter().map(|k| state.broker.kv_get(NAMESPACE, k)))
            .await?;
    stored
        .into_iter()
        .map_while(|json| json)
        .map(|json| {
            serde_json::from_str(&json).map_err(|e| internal("stored episode turn", e).into())
        })
        .collect()
}

/// Submits turn `turn`'s completion as a one-rollout batch of the episode's tenant: the
/// rollouts' plan (parsing, weights, the evaluation request) and submission, unchanged.
/// Returns the turn's record (and its JSON) and whether its task is the caller's alone (neither coalesced
/// with an open task nor answered from the cache), so a race loser may cancel it.
async fn submit_turn(
    state: &AppState,
    caller: &Caller,
    episode_id: &EpisodeId,
    episode: &EpisodeRecord,
    turn: u32,
    completion: &str,
) -> Result<(TurnRecord, String, bool), HttpError> {
    let rollout = Rollout {
        id: turn_key(episode_id, turn),
        problem: episode.problem,
        reference_code: episode
            .problem
            .is_none()
            .then(|| episode.reference_code.clone()),
        completion: completion.to_owned(),
        backend: episode.backend,
        turn,
        profile: episode.profile,
        weights: episode.weights,
        decoy_reward: episode.decoy_reward,
    };
    let batch = RolloutBatchRequest {
        rollouts: vec![rollout],
        eval: episode.eval.clone(),
        idempotency_key: None,
    };
    let mut plan = plan(&batch, &state.problems)?;
    let (batch_id, submitted) = submit_plan(state, caller, &mut plan).await?;
    let fresh = submitted.first().is_some_and(|s| !s.coalesced && !s.cached);
    let kernel = parse_completion(completion)
        .kernel
        .map(|k| crucible_shared::clip(&k, MAX_PROMPT_KERNEL_BYTES.min(MAX_CODE_BYTES)));
    let record = TurnRecord {
        completion_digest: completion_digest(completion),
        kernel,
        batch_id,
        record: plan.records.remove(0),
    };
    let json = serde_json::to_string(&record).map_err(|e| internal("turn record", e))?;
    Ok((record, json, fresh))
}

/// Post the completion of a turn: it is evaluated like a rollout, and the answer carries its
/// reward, feedback, whether the episode is done, the next prompt, and at the end the returns.
/// Posting the same completion for the same turn again returns that turn (no second
/// evaluation); after a service failure (status `failed`) it evaluates it again.
#[utoipa::path(
    post, path = "/episodes/{id}/turns", tag = "episodes",
    request_body = TurnRequest,
    params(("id" = String, Path, description = "Episode id of `POST /episodes`"), WaitQuery),
    responses(
        (status = 200, description = "The turn, scored (or failed: post it again)", body = TurnView),
        (status = 202, description = "The turn, still being evaluated after `wait`: read it with `GET /episodes/{id}/turns/{turn}?wait=`", body = TurnView),
        (status = 404, description = "Unknown or expired episode, or another tenant's", body = ApiError),
        (status = 409, description = "The turn was posted with another completion, is not the next one, the previous turn is not scored yet, or the episode is done (`CONFLICT`)", body = ApiError),
        (status = 422, description = "A field is out of range", body = ApiError),
        (status = 429, description = "Queue full (`QUEUE_FULL`) or the tenant's `max_queued` reached (`QUOTA_EXCEEDED`)", body = ApiError),
    )
)]
pub async fn post_turn(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<WaitQuery>,
    ApiJson(body): ApiJson<TurnRequest>,
) -> Result<(StatusCode, Json<TurnView>), HttpError> {
    body.validate()?;
    let wait = wait_duration(query.wait)?.unwrap_or(Duration::ZERO);
    let episode_id = EpisodeId(id);
    let episode = load_episode(&state, &caller, &episode_id, true).await?;
    let mut turns = load_turns(&state, &episode_id, episode.max_turns).await?;
    let digest = completion_digest(&body.completion);
    let next = turns.len() as u32;
    let repeats_last = turns.last().is_some_and(|t| t.completion_digest == digest);
    let target = body
        .turn
        .unwrap_or(if repeats_last { next - 1 } else { next });
    let ttl = state.broker.config().result_ttl * TTL_FACTOR;
    if target < next {
        let taken = &turns[target as usize];
        if taken.completion_digest != digest {
            return Err(conflict(format!(
                "turn {target} of episode {episode_id} was posted with another completion"
            )));
        }
        let scored = score_turns(
            &state,
            &turns[target as usize..=target as usize],
            Duration::ZERO,
        )
        .await?;
        if turn_status(scored[0].as_ref()) == TurnStatus::Failed {
            // A service failure: the same completion is evaluated again.
            let (record, json, _) = submit_turn(
                &state,
                &caller,
                &episode_id,
                &episode,
                target,
                &body.completion,
            )
            .await?;
            state
                .broker
                .kv_put(NAMESPACE, &turn_key(&episode_id, target), &json, ttl)
                .await?;
            tracing::info!(episode_id = %episode_id, turn = target, "episode turn evaluated again");
            turns[target as usize] = record;
        }
    } else if target > next {
        return Err(conflict(format!(
            "turn {next} of episode {episode_id} comes next, not turn {target}"
        )));
    } else {
        check_next_turn(&state, &episode, &episode_id, &turns).await?;
        let (record, json, fresh) = submit_turn(
            &state,
            &caller,
            &episode_id,
            &episode,
            target,
            &body.completion,
        )
        .await?;
        let key = turn_key(&episode_id, target);
        let stored = match state
            .broker
            .kv_put_if_absent(NAMESPACE, &key, &json, ttl)
            .await?
        {
            None => record,
            Some(theirs) => {
                // Another replica took this turn first.
                let theirs: TurnRecord = serde_json::from_str(&theirs)
                    .map_err(|e| internal("stored episode turn", e))?;
                if fresh
                    && theirs.record.task_id != record.record.task_id
                    && let Some(task) = &record.record.task_id
                {
                    state.broker.cancel(task).await?;
                }
                if theirs.completion_digest != digest {
                    return Err(conflict(format!(
                        "turn {target} of episode {episode_id} was posted with another completion"
                    )));
                }
                theirs
            }
        };
        let episode_json =
            serde_json::to_string(&episode).map_err(|e| internal("episode record", e))?;
        state
            .broker
            .kv_put(NAMESPACE, episode_id.as_str(), &episode_json, ttl)
            .await?;
        tracing::info!(episode_id = %episode_id, turn = target, "episode turn submitted");
        turns.push(stored);
    }
    turns.truncate(target as usize + 1);
    let scores = score_turns(&state, &turns, wait).await?;
    let view = turn_views(&episode, &episode_id, &turns, scores)
        .pop()
        .expect("at least the posted turn");
    let status = if view.status == TurnStatus::Pending {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view)))
}

/// 409 unless a new turn may follow `turns`: the episode is not done and the last turn is
/// scored.
async fn check_next_turn(
    state: &AppState,
    episode: &EpisodeRecord,
    episode_id: &EpisodeId,
    turns: &[TurnRecord],
) -> Result<(), HttpError> {
    let next = turns.len() as u32;
    if next >= episode.max_turns {
        return Err(conflict(format!(
            "episode {episode_id} is done: it had all its {} turns",
            episode.max_turns
        )));
    }
    if turns.is_empty() {
        return Ok(());
    }
    let scores = score_turns(state, turns, Duration::ZERO).await?;
    let last = turn_views(episode, episode_id, turns, scores)
        .pop()
        .expect("a turn");
    let previous = next - 1;
    match last.status {
        TurnStatus::Pending => Err(conflict(format!(
            "turn {previous} of episode {episode_id} is still being evaluated: read it with \
             GET /episodes/{episode_id}/turns/{previous}?wait=60 first"
        ))),
        TurnStatus::Failed => Err(conflict(format!(
            "turn {previous} of episode {episode_id} has no verdict (a service failure): post \
             its completion again for turn {previous}"
        ))),
        TurnStatus::Scored if last.done => Err(conflict(format!(
            "episode {episode_id} is done: it ended at turn {previous}"
        ))),
        TurnStatus::Scored => Ok(()),
    }
}

/// An episode with every turn so far; with `wait`, long-polls until its last turn is scored
/// (or failed).
#[utoipa::path(
    get, path = "/episodes/{id}", tag = "episodes",
    params(("id" = String, Path, description = "Episode id of `POST /episodes`"), WaitQuery),
    responses(
        (status = 200, description = "The episode", body = EpisodeView),
        (status = 404, description = "Unknown or expired episode, or another tenant's", body = ApiError),
        (status = 422, description = "A parameter is out of range", body = ApiError),
    )
)]
pub async fn get_episode(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<WaitQuery>,
) -> Result<Json<EpisodeView>, HttpError> {
    let wait = wait_duration(query.wait)?.unwrap_or(Duration::ZERO);
    let episode_id = EpisodeId(id);
    let episode = load_episode(&state, &caller, &episode_id, false).await?;
    let turns = load_turns(&state, &episode_id, episode.max_turns).await?;
    let scores = score_turns(&state, &turns, wait).await?;
    let views = turn_views(&episode, &episode_id, &turns, scores);
    let last = views.last();
    Ok(Json(EpisodeView {
        episode_id: episode_id.clone(),
        group_id: episode.group_id.clone(),
        problem: episode.problem,
        problem_hash: crucible_shared::problem_hash(&episode.reference_code),
        profile: episode.profile,
        max_turns: episode.max_turns,
        gamma: episode.gamma,
        prompt: episode.prompt.clone(),
        done: last.is_some_and(|v| v.done),
        returns: last.and_then(|v| v.returns.clone()),
        turns: views,
    }))
}

/// One turn of an episode; with `wait`, long-polls until it is scored (or failed).
#[utoipa::path(
    get, path = "/episodes/{id}/turns/{turn}", tag = "episodes",
    params(
        ("id" = String, Path, description = "Episode id of `POST /episodes`"),
        ("turn" = u32, Path, description = "The turn (0 for the first)"),
        WaitQuery,
    ),
    responses(
        (status = 200, description = "The turn (status `pending` while it is evaluated)", body = TurnView),
        (status = 404, description = "Unknown or expired episode, another tenant's, or a turn not posted", body = ApiError),
        (status = 422, description = "A parameter is out of range", body = ApiError),
    )
)]
pub async fn get_turn(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, turn)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<WaitQuery>,
) -> Result<Json<TurnView>, HttpError> {
    let wait = wait_duration(query.wait)?.unwrap_or(Duration::ZERO);
    let episode_id = EpisodeId(id);
    let episode = load_episode(&state, &caller, &episode_id, false).await?;
    let mut turns = load_turns(&state, &episode_id, episode.max_turns).await?;
    // A turn that is not a number names no turn, as one not posted yet: 404, like the problem
    // routes' ids.
    let turn = match turn.parse::<u32>() {
        Ok(t) if (t as usize) < turns.len() => t,
        _ => {
            return Err(ApiError::not_found(format!("turn {turn} of episode {episode_id}")).into());
        }
    };
    turns.truncate(turn as usize + 1);
    let scores = score_turns(&state, &turns, wait).await?;
    let view = turn_views(&episode, &episode_id, &turns, scores)
        .pop()
        .expect("the turn");
    Ok(Json(view))
}
