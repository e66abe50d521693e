//! A worker process's Prometheus metrics (the names are docs/METRICS.md's): every verdict it
//! stores, how long its evaluations and their stages took, how long its tasks queued, which
//! worker it is and whether its device is healthy. One [`WorkerMetrics`] per process, shared
//! by its workers (a standalone `crucible-worker` has one; `crucible up` one per device) and
//! registered in a registry the binary serves: `crucible-worker` on its metrics port,
//! `crucible up` in the API's `/metrics`. Nothing here serves HTTP.
//!
//! May import: `process`, `device` (`scripts/check_layout.py`).

use crate::device::DeviceSlot;
use crucible_shared::{Backend, DeviceClass, EvalResult, wire_name};
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    core::Collector,
};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

/// Distinct `stage` label values kept; a stage name beyond them is counted as [`OTHER_STAGE`].
/// The names come from `stage_ms` (the harness's stages and the worker's own), a few dozen.
const MAX_STAGE_LABELS: usize = 48;
/// The `stage` label of a name that is not plain or comes after [`MAX_STAGE_LABELS`].
pub const OTHER_STAGE: &str = "other";
/// Longest stage name used as a label.
const MAX_STAGE_CHARS: usize = 40;

/// The `stage_ms` entry of a CPU stage's wait for one of the node's compile slots (the build
/// cache's `.slots`, shared by every worker of the node), also observed on its own in
/// `crucible_compile_slot_wait_seconds`: with one worker per GPU, the sign of a compile pool too
/// small for the node.
pub const COMPILE_SLOT_WAIT_STAGE: &str = "compile_slot_wait";

/// Claim to ack: a CPU task takes seconds, a GPU task up to its `timeout_s` (≤ 3600).
const EVALUATION_BUCKETS: [f64; 13] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];
/// One `stage_ms` entry: from a millisecond (a cache hit) to the whole budget.
const STAGE_BUCKETS: [f64; 15] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
];
/// A wait for a compile slot: none while a slot is free, minutes behind other workers' builds
/// (a cold `load_inline` build is about a minute).
const COMPILE_SLOT_WAIT_BUCKETS: [f64; 12] = [
    0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
];
/// Submission to claim: none on an idle cluster, hours behind a large batch.
const QUEUE_WAIT_BUCKETS: [f64; 15] = [
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0,
];

/// The metrics of the workers of one process.
pub struct WorkerMetrics {
    info: IntGaugeVec,
    healthy: IntGaugeVec,
    evaluations: IntCounterVec,
    evaluation_seconds: HistogramVec,
    stage_seconds: HistogramVec,
    queue_wait: Histogram,
    compile_slot_wait: Histogram,
    /// The stage names used as labels so far (bounded by [`MAX_STAGE_LABELS`]).
    stages: Mutex<BTreeSet<String>>,
}

