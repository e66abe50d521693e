//! Rollouts: a trainer's batch of model completions in, one reward, its components, the
//! evaluation result and the next turn's feedback out per rollout. The wire types of
//! `POST /rollouts` and `GET /batches/{id}/results`, what the API keeps per rollout while its
//! evaluation runs, and the pure step from finished tasks to rollout results.

use crate::error::ApiError;
use crate::ids::{BatchId, TaskId};
use crate::problem::ProblemRef;
use crate::request::{Backend, EvaluateRequest, Priority};
use crate::reward::{
    CompletionFacts, DecoyReward, RewardComponents, RewardProfile, RewardWeights, WeightsOverride,
    feedback, reward,
};
use crate::task::{EvalResult, TaskStatus, TaskView};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use utoipa::ToSchema;

// The bounds of the rollout wire types live with the others (`bounds`).
pub use crate::bounds::{
    MAX_COMPLETION_BYTES, MAX_RESULTS_PAGE, MAX_ROLLOUT_ID_BYTES, MAX_ROLLOUTS,
};

/// One model completion to score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollout {
    /// The client's id of this rollout (unique within the batch); results carry it back.
    #[schema(schema_with = crate::bounds::rollout_id_schema)]
    pub id: String,
    /// The problem, by reference (`GET /problems`) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemRef>,
    /// ... or its source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::bounds::rollout_reference_code_schema)]
    pub reference_code: Option<String>,
    /// The raw completion: the kernel is extracted from it (docs/REWARDS.md).
    pub completion: String,
    /// What the extracted kernel is written for.
    #[serde(default)]
    pub backend: Backend,
    /// Turn index of a multi-turn episode (0 for the first); carried through to the result.
    #[serde(default)]
    pub turn: u32,
    /// How the rollout is scored.
    #[serde(default)]
    pub profile: RewardProfile,
    /// Weights that replace the profile's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<WeightsOverride>,
    /// What a decoy (correct, but no kernel of its own ran) scores: `zero` (default, like a
    /// hack) or `profile` (the profile's formula, the behaviour before this field).
    #[serde(default)]
    pub decoy_reward: DecoyReward,
}

/// Evaluation settings for every rollout of a batch; absent ones keep the `/evaluate`
/// defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutEvalSettings {
    /// Correctness trials, each on fresh seeded inputs (1-20).
    pub num_correct_trials: Option<u32>,
    /// Timed trials for reference and candidate (1-1000).
    pub num_perf_trials: Option<u32>,
    /// How many timed calls each model gets (`fixed` or `adaptive`; as `/evaluate`'s
    /// `timing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<crate::timing::TimingRequest>,
    /// Time the candidate (only when it is correct); without timings `speed` scores 0.
    pub measure_performance: Option<bool>,
    /// Absolute tolerance of the output comparison.
    pub atol: Option<f64>,
    /// Relative tolerance of the output comparison.
    pub rtol: Option<f64>,
    /// Wall-clock budget of each evaluation, in seconds (10-3600).
    pub timeout_s: Option<u32>,
    /// Queue priority of the batch's tasks.
    pub priority: Option<Priority>,
    /// A speedup above this is flagged `implausible-speedup`.
    pub max_speedup: Option<f64>,
    /// `fp32`, `fp16` or `bf16`, as `/evaluate`'s `precision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<crate::parity::Precision>,
    /// `cuda_event`, `do_bench` or `host_time`, as `/evaluate`'s `timing_method`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing_method: Option<crate::parity::TimingMethod>,
    /// `eager` or `compile`, as `/evaluate`'s `reference_backend`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_backend: Option<crate::parity::ReferenceBackend>,
    /// Run every evaluation of the batch on workers of this device class (as `/evaluate`'s
    /// `device_class`). Left out, each group of rollouts of one problem is placed on one class
    /// at submission, so no group's speedups come from two kinds of device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_class: Option<crate::device::DeviceClass>,
}

