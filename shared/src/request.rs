//! What a client asks for and its validation (pure functions, so every bound is tested without
//! a server); the defaults and bounds themselves are in `bounds`.

use crate::bounds::{
    Bounds, CORRECT_TRIALS, MAX_BATCH_TASKS, MAX_CODE_BYTES, MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_SCREENING_RULES, MAX_SPEEDUP, PERF_TRIALS, TIMEOUT_S, TOLERANCE, atol_schema,
    batch_tasks_schema, correct_trials_schema, default_correct_trials, default_false,
    default_max_speedup, default_perf_trials, default_timeout_s, default_tolerance, default_true,
    idempotency_key_schema, kernel_code_schema, max_speedup_schema, perf_trials_schema,
    reference_code_schema, rtol_schema, timeout_s_schema,
};
use crate::device::DeviceClass;
use crate::error::ApiError;
use crate::parity::{Precision, ReferenceBackend, TimingMethod};
use crate::timing::TimingRequest;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
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

/// `POST /evaluate`: one KernelBench-style evaluation. Unknown fields are refused, so a typo
/// (`num_perf_trial`) is an error instead of a silent default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvaluateRequest {
    /// KernelBench problem source: `class Model`, `get_inputs()`, `get_init_inputs()`. Leave
    /// it out when naming a registered `problem` instead.
    #[serde(default)]
    #[schema(schema_with = reference_code_schema)]
    pub reference_code: String,
    /// A problem of the server's registry (`GET /problems`), instead of `reference_code`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<crate::problem::ProblemRef>,
    /// Candidate source defining `class ModelNew`.
    #[schema(schema_with = kernel_code_schema)]
    pub kernel_code: String,
    /// How the candidate implements its kernels.
    #[serde(default)]
    pub backend: Backend,
    /// Correctness trials, each on fresh seeded inputs ([`CORRECT_TRIALS`]).
    #[serde(default = "default_correct_trials")]
    #[schema(schema_with = correct_trials_schema)]
    pub num_correct_trials: u32,
    /// Timed trials for reference and candidate ([`PERF_TRIALS`]).
    #[serde(default = "default_perf_trials")]
    #[schema(schema_with = perf_trials_schema)]
    pub num_perf_trials: u32,
    /// Time the candidate (only when it is correct).
    #[serde(default = "default_true")]
    #[schema(default = default_true)]
    pub measure_performance: bool,
    /// Absolute tolerance of the correctness check ([`TOLERANCE`]).
    #[serde(default = "default_tolerance")]
    #[schema(schema_with = atol_schema)]
    pub atol: f64,
    /// Relative tolerance of the correctness check ([`TOLERANCE`]).
    #[serde(default = "default_tolerance")]
    #[schema(schema_with = rtol_schema)]
    pub rtol: f64,
    /// Wall-clock budget of the evaluation child, in seconds ([`TIMEOUT_S`]).
    #[serde(default = "default_timeout_s")]
    #[schema(schema_with = timeout_s_schema)]
    pub timeout_s: u32,
    /// Queue priority; it steers scheduling only, never the verdict.
    #[serde(default)]
    pub priority: Priority,
    /// Resubmitting with the same key returns the same task.
    #[serde(default)]
    #[schema(schema_with = idempotency_key_schema)]
    pub idempotency_key: Option<String>,
    /// Seed of the models' parameters (set before `get_init_inputs()` and before building
    /// each model, as KernelBench does); a random one is chosen when absent. The seeds of the
    /// inputs are secret: the evaluation draws them itself, out of the candidate's reach.
    #[serde(default)]
    pub seed: Option<u64>,
    /// A speedup above this is flagged `implausible-speedup` (not trusted silently;
    /// [`MAX_SPEEDUP`]).
    #[serde(default = "default_max_speedup")]
    #[schema(schema_with = max_speedup_schema)]
    pub max_speedup: f64,
    /// Evaluate anew even when an identical request has a cached result or is in flight (the
    /// new result still replaces the cached one).
    #[serde(default)]
    #[schema(default = default_false)]
    pub force_refresh: bool,
    /// Static screening policy overrides, rule id → `reject` | `flag` | `off` (rules not named
    /// keep their defaults; see docs/harness-protocol.md, "Screening").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub screening: BTreeMap<String, ScreeningAction>,
    /// How many timed calls each model gets: left out, the fixed KernelBench protocol
    /// (`num_perf_trials` calls); `{"mode": "adaptive"}` stops early once the median is known
    /// well enough (docs/harness-protocol.md, "Adaptive timing").
    #[serde(default, skip_serializing_if = "TimingRequest::is_default")]
    pub timing: TimingRequest,
    /// The precision both models run in: `fp32` (as written), `fp16` or `bf16` (floating
    /// inputs, parameters and buffers cast, as KernelBench's `precision`).
    #[serde(default, skip_serializing_if = "Precision::is_default")]
    pub precision: Precision,
    /// How each call is timed: `cuda_event` (events, `num_perf_trials` calls), `do_bench`
    /// (events, calls until 100 ms as triton's `do_bench` budgets them) or `host_time` (the
    /// host's clock, launch overhead included).
    #[serde(default, skip_serializing_if = "TimingMethod::is_default")]
    pub timing_method: TimingMethod,
    /// What the speedup is measured against: `eager` (the reference as written) or `compile`
    /// (`torch.compile`d; correctness is still checked against eager).
    #[serde(default, skip_serializing_if = "ReferenceBackend::is_default")]
    pub reference_backend: ReferenceBackend,
    /// Run only on a worker of this device class (`h100`, `a100`, `cpu`, ...); left out, any
    /// worker may run it. A class no live worker has is refused (422
    /// `DEVICE_CLASS_UNAVAILABLE`, naming the classes there are). It changes the timings, not
    /// the verdict, and is part of the result cache key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_class: Option<DeviceClass>,
}

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

