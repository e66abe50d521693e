//! The reference timing cache: a reference's timing statistics, measured once, reused for
//! every later candidate of the same problem on the same kind of device with the same
//! software and timing config (a GRPO group of 16 samples times the reference once). Stored in
//! the broker's key-value cache (namespace [`REF_CACHE_NAMESPACE`]) for `result_ttl`.
//!
//! The key is pure ([`reference_cache_key`]); the worker supplies the parts: the device, the
//! NVML driver version (fetched once at start), the software versions the harness reported in
//! its last result, and the timing config of the request.

use crate::child::protocol::SoftwareReport;
use crate::device::DeviceSlot;
use crucible_shared::{
    DeviceInfo, EvaluateRequest, MeasurementOptions, RuntimeStats, TaskSpec, TimingRequest,
};
use sha2::{Digest, Sha256};

use crucible_task_manager::KvNamespace;

/// The broker's key-value namespace of reference timings.
pub const REF_CACHE_NAMESPACE: KvNamespace = KvNamespace::Ref;

/// Version of the harness's timing method. Bump it whenever the way the harness times a model
/// changes (warm-up, flush, timers, blocks, statistics): older entries then stop matching.
/// v2: device-wide synchronize before the end event; inputs rotate through a pool.
/// v3: adaptive timing exists (the key names the mode); the statistics carry the trial count
/// and the median's interval (the fixed protocol's calls are unchanged).
/// v4: the reference is timed only on a quiet device with the rest of its task stopped, and
/// only such timings are stored: earlier entries may hold timings a neighbour slowed down.
pub const TIMING_PROTOCOL: &str = "timing-v4";

/// Warm-up calls per model before timing (`spec.json` `num_warmup`).
pub const NUM_WARMUP: u32 = 3;

/// The software a harness ran with, as it reported it (`software` of the result line).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SoftwareVersions {
    /// torch's version: without it there is no usable report.
    pub torch: Option<String>,
    /// triton's version, when installed.
    pub triton: Option<String>,
    /// The CUDA version torch was built with (`None` on a CPU-only build).
    pub cuda: Option<String>,
}

impl SoftwareVersions {
    /// The versions in a harness report; `None` when it does not name torch (no usable report).
    pub fn from_report(report: &SoftwareReport) -> Option<Self> {
        let get = |name: &str| report.get(name).cloned().flatten();
        let versions = Self {
            torch: get("torch"),
            triton: get("triton"),
            cuda: get("cuda"),
        };
        versions.torch.is_some().then_some(versions)
    }
}

/// How the reference is timed: with the software and device, everything that changes its
/// numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct TimingConfig {
    /// Timed calls per model (`spec.json` `num_perf_trials`).
    pub num_perf_trials: u32,
    /// Warm-up calls per model ([`NUM_WARMUP`]).
    pub num_warmup: u32,
    /// The request's `timing`: an adaptive timing stopped by its own target and budget is not
    /// the fixed protocol's, nor another target's.
    pub timing: TimingRequest,
    /// [`TIMING_PROTOCOL`].
    pub protocol: &'static str,
    /// How each call is measured on this device, e.g. CUDA events after an L2 flush, or the
    /// CPU clock with a given thread count.
    pub policy: String,
    /// The request's measurement options (each changes the reference's numbers); named in
    /// the key as the result cache key names them (`MeasurementOptions::write_key`).
    pub options: MeasurementOptions,
}

impl TimingConfig {
    /// How a task with `num_perf_trials` and `timing` is timed on `device` (`cpu_threads`:
    /// torch's thread count on a CPU worker, `None` for its default).
    pub fn new(
        num_perf_trials: u32,
        timing: TimingRequest,
        device: &DeviceSlot,
        cpu_threads: Option<u32>,
    ) -> Self {
        let policy = match device {
            DeviceSlot::Gpu { .. } => "cuda-events,l2-flush".to_owned(),
            DeviceSlot::Cpu { .. } => format!(
                "perf-counter,threads={}",
                cpu_threads.map_or_else(|| "default".to_owned(), |n| n.to_string())
            ),
        };
        Self {
            num_perf_trials,
            num_warmup: NUM_WARMUP,
            timing,
            protocol: TIMING_PROTOCOL,
            policy,
            options: MeasurementOptions::default(),
        }
    }

