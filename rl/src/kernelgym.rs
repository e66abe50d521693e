//! KernelGYM's evaluation API, answered by Crucible (the `/kernelgym` routes): its request
//! (`EvaluationRequest`), its answers (`EvaluationResponse`, `TaskStatusResponse`) and the pure
//! steps between them and ours, so a KernelGYM reward client (Dr.Kernel's `KernelRewardClient`:
//! `POST /evaluate`, then `GET /status/{task_id}` and `GET /results/{task_id}`) runs against
//! Crucible with only its server URL changed. docs/MIGRATION-KERNELGYM.md is the field table.
//!
//! Every field of KernelGYM's request is named here: those that mean what ours mean are
//! carried over, those Crucible always does (the reference-timing cache, profiling, decoy
//! detection) are accepted and change nothing, and those that would ask for something Crucible
//! does not do (another workflow, backend or entry point, skipping correctness) are refused
//! with their field named, never silently run as something else. A field KernelGYM does not
//! know is refused too.

use crucible_shared::bounds::{CORRECT_TRIALS, PERF_TRIALS, TIMEOUT_S};
use crucible_shared::error::ApiError;
use crucible_shared::parity::ReferenceBackend;
use crucible_shared::request::{Backend, EvaluateRequest, Priority};
use crucible_shared::task::{EvalResult, TaskStatus, TaskView, Verdict, VerdictCode};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// KernelGYM's longest `task_id` (its validator: 1 to 100 characters).
pub const MAX_TASK_ID_CHARS: usize = 100;
/// Warm-up calls before the timed ones: KernelGYM's default and Crucible's protocol.
pub const WARMUP_CALLS: u32 = 3;

/// `kernelbench`: the one toolkit, backend adapter and workflow Crucible is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KernelBench {
    /// KernelBench's problems and protocol.
    Kernelbench,
}

/// The reference's class: `Model` (the candidate's is `ModelNew`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum EntryPoint {
    /// `class Model`.
    Model,
}

/// How the reference is timed, in KernelGYM's words and ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KernelGymReferenceBackend {
    /// As written (ours `eager`).
    Pytorch,
    /// Ours.
    Eager,
    /// Under `torch.compile` (ours `compile`).
    TorchCompile,
    /// Ours.
    Compile,
}

/// `POST /kernelgym/evaluate`: KernelGYM's `EvaluationRequest`, field for field. A value it
/// allows and Crucible does not serve (another backend, workflow or entry point) is refused by
/// its type; one that would skip what Crucible always does is refused by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelGymRequest {
    /// The client's own id of the evaluation: what `/status` and `/results` name. The same id
    /// with the same request is the same evaluation.
    #[schema(schema_with = kernelgym_task_id_schema)]
    pub task_id: String,
    /// The PyTorch reference (`class Model`, `get_inputs`, `get_init_inputs`); required.
    #[serde(default)]
    #[schema(schema_with = kernelgym_reference_schema)]
    pub reference_code: Option<String>,
    /// The candidate (`class ModelNew`).
    #[schema(schema_with = crucible_shared::bounds::kernel_code_schema)]
    pub kernel_code: String,
    /// `kernelbench` only.
    #[serde(default)]
    pub toolkit: Option<KernelBench>,
    /// `kernelbench` only.
    #[serde(default)]
    pub backend_adapter: Option<KernelBench>,
    /// `triton` or `cuda` (KernelGYM's `tilelang`, `cuda_agent`, `tvm_ffi`, `auto` are not
    /// served).
    #[serde(default)]
    pub backend: Option<Backend>,
    /// As ours.
    #[serde(default)]
    #[schema(schema_with = crucible_shared::bounds::correct_trials_schema)]
    pub num_correct_trials: Option<u32>,
    /// As ours.
    #[serde(default)]
    #[schema(schema_with = crucible_shared::bounds::perf_trials_schema)]
    pub num_perf_trials: Option<u32>,
    /// 3 only: Crucible's protocol warms up three times.
    #[serde(default)]
    #[schema(minimum = 3, maximum = 3)]
    pub num_warmup: Option<u32>,
    /// Seconds: ours `timeout_s`.
    #[serde(default)]
    #[schema(schema_with = crucible_shared::bounds::timeout_s_schema)]
    pub timeout: Option<u32>,
    /// `low`, `normal` or `high`.
    #[serde(default)]
    pub priority: Option<Priority>,
    /// Accepted, not read: Crucible places work on its own workers (`device_class` is ours).
    #[serde(default)]
    pub device_preference: Option<String>,
    /// Evaluate again rather than answer from the result cache.
    #[serde(default)]
    pub force_refresh: bool,
    /// `Model` only.
    #[serde(default)]
    pub entry_point: Option<EntryPoint>,
    /// `pytorch` (or `eager`) times the reference as written, `torch_compile` (or `compile`)
    /// under `torch.compile`.
    #[serde(default)]
    pub reference_backend: Option<KernelGymReferenceBackend>,
    /// Accepted, not read: the reference-timing cache is always on, keyed by the problem's
    /// content, the device and the software (never by a client's uuid).
    #[serde(default)]
    pub uuid: Option<String>,
    /// Accepted, not read (as `uuid`).
    #[serde(default)]
    pub use_reference_cache: Option<bool>,
    /// Accepted, not read: one cache serves every split.
    #[serde(default)]
    pub is_valid: Option<bool>,
    /// Accepted, not read: `error_message` is always the compiler's or the traceback's lead.
    #[serde(default)]
    pub verbose_errors: Option<bool>,
    /// Accepted, not read: the judge always counts the candidate's kernels.
    #[serde(default)]
    pub enable_profiling: Option<bool>,
    /// Accepted, not read: decoy detection is always on.
    #[serde(default)]
    pub enable_triton_detection: Option<bool>,
    /// Accepted, not read (as `enable_triton_detection`).
    #[serde(default)]
    pub run_triton_detection: Option<bool>,
    /// Accepted, not read (as `enable_triton_detection`); Dr.Kernel's client sends it.
    #[serde(default)]
    pub detect_decoy_kernel: Option<bool>,
    /// Time the kernel (ours `measure_performance`).
    #[serde(default)]
    pub measure_performance: Option<bool>,
    /// `true` only: correctness is always checked.
    #[serde(default)]
    #[schema(schema_with = true_only_schema)]
    pub run_correctness: Option<bool>,
    /// Overrides `measure_performance`, as in KernelGYM.
    #[serde(default)]
    pub run_performance: Option<bool>,
    /// `null` only: the `kernel_simple` workflow's cases are not Crucible's.
    #[serde(default)]
    #[schema(schema_with = null_only_schema)]
    pub cases_code: Option<serde_json::Value>,
    /// `null` only (as `cases_code`).
    #[serde(default)]
    #[schema(schema_with = null_only_schema)]
    pub cases: Option<serde_json::Value>,
    /// `kernelbench` only.
    #[serde(default)]
    pub workflow: Option<KernelBench>,
    /// `{"gpus": 1}` at most: one evaluation runs on one GPU.
    #[serde(default)]
    #[schema(schema_with = resources_schema)]
    pub resources: Option<serde_json::Map<String, serde_json::Value>>,
}

