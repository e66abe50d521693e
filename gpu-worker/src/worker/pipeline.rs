//! Who may use the device when, as a pure state machine: the children on one device, the
//! phase each is in as its events tell, and the gate openings that follow. It owns no tokio
//! task: the run loop ([`super::run`]) spawns the children, feeds their events in and asks
//! what to do next, so the rules can be tested by feeding events alone.

use crate::protocol::Stage;
use crate::supervisor::{ChildEvent, Gate};
use crucible_shared::{RuntimeStats, TaskId, TaskSpec};
use std::collections::HashMap;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// When a device child was let go and when its result arrived, and the reference timing it
/// was given then.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DeviceTiming {
    pub(super) go: Option<Instant>,
    pub(super) result: Option<Instant>,
    pub(super) reference: Option<RuntimeStats>,
}

/// Where a device child is, as its events tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Forked; setting up (CUDA context) and importing the reference.
    Starting,
    /// Set up, blocked at its gate until it is let go.
    Standby,
    /// Let go: loading, instantiating and checking the candidate.
    Running,
    /// Blocked at its gate before timing.
    WantsTiming,
    /// Timing, alone on the device.
    Timing,
    /// Result written; the process is ending.
    Ended,
}

struct DeviceChild {
    gate: Gate,
    phase: Phase,
    cancel: CancellationToken,
    spec: TaskSpec,
    timing: DeviceTiming,
}

/// The children on one device and the rules of who runs when. One child is *active* (let go:
/// loading, checking and timing its candidate). When it has reported, the next task's child
/// is forked and sets itself up (CUDA context, the reference) while the last one exits, then
/// waits on *standby* and is let go the moment that one is gone. A child times its kernel only
/// when every other child on the device is dead or blocked on standby: timings are taken
/// alone.
#[derive(Default)]
pub(super) struct DevicePipeline {
    controls: HashMap<TaskId, DeviceChild>,
    active: Option<TaskId>,
    standby: Option<TaskId>,
}

impl DevicePipeline {
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// No child known to the pipeline (the run loop also waits for their tasks to end).
    pub(super) fn is_empty(&self) -> bool {
        self.controls.is_empty()
    }

    pub(super) fn active(&self) -> Option<&TaskId> {
        self.active.as_ref()
    }

    /// Room for another child: with no child on the device, always; otherwise (claiming
    /// ahead) one on standby at most, and only while no child is active, that is while the
    /// last one is exiting. A new CUDA context set up beside a child that checks or times its
    /// candidate slowed that child's work by about as long as the set-up took (measured on
    /// the H100, docs/BENCHMARKS.md); beside a child that tears its context down it costs
    /// nothing, and the two overlap.
    pub(super) fn has_room(&self, pipelined: bool) -> bool {
        if self.controls.is_empty() {
            return true;
        }
        pipelined
            && self.standby.is_none()
            && self.active.is_none()
            && self.controls.values().all(|c| c.phase == Phase::Ended)
    }

    pub(super) fn add(
        &mut self,
        task_id: TaskId,
        gate: Gate,
        cancel: CancellationToken,
        spec: TaskSpec,
    ) {
        self.controls.insert(
            task_id.clone(),
            DeviceChild {
                gate,
                phase: Phase::Starting,
                cancel,
                spec,
                timing: DeviceTiming::default(),
            },
        );
        self.standby = Some(task_id);
    }

    /// The standby child, when it may go: no child is active and the previous one has exited
    /// (a child tearing down a large CUDA context slows the allocations of the next).
    pub(super) fn next_to_go(&self) -> Option<(TaskId, TaskSpec)> {
        if self.active.is_some() || self.controls.values().any(|c| c.phase == Phase::Ended) {
            return None;
        }
        let id = self.standby.as_ref()?;
        Some((id.clone(), self.controls.get(id)?.spec.clone()))
    }

    /// Lets the standby child go, with the reference timing it is to use.
    pub(super) fn go(&mut self, task_id: &TaskId, reference: Option<RuntimeStats>) {
        if self.standby.as_ref() != Some(task_id) {
            return;
        }
        self.standby = None;
        if let Some(child) = self.controls.get_mut(task_id) {
            let message = serde_json::json!({ "reference_timing": reference });
            if child.gate.open_with(&message).is_err() {
                tracing::warn!(task_id = %task_id, "could not open a child's gate");
            }
            child.timing.go = Some(Instant::now());
            child.timing.reference = reference;
            if child.phase == Phase::Standby {
                child.phase = Phase::Running;
            }
        }
        self.active = Some(task_id.clone());
    }

    /// Lets the active child time when it asks and it would be alone.
    pub(super) fn advance(&mut self) {
        let Some(active) = self.active.clone() else {
            return;
        };
        let alone = self
            .controls
            .iter()
            .all(|(id, c)| *id == active || c.phase == Phase::Standby);
        if let Some(child) = self.controls.get_mut(&active)
            && child.phase == Phase::WantsTiming
            && alone
        {
            if child.gate.open().is_err() {
                tracing::warn!(task_id = %active, "could not open a child's gate");
            }
            child.phase = Phase::Timing;
        }
    }