impl WorkerMetrics {
    /// The worker metrics, registered in `registry` (fails if they already are).
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let metrics = Self {
            info: IntGaugeVec::new(
                Opts::new(
                    "crucible_worker_info",
                    "Always 1: a worker of this process (gpu: the device index, or cpu)",
                ),
                &["node", "gpu", "version", "device_class"],
            )?,
            healthy: IntGaugeVec::new(
                Opts::new(
                    "crucible_worker_healthy",
                    "1 while the device passes its checks, 0 after it failed one (a CUDA fault the GPU did not survive) until it passes again",
                ),
                &["gpu"],
            )?,
            evaluations: IntCounterVec::new(
                Opts::new(
                    "crucible_evaluations_total",
                    "Verdicts this process stored, by verdict (ok, incorrect, decoy, hack, error), error code (empty when none) and backend",
                ),
                &["verdict", "error_code", "backend"],
            )?,
            evaluation_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "crucible_evaluation_seconds",
                    "Claim to stored verdict of one evaluation, by backend",
                )
                .buckets(EVALUATION_BUCKETS.to_vec()),
                &["backend"],
            )?,
            stage_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "crucible_evaluation_stage_seconds",
                    "Seconds of each stage of the stored verdicts, by the stage's name in the result's stage_ms",
                )
                .buckets(STAGE_BUCKETS.to_vec()),
                &["stage"],
            )?,
            queue_wait: Histogram::with_opts(
                HistogramOpts::new(
                    "crucible_queue_wait_seconds",
                    "Submission to claim of the tasks this process claimed (a retried task's includes its earlier attempts), by the broker's clock",
                )
                .buckets(QUEUE_WAIT_BUCKETS.to_vec()),
            )?,
            compile_slot_wait: Histogram::with_opts(
                HistogramOpts::new(
                    "crucible_compile_slot_wait_seconds",
                    "CPU stages of the stored verdicts that took one of the node's compile slots: how long each waited for it",
                )
                .buckets(COMPILE_SLOT_WAIT_BUCKETS.to_vec()),
            )?,
            stages: Mutex::new(BTreeSet::new()),
        };
        for c in metrics.collectors() {
            registry.register(c)?;
        }
        Ok(metrics)
    }

    fn collectors(&self) -> [Box<dyn Collector>; 8] {
        [
            Box::new(crate::process::task_dir::LEFT_FOR_SWEEP.clone()),
            Box::new(self.info.clone()),
            Box::new(self.healthy.clone()),
            Box::new(self.evaluations.clone()),
            Box::new(self.evaluation_seconds.clone()),
            Box::new(self.stage_seconds.clone()),
            Box::new(self.queue_wait.clone()),
            Box::new(self.compile_slot_wait.clone()),
        ]
    }

    /// A worker of device class `class` on `device` of `node` exists in this process.
    pub fn worker_started(&self, node: &str, device: &DeviceSlot, class: &DeviceClass) {
        self.info
            .with_label_values(&[
                node,
                &gpu_label(device),
                env!("CARGO_PKG_VERSION"),
                class.as_str(),
            ])
            .set(1);
    }

    /// The outcome of `device`'s latest check.
    pub fn device_health(&self, device: &DeviceSlot, healthy: bool) {
        self.healthy
            .with_label_values(&[&gpu_label(device)])
            .set(i64::from(healthy));
    }

    /// A verdict the broker accepted, `claimed_for` after its task was claimed.
    pub fn verdict_stored(&self, backend: Backend, result: &EvalResult, claimed_for: Duration) {
        let error_code = result.error_code.map(|c| wire_name(&c)).unwrap_or_default();
        self.evaluations
            .with_label_values(&[&wire_name(&result.verdict), &error_code, backend.as_str()])
            .inc();
        self.evaluation_seconds
            .with_label_values(&[backend.as_str()])
            .observe(claimed_for.as_secs_f64());
        let mut stages = self.stages.lock().expect("stage labels lock");
        for (name, ms) in &result.stage_ms {
            if ms.is_finite() && *ms >= 0.0 {
                self.stage_seconds
                    .with_label_values(&[stage_label(name, &mut stages)])
                    .observe(ms / 1e3);
                if name == COMPILE_SLOT_WAIT_STAGE {
                    self.compile_slot_wait.observe(ms / 1e3);
                }
            }
        }
    }

    /// A claimed task's wait in the queue, from its submission to the claim (`Lease::queued_for`).
    pub fn queue_waited(&self, wait: Duration) {
        self.queue_wait.observe(wait.as_secs_f64());
    }
}

/// The `gpu` label of a device: its index, or `cpu`.
pub fn gpu_label(device: &DeviceSlot) -> String {
    device
        .index()
        .map_or_else(|| "cpu".to_owned(), |i| i.to_string())
}

/// Pure: the label of stage `name`: the name itself when it is plain (lowercase letters,
/// digits, `_`) and already in `seen` or `seen` has room, else [`OTHER_STAGE`]. The names are
/// those of `stage_ms`, so no list of stages is kept here; the bound only keeps a misbehaving
/// harness from growing the label set without end.
pub fn stage_label<'a>(name: &'a str, seen: &mut BTreeSet<String>) -> &'a str {
    let plain = !name.is_empty()
        && name.len() <= MAX_STAGE_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !plain {
        return OTHER_STAGE;
    }
    if seen.contains(name) {
        return name;
    }
    if seen.len() < MAX_STAGE_LABELS {
        seen.insert(name.to_owned());
        return name;
    }
    OTHER_STAGE
}

#[cfg(test)]
mod tests;
