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
/// serde's default of the boolean fields that are on unless turned off; `pub` for the crates
/// whose types carry such a field (`#[serde(default = "...")]`).
pub fn default_true() -> bool {
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
/// The OpenAPI schema of `correct_trials` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn correct_trials_schema() -> utoipa::openapi::Object {
    CORRECT_TRIALS.schema(true, "Correctness trials, each on fresh seeded inputs.")
}
/// The OpenAPI schema of `perf_trials` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn perf_trials_schema() -> utoipa::openapi::Object {
    PERF_TRIALS.schema(true, "Timed trials for reference and candidate.")
}
/// The OpenAPI schema of `timeout_s` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn timeout_s_schema() -> utoipa::openapi::Object {
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

// The rollout batch's forms of the bounded settings (`RolloutEvalSettings`): optional, so
// without a default or bounds in the schema, but their description names the bounds.
fn rollout_u32_schema(bounds: Bounds<u32>, what: &str) -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, SchemaType, Type};
    let Bounds { min, max, .. } = bounds;
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
        .description(Some(format!("{what} ({min}-{max}).")))
        .minimum(Some(0))
        .build()
}
pub(crate) fn rollout_correct_trials_schema() -> utoipa::openapi::Object {
    rollout_u32_schema(
        CORRECT_TRIALS,
        "Correctness trials, each on fresh seeded inputs",
    )
}
pub(crate) fn rollout_perf_trials_schema() -> utoipa::openapi::Object {
    rollout_u32_schema(PERF_TRIALS, "Timed trials for reference and candidate")
}
pub(crate) fn rollout_timeout_s_schema() -> utoipa::openapi::Object {
    rollout_u32_schema(
        TIMEOUT_S,
        "Wall-clock budget of each evaluation, in seconds",
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
pub fn bounded_string(
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

/// The OpenAPI schema of `idempotency_key` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn idempotency_key_schema() -> utoipa::openapi::Object {
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
/// The OpenAPI schema of `rollout_reference_code` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn rollout_reference_code_schema() -> utoipa::openapi::Object {
    bounded_string(
        MAX_CODE_BYTES,
        true,
        format!("... or its source (at most {MAX_CODE_BYTES} bytes)."),
    )
    .build()
}
/// The OpenAPI schema of `kernel_code` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn kernel_code_schema() -> utoipa::openapi::Object {
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

/// The OpenAPI schema of `rollout_id` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn rollout_id_schema() -> utoipa::openapi::Object {
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

/// The OpenAPI schema of `rollouts` with its bounds; `pub` for the crates whose types carry
/// the field (`#[schema(schema_with = ...)]`).
pub fn rollouts_schema() -> utoipa::openapi::Array {
    bounded_array(
        "Rollout",
        MAX_ROLLOUTS,
        format!("The completions to score (1-{MAX_ROLLOUTS}); ids unique within the batch."),
    )
}

mod training;
pub use training::*;
