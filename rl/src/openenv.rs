//! OpenEnv over episodes: the wire types of the `/openenv` routes and their WebSocket session,
//! in the shapes OpenEnv's clients (openenv-core's `EnvClient`, and the adapters TRL,
//! verifiers and NeMo Gym ship for it) send and read, and the pure steps from an episode's
//! views to an OpenEnv observation.
//!
//! One session plays one episode (one kernel problem): `reset` starts it (or attaches to one
//! `POST /episodes` started) and observes its first prompt; each `step` is one turn's
//! completion, observed as the turn's reward, feedback and next prompt; `state` is where the
//! episode stands. Over HTTP the session is the `episode_id` each request carries; over the
//! WebSocket it is the connection.

use crate::episode::{EpisodeRequest, EpisodeView, EpisodesStarted, TurnStatus, TurnView};
use crate::problem_set::{ProblemSetSelection, Split};
use crucible_shared::bounds::{OPENENV_HTTP_STEP_WAIT_S, WAIT_S};
use crucible_shared::error::ApiError;
use crucible_shared::ids::EpisodeId;
use crucible_shared::problem::{ProblemInfo, ProblemRef};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `reset`'s data: which episode the session plays. Everything may be left out: a problem of
/// the registry's train split (problem-set defaults), the episode's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenEnvReset {
    /// Picks the problem when `episode` names none: the one at position `seed mod n` of the
    /// `split` of `problem_set` (ordered by id), the same on every replica. Left out: a random
    /// one. Ignored when `episode` names its problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Play this episode, already started (one of a `POST /episodes` group, say), rather than
    /// start one: the observation is its next prompt. Only with nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode_id: Option<EpisodeId>,
    /// The problems `seed` picks from (`GET /problem-sets`' selection; left out, its
    /// defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem_set: Option<ProblemSetSelection>,
    /// Which part of the problem set `seed` picks from.
    #[serde(default)]
    pub split: Split,
    /// The episode to start, as `POST /episodes` without `group_size` (one session, one
    /// episode); `problem` and `reference_code` may both be left out, and `seed` picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode: Option<EpisodeRequest>,
}

impl OpenEnvReset {
    /// Bounds that need no registry: `episode_id` alone, no group.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.episode_id.is_some()
            && (self.seed.is_some() || self.problem_set.is_some() || self.episode.is_some())
        {
            return Err(ApiError::invalid(
                "episode_id",
                "continues an episode already started: leave out seed, problem_set and episode",
            ));
        }
        if self
            .episode
            .as_ref()
            .is_some_and(|e| e.group_size.is_some())
        {
            return Err(ApiError::invalid(
                "episode.group_size",
                "a session plays one episode: start a group with POST /episodes and reset one \
                 session with each of its episode_ids",
            ));
        }
        Ok(())
    }

    /// Whether the episode to start names its problem (so the registry is not consulted).
    pub fn names_problem(&self) -> bool {
        self.episode
            .as_ref()
            .is_some_and(|e| e.problem.is_some() || e.reference_code.is_some())
    }
}

/// The episode `POST /episodes` would start from `{}`: every field's serde default, so the
/// defaults stay written once (on `EpisodeRequest`).
pub fn default_episode() -> EpisodeRequest {
    serde_json::from_str("{}").expect("every EpisodeRequest field has a default")
}

/// The problem `seed` picks from `problems` (one split, ordered by id): position `seed mod n`.
pub fn pick_problem(problems: &[ProblemInfo], seed: u64) -> Option<ProblemRef> {
    if problems.is_empty() {
        return None;
    }
    let at = (seed % problems.len() as u64) as usize;
    let p = &problems[at];
    Some(ProblemRef {
        level: p.level,
        id: p.id,
    })
}

/// `step`'s action: the model's completion for the next turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenEnvAction {
    /// The whole completion, parsed as a rollout's (`<KERNEL>` and one fenced block).
    pub completion: String,
    /// OpenEnv's `Action.metadata`, which typed clients always send; not read.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[schema(value_type = Object)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// `POST /openenv/step`: a turn of the episode the request names (HTTP has no session).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenEnvStepRequest {
    /// The turn's completion.
    pub action: OpenEnvAction,
    /// The episode, from `reset`'s observation.
    pub episode_id: EpisodeId,
    /// The turn this step is (the observation's `turns`). Left out: the next one, or the last
    /// one when its completion is posted again (a step retried); give it when a model may
    /// repeat its previous answer, so that the repeat is a turn of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// Seconds to wait for the turn's score; unscored by then, the answer is 202 with the turn
    /// `pending`, and the same step again goes on waiting (it is not evaluated twice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crucible_shared::bounds::openenv_step_wait_schema)]
    pub timeout_s: Option<f64>,
    /// OpenEnv's request identifier; logged, not read otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl OpenEnvStepRequest {
    /// The wait `timeout_s` asks for, checked against its bounds.
    pub fn wait_s(&self) -> Result<f64, ApiError> {
        let bounds = OPENENV_HTTP_STEP_WAIT_S;
        let wait = self.timeout_s.unwrap_or(bounds.default);
        if !(bounds.min..=bounds.max).contains(&wait) || wait.is_nan() {
            return Err(ApiError::invalid(
                "timeout_s",
                format!("{wait} is out of range {}-{}", bounds.min, bounds.max),
            ));
        }
        Ok(wait.min(WAIT_S.max))
    }
}

