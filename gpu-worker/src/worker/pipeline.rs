//! Who may use the device when, as a pure state machine: the children on one device, the
//! phase each is in as its events tell, and the gate openings that follow. It owns no tokio
//! task: the run loop ([`super::run`]) spawns the children, feeds their events in and asks
//! what to do next, so the rules can be tested by feeding events alone.
//!
//! Up to `slots` children share the device: they set up, import, compile, check and count
//! their candidates side by side, each parking at its gate (its runner stopped) between two
//! device steps. Timing is exclusive: a child times only when every other child is blocked
//! at a gate, and while one waits to time, the gates of the others stay shut (they park at
//! their next step) and no new child is forked.
//!
//! On a GPU the children also share its memory: each judge reports the peak bytes its
//! tensors will take (its footprint) before it is let go, and a child goes only while the
//! footprints of the children at work, with their CUDA contexts, fit the device. Children go
//! in the order they were forked: one that must wait for memory holds back those behind it,
//! so a large task is never starved by small ones.

use crate::child::protocol::Stage;
use crate::child::supervisor::{ChildEvent, Gate};
use crucible_shared::{RuntimeStats, TaskId, TaskSpec};
use std::time::{Instant, SystemTime};
use tokio_util::sync::CancellationToken;

/// Device memory a child takes beside its tensors: the judge's and the runner's CUDA contexts
/// with torch's kernels loaded. On the H100 the small batch's memory high-water mark grows by
/// 1.9-2.0 GiB a slot (docs/BENCHMARKS.md).
pub(super) const CHILD_CONTEXTS_BYTES: u64 = 2 << 30;
/// Share of the device's memory no footprint is admitted into: what the harness's estimate
/// leaves out (the models' intermediates, the allocators' rounding and fragmentation).
const MEMORY_HEADROOM_SHARE: f64 = 0.1;

/// Pure: the bytes of device memory the footprints of the children at work may add up to on
/// a device of `total` bytes.
pub(super) fn memory_budget(total: u64) -> u64 {
    (total as f64 * (1.0 - MEMORY_HEADROOM_SHARE)) as u64
}

/// When a device child was let go and when its result arrived, and the reference timing it
/// was given then.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DeviceTiming {
    pub(super) forked: Option<Instant>,
    /// Another child was on the device at some time during this one's life: it shared the
    /// GPU's memory.
    pub(super) crowded: bool,
    pub(super) go: Option<Instant>,
    pub(super) result: Option<Instant>,
    pub(super) reference: Option<RuntimeStats>,
    /// When its timing gate opened and when its timing ended, by the wall clock: logged so
    /// that a run of several workers can show no device ever timed two children at once.
    pub(super) timed_from: Option<SystemTime>,
    pub(super) timed_until: Option<SystemTime>,
}

/// Where a device child is, as its events tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Forked; setting up (CUDA context) and importing the reference.
    Starting,
    /// Set up, blocked at its gate until it is let go.
    Standby,
    /// Let go: loading, instantiating, checking or counting its candidate on the device.
    Working,
    /// Blocked at its gate between two device steps, its runner stopped.
    Parked,
    /// Blocked at its gate before timing.
    WantsTiming,
    /// Timing, alone on the device.
    Timing,
    /// Result written; the process is ending.
    Ended,
}

impl Phase {
    /// Blocked at a gate: nothing of the child runs on the device until the worker opens it.
    fn quiet(self) -> bool {
        matches!(self, Phase::Standby | Phase::Parked | Phase::WantsTiming)
    }
}

struct DeviceChild {
    task_id: TaskId,
    gate: Gate,
    phase: Phase,
    cancel: CancellationToken,
    spec: TaskSpec,
    timing: DeviceTiming,
    /// When it asked to time: the longest waiting child times first.
    wants_timing_since: Option<Instant>,
    /// Runs alone on the device (a retried task: see [`DevicePipeline::add`]).
    alone: bool,
    /// The peak bytes its tensors will take, as its judge reported before its standby line.
    footprint: Option<u64>,
    /// Its standby line was read: a footprint it has not reported by then never comes.
    past_standby: bool,
}

