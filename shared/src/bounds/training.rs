//! The bounds of the trainers' endpoints, with the others (`bounds`): problem sets, episodes
//! and OpenEnv sessions.

use super::{Bounds, MAX_ROLLOUTS};

// Problem sets (`problem_set`): kernel_rl's dataset knobs, written once.

/// `level` of a problem set: KernelBench level 1 (single operators) unless named.
pub const PROBLEM_SET_LEVEL: u32 = 1;
/// `test_fraction` of a problem set: the share of its problems held out. Unlike the other
/// bounds its maximum is exclusive (a split must keep a train problem), so its schema is
/// written by hand below.
pub const TEST_FRACTION: Bounds<f64> = Bounds {
    default: 0.1,
    min: 0.0,
    max: 1.0,
};
/// `seed` of a problem set's split and shuffle.
pub const PROBLEM_SET_SEED: u64 = 0;
/// `batch_size`: problems per step of `POST /problem-sets/batches`.
pub const PROBLEM_BATCH_SIZE: Bounds<u32> = Bounds {
    default: 4,
    min: 1,
    max: 1000,
};
/// `group_size`: rollouts per problem of a step (a GRPO group). `batch_size × group_size` may
/// not exceed [`MAX_ROLLOUTS`], so one step fits one `POST /rollouts`.
pub const GROUP_SIZE: Bounds<u32> = Bounds {
    default: 4,
    min: 1,
    max: 1000,
};

/// serde's default of the field it names (`problem_set_level`), from the bound above; `pub` for the
/// crates whose types carry the field (`#[serde(default = "...")]`).
pub fn default_problem_set_level() -> u32 {
    PROBLEM_SET_LEVEL
}
/// serde's default of the field it names (`test_fraction`), from the bound above; `pub` for the
/// crates whose types carry the field (`#[serde(default = "...")]`).
pub fn default_test_fraction() -> f64 {
    TEST_FRACTION.default
}
/// serde's default of the field it names (`batch_size`), from the bound above; `pub` for the
/// crates whose types carry the field (`#[serde(default = "...")]`).
pub fn default_batch_size() -> u32 {
    PROBLEM_BATCH_SIZE.default
}
/// serde's default of the field it names (`group_size`), from the bound above; `pub` for the
/// crates whose types carry the field (`#[serde(default = "...")]`).
pub fn default_group_size() -> u32 {
    GROUP_SIZE.default
}

/// The schema of `test_fraction`: `[0, 1)`, maximum exclusive.
pub fn test_fraction_schema() -> utoipa::openapi::Object {
    let mut object = TEST_FRACTION.schema(
        false,
        "Share of the selected problems held out as the test split, in [0, 1): \
         round(n × test_fraction) of them (halves up), at most n − 1.",
    );
    object.maximum = None;
    object.exclusive_maximum = Some(TEST_FRACTION.max.into());
    object
}
/// The OpenAPI schema of `batch_size` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn batch_size_schema() -> utoipa::openapi::Object {
    PROBLEM_BATCH_SIZE.schema(
        true,
        &format!(
            "Problems per step (the last step of an epoch may hold fewer); batch_size × \
             group_size is at most {MAX_ROLLOUTS}, one `POST /rollouts`."
        ),
    )
}
/// The OpenAPI schema of `group_size` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn group_size_schema() -> utoipa::openapi::Object {
    GROUP_SIZE.schema(true, "Rollouts per problem (a GRPO group).")
}
/// The schema of `level` of a problem set ([`PROBLEM_SET_LEVEL`]).
pub fn problem_set_level_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Integer))
        .description(Some("KernelBench level of the set's problems."))
        .default(Some(PROBLEM_SET_LEVEL.into()))
        .minimum(Some(0))
        .build()
}

// Episodes (`episode`): Kevin-style multi-turn refinement, kernel_rl's defaults.