impl EvaluateRequest {
    /// A request with every default, for tests and clients.
    pub fn new(reference_code: impl Into<String>, kernel_code: impl Into<String>) -> Self {
        Self {
            reference_code: reference_code.into(),
            problem: None,
            kernel_code: kernel_code.into(),
            backend: Backend::default(),
            num_correct_trials: default_correct_trials(),
            num_perf_trials: default_perf_trials(),
            measure_performance: default_true(),
            atol: default_tolerance(),
            rtol: default_tolerance(),
            timeout_s: default_timeout_s(),
            priority: Priority::default(),
            idempotency_key: None,
            seed: None,
            max_speedup: default_max_speedup(),
            force_refresh: default_false(),
            screening: BTreeMap::new(),
            timing: TimingRequest::default(),
            precision: Precision::default(),
            timing_method: TimingMethod::default(),
            reference_backend: ReferenceBackend::default(),
            device_class: None,
        }
    }

    /// Hex SHA-256 of everything that decides the verdict, so identical requests share one
    /// result. Priority, idempotency key and `force_refresh` only steer scheduling; the seed
    /// counts only when the client chose it (a random one carries no meaning to match on). The
    /// device is not known here: brokers qualify this key with their cache scope.
    pub fn result_cache_key(&self) -> String {
        let mut h = Sha256::new();
        // Every field is named and length-prefixed, so no two requests encode alike; the
        // version tag retires old keys when the encoding or the verdict semantics change.
        let mut field = |name: &str, value: &[u8]| {
            h.update(name.as_bytes());
            h.update((value.len() as u64).to_le_bytes());
            h.update(value);
        };
        // 2: static screening (and its policy) decide verdicts; 3: runtime integrity checks,
        // secret input seeds, verdict field.
        field("v", b"3");
        field("reference_code", self.reference_code.as_bytes());
        field("kernel_code", self.kernel_code.as_bytes());
        field("backend", self.backend.as_str().as_bytes());
        field("num_correct_trials", &self.num_correct_trials.to_le_bytes());
        field("num_perf_trials", &self.num_perf_trials.to_le_bytes());
        field("measure_performance", &[u8::from(self.measure_performance)]);
        field("atol", &self.atol.to_bits().to_le_bytes());
        field("rtol", &self.rtol.to_bits().to_le_bytes());
        field("timeout_s", &self.timeout_s.to_le_bytes());
        field("max_speedup", &self.max_speedup.to_bits().to_le_bytes());
        match self.seed {
            Some(seed) => field("seed", &seed.to_le_bytes()),
            None => field("seed", b""),
        }
        for (rule, action) in &self.screening {
            let action: &[u8] = match action {
                ScreeningAction::Reject => b"reject",
                ScreeningAction::Flag => b"flag",
                ScreeningAction::Off => b"off",
            };
            field("screening", rule.as_bytes());
            field("screening_action", action);
        }
        // Only adaptive timing changes what is measured: fixed requests keep the keys they had
        // before `timing` existed, whatever unused numbers they carry.
        if !self.timing.is_fixed() {
            field("timing_mode", self.timing.mode.as_str().as_bytes());
            field(
                "timing_target_rel_error",
                &self.timing.target_rel_error.to_bits().to_le_bytes(),
            );
            field("timing_max_time_ms", &self.timing.max_time_ms.to_le_bytes());
        }
        // The same for the measurement options: named only when not the default.
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
        // The class decides where the timings come from: a speedup measured on an h100 must
        // not answer a request for an a100, nor a result of whichever worker ran an unclassed
        // request answer one that asked for a class. Requests without one keep their old keys.
        if let Some(class) = &self.device_class {
            field("device_class", class.as_str().as_bytes());
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Checks every bound; the error names the first offending field. `prefix` is prepended to
    /// field names (e.g. `tasks[3].`) so batch errors point at the task.
    pub fn validate_with_prefix(&self, prefix: &str) -> Result<(), ApiError> {
        let field = |name: &str| format!("{prefix}{name}");
        validate_code(&field("reference_code"), &self.reference_code)?;
        validate_code(&field("kernel_code"), &self.kernel_code)?;
        validate_range(
            &field("num_correct_trials"),
            self.num_correct_trials,
            CORRECT_TRIALS,
        )?;
        validate_range(&field("num_perf_trials"), self.num_perf_trials, PERF_TRIALS)?;
        validate_range(&field("timeout_s"), self.timeout_s, TIMEOUT_S)?;
        self.timing.validate(prefix, self.num_perf_trials)?;
        if self.timing_method == TimingMethod::DoBench && !self.timing.is_fixed() {
            return Err(ApiError::invalid(
                &field("timing_method"),
                "do_bench budgets its own timed calls: use it with fixed `timing`",
            ));
        }
        validate_tolerance(&field("atol"), self.atol)?;
        validate_tolerance(&field("rtol"), self.rtol)?;
        let Bounds { min, max, .. } = MAX_SPEEDUP;
        if !(self.max_speedup.is_finite() && (min..=max).contains(&self.max_speedup)) {
            return Err(ApiError::invalid(
                &field("max_speedup"),
                format!("must be a finite number from {min} to {max:e}"),
            ));
        }
        if let Some(key) = &self.idempotency_key {
            validate_idempotency_key(&field("idempotency_key"), key)?;
        }
        if self.screening.len() > MAX_SCREENING_RULES
            || self.screening.keys().any(|k| {
                k.is_empty()
                    || k.len() > 64
                    || !k.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
            })
        {
            return Err(ApiError::invalid(
                &field("screening"),
                format!("at most {MAX_SCREENING_RULES} rule ids of lowercase letters and '-'"),
            ));
        }
        Ok(())
    }

    /// Checks every bound of a single request; the error names the first offending field.
    pub fn validate(&self) -> Result<(), ApiError> {
        self.validate_with_prefix("")
    }
}

fn validate_code(field: &str, code: &str) -> Result<(), ApiError> {
    if code.trim().is_empty() {
        return Err(ApiError::invalid(field, "must not be empty"));
    }
    if code.len() > MAX_CODE_BYTES {
        return Err(ApiError::invalid(
            field,
            format!("is {} bytes; the limit is {MAX_CODE_BYTES}", code.len()),
        ));
    }
    if code.contains('\0') {
        return Err(ApiError::invalid(field, "must not contain NUL bytes"));
    }
    Ok(())
}

/// An idempotency key (of `/evaluate` or `/rollouts`) is 1 to [`MAX_IDEMPOTENCY_KEY_BYTES`]
/// bytes without control characters: a NUL or a newline in a key is a client's bug, and one
/// that reached logs or Redis keys would be hard to see.
pub(crate) fn validate_idempotency_key(field: &str, key: &str) -> Result<(), ApiError> {
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

fn validate_range(field: &str, value: u32, bounds: Bounds<u32>) -> Result<(), ApiError> {
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

fn validate_tolerance(field: &str, value: f64) -> Result<(), ApiError> {
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
