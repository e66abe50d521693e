//! The harness's `spec.json` for a task stage, typed: what the worker tells the harness about
//! the task (trials, tolerances, seed, screening, the cached reference timing, prebuilt
//! extensions). Its shape is the harness's input (docs/harness-protocol.md), pinned by a test
//! here; the sandbox plan is added beside these fields when the stage directory is made.

use crate::cache::reference_cache::NUM_WARMUP;
use crate::child::protocol::BuiltExtension;
use crate::device::DeviceSlot;
use crucible_shared::{HarnessSettings, RuntimeStats, TaskSpec};
use serde::Serialize;

/// Which harness stage a `spec.json` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HarnessStage {
    /// The device stage: load, check and time the candidate.
    Evaluate,
    /// The CPU stage: syntax, screening, the candidate's import and builds.
    Prepare,
}

/// The harness's `spec.json` for one task stage, as the worker writes it (the sandbox plan,
/// `sandbox`, is added beside these fields when the stage directory is made). The shape is
/// the harness's input: docs/harness-protocol.md.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HarnessSpec<'a> {
    /// Which stage the child runs: the CPU prepare or the evaluation.
    pub stage: HarnessStage,
    /// The architecture CUDA extensions are built for (`TORCH_CUDA_ARCH_LIST` spelling).
    pub cuda_arch: Option<&'a str>,
    /// Extensions built before the task took the device, installed in the task directory.
    pub prebuilt: &'a [BuiltExtension],
    /// `triton` or `cuda`.
    pub backend: &'static str,
    /// `cuda` or `cpu`.
    pub device: &'static str,
    /// The request's settings the harness reads (trials, tolerances, screening, timing,
    /// the measurement options), each under its own name: made from the one list of settings
    /// in `crucible_shared` with the request.
    #[serde(flatten)]
    pub settings: HarnessSettings,
    /// Untimed calls per model before timing.
    pub num_warmup: u32,
    /// Seeds the inputs of every trial.
    pub seed: u64,
    /// The worker's cached timing of the reference; the harness then times only the
    /// candidate.
    pub reference_timing: Option<RuntimeStats>,
    /// Whether the harness runs its integrity checks after timing.
    pub integrity_checks: bool,
    /// The seconds the CPU stage may spend on a dry run of a Triton candidate that compiles
    /// its kernels for `cuda_arch` (`CRUCIBLE_TRITON_PRECOMPILE`); written only when set, so
    /// every other spec keeps its shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub triton_precompile: Option<u64>,
    /// The node's precompiled headers of torch/extension.h ([`crate::cache::pch`]), for a CUDA
    /// candidate's builds; written only when the worker has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pch_dir: Option<String>,
}

