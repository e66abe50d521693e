//! What a client asks for, its defaults and its validation (pure functions, so every bound is
//! tested without a server).

use crate::error::ApiError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Largest accepted `reference_code` or `kernel_code`, in bytes.
pub const MAX_CODE_BYTES: usize = 256 * 1024;
/// Most tasks in one `POST /evaluate/batch`.
pub const MAX_BATCH_TASKS: usize = 1000;
/// Longest `idempotency_key`.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;

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
    Low,
    #[default]
    Normal,
    High,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "low" => Some(Priority::Low),
            "normal" => Some(Priority::Normal),
            "high" => Some(Priority::High),
            _ => None,
        }
    }
}

fn default_correct_trials() -> u32 {
    5
}
fn default_perf_trials() -> u32 {
    100
}
fn default_true() -> bool {
    true
}
fn default_tolerance() -> f64 {
    1e-2
}
fn default_timeout_s() -> u32 {
    300
}

/// `POST /evaluate`: one KernelBench-style evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EvaluateRequest {
    /// KernelBench problem source: `class Model`, `get_inputs()`, `get_init_inputs()`.
    pub reference_code: String,
    /// Candidate source defining `class ModelNew`.
    pub kernel_code: String,
    #[serde(default)]
    pub backend: Backend,
    /// Correctness trials, each on fresh seeded inputs (1-20).
    #[serde(default = "default_correct_trials")]
    #[schema(default = 5, minimum = 1, maximum = 20)]
    pub num_correct_trials: u32,
    /// Timed trials for reference and candidate (1-1000).
    #[serde(default = "default_perf_trials")]
    #[schema(default = 100, minimum = 1, maximum = 1000)]
    pub num_perf_trials: u32,
    /// Time the candidate (only when it is correct).
    #[serde(default = "default_true")]
    #[schema(default = true)]
    pub measure_performance: bool,
    #[serde(default = "default_tolerance")]
    #[schema(default = 0.01)]
    pub atol: f64,
    #[serde(default = "default_tolerance")]
    #[schema(default = 0.01)]
    pub rtol: f64,
    /// Wall-clock budget of the evaluation child, in seconds (10-3600).
    #[serde(default = "default_timeout_s")]
    #[schema(default = 300, minimum = 10, maximum = 3600)]
    pub timeout_s: u32,
    #[serde(default)]
    pub priority: Priority,
    /// Resubmitting with the same key returns the same task.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Master seed of the evaluation; a random one is chosen when absent.
    #[serde(default)]
    pub seed: Option<u64>,
}

impl EvaluateRequest {
    /// A request with every default, for tests and clients.
    pub fn new(reference_code: impl Into<String>, kernel_code: impl Into<String>) -> Self {
        Self {
            reference_code: reference_code.into(),
            kernel_code: kernel_code.into(),
            backend: Backend::default(),
            num_correct_trials: default_correct_trials(),
            num_perf_trials: default_perf_trials(),
            measure_performance: true,
            atol: default_tolerance(),
            rtol: default_tolerance(),
            timeout_s: default_timeout_s(),
            priority: Priority::default(),
            idempotency_key: None,
            seed: None,
        }
    }

    /// Checks every bound; the error names the first offending field. `prefix` is prepended to
    /// field names (e.g. `tasks[3].`) so batch errors point at the task.
    pub fn validate_with_prefix(&self, prefix: &str) -> Result<(), ApiError> {
        let field = |name: &str| format!("{prefix}{name}");
        validate_code(&field("reference_code"), &self.reference_code)?;
        validate_code(&field("kernel_code"), &self.kernel_code)?;
        validate_range(&field("num_correct_trials"), self.num_correct_trials, 1, 20)?;
        validate_range(&field("num_perf_trials"), self.num_perf_trials, 1, 1000)?;
        validate_range(&field("timeout_s"), self.timeout_s, 10, 3600)?;
        validate_tolerance(&field("atol"), self.atol)?;
        validate_tolerance(&field("rtol"), self.rtol)?;
        if let Some(key) = &self.idempotency_key
            && (key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_BYTES)
        {
            return Err(ApiError::invalid(
                &field("idempotency_key"),
                format!("must be 1-{MAX_IDEMPOTENCY_KEY_BYTES} bytes"),
            ));
        }
        Ok(())
    }

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

fn validate_range(field: &str, value: u32, min: u32, max: u32) -> Result<(), ApiError> {
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
    if value.is_finite() && (0.0..=1e3).contains(&value) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!("{value} must be a finite number in 0-1000"),
        ))
    }
}

