//! The one place each request field's default and bounds are written: serde's defaults, the
//! OpenAPI schemas and validation (`request`; `rollout` for its idempotency key) all read them
//! from here, so the three cannot drift apart. Other wire types write their own bounds with
//! [`Bounds`] too (a tenant's `weight`).

use serde::Serialize;

/// Largest accepted `reference_code` or `kernel_code`, in bytes.
pub const MAX_CODE_BYTES: usize = 256 * 1024;
/// Most tasks in one `POST /evaluate/batch`.
pub const MAX_BATCH_TASKS: usize = 1000;
/// Longest `idempotency_key`.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;
/// Most screening overrides one request may carry.
pub const MAX_SCREENING_RULES: usize = 32;
/// Most rollouts in one `POST /rollouts`.
pub const MAX_ROLLOUTS: usize = 1000;
/// Longest rollout id.
pub const MAX_ROLLOUT_ID_BYTES: usize = 256;
/// Largest completion, in bytes (a long thinking section and the kernel).
pub const MAX_COMPLETION_BYTES: usize = 512 * 1024;
/// Most results in one page of `GET /batches/{id}/results`.
pub const MAX_RESULTS_PAGE: usize = RESULTS_PAGE.max as usize;

/// `?wait=` of the endpoints that long-poll, in seconds: left out (or 0), the answer is at once.
pub const WAIT_S: Bounds<f64> = Bounds {
    default: 0.0,
    min: 0.0,
    max: 60.0,
};
/// `?limit=` of `GET /batches/{id}/results`: finished evaluations in one page.
pub const RESULTS_PAGE: Bounds<u32> = Bounds {
    default: 1000,
    min: 1,
    max: 1000,
};

/// A numeric field's default and inclusive bounds: the one place they are written. Serde's
/// default, the OpenAPI schema ([`Bounds::schema`]) and
/// [`EvaluateRequest::validate`](crate::request::EvaluateRequest::validate) all read them from
/// here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds<T> {
    /// The value when the field is left out.
    pub default: T,
    /// The smallest accepted value.
    pub min: T,
    /// The largest accepted value.
    pub max: T,
}

/// `num_correct_trials`.
pub const CORRECT_TRIALS: Bounds<u32> = Bounds {
    default: 5,
    min: 1,
    max: 20,
};
/// `num_perf_trials`.
pub const PERF_TRIALS: Bounds<u32> = Bounds {
    default: 100,
    min: 1,
    max: 1000,
};
/// `timeout_s`.
pub const TIMEOUT_S: Bounds<u32> = Bounds {
    default: 300,
    min: 10,
    max: 3600,
};
/// `atol` and `rtol`.
pub const TOLERANCE: Bounds<f64> = Bounds {
    default: 1e-2,
    min: 0.0,
    max: 1e3,
};
/// `max_speedup`.
pub const MAX_SPEEDUP: Bounds<f64> = Bounds {
    default: 10.0,
    min: 1.0,
    max: 1e9,
};

impl<T: Copy + Into<f64> + Serialize> Bounds<T> {
    /// The OpenAPI schema of a field with these bounds (utoipa's `minimum`/`maximum` take only
    /// literals, hence a builder instead of `#[schema(...)]`).
    pub fn schema(&self, integer: bool, description: &str) -> utoipa::openapi::Object {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, SchemaType, Type};
        let (ty, format) = if integer {
            (Type::Integer, KnownFormat::Int32)
        } else {
            (Type::Number, KnownFormat::Double)
        };
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(ty))
            .format(Some(SchemaFormat::KnownFormat(format)))
            .description(Some(description))
            .default(serde_json::to_value(self.default).ok())
            .minimum(Some(self.min.into()))
            .maximum(Some(self.max.into()))
            .build()
    }
}

// Serde's `default = "..."` takes a function, not a constant: one per field.
pub(crate) fn default_correct_trials() -> u32 {
    CORRECT_TRIALS.default
}
pub(crate) fn default_perf_trials() -> u32 {
    PERF_TRIALS.default
}
pub(crate) fn default_true() -> bool {
    true
}
pub(crate) fn default_false() -> bool {
    false
}
pub(crate) fn default_tolerance() -> f64 {
    TOLERANCE.default
}
pub(crate) fn default_max_speedup() -> f64 {
    MAX_SPEEDUP.default
}
pub(crate) fn default_timeout_s() -> u32 {
    TIMEOUT_S.default
}