fn kernelgym_task_id_schema() -> utoipa::openapi::Object {
    crucible_shared::bounds::bounded_string(
        MAX_TASK_ID_CHARS,
        false,
        format!("The client's id: 1-{MAX_TASK_ID_CHARS} characters, no control characters."),
    )
    .pattern(Some(crucible_shared::bounds::IDEMPOTENCY_KEY_PATTERN))
    .build()
}

fn kernelgym_reference_schema() -> utoipa::openapi::Object {
    crucible_shared::bounds::bounded_string(
        crucible_shared::bounds::MAX_CODE_BYTES,
        true,
        "The PyTorch reference: `class Model`, `get_inputs()`, `get_init_inputs()` \
         (required: KernelGYM's kernelbench workflow)."
            .into(),
    )
    .pattern(Some(r"\S"))
    .build()
}

fn true_only_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
        .enum_values(Some([serde_json::json!(true), serde_json::Value::Null]))
        .description(Some("`true` only: Crucible always checks correctness."))
        .build()
}

fn null_only_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Null))
        .description(Some(
            "KernelGYM's kernel_simple workflow, not served: leave it out (or null).",
        ))
        .build()
}

fn resources_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .property(
            "gpus",
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::Integer))
                .minimum(Some(1))
                .maximum(Some(1)),
        )
        .description(Some(
            "`{\"gpus\": 1}` at most: one evaluation runs on one GPU.",
        ))
        .build()
}

