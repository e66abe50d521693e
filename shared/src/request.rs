//! What a client asks for and its validation (pure functions, so every bound is tested without
//! a server); the defaults and bounds themselves are in `bounds`.

use crate::bounds::{
    Bounds, MAX_BATCH_TASKS, MAX_CODE_BYTES, MAX_IDEMPOTENCY_KEY_BYTES, TOLERANCE, atol_schema,
    batch_tasks_schema, correct_trials_schema, default_correct_trials, default_false,
    default_max_speedup, default_perf_trials, default_timeout_s, default_tolerance, default_true,
    idempotency_key_schema, kernel_code_schema, max_speedup_schema, perf_trials_schema,
    reference_code_schema, rtol_schema, timeout_s_schema,
};
use crate::device::DeviceClass;
use crate::error::ApiError;
use crate::parity::{Precision, ReferenceBackend, TimingMethod};
use crate::timing::{HarnessTiming, TimingRequest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// How the candidate implements its kernels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// `@triton.jit` kernels.
    #[default]
    Triton,
    /// CUDA C++ built with `torch.utils.cpp_extension.load_inline`.
    Cuda,
}

impl Backend {
    /// The wire name (`triton`, `cuda`), also what the result cache key hashes.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Triton => "triton",
            Backend::Cuda => "cuda",
        }
    }
}

/// Queue priority. `low` is never starved: it gets a guaranteed share of claims.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Bulk work: served after the others, but never starved.
    Low,
    /// What a request gets when it names none.
    #[default]
    Normal,
    /// Served first.
    High,
}

impl Priority {
    /// Every priority, highest first: the order claims try the queues in.
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    /// The wire name, also the name stored in Redis.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
        }
    }

    /// The inverse of [`Priority::as_str`]; `None` for any other name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "low" => Some(Priority::Low),
            "normal" => Some(Priority::Normal),
            "high" => Some(Priority::High),
            _ => None,
        }
    }
}

// `EvaluateRequest`, `RolloutEvalSettings` (re-exported by `rollout`) and `HarnessSettings`,
// made from the one list of settings (`settings.rs`).
for_eval_settings!(eval_settings);

/// What static screening does with a rule's findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScreeningAction {
    /// A finding is a verdict: `SCREENED`, the candidate never runs.
    Reject,
    /// A finding is reported in `flags`; the evaluation goes on.
    Flag,
    /// The rule is not applied.
    Off,
}

pub(crate) fn validate_code(field: &str, code: &str) -> Result<(), ApiError> {
    check_code(code).map_err(|e| ApiError::invalid(field, e.to_string()))
}

/// Why a source (a request's `reference_code` or `kernel_code`, a prompt's reference, a corpus
/// entry's code) is refused; the text follows the field's name (`kernel_code must not be
/// empty`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CodeError {
    /// Empty or only whitespace.
    #[error("must not be empty")]
    Empty,
    /// Over [`MAX_CODE_BYTES`]; the source's length in bytes.
    #[error("is {0} bytes; the limit is {MAX_CODE_BYTES}")]
    TooLarge(usize),
    /// Holds a NUL byte, which no Python source file may.
    #[error("must not contain NUL bytes")]
    Nul,
}

/// The one check of a source's text: not blank, at most [`MAX_CODE_BYTES`], no NUL byte. Every
/// place that takes code checks it here (each words its own message from the reason).
pub fn check_code(code: &str) -> Result<(), CodeError> {
    if code.trim().is_empty() {
        return Err(CodeError::Empty);
    }
    if code.len() > MAX_CODE_BYTES {
        return Err(CodeError::TooLarge(code.len()));
    }
    if code.contains('\0') {
        return Err(CodeError::Nul);
    }
    Ok(())
}

