//! Rollout batches' validation and the step from finished tasks to scored rollouts.
use super::*;
use crate::reward::parse_completion;
use crucible_shared::request::Priority;
use crucible_shared::task::{DeviceInfo, DeviceKind, Verdict, VerdictCode};
use crucible_shared::task::{EvalResult, TaskStatus, TaskView};

fn record(id: &str, task: Option<&str>, completion: &str) -> RolloutRecord {
    let facts = parse_completion(completion).facts();
    RolloutRecord {
        id: id.into(),
        task_id: task.map(TaskId::from),
        problem: Some(ProblemRef { level: 1, id: 19 }),
        problem_hash: "sha256:00".into(),
        turn: 0,
        profile: RewardProfile::Kevin,
        weights: RewardProfile::Kevin.weights(),
        facts,
        decoy_reward: DecoyReward::Zero,
    }
}

fn view(id: &str, status: TaskStatus, speedup: Option<f64>) -> TaskView {
    let mut result = EvalResult::failed_before_trials(
        VerdictCode::Correctness,
        "",
        true,
        5,
        DeviceInfo {
            kind: DeviceKind::Cpu,
            name: "cpu".into(),
            class: None,
        },
    );
    result.trials_passed = 5;
    result.correct = true;
    result.error_code = None;
    result.verdict = Verdict::Ok;
    result.speedup = speedup;
    TaskView {
        task_id: TaskId::from(id),
        status,
        result: (status == TaskStatus::Done).then_some(result),
        error: (status == TaskStatus::Failed).then(|| "worker lost".to_owned()),
        attempts: 1,
        worker_id: None,
        priority: Priority::Normal,
        device_class: None,
        batch_id: None,
        submitted_at: chrono::Utc::now(),
        started_at: None,
        finished_at: None,
        cached: false,
    }
}

const TAGGED: &str = "<KERNEL>\n```python\nclass ModelNew: pass\n```";

#[test]
fn shared_tasks_yield_every_rollout_and_the_no_kernel_ones_come_first() {
    let records = vec![
        record("a", Some("t1"), TAGGED),
        record("b", Some("t1"), TAGGED),
        record("c", None, "no code"),
        record("d", Some("t2"), TAGGED),
    ];
    let page = rollout_results(
        &records,
        true,
        &[(
            TaskId::from("t1"),
            Some(view("t1", TaskStatus::Done, Some(2.0))),
        )],
    );
    let ids: Vec<&str> = page.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["c", "a", "b"]);
    assert_eq!(page[0].status, RolloutStatus::NoKernel);
    assert_eq!(page[0].reward, Some(0.0));
    assert!(page[0].feedback.contains("format error"));
    assert_eq!(page[1].status, RolloutStatus::Done);
    assert!((page[1].reward.unwrap() - 2.3).abs() < 1e-9);
    let later = rollout_results(&records, false, &[(TaskId::from("t2"), None)]);
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].status, RolloutStatus::Expired);
    assert_eq!(later[0].reward, None);
}

#[test]
fn the_cursor_counts_the_no_kernel_rollouts_as_one_position() {
    assert_eq!(page_start(true, 0), (true, 0));
    assert_eq!(page_start(true, 1), (false, 0));
    assert_eq!(page_start(true, 5), (false, 4));
    assert_eq!(page_start(false, 0), (false, 0));
    assert_eq!(page_start(false, 5), (false, 5));
}

#[test]
fn a_service_failure_carries_no_reward() {
    let records = vec![record("a", Some("t1"), TAGGED)];
    let page = rollout_results(
        &records,
        false,
        &[(
            TaskId::from("t1"),
            Some(view("t1", TaskStatus::Failed, None)),
        )],
    );
    assert_eq!(page[0].status, RolloutStatus::Failed);
    assert_eq!(page[0].reward, None);
    assert_eq!(page[0].error.as_deref(), Some("worker lost"));
}