/// `POST /rollouts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutBatchRequest {
    /// The completions to score (1-1000); ids unique within the batch.
    #[schema(schema_with = crate::bounds::rollouts_schema)]
    pub rollouts: Vec<Rollout>,
    /// How every rollout's kernel is evaluated.
    #[serde(default)]
    pub eval: RolloutEvalSettings,
    /// Resubmitting a batch under the same key (a retry after a lost answer) returns the first
    /// batch instead of making another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::bounds::idempotency_key_schema)]
    pub idempotency_key: Option<String>,
}

/// `202` answer of `POST /rollouts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RolloutBatchResponse {
    /// Read the results with `GET /batches/{batch_id}/results`.
    pub batch_id: BatchId,
    /// Rollouts in the batch, with or without a kernel.
    pub rollouts: usize,
    /// Rollouts that are being evaluated (the others had no kernel to extract).
    pub evaluated: usize,
    /// True when `idempotency_key` named an earlier batch, which is returned.
    #[serde(default)]
    pub deduplicated: bool,
}

impl RolloutBatchRequest {
    /// Bounds that do not need the problem registry; the error names the rollout.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.rollouts.is_empty() || self.rollouts.len() > MAX_ROLLOUTS {
            return Err(ApiError::invalid(
                "rollouts",
                format!(
                    "has {} rollouts; a batch holds 1-{MAX_ROLLOUTS}",
                    self.rollouts.len()
                ),
            ));
        }
        if let Some(key) = &self.idempotency_key {
            crate::request::validate_idempotency_key("idempotency_key", key)?;
        }
        let mut ids = HashSet::new();
        for (i, r) in self.rollouts.iter().enumerate() {
            let field = |name: &str| format!("rollouts[{i}].{name}");
            if r.id.is_empty() || r.id.len() > MAX_ROLLOUT_ID_BYTES {
                return Err(ApiError::invalid(
                    &field("id"),
                    format!("must be 1-{MAX_ROLLOUT_ID_BYTES} bytes"),
                ));
            }
            if !ids.insert(r.id.as_str()) {
                return Err(ApiError::invalid(
                    &field("id"),
                    format!("{:?} is used twice in this batch", r.id),
                ));
            }
            if r.completion.len() > MAX_COMPLETION_BYTES {
                return Err(ApiError::invalid(
                    &field("completion"),
                    format!(
                        "is {} bytes; the limit is {MAX_COMPLETION_BYTES}",
                        r.completion.len()
                    ),
                ));
            }
            if r.problem.is_some() == r.reference_code.is_some() {
                return Err(ApiError::invalid(
                    &field("problem"),
                    "give exactly one of problem and reference_code",
                ));
            }
            if let Some(name) = r.weights.as_ref().and_then(WeightsOverride::invalid_field) {
                return Err(ApiError::invalid(
                    &field(&format!("weights.{name}")),
                    "is out of range",
                ));
            }
        }
        Ok(())
    }
}

impl RolloutEvalSettings {
    /// The evaluation of `kernel_code` against `reference_code` under these settings.
    pub fn request(
        &self,
        reference_code: String,
        kernel_code: String,
        backend: Backend,
    ) -> EvaluateRequest {
        let mut r = EvaluateRequest::new(reference_code, kernel_code);
        r.backend = backend;
        if let Some(v) = self.num_correct_trials {
            r.num_correct_trials = v;
        }
        if let Some(v) = self.num_perf_trials {
            r.num_perf_trials = v;
        }
        if let Some(v) = self.timing {
            r.timing = v;
        }
        if let Some(v) = self.measure_performance {
            r.measure_performance = v;
        }
        if let Some(v) = self.atol {
            r.atol = v;
        }
        if let Some(v) = self.rtol {
            r.rtol = v;
        }
        if let Some(v) = self.timeout_s {
            r.timeout_s = v;
        }
        if let Some(v) = self.priority {
            r.priority = v;
        }
        if let Some(v) = self.max_speedup {
            r.max_speedup = v;
        }
        r.precision = self.precision.unwrap_or_default();
        r.timing_method = self.timing_method.unwrap_or_default();
        r.reference_backend = self.reference_backend.unwrap_or_default();
        r.device_class.clone_from(&self.device_class);
        r
    }
}