/// An idempotency key (of `/evaluate` or `/rollouts`) is 1 to [`MAX_IDEMPOTENCY_KEY_BYTES`]
/// bytes without control characters: a NUL or a newline in a key is a client's bug, and one
/// that reached logs or Redis keys would be hard to see.
pub fn validate_idempotency_key(field: &str, key: &str) -> Result<(), ApiError> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        return Err(ApiError::invalid(
            field,
            format!("must be 1-{MAX_IDEMPOTENCY_KEY_BYTES} bytes"),
        ));
    }
    if let Some(c) = key.chars().find(|c| c.is_control()) {
        return Err(ApiError::invalid(
            field,
            format!("must not contain control characters (found {c:?})"),
        ));
    }
    Ok(())
}

pub(crate) fn validate_range(field: &str, value: u32, bounds: Bounds<u32>) -> Result<(), ApiError> {
    let Bounds { min, max, .. } = bounds;
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!("{value} is out of range {min}-{max}"),
        ))
    }
}

pub(crate) fn validate_tolerance(field: &str, value: f64) -> Result<(), ApiError> {
    let Bounds { min, max, .. } = TOLERANCE;
    if value.is_finite() && (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!("{value} must be a finite number in {min}-{max}"),
        ))
    }
}

/// The settings that change what a reference's timing measures besides its trials and its
/// `timing` (each named in a cache key only when not the default, so the keys made before an
/// option existed still match the requests that leave it out). Both keys take them from here:
/// the result cache key ([`EvaluateRequest::result_cache_key`]) and the worker's reference
/// timing key.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MeasurementOptions {
    /// The request's `precision`.
    pub precision: Precision,
    /// The request's `timing_method`.
    pub timing_method: TimingMethod,
    /// The request's `reference_backend`: a compiled reference's timing is not the eager one's.
    pub reference_backend: ReferenceBackend,
}

impl MeasurementOptions {
    /// `r`'s measurement options.
    pub fn of(r: &EvaluateRequest) -> Self {
        Self {
            precision: r.precision,
            timing_method: r.timing_method,
            reference_backend: r.reference_backend,
        }
    }

    /// Hands each option that is not the default to `field` (name, bytes), in key order.
    pub fn write_key(&self, field: &mut impl FnMut(&str, &[u8])) {
        if !self.precision.is_default() {
            field("precision", self.precision.as_str().as_bytes());
        }
        if !self.timing_method.is_default() {
            field("timing_method", self.timing_method.as_str().as_bytes());
        }
        if !self.reference_backend.is_default() {
            field(
                "reference_backend",
                self.reference_backend.as_str().as_bytes(),
            );
        }
    }
}

/// `POST /evaluate/batch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// The evaluations, 1-1000 of them, each submitted as its own task.
    #[schema(schema_with = batch_tasks_schema)]
    pub tasks: Vec<EvaluateRequest>,
}

impl BatchRequest {
    /// Checks the task count and every task; an error names the task (`tasks[3].timeout_s`).
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.tasks.is_empty() || self.tasks.len() > MAX_BATCH_TASKS {
            return Err(ApiError::invalid(
                "tasks",
                format!(
                    "has {} tasks; a batch holds 1-{MAX_BATCH_TASKS}",
                    self.tasks.len()
                ),
            ));
        }
        for (i, task) in self.tasks.iter().enumerate() {
            task.validate_with_prefix(&format!("tasks[{i}]."))?;
        }
        Ok(())
    }
}

/// What the queue stores and a worker receives: the validated request plus the fixed seed, so
/// a retried attempt evaluates exactly the same inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// The client's request, already validated.
    pub request: EvaluateRequest,
    /// The parameter seed every attempt uses: the request's own, or one drawn at submission.
    pub seed: u64,
    /// The cache namespace of the tenant that submitted it (its own, or the one tenants made
    /// with `share_cache` share): the worker's reference timing cache is kept per scope, so a
    /// timing one tenant's task took never sets another tenant's speedups. Absent in specs
    /// queued by earlier versions and in local runs (`crucible eval`): the unscoped entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_scope: Option<String>,
}

impl TaskSpec {
    /// A spec with no cache scope (local runs and tests; the API sets the submitter's).
    pub fn new(request: EvaluateRequest, seed: u64) -> Self {
        Self {
            request,
            seed,
            cache_scope: None,
        }
    }
}

#[cfg(test)]
mod tests;