#[test]
fn a_record_stored_before_the_decoy_switch_keeps_the_old_formula() {
    let mut stored = serde_json::to_value(record("r1", Some("t1"), TAGGED)).unwrap();
    stored.as_object_mut().unwrap().remove("decoy_reward");
    let old: RolloutRecord = serde_json::from_value(stored).unwrap();
    assert_eq!(old.decoy_reward, DecoyReward::Profile);
    let rollout: Rollout =
        serde_json::from_str(r#"{"id":"a","reference_code":"x","completion":"y"}"#).unwrap();
    assert_eq!(
        rollout.decoy_reward,
        DecoyReward::Zero,
        "new rollouts: zero"
    );
}

#[test]
fn batches_are_validated_per_rollout() {
    let rollout = |id: &str| Rollout {
        id: id.into(),
        problem: Some(ProblemRef { level: 1, id: 1 }),
        reference_code: None,
        completion: TAGGED.into(),
        backend: Backend::Triton,
        turn: 0,
        profile: RewardProfile::KernelRl,
        weights: None,
        decoy_reward: DecoyReward::Zero,
    };
    let mut batch = RolloutBatchRequest {
        rollouts: vec![rollout("a"), rollout("b")],
        eval: RolloutEvalSettings::default(),
        idempotency_key: None,
    };
    assert!(batch.validate().is_ok());
    batch.rollouts[1].id = "a".into();
    assert_eq!(
        batch.validate().unwrap_err().field.as_deref(),
        Some("rollouts[1].id")
    );
    batch.rollouts[1].id = "b".into();
    batch.rollouts[1].reference_code = Some("x".into());
    assert_eq!(
        batch.validate().unwrap_err().field.as_deref(),
        Some("rollouts[1].problem")
    );
    batch.rollouts[1].reference_code = None;
    batch.rollouts[0].weights = Some(WeightsOverride {
        speed: Some(f64::NAN),
        ..WeightsOverride::default()
    });
    assert_eq!(
        batch.validate().unwrap_err().field.as_deref(),
        Some("rollouts[0].weights.speed")
    );
}

/// A NUL, a newline or any other control character in an idempotency key is refused, by
/// `/evaluate` and `/rollouts` alike (one check), and the schema says so.
#[test]
fn idempotency_keys_refuse_control_characters() {
    use crucible_shared::{EvaluateRequest, MAX_IDEMPOTENCY_KEY_BYTES};
    let valid = || EvaluateRequest::new("class Model: pass", "class ModelNew: pass");
    let rollouts = |key: &str| RolloutBatchRequest {
        rollouts: vec![
            serde_json::from_value(
                serde_json::json!({"id": "a", "reference_code": "x", "completion": "c"}),
            )
            .unwrap(),
        ],
        eval: RolloutEvalSettings::default(),
        idempotency_key: Some(key.into()),
    };
    for bad in ["a\0b", "line\nbreak", "tab\t", "\u{7f}", "\u{85}"] {
        let mut req = valid();
        req.idempotency_key = Some(bad.into());
        for err in [
            req.validate().unwrap_err(),
            rollouts(bad).validate().unwrap_err(),
        ] {
            assert_eq!(err.field.as_deref(), Some("idempotency_key"), "{err}");
            assert!(err.message.contains("control characters"), "{err}");
            assert_eq!(err.http_status(), 422);
        }
    }
    let mut req = valid();
    req.idempotency_key = Some("run-7/step 3:é".into());
    assert!(req.validate().is_ok());
    assert!(rollouts("run-7/step 3:é").validate().is_ok());
    let schema = serde_json::to_value(crucible_shared::bounds::idempotency_key_schema()).unwrap();
    assert_eq!(
        schema["pattern"],
        crucible_shared::bounds::IDEMPOTENCY_KEY_PATTERN
    );
    assert_eq!(schema["minLength"], 1);
    assert_eq!(schema["maxLength"], MAX_IDEMPOTENCY_KEY_BYTES);
}
