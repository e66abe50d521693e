//! Tests of [`super`]: each way a child can end, classified. In a file of their own so that
//! verdict.rs stays a readable length.

use super::*;
use crate::child::protocol::Transcript;
use crucible_shared::DeviceKind;
use std::time::Duration;

fn ctx() -> VerdictContext {
    VerdictContext {
        trials_total: 5,
        device: DeviceInfo {
            kind: DeviceKind::Cpu,
            name: "test cpu".into(),
            class: None,
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
        host_oom_kills: 0,
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
    cuda.output_tail = "RuntimeError: CUDA error: an illegal memory access was encountered".into();
    assert_eq!(code_of(classify(&cuda, &c)), VerdictCode::CudaFault);
}

#[test]
fn only_the_worker_and_the_oom_killer_are_outside_the_task() {
    let c = ctx();
    let fault = |o: &ChildOutcome| matches!(classify(o, &c), Classified::ServiceFault(_));
    // The judge killed by someone else: the candidate cannot reach it, so that is outside.
    let sigkill = outcome(RUNNING, ExitKind::Signal(nix::libc::SIGKILL), None);
    assert!(fault(&sigkill), "a judge killed from outside");
    // The runner killed by a SIGKILL neither the worker (its kills carry a reason) nor the OOM
    // killer sent: the candidate's own end (an RLIMIT_CPU or a timer it set), decided once.
    let runner_killed = outcome(RUNNING, ExitKind::Code(RUNNER_KILLED_EXIT), None);
    assert_eq!(code_of(classify(&runner_killed, &c)), VerdictCode::Crash);
    // The OOM killer at work elsewhere on the host, the task's cgroup without a record: it
    // may have picked the runner for another's memory.
    let mut host_oom = runner_killed.clone();
    host_oom.host_oom_kills = 1;
    assert!(fault(&host_oom), "{host_oom:?}");
    // The task's own cgroup recorded it: its memory.
    for mut o in [sigkill, runner_killed] {
        o.oom_kills = 1;
        o.host_oom_kills = 1;
        assert_eq!(code_of(classify(&o, &c)), VerdictCode::Resource);
    }
    assert!(fault(&outcome(
        RUNNING,
        ExitKind::Signal(nix::libc::SIGTERM),
        None
    )));
    // The device never quiet for timing: retried.
    assert!(fault(&outcome(
        RUNNING,
        ExitKind::Code(DEVICE_BUSY_EXIT),
        None
    )));
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
fn every_stage_after_the_candidate_ran_gives_a_verdict() {
    let mut stages = RUNNING.to_vec();
    for (later, then) in [
        ("profile", None),
        ("timing_gate", None),
        ("performance", None),
        ("integrity", None),
        ("profile", Some(KillReason::Timeout)),
        ("integrity", Some(KillReason::Timeout)),
    ] {
        stages.truncate(RUNNING.len());
        stages.push(later);
        let end = if then.is_some() {
            ExitKind::Signal(9)
        } else {
            ExitKind::Signal(nix::libc::SIGSEGV)
        };
        match classify(&outcome(&stages, end, then), &ctx()) {
            Classified::Verdict(r) => {
                assert!(r.compiled, "{later}: {r:?}");
                let want = if then.is_some() {
                    VerdictCode::Timeout
                } else {
                    VerdictCode::Crash
                };
                assert_eq!(r.error_code, Some(want), "{later}");
                assert!(
                    r.error_message.as_deref().unwrap_or("").contains(later),
                    "{later}: {r:?}"
                );
            }
            other => panic!("{later}: {other:?}"),
        }
    }
    // At the gate before the candidate, nothing of the task has run yet.
    assert!(matches!(
        classify(
            &outcome(
                &["setup", "load_reference", "standby"],
                ExitKind::Signal(9),
                None
            ),
            &ctx()
        ),
        Classified::ServiceFault(_)
    ));
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
