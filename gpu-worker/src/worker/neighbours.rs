//! Pure: whether a child's failure may have been its neighbour's doing. Children that share
//! a device share its faults: a kernel that corrupts the device, hangs it or fills its memory
//! can take down or starve another task's child, whose failure then says nothing about its
//! own candidate. Such a failure is a fault of the service (the task is retried), never a
//! verdict; the first child to fail that way keeps its own verdict.

use super::pipeline::DeviceTiming;
use crate::child::supervisor::KillReason;
use crucible_shared::{EvalResult, VerdictCode};
use std::time::Instant;

/// Ends that can spill over to other contexts on the same GPU: a device fault, a kernel that
/// never finished (time-sliced beside the others, it slows them all), device memory gone.
const SPILLS_OVER: &[VerdictCode] = &[
    VerdictCode::CudaFault,
    VerdictCode::Timeout,
    VerdictCode::Resource,
];

/// Ends a neighbour's trouble can cause: the same, and a process killed by the driver.
const CASUALTY: &[VerdictCode] = &[
    VerdictCode::CudaFault,
    VerdictCode::Timeout,
    VerdictCode::Resource,
    VerdictCode::Crash,
];

/// How many recent failures are remembered (children overlap only with recent ones).
const REMEMBERED: usize = 32;

/// The recent failures on one device that could have spilled over to the children beside
/// them.
#[derive(Debug)]
pub(super) struct Neighbours {
    /// Whether the children share a GPU: the host's CPU shares no such faults.
    shared_gpu: bool,
    /// When each such failure ended, oldest first.
    failures: Vec<Instant>,
}

impl Neighbours {
    /// The record of one device; `shared_gpu` false (a CPU worker) makes nobody a casualty.
    pub(super) fn new(shared_gpu: bool) -> Self {
        Self {
            shared_gpu,
            failures: Vec::new(),
        }
    }

    /// Why a child's verdict is to be retried rather than stored, when a neighbour may have
    /// caused it: the device ran out of memory while other children shared it (a retried task
    /// runs alone), or it failed after a neighbour beside it failed first ([`Self::is_casualty`]).
    pub(super) fn retry_reason(
        &mut self,
        result: &EvalResult,
        timing: &DeviceTiming,
        killed_for: Option<KillReason>,
    ) -> Option<String> {
        // The worker killed it for its own group's memory or processes: nothing a neighbour
        // does counts there (seen: a candidate's forks retried beside another's). Its failure
        // is remembered for the children beside it all the same.
        if matches!(killed_for, Some(KillReason::Memory | KillReason::Processes)) {
            self.remember(
                result.error_code,
                timing.result.unwrap_or_else(Instant::now),
            );
            return None;
        }
        if timing.crowded && out_of_device_memory(result.error_message.as_deref()) {
            return Some(
                "out of device memory beside other tasks on the device: retried alone".to_owned(),
            );
        }
        let forked = timing.forked?;
        let ended = timing.result.unwrap_or_else(Instant::now);
        self.is_casualty(result.error_code, forked, ended).then(|| {
            format!(
                "{:?} beside a neighbour on the device that failed first: retried",
                result.error_code
            )
        })
    }

    /// Judges one child's end: `true` when its failure (`code`) is one a neighbour could have
    /// caused and a neighbour that was alive beside it (ended after this child started) failed
    /// that way first. A failure that is not a casualty is remembered for the children after it.
    pub(super) fn is_casualty(
        &mut self,
        code: Option<VerdictCode>,
        started: Instant,
        ended: Instant,
    ) -> bool {
        let Some(code) = code.filter(|_| self.shared_gpu) else {
            return false;
        };
        if CASUALTY.contains(&code) && self.failures.iter().any(|at| *at >= started) {
            return true;
        }
        self.remember(Some(code), ended);
        false
    }

    /// Records a failure that ended at `ended` and may spill over to the children beside it.
    fn remember(&mut self, code: Option<VerdictCode>, ended: Instant) {
        if self.shared_gpu && code.is_some_and(|c| SPILLS_OVER.contains(&c)) {
            if self.failures.len() == REMEMBERED {
                self.failures.remove(0);
            }
            self.failures.push(ended);
        }
    }
}

