//! A task as clients see it, and the result of an evaluation.

pub use crate::device::{DeviceInfo, DeviceKind};
use crate::ids::{BatchId, TaskId, WorkerId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

mod verdict;
pub use verdict::{Flag, SEVERITY_FLAG, SEVERITY_HACK, SEVERITY_REJECT, Verdict, VerdictCode};

/// `queued → running → done | failed | cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    /// Waiting for a worker (again, after a retry).
    Queued,
    /// A worker holds its lease and is evaluating it.
    Running,
    /// The evaluation reached a verdict (which may be "does not compile", "wrong", "hangs").
    Done,
    /// The service could not produce a verdict after `max_attempts` (an outage, not a kernel).
    Failed,
    /// Cancelled by its submitter or with its tenant before it finished; it has no result.
    Cancelled,
}

impl TaskStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::Done,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// The name on the wire and in the broker (`queued`, `running`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Done => "done",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// The status [`TaskStatus::as_str`] gives `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// `done`, `failed` or `cancelled`: the task will not change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Done | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

/// Summary statistics of timed trials, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RuntimeStats {
    /// The figure `speedup` is computed from: robust to the odd slow trial.
    pub median: f64,
    /// Mean over the trials.
    pub mean: f64,
    /// Standard deviation over the trials: how noisy the timing was.
    pub std: f64,
    /// Fastest trial.
    pub min: f64,
    /// Slowest trial.
    pub max: f64,
    /// Timed calls the figures are over: `num_perf_trials` in fixed timing, what adaptive
    /// timing needed (absent in results from before it was reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials: Option<u32>,
    /// A distribution-free 95 % confidence interval `[lo, hi]` of the median: two order
    /// statistics of the trials chosen by the binomial distribution (below 6 trials no pair
    /// reaches 95 %: then `[min, max]`). Absent in results from before it was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ci: Option<[f64; 2]>,
}

impl RuntimeStats {
    /// Statistics with no trial count or interval (cached or old figures, tests).
    pub fn new(median: f64, mean: f64, std: f64, min: f64, max: f64) -> Self {
        Self {
            median,
            mean,
            std,
            min,
            max,
            trials: None,
            median_ci: None,
        }
    }

    /// Whether these could be timings: every figure finite and >= 0, `min <= max`, at least
    /// one trial, an interval with `lo <= hi`. The one check of statistics a child reported
    /// and of those read back from the reference cache.
    pub fn is_sane(&self) -> bool {
        let ci = self.median_ci.unwrap_or([self.min, self.max]);
        let all = [
            self.median,
            self.mean,
            self.std,
            self.min,
            self.max,
            ci[0],
            ci[1],
        ];
        all.iter().all(|v| v.is_finite() && *v >= 0.0)
            && self.min <= self.max
            && ci[0] <= ci[1]
            && self.trials != Some(0)
    }
}

/// The verdict of one evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EvalResult {
    /// The candidate built, imported and instantiated `ModelNew` (its kernels compiled), so
    /// the correctness trials ran.
    pub compiled: bool,
    /// Every correctness trial matched the reference within tolerance.
    pub correct: bool,
    /// Correctness trials that matched; every trial runs even after a mismatch, so this is
    /// partial credit.
    pub trials_passed: u32,
    /// Correctness trials asked for (`num_correct_trials`).
    pub trials_total: u32,
    /// Largest absolute difference to the reference over all trials.
    pub max_abs_diff: Option<f64>,
    /// Mean absolute difference to the reference over all trials.
    pub mean_abs_diff: Option<f64>,
    /// Candidate timings (only when correct and performance was asked for).
    pub runtime_ms: Option<RuntimeStats>,
    /// Reference timings, same device, same protocol.
    pub ref_runtime_ms: Option<RuntimeStats>,
    /// True when the reference timing came from the cache: `ref_runtime_ms` was measured
    /// earlier for the same problem on the same GPU model, driver, software versions and
    /// timing config, and only the candidate was timed now.
    #[serde(default)]
    pub ref_runtime_cached: bool,
    /// `ref_runtime_ms.median / runtime_ms.median`.
    pub speedup: Option<f64>,
    /// Why the candidate did not pass; absent when it did.
    pub error_code: Option<VerdictCode>,
    /// What `error_code` means here, for people (the build log's error, the exception, ...).
    pub error_message: Option<String>,
    /// The device the evaluation ran on.
    pub device: DeviceInfo,
    /// Wall time of each stage of the evaluation, in milliseconds.
    #[serde(default)]
    pub stage_ms: BTreeMap<String, f64>,
    /// The last lines the candidate printed (capped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
    /// What the result means, in one word: `ok`, `incorrect`, `decoy`, `hack` or `error`.
    #[serde(default)]
    pub verdict: Verdict,
    /// Findings of static screening and of the runtime integrity checks; empty when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<Flag>,
    /// Proof of work, from one counted forward after the correctness trials: launches of the
    /// candidate's own kernels (Triton kernels its file defines, calls into its own CUDA
    /// extensions) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_kernel_count: Option<u32>,
    /// ... and all device work of that forward (its own launches plus every other device
    /// operation dispatched through torch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_kernel_count: Option<u32>,
    /// Share of that forward's device time spent in the candidate's own kernels (0-1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_time_coverage: Option<f64>,
    /// Where the candidate's `load_inline` extensions came from, when the GPU stage loaded
    /// them prebuilt instead of compiling; absent when it had none or compiled them itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildSource>,
    /// Version of the problem evaluated: `sha256:` and the hex SHA-256 of its reference source
    /// (the same hash `GET /problems` lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem_hash: Option<String>,
    /// The judge's own check of the timing, measured outside the candidate's process (absent
    /// when nothing was timed, and in results from before it was reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing_check: Option<TimingCheck>,
}