impl KernelGymRequest {
    /// Our request for this one, or a 422 naming the field Crucible cannot honour.
    pub fn to_evaluate_request(&self) -> Result<EvaluateRequest, ApiError> {
        let chars = self.task_id.chars().count();
        if chars == 0 || chars > MAX_TASK_ID_CHARS || self.task_id.chars().any(char::is_control) {
            return Err(ApiError::invalid(
                "task_id",
                format!("must be 1-{MAX_TASK_ID_CHARS} characters without control characters"),
            ));
        }
        if self.cases_code.is_some() || self.cases.is_some() {
            let field = if self.cases_code.is_some() {
                "cases_code"
            } else {
                "cases"
            };
            return Err(ApiError::invalid(
                field,
                "belongs to KernelGYM's kernel_simple workflow, which Crucible does not run; \
                 give reference_code with get_inputs()",
            ));
        }
        if self.run_correctness == Some(false) {
            return Err(ApiError::invalid(
                "run_correctness",
                "Crucible always checks correctness (a timing of a wrong kernel is no reward)",
            ));
        }
        if let Some(n) = self.num_warmup
            && n != WARMUP_CALLS
        {
            return Err(ApiError::invalid(
                "num_warmup",
                format!(
                    "Crucible's protocol warms up {WARMUP_CALLS} times; leave it out or send \
                     {WARMUP_CALLS}"
                ),
            ));
        }
        if let Some(gpus) = self.resources.as_ref().and_then(|r| r.get("gpus"))
            && gpus.as_u64() != Some(1)
        {
            return Err(ApiError::invalid(
                "resources.gpus",
                "one evaluation runs on one GPU here",
            ));
        }
        let reference_code = self
            .reference_code
            .clone()
            .filter(|r| !r.trim().is_empty())
            .ok_or_else(|| {
                ApiError::invalid("reference_code", "is required (the kernelbench workflow)")
            })?;
        let reference_backend = match self.reference_backend {
            None
            | Some(KernelGymReferenceBackend::Pytorch)
            | Some(KernelGymReferenceBackend::Eager) => ReferenceBackend::Eager,
            Some(KernelGymReferenceBackend::TorchCompile)
            | Some(KernelGymReferenceBackend::Compile) => ReferenceBackend::Compile,
        };
        let mut request = EvaluateRequest::new(reference_code, self.kernel_code.clone());
        request.backend = self.backend.unwrap_or_default();
        request.num_correct_trials = self.num_correct_trials.unwrap_or(CORRECT_TRIALS.default);
        request.num_perf_trials = self.num_perf_trials.unwrap_or(PERF_TRIALS.default);
        request.timeout_s = self.timeout.unwrap_or(TIMEOUT_S.default);
        request.priority = self.priority.unwrap_or_default();
        request.force_refresh = self.force_refresh;
        request.reference_backend = reference_backend;
        request.measure_performance = self
            .run_performance
            .or(self.measure_performance)
            .unwrap_or(true);
        Ok(request)
    }
}

/// KernelGYM's `TaskStatus`: `pending`, `processing`, `completed`, `failed`, `timeout`.
pub fn status_name(view: &TaskView) -> &'static str {
    match view.status {
        TaskStatus::Queued => "pending",
        TaskStatus::Running => "processing",
        // A candidate that ran out of time is KernelGYM's `timeout`, as its server reports it.
        TaskStatus::Done
            if view.result.as_ref().and_then(|r| r.error_code) == Some(VerdictCode::Timeout) =>
        {
            "timeout"
        }
        TaskStatus::Done => "completed",
        // KernelGYM has no `cancelled`: a cancelled evaluation has no verdict.
        TaskStatus::Failed | TaskStatus::Cancelled => "failed",
    }
}

/// KernelGYM's `ErrorCode` for our verdict code.
pub fn error_code_name(code: VerdictCode) -> &'static str {
    use VerdictCode::*;
    match code {
        Syntax => "SYNTAX_ERROR",
        Import => "IMPORT_ERROR",
        Compilation => "COMPILATION_ERROR",
        Instantiation => "INSTANTIATION_ERROR",
        Runtime | CudaFault | Crash => "RUNTIME_ERROR",
        Correctness => "CORRECTNESS_ERROR",
        Timeout => "TIMEOUT_ERROR",
        OutputLimit | Resource => "RESOURCE_ERROR",
        Unsupported | Reference | Screened | Integrity => "VALIDATION_ERROR",
    }
}

/// `GET /kernelgym/results/{task_id}` (and `POST /kernelgym/evaluate`'s answer): KernelGYM's
/// `EvaluationResponse`. Times in ms, as KernelBench's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KernelGymResult {
    /// The client's id.
    pub task_id: String,
    /// `pending`, `processing`, `completed`, `failed` or `timeout`.
    pub status: String,
    /// The candidate built and imported.
    pub compiled: Option<bool>,
    /// Every correctness trial matched (never for a `decoy` or `hack`).
    pub correctness: Option<bool>,
    /// No kernel of its own ran (`decoy`), or it was caught gaming the evaluation (`hack`):
    /// KernelGYM's clients give it their harshest penalty.
    pub decoy_kernel: Option<bool>,
    /// The reference's median, ms.
    pub reference_runtime: Option<f64>,
    /// The candidate's median, ms.
    pub kernel_runtime: Option<f64>,
    /// `reference_runtime / kernel_runtime`.
    pub speedup: Option<f64>,
    /// Crucible's own: `verdict`, `error_code`, the device, `num_custom_kernels`,
    /// `num_total_kernels`, `custom_time_coverage`, `crucible_task_id`.
    #[schema(value_type = Object)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// What went wrong, when something did.
    pub error_message: Option<String>,
    /// KernelGYM's `ErrorCode` (`COMPILATION_ERROR`, ...).
    pub error_code: Option<String>,
    /// RFC 3339.
    pub submitted_at: Option<String>,
    /// RFC 3339, once finished.
    pub completed_at: Option<String>,
    /// Seconds from start to finish.
    pub processing_time: Option<f64>,
}

