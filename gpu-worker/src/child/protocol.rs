//! The harness's side of the result pipe (fd 3), parsed strictly: the child is untrusted, so
//! anything off-protocol is a violation, never an instruction. See docs/harness-protocol.md.

use crucible_shared::{
    DeviceInfo, Flag, RuntimeStats, SEVERITY_FLAG, SEVERITY_HACK, SEVERITY_REJECT, TimingCheck,
    VerdictCode,
};
use serde::Deserialize;
use std::collections::BTreeMap;

pub mod selftest;
mod stage;
pub use selftest::{JudgeReport, RunnerReport, SelftestReport, SpaceReport, StatusFields};
pub use stage::Stage;

/// Software versions the harness reports (`torch`, `triton`, `cuda`, `python`); a value is
/// null when that software is absent.
pub type SoftwareReport = BTreeMap<String, Option<String>>;

/// Bounds on the software report, so an untrusted child cannot make the worker keep much.
const MAX_SOFTWARE_ENTRIES: usize = 16;
const MAX_SOFTWARE_CHARS: usize = 128;

/// Bounds on screening findings (the child is untrusted).
const MAX_FLAGS: usize = 64;
const MAX_FLAG_CHARS: usize = 256;

/// Longest line accepted on the result pipe.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The result line: the part of `EvalResult` the harness knows.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarnessResult {
    /// The candidate imported and was instantiated (its extensions built, its kernels compiled).
    pub compiled: bool,
    /// Every correctness trial matched the reference within `atol`/`rtol`.
    pub correct: bool,
    /// Correctness trials that matched.
    pub trials_passed: u32,
    /// Correctness trials run or due (`num_correct_trials`).
    pub trials_total: u32,
    /// Largest absolute difference from the reference over the trials.
    #[serde(default)]
    pub max_abs_diff: Option<f64>,
    /// Mean absolute difference from the reference over the trials.
    #[serde(default)]
    pub mean_abs_diff: Option<f64>,
    /// The candidate's timing, when it was correct and performance was measured.
    #[serde(default)]
    pub runtime_ms: Option<RuntimeStats>,
    /// The reference's timing, measured beside the candidate's or cached (`ref_timing_cached`).
    #[serde(default)]
    pub ref_runtime_ms: Option<RuntimeStats>,
    /// Reference time over candidate time; above the spec's `max_speedup` it is an integrity
    /// finding.
    #[serde(default)]
    pub speedup: Option<f64>,
    /// Why the evaluation failed, as the harness judged it; `None` on success.
    #[serde(default)]
    pub error_code: Option<VerdictCode>,
    /// The harness's account of the failure (the candidate's exception, a mismatch).
    #[serde(default)]
    pub error_message: Option<String>,
    /// The device the harness ran on, as torch names it.
    pub device: DeviceInfo,
    /// Harness-side milliseconds per stage, merged with the worker's own.
    #[serde(default)]
    pub stage_ms: BTreeMap<String, f64>,
    /// The reference was not timed: `ref_runtime_ms` are the statistics the worker passed in
    /// `spec.json` (`reference_timing`).
    #[serde(default)]
    pub ref_timing_cached: bool,
    /// Versions of the software the evaluation ran with, read before the candidate ran.
    #[serde(default)]
    pub software: Option<SoftwareReport>,
    /// Static screening findings (`rule`, `severity` reject|flag, `detail`).
    #[serde(default)]
    pub flags: Vec<Flag>,
    /// `load_inline` calls answered from `spec.prebuilt` instead of the compiler.
    #[serde(default)]
    pub builds_reused: u32,
    /// Proof of work of the counted forward (see `EvalResult`).
    #[serde(default)]
    pub custom_kernel_count: Option<u32>,
    /// The candidate's kernels plus the torch ops the counted forward dispatched.
    #[serde(default)]
    pub total_kernel_count: Option<u32>,
    /// Share of the counted forward's time spent in the candidate's own kernels (0 to 1).
    #[serde(default)]
    pub custom_time_coverage: Option<f64>,
    /// The judge's own check of the timing (trusted code wrote it, like every field here).
    #[serde(default)]
    pub timing_check: Option<TimingCheck>,
}