/// What the judge measured itself about a timing (docs/INTEGRITY.md, "Timing the candidate
/// cannot write"): `runtime_ms` is the candidate's process's claim, checked against
/// `floor_ms`; the speedup comes from it only when the check passed (else the verdict is
/// `hack`, flag `timing-mismatch`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TimingCheck {
    /// How long the judge waited, with every neighbour parked, until no other process's work
    /// was queued on the GPU, before it timed anything (0 on CPU).
    pub quiet_wait_ms: f64,
    /// The device was quiet when timing began (the judge waited for it) and, for a reference
    /// timed now (not cached), with every other process of the task stopped, still quiet after
    /// it: only such a reference timing is cached.
    pub device_quiet: bool,
    /// The judge's floor under the candidate's per-call time in ms: its own clock around
    /// batches of calls on fresh inputs whose every output it checked, less a bound on the
    /// overhead. Absent when the check did not run (integrity checks off, or the run ended
    /// before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_ms: Option<f64>,
    /// Calls on fresh inputs in each of the check's batches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<u32>,
    /// Batches the floor was taken from (the fastest one counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batches: Option<u32>,
    /// The fastest batch's wall time in ms, by the judge's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_ms: Option<f64>,
    /// What the judge measured itself for the per-call copy and synchronisation of a batch, in
    /// ms: the floor subtracts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_overhead_ms: Option<f64>,
}

/// How a CUDA candidate's extensions were built before it took the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BuildSource {
    /// Built for this task by the node's CPU compile pool, while the GPU ran other tasks.
    CompilePool,
    /// Found in the node-wide build cache (same source, torch, CUDA and architecture): the
    /// compiler did not run for this task.
    Cache,
}

impl EvalResult {
    /// A verdict reached without any trial having run (crash, timeout, compile failure, ...).
    pub fn failed_before_trials(
        code: VerdictCode,
        message: impl Into<String>,
        compiled: bool,
        trials_total: u32,
        device: DeviceInfo,
    ) -> Self {
        Self {
            compiled,
            correct: false,
            trials_passed: 0,
            trials_total,
            max_abs_diff: None,
            mean_abs_diff: None,
            runtime_ms: None,
            ref_runtime_ms: None,
            ref_runtime_cached: false,
            speedup: None,
            error_code: Some(code),
            error_message: Some(message.into()),
            device,
            stage_ms: BTreeMap::new(),
            output_tail: None,
            verdict: Verdict::Error,
            flags: Vec::new(),
            custom_kernel_count: None,
            total_kernel_count: None,
            custom_time_coverage: None,
            build: None,
            problem_hash: None,
            timing_check: None,
        }
    }
}

/// `GET /tasks/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskView {
    /// The task.
    pub task_id: TaskId,
    /// Where it is in its lifecycle; poll until it is terminal.
    pub status: TaskStatus,
    /// The evaluation's result; present once `done`.
    pub result: Option<EvalResult>,
    /// Why the service could not produce a verdict (`failed`) or why it stopped (`cancelled`).
    pub error: Option<String>,
    /// Attempts started so far (1 on the first claim; +1 for each retry after a lost worker).
    pub attempts: u32,
    /// The worker running it, or the one that finished it; cleared when it is requeued.
    pub worker_id: Option<WorkerId>,
    /// The priority it was submitted with.
    pub priority: crate::request::Priority,
    /// The device class it must run on: the request's, or the one its batch's group was
    /// placed on at submission; absent when any worker may run it. `result.device.class` says
    /// where it did run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_class: Option<crate::device::DeviceClass>,
    /// The batch it was submitted in, if any.
    pub batch_id: Option<BatchId>,
    /// When it was accepted.
    pub submitted_at: DateTime<Utc>,
    /// When its running (or last) attempt began; cleared when it is requeued.
    pub started_at: Option<DateTime<Utc>>,
    /// When it reached a terminal status.
    pub finished_at: Option<DateTime<Utc>>,
    /// True when `result` was served from the result cache: an identical request was
    /// evaluated within the cache TTL and this task never reached a worker (`attempts` 0).
    #[serde(default)]
    pub cached: bool,
}

