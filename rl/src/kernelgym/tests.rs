use super::*;
use chrono::{TimeZone, Utc};
use crucible_shared::device::{DeviceInfo, DeviceKind};
use crucible_shared::ids::{TaskId, WorkerId};
use crucible_shared::task::RuntimeStats;
use serde_json::json;

fn request(extra: serde_json::Value) -> Result<KernelGymRequest, serde_json::Error> {
    let mut body = json!({
        "task_id": "rl_batch_001",
        "reference_code": "class Model: pass",
        "kernel_code": "class ModelNew: pass",
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    serde_json::from_value(body)
}

fn refused(extra: serde_json::Value) -> String {
    let e = request(extra).unwrap().to_evaluate_request().unwrap_err();
    e.field.expect("names its field")
}

fn cpu() -> DeviceInfo {
    DeviceInfo {
        kind: DeviceKind::Cpu,
        name: "cpu".into(),
        class: None,
    }
}

fn view(status: TaskStatus, result: Option<EvalResult>) -> TaskView {
    let at = Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap();
    TaskView {
        task_id: TaskId("t_1".into()),
        status,
        result,
        error: (status == TaskStatus::Failed).then(|| "worker lost 3 times".into()),
        attempts: 1,
        worker_id: Some(WorkerId("w_gpu0".into())),
        priority: Priority::Normal,
        device_class: None,
        batch_id: None,
        submitted_at: at,
        started_at: Some(at + chrono::Duration::seconds(1)),
        finished_at: status
            .is_terminal()
            .then(|| at + chrono::Duration::milliseconds(3500)),
        cached: false,
    }
}

fn correct(speedup: f64) -> EvalResult {
    let mut r = EvalResult::failed_before_trials(VerdictCode::Correctness, "", true, 5, cpu());
    r.correct = true;
    r.error_code = None;
    r.error_message = None;
    r.verdict = Verdict::Ok;
    r.trials_passed = 5;
    r.runtime_ms = Some(RuntimeStats::new(1.0, 1.0, 0.0, 1.0, 1.0));
    r.ref_runtime_ms = Some(RuntimeStats::new(speedup, speedup, 0.0, speedup, speedup));
    r.speedup = Some(speedup);
    r.custom_kernel_count = Some(2);
    r.total_kernel_count = Some(3);
    r
}

#[test]
fn dr_kernels_payload_is_our_request_with_its_settings() {
    // The payload Dr.Kernel's KernelRewardClient posts (drkernel/kernel/rewards/reward_client.py).
    let r = request(json!({
        "backend": "cuda", "num_correct_trials": 3, "num_perf_trials": 50, "timeout": 120,
        "priority": "high", "entry_point": "Model", "is_valid": false, "verbose_errors": true,
        "enable_profiling": true, "detect_decoy_kernel": true, "reference_backend": null,
        "use_reference_cache": true, "uuid": "abc",
    }))
    .unwrap()
    .to_evaluate_request()
    .unwrap();
    assert_eq!(r.backend, Backend::Cuda);
    assert_eq!(
        (r.num_correct_trials, r.num_perf_trials, r.timeout_s),
        (3, 50, 120)
    );
    assert_eq!(r.priority, Priority::High);
    assert_eq!(r.reference_backend, ReferenceBackend::Eager);
    assert!(r.measure_performance && !r.force_refresh);
    assert!(r.idempotency_key.is_none());
    r.validate().unwrap();
    let compiled = request(
        json!({"reference_backend": "torch_compile", "run_performance": false,
                                  "measure_performance": true}),
    )
    .unwrap()
    .to_evaluate_request()
    .unwrap();
    assert_eq!(compiled.reference_backend, ReferenceBackend::Compile);
    assert!(
        !compiled.measure_performance,
        "run_performance overrides measure_performance"
    );
}

#[test]
fn what_crucible_cannot_honour_is_refused_by_name() {
    // Values KernelGYM allows and Crucible does not serve are refused by their types.
    for (field, value) in [
        ("backend", "tilelang"),
        ("workflow", "kernel_simple"),
        ("toolkit", "other"),
        ("entry_point", "Net"),
        ("reference_backend", "tensorrt"),
    ] {
        let e = request(json!({ field: value })).unwrap_err().to_string();
        assert!(e.contains("unknown variant"), "{field}: {e}");
    }
    assert_eq!(refused(json!({"cases": []})), "cases");
    assert_eq!(
        refused(json!({"cases_code": "def get_cases(): ..."})),
        "cases_code"
    );
    assert_eq!(
        refused(json!({"run_correctness": false})),
        "run_correctness"
    );
    assert_eq!(refused(json!({"num_warmup": 10})), "num_warmup");
    assert_eq!(refused(json!({"resources": {"gpus": 2}})), "resources.gpus");
    assert_eq!(refused(json!({"reference_code": "  "})), "reference_code");
    assert_eq!(refused(json!({"task_id": ""})), "task_id");
    assert_eq!(refused(json!({"task_id": "x".repeat(101)})), "task_id");
    assert_eq!(refused(json!({"task_id": "a\nb"})), "task_id");
    // Accepted as they are: KernelGYM's defaults.
    request(
        json!({"num_warmup": 3, "resources": {"gpus": 1}, "workflow": "kernelbench",
                   "run_correctness": true}),
    )
    .unwrap()
    .to_evaluate_request()
    .unwrap();
    let unknown = request(json!({"temperature": 1})).unwrap_err();
    assert!(
        unknown.to_string().contains("unknown field `temperature`"),
        "{unknown}"
    );
}

#[test]
fn a_correct_result_reads_as_kernelgyms() {
    let r = result_of("rl_batch_001", &view(TaskStatus::Done, Some(correct(2.5))));
    assert_eq!(
        (r.task_id.as_str(), r.status.as_str()),
        ("rl_batch_001", "completed")
    );
    assert_eq!(
        (r.compiled, r.correctness, r.decoy_kernel),
        (Some(true), Some(true), Some(false))
    );
    assert_eq!(
        (r.reference_runtime, r.kernel_runtime, r.speedup),
        (Some(2.5), Some(1.0), Some(2.5))
    );
    assert_eq!(r.metadata["num_custom_kernels"], 2);
    assert_eq!(r.metadata["num_total_kernels"], 3);
    assert_eq!(r.metadata["verdict"], "ok");
    assert_eq!(r.metadata["crucible_task_id"], "t_1");
    assert_eq!((r.error_code, r.error_message), (None, None));
    assert_eq!(r.processing_time, Some(2.5));
    assert_eq!(r.submitted_at.as_deref(), Some("2026-12-01T10:00:00+00:00"));
}

#[test]
fn failures_hacks_and_timeouts_keep_kernelgyms_meaning() {
    let compile = EvalResult::failed_before_trials(
        VerdictCode::Compilation,
        "cuda.cu(3): error: x",
        false,
        5,
        cpu(),
    );
    let r = result_of("a", &view(TaskStatus::Done, Some(compile)));
    assert_eq!(
        (r.status.as_str(), r.compiled, r.correctness),
        ("completed", Some(false), Some(false))
    );
    assert_eq!(r.error_code.as_deref(), Some("COMPILATION_ERROR"));
    assert_eq!(r.error_message.as_deref(), Some("cuda.cu(3): error: x"));

    let mut hack = correct(40.0);
    hack.correct = false;
    hack.verdict = Verdict::Hack;
    hack.error_code = Some(VerdictCode::Integrity);
    let r = result_of("a", &view(TaskStatus::Done, Some(hack)));
    assert_eq!((r.correctness, r.decoy_kernel), (Some(false), Some(true)));
    assert_eq!(r.error_code.as_deref(), Some("VALIDATION_ERROR"));

    let slow = EvalResult::failed_before_trials(VerdictCode::Timeout, "ran out", true, 5, cpu());
    assert_eq!(
        result_of("a", &view(TaskStatus::Done, Some(slow))).status,
        "timeout"
    );

    let lost = result_of("a", &view(TaskStatus::Failed, None));
    assert_eq!(
        (lost.status.as_str(), lost.error_code.as_deref()),
        ("failed", Some("SYSTEM_ERROR"))
    );
    assert_eq!(lost.error_message.as_deref(), Some("worker lost 3 times"));
    assert_eq!(lost.compiled, None);
    assert_eq!(
        result_of("a", &view(TaskStatus::Cancelled, None)).status,
        "failed"
    );

    let queued = status_of("a", &view(TaskStatus::Queued, None));
    assert_eq!(
        (queued.status.as_str(), queued.error_message),
        ("pending", None)
    );
    let running = status_of("a", &view(TaskStatus::Running, None));
    assert_eq!(running.status, "processing");
    assert_eq!(running.assigned_device.as_deref(), Some("w_gpu0"));
    assert_eq!(
        status_of("a", &view(TaskStatus::Failed, None))
            .error_message
            .as_deref(),
        Some("worker lost 3 times")
    );
}