/// One `load_inline` extension the prepare stage built.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct BuiltExtension {
    /// The module name given to `load_inline` (the `PyInit_` symbol).
    pub name: String,
    /// The harness's key of the call (its arguments, torch, architecture): sha256 hex.
    pub key: String,
    /// The built file, relative to the task directory, under `build/`.
    pub file: String,
    /// Whether the module is a Python extension module (`is_python_module` of `load_inline`)
    /// rather than a plain shared library loaded for its ops.
    pub python_module: bool,
}

/// The end of a prepare stage that reached no final verdict.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreparedReport {
    /// The extensions the candidate's import built (at most [`MAX_BUILDS`]).
    pub builds: Vec<BuiltExtension>,
    /// What the import raised on the CPU, if anything: for the GPU stage to judge.
    pub import_error: Option<String>,
    /// Harness-side milliseconds per stage of the CPU child.
    #[serde(default)]
    pub stage_ms: BTreeMap<String, f64>,
    /// Versions of the software the CPU stage ran with: part of the build cache key.
    #[serde(default)]
    pub software: Option<SoftwareReport>,
    /// Static screening findings on the candidate (as [`HarnessResult::flags`]).
    #[serde(default)]
    pub flags: Vec<Flag>,
    /// The Triton cache files the dry run wrote, relative to the task directory (each
    /// `cache/triton/<entry>/<file>`, at most [`MAX_TRITON_FILES`]); checked by
    /// [`check_triton_file`], opened without following links.
    #[serde(default)]
    pub triton_cache: Vec<String>,
    /// Kernel specialisations the dry run compiled.
    #[serde(default)]
    pub triton_kernels: u32,
    /// Why the dry run stopped before the forward's end, if it did (for the worker's log).
    #[serde(default)]
    pub triton_stopped: Option<String>,
}

/// Most Triton cache files one CPU stage may hand over.
pub const MAX_TRITON_FILES: usize = 256;

/// Where a dry run's Triton cache files live in a task directory (`TRITON_CACHE_DIR`).
pub const TRITON_CACHE_PREFIX: &str = "cache/triton/";

/// A Triton cache file as a child may name it: `cache/triton/<entry>/<file>`, two plain
/// components (letters, digits, `_`, `-`, `.`, not starting with a dot), nothing else.
pub fn check_triton_file(path: &str) -> bool {
    let plain = |c: &str| {
        !c.is_empty()
            && c.len() <= 128
            && !c.starts_with('.')
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    };
    match path.strip_prefix(TRITON_CACHE_PREFIX) {
        Some(rest) => {
            let parts: Vec<&str> = rest.split('/').collect();
            parts.len() == 2 && parts.iter().all(|c| plain(c))
        }
        None => false,
    }
}

/// Most extensions one candidate may build.
pub const MAX_BUILDS: usize = 16;

/// One line on the result pipe, tagged by its `event`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum HarnessEvent {
    /// A stage began.
    Stage {
        /// Its wire name, checked against [`Stage`] by the reader.
        stage: String,
    },
    /// The judge parked at its gate between two device steps (not a stage: what the child
    /// was doing when it ended is the stage before).
    Park,
    /// The peak bytes the task's tensors will take on the device (the harness's `memory.py`),
    /// sent before standby, while only trusted code has run: the worker admits children by
    /// it (`worker::pipeline`).
    Footprint {
        /// Bytes, judge and runner together, CUDA contexts not included.
        bytes: u64,
    },
    /// The last word of an evaluation stage.
    Result(Box<HarnessResult>),
    /// The last word of a prepare (CPU) stage.
    Prepared(Box<PreparedReport>),
    /// The judge has entered its sandbox (the layers it applied, informational: the worker
    /// checks the judge itself, `sandbox::verify`).
    Sandbox {
        /// The names of the layers, in the order entered.
        layers: Vec<String>,
        /// How long entering them took (the judge's clock).
        #[serde(default)]
        ms: Option<f64>,
    },
    /// A layer of the sandbox plan could not be entered; the child exits as a fault of this
    /// node.
    SandboxFailed(SandboxFailure),
    /// The start-up self-test's findings (`crate::task::sandbox_selftest`).
    Selftest(Box<SelftestReport>),
}

/// Why a layer of the sandbox plan could not be entered (`sandbox_failed`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SandboxFailure {
    /// The layer that failed as sandbox.py names it (`user`, `mount`, `landlock`, `seccomp`, ...).
    pub layer: String,
    /// What the judge caught entering it (bounded).
    pub error: String,
}