    pub(super) fn on_event(&mut self, task_id: &TaskId, event: ChildEvent) {
        let Some(child) = self.controls.get_mut(task_id) else {
            return;
        };
        match event {
            ChildEvent::Stage(stage) => match stage {
                // A child let go before it reached standby passes it on the byte waiting.
                Stage::Standby if child.timing.go.is_some() => child.phase = Phase::Running,
                Stage::Standby => child.phase = Phase::Standby,
                Stage::TimingGate => child.phase = Phase::WantsTiming,
                _ if child.phase == Phase::Starting && child.timing.go.is_some() => {
                    child.phase = Phase::Running
                }
                _ => {}
            },
            ChildEvent::Result => {
                child.phase = Phase::Ended;
                child.timing.result = Some(Instant::now());
                if self.active.as_ref() == Some(task_id) {
                    self.active = None;
                }
            }
        }
    }

    /// Forgets a child whose stage ended; returns its timing.
    pub(super) fn ended(&mut self, task_id: &TaskId) -> DeviceTiming {
        if self.active.as_ref() == Some(task_id) {
            self.active = None;
        }
        if self.standby.as_ref() == Some(task_id) {
            self.standby = None;
        }
        self.controls
            .remove(task_id)
            .map(|c| c.timing)
            .unwrap_or_default()
    }

    /// Stops the child on standby (its task goes back to the queue when it ends).
    pub(super) fn abandon_standby(&mut self) {
        if let Some(id) = &self.standby
            && let Some(child) = self.controls.get(id)
        {
            child.cancel.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::{self, GateChild};

    /// Lines the worker sent through a child's gate so far (the child's end, non-blocking):
    /// each opening is one line.
    fn opened(child: &GateChild) -> usize {
        let fd = child.read_end();
        let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
        let mut buf = [0u8; 4096];
        let n = nix::unistd::read(fd, &mut buf).unwrap_or(0);
        buf[..n].iter().filter(|b| **b == b'\n').count()
    }

    fn child(device: &mut DevicePipeline, id: &TaskId) -> GateChild {
        let (gate, child) = supervisor::gate(|_| {}).unwrap();
        let cancel = CancellationToken::new();
        let spec = TaskSpec {
            request: crucible_shared::EvaluateRequest::new("ref", "cand"),
            seed: 1,
        };
        device.add(id.clone(), gate, cancel, spec);
        child
    }

    fn stage(device: &mut DevicePipeline, id: &TaskId, s: &str) {
        let s = Stage::parse(s).expect("a stage the harness sends");
        device.on_event(id, ChildEvent::Stage(s));
        device.advance();
    }

    /// What the device loop does: the standby child goes when it may, then grants.
    fn let_go(device: &mut DevicePipeline) {
        if let Some((id, _)) = device.next_to_go() {
            device.go(&id, None);
        }
        device.advance();
    }

    #[test]
    fn a_child_times_only_when_every_other_child_is_on_standby_or_gone() {
        let mut device = DevicePipeline::new();
        let (a, b, c) = (
            TaskId("t_a".into()),
            TaskId("t_b".into()),
            TaskId("t_c".into()),
        );

        assert!(device.has_room(false), "an empty device always has room");
        let a_gate = child(&mut device, &a);
        let_go(&mut device);
        assert_eq!(
            device.active(),
            Some(&a),
            "a free device lets the first child go"
        );
        assert_eq!(opened(&a_gate), 1);
        stage(&mut device, &a, "standby");
        stage(&mut device, &a, "correctness");
        assert!(
            !device.has_room(true),
            "no new context beside a child at work"
        );

        // Alone, `a` times at once.
        stage(&mut device, &a, "timing_gate");
        assert_eq!(opened(&a_gate), 1);

        // `a` reported: the next child sets up while `a` exits, and goes once `a` is gone.
        device.on_event(&a, ChildEvent::Result);
        assert!(device.has_room(true) && !device.has_room(false));
        let b_gate = child(&mut device, &b);
        let_go(&mut device);
        assert_eq!(opened(&b_gate), 0, "a is still exiting");
        let timing = device.ended(&a);
        assert!(timing.go.is_some() && timing.result.is_some());
        let_go(&mut device);
        assert_eq!(device.active(), Some(&b));
        assert_eq!(opened(&b_gate), 1);

        // A child still setting up holds back another's timing (the pipeline never forks one
        // beside a working child, but its gate does not rely on that).
        let c_gate = child(&mut device, &c);
        stage(&mut device, &b, "timing_gate");
        assert_eq!(opened(&b_gate), 0, "c is setting up");
        stage(&mut device, &c, "standby");
        assert_eq!(opened(&b_gate), 1, "c is blocked: b is alone");
        assert_eq!(opened(&c_gate), 0);
    }
}
