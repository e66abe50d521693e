//! Turns the way a child ended into a verdict about the candidate, or into a service fault to
//! retry elsewhere. Pure: every rule is tested without spawning anything.

use crate::config::WorkerConfig;
use crate::protocol::{HarnessResult, Stage};
use crate::supervisor::{ChildOutcome, ExitKind, KillReason};
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
pub struct VerdictContext {
    pub trials_total: u32,
    pub device: DeviceInfo,
    pub timeout_s: u32,
    pub max_output_bytes: u64,
    pub max_memory_bytes: u64,
    pub max_processes: u64,
}

impl VerdictContext {
    /// The context of one of `spec`'s children on the worker configured by `cfg`.
    pub fn for_task(spec: &TaskSpec, cfg: &WorkerConfig) -> Self {
        Self {
            trials_total: spec.request.num_correct_trials,
            device: cfg.device.info(),
            timeout_s: spec.request.timeout_s,
            max_output_bytes: cfg.limits.max_output_bytes,
            max_memory_bytes: cfg.limits.max_memory_bytes,
            max_processes: cfg.limits.max_processes,
        }
    }
}

/// Harness stages in order; a child that ends before `load_candidate` has not run any
/// candidate code, so its end cannot be the candidate's fault. The stages not listed
/// (`standby`, `profile`, `integrity`) rank as no stage at all, as they always have.
const RANKED: &[Stage] = &[
    Stage::Setup,
    Stage::LoadReference,
    Stage::LoadCandidate,
    Stage::Instantiate,
    Stage::Correctness,
    Stage::TimingGate,
    Stage::Performance,
];

fn stage_rank(stage: Option<Stage>) -> usize {
    stage
        .and_then(|s| RANKED.iter().position(|x| *x == s))
        .map(|i| i + 1)
        .unwrap_or(0)
}