/// What the model sees: the text to answer next and what became of its last answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OpenEnvObservation {
    /// The episode this session plays: what `POST /openenv/step` names, and
    /// `GET /episodes/{id}` reads whole.
    pub episode_id: EpisodeId,
    /// What to give the model now: the first prompt after `reset`, the next prompt after a
    /// scored step; absent once the episode is done (and while a step is pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The answer format the reward parser reads (also inside `prompt`).
    pub response_format: String,
    /// Turns posted so far: the next step is turn `turns`.
    pub turns: u32,
    /// Most turns of the episode.
    pub max_turns: u32,
    /// The problem, when it is a registered one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemRef>,
    /// The last turn's feedback (what the next prompt quotes); empty before the first.
    pub feedback: String,
    /// The last turn, whole (status, reward, the rollout with its evaluation); absent after a
    /// `reset` that starts an episode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn: Option<TurnView>,
    /// Once done: the discounted return of every turn, first to last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns: Option<Vec<f64>>,
}

/// `reset`'s and `step`'s answer, as OpenEnv's `StepResult` reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OpenEnvResult {
    /// What the model sees next.
    pub observation: OpenEnvObservation,
    /// The last turn's reward (absent after `reset`, and while a step is pending).
    pub reward: Option<f64>,
    /// The episode has ended.
    pub done: bool,
}

/// `state`: where the session's episode stands (OpenEnv's `State`: `episode_id`,
/// `step_count`, and ours).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OpenEnvState {
    /// The episode; absent before the first `reset` of a WebSocket session.
    pub episode_id: Option<EpisodeId>,
    /// Turns posted.
    pub step_count: u32,
    /// Most turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// The problem, when it is a registered one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemRef>,
    /// The episode has ended.
    pub done: bool,
    /// Each posted turn's reward (null while pending or after a service failure).
    pub rewards: Vec<Option<f64>>,
    /// Once done: the discounted returns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns: Option<Vec<f64>>,
}

/// `GET /openenv/metadata` (OpenEnv's `EnvironmentMetadata`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OpenEnvMetadata {
    /// The environment's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The server's version.
    pub version: String,
    /// Where its documentation is.
    pub documentation_url: String,
}

/// `GET /openenv/health` (OpenEnv's `HealthResponse`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OpenEnvHealth {
    /// `healthy`: this replica answers (the service's own health is `GET /health`).
    pub status: String,
}

/// `GET /openenv/schema`: OpenEnv's `{action, observation, state}` JSON schemas, from the
/// types the routes read and write, with the schemas they reference under
/// `components.schemas` so that their `#/components/schemas/...` references resolve within
/// the answer (as in the OpenAPI document).
pub fn schemas() -> serde_json::Value {
    use utoipa::{PartialSchema, ToSchema};
    let mut components = Vec::new();
    OpenEnvAction::schemas(&mut components);
    OpenEnvObservation::schemas(&mut components);
    OpenEnvState::schemas(&mut components);
    let components: serde_json::Map<String, serde_json::Value> = components
        .into_iter()
        .map(|(name, schema)| {
            (
                name,
                serde_json::to_value(schema).expect("schemas serialize"),
            )
        })
        .collect();
    let json = |schema| serde_json::to_value(schema).expect("schemas serialize");
    serde_json::json!({
        "action": json(OpenEnvAction::schema()),
        "observation": json(OpenEnvObservation::schema()),
        "state": json(OpenEnvState::schema()),
        "components": {"schemas": components},
    })
}

/// The observation after `reset` started `started`'s first episode.
pub fn started_observation(
    started: &EpisodesStarted,
    problem: Option<ProblemRef>,
) -> OpenEnvResult {
    OpenEnvResult {
        observation: OpenEnvObservation {
            episode_id: started.episode_id.clone(),
            prompt: Some(started.prompt.text.clone()),
            response_format: started.prompt.response_format.clone(),
            turns: 0,
            max_turns: started.max_turns,
            problem,
            feedback: String::new(),
            last_turn: None,
            returns: None,
        },
        reward: None,
        done: false,
    }
}