/// The children on one device and the rules of who runs when (see the module's comment).
/// With one slot this is the old pipeline: one child at work, the next one forked once the
/// last has reported, setting itself up while that one exits and let go when it is gone.
pub(super) struct DevicePipeline {
    /// Children let go at once (`CRUCIBLE_DEVICE_SLOTS`).
    slots: usize,
    /// In the order they were forked.
    children: Vec<DeviceChild>,
    /// Set while the worker needs the device quiet (a GPU health probe): no gate opens.
    held: bool,
    /// The device memory the children at work may take together ([`memory_budget`]); `None`
    /// (a CPU, or a GPU whose memory is unknown) admits by slots alone.
    memory: Option<u64>,
}

impl DevicePipeline {
    /// A device of `slots` and, on a GPU, `memory_total` bytes of memory.
    pub(super) fn new(slots: usize, memory_total: Option<u64>) -> Self {
        Self {
            slots: slots.max(1),
            children: Vec::new(),
            held: false,
            memory: memory_total.map(memory_budget),
        }
    }

    /// No child known to the pipeline (the run loop also waits for their tasks to end).
    pub(super) fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// The first child at work (let go and not ended), for the registry's `current_task`.
    pub(super) fn active(&self) -> Option<&TaskId> {
        self.children
            .iter()
            .find(|c| c.timing.go.is_some() && c.phase != Phase::Ended)
            .map(|c| &c.task_id)
    }

    fn any(&self, phase: Phase) -> bool {
        self.children.iter().any(|c| c.phase == phase)
    }

    /// A child is timing or waiting to: the device is being cleared for it.
    fn timing_pending(&self) -> bool {
        self.any(Phase::WantsTiming) || self.any(Phase::Timing)
    }

    /// Whether a child is timing now (the worker must not start device work of its own).
    pub(super) fn timing_now(&self) -> bool {
        self.any(Phase::Timing)
    }

    /// Room for another child: fewer than `slots` children that have not reported, none
    /// timing or waiting to (a CUDA context set up beside a timing would be in its figures),
    /// and the device not held. Without `pipelined` (no claiming ahead) a new child also waits
    /// for the ones that reported to be gone. No child is set up ahead beyond the slots: on
    /// the H100 one more context setting up beside four slots cost more (its set-up slowed
    /// the others and held their timings back) than it saved (52 against 63 evaluations a
    /// minute on the small batch, docs/BENCHMARKS.md).
    pub(super) fn has_room(&self, pipelined: bool) -> bool {
        if self.held || self.timing_pending() || self.children.iter().any(|c| c.alone) {
            return false;
        }
        let live = self
            .children
            .iter()
            .filter(|c| c.phase != Phase::Ended)
            .count();
        live < self.slots && (pipelined || !self.any(Phase::Ended))
    }

    /// A forked child. `alone`: it is let go only when no other child is on the device, and
    /// none joins it until it is gone. A retried task runs so: its last attempt may have
    /// failed for want of the memory its neighbours held, and alone its verdict is its own.
    pub(super) fn add(
        &mut self,
        task_id: TaskId,
        gate: Gate,
        cancel: CancellationToken,
        spec: TaskSpec,
        alone: bool,
    ) {
        // Its set-up takes device memory from the children at work; its own crowding is
        // judged when it is let go.
        for other in self.children.iter_mut().filter(|c| c.timing.go.is_some()) {
            other.timing.crowded = true;
        }
        self.children.push(DeviceChild {
            task_id,
            gate,
            phase: Phase::Starting,
            cancel,
            spec,
            timing: DeviceTiming {
                forked: Some(Instant::now()),
                ..DeviceTiming::default()
            },
            wants_timing_since: None,
            alone,
            footprint: None,
            past_standby: false,
        });
    }