/// What the API keeps of one rollout while it is evaluated: enough to score it, none of the
/// text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutRecord {
    /// The client's rollout id.
    pub id: String,
    /// None when no kernel was found: nothing was evaluated.
    pub task_id: Option<TaskId>,
    /// The problem, when the rollout named it by reference.
    pub problem: Option<ProblemRef>,
    /// Version of the problem, whether named or sent as source.
    pub problem_hash: String,
    /// Carried through to the result.
    pub turn: u32,
    /// How the rollout is scored.
    pub profile: RewardProfile,
    /// The profile's weights with the rollout's overrides applied.
    pub weights: RewardWeights,
    /// What the reward needs of the completion.
    pub facts: CompletionFacts,
    /// What a decoy scores; a record stored before the field existed keeps the formula it
    /// was submitted under.
    #[serde(default = "DecoyReward::before_the_switch")]
    pub decoy_reward: DecoyReward,
}

/// What becomes of one rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RolloutStatus {
    /// Evaluated: `result` holds the verdict and `reward` the score.
    Done,
    /// No kernel could be extracted from the completion; scored on its text alone.
    NoKernel,
    /// The service could not evaluate it (lost workers, a sick GPU): no verdict on the
    /// model, so no reward. Resubmit it or drop it from the update.
    Failed,
    /// Its task was cancelled.
    Cancelled,
    /// The task's record expired before it was read.
    Expired,
}

/// One scored rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RolloutResult {
    /// The client's rollout id.
    pub id: String,
    /// The evaluation task; None for `no_kernel`. Rollouts with identical kernels for the
    /// same problem share one.
    pub task_id: Option<TaskId>,
    /// Whether it was scored, and if not, why.
    pub status: RolloutStatus,
    /// The rollout's `turn`, carried through.
    pub turn: u32,
    /// The problem, when the rollout named it by reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemRef>,
    /// Version of the problem evaluated ([`crate::problem::problem_hash`]).
    pub problem_hash: String,
    /// The profile `reward` was computed with.
    pub profile: RewardProfile,
    /// None when the service produced no verdict (`failed`, `cancelled`, `expired`).
    pub reward: Option<f64>,
    /// The component scores `reward` was weighted from; None when `reward` is.
    pub components: Option<RewardComponents>,
    /// The completion had a `<KERNEL>` tag followed by a fenced code block.
    pub format_ok: bool,
    /// The evaluation's result, for `done`.
    pub result: Option<EvalResult>,
    /// Text for the next turn's prompt (docs/REWARDS.md).
    pub feedback: String,
    /// Why there is no verdict, for `failed` and `cancelled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /batches/{id}/results`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RolloutResultsPage {
    /// The batch read.
    pub batch_id: BatchId,
    /// Results in the order their evaluations finished, after the `after` cursor.
    pub results: Vec<RolloutResult>,
    /// Pass as `after` to get the results that follow.
    pub cursor: u64,
    /// True when every rollout's result has been returned up to `cursor`.
    pub done: bool,
    /// Rollouts in the batch.
    pub total: usize,
}

/// Where a page that starts at cursor `after` reads: whether it includes the rollouts without
/// a kernel (cursor position 0 when there are any), and from which entry of the batch's log
/// of finished tasks it goes on.
pub fn page_start(has_no_kernel: bool, after: u64) -> (bool, u64) {
    match (has_no_kernel, after) {
        (true, 0) => (true, 0),
        (true, a) => (false, a - 1),
        (false, a) => (false, a),
    }
}

/// The rollout results of the tasks that finished, in their order. Position 0 of the cursor
/// is taken by the rollouts without a kernel (they finish at submission), when there are any;
/// `finished` holds the tasks from the next position on, each with its view (None once it
/// expired). A task shared by several rollouts yields each of them.
pub fn rollout_results(
    records: &[RolloutRecord],
    include_no_kernel: bool,
    finished: &[(TaskId, Option<TaskView>)],
) -> Vec<RolloutResult> {
    let mut by_task: HashMap<&TaskId, Vec<&RolloutRecord>> = HashMap::new();
    for r in records {
        if let Some(t) = &r.task_id {
            by_task.entry(t).or_default().push(r);
        }
    }
    let mut out = Vec::new();
    if include_no_kernel {
        out.extend(
            records
                .iter()
                .filter(|r| r.task_id.is_none())
                .map(|r| score(r, None)),
        );
    }
    for (task_id, view) in finished {
        for r in by_task.get(task_id).into_iter().flatten() {
            out.push(score(r, Some(view.as_ref())));
        }
    }
    out
}

