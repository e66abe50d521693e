//! Recent activity: every task that becomes terminal is counted in the windows by status,
//! verdict and error code; failures (failing verdicts and `failed` tasks) are listed newest
//! first with their tenant and a clipped message; the list and (in Redis) the buckets stay
//! bounded; cached answers are not counted.

use crate::common::*;
use crucible_shared::{BrokerConfig, TaskStatus, Verdict, VerdictCode, clip};
use crucible_task_manager::activity::{FAILURES_KEPT, MESSAGE_BYTES, WINDOWS_MIN};
use crucible_task_manager::{AckOutcome, CancelOutcome};

contract!(
    finished_tasks_are_counted_by_status_and_verdict,
    failures_are_listed_newest_first_with_a_clipped_message,
    only_the_latest_failures_are_kept,
    old_minutes_are_dropped_as_new_ones_are_written,
);

fn single_attempt() -> BrokerConfig {
    BrokerConfig {
        max_attempts: 1,
        ..config()
    }
}

fn passing() -> crucible_shared::EvalResult {
    let mut r = verdict("fine");
    r.error_code = None;
    r.error_message = None;
    r.correct = true;
    r.verdict = Verdict::Ok;
    r
}

fn wrong(message: &str) -> crucible_shared::EvalResult {
    let mut r = verdict(message);
    r.verdict = Verdict::Incorrect;
    r
}

/// Submits `tag`, claims it and releases it: with one attempt allowed it ends `failed`.
async fn fail(env: &Env, tag: &str, reason: &str) -> crucible_shared::TaskId {
    let sub = env.broker.submit(&admin(), spec(tag)).await.unwrap();
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease.task_id, sub.task_id);
    assert_eq!(
        env.broker.release(&lease, reason).await.unwrap(),
        AckOutcome::Accepted
    );
    assert_eq!(env.view(&sub.task_id).await.status, TaskStatus::Failed);
    sub.task_id
}

async fn finished_tasks_are_counted_by_status_and_verdict(backend: Backend) {
    let env = Env::start(backend, single_attempt()).await;
    let empty = env.broker.activity().await.unwrap();
    assert_eq!(
        empty.windows.iter().map(|w| w.minutes).collect::<Vec<_>>(),
        WINDOWS_MIN
    );
    assert!(
        empty
            .windows
            .iter()
            .all(|w| w.finished == 0 && w.per_minute == 0.0)
    );
    assert!(empty.failures.is_empty());

    let started = chrono::Utc::now();
    evaluate(&env, spec("a"), passing()).await;
    evaluate(&env, spec("b"), passing()).await;
    evaluate(&env, spec("c"), wrong("off by one")).await;
    fail(&env, "d", "worker lost").await;
    let queued = env.broker.submit(&admin(), spec("e")).await.unwrap();
    assert!(matches!(
        env.broker.cancel(&queued.task_id).await.unwrap(),
        CancelOutcome::Cancelled { .. }
    ));
    // An answer from the result cache never ran: not counted.
    assert!(env.broker.submit(&admin(), spec("a")).await.unwrap().cached);

    let report = env.broker.activity().await.unwrap();
    for w in &report.windows {
        assert_eq!(
            (w.finished, w.done, w.failed, w.cancelled),
            (5, 3, 1, 1),
            "{w:?}"
        );
        assert_eq!(
            (w.verdicts.ok, w.verdicts.incorrect, w.verdicts.error),
            (2, 1, 0)
        );
        assert_eq!(
            w.error_codes.get("CORRECTNESS"),
            Some(&1),
            "{:?}",
            w.error_codes
        );
        assert_eq!(w.error_codes.len(), 1);
        assert!(w.per_minute > 0.0);
        let span = chrono::Duration::minutes(i64::from(w.minutes));
        assert!(w.since <= started && w.since > started - span, "{w:?}");
    }
}