/// Bounds on what a child says about its sandbox.
const MAX_LAYERS: usize = 16;
const MAX_SANDBOX_ERROR: usize = 4096;

/// Everything read from the pipe of one child.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transcript {
    /// The stages the child entered, in order.
    pub stages: Vec<Stage>,
    /// How often the judge parked at its gate between device steps.
    pub parks: u32,
    /// The footprint the judge reported (the first one: it is sent once, before the
    /// candidate is loaded).
    pub footprint: Option<u64>,
    /// A well-formed stage name that is not a [`Stage`] (the first one; later stage lines are
    /// still read): the harness and this worker disagree, a fault of the service.
    pub unknown_stage: Option<String>,
    /// The result line of an evaluation stage.
    pub result: Option<HarnessResult>,
    /// The end of a prepare stage (instead of a result).
    pub prepared: Option<PreparedReport>,
    /// The layers the judge said it entered.
    pub sandbox: Option<Vec<String>>,
    /// How long entering them took, in milliseconds.
    pub sandbox_ms: Option<f64>,
    /// The layer that could not be entered (the end of the child).
    pub(crate) sandbox_failed: Option<SandboxFailure>,
    /// The end of a self-test stage.
    pub selftest: Option<SelftestReport>,
    /// The first protocol violation, if any; later lines are ignored once one is seen.
    pub violation: Option<String>,
}

impl Transcript {
    /// Whether the child has said its last word (a result, a prepared stage, a self-test
    /// report, or a sandbox failure).
    pub fn ended(&self) -> bool {
        self.result.is_some()
            || self.prepared.is_some()
            || self.selftest.is_some()
            || self.sandbox_failed.is_some()
    }

    /// The stage the child was in when it last spoke.
    pub fn last_stage(&self) -> Option<Stage> {
        self.stages.last().copied()
    }

    /// Records a violation found outside `push_line` (keeps the first one).
    pub fn violate(&mut self, why: impl Into<String>) {
        self.violation.get_or_insert_with(|| why.into());
    }

    /// Feeds one line (without its newline).
    pub fn push_line(&mut self, line: &[u8]) {
        if self.violation.is_some() {
            return;
        }
        if line.len() > MAX_LINE_BYTES {
            self.violation = Some(format!("protocol line of {} bytes", line.len()));
            return;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if self.ended() {
            self.violation = Some("output after the result".to_owned());
            return;
        }
        match serde_json::from_slice::<HarnessEvent>(line) {
            Ok(HarnessEvent::Stage { stage }) => {
                if stage.len() > 64
                    || !stage
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    self.violation = Some("malformed stage name".to_owned());
                } else if let Some(known) = Stage::parse(&stage) {
                    if self.stages.len() < 64 {
                        self.stages.push(known);
                    }
                } else {
                    self.unknown_stage.get_or_insert(stage);
                }
            }
            Ok(HarnessEvent::Park) => self.parks = self.parks.saturating_add(1),
            Ok(HarnessEvent::Footprint { bytes }) => {
                self.footprint.get_or_insert(bytes);
            }
            Ok(HarnessEvent::Result(result)) => match check_result(&result) {
                Ok(()) => self.result = Some(*result),
                Err(why) => self.violation = Some(why),
            },
            Ok(HarnessEvent::Prepared(prepared)) => match check_prepared(&prepared) {
                Ok(()) => self.prepared = Some(*prepared),
                Err(why) => self.violation = Some(why),
            },
            Ok(HarnessEvent::Sandbox { layers, ms }) => {
                let plain = |l: &String| l.len() <= 16 && l.bytes().all(|b| b.is_ascii_lowercase());
                if self.sandbox.is_some() || layers.len() > MAX_LAYERS || !layers.iter().all(plain)
                {
                    self.violation = Some("malformed sandbox line".to_owned());
                } else {
                    self.sandbox = Some(layers);
                    self.sandbox_ms = ms.filter(|m| m.is_finite() && *m >= 0.0);
                }
            }
            Ok(HarnessEvent::SandboxFailed(failure)) => {
                if failure.layer.len() > 16 || failure.error.len() > MAX_SANDBOX_ERROR {
                    self.violation = Some("oversized sandbox failure".to_owned());
                } else {
                    self.sandbox_failed = Some(failure);
                }
            }
            Ok(HarnessEvent::Selftest(report)) => {
                if report.runner.visible_pids.len() > 64 || report.runner.cgroup.len() > 8192 {
                    self.violation = Some("oversized self-test report".to_owned());
                } else {
                    self.selftest = Some(*report);
                }
            }
            Err(e) => self.violation = Some(format!("unparseable protocol line: {e}")),
        }
    }
}