/// Whether a verdict's message says the device ran out of memory (torch's
/// `OutOfMemoryError`, the CUDA runtime's and driver's spellings): beside other children that
/// held memory too, the shortage may have been theirs.
fn out_of_device_memory(message: Option<&str>) -> bool {
    let Some(message) = message else {
        return false;
    };
    let message = message.to_ascii_lowercase();
    [
        "out of memory",
        "cudaerrormemoryallocation",
        "cuda_error_out_of_memory",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_first_failure_is_a_verdict_and_the_neighbours_beside_it_are_retried() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut device = Neighbours::new(true);
        // A faults at 100 ms; B ran beside it (started at 50) and crashed: a casualty.
        assert!(!device.is_casualty(Some(VerdictCode::CudaFault), at(0), at(100)));
        assert!(device.is_casualty(Some(VerdictCode::Crash), at(50), at(120)));
        // C started after A's fault: its own timeout is a verdict, and it is remembered.
        assert!(!device.is_casualty(Some(VerdictCode::Timeout), at(150), at(900)));
        // D ran beside C and timed out too: retried; E beside C but correct: its verdict stands.
        assert!(device.is_casualty(Some(VerdictCode::Timeout), at(800), at(950)));
        assert!(!device.is_casualty(None, at(800), at(950)));
        // A wrong answer is the candidate's whoever ran beside it.
        assert!(!device.is_casualty(Some(VerdictCode::Correctness), at(800), at(960)));
        // A crash spills over to nobody: F after C's end, beside a crash, keeps its verdict.
        assert!(!device.is_casualty(Some(VerdictCode::Crash), at(1000), at(1100)));
        assert!(!device.is_casualty(Some(VerdictCode::CudaFault), at(1050), at(1200)));

        let mut cpu = Neighbours::new(false);
        assert!(!cpu.is_casualty(Some(VerdictCode::Timeout), at(0), at(100)));
        assert!(!cpu.is_casualty(Some(VerdictCode::Timeout), at(50), at(120)));
    }

    #[test]
    fn a_kill_for_its_own_memory_is_never_retried_but_is_remembered() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let resource = |message: &str| {
            EvalResult::failed_before_trials(
                VerdictCode::Resource,
                message,
                true,
                1,
                crucible_shared::DeviceInfo {
                    kind: crucible_shared::DeviceKind::Cuda,
                    name: "H200".into(),
                    class: None,
                },
            )
        };
        let timing = |forked, ended| DeviceTiming {
            forked: Some(forked),
            result: Some(ended),
            ..DeviceTiming::default()
        };
        let mut device = Neighbours::new(true);
        // A neighbour fails first; this child, beside it, is killed for its own memory.
        assert!(!device.is_casualty(Some(VerdictCode::Timeout), at(0), at(100)));
        let own = resource("used more than 2686 MiB of host memory (stage: correctness)");
        assert_eq!(
            device.retry_reason(&own, &timing(at(50), at(150)), Some(KillReason::Memory)),
            None
        );
        // Without the kill (a shortage of the device's), the same end beside it is retried.
        assert!(
            device
                .retry_reason(&resource("device busy"), &timing(at(60), at(160)), None)
                .is_some()
        );
        // And the own kill spills over: a child beside it that timed out is retried.
        let mut fresh = Neighbours::new(true);
        assert_eq!(
            fresh.retry_reason(&own, &timing(at(0), at(100)), Some(KillReason::Processes)),
            None
        );
        assert!(fresh.is_casualty(Some(VerdictCode::Timeout), at(50), at(120)));
    }

    #[test]
    fn device_memory_shortages_are_told_from_other_failures() {
        let oom =
            "RuntimeError: CUDA out of memory. Tried to allocate 6.00 GiB (GPU 0; 79.1 GiB total)";
        assert!(out_of_device_memory(Some(oom)));
        assert!(out_of_device_memory(Some(
            "reference forward failed: torch.OutOfMemoryError: ... Out Of Memory"
        )));
        assert!(out_of_device_memory(Some("CUDA_ERROR_OUT_OF_MEMORY")));
        assert!(!out_of_device_memory(Some(
            "triton: out of resource: shared memory, Required: 262144"
        )));
        assert!(!out_of_device_memory(Some("output differs at [3]")));
        assert!(!out_of_device_memory(None));
    }
}