async fn failures_are_listed_newest_first_with_a_clipped_message(backend: Backend) {
    let env = Env::start(backend, single_attempt()).await;
    // Multi-byte characters across the cut: both brokers cut before the character.
    let long = format!("x{}", "é".repeat(MESSAGE_BYTES));
    let wrong_id = evaluate(&env, spec("a"), wrong(&long)).await;
    evaluate(&env, spec("b"), passing()).await;
    let failed_id = fail(&env, "c", "worker lost twice").await;
    let queued = env.broker.submit(&admin(), spec("d")).await.unwrap();
    env.broker.cancel(&queued.task_id).await.unwrap();

    let failures = env.broker.activity().await.unwrap().failures;
    assert_eq!(failures.len(), 2, "{failures:?}");
    let (newest, oldest) = (&failures[0], &failures[1]);
    assert_eq!(newest.failure.task_id, failed_id);
    assert_eq!(newest.failure.status, TaskStatus::Failed);
    assert_eq!(newest.failure.verdict, None);
    assert_eq!(newest.failure.message.as_deref(), Some("worker lost twice"));
    assert_eq!(oldest.failure.task_id, wrong_id);
    assert_eq!(oldest.failure.status, TaskStatus::Done);
    assert_eq!(oldest.failure.verdict, Some(Verdict::Incorrect));
    assert_eq!(oldest.failure.error_code, Some(VerdictCode::Correctness));
    let message = oldest.failure.message.clone().unwrap();
    assert_eq!(message, clip(&long, MESSAGE_BYTES));
    assert!(message.len() <= MESSAGE_BYTES + '…'.len_utf8());
    for f in &failures {
        assert_eq!(f.tenant, admin());
        assert_eq!(
            f.failure.tenant, None,
            "the API names tenants, not the broker"
        );
        let view = env.view(&f.failure.task_id).await;
        assert_eq!(
            Some(f.failure.finished_at.timestamp_millis()),
            view.finished_at.map(|t| t.timestamp_millis())
        );
    }
}

async fn only_the_latest_failures_are_kept(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let mut ids = Vec::new();
    for i in 0..FAILURES_KEPT + 3 {
        ids.push(evaluate(&env, spec(&format!("t{i}")), wrong(&format!("wrong {i}"))).await);
    }
    let report = env.broker.activity().await.unwrap();
    let listed: Vec<_> = report
        .failures
        .iter()
        .map(|f| f.failure.task_id.clone())
        .collect();
    ids.reverse();
    ids.truncate(FAILURES_KEPT);
    assert_eq!(listed, ids);
    assert_eq!(
        report.windows[1].verdicts.incorrect,
        FAILURES_KEPT as u64 + 3
    );
}

/// Redis only (the memory broker's trimming is tested in `memory/activity.rs`): a minute that
/// falls out of the hour is deleted by the next task to finish; the newer ones stay counted.
async fn old_minutes_are_dropped_as_new_ones_are_written(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let Some(mut raw) = env.raw().await else {
        return;
    };
    let stats = format!("{}:stats", env.cfg.key_prefix);
    let (secs, _): (i64, i64) = ::redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let minute = secs / 60;
    let old = r#"{"done":1,"failed":0,"cancelled":0,"verdicts":{"ok":1},"errors":{}}"#;
    let _: () = ::redis::cmd("HSET")
        .arg(&stats)
        .arg("activity:head")
        .arg(minute - 1)
        .arg(format!("activity:{}", minute - 60))
        .arg(old)
        .arg(format!("activity:{}", minute - 59))
        .arg(old)
        .query_async(&mut raw)
        .await
        .unwrap();
    evaluate(&env, spec("a"), passing()).await;

    let head: i64 = ::redis::cmd("HGET")
        .arg(&stats)
        .arg("activity:head")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(head >= minute, "head {head}, minute {minute}");
    for m in [minute - 60, minute - 59] {
        let kept: bool = ::redis::cmd("HEXISTS")
            .arg(&stats)
            .arg(format!("activity:{m}"))
            .query_async(&mut raw)
            .await
            .unwrap();
        // The hour ending with the head's minute is kept, nothing older.
        assert_eq!(kept, m > head - 60, "minute {m}, head {head}");
    }
}
