//! Turns the way a child ended into a verdict about the candidate, or into a service fault to
//! retry elsewhere. Pure: every rule is tested without spawning anything.

use crate::child::protocol::{HarnessResult, Stage};
use crate::child::supervisor::{ChildOutcome, ExitKind, KillReason};
use crate::config::WorkerConfig;
use crate::process::task_dir::space::Exhausted;
use crucible_shared::{DeviceInfo, EvalResult, TaskSpec, Verdict, VerdictCode};

/// Output excerpt kept in a result.
const RESULT_TAIL_BYTES: usize = 2048;

/// Substrings by which the CUDA runtime reports a device fault.
const CUDA_FAULT_MARKERS: &[&str] = &[
    "illegal memory access",
    "misaligned address",
    "unspecified launch failure",
    "illegal instruction",
    "device-side assert",
    "CUDA error",
    "cudaErrorIllegalAddress",
];

/// The harness's exit status when its runner was killed by SIGKILL from outside it (the
/// runner's seccomp filter refuses it sending SIGKILL, so it did not do it itself).
pub const RUNNER_KILLED_EXIT: i32 = 4;

/// The harness's exit status when the GPU never became quiet for timing: another process's
/// work stayed queued on it (`harness/timing_check.py`). Not the candidate's doing as far as
/// the judge can tell: the task is retried, alone on its device.
pub const DEVICE_BUSY_EXIT: i32 = 5;

/// Signals a process raises on itself by what it runs (a fault, an abort, a limit of its own):
/// a death by one of them is the task's doing. Any other signal came from outside the task.
const SELF_INFLICTED: &[i32] = &[
    nix::libc::SIGSEGV,
    nix::libc::SIGBUS,
    nix::libc::SIGILL,
    nix::libc::SIGFPE,
    nix::libc::SIGABRT,
    nix::libc::SIGTRAP,
    nix::libc::SIGSYS,
    nix::libc::SIGXCPU,
    nix::libc::SIGXFSZ,
];

/// What the worker does with a finished child.
#[derive(Debug, Clone, PartialEq)]
pub enum Classified {
    /// A verdict about the candidate: store it, the task is done.
    Verdict(Box<EvalResult>),
    /// The service failed (not the candidate): give the task back for another attempt.
    ServiceFault(String),
    /// The task was cancelled while running: store nothing.
    Cancelled,
}

/// Facts the classification needs besides the outcome.
#[derive(Debug, Clone)]
pub(crate) struct VerdictContext {
    /// Correctness trials due (`num_correct_trials`), for a result the harness did not give.
    pub trials_total: u32,
    /// The device the task ran on.
    pub device: DeviceInfo,
    /// The task's deadline, for timeout messages.
    pub timeout_s: u32,
    /// The output bound, for output-limit messages.
    pub max_output_bytes: u64,
    /// The memory bound, for memory-limit messages.
    pub max_memory_bytes: u64,
    /// The process bound, for process-limit messages.
    pub max_processes: u64,
}

impl VerdictContext {
    /// The context of one of `spec`'s children on the worker configured by `cfg`.
    pub fn for_task(spec: &TaskSpec, cfg: &WorkerConfig) -> Self {
        Self {
            trials_total: spec.request.num_correct_trials,
            device: cfg.device_info(),
            timeout_s: spec.request.timeout_s,
            max_output_bytes: cfg.limits.max_output_bytes,
            max_memory_bytes: cfg.limits.max_memory_bytes,
            max_processes: cfg.limits.max_processes,
        }
    }
}

/// Harness stages in order; a child that ends before `load_candidate` has not run any
/// candidate code, so its end cannot be the candidate's fault. Every stage is ranked: one
/// left out counted as no stage at all, so a candidate that hung or crashed in `profile` or
/// `integrity` was a service fault, retried and finally `failed` with no verdict to score.
const RANKED: &[Stage] = &[
    Stage::Setup,
    Stage::LoadReference,
    Stage::Standby,
    Stage::LoadCandidate,
    Stage::Precompile,
    Stage::Instantiate,
    Stage::Correctness,
    Stage::Profile,
    Stage::CompileReference,
    Stage::TimingGate,
    Stage::Performance,
    Stage::Integrity,
];