/// `max_turns` of an episode: kernel_rl and Kevin refine up to 4 times.
pub const EPISODE_TURNS: Bounds<u32> = Bounds {
    default: 4,
    min: 1,
    max: 16,
};
/// `gamma` of an episode's discounted returns `R_t = s_t + γ·R_{t+1}` (kernel_rl: 0.4).
pub const EPISODE_GAMMA: Bounds<f64> = Bounds {
    default: 0.4,
    min: 0.0,
    max: 1.0,
};
/// `group_size` of `POST /episodes`: episodes of one problem started in one call (a GRPO
/// group); 1 starts a single episode.
pub const EPISODE_GROUP: Bounds<u32> = Bounds {
    default: 1,
    min: 1,
    max: 64,
};
/// Most bytes of the previous turn's kernel a next-turn prompt quotes.
pub const MAX_PROMPT_KERNEL_BYTES: usize = 32 * 1024;
/// Most bytes of the previous turn's feedback a next-turn prompt quotes
/// (`reward::feedback` is capped below it already; the cap holds whatever it becomes).
pub const MAX_PROMPT_FEEDBACK_BYTES: usize = 2 * 1024;

/// serde's default of the field it names (`max_turns`), from the bound above; `pub` for the
/// crates whose types carry the field (`#[serde(default = "...")]`).
pub fn default_max_turns() -> u32 {
    EPISODE_TURNS.default
}
/// serde's default of the field it names (`gamma`), from the bound above; `pub` for the
/// crates whose types carry the field (`#[serde(default = "...")]`).
pub fn default_gamma() -> f64 {
    EPISODE_GAMMA.default
}
/// The OpenAPI schema of `max_turns` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn max_turns_schema() -> utoipa::openapi::Object {
    EPISODE_TURNS.schema(true, "Most turns of the episode (kernel_rl, Kevin: 4).")
}
/// The OpenAPI schema of `gamma` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn gamma_schema() -> utoipa::openapi::Object {
    EPISODE_GAMMA.schema(
        false,
        "Discount of the returns `R_t = s_t + gamma * R_{t+1}` (kernel_rl: 0.4).",
    )
}
/// The OpenAPI schema of `episode_group_size` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn episode_group_size_schema() -> utoipa::openapi::Object {
    EPISODE_GROUP.schema(
        true,
        "Start this many episodes of the problem in one call (a GRPO group); they share the \
         first prompt and a `group_id`.",
    )
}

// OpenEnv sessions (`openenv`): one episode a session, over HTTP or a WebSocket.

/// `timeout_s` of `POST /openenv/step`: seconds the answer waits for the turn's score (at most
/// `?wait=`'s longest, within the request timeout); unscored by then, 202 and the turn pending.
pub const OPENENV_HTTP_STEP_WAIT_S: Bounds<f64> = Bounds {
    default: 60.0,
    min: 0.0,
    max: 60.0,
};
/// Longest a WebSocket `step` waits for its turn's score, in seconds: longer than any task's
/// `timeout_s` and a queue's wait, so a client sees a score, not a pending turn, unless the
/// service is stuck. (OpenEnv's client gives up after its `message_timeout_s`, 60 s by default:
/// raise it for GPU evaluations.)
pub const OPENENV_WS_STEP_WAIT_S: u64 = 2 * 3600;
/// Times a step evaluates its completion again after a service failure (a lost worker, an
/// outage: never the model's fault) before it answers an error.
pub const OPENENV_STEP_RETRIES: u32 = 2;
/// Open WebSocket sessions per API replica; one more is refused with `CAPACITY_REACHED`.
/// Each holds a connection and, while stepping, one long-poll at a time.
pub const OPENENV_SESSIONS: usize = 1024;
/// A WebSocket session that sends nothing for this long is closed (seconds).
pub const OPENENV_SESSION_IDLE_S: u64 = 30 * 60;
/// Largest WebSocket message a session reads: a completion at its limit, JSON-escaped.
pub const OPENENV_MESSAGE_BYTES: usize = 4 << 20;

/// The OpenAPI schema of `openenv_step_wait` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn openenv_step_wait_schema() -> utoipa::openapi::Object {
    OPENENV_HTTP_STEP_WAIT_S.schema(
        false,
        "Seconds to wait for the turn's score; unscored by then, 202 with the turn pending \
         (post the same step again to go on waiting).",
    )
}