/// `task`: None for a rollout that had no kernel; Some(None) for a task whose record expired.
fn score(r: &RolloutRecord, task: Option<Option<&TaskView>>) -> RolloutResult {
    let base = RolloutResult {
        id: r.id.clone(),
        task_id: r.task_id.clone(),
        status: RolloutStatus::NoKernel,
        turn: r.turn,
        problem: r.problem,
        problem_hash: r.problem_hash.clone(),
        profile: r.profile,
        reward: None,
        components: None,
        format_ok: r.facts.format_ok,
        result: None,
        feedback: String::new(),
        error: None,
    };
    let scored = |result: Option<&EvalResult>, status| {
        let (total, components) = reward(r.profile, &r.weights, &r.facts, result, r.decoy_reward);
        RolloutResult {
            status,
            reward: Some(total),
            components: Some(components),
            feedback: feedback(&r.facts, result),
            result: result.cloned(),
            ..base.clone()
        }
    };
    match task {
        None => scored(None, RolloutStatus::NoKernel),
        Some(None) => RolloutResult {
            status: RolloutStatus::Expired,
            feedback: "Status: not evaluated (the result expired before it was read).".into(),
            ..base.clone()
        },
        Some(Some(view)) => match (view.status, view.result.as_ref()) {
            (TaskStatus::Done, Some(result)) => scored(Some(result), RolloutStatus::Done),
            (TaskStatus::Cancelled, _) => RolloutResult {
                status: RolloutStatus::Cancelled,
                feedback: "Status: not evaluated (cancelled).".into(),
                error: view.error.clone(),
                ..base.clone()
            },
            _ => RolloutResult {
                status: RolloutStatus::Failed,
                feedback: "Status: not evaluated (the service could not run it).".into(),
                error: view
                    .error
                    .clone()
                    .or_else(|| Some("finished without a result".into())),
                ..base.clone()
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reward::parse_completion;
    use crate::task::{DeviceInfo, DeviceKind, Verdict, VerdictCode};

    fn record(id: &str, task: Option<&str>, completion: &str) -> RolloutRecord {
        let facts = parse_completion(completion).facts();
        RolloutRecord {
            id: id.into(),
            task_id: task.map(TaskId::from),
            problem: Some(ProblemRef { level: 1, id: 19 }),
            problem_hash: "sha256:00".into(),
            turn: 0,
            profile: RewardProfile::Kevin,
            weights: RewardProfile::Kevin.weights(),
            facts,
            decoy_reward: DecoyReward::Zero,
        }
    }

    fn view(id: &str, status: TaskStatus, speedup: Option<f64>) -> TaskView {
        let mut result = EvalResult::failed_before_trials(
            VerdictCode::Correctness,
            "",
            true,
            5,
            DeviceInfo {
                kind: DeviceKind::Cpu,
                name: "cpu".into(),
                class: None,
            },
        );
        result.trials_passed = 5;
        result.correct = true;
        result.error_code = None;
        result.verdict = Verdict::Ok;
        result.speedup = speedup;
        TaskView {
            task_id: TaskId::from(id),
            status,
            result: (status == TaskStatus::Done).then_some(result),
            error: (status == TaskStatus::Failed).then(|| "worker lost".to_owned()),
            attempts: 1,
            worker_id: None,
            priority: Priority::Normal,
            device_class: None,
            batch_id: None,
            submitted_at: chrono::Utc::now(),
            started_at: None,
            finished_at: None,
            cached: false,
        }
    }

    const TAGGED: &str = "<KERNEL>\n```python\nclass ModelNew: pass\n```";

    #[test]
    fn shared_tasks_yield_every_rollout_and_the_no_kernel_ones_come_first() {
        let records = vec![
            record("a", Some("t1"), TAGGED),
            record("b", Some("t1"), TAGGED),
            record("c", None, "no code"),
            record("d", Some("t2"), TAGGED),
        ];
        let page = rollout_results(
            &records,
            true,
            &[(
                TaskId::from("t1"),
                Some(view("t1", TaskStatus::Done, Some(2.0))),
            )],
        );
        let ids: Vec<&str> = page.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["c", "a", "b"]);
        assert_eq!(page[0].status, RolloutStatus::NoKernel);
        assert_eq!(page[0].reward, Some(0.0));
        assert!(page[0].feedback.contains("format error"));
        assert_eq!(page[1].status, RolloutStatus::Done);
        assert!((page[1].reward.unwrap() - 2.3).abs() < 1e-9);
        let later = rollout_results(&records, false, &[(TaskId::from("t2"), None)]);
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].status, RolloutStatus::Expired);
        assert_eq!(later[0].reward, None);
    }

    #[test]
    fn the_cursor_counts_the_no_kernel_rollouts_as_one_position() {
        assert_eq!(page_start(true, 0), (true, 0));
        assert_eq!(page_start(true, 1), (false, 0));
        assert_eq!(page_start(true, 5), (false, 4));
        assert_eq!(page_start(false, 0), (false, 0));
        assert_eq!(page_start(false, 5), (false, 5));
    }

    #[test]
    fn a_service_failure_carries_no_reward() {
        let records = vec![record("a", Some("t1"), TAGGED)];
        let page = rollout_results(
            &records,
            false,
            &[(
                TaskId::from("t1"),
                Some(view("t1", TaskStatus::Failed, None)),
            )],
        );
        assert_eq!(page[0].status, RolloutStatus::Failed);
        assert_eq!(page[0].reward, None);
        assert_eq!(page[0].error.as_deref(), Some("worker lost"));
    }

    #[test]
    fn a_record_stored_before_the_decoy_switch_keeps_the_old_formula() {
        let mut stored = serde_json::to_value(record("r1", Some("t1"), TAGGED)).unwrap();
        stored.as_object_mut().unwrap().remove("decoy_reward");
        let old: RolloutRecord = serde_json::from_value(stored).unwrap();
        assert_eq!(old.decoy_reward, DecoyReward::Profile);
        let rollout: Rollout =
            serde_json::from_str(r#"{"id":"a","reference_code":"x","completion":"y"}"#).unwrap();
        assert_eq!(
            rollout.decoy_reward,
            DecoyReward::Zero,
            "new rollouts: zero"
        );
    }

    #[test]
    fn batches_are_validated_per_rollout() {
        let rollout = |id: &str| Rollout {
            id: id.into(),
            problem: Some(ProblemRef { level: 1, id: 1 }),
            reference_code: None,
            completion: TAGGED.into(),
            backend: Backend::Triton,
            turn: 0,
            profile: RewardProfile::KernelRl,
            weights: None,
            decoy_reward: DecoyReward::Zero,
        };
        let mut batch = RolloutBatchRequest {
            rollouts: vec![rollout("a"), rollout("b")],
            eval: RolloutEvalSettings::default(),
            idempotency_key: None,
        };
        assert!(batch.validate().is_ok());
        batch.rollouts[1].id = "a".into();
        assert_eq!(
            batch.validate().unwrap_err().field.as_deref(),
            Some("rollouts[1].id")
        );
        batch.rollouts[1].id = "b".into();
        batch.rollouts[1].reference_code = Some("x".into());
        assert_eq!(
            batch.validate().unwrap_err().field.as_deref(),
            Some("rollouts[1].problem")
        );
        batch.rollouts[1].reference_code = None;
        batch.rollouts[0].weights = Some(WeightsOverride {
            speed: Some(f64::NAN),
            ..WeightsOverride::default()
        });
        assert_eq!(
            batch.validate().unwrap_err().field.as_deref(),
            Some("rollouts[0].weights.speed")
        );
    }
}