/// `POST /evaluate/batch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchRequest {
    pub tasks: Vec<EvaluateRequest>,
}

impl BatchRequest {
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
    pub request: EvaluateRequest,
    pub seed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> EvaluateRequest {
        EvaluateRequest::new("class Model: pass", "class ModelNew: pass")
    }

    #[test]
    fn defaults_match_the_contract() {
        let req: EvaluateRequest =
            serde_json::from_str(r#"{"reference_code":"a","kernel_code":"b"}"#).unwrap();
        assert_eq!(req.backend, Backend::Triton);
        assert_eq!(req.num_correct_trials, 5);
        assert_eq!(req.num_perf_trials, 100);
        assert!(req.measure_performance);
        assert_eq!(req.atol, 1e-2);
        assert_eq!(req.rtol, 1e-2);
        assert_eq!(req.timeout_s, 300);
        assert_eq!(req.priority, Priority::Normal);
        assert!(req.validate().is_ok());
    }

    #[test]
    fn unknown_backend_is_rejected_by_serde() {
        let err = serde_json::from_str::<EvaluateRequest>(
            r#"{"reference_code":"a","kernel_code":"b","backend":"opencl"}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("opencl"), "{err}");
    }

    #[test]
    fn each_bound_names_its_field() {
        type Mutation = Box<dyn Fn(&mut EvaluateRequest)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|r| r.kernel_code = "  ".into()), "kernel_code"),
            (
                Box::new(|r| r.reference_code = String::new()),
                "reference_code",
            ),
            (
                Box::new(|r| r.kernel_code = "x".repeat(MAX_CODE_BYTES + 1)),
                "kernel_code",
            ),
            (Box::new(|r| r.num_correct_trials = 0), "num_correct_trials"),
            (
                Box::new(|r| r.num_correct_trials = 21),
                "num_correct_trials",
            ),
            (Box::new(|r| r.num_perf_trials = 1001), "num_perf_trials"),
            (Box::new(|r| r.timeout_s = 9), "timeout_s"),
            (Box::new(|r| r.timeout_s = 3601), "timeout_s"),
            (Box::new(|r| r.atol = f64::NAN), "atol"),
            (Box::new(|r| r.rtol = -1.0), "rtol"),
            (
                Box::new(|r| r.idempotency_key = Some(String::new())),
                "idempotency_key",
            ),
        ];
        for (mutate, field) in cases {
            let mut req = valid();
            mutate(&mut req);
            let err = req.validate().unwrap_err();
            assert_eq!(err.field.as_deref(), Some(field), "{err}");
            assert_eq!(err.http_status(), 422);
        }
    }

    #[test]
    fn code_at_the_limit_is_accepted() {
        let mut req = valid();
        req.kernel_code = "x".repeat(MAX_CODE_BYTES);
        assert!(req.validate().is_ok());
    }

    #[test]
    fn batch_errors_point_at_the_task() {
        let mut bad = valid();
        bad.num_perf_trials = 0;
        let batch = BatchRequest {
            tasks: vec![valid(), bad],
        };
        let err = batch.validate().unwrap_err();
        assert_eq!(err.field.as_deref(), Some("tasks[1].num_perf_trials"));
        assert!(BatchRequest { tasks: vec![] }.validate().is_err());
    }
}
