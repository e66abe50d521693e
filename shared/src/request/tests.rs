//! `EvaluateRequest`'s defaults, validation and result cache key.
use super::*;
use crate::bounds::{CORRECT_TRIALS, MAX_SPEEDUP};

fn valid() -> EvaluateRequest {
    EvaluateRequest::new("class Model: pass", "class ModelNew: pass")
}

#[test]
fn defaults_match_the_contract() {
    let req: EvaluateRequest =
        serde_json::from_str(r#"{"reference_code":"a","kernel_code":"b"}"#).unwrap();
    assert_eq!(req.backend, Backend::Triton);
    assert_eq!(req.num_correct_trials, 5);
    assert_eq!(req.num_perf_trials, 100);
    assert!(req.measure_performance);
    assert_eq!(req.atol, 1e-2);
    assert_eq!(req.rtol, 1e-2);
    assert_eq!(req.timeout_s, 300);
    assert_eq!(req.priority, Priority::Normal);
    assert!(req.validate().is_ok());
}

#[test]
fn unknown_backend_is_rejected_by_serde() {
    let err = serde_json::from_str::<EvaluateRequest>(
        r#"{"reference_code":"a","kernel_code":"b","backend":"opencl"}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("opencl"), "{err}");
}

#[test]
fn each_bound_names_its_field() {
    type Mutation = Box<dyn Fn(&mut EvaluateRequest)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (Box::new(|r| r.kernel_code = "  ".into()), "kernel_code"),
        (
            Box::new(|r| r.reference_code = String::new()),
            "reference_code",
        ),
        (
            Box::new(|r| r.kernel_code = "x".repeat(MAX_CODE_BYTES + 1)),
            "kernel_code",
        ),
        (Box::new(|r| r.num_correct_trials = 0), "num_correct_trials"),
        (
            Box::new(|r| r.num_correct_trials = 21),
            "num_correct_trials",
        ),
        (Box::new(|r| r.num_perf_trials = 1001), "num_perf_trials"),
        (Box::new(|r| r.timeout_s = 9), "timeout_s"),
        (Box::new(|r| r.timeout_s = 3601), "timeout_s"),
        (Box::new(|r| r.atol = f64::NAN), "atol"),
        (Box::new(|r| r.rtol = -1.0), "rtol"),
        (
            Box::new(|r| r.idempotency_key = Some(String::new())),
            "idempotency_key",
        ),
    ];
    for (mutate, field) in cases {
        let mut req = valid();
        mutate(&mut req);
        let err = req.validate().unwrap_err();
        assert_eq!(err.field.as_deref(), Some(field), "{err}");
        assert_eq!(err.http_status(), 422);
    }
}

#[test]
fn measurement_options_default_to_the_anchors_and_do_bench_needs_fixed_timing() {
    let parsed: EvaluateRequest =
        serde_json::from_value(serde_json::json!({"reference_code": "r", "kernel_code": "k"}))
            .unwrap();
    assert_eq!(parsed, EvaluateRequest::new("r", "k"));
    let wire = serde_json::to_value(&parsed).unwrap();
    for key in ["precision", "timing_method", "reference_backend"] {
        assert!(wire.get(key).is_none(), "a default {key} is not written");
    }
    let mut r = valid();
    r.timing_method = TimingMethod::DoBench;
    r.validate().unwrap();
    r.timing = TimingRequest::adaptive();
    let err = r.validate().unwrap_err();
    assert_eq!(err.field.as_deref(), Some("timing_method"), "{err:?}");
}

#[test]
fn cache_key_covers_what_decides_the_verdict_and_nothing_else() {
    type Mutation = Box<dyn Fn(&mut EvaluateRequest)>;
    let base = valid().result_cache_key();
    assert_eq!(base.len(), 64);
    assert!(base.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(valid().result_cache_key(), base, "the key is deterministic");

    let included: Vec<(Mutation, &str)> = vec![
        (Box::new(|r| r.reference_code.push(' ')), "reference_code"),
        (Box::new(|r| r.kernel_code.push(' ')), "kernel_code"),
        (Box::new(|r| r.backend = Backend::Cuda), "backend"),
        (Box::new(|r| r.num_correct_trials = 6), "num_correct_trials"),
        (Box::new(|r| r.num_perf_trials = 101), "num_perf_trials"),
        (
            Box::new(|r| r.measure_performance = false),
            "measure_performance",
        ),
        (Box::new(|r| r.atol = 1e-3), "atol"),
        (Box::new(|r| r.rtol = 1e-3), "rtol"),
        (Box::new(|r| r.timeout_s = 301), "timeout_s"),
        (Box::new(|r| r.seed = Some(7)), "seed"),
        (Box::new(|r| r.timing = TimingRequest::adaptive()), "timing"),
        (Box::new(|r| r.precision = Precision::Bf16), "precision"),
        (
            Box::new(|r| r.timing_method = TimingMethod::HostTime),
            "timing_method",
        ),
        (
            Box::new(|r| r.reference_backend = ReferenceBackend::Compile),
            "reference_backend",
        ),
        (
            Box::new(|r| r.device_class = Some(DeviceClass::cpu())),
            "device_class",
        ),
        (
            Box::new(|r| {
                r.screening
                    .insert("no-kernel".into(), ScreeningAction::Reject);
            }),
            "screening",
        ),
    ];
    for (mutate, field) in included {
        let mut req = valid();
        mutate(&mut req);
        assert_ne!(req.result_cache_key(), base, "{field} must change the key");
    }
    // Within adaptive timing, its target and budget count too.
    let mut adaptive = valid();
    adaptive.timing = TimingRequest::adaptive();
    let mut tighter = adaptive.clone();
    tighter.timing.target_rel_error = 1e-4;
    let mut longer = adaptive.clone();
    longer.timing.max_time_ms = 9000;
    assert_ne!(adaptive.result_cache_key(), tighter.result_cache_key());
    assert_ne!(adaptive.result_cache_key(), longer.result_cache_key());
    let mut seeded = valid();
    seeded.seed = Some(7);
    let mut other_seed = valid();
    other_seed.seed = Some(8);
    assert_ne!(seeded.result_cache_key(), other_seed.result_cache_key());
    let class = |name: &str| {
        let mut r = valid();
        r.device_class = Some(DeviceClass::parse(name).unwrap());
        r.result_cache_key()
    };
    assert_ne!(class("h100"), class("a100"));

    let excluded: Vec<(Mutation, &str)> = vec![
        (Box::new(|r| r.priority = Priority::High), "priority"),
        (
            Box::new(|r| r.idempotency_key = Some("k".into())),
            "idempotency_key",
        ),
        (Box::new(|r| r.force_refresh = true), "force_refresh"),
        // Unused in fixed mode: the same measurement.
        (
            Box::new(|r| r.timing.max_time_ms = 7),
            "fixed timing's budget",
        ),
    ];
    for (mutate, field) in excluded {
        let mut req = valid();
        mutate(&mut req);
        assert_eq!(
            req.result_cache_key(),
            base,
            "{field} must not change the key"
        );
    }

    // Moving bytes from one code field to the other is a different request.
    let mut a = valid();
    a.reference_code = "ab".into();
    a.kernel_code = "c".into();
    let mut b = valid();
    b.reference_code = "a".into();
    b.kernel_code = "bc".into();
    assert_ne!(a.result_cache_key(), b.result_cache_key());
}

#[test]
fn unknown_fields_are_refused_by_name() {
    let err = serde_json::from_str::<EvaluateRequest>(
        r#"{"reference_code":"a","kernel_code":"b","num_perf_trial":3}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("num_perf_trial"), "{err}");
    let err = serde_json::from_str::<BatchRequest>(
        r#"{"tasks":[{"reference_code":"a","kernel_code":"b","problem":{"level":1,"id":2,"lvl":3}}]}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("lvl"), "{err}");
    let err =
        serde_json::from_str::<BatchRequest>(r#"{"tasks":[],"priority":"high"}"#).unwrap_err();
    assert!(err.to_string().contains("priority"), "{err}");
}

#[test]
fn the_schema_shows_the_bounds_validation_applies() {
    let schema = serde_json::to_value(CORRECT_TRIALS.schema(true, "d")).unwrap();
    assert_eq!(schema["minimum"], 1.0);
    assert_eq!(schema["maximum"], 20.0);
    assert_eq!(schema["default"], 5);
    let mut req = valid();
    req.num_correct_trials = CORRECT_TRIALS.max;
    assert!(req.validate().is_ok());
    req.num_correct_trials = CORRECT_TRIALS.max + 1;
    assert!(req.validate().is_err());
    req = valid();
    req.max_speedup = MAX_SPEEDUP.min - 0.5;
    assert_eq!(
        req.validate().unwrap_err().message,
        "max_speedup: must be a finite number from 1 to 1e9"
    );
}

/// A request without a class hashes as it did before classes existed: the key of the default
/// request is pinned, so cached results of earlier versions still answer.
#[test]
fn requests_without_a_class_keep_their_keys() {
    assert_eq!(
        valid().result_cache_key(),
        "b52f3af1cbae24d405a13e3dc60cb10b1e8eb55a77c570ec840d7d36e3b5a079"
    );
}

#[test]
fn device_class_is_checked_and_optional() {
    let req: EvaluateRequest =
        serde_json::from_str(r#"{"reference_code":"a","kernel_code":"b","device_class":"h100"}"#)
            .unwrap();
    assert_eq!(
        req.device_class.as_ref().map(DeviceClass::as_str),
        Some("h100")
    );
    let err = serde_json::from_str::<EvaluateRequest>(
        r#"{"reference_code":"a","kernel_code":"b","device_class":"H100"}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("not a device class"), "{err}");
    // Left out of the wire form when absent, so older readers see the shape they know.
    assert!(
        !serde_json::to_string(&valid())
            .unwrap()
            .contains("device_class")
    );
}

#[test]
fn force_refresh_defaults_to_false() {
    let req: EvaluateRequest =
        serde_json::from_str(r#"{"reference_code":"a","kernel_code":"b"}"#).unwrap();
    assert!(!req.force_refresh);
}

#[test]
fn code_at_the_limit_is_accepted() {
    let mut req = valid();
    req.kernel_code = "x".repeat(MAX_CODE_BYTES);
    assert!(req.validate().is_ok());
}

#[test]
fn batch_errors_point_at_the_task() {
    let mut bad = valid();
    bad.num_perf_trials = 0;
    let batch = BatchRequest {
        tasks: vec![valid(), bad],
    };
    let err = batch.validate().unwrap_err();
    assert_eq!(err.field.as_deref(), Some("tasks[1].num_perf_trials"));
    assert!(BatchRequest { tasks: vec![] }.validate().is_err());
}

/// The cross-field rules on the cases the harness's spec check is tested on too
/// (tests/harness/cross_field_cases.json, read by tests/harness/check_spec.py): the rule is
/// validated here, and the harness, which keeps it for safety, agrees case for case.
#[test]
fn cross_field_rules_agree_with_the_harness_cases() {
    let cases: serde_json::Value = serde_json::from_str(include_str!(
        "../../../tests/harness/cross_field_cases.json"
    ))
    .unwrap();
    let cases = cases["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let mut r = valid();
        r.timing_method = serde_json::from_value(case["timing_method"].clone()).unwrap();
        r.timing.mode = serde_json::from_value(case["timing_mode"].clone()).unwrap();
        match (r.validate(), case["accepted"].as_bool().unwrap()) {
            (Ok(()), true) => {}
            (Err(e), false) => assert_eq!(e.field.as_deref(), Some("timing_method"), "{case}"),
            (answer, _) => panic!("{case}: {answer:?}"),
        }
    }
}

/// Every place that takes code refuses the same sources: blank, over the bound, a NUL byte.
#[test]
fn code_is_checked_in_one_place() {
    assert_eq!(check_code("class ModelNew: pass"), Ok(()));
    assert_eq!(check_code(" \n\t"), Err(CodeError::Empty));
    let big = "x".repeat(MAX_CODE_BYTES + 1);
    assert_eq!(
        check_code(&big),
        Err(CodeError::TooLarge(MAX_CODE_BYTES + 1))
    );
    assert_eq!(check_code("a\0b"), Err(CodeError::Nul));
    assert_eq!(CodeError::Nul.to_string(), "must not contain NUL bytes");
}