// The descriptions of the bounded fields live with their schemas: `schema_with` replaces the
// doc comment's.
pub(crate) fn correct_trials_schema() -> utoipa::openapi::Object {
    CORRECT_TRIALS.schema(true, "Correctness trials, each on fresh seeded inputs.")
}
pub(crate) fn perf_trials_schema() -> utoipa::openapi::Object {
    PERF_TRIALS.schema(true, "Timed trials for reference and candidate.")
}
pub(crate) fn timeout_s_schema() -> utoipa::openapi::Object {
    TIMEOUT_S.schema(
        true,
        "Wall-clock budget of the evaluation child, in seconds.",
    )
}
pub(crate) fn atol_schema() -> utoipa::openapi::Object {
    TOLERANCE.schema(false, "Absolute tolerance of the correctness check.")
}
pub(crate) fn rtol_schema() -> utoipa::openapi::Object {
    TOLERANCE.schema(false, "Relative tolerance of the correctness check.")
}
pub(crate) fn max_speedup_schema() -> utoipa::openapi::Object {
    MAX_SPEEDUP.schema(
        false,
        "A speedup above this is flagged `implausible-speedup` (not trusted silently).",
    )
}

/// `timing.target_rel_error`: the relative standard error of the median at which adaptive
/// timing stops. kernelbot stops at 0.1 % (of the mean), hence the default; below 1e-5 no
/// GPU clock is that steady, above 0.5 the median means little.
pub const TARGET_REL_ERROR: Bounds<f64> = Bounds {
    default: 1e-3,
    min: 1e-5,
    max: 0.5,
};
/// `timing.max_time_ms`: wall time adaptive timing may spend on one model's timed calls.
pub const MAX_TIME_MS: Bounds<u32> = Bounds {
    default: 2000,
    min: 1,
    max: 600_000,
};
/// Fewest timed calls adaptive timing makes before it may stop: fewer cannot show a spread,
/// so `num_perf_trials` must be at least this with `timing.mode` `adaptive`. The worker passes
/// it to the harness (`spec.json` `timing.min_trials`): it is written only here.
pub const MIN_ADAPTIVE_TRIALS: u32 = 3;

pub(crate) fn default_target_rel_error() -> f64 {
    TARGET_REL_ERROR.default
}
pub(crate) fn default_max_time_ms() -> u32 {
    MAX_TIME_MS.default
}
pub(crate) fn target_rel_error_schema() -> utoipa::openapi::Object {
    TARGET_REL_ERROR.schema(
        false,
        "Adaptive timing stops once the relative standard error of the median is at most \
         this (0.001 = 0.1 %).",
    )
}
pub(crate) fn max_time_ms_schema() -> utoipa::openapi::Object {
    MAX_TIME_MS.schema(
        true,
        "Adaptive timing stops once one model's timed calls have taken this much wall time, \
         in ms.",
    )
}

/// The schema of `?wait=` ([`WAIT_S`]).
pub fn wait_schema() -> utoipa::openapi::Object {
    WAIT_S.schema(
        false,
        &format!(
            "Seconds to wait for the task to finish ({}-{}). When it finishes in time the \
             answer is 200 with the whole task, else 202 with its id.",
            WAIT_S.min, WAIT_S.max
        ),
    )
}
/// The schema of `?limit=` ([`RESULTS_PAGE`]).
pub fn results_limit_schema() -> utoipa::openapi::Object {
    let Bounds { default, min, max } = RESULTS_PAGE;
    RESULTS_PAGE.schema(
        true,
        &format!(
            "Most finished evaluations in this page ({min}-{max}, default {default}); rollouts \
             that share an evaluation come together."
        ),
    )
}

/// The characters an `idempotency_key` may not hold (`char::is_control`: C0, DEL and C1), as
/// the pattern the OpenAPI schema shows; validation tests `char::is_control` itself.
pub const IDEMPOTENCY_KEY_PATTERN: &str = r"^[^\u0000-\u001F\u007F-\u009F]*$";

/// A string field of 1 to `max_bytes` bytes (`maxLength` counts characters: at most as many as
/// bytes, so it is the bound a client can check without encoding), nullable when the field is
/// optional.
pub(crate) fn bounded_string(
    max_bytes: usize,
    nullable: bool,
    description: String,
) -> utoipa::openapi::schema::ObjectBuilder {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    let ty = if nullable {
        SchemaType::from_iter([Type::String, Type::Null])
    } else {
        SchemaType::Type(Type::String)
    };
    ObjectBuilder::new()
        .schema_type(ty)
        .description(Some(description))
        .min_length(Some(1))
        .max_length(Some(max_bytes))
}