/// The harness's `spec.json` for `stage`.
pub fn harness_spec<'a>(
    spec: &'a TaskSpec,
    device: &DeviceSlot,
    stage: HarnessStage,
    reference_timing: Option<RuntimeStats>,
    cuda_arch: Option<&'a str>,
    prebuilt: &'a [BuiltExtension],
    integrity_checks: bool,
) -> HarnessSpec<'a> {
    let r = &spec.request;
    HarnessSpec {
        stage,
        cuda_arch,
        prebuilt,
        backend: r.backend.as_str(),
        device: match device {
            DeviceSlot::Gpu { .. } => "cuda",
            DeviceSlot::Cpu { .. } => "cpu",
        },
        settings: HarnessSettings::of(r),
        num_warmup: NUM_WARMUP,
        seed: spec.seed,
        reference_timing,
        integrity_checks,
        triton_precompile: None,
        pch_dir: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_shared::{Backend, MIN_ADAPTIVE_TRIALS, TimingMode};

    /// What the worker adds to a stage that the spec carries.
    #[derive(Default)]
    struct Inputs {
        reference_timing: Option<RuntimeStats>,
        cuda_arch: Option<String>,
    }

    #[test]
    fn spec_json_carries_the_cached_reference_timing() {
        let spec = TaskSpec::new(crucible_shared::EvaluateRequest::new("a", "b"), 7);
        let cpu = DeviceSlot::Cpu { name: "x".into() };
        let plain = harness_spec(&spec, &cpu, HarnessStage::Evaluate, None, None, &[], true);
        let plain = serde_json::to_value(plain).unwrap();
        assert_eq!(plain["reference_timing"], serde_json::Value::Null);
        assert_eq!(plain["num_warmup"], NUM_WARMUP);
        // A request without `timing` asks the harness for the fixed protocol.
        assert_eq!(
            plain["timing"],
            serde_json::json!({"mode": "fixed", "target_rel_error": 0.001,
                               "max_time_ms": 2000, "min_trials": MIN_ADAPTIVE_TRIALS})
        );
        let stats = RuntimeStats::new(2.0, 2.1, 0.1, 1.9, 2.5);
        let inputs = Inputs {
            reference_timing: Some(stats),
            cuda_arch: None,
        };
        let cached = harness_spec(
            &spec,
            &cpu,
            HarnessStage::Evaluate,
            inputs.reference_timing,
            None,
            &[],
            true,
        );
        let cached = serde_json::to_value(cached).unwrap();
        assert_eq!(
            cached["reference_timing"],
            serde_json::json!({"median": 2.0, "mean": 2.1, "std": 0.1, "min": 1.9, "max": 2.5})
        );
    }

    #[test]
    fn the_dry_run_is_named_only_when_asked_for() {
        let spec = TaskSpec::new(crucible_shared::EvaluateRequest::new("a", "b"), 7);
        let gpu = DeviceSlot::Gpu {
            index: 0,
            name: "H100".into(),
        };
        let mut typed = harness_spec(
            &spec,
            &gpu,
            HarnessStage::Prepare,
            None,
            Some("9.0"),
            &[],
            true,
        );
        assert!(
            serde_json::to_value(&typed)
                .unwrap()
                .get("triton_precompile")
                .is_none()
        );
        typed.triton_precompile = Some(30);
        assert_eq!(
            serde_json::to_value(&typed).unwrap()["triton_precompile"],
            30
        );
    }

    /// The `json!` the spec was written with before `HarnessSpec`, kept verbatim as the
    /// reference the typed spec must match.
    fn old_json_spec(
        spec: &TaskSpec,
        device: &DeviceSlot,
        stage: &str,
        inputs: &Inputs,
        prebuilt: &[BuiltExtension],
        integrity_checks: bool,
    ) -> serde_json::Value {
        let r = &spec.request;
        serde_json::json!({
            "stage": stage,
            "cuda_arch": inputs.cuda_arch,
            "prebuilt": prebuilt,
            "backend": match r.backend { Backend::Triton => "triton", Backend::Cuda => "cuda" },
            "device": match device { DeviceSlot::Gpu { .. } => "cuda", DeviceSlot::Cpu { .. } => "cpu" },
            "num_correct_trials": r.num_correct_trials,
            "num_perf_trials": r.num_perf_trials,
            "num_warmup": NUM_WARMUP,
            "measure_performance": r.measure_performance,
            "atol": r.atol,
            "rtol": r.rtol,
            "seed": spec.seed,
            "reference_timing": inputs.reference_timing,
            "screening": r.screening,
            "max_speedup": r.max_speedup,
            "integrity_checks": integrity_checks,
            "timing": {
                "mode": r.timing.mode,
                "target_rel_error": r.timing.target_rel_error,
                "max_time_ms": r.timing.max_time_ms,
                "min_trials": MIN_ADAPTIVE_TRIALS,
            },
            "precision": r.precision.as_str(),
            "timing_method": r.timing_method.as_str(),
            "reference_backend": r.reference_backend.as_str(),
        })
    }

    /// A device, the stage (typed and by name), the inputs, the prebuilt extensions and
    /// whether integrity checks are on.
    type Case<'a> = (
        &'a DeviceSlot,
        HarnessStage,
        &'a str,
        &'a Inputs,
        &'a [BuiltExtension],
        bool,
    );

    #[test]
    fn the_harness_spec_keeps_the_shape_of_the_old_json() {
        let mut request = crucible_shared::EvaluateRequest::new("ref", "cand");
        request.backend = Backend::Cuda;
        request.num_correct_trials = 3;
        request.num_perf_trials = 50;
        request.measure_performance = false;
        request.atol = 0.5;
        request.rtol = 0.25;
        request.max_speedup = 8.0;
        request.precision = crucible_shared::Precision::Bf16;
        request.timing_method = crucible_shared::TimingMethod::HostTime;
        request.reference_backend = crucible_shared::ReferenceBackend::Compile;
        request.timing = crucible_shared::TimingRequest {
            mode: TimingMode::Adaptive,
            target_rel_error: 0.005,
            max_time_ms: 750,
        };
        request.screening.insert(
            "dynamic-code".into(),
            crucible_shared::ScreeningAction::Flag,
        );
        let spec = TaskSpec::new(request, 11);
        let gpu = DeviceSlot::Gpu {
            index: 0,
            name: "H100".into(),
        };
        let cpu = DeviceSlot::Cpu { name: "x".into() };
        let stats = RuntimeStats::new(2.0, 2.5, 0.25, 1.5, 3.0);
        let full = Inputs {
            reference_timing: Some(stats),
            cuda_arch: Some("9.0".into()),
        };
        let built = [BuiltExtension {
            name: "ext".into(),
            key: "ab".repeat(32),
            file: "build/ext.so".into(),
            python_module: true,
        }];
        let cases: [Case; 3] = [
            (
                &gpu,
                HarnessStage::Evaluate,
                "evaluate",
                &full,
                &built,
                true,
            ),
            (&gpu, HarnessStage::Prepare, "prepare", &full, &[], false),
            (
                &cpu,
                HarnessStage::Evaluate,
                "evaluate",
                &Inputs::default(),
                &[],
                true,
            ),
        ];
        for (device, stage, name, inputs, prebuilt, integrity) in cases {
            let typed = harness_spec(
                &spec,
                device,
                stage,
                inputs.reference_timing,
                inputs.cuda_arch.as_deref(),
                prebuilt,
                integrity,
            );
            let old = old_json_spec(&spec, device, name, inputs, prebuilt, integrity);
            assert_eq!(
                serde_json::to_value(&typed).unwrap(),
                old,
                "{name} on {device:?}"
            );
            // The bytes written to spec.json, too.
            assert_eq!(
                serde_json::to_value(&typed).unwrap().to_string(),
                old.to_string()
            );
        }

        // The shape, spelt out.
        let typed = harness_spec(
            &spec,
            &gpu,
            HarnessStage::Evaluate,
            full.reference_timing,
            full.cuda_arch.as_deref(),
            &built,
            true,
        );
        assert_eq!(
            serde_json::to_value(typed).unwrap(),
            serde_json::json!({
                "stage": "evaluate",
                "cuda_arch": "9.0",
                "prebuilt": [{
                    "name": "ext",
                    "key": "ab".repeat(32),
                    "file": "build/ext.so",
                    "python_module": true,
                }],
                "backend": "cuda",
                "device": "cuda",
                "num_correct_trials": 3,
                "num_perf_trials": 50,
                "num_warmup": NUM_WARMUP,
                "measure_performance": false,
                "atol": 0.5,
                "rtol": 0.25,
                "seed": 11,
                "reference_timing": {"median": 2.0, "mean": 2.5, "std": 0.25, "min": 1.5, "max": 3.0},
                "screening": {"dynamic-code": "flag"},
                "max_speedup": 8.0,
                "integrity_checks": true,
                "timing": {
                    "mode": "adaptive",
                    "target_rel_error": 0.005,
                    "max_time_ms": 750,
                    "min_trials": 3,
                },
                "precision": "bf16",
                "timing_method": "host_time",
                "reference_backend": "compile",
            })
        );
    }
}