    /// The next child to let go, when one may go: not while the device is held or cleared
    /// for a timing; with one slot, not while the previous child is still exiting either (a
    /// child tearing down a large CUDA context slows the allocations of the next).
    pub(super) fn next_to_go(&self) -> Option<(TaskId, TaskSpec)> {
        if self.held || self.timing_pending() || (self.slots == 1 && self.any(Phase::Ended)) {
            return None;
        }
        let working = self
            .children
            .iter()
            .filter(|c| c.timing.go.is_some() && c.phase != Phase::Ended)
            .count();
        if working >= self.slots {
            return None;
        }
        let next = self.children.iter().find(|c| {
            c.timing.go.is_none() && matches!(c.phase, Phase::Starting | Phase::Standby)
        })?;
        let others_at_work = self
            .children
            .iter()
            .any(|c| c.task_id != next.task_id && c.timing.go.is_some());
        if next.alone && self.children.iter().any(|c| c.task_id != next.task_id) {
            return None;
        }
        if others_at_work && !self.fits(next) {
            return None;
        }
        Some((next.task_id.clone(), next.spec.clone()))
    }

    /// Whether `next`'s footprint fits beside what the other children hold: those at work
    /// their contexts and footprints, those not let go their contexts. A child that has not
    /// reported yet waits for its report (it is sent before standby); one at standby without
    /// a report (its reference could not be sized) counts a slot's share of the budget. A
    /// child let go before it reported (the first, let go at once) may take anything until
    /// it reports: nobody joins it meanwhile (on the H100, two 6 GiB-input tasks let go so
    /// ran out of memory together).
    fn fits(&self, next: &DeviceChild) -> bool {
        let Some(budget) = self.memory else {
            return true;
        };
        let unsized_at_work = self.children.iter().any(|c| {
            c.task_id != next.task_id
                && c.timing.go.is_some()
                && c.footprint.is_none()
                && !c.past_standby
        });
        if unsized_at_work {
            return false;
        }
        let share = budget / self.slots as u64;
        let held_by = |c: &DeviceChild| match c.timing.go {
            Some(_) => CHILD_CONTEXTS_BYTES.saturating_add(c.footprint.unwrap_or(share)),
            None => CHILD_CONTEXTS_BYTES,
        };
        let need = match (next.footprint, next.past_standby) {
            (Some(bytes), _) => bytes,
            (None, true) => share,
            (None, false) => return false,
        };
        let held: u64 = self
            .children
            .iter()
            .filter(|c| c.task_id != next.task_id)
            .map(held_by)
            .fold(0, u64::saturating_add);
        held.saturating_add(CHILD_CONTEXTS_BYTES)
            .saturating_add(need)
            <= budget
    }

    /// Lets a child go, with the reference timing it is to use.
    pub(super) fn go(&mut self, task_id: &TaskId, reference: Option<RuntimeStats>) {
        let crowded = self.children.iter().any(|c| &c.task_id != task_id);
        let Some(child) = self.child_mut(task_id) else {
            return;
        };
        if child.timing.go.is_some() {
            return;
        }
        let message = serde_json::json!({ "reference_timing": reference });
        if child.gate.open_with(&message).is_err() {
            tracing::warn!(task_id = %task_id, "could not open a child's gate");
        }
        child.timing.go = Some(Instant::now());
        child.timing.reference = reference;
        child.timing.crowded = crowded;
        tracing::info!(task_id = %task_id, footprint_mib = child.footprint.map(|b| b >> 20), crowded, "device child let go");
        if child.phase == Phase::Standby {
            child.phase = Phase::Working;
        }
    }

    /// [`Self::advance_with`] with nothing to do before a timing.
    #[cfg(test)]
    pub(super) fn advance(&mut self) {
        self.advance_with(|| {});
    }