fn stage_rank(stage: Option<Stage>) -> usize {
    stage
        .and_then(|s| RANKED.iter().position(|x| *x == s))
        .map(|i| i + 1)
        .unwrap_or(0)
}

/// An end caused from outside the task: a judge outside its sandbox, the device never quiet
/// for timing, a judge killed by a signal it did not raise (the candidate cannot reach it: its
/// filters refuse signalling it and changing its limits), or a SIGKILL of the runner while the
/// kernel's OOM killer killed something elsewhere on the host and the task's own cgroup has no
/// record of it. A fault of the service to retry, never a verdict and never cached. For the
/// candidate's own process only the worker (whose kills carry their reason) and the OOM killer
/// count as outside: any other SIGKILL of the runner (an RLIMIT_CPU or a timer the candidate
/// set on itself) is its own end, `CRASH` (`classify`).
fn outside_cause(outcome: &ChildOutcome) -> Option<String> {
    if outcome.killed_for == Some(KillReason::SandboxBroken) {
        return Some(format!(
            "the task child was outside its sandbox: {}",
            outcome.sandbox_broken.as_deref().unwrap_or("unknown")
        ));
    }
    if outcome.killed_for.is_some() || outcome.transcript.result.is_some() {
        return None;
    }
    if outcome.exit == ExitKind::Code(DEVICE_BUSY_EXIT) {
        return Some(
            "the GPU never became quiet enough to time on: another process's work stayed queued on it"
                .to_owned(),
        );
    }
    let oom = outcome.oom_kills > 0;
    if outcome.exit == ExitKind::Code(RUNNER_KILLED_EXIT) && !oom && outcome.host_oom_kills > 0 {
        return Some(format!(
            "the candidate's process was killed by SIGKILL while the kernel's OOM killer killed {} process(es) on the host, none recorded in the task's cgroup",
            outcome.host_oom_kills
        ));
    }
    match outcome.exit {
        ExitKind::Signal(sig) if sig == nix::libc::SIGKILL && !oom => Some(
            "the harness was killed by SIGKILL from outside the task (not by the kernel's OOM killer)"
                .to_owned(),
        ),
        ExitKind::Signal(sig) if sig != nix::libc::SIGKILL && !SELF_INFLICTED.contains(&sig) => {
            Some(format!(
                "the harness was killed by {} from outside the task",
                signal_name(sig)
            ))
        }
        _ => None,
    }
}