pub(crate) fn idempotency_key_schema() -> utoipa::openapi::Object {
    bounded_string(
        MAX_IDEMPOTENCY_KEY_BYTES,
        true,
        format!(
            "Resubmitting with the same key returns the same answer: 1-\
             {MAX_IDEMPOTENCY_KEY_BYTES} bytes, no control characters."
        ),
    )
    .pattern(Some(IDEMPOTENCY_KEY_PATTERN))
    .build()
}
pub(crate) fn reference_code_schema() -> utoipa::openapi::Object {
    bounded_string(
        MAX_CODE_BYTES,
        false,
        format!(
            "KernelBench problem source: `class Model`, `get_inputs()`, `get_init_inputs()` (at \
             most {MAX_CODE_BYTES} bytes). Leave it out when naming a registered `problem` \
             instead."
        ),
    )
    .build()
}
pub(crate) fn rollout_reference_code_schema() -> utoipa::openapi::Object {
    bounded_string(
        MAX_CODE_BYTES,
        true,
        format!("... or its source (at most {MAX_CODE_BYTES} bytes)."),
    )
    .build()
}
pub(crate) fn kernel_code_schema() -> utoipa::openapi::Object {
    bounded_string(
        MAX_CODE_BYTES,
        false,
        format!("Candidate source defining `class ModelNew` (at most {MAX_CODE_BYTES} bytes)."),
    )
    .build()
}

/// An array of 1 to `max` items of the schema `item`.
pub(crate) fn bounded_array(item: &str, max: usize, description: String) -> utoipa::openapi::Array {
    utoipa::openapi::schema::ArrayBuilder::new()
        .items(utoipa::openapi::Ref::from_schema_name(item))
        .description(Some(description))
        .min_items(Some(1))
        .max_items(Some(max))
        .build()
}

pub(crate) fn batch_tasks_schema() -> utoipa::openapi::Array {
    bounded_array(
        "EvaluateRequest",
        MAX_BATCH_TASKS,
        format!("The evaluations, 1-{MAX_BATCH_TASKS} of them, each submitted as its own task."),
    )
}

pub(crate) fn rollout_id_schema() -> utoipa::openapi::Object {
    bounded_string(
        MAX_ROLLOUT_ID_BYTES,
        false,
        format!(
            "The client's id of this rollout (1-{MAX_ROLLOUT_ID_BYTES} bytes, unique within the \
             batch); results carry it back."
        ),
    )
    .build()
}

pub(crate) fn rollouts_schema() -> utoipa::openapi::Array {
    bounded_array(
        "Rollout",
        MAX_ROLLOUTS,
        format!("The completions to score (1-{MAX_ROLLOUTS}); ids unique within the batch."),
    )
}

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

pub(crate) fn default_problem_set_level() -> u32 {
    PROBLEM_SET_LEVEL
}
pub(crate) fn default_test_fraction() -> f64 {
    TEST_FRACTION.default
}
pub(crate) fn default_batch_size() -> u32 {
    PROBLEM_BATCH_SIZE.default
}
pub(crate) fn default_group_size() -> u32 {
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
pub(crate) fn batch_size_schema() -> utoipa::openapi::Object {
    PROBLEM_BATCH_SIZE.schema(
        true,
        &format!(
            "Problems per step (the last step of an epoch may hold fewer); batch_size × \
             group_size is at most {MAX_ROLLOUTS}, one `POST /rollouts`."
        ),
    )
}
pub(crate) fn group_size_schema() -> utoipa::openapi::Object {
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

pub(crate) fn default_max_turns() -> u32 {
    EPISODE_TURNS.default
}
pub(crate) fn default_gamma() -> f64 {
    EPISODE_GAMMA.default
}
pub(crate) fn max_turns_schema() -> utoipa::openapi::Object {
    EPISODE_TURNS.schema(true, "Most turns of the episode (kernel_rl, Kevin: 4).")
}
pub(crate) fn gamma_schema() -> utoipa::openapi::Object {
    EPISODE_GAMMA.schema(
        false,
        "Discount of the returns `R_t = s_t + gamma * R_{t+1}` (kernel_rl: 0.4).",
    )
}
pub(crate) fn episode_group_size_schema() -> utoipa::openapi::Object {
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

pub(crate) fn openenv_step_wait_schema() -> utoipa::openapi::Object {
    OPENENV_HTTP_STEP_WAIT_S.schema(
        false,
        "Seconds to wait for the turn's score; unscored by then, 202 with the turn pending \
         (post the same step again to go on waiting).",
    )
}