    /// Opens what may open now: the longest waiting timer's gate once every other child is
    /// blocked at a gate (`before_timing` called first: the worker takes its lent cores
    /// back); with nobody timing or waiting to, every parked child's gate.
    pub(super) fn advance_with(&mut self, before_timing: impl FnOnce()) {
        if self.held || self.timing_now() {
            return;
        }
        let next_timer = self
            .children
            .iter()
            .enumerate()
            .filter(|(_, c)| c.phase == Phase::WantsTiming)
            .min_by_key(|(_, c)| c.wants_timing_since)
            .map(|(i, _)| i);
        if let Some(timer) = next_timer {
            let alone = self
                .children
                .iter()
                .enumerate()
                .all(|(i, c)| i == timer || c.phase.quiet());
            if alone {
                before_timing();
                let child = &mut self.children[timer];
                open(child);
                child.phase = Phase::Timing;
                child.timing.timed_from = Some(SystemTime::now());
            }
            // Until it has timed, parked children stay parked.
            return;
        }
        for child in self
            .children
            .iter_mut()
            .filter(|c| c.phase == Phase::Parked)
        {
            open(child);
            child.phase = Phase::Working;
        }
    }

    pub(super) fn on_event(&mut self, task_id: &TaskId, event: ChildEvent) {
        let Some(child) = self.child_mut(task_id) else {
            return;
        };
        let let_go = child.timing.go.is_some();
        match event {
            ChildEvent::Park => {
                // The judge parks once it has timed (before `integrity`): that ends the timing.
                if child.phase == Phase::Timing {
                    child.timing.timed_until = Some(SystemTime::now());
                }
                child.gate.note_waiting();
                child.phase = Phase::Parked;
            }
            // Sent once by the judge before its standby line, while only trusted code has
            // run; anything later is ignored.
            ChildEvent::Footprint(bytes) if !child.past_standby => {
                child.footprint.get_or_insert(bytes);
            }
            ChildEvent::Footprint(_) => {}
            // A child let go before it reached standby passes it on the line waiting.
            ChildEvent::Stage(Stage::Standby) if let_go => {
                child.past_standby = true;
                child.phase = Phase::Working;
            }
            ChildEvent::Stage(Stage::Standby) => {
                child.past_standby = true;
                child.gate.note_waiting();
                child.phase = Phase::Standby;
            }
            ChildEvent::Stage(Stage::TimingGate) => {
                child.gate.note_waiting();
                child.phase = Phase::WantsTiming;
                child.wants_timing_since = Some(Instant::now());
            }
            // The judge names the stage it times in (`performance`) as soon as it is let
            // through: that is the timing, not its end.
            ChildEvent::Stage(Stage::Performance) if child.phase == Phase::Timing => {}
            // Any stage after its timing (`integrity`) ends it.
            ChildEvent::Stage(_) if child.phase == Phase::Timing => {
                child.phase = Phase::Working;
                child.timing.timed_until = Some(SystemTime::now());
            }
            ChildEvent::Stage(_) if child.phase == Phase::Starting && let_go => {
                child.phase = Phase::Working
            }
            ChildEvent::Stage(_) => {}
            ChildEvent::Result => {
                if child.phase == Phase::Timing {
                    child.timing.timed_until = Some(SystemTime::now());
                }
                child.phase = Phase::Ended;
                child.timing.result = Some(Instant::now());
            }
        }
    }

    /// Forgets a child whose stage ended; returns its timing.
    pub(super) fn ended(&mut self, task_id: &TaskId) -> DeviceTiming {
        match self.children.iter().position(|c| &c.task_id == task_id) {
            Some(i) => self.children.remove(i).timing,
            None => DeviceTiming::default(),
        }
    }

    /// Stops the children not yet let go (their tasks go back to the queue when they end).
    pub(super) fn abandon_standby(&mut self) {
        for child in self.children.iter().filter(|c| c.timing.go.is_none()) {
            child.cancel.cancel();
        }
    }

    /// Holds every gate shut (`true`) until released (`false`): the worker probes the GPU.
    pub(super) fn hold(&mut self, held: bool) {
        self.held = held;
    }

    fn child_mut(&mut self, task_id: &TaskId) -> Option<&mut DeviceChild> {
        self.children.iter_mut().find(|c| &c.task_id == task_id)
    }
}

fn open(child: &mut DeviceChild) {
    if child.gate.open().is_err() {
        tracing::warn!(task_id = %child.task_id, "could not open a child's gate");
    }
}

#[cfg(test)]
mod tests;