/// A `prepared` line within bounds: few builds, plain names, hex keys, files under `build/`.
fn check_prepared(p: &PreparedReport) -> Result<(), String> {
    if p.builds.len() > MAX_BUILDS {
        return Err("too many builds".to_owned());
    }
    for b in &p.builds {
        let name_ok = !b.name.is_empty()
            && b.name.len() <= 128
            && b.name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_');
        let key_ok = b.key.len() == 64 && b.key.bytes().all(|c| c.is_ascii_hexdigit());
        let file_ok = b.file.len() <= 512
            && b.file.starts_with("build/")
            && b.file
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != "..");
        if !(name_ok && key_ok && file_ok) {
            return Err("malformed build entry".to_owned());
        }
    }
    if p.import_error.as_ref().is_some_and(|e| e.len() > 16 * 1024) {
        return Err("oversized import error".to_owned());
    }
    if p.flags.len() > MAX_FLAGS {
        return Err("oversized screening flags".to_owned());
    }
    if p.triton_cache.len() > MAX_TRITON_FILES
        || !p.triton_cache.iter().all(|f| check_triton_file(f))
    {
        return Err("malformed triton cache list".to_owned());
    }
    if p.triton_stopped.as_ref().is_some_and(|e| e.len() > 4096) {
        return Err("oversized triton dry run report".to_owned());
    }
    Ok(())
}

/// Rejects results that are internally inconsistent, whoever wrote them.
fn check_result(r: &HarnessResult) -> Result<(), String> {
    if r.trials_passed > r.trials_total {
        return Err("trials_passed exceeds trials_total".to_owned());
    }
    if r.correct && (r.trials_passed != r.trials_total || r.error_code.is_some()) {
        return Err("correct result with failed trials or an error code".to_owned());
    }
    let finite = |x: Option<f64>| x.is_none_or(|v| v.is_finite() && v >= 0.0);
    if !finite(r.max_abs_diff) || !finite(r.speedup) {
        return Err("non-finite or negative figure in result".to_owned());
    }
    for stats in [r.runtime_ms, r.ref_runtime_ms].into_iter().flatten() {
        if !stats.is_sane() {
            return Err("invalid runtime statistics".to_owned());
        }
    }
    if r.ref_timing_cached && r.ref_runtime_ms.is_none() {
        return Err("ref_timing_cached without ref_runtime_ms".to_owned());
    }
    if let Some(software) = &r.software {
        let long = |s: &str| s.len() > MAX_SOFTWARE_CHARS;
        if software.len() > MAX_SOFTWARE_ENTRIES
            || software
                .iter()
                .any(|(k, v)| long(k) || v.as_deref().is_some_and(long))
        {
            return Err("oversized software report".to_owned());
        }
    }
    if r.flags.len() > MAX_FLAGS
        || r.flags.iter().any(|f| {
            f.rule.len() > MAX_FLAG_CHARS
                || f.detail.len() > MAX_FLAG_CHARS
                || !matches!(
                    f.severity.as_str(),
                    SEVERITY_REJECT | SEVERITY_FLAG | SEVERITY_HACK
                )
        })
    {
        return Err("oversized or malformed flags".to_owned());
    }
    let hack = r.flags.iter().any(|f| f.severity == SEVERITY_HACK);
    if hack && r.correct {
        return Err("correct result with a hack finding".to_owned());
    }
    if r.error_code == Some(VerdictCode::Integrity) && !hack {
        return Err("INTEGRITY without a hack finding".to_owned());
    }
    if let (Some(custom), Some(total)) = (r.custom_kernel_count, r.total_kernel_count)
        && custom > total
    {
        return Err("more custom kernels than kernels".to_owned());
    }
    if r.custom_time_coverage
        .is_some_and(|c| !(c.is_finite() && (0.0..=1.0).contains(&c)))
    {
        return Err("custom_time_coverage outside 0-1".to_owned());
    }
    if r.error_code == Some(VerdictCode::Screened)
        && (r.compiled || !r.flags.iter().any(|f| f.severity == "reject"))
    {
        return Err("SCREENED without a reject flag, or compiled".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