/// The task's end from the child's: its result when it gave a valid one, else a verdict
/// from how it ended (killed, crashed, off-protocol), or a fault of the service.
pub(crate) fn classify(outcome: &ChildOutcome, ctx: &VerdictContext) -> Classified {
    if outcome.killed_for == Some(KillReason::Cancelled) {
        return Classified::Cancelled;
    }
    if let Some(why) = outside_cause(outcome) {
        return Classified::ServiceFault(why);
    }
    if let Some(name) = &outcome.transcript.unknown_stage {
        // Only the judge, trusted code, names stages: this harness is not the one this
        // worker speaks with, and nothing it reported can be judged.
        return Classified::ServiceFault(format!(
            "the harness reported a stage this worker does not know: {name:?}"
        ));
    }
    let tail = tail_excerpt(&outcome.output_tail);
    if let (Some(result), None) = (&outcome.transcript.result, &outcome.transcript.violation) {
        let mut result = from_harness(result.clone(), ctx, tail);
        // The judge sees its runner die by a signal, not why: a CUDA fault aborts the runner
        // (often in a destructor, SIGABRT) and only its output says so. As a fault it gets the
        // GPU health check before the worker trusts the device again.
        if result.error_code == Some(VerdictCode::Crash) && has_cuda_fault(&outcome.output_tail) {
            result.error_code = Some(VerdictCode::CudaFault);
            result.error_message = Some(format!(
                "CUDA fault: {}",
                result
                    .error_message
                    .as_deref()
                    .unwrap_or("the candidate's process died")
            ));
        }
        return Classified::Verdict(Box::new(result));
    }

    let stage = outcome.transcript.last_stage();
    let rank = stage_rank(stage);
    let stage_name = stage.map_or("start", Stage::as_str);
    let describe_end = || match (outcome.killed_for, outcome.exit) {
        (Some(reason), _) => format!("killed by the worker ({reason:?})"),
        (None, ExitKind::Signal(sig)) => format!("killed by {}", signal_name(sig)),
        (None, ExitKind::Code(c)) => format!("exited with code {c}"),
    };
    // `standby`: set up and waiting for the worker's go, no candidate code has run; whatever
    // ended it (the worker gave up on it, the node ran out of memory) was not the task's doing.
    if rank < stage_rank(Some(Stage::LoadReference)) || stage == Some(Stage::Standby) {
        return Classified::ServiceFault(format!(
            "harness ended before loading the problem ({}); output: {}",
            describe_end(),
            tail.as_deref().unwrap_or("")
        ));
    }
    let candidate_ran = rank >= stage_rank(Some(Stage::LoadCandidate));
    let compiled = rank >= stage_rank(Some(Stage::Correctness));

    let (code, message) = match (outcome.killed_for, outcome.exit) {
        (Some(KillReason::Timeout), _) => (
            VerdictCode::Timeout,
            format!(
                "{}; the process group was killed",
                deadline_passed(ctx, stage_name)
            ),
        ),
        (Some(KillReason::OutputLimit), _) => (
            VerdictCode::OutputLimit,
            format!(
                "wrote more than {} bytes to stdout/stderr (stage: {stage_name})",
                ctx.max_output_bytes
            ),
        ),
        (Some(KillReason::Memory), _) => (
            VerdictCode::Resource,
            format!(
                "used more than {} MiB of host memory (stage: {stage_name})",
                ctx.max_memory_bytes >> 20
            ),
        ),
        (Some(KillReason::Processes), _) => (
            VerdictCode::Resource,
            format!(
                "started more than {} processes (stage: {stage_name})",
                ctx.max_processes
            ),
        ),
        (Some(KillReason::Cancelled | KillReason::SandboxBroken), _) => {
            unreachable!("handled above")
        }
        (None, _) if outcome.transcript.violation.is_some() => (
            VerdictCode::Runtime,
            format!(
                "result pipe protocol violated: {}",
                outcome.transcript.violation.as_deref().unwrap_or_default()
            ),
        ),
        (None, ExitKind::Signal(sig)) if has_cuda_fault(&outcome.output_tail) => (
            VerdictCode::CudaFault,
            format!(
                "CUDA fault, child killed by {} (stage: {stage_name})",
                signal_name(sig)
            ),
        ),
        // With the cgroup's word for it: the task's own memory.
        (None, ExitKind::Signal(nix::libc::SIGKILL) | ExitKind::Code(RUNNER_KILLED_EXIT))
            if outcome.oom_kills > 0 =>
        {
            (
                VerdictCode::Resource,
                format!(
                    "killed by the kernel's OOM killer: the task ran out of memory (stage: {stage_name})"
                ),
            )
        }
        // Neither the worker nor the OOM killer (outside_cause took a host OOM): the
        // candidate's own doing, e.g. an RLIMIT_CPU or a timer it set on itself.
        (None, ExitKind::Code(RUNNER_KILLED_EXIT)) => (
            VerdictCode::Crash,
            format!(
                "the candidate's process was killed by SIGKILL, sent by neither the worker nor the OOM killer (stage: {stage_name})"
            ),
        ),
        (None, ExitKind::Signal(sig)) => (
            VerdictCode::Crash,
            format!("killed by {} (stage: {stage_name})", signal_name(sig)),
        ),
        (None, ExitKind::Code(_)) if has_cuda_fault(&outcome.output_tail) => (
            VerdictCode::CudaFault,
            format!("CUDA fault before a result was reported (stage: {stage_name})"),
        ),
        (None, ExitKind::Code(c)) => (
            VerdictCode::Runtime,
            format!("exited with code {c} before reporting a result (stage: {stage_name})"),
        ),
    };
    let code = if candidate_ran {
        code
    } else {
        // Only the reference had run: the problem itself misbehaved.
        VerdictCode::Reference
    };
    let mut result = EvalResult::failed_before_trials(
        code,
        message,
        compiled,
        ctx.trials_total,
        ctx.device.clone(),
    );
    result.output_tail = tail;
    Classified::Verdict(Box::new(result))
}