/// An end caused from outside the task (a judge outside its sandbox, a kill nobody in the
/// task sent that the kernel's OOM killer does not account for): a fault of the service to
/// retry, never a verdict and never cached.
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
    let oom = outcome.oom_kills > 0;
    match outcome.exit {
        ExitKind::Code(RUNNER_KILLED_EXIT) if !oom => Some(
            "the candidate's process was killed by SIGKILL from outside the task (not by the kernel's OOM killer)"
                .to_owned(),
        ),
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

pub fn classify(outcome: &ChildOutcome, ctx: &VerdictContext) -> Classified {
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
        // Only with the cgroup's word for it (outside_cause took the rest).
        (None, ExitKind::Signal(nix::libc::SIGKILL) | ExitKind::Code(RUNNER_KILLED_EXIT)) => (
            VerdictCode::Resource,
            format!(
                "killed by the kernel's OOM killer: the task ran out of memory (stage: {stage_name})"
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

/// The verdict of a task whose CPU stage spent all of its budget (`crate::budget`), so its
/// device stage never starts: a timeout, as a child killed at its deadline gets.
pub fn budget_spent(ctx: &VerdictContext) -> Classified {
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
        error_message: r.error_message.map(|m| truncate(&m, 8192)),
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
    }
}

pub fn has_cuda_fault(text: &str) -> bool {
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

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Transcript;
    use crucible_shared::DeviceKind;
    use std::time::Duration;

    fn ctx() -> VerdictContext {
        VerdictContext {
            trials_total: 5,
            device: DeviceInfo {
                kind: DeviceKind::Cpu,
                name: "test cpu".into(),
            },
            timeout_s: 30,
            max_output_bytes: 1024,
            max_memory_bytes: 1 << 30,
            max_processes: 64,
        }
    }

    fn outcome(stages: &[&str], exit: ExitKind, killed: Option<KillReason>) -> ChildOutcome {
        ChildOutcome {
            exit,
            killed_for: killed,
            transcript: Transcript {
                stages: stages.iter().map(|s| Stage::parse(s).unwrap()).collect(),
                violation: None,
                ..Transcript::default()
            },
            output_tail: String::new(),
            output_bytes: 0,
            wall: Duration::from_secs(1),
            peak_rss_bytes: 0,
            peak_processes: 1,
            oom_kills: 0,
            sandbox_broken: None,
        }
    }

    #[test]
    fn an_unknown_stage_is_a_service_fault_whatever_the_child_reported() {
        let mut o = outcome(&["setup", "load_reference"], ExitKind::Code(0), None);
        o.transcript.unknown_stage = Some("warp_drive".into());
        match classify(&o, &ctx()) {
            Classified::ServiceFault(why) => assert!(why.contains("warp_drive"), "{why}"),
            other => panic!("expected a service fault, got {other:?}"),
        }
    }

    #[test]
    fn a_spent_budget_is_a_timeout_before_the_device_stage() {
        let Classified::Verdict(r) = budget_spent(&ctx()) else {
            panic!("a spent budget is a verdict");
        };
        assert_eq!(r.error_code, Some(VerdictCode::Timeout));
        assert!(!r.compiled);
        assert!(
            r.error_message
                .as_deref()
                .unwrap()
                .starts_with("no verdict within the 30s deadline"),
            "{r:?}"
        );
    }

    fn code_of(c: Classified) -> VerdictCode {
        match c {
            Classified::Verdict(r) => r.error_code.unwrap(),
            other => panic!("expected a verdict, got {other:?}"),
        }
    }

    const RUNNING: &[&str] = &[
        "setup",
        "load_reference",
        "load_candidate",
        "instantiate",
        "correctness",
    ];

    #[test]
    fn kills_and_signals_map_to_verdicts() {
        let c = ctx();
        let sig = |s: i32| ExitKind::Signal(s);
        assert_eq!(
            code_of(classify(
                &outcome(RUNNING, sig(9), Some(KillReason::Timeout)),
                &c
            )),
            VerdictCode::Timeout
        );
        assert_eq!(
            code_of(classify(
                &outcome(RUNNING, sig(9), Some(KillReason::OutputLimit)),
                &c
            )),
            VerdictCode::OutputLimit
        );
        assert_eq!(
            code_of(classify(
                &outcome(RUNNING, sig(9), Some(KillReason::Memory)),
                &c
            )),
            VerdictCode::Resource
        );
        assert_eq!(
            code_of(classify(
                &outcome(RUNNING, sig(9), Some(KillReason::Processes)),
                &c
            )),
            VerdictCode::Resource
        );
        assert_eq!(
            code_of(classify(
                &outcome(RUNNING, sig(nix::libc::SIGSEGV), None),
                &c
            )),
            VerdictCode::Crash
        );
        assert_eq!(
            code_of(classify(&outcome(RUNNING, ExitKind::Code(0), None), &c)),
            VerdictCode::Runtime
        );
        let mut cuda = outcome(RUNNING, sig(nix::libc::SIGABRT), None);
        cuda.output_tail =
            "RuntimeError: CUDA error: an illegal memory access was encountered".into();
        assert_eq!(code_of(classify(&cuda, &c)), VerdictCode::CudaFault);
    }

    #[test]
    fn a_kill_from_outside_the_task_is_a_service_fault_unless_the_cgroup_saw_an_oom_kill() {
        let c = ctx();
        let fault = |o: &ChildOutcome| matches!(classify(o, &c), Classified::ServiceFault(_));
        let sigkill = outcome(RUNNING, ExitKind::Signal(nix::libc::SIGKILL), None);
        assert!(fault(&sigkill), "a judge killed by someone else");
        let runner_killed = outcome(RUNNING, ExitKind::Code(RUNNER_KILLED_EXIT), None);
        assert!(fault(&runner_killed), "a runner killed by someone else");
        assert!(fault(&outcome(
            RUNNING,
            ExitKind::Signal(nix::libc::SIGTERM),
            None
        )));
        for mut o in [sigkill, runner_killed] {
            o.oom_kills = 1;
            assert_eq!(code_of(classify(&o, &c)), VerdictCode::Resource);
        }
        let mut broken = outcome(
            RUNNING,
            ExitKind::Signal(9),
            Some(KillReason::SandboxBroken),
        );
        broken.sandbox_broken = Some("uids [0, 0, 0, 0]".into());
        match classify(&broken, &c) {
            Classified::ServiceFault(why) => assert!(why.contains("outside its sandbox"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Its own faults stay its own.
        assert_eq!(
            code_of(classify(
                &outcome(RUNNING, ExitKind::Signal(nix::libc::SIGBUS), None),
                &c
            )),
            VerdictCode::Crash
        );
    }

    #[test]
    fn a_runner_crash_with_a_cuda_fault_in_the_output_is_a_cuda_fault() {
        let mut o = outcome(RUNNING, ExitKind::Code(0), None);
        o.transcript.result = Some(
            serde_json::from_value(serde_json::json!({
                "compiled": true, "correct": false, "trials_passed": 0, "trials_total": 5,
                "error_code": "CRASH",
                "error_message": "the candidate's process was killed by SIGABRT (stage correctness)",
                "device": {"kind": "cuda", "name": "H100"},
            }))
            .unwrap(),
        );
        assert_eq!(code_of(classify(&o, &ctx())), VerdictCode::Crash);
        o.output_tail = "torch.AcceleratorError: CUDA error: an illegal memory access was \
                         encountered\nframe #11: c10::TensorImpl::~TensorImpl()"
            .into();
        match classify(&o, &ctx()) {
            Classified::Verdict(r) => {
                assert_eq!(r.error_code, Some(VerdictCode::CudaFault));
                assert!(r.error_message.unwrap().contains("SIGABRT"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn timeout_message_names_the_stage_and_compiled_follows_it() {
        match classify(
            &outcome(RUNNING, ExitKind::Signal(9), Some(KillReason::Timeout)),
            &ctx(),
        ) {
            Classified::Verdict(r) => {
                assert!(r.error_message.unwrap().contains("stage: correctness"));
                assert!(r.compiled);
                assert!(!r.correct);
            }
            other => panic!("{other:?}"),
        }
        let loading = &RUNNING[..3];
        match classify(
            &outcome(loading, ExitKind::Signal(9), Some(KillReason::Timeout)),
            &ctx(),
        ) {
            Classified::Verdict(r) => assert!(!r.compiled),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_end_before_the_candidate_is_not_the_candidates_fault() {
        assert!(matches!(
            classify(&outcome(&[], ExitKind::Code(1), None), &ctx()),
            Classified::ServiceFault(_)
        ));
        assert!(matches!(
            classify(&outcome(&["setup"], ExitKind::Signal(11), None), &ctx()),
            Classified::ServiceFault(_)
        ));
        assert_eq!(
            code_of(classify(
                &outcome(&["setup", "load_reference"], ExitKind::Signal(11), None),
                &ctx()
            )),
            VerdictCode::Reference
        );
    }

    #[test]
    fn cancellation_and_violations() {
        assert_eq!(
            classify(
                &outcome(RUNNING, ExitKind::Signal(9), Some(KillReason::Cancelled)),
                &ctx()
            ),
            Classified::Cancelled
        );
        let mut o = outcome(RUNNING, ExitKind::Code(0), None);
        o.transcript.violation = Some("unparseable protocol line".into());
        assert_eq!(code_of(classify(&o, &ctx())), VerdictCode::Runtime);
    }

    #[test]
    fn tail_is_capped_on_a_char_boundary() {
        let long = "é".repeat(3000);
        let t = tail_excerpt(&long).unwrap();
        assert!(t.len() <= RESULT_TAIL_BYTES);
        assert!(t.chars().all(|c| c == 'é'));
        assert_eq!(tail_excerpt("  \n"), None);
    }
}