    /// How `request`'s reference is timed on `device`.
    pub fn for_request(
        request: &EvaluateRequest,
        device: &DeviceSlot,
        cpu_threads: Option<u32>,
    ) -> Self {
        Self {
            options: MeasurementOptions::of(request),
            ..Self::new(request.num_perf_trials, request.timing, device, cpu_threads)
        }
    }
}

/// Hex SHA-256 naming the timing of `reference_code` on this device (model and kind), driver
/// (`"none"` on CPU), software and timing config. The seed is left out on purpose: timings are
/// of one input set of fixed shapes, and requests without a seed get a random one.
pub fn reference_cache_key(
    reference_code: &str,
    scope: Option<&str>,
    device: &DeviceInfo,
    driver: &str,
    software: &SoftwareVersions,
    timing: &TimingConfig,
) -> String {
    let mut h = Sha256::new();
    // Named, length-prefixed fields, as the result cache key: no two inputs encode alike.
    let mut field = |name: &str, value: &[u8]| {
        h.update(name.as_bytes());
        h.update((value.len() as u64).to_le_bytes());
        h.update(value);
    };
    let opt = |v: &Option<String>| v.as_deref().map_or(b"\0null".to_vec(), |s| s.into());
    field("reference_code", reference_code.as_bytes());
    // Named only when the task has one (the submitter's cache namespace), so that one
    // tenant's timing never sets another's speedups.
    if let Some(scope) = scope {
        field("scope", scope.as_bytes());
    }
    field("device_name", device.name.as_bytes());
    field("device_kind", device.kind.as_str().as_bytes());
    field("driver", driver.as_bytes());
    field("torch", &opt(&software.torch));
    field("triton", &opt(&software.triton));
    field("cuda", &opt(&software.cuda));
    field("num_perf_trials", &timing.num_perf_trials.to_le_bytes());
    field("num_warmup", &timing.num_warmup.to_le_bytes());
    // Always the mode, so a fixed and an adaptive timing never share a key; the target and
    // budget only where they stop the timing (adaptive).
    let t = &timing.timing;
    field("timing_mode", t.mode.as_str().as_bytes());
    if !t.is_fixed() {
        field(
            "target_rel_error",
            &t.target_rel_error.to_bits().to_le_bytes(),
        );
        field("max_time_ms", &t.max_time_ms.to_le_bytes());
    }
    field("protocol", timing.protocol.as_bytes());
    field("policy", timing.policy.as_bytes());
    // Named only when not the default, so the timings cached before these options existed
    // still match the requests that leave them out.
    timing.options.write_key(&mut field);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The driver part of the key: NVML's driver version for a GPU (`None` when NVML does not
/// answer: no caching then), `"none"` for the CPU.
pub fn driver_version(device: &DeviceSlot) -> Option<String> {
    match device {
        DeviceSlot::Cpu { .. } => Some("none".to_owned()),
        DeviceSlot::Gpu { .. } => nvml_wrapper::Nvml::init()
            .and_then(|nvml| nvml.sys_driver_version())
            .map_err(|e| tracing::warn!(error = %e, "no nvml driver version, reference cache off"))
            .ok(),
    }
}

/// The key of `spec`'s reference timing on this worker; `None` when nothing is to be cached
/// (performance not measured, or a part of the key is unknown).
pub fn key_for(
    spec: &TaskSpec,
    device: &DeviceSlot,
    cpu_threads: Option<u32>,
    driver: Option<&str>,
    software: Option<&SoftwareVersions>,
) -> Option<String> {
    let r = &spec.request;
    if !r.measure_performance {
        return None;
    }
    Some(reference_cache_key(
        &r.reference_code,
        spec.cache_scope.as_deref(),
        &device.info(),
        driver?,
        software?,
        &TimingConfig::for_request(r, device, cpu_threads),
    ))
}

/// Stats as stored in the cache.
pub fn encode(stats: &RuntimeStats) -> String {
    serde_json::to_string(stats).expect("runtime stats serialise")
}

/// Stats read back from the cache; `None` when they do not parse or are not sane timings.
pub fn decode(value: &str) -> Option<RuntimeStats> {
    let s: RuntimeStats = serde_json::from_str(value).ok()?;
    s.is_sane().then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_shared::{DeviceKind, EvaluateRequest, Precision, ReferenceBackend, TimingMethod};

    fn software() -> SoftwareVersions {
        SoftwareVersions {
            torch: Some("2.5.1".into()),
            triton: Some("3.1.0".into()),
            cuda: Some("12.4".into()),
        }
    }

    fn gpu() -> DeviceSlot {
        DeviceSlot::Gpu {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
        }
    }

    fn timing() -> TimingConfig {
        TimingConfig::new(100, TimingRequest::default(), &gpu(), None)
    }

    fn key(
        code: &str,
        device: &DeviceInfo,
        driver: &str,
        sw: &SoftwareVersions,
        t: &TimingConfig,
    ) -> String {
        reference_cache_key(code, None, device, driver, sw, t)
    }

    #[test]
    fn the_key_changes_with_every_component() {
        let dev = gpu().info();
        let base = key("ref", &dev, "550.54", &software(), &timing());
        assert_eq!(base.len(), 64);
        assert!(base.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(base, key("ref", &dev, "550.54", &software(), &timing()));

        let mut variants = vec![
            key("ref2", &dev, "550.54", &software(), &timing()),
            // Two tenants' scopes, and either against none.
            reference_cache_key("ref", Some("t_a"), &dev, "550.54", &software(), &timing()),
            reference_cache_key("ref", Some("t_b"), &dev, "550.54", &software(), &timing()),
            key(
                "ref",
                &DeviceInfo {
                    kind: DeviceKind::Cuda,
                    name: "NVIDIA H200".into(),
                    class: None,
                },
                "550.54",
                &software(),
                &timing(),
            ),
            key(
                "ref",
                &DeviceInfo {
                    kind: DeviceKind::Cpu,
                    name: dev.name.clone(),
                    class: None,
                },
                "550.54",
                &software(),
                &timing(),
            ),
            key("ref", &dev, "560.28", &software(), &timing()),
        ];
        for change in [
            |s: &mut SoftwareVersions| s.torch = Some("2.6.0".into()),
            |s: &mut SoftwareVersions| s.triton = Some("3.2.0".into()),
            |s: &mut SoftwareVersions| s.triton = None,
            |s: &mut SoftwareVersions| s.cuda = Some("12.6".into()),
        ] {
            let mut sw = software();
            change(&mut sw);
            variants.push(key("ref", &dev, "550.54", &sw, &timing()));
        }
        for change in [
            |t: &mut TimingConfig| t.num_perf_trials = 50,
            |t: &mut TimingConfig| t.num_warmup = 5,
            |t: &mut TimingConfig| t.timing = TimingRequest::adaptive(),
            |t: &mut TimingConfig| {
                t.timing = TimingRequest::adaptive();
                t.timing.target_rel_error = 0.01;
            },
            |t: &mut TimingConfig| {
                t.timing = TimingRequest::adaptive();
                t.timing.max_time_ms = 100;
            },
            |t: &mut TimingConfig| t.protocol = "timing-v0",
            |t: &mut TimingConfig| t.policy = "other".into(),
            |t: &mut TimingConfig| t.options.precision = Precision::Bf16,
            |t: &mut TimingConfig| t.options.precision = Precision::Fp16,
            |t: &mut TimingConfig| t.options.timing_method = TimingMethod::DoBench,
            |t: &mut TimingConfig| t.options.timing_method = TimingMethod::HostTime,
            |t: &mut TimingConfig| t.options.reference_backend = ReferenceBackend::Compile,
        ] {
            let mut t = timing();
            change(&mut t);
            variants.push(key("ref", &dev, "550.54", &software(), &t));
        }
        let cpu = DeviceSlot::Cpu { name: "x".into() };
        let fixed = TimingRequest::default();
        assert_ne!(
            TimingConfig::new(100, fixed, &cpu, Some(1)),
            TimingConfig::new(100, fixed, &cpu, Some(4))
        );
        let n = variants.len();
        variants.push(base);
        variants.sort();
        variants.dedup();
        assert_eq!(variants.len(), n + 1, "every change gives a new key");
    }

    #[test]
    fn default_options_keep_the_keys_cached_before_them() {
        let dev = gpu().info();
        let request = EvaluateRequest::new("ref", "cand");
        let of_request = TimingConfig::for_request(&request, &gpu(), None);
        assert_eq!(
            key("ref", &dev, "550.54", &software(), &of_request),
            key("ref", &dev, "550.54", &software(), &timing())
        );
    }

    #[test]
    fn no_key_without_performance_or_a_known_part() {
        let mut spec = TaskSpec::new(
            EvaluateRequest::new("class Model: pass", "class ModelNew: pass"),
            1,
        );
        let sw = software();
        let with =
            |spec: &TaskSpec, driver, software| key_for(spec, &gpu(), None, driver, software);
        assert!(with(&spec, Some("550"), Some(&sw)).is_some());
        assert_eq!(with(&spec, None, Some(&sw)), None);
        assert_eq!(with(&spec, Some("550"), None), None);
        // The seed is not part of the key; the trial count is.
        let a = with(&spec, Some("550"), Some(&sw));
        spec.seed = 2;
        assert_eq!(with(&spec, Some("550"), Some(&sw)), a);
        spec.request.num_perf_trials += 1;
        let b = with(&spec, Some("550"), Some(&sw));
        assert_ne!(b, a);
        // An adaptive reference timing is never reused for a fixed one, nor the other way;
        // a fixed one ignores the (unused) target and budget.
        spec.request.timing.max_time_ms = 5;
        assert_eq!(with(&spec, Some("550"), Some(&sw)), b);
        spec.request.timing = TimingRequest::adaptive();
        let adaptive = with(&spec, Some("550"), Some(&sw));
        assert_ne!(adaptive, b);
        spec.request.timing.target_rel_error = 0.02;
        assert_ne!(with(&spec, Some("550"), Some(&sw)), adaptive);
        spec.request.measure_performance = false;
        assert_eq!(with(&spec, Some("550"), Some(&sw)), None);
    }

    #[test]
    fn stats_round_trip_and_insane_values_are_refused() {
        let s = RuntimeStats::new(1.0, 1.1, 0.1, 0.9, 1.5);
        assert_eq!(decode(&encode(&s)), Some(s));
        let with_ci = RuntimeStats {
            trials: Some(7),
            median_ci: Some([0.95, 1.2]),
            ..s
        };
        assert_eq!(decode(&encode(&with_ci)), Some(with_ci));
        assert_eq!(
            decode(r#"{"median":1,"mean":1,"std":0,"min":0,"max":1,"median_ci":[1,0.5]}"#),
            None
        );
        assert_eq!(
            decode(r#"{"median":1,"mean":1,"std":0,"min":0,"max":1,"trials":0}"#),
            None
        );
        assert_eq!(decode("garbage"), None);
        assert_eq!(
            decode(r#"{"median":1,"mean":1,"std":0,"min":2,"max":1}"#),
            None
        );
        assert_eq!(
            decode(r#"{"median":-1,"mean":1,"std":0,"min":0,"max":1}"#),
            None
        );
    }

    #[test]
    fn software_needs_torch() {
        let mut report = SoftwareReport::new();
        report.insert("triton".into(), Some("3.1".into()));
        assert_eq!(SoftwareVersions::from_report(&report), None);
        report.insert("torch".into(), Some("2.5".into()));
        report.insert("cuda".into(), None);
        assert_eq!(
            SoftwareVersions::from_report(&report),
            Some(SoftwareVersions {
                torch: Some("2.5".into()),
                triton: Some("3.1".into()),
                cuda: None,
            })
        );
    }
}