fn deadline_passed(ctx: &VerdictContext, stage_name: &str) -> String {
    format!(
        "no verdict within the {}s deadline (stage: {stage_name})",
        ctx.timeout_s
    )
}

/// The verdict of a task whose CPU stage spent all of its budget (`crate::task::budget`), so its
/// device stage never starts: a timeout, as a child killed at its deadline gets.
pub(crate) fn budget_spent(ctx: &VerdictContext) -> Classified {
    let result = EvalResult::failed_before_trials(
        VerdictCode::Timeout,
        format!(
            "{}; no time was left for the device stage",
            deadline_passed(ctx, "cpu_stage")
        ),
        false,
        ctx.trials_total,
        ctx.device.clone(),
    );
    Classified::Verdict(Box::new(result))
}

fn from_harness(r: HarnessResult, ctx: &VerdictContext, tail: Option<String>) -> EvalResult {
    EvalResult {
        compiled: r.compiled,
        correct: r.correct,
        trials_passed: r.trials_passed,
        trials_total: r.trials_total,
        max_abs_diff: r.max_abs_diff,
        mean_abs_diff: r.mean_abs_diff,
        runtime_ms: r.runtime_ms,
        ref_runtime_ms: r.ref_runtime_ms,
        ref_runtime_cached: r.ref_timing_cached,
        speedup: r.speedup,
        error_code: r.error_code,
        error_message: r.error_message.map(|m| crucible_shared::clip(&m, 8192)),
        // The worker knows its device; the child's claim is not trusted.
        device: ctx.device.clone(),
        stage_ms: r.stage_ms,
        output_tail: tail,
        verdict: Verdict::of(r.error_code, r.correct, &r.flags, r.custom_kernel_count),
        flags: r.flags,
        custom_kernel_count: r.custom_kernel_count,
        total_kernel_count: r.total_kernel_count,
        custom_time_coverage: r.custom_time_coverage,
        // Filled in by the worker, which knows where the prebuilt files came from.
        build: None,
        problem_hash: None,
        timing_check: r.timing_check,
    }
}

/// Whether `text` (the output tail or an error message) shows a CUDA fault: the device may
/// be unusable for the next task.
pub(crate) fn has_cuda_fault(text: &str) -> bool {
    CUDA_FAULT_MARKERS.iter().any(|m| text.contains(m))
}

fn tail_excerpt(output: &str) -> Option<String> {
    let trimmed = output.trim_end();
    if trimmed.is_empty() {
        return None;
    }
    let start = trimmed.len().saturating_sub(RESULT_TAIL_BYTES);
    let start = (start..trimmed.len())
        .find(|i| trimmed.is_char_boundary(*i))
        .unwrap_or(trimmed.len());
    Some(trimmed[start..].to_owned())
}

fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// A task that reached a limit of its bounded space (`crate::process::task_dir::space`) is `RESOURCE`,
/// whatever its child said (pure): the file system's count is the worker's own, not the
/// candidate's word, and a candidate that caught its ENOSPC still filled the space. Service
/// faults and cancellations stay what they are.
pub(crate) fn over_space(classified: &mut Classified, exhausted: Exhausted, ctx: &VerdictContext) {
    let Classified::Verdict(result) = classified else {
        return;
    };
    let mut over = space_result(exhausted, ctx, result.compiled);
    over.stage_ms = std::mem::take(&mut result.stage_ms);
    over.output_tail = result.output_tail.take();
    over.problem_hash = result.problem_hash.take();
    **result = over;
}

/// The `RESOURCE` result of a task that reached a limit of its bounded space (pure).
pub(crate) fn space_result(
    exhausted: Exhausted,
    ctx: &VerdictContext,
    compiled: bool,
) -> EvalResult {
    EvalResult::failed_before_trials(
        VerdictCode::Resource,
        exhausted.describe(),
        compiled,
        ctx.trials_total,
        ctx.device.clone(),
    )
}

#[cfg(test)]
mod tests;
