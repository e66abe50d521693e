use super::*;
use crucible_shared::{DeviceInfo, DeviceKind, Verdict, VerdictCode};

fn text(registry: &Registry) -> String {
    use prometheus::Encoder;
    let mut buf = Vec::new();
    prometheus::TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .unwrap();
    String::from_utf8(buf).unwrap()
}

fn cpu() -> DeviceSlot {
    DeviceSlot::Cpu {
        name: "Test CPU".into(),
    }
}

fn result(code: Option<VerdictCode>, verdict: Verdict) -> EvalResult {
    let device = DeviceInfo {
        kind: DeviceKind::Cpu,
        name: "Test CPU".into(),
        class: None,
    };
    let mut r = EvalResult::failed_before_trials(VerdictCode::Syntax, "x", false, 5, device);
    r.error_code = code;
    r.verdict = verdict;
    r
}

#[test]
fn a_stored_verdict_counts_by_its_wire_names_and_observes_its_stages() {
    let registry = Registry::new();
    let metrics = WorkerMetrics::register(&registry).unwrap();
    let mut r = result(Some(VerdictCode::CudaFault), Verdict::Error);
    r.stage_ms.insert("setup".into(), 1500.0);
    r.stage_ms.insert("device_stage".into(), 20.0);
    r.stage_ms.insert("nan".into(), f64::NAN);
    metrics.verdict_stored(Backend::Cuda, &r, Duration::from_secs(3));
    metrics.verdict_stored(
        Backend::Triton,
        &result(None, Verdict::Ok),
        Duration::from_millis(700),
    );
    let t = text(&registry);
    for line in [
        "# TYPE crucible_evaluations_total counter",
        r#"crucible_evaluations_total{backend="cuda",error_code="CUDA_FAULT",verdict="error"} 1"#,
        r#"crucible_evaluations_total{backend="triton",error_code="",verdict="ok"} 1"#,
        "# TYPE crucible_evaluation_seconds histogram",
        r#"crucible_evaluation_seconds_count{backend="cuda"} 1"#,
        r#"crucible_evaluation_seconds_sum{backend="cuda"} 3"#,
        r#"crucible_evaluation_seconds_bucket{backend="triton",le="1"} 1"#,
        "# TYPE crucible_evaluation_stage_seconds histogram",
        r#"crucible_evaluation_stage_seconds_sum{stage="setup"} 1.5"#,
        r#"crucible_evaluation_stage_seconds_count{stage="device_stage"} 1"#,
    ] {
        assert!(t.contains(line), "missing {line:?} in\n{t}");
    }
    assert!(
        !t.contains(r#"stage="nan""#),
        "a non-finite time is not observed\n{t}"
    );
}

#[test]
fn worker_info_and_health_are_labelled_by_device() {
    let registry = Registry::new();
    let metrics = WorkerMetrics::register(&registry).unwrap();
    let gpu = DeviceSlot::Gpu {
        index: 3,
        name: "NVIDIA H100".into(),
    };
    let h100 = DeviceClass::parse("h100").unwrap();
    metrics.worker_started("node-a", &gpu, &h100);
    metrics.worker_started("node-a", &cpu(), &DeviceClass::cpu());
    metrics.device_health(&gpu, false);
    metrics.device_health(&cpu(), true);
    let t = text(&registry);
    let version = env!("CARGO_PKG_VERSION");
    for line in [
        format!(
            r#"crucible_worker_info{{device_class="h100",gpu="3",node="node-a",version="{version}"}} 1"#
        ),
        format!(
            r#"crucible_worker_info{{device_class="cpu",gpu="cpu",node="node-a",version="{version}"}} 1"#
        ),
        r#"crucible_worker_healthy{gpu="3"} 0"#.to_owned(),
        r#"crucible_worker_healthy{gpu="cpu"} 1"#.to_owned(),
    ] {
        assert!(t.contains(&line), "missing {line:?} in\n{t}");
    }
}

#[test]
fn a_compile_slot_wait_is_observed_in_its_own_histogram_and_as_a_stage() {
    let registry = Registry::new();
    let metrics = WorkerMetrics::register(&registry).unwrap();
    let mut r = result(None, Verdict::Ok);
    r.stage_ms.insert(COMPILE_SLOT_WAIT_STAGE.into(), 2500.0);
    metrics.verdict_stored(Backend::Cuda, &r, Duration::from_secs(9));
    // A verdict whose CPU stage took no slot (a cache hit, a CPU worker) observes nothing.
    metrics.verdict_stored(
        Backend::Triton,
        &result(None, Verdict::Ok),
        Duration::from_secs(1),
    );
    let t = text(&registry);
    for line in [
        "# TYPE crucible_compile_slot_wait_seconds histogram",
        "crucible_compile_slot_wait_seconds_count 1",
        "crucible_compile_slot_wait_seconds_sum 2.5",
        r#"crucible_compile_slot_wait_seconds_bucket{le="1"} 0"#,
        r#"crucible_compile_slot_wait_seconds_bucket{le="5"} 1"#,
        r#"crucible_evaluation_stage_seconds_count{stage="compile_slot_wait"} 1"#,
    ] {
        assert!(t.contains(line), "missing {line:?} in\n{t}");
    }
}

#[test]
fn registering_twice_in_one_registry_fails() {
    let registry = Registry::new();
    WorkerMetrics::register(&registry).unwrap();
    assert!(WorkerMetrics::register(&registry).is_err());
}

#[test]
fn stage_labels_are_plain_names_and_bounded() {
    let mut seen = BTreeSet::new();
    assert_eq!(stage_label("load_reference", &mut seen), "load_reference");
    assert_eq!(stage_label("Setup", &mut seen), OTHER_STAGE);
    assert_eq!(stage_label("a b", &mut seen), OTHER_STAGE);
    assert_eq!(stage_label("", &mut seen), OTHER_STAGE);
    assert_eq!(
        stage_label(&"x".repeat(MAX_STAGE_CHARS + 1), &mut seen),
        OTHER_STAGE
    );
    for i in 1..MAX_STAGE_LABELS {
        let name = format!("s{i}");
        assert_eq!(stage_label(&name, &mut seen), name);
    }
    assert_eq!(seen.len(), MAX_STAGE_LABELS);
    assert_eq!(stage_label("one_too_many", &mut seen), OTHER_STAGE);
    assert_eq!(
        stage_label("load_reference", &mut seen),
        "load_reference",
        "known names stay"
    );
}