/// The observation of `episode` as it stands (a `reset` attaching to it, or after a step):
/// the prompt its next turn answers, and its last turn.
pub fn episode_observation(episode: &EpisodeView) -> OpenEnvResult {
    let last = episode.turns.last();
    let prompt = match last {
        None => Some(episode.prompt.text.clone()),
        Some(turn) => turn.next_prompt.as_ref().map(|p| p.text.clone()),
    };
    OpenEnvResult {
        observation: OpenEnvObservation {
            episode_id: episode.episode_id.clone(),
            prompt,
            response_format: episode.prompt.response_format.clone(),
            turns: episode.turns.len() as u32,
            max_turns: episode.max_turns,
            problem: episode.problem,
            feedback: last.map(|t| t.feedback.clone()).unwrap_or_default(),
            last_turn: last.cloned(),
            returns: episode.returns.clone(),
        },
        reward: last.and_then(|t| t.reward),
        done: episode.done,
    }
}

/// The observation after a step's turn `turn` of `episode` (the episode as read before the
/// step, for its first prompt and bounds).
pub fn turn_observation(episode: &EpisodeView, turn: &TurnView) -> OpenEnvResult {
    let scored = turn.status == TurnStatus::Scored;
    OpenEnvResult {
        observation: OpenEnvObservation {
            episode_id: turn.episode_id.clone(),
            prompt: turn.next_prompt.as_ref().map(|p| p.text.clone()),
            response_format: episode.prompt.response_format.clone(),
            turns: turn.turn + 1,
            max_turns: episode.max_turns,
            problem: episode.problem,
            feedback: turn.feedback.clone(),
            last_turn: Some(turn.clone()),
            returns: turn.returns.clone(),
        },
        reward: if scored { turn.reward } else { None },
        done: scored && turn.done,
    }
}

/// `state` of `episode`.
pub fn episode_state(episode: &EpisodeView) -> OpenEnvState {
    OpenEnvState {
        episode_id: Some(episode.episode_id.clone()),
        step_count: episode.turns.len() as u32,
        max_turns: Some(episode.max_turns),
        problem: episode.problem,
        done: episode.done,
        rewards: episode.turns.iter().map(|t| t.reward).collect(),
        returns: episode.returns.clone(),
    }
}

/// A message a WebSocket client sends (OpenEnv's `WSIncomingMessage`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum OpenEnvMessage {
    /// Start (or attach to) the session's episode.
    Reset {
        /// [`OpenEnvReset`], as a JSON object (checked apart, so its errors name its fields).
        #[serde(default)]
        data: serde_json::Value,
    },
    /// One turn: [`OpenEnvAction`] as a JSON object.
    Step {
        /// The action.
        data: serde_json::Value,
    },
    /// Where the episode stands.
    State,
    /// End the session.
    Close,
}

/// What the server sends on the WebSocket (OpenEnv's `WSObservationResponse`,
/// `WSStateResponse`, `WSErrorResponse`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "lowercase")]
pub enum OpenEnvReply {
    /// `reset`'s and `step`'s answer (boxed: it carries a whole turn).
    Observation(Box<OpenEnvResult>),
    /// `state`'s answer.
    State(OpenEnvState),
    /// A message that could not be served; the session goes on.
    Error(OpenEnvError),
}

/// A WebSocket error (OpenEnv's `{message, code}`, with the API's code beside it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenEnvError {
    /// What went wrong, for people.
    pub message: String,
    /// OpenEnv's `WSErrorCode`: `INVALID_JSON`, `UNKNOWN_TYPE`, `VALIDATION_ERROR`,
    /// `EXECUTION_ERROR`, `CAPACITY_REACHED`, `SESSION_ERROR`.
    pub code: String,
    /// The API's error code where there is one (`NOT_FOUND`, `CONFLICT`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_code: Option<String>,
    /// The field at fault, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl OpenEnvError {
    /// An error of OpenEnv's `code` with no API error behind it.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: code.to_owned(),
            api_code: None,
            field: None,
        }
    }

    /// The API's error, under OpenEnv's code for it: a request the client got wrong is a
    /// `VALIDATION_ERROR`, anything else an `EXECUTION_ERROR`.
    pub fn from_api(error: &ApiError) -> Self {
        use crucible_shared::error::ApiErrorCode::{MalformedJson, Validation};
        let code = match error.code {
            Validation | MalformedJson => "VALIDATION_ERROR",
            _ => "EXECUTION_ERROR",
        };
        Self {
            message: error.message.clone(),
            code: code.to_owned(),
            api_code: Some(error.code.to_string()),
            field: error.field.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