/// `GET /kernelgym/status/{task_id}`: KernelGYM's `TaskStatusResponse`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KernelGymStatus {
    /// The client's id.
    pub task_id: String,
    /// As [`KernelGymResult::status`].
    pub status: String,
    /// The worker it runs or ran on.
    pub assigned_device: Option<String>,
    /// Why it failed, when it did (Dr.Kernel's client reads it).
    pub error_message: Option<String>,
}

fn verdict_metadata(
    result: &EvalResult,
    task: &TaskView,
) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::json;
    let mut m = serde_json::Map::new();
    m.insert("crucible_task_id".into(), json!(task.task_id));
    m.insert("verdict".into(), json!(result.verdict));
    if let Some(code) = result.error_code {
        m.insert("crucible_error_code".into(), json!(code));
    }
    m.insert("device".into(), json!(result.device.name));
    m.insert("device_kind".into(), json!(result.device.kind));
    if let Some(n) = result.custom_kernel_count {
        m.insert("num_custom_kernels".into(), json!(n));
    }
    if let Some(n) = result.total_kernel_count {
        m.insert("num_total_kernels".into(), json!(n));
    }
    if let Some(c) = result.custom_time_coverage {
        m.insert("custom_time_coverage".into(), json!(c));
    }
    if !result.flags.is_empty() {
        m.insert("flags".into(), json!(result.flags));
    }
    m
}

/// What went wrong with `view`, when something did: the verdict's message, or the service's
/// reason for giving no verdict.
fn error_message(view: &TaskView) -> Option<String> {
    match (view.status, view.result.as_ref()) {
        (TaskStatus::Done, Some(r)) => r.error_message.clone(),
        (TaskStatus::Failed, _) => Some(
            view.error
                .clone()
                .unwrap_or_else(|| "the service produced no verdict".into()),
        ),
        (TaskStatus::Cancelled, _) => Some("cancelled".into()),
        _ => None,
    }
}

/// KernelGYM's answer for our task `view` under the client's `task_id`.
pub fn result_of(task_id: &str, view: &TaskView) -> KernelGymResult {
    let result = view.result.as_ref();
    let finished = view.status == TaskStatus::Done;
    let rfc3339 = |t: &chrono::DateTime<chrono::Utc>| t.to_rfc3339();
    let error_message = error_message(view);
    KernelGymResult {
        task_id: task_id.to_owned(),
        status: status_name(view).to_owned(),
        compiled: result.filter(|_| finished).map(|r| r.compiled),
        correctness: result.filter(|_| finished).map(|r| r.correct),
        decoy_kernel: result
            .filter(|_| finished)
            .map(|r| matches!(r.verdict, Verdict::Decoy | Verdict::Hack)),
        reference_runtime: result
            .and_then(|r| r.ref_runtime_ms.as_ref())
            .map(|s| s.median),
        kernel_runtime: result.and_then(|r| r.runtime_ms.as_ref()).map(|s| s.median),
        speedup: result.and_then(|r| r.speedup),
        metadata: result
            .map(|r| verdict_metadata(r, view))
            .unwrap_or_else(|| {
                let mut m = serde_json::Map::new();
                m.insert("crucible_task_id".into(), serde_json::json!(view.task_id));
                m
            }),
        error_message,
        error_code: result
            .filter(|_| finished)
            .and_then(|r| r.error_code)
            .map(|c| error_code_name(c).to_owned())
            .or_else(|| (view.status == TaskStatus::Failed).then(|| "SYSTEM_ERROR".to_owned())),
        submitted_at: Some(rfc3339(&view.submitted_at)),
        completed_at: view.finished_at.as_ref().map(rfc3339),
        processing_time: view
            .started_at
            .zip(view.finished_at)
            .map(|(s, f)| (f - s).num_milliseconds() as f64 / 1000.0),
    }
}

/// KernelGYM's status answer for our task `view`.
pub fn status_of(task_id: &str, view: &TaskView) -> KernelGymStatus {
    KernelGymStatus {
        task_id: task_id.to_owned(),
        status: status_name(view).to_owned(),
        assigned_device: view.worker_id.as_ref().map(|w| w.to_string()),
        error_message: error_message(view).filter(|_| view.status != TaskStatus::Done),
    }
}

#[cfg(test)]
mod tests;