/// `202` answer of `POST /evaluate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SubmitResponse {
    /// The task to poll with `GET /tasks/{id}`.
    pub task_id: TaskId,
    /// Its status now: `done` at once for a cached answer.
    pub status: TaskStatus,
    /// True when an idempotency key matched an earlier submission.
    #[serde(default)]
    pub deduplicated: bool,
    /// True when an identical request was already queued or running: `task_id` is that task,
    /// whose one evaluation answers both.
    #[serde(default)]
    pub coalesced: bool,
    /// True when the answer came from the result cache: `task_id` is a new task, already
    /// `done`, whose result is the cached one.
    #[serde(default)]
    pub cached: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_stats_without_trials_or_interval_still_parse() {
        let old: RuntimeStats =
            serde_json::from_str(r#"{"median":1,"mean":1.1,"std":0.1,"min":0.9,"max":1.5}"#)
                .unwrap();
        assert_eq!(old, RuntimeStats::new(1.0, 1.1, 0.1, 0.9, 1.5));
        assert!(old.is_sane());
        // Left out again when absent: old readers see the shape they know.
        assert!(!serde_json::to_string(&old).unwrap().contains("trials"));
        let new = RuntimeStats {
            trials: Some(12),
            median_ci: Some([0.95, 1.05]),
            ..old
        };
        let json = serde_json::to_string(&new).unwrap();
        assert!(
            json.contains(r#""trials":12,"median_ci":[0.95,1.05]"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<RuntimeStats>(&json).unwrap(), new);
        assert!(new.is_sane());
        for insane in [
            RuntimeStats {
                trials: Some(0),
                ..new
            },
            RuntimeStats {
                median_ci: Some([1.1, 1.0]),
                ..new
            },
            RuntimeStats {
                median_ci: Some([f64::NAN, 1.0]),
                ..new
            },
            RuntimeStats { min: 2.0, ..new },
        ] {
            assert!(!insane.is_sane(), "{insane:?}");
        }
    }

    fn flag(rule: &str, severity: &str) -> Flag {
        Flag {
            rule: rule.to_owned(),
            severity: severity.to_owned(),
            detail: String::new(),
        }
    }

    #[test]
    fn verdicts_follow_codes_flags_and_proof_of_work() {
        use VerdictCode as C;
        assert_eq!(Verdict::of(None, true, &[], Some(2)), Verdict::Ok);
        // Counted forward not run (e.g. an older harness): nothing says decoy.
        assert_eq!(Verdict::of(None, true, &[], None), Verdict::Ok);
        assert_eq!(Verdict::of(None, true, &[], Some(0)), Verdict::Decoy);
        assert_eq!(
            Verdict::of(Some(C::Correctness), false, &[], Some(1)),
            Verdict::Incorrect
        );
        assert_eq!(
            Verdict::of(Some(C::Timeout), false, &[], None),
            Verdict::Error
        );
        let hack = [flag("input-mutated", SEVERITY_HACK)];
        assert_eq!(
            Verdict::of(Some(C::Integrity), false, &hack, Some(1)),
            Verdict::Hack
        );
        // A hack finding wins over a wrong answer: the trainer must see the cheating.
        assert_eq!(
            Verdict::of(Some(C::Correctness), false, &hack, Some(1)),
            Verdict::Hack
        );
        let noted = [flag("implausible-speedup", SEVERITY_FLAG)];
        assert_eq!(Verdict::of(None, true, &noted, Some(1)), Verdict::Ok);
        let screened = [flag("try-except-fallback", SEVERITY_REJECT)];
        assert_eq!(
            Verdict::of(Some(C::Screened), false, &screened, None),
            Verdict::Hack
        );
        // A missing ModelNew is a format error, not cheating.
        let format = [flag("no-modelnew", SEVERITY_REJECT)];
        assert_eq!(
            Verdict::of(Some(C::Screened), false, &format, None),
            Verdict::Error
        );
    }
}
