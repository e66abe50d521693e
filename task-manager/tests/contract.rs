//! The broker contract: one suite, every test run against `MemoryBroker` (module `memory`) and
//! against `RedisBroker` on a real `redis-server` child process (module `redis`); the harness
//! is `common/mod.rs`, the tenant part of the contract `tenants.rs`. Most of it submits as the
//! built-in tenant, as a single-user deployment does.

mod common;

use common::*;

use chrono::Utc;
use crucible_shared::{
    BatchId, BrokerConfig, EvalResult, Priority, TaskId, TaskSpec, TaskStatus, WorkerId,
    WorkerState,
};
use crucible_task_manager::{
    AckOutcome, Broker, BrokerError, CancelOutcome, KvCounts, KvNamespace, LeaseState, RedisBroker,
};
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;

contract!(
    submit_then_get_task_and_spec,
    claim_leases_with_fresh_token,
    claim_returns_none_after_wait,
    claim_wakes_on_submit,
    renew_extends_and_reports_lost_and_cancelled,
    complete_is_fenced_by_token,
    stale_complete_after_reap_writes_nothing,
    reap_requeues_then_fails_after_max_attempts,
    release_requeues_then_fails_with_reason,
    high_before_normal_before_low,
    low_is_not_starved,
    fifo_within_priority,
    idempotency_key_returns_same_task,
    queue_cap_refuses_submissions,
    batch_status_counts_every_transition,
    cancel_in_every_state,
    finished_records_expire_after_result_ttl,
    finished_records_all_carry_a_ttl,
    queue_status_counts,
    worker_registry_is_shared_and_detects_lost_workers,
    wait_terminal_returns_on_finish_or_timeout,
    task_submitted_on_one_node_is_claimed_on_another,
    concurrent_claimers_claim_each_task_once,
    cache_hit_is_a_new_done_task_marked_cached,
    force_refresh_bypasses_cache_and_coalescing,
    a_different_request_or_scope_misses,
    identical_open_requests_share_one_task,
    failed_and_cancelled_tasks_are_not_cached,
    idempotency_key_takes_precedence_over_cache_and_coalescing,
    kv_put_then_get_and_overwrite,
    kv_values_expire_after_their_ttl,
    kv_namespaces_are_isolated,
    kv_lookups_are_counted_per_namespace,
    batch_finished_log_lists_each_task_once_in_finishing_order,
);

// ---------------------------------------------------------------------------------------------
// The contract
// ---------------------------------------------------------------------------------------------

async fn submit_then_get_task_and_spec(backend: Backend) {
    let env = Env::start(backend, config()).await;
    assert_eq!(
        env.broker.kind(),
        match backend {
            Backend::Memory => "memory",
            Backend::Redis => "redis",
        }
    );
    env.broker.ping().await.expect("ping");

    let s = spec_with("a", Priority::High, None);
    let before = Utc::now() - chrono::Duration::seconds(5);
    let sub = env
        .broker
        .submit(&admin(), s.clone())
        .await
        .expect("submit");
    assert_eq!(sub.status, TaskStatus::Queued);
    assert!(!sub.deduplicated);

    let view = env.view(&sub.task_id).await;
    assert_eq!(view.task_id, sub.task_id);
    assert_eq!(view.status, TaskStatus::Queued);
    assert_eq!(view.priority, Priority::High);
    assert_eq!(view.attempts, 0);
    assert_eq!(view.worker_id, None);
    assert_eq!(view.batch_id, None);
    assert_eq!((view.result, view.error), (None, None));
    assert_eq!((view.started_at, view.finished_at), (None, None));
    assert!(
        view.submitted_at >= before
            && view.submitted_at <= Utc::now() + chrono::Duration::seconds(5)
    );

    assert_eq!(env.broker.get_spec(&sub.task_id).await.unwrap(), Some(s));
    let unknown = TaskId::random();
    assert_eq!(env.broker.get_task(&unknown).await.unwrap(), None);
    assert_eq!(env.broker.get_spec(&unknown).await.unwrap(), None);
}

async fn claim_leases_with_fresh_token(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let a = env
        .broker
        .submit(&admin(), spec("a"))
        .await
        .unwrap()
        .task_id;
    let b = env
        .broker
        .submit(&admin(), spec("b"))
        .await
        .unwrap()
        .task_id;

    let w = worker(1);
    let first = claim_now(&env.broker, &w).await;
    let second = claim_now(&env.broker, &w).await;
    assert_eq!(
        (first.task_id.clone(), second.task_id.clone()),
        (a.clone(), b)
    );
    assert_ne!(first.token, second.token);
    assert_eq!((first.attempt, second.attempt), (1, 1));
    assert_eq!(first.worker_id, w);
    assert_eq!(first.spec, spec("a"));

    let view = env.view(&a).await;
    assert_eq!(view.status, TaskStatus::Running);
    assert_eq!(view.worker_id, Some(w));
    assert_eq!(view.attempts, 1);
    let started = view.started_at.expect("started_at is set");
    assert!(started >= view.submitted_at);
}

async fn claim_returns_none_after_wait(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let t0 = Instant::now();
    let got = env
        .broker
        .claim(&worker(1), Duration::from_millis(300))
        .await
        .unwrap();
    let waited = t0.elapsed();
    assert_eq!(got, None);
    assert!(
        waited >= Duration::from_millis(250),
        "returned after {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "returned after {waited:?}");
    assert_eq!(
        env.broker.claim(&worker(1), Duration::ZERO).await.unwrap(),
        None
    );
}

async fn claim_wakes_on_submit(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let w = worker(1);
    let mut claim = Box::pin(env.broker.claim(&w, Duration::from_secs(30)));
    env.block(&mut claim).await;

    let t0 = Instant::now();
    let id = env
        .broker
        .submit(&admin(), spec("a"))
        .await
        .unwrap()
        .task_id;
    let lease = tokio::time::timeout(Duration::from_secs(5), claim)
        .await
        .expect("claim woke up")
        .unwrap()
        .expect("claim got the task");
    assert_eq!(lease.task_id, id);
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "woke after {:?}",
        t0.elapsed()
    );
}

async fn renew_extends_and_reports_lost_and_cancelled(backend: Backend) {
    let cfg = BrokerConfig {
        lease_ttl: Duration::from_millis(1000),
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    let id = env
        .broker
        .submit(&admin(), spec("a"))
        .await
        .unwrap()
        .task_id;
    let lease = claim_now(&env.broker, &worker(1)).await;

    // Renewing every 400 ms keeps a 1 s lease alive well past its first expiry.
    for _ in 0..4 {
        assert_eq!(env.broker.renew(&lease).await.unwrap(), LeaseState::Held);
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert_eq!(env.broker.renew(&lease).await.unwrap(), LeaseState::Held);
    let reaped = env.broker.reap_expired().await.unwrap();
    assert_eq!((reaped.requeued, reaped.failed), (0, 0));
    assert_eq!(env.view(&id).await.status, TaskStatus::Running);

    assert_eq!(
        env.broker.renew(&stale(&lease)).await.unwrap(),
        LeaseState::Lost
    );

    env.broker.cancel(&id).await.unwrap();
    assert_eq!(
        env.broker.renew(&lease).await.unwrap(),
        LeaseState::Cancelled
    );

    // A finished task is no one's to renew.
    let id2 = env
        .broker
        .submit(&admin(), spec("b"))
        .await
        .unwrap()
        .task_id;
    let lease2 = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease2.task_id, id2);
    env.broker.complete(&lease2, verdict("ok")).await.unwrap();
    assert_eq!(env.broker.renew(&lease2).await.unwrap(), LeaseState::Lost);
}

async fn complete_is_fenced_by_token(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let id = env
        .broker
        .submit(&admin(), spec("a"))
        .await
        .unwrap()
        .task_id;
    let lease = claim_now(&env.broker, &worker(1)).await;

    assert_eq!(
        env.broker
            .complete(&stale(&lease), verdict("forged"))
            .await
            .unwrap(),
        AckOutcome::Stale
    );
    assert_eq!(env.view(&id).await.status, TaskStatus::Running);

    assert_eq!(
        env.broker.complete(&lease, verdict("first")).await.unwrap(),
        AckOutcome::Accepted
    );
    let view = env.view(&id).await;
    assert_eq!(view.status, TaskStatus::Done);
    assert_eq!(view.result, Some(verdict("first")));
    let finished = view.finished_at.expect("finished_at is set");
    assert!(finished >= view.started_at.unwrap());

    // Exactly one result: the same lease cannot complete twice, nor release afterwards.
    assert_eq!(
        env.broker
            .complete(&lease, verdict("second"))
            .await
            .unwrap(),
        AckOutcome::Stale
    );
    assert_eq!(
        env.broker.release(&lease, "late").await.unwrap(),
        AckOutcome::Stale
    );
    let view = env.view(&id).await;
    assert_eq!(view.result, Some(verdict("first")));
    assert_eq!(view.status, TaskStatus::Done);
}

async fn stale_complete_after_reap_writes_nothing(backend: Backend) {
    let cfg = BrokerConfig {
        lease_ttl: Duration::from_millis(300),
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    let id = env
        .broker
        .submit(&admin(), spec("a"))
        .await
        .unwrap()
        .task_id;
    let first = claim_now(&env.broker, &worker(1)).await;
    let r = reap_until(&env.broker, "the first lease to expire").await;
    assert_eq!((r.requeued, r.failed), (1, 0));

    let second = claim_now(&env.broker, &worker(2)).await;
    assert_eq!(second.task_id, id);
    assert_eq!(second.attempt, 2);

    assert_eq!(
        env.broker.complete(&first, verdict("old")).await.unwrap(),
        AckOutcome::Stale
    );
    assert_eq!(env.broker.renew(&first).await.unwrap(), LeaseState::Lost);
    let view = env.view(&id).await;
    assert_eq!(view.status, TaskStatus::Running);
    assert_eq!(view.result, None);
    assert_eq!(view.worker_id, Some(worker(2)));

    assert_eq!(
        env.broker.complete(&second, verdict("new")).await.unwrap(),
        AckOutcome::Accepted
    );
    assert_eq!(env.view(&id).await.result, Some(verdict("new")));
}

async fn reap_requeues_then_fails_after_max_attempts(backend: Backend) {
    let cfg = BrokerConfig {
        lease_ttl: Duration::from_millis(300),
        max_attempts: 2,
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    let id = env
        .broker
        .submit(&admin(), spec("a"))
        .await
        .unwrap()
        .task_id;
    assert_eq!(env.broker.reap_expired().await.unwrap().requeued, 0);

    let first = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(first.attempt, 1);
    let r = reap_until(&env.broker, "the first lease to expire").await;
    assert_eq!((r.requeued, r.failed), (1, 0));
    let view = env.view(&id).await;
    assert_eq!(view.status, TaskStatus::Queued);
    assert_eq!(view.worker_id, None);
    assert_eq!(view.attempts, 1);

    let second = claim_now(&env.broker, &worker(2)).await;
    assert_eq!((second.task_id.clone(), second.attempt), (id.clone(), 2));
    assert_ne!(second.token, first.token);
    let r = reap_until(&env.broker, "the second lease to expire").await;
    assert_eq!((r.requeued, r.failed), (0, 1));

    let view = env.view(&id).await;
    assert_eq!(view.status, TaskStatus::Failed);
    assert_eq!(view.attempts, 2);
    let error = view.error.expect("a failed task says why");
    assert!(error.contains("lease expired"), "{error}");
    assert!(view.finished_at.is_some());
    assert_eq!(
        env.broker.claim(&worker(3), Duration::ZERO).await.unwrap(),
        None
    );

    let q = env.broker.queue_status().await.unwrap();
    assert_eq!((q.requeued_total, q.failed_total, q.running), (1, 1, 0));
}

async fn release_requeues_then_fails_with_reason(backend: Backend) {
    let cfg = BrokerConfig {
        max_attempts: 2,
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    let id = env
        .broker
        .submit(&admin(), spec("a"))
        .await
        .unwrap()
        .task_id;

    let first = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(
        env.broker.release(&stale(&first), "forged").await.unwrap(),
        AckOutcome::Stale
    );
    assert_eq!(
        env.broker.release(&first, "gpu unhealthy").await.unwrap(),
        AckOutcome::Accepted
    );
    let view = env.view(&id).await;
    assert_eq!(view.status, TaskStatus::Queued);
    assert_eq!(view.worker_id, None);

    let second = claim_now(&env.broker, &worker(2)).await;
    assert_eq!(second.attempt, 2);
    assert_eq!(
        env.broker.release(&first, "late").await.unwrap(),
        AckOutcome::Stale
    );
    assert_eq!(
        env.broker
            .release(&second, "harness crashed")
            .await
            .unwrap(),
        AckOutcome::Accepted
    );
    let view = env.view(&id).await;
    assert_eq!(view.status, TaskStatus::Failed);
    assert_eq!(view.error.as_deref(), Some("harness crashed"));
    assert!(view.finished_at.is_some());
    assert_eq!(
        env.broker.complete(&second, verdict("late")).await.unwrap(),
        AckOutcome::Stale
    );
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!((q.requeued_total, q.failed_total), (1, 1));
}

async fn high_before_normal_before_low(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let low = env
        .broker
        .submit(&admin(), spec_with("l", Priority::Low, None))
        .await
        .unwrap()
        .task_id;
    let normal = env
        .broker
        .submit(&admin(), spec_with("n", Priority::Normal, None))
        .await
        .unwrap()
        .task_id;
    let high = env
        .broker
        .submit(&admin(), spec_with("h", Priority::High, None))
        .await
        .unwrap()
        .task_id;
    let w = worker(1);
    let mut order = Vec::new();
    for _ in 0..3 {
        order.push(claim_now(&env.broker, &w).await.task_id);
    }
    assert_eq!(order, [high, normal, low]);
}

async fn low_is_not_starved(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let specs: Vec<TaskSpec> = (0..20)
        .map(|i| spec_with(&format!("h{i}"), Priority::High, None))
        .collect();
    env.broker.submit_batch(&admin(), specs).await.unwrap();
    let low = env
        .broker
        .submit(&admin(), spec_with("l", Priority::Low, None))
        .await
        .unwrap()
        .task_id;

    let w = worker(1);
    let mut claimed = Vec::new();
    for _ in 0..7 {
        claimed.push(claim_now(&env.broker, &w).await.task_id);
    }
    assert!(
        claimed.contains(&low),
        "low task not among the first 7 claims"
    );
}

async fn fifo_within_priority(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let mut submitted = Vec::new();
    for i in 0..5 {
        submitted.push(
            env.broker
                .submit(&admin(), spec(&format!("t{i}")))
                .await
                .unwrap()
                .task_id,
        );
    }
    let (_, in_batch) = env
        .broker
        .submit_batch(&admin(), (5..8).map(|i| spec(&format!("t{i}"))).collect())
        .await
        .unwrap();
    submitted.extend(in_batch.into_iter().map(|s| s.task_id));

    let w = worker(1);
    let mut claimed = Vec::new();
    for _ in 0..submitted.len() {
        claimed.push(claim_now(&env.broker, &w).await.task_id);
    }
    assert_eq!(claimed, submitted);
}

async fn idempotency_key_returns_same_task(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let first = env
        .broker
        .submit(&admin(), spec_with("a", Priority::Normal, Some("k1")))
        .await
        .unwrap();
    assert!(!first.deduplicated);
    let again = env
        .broker
        .submit(&admin(), spec_with("a2", Priority::High, Some("k1")))
        .await
        .unwrap();
    assert_eq!(again.task_id, first.task_id);
    assert!(again.deduplicated);
    assert_eq!(again.status, TaskStatus::Queued);
    let other = env
        .broker
        .submit(&admin(), spec_with("b", Priority::Normal, Some("k2")))
        .await
        .unwrap();
    assert_ne!(other.task_id, first.task_id);

    // Inside a batch: a known key, a new key, and the new key repeated.
    let (batch, subs) = env
        .broker
        .submit_batch(
            &admin(),
            vec![
                spec_with("c", Priority::Normal, Some("k1")),
                spec_with("d", Priority::Normal, Some("k3")),
                spec_with("e", Priority::Normal, Some("k3")),
            ],
        )
        .await
        .unwrap();
    assert_eq!(subs[0].task_id, first.task_id);
    assert!(subs[0].deduplicated);
    assert!(!subs[1].deduplicated);
    assert_eq!(subs[2].task_id, subs[1].task_id);
    assert!(subs[2].deduplicated);
    // The reused task keeps its own batch (none); the new one belongs to this batch.
    assert_eq!(env.view(&first.task_id).await.batch_id, None);
    assert_eq!(
        env.view(&subs[1].task_id).await.batch_id,
        Some(batch.clone())
    );

    let q = env.broker.queue_status().await.unwrap();
    assert_eq!(q.submitted_total, 3);
    assert_eq!(q.queued(), 3);

    // Counts cover every member, reused ones included, and follow their transitions.
    let st = env
        .broker
        .batch_status(&batch, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((st.total, st.counts.queued), (3, 3));
    let w = worker(1);
    let mut leases = Vec::new();
    for _ in 0..3 {
        leases.push(claim_now(&env.broker, &w).await);
    }
    let st = env
        .broker
        .batch_status(&batch, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((st.counts.queued, st.counts.running), (0, 3));
    for lease in &leases {
        env.broker.complete(lease, verdict("ok")).await.unwrap();
    }
    let st = env
        .broker
        .batch_status(&batch, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (st.counts.running, st.counts.done, st.counts.total()),
        (0, 3, 3)
    );

    // A finished task is still returned for its key.
    let after = env
        .broker
        .submit(&admin(), spec_with("a3", Priority::Normal, Some("k1")))
        .await
        .unwrap();
    assert_eq!(after.task_id, first.task_id);
    assert_eq!(after.status, TaskStatus::Done);
    assert!(after.deduplicated);
}

async fn queue_cap_refuses_submissions(backend: Backend) {
    let cfg = BrokerConfig {
        queue_cap: 3,
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    env.broker
        .submit(&admin(), spec_with("a", Priority::Normal, Some("ka")))
        .await
        .unwrap();
    env.broker.submit(&admin(), spec("b")).await.unwrap();

    match env
        .broker
        .submit_batch(&admin(), vec![spec("c"), spec("d")])
        .await
    {
        Err(BrokerError::QueueFull { queued: 2, cap: 3 }) => {}
        other => panic!("expected QueueFull, got {other:?}"),
    }
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!((q.queued(), q.submitted_total, q.queue_cap), (2, 2, 3));

    env.broker.submit(&admin(), spec("c")).await.unwrap();
    match env.broker.submit(&admin(), spec("d")).await {
        Err(BrokerError::QueueFull { queued: 3, cap: 3 }) => {}
        other => panic!("expected QueueFull, got {other:?}"),
    }
    // A resubmission adds nothing to the queue, so it is answered even at the cap.
    let dup = env
        .broker
        .submit(&admin(), spec_with("a", Priority::Normal, Some("ka")))
        .await
        .unwrap();
    assert!(dup.deduplicated);

    claim_now(&env.broker, &worker(1)).await;
    env.broker
        .submit(&admin(), spec("d"))
        .await
        .expect("room again after a claim");
    assert_eq!(env.broker.queue_status().await.unwrap().queued(), 3);
}

async fn batch_status_counts_every_transition(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let (batch, subs) = env
        .broker
        .submit_batch(
            &admin(),
            vec![spec("a"), spec_with("b", Priority::High, None), spec("c")],
        )
        .await
        .unwrap();
    let ids: Vec<TaskId> = subs.iter().map(|s| s.task_id.clone()).collect();
    assert!(
        subs.iter()
            .all(|s| s.status == TaskStatus::Queued && !s.deduplicated)
    );
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 3);
    let (other_batch, _) = env
        .broker
        .submit_batch(&admin(), vec![spec("z")])
        .await
        .unwrap();
    assert_ne!(other_batch, batch);

    let st = env
        .broker
        .batch_status(&batch, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(st.batch_id, batch);
    assert_eq!(st.total, 3);
    assert_eq!(st.task_ids, ids);
    assert_eq!(st.counts.queued, 3);
    assert_eq!(st.tasks, None);
    assert_eq!(env.view(&ids[0]).await.batch_id, Some(batch.clone()));

    let w = worker(1);
    let lease = claim_now(&env.broker, &w).await;
    assert_eq!(lease.task_id, ids[1], "the high task goes first");
    let st = env
        .broker
        .batch_status(&batch, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((st.counts.queued, st.counts.running), (2, 1));

    env.broker.complete(&lease, verdict("ok")).await.unwrap();
    env.broker.cancel(&ids[2]).await.unwrap();
    let st = env
        .broker
        .batch_status(&batch, true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            st.counts.queued,
            st.counts.running,
            st.counts.done,
            st.counts.cancelled
        ),
        (1, 0, 1, 1)
    );
    let tasks = st.tasks.expect("tasks were asked for");
    let statuses: Vec<TaskStatus> = tasks.iter().map(|t| t.status).collect();
    assert_eq!(
        statuses,
        [TaskStatus::Queued, TaskStatus::Done, TaskStatus::Cancelled]
    );
    assert!(tasks.iter().all(|t| t.batch_id.as_ref() == Some(&batch)));
    assert_eq!(tasks[1].result, Some(verdict("ok")));

    assert_eq!(
        env.broker
            .batch_status(&crucible_shared::BatchId::random(), true)
            .await
            .unwrap(),
        None
    );
}

async fn cancel_in_every_state(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let queued = env
        .broker
        .submit(&admin(), spec("q"))
        .await
        .unwrap()
        .task_id;
    assert_eq!(
        env.broker.cancel(&queued).await.unwrap(),
        CancelOutcome::Cancelled {
            was: TaskStatus::Queued
        }
    );
    let view = env.view(&queued).await;
    assert_eq!(view.status, TaskStatus::Cancelled);
    assert!(view.finished_at.is_some());
    assert_eq!(env.broker.queue_status().await.unwrap().queued(), 0);
    assert_eq!(
        env.broker.claim(&worker(1), Duration::ZERO).await.unwrap(),
        None
    );

    let running = env
        .broker
        .submit(&admin(), spec("r"))
        .await
        .unwrap()
        .task_id;
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(
        env.broker.cancel(&running).await.unwrap(),
        CancelOutcome::Cancelled {
            was: TaskStatus::Running
        }
    );
    assert_eq!(env.view(&running).await.status, TaskStatus::Cancelled);
    assert_eq!(
        env.broker.renew(&lease).await.unwrap(),
        LeaseState::Cancelled
    );
    assert_eq!(
        env.broker.complete(&lease, verdict("late")).await.unwrap(),
        AckOutcome::Stale
    );
    assert_eq!(env.view(&running).await.result, None);
    assert_eq!(env.broker.queue_status().await.unwrap().running, 0);

    let done = env
        .broker
        .submit(&admin(), spec("d"))
        .await
        .unwrap()
        .task_id;
    let lease = claim_now(&env.broker, &worker(1)).await;
    env.broker.complete(&lease, verdict("ok")).await.unwrap();
    assert_eq!(
        env.broker.cancel(&done).await.unwrap(),
        CancelOutcome::AlreadyFinished(TaskStatus::Done)
    );
    assert_eq!(
        env.broker.cancel(&queued).await.unwrap(),
        CancelOutcome::AlreadyFinished(TaskStatus::Cancelled)
    );
    assert_eq!(
        env.broker.cancel(&TaskId::random()).await.unwrap(),
        CancelOutcome::NotFound
    );
    assert_eq!(env.broker.queue_status().await.unwrap().cancelled_total, 2);
}

async fn finished_records_expire_after_result_ttl(backend: Backend) {
    let cfg = BrokerConfig {
        result_ttl: Duration::from_millis(500),
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    let (batch, subs) = env
        .broker
        .submit_batch(
            &admin(),
            vec![spec_with("a", Priority::Normal, Some("ka")), spec("b")],
        )
        .await
        .unwrap();
    let (a, b) = (subs[0].task_id.clone(), subs[1].task_id.clone());
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease.task_id, a);
    env.broker.complete(&lease, verdict("ok")).await.unwrap();
    // The batch is kept while one of its tasks is open, however long that takes.
    env.broker.cancel(&b).await.unwrap();

    eventually("the finished tasks and their batch to expire", async || {
        let gone = env.broker.get_task(&a).await.unwrap().is_none()
            && env.broker.get_task(&b).await.unwrap().is_none()
            && env.broker.get_spec(&a).await.unwrap().is_none()
            && env
                .broker
                .batch_status(&batch, false)
                .await
                .unwrap()
                .is_none();
        gone.then_some(())
    })
    .await;
    let again = env
        .broker
        .submit(&admin(), spec_with("a", Priority::Normal, Some("ka")))
        .await
        .unwrap();
    assert!(
        !again.deduplicated,
        "the idempotency key expired with its task"
    );
    assert_ne!(again.task_id, a);
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!(
        (q.done_total, q.cancelled_total),
        (1, 1),
        "lifetime counters stay"
    );
}

async fn finished_records_all_carry_a_ttl(backend: Backend) {
    let cfg = BrokerConfig {
        max_attempts: 1,
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    let (batch, subs) = env
        .broker
        .submit_batch(
            &admin(),
            vec![spec_with("a", Priority::Normal, Some("ka")), spec("b")],
        )
        .await
        .unwrap();
    let single = env
        .broker
        .submit(&admin(), spec_with("c", Priority::Low, Some("kc")))
        .await
        .unwrap();
    let w = worker(1);
    env.broker
        .worker_heartbeat(&worker_info(&w, WorkerState::Idle))
        .await
        .unwrap();

    let done = claim_now(&env.broker, &w).await;
    env.broker.complete(&done, verdict("ok")).await.unwrap();
    let failed = claim_now(&env.broker, &w).await;
    env.broker.release(&failed, "device lost").await.unwrap();
    // No empty claim follows: it would delete the wake list, hiding a missing TTL on it.
    env.broker.cancel(&single.task_id).await.unwrap();

    // Finished records stay readable until result_ttl passes.
    for s in subs.iter().chain([&single]) {
        assert!(env.view(&s.task_id).await.status.is_terminal());
    }
    let st = env
        .broker
        .batch_status(&batch, true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((st.counts.done, st.counts.failed), (1, 1));
    assert_eq!(st.tasks.unwrap().len(), 2);

    let Some(mut raw) = env.raw().await else {
        return;
    };
    let p = &env.cfg.key_prefix;
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg(format!("{p}:*"))
        .query_async(&mut raw)
        .await
        .unwrap();
    let task_key = format!("{p}:task:{}", subs[0].task_id);
    assert!(keys.contains(&task_key), "{keys:?}");
    assert!(
        keys.iter().any(|k| k.starts_with(&format!("{p}:rcache:"))),
        "the verdict is cached: {keys:?}"
    );
    assert!(keys.contains(&format!("{p}:batch:{batch}")), "{keys:?}");
    assert!(
        keys.contains(&format!("{p}:idem:{}:ka", admin())),
        "{keys:?}"
    );
    // Bookkeeping whose size is bounded by the priorities and tenants, not by the tasks.
    let bookkeeping = [
        "stats",
        "queued",
        "tenant_queued",
        "tenant_running",
        "active",
        "claim_seq",
    ];
    let exempt = |k: &str| {
        bookkeeping.iter().any(|b| k == format!("{p}:{b}")) || k.starts_with(&format!("{p}:queue:"))
    };
    for key in keys.iter().filter(|k| !exempt(k)) {
        let pttl: i64 = ::redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(pttl > 0, "{key} has no TTL (PTTL {pttl})");
    }
    let pttl: i64 = ::redis::cmd("PTTL")
        .arg(&task_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(pttl <= 600_000, "task TTL {pttl} ms exceeds result_ttl");
}

async fn queue_status_counts(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let empty = env.broker.queue_status().await.unwrap();
    assert_eq!(empty.queued() + empty.running + empty.submitted_total, 0);
    assert_eq!(empty.queue_cap, 10_000);

    for (tag, prio) in [
        ("h", Priority::High),
        ("n", Priority::Normal),
        ("l1", Priority::Low),
        ("l2", Priority::Low),
    ] {
        env.broker
            .submit(&admin(), spec_with(tag, prio, None))
            .await
            .unwrap();
    }
    let lease = claim_now(&env.broker, &worker(1)).await;
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!(
        (
            q.queued_high,
            q.queued_normal,
            q.queued_low,
            q.running,
            q.submitted_total
        ),
        (0, 1, 2, 1, 4)
    );
    env.broker.complete(&lease, verdict("ok")).await.unwrap();
    let next = claim_now(&env.broker, &worker(1)).await;
    env.broker.cancel(&next.task_id).await.unwrap();
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!(
        (
            q.running,
            q.done_total,
            q.cancelled_total,
            q.failed_total,
            q.requeued_total
        ),
        (0, 1, 1, 0, 0)
    );
    assert_eq!(q.queued(), 2);
}

async fn worker_registry_is_shared_and_detects_lost_workers(backend: Backend) {
    let cfg = BrokerConfig {
        worker_liveness: Duration::from_millis(400),
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    let replica = env.peer();
    let (w1, w2) = (worker(1), worker(2));
    let info1 = worker_info(&w1, WorkerState::Idle);
    let mut info2 = worker_info(&w2, WorkerState::Busy);
    info2.current_task = Some(TaskId::random());
    env.broker.worker_heartbeat(&info1).await.unwrap();
    env.broker.worker_heartbeat(&info2).await.unwrap();

    let seen_here = env.broker.list_workers().await.unwrap();
    let seen_there = replica.list_workers().await.unwrap();
    assert_eq!(seen_here, seen_there, "both replicas give the same answer");
    assert_eq!(seen_there.len(), 2);
    let got2 = seen_there.iter().find(|w| w.worker_id == w2).unwrap();
    assert_eq!(got2.state, WorkerState::Busy);
    assert_eq!(got2.current_task, info2.current_task);
    assert_eq!(
        (got2.device.clone(), got2.tasks_done),
        (info2.device.clone(), 3)
    );

    replica.deregister_worker(&w2).await.unwrap();
    let ids: Vec<WorkerId> = env
        .broker
        .list_workers()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.worker_id)
        .collect();
    assert_eq!(ids.as_slice(), std::slice::from_ref(&w1));

    eventually("the silent worker to be reported lost", async || {
        let list = replica.list_workers().await.unwrap();
        list.iter()
            .any(|w| w.worker_id == w1 && w.state == WorkerState::Lost)
            .then_some(())
    })
    .await;
    env.broker.worker_heartbeat(&info1).await.unwrap();
    let list = replica.list_workers().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].state, WorkerState::Idle, "a heartbeat revives it");

    eventually("the long-silent worker to be dropped", async || {
        replica
            .list_workers()
            .await
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
}

async fn wait_terminal_returns_on_finish_or_timeout(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let id = env
        .broker
        .submit(&admin(), spec("a"))
        .await
        .unwrap()
        .task_id;

    let t0 = Instant::now();
    let view = env
        .broker
        .wait_terminal(&id, Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.status, TaskStatus::Queued);
    assert!(t0.elapsed() >= Duration::from_millis(250));

    let waiter = {
        let broker = env.peer();
        let id = id.clone();
        tokio::spawn(async move { broker.wait_terminal(&id, Duration::from_secs(30)).await })
    };
    let lease = claim_now(&env.broker, &worker(1)).await;
    let t0 = Instant::now();
    env.broker.complete(&lease, verdict("ok")).await.unwrap();
    let view = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("wait_terminal returned")
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "returned after {:?}",
        t0.elapsed()
    );
    assert_eq!(view.status, TaskStatus::Done);
    assert_eq!(view.result, Some(verdict("ok")));

    assert_eq!(
        env.broker
            .wait_terminal(&TaskId::random(), Duration::from_secs(5))
            .await
            .unwrap(),
        None
    );
}

async fn task_submitted_on_one_node_is_claimed_on_another(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let node_b = env.peer();

    let id = env
        .broker
        .submit(&admin(), spec("a"))
        .await
        .unwrap()
        .task_id;
    let lease = node_b
        .claim(&worker(1), Duration::from_secs(5))
        .await
        .unwrap()
        .expect("node b sees node a's task");
    assert_eq!(lease.task_id, id);
    node_b.complete(&lease, verdict("ok")).await.unwrap();
    assert_eq!(env.view(&id).await.status, TaskStatus::Done);

    // A claimer blocked on one node is woken by a submit on the other.
    let w = worker(2);
    let mut claim = Box::pin(node_b.claim(&w, Duration::from_secs(30)));
    env.block(&mut claim).await;
    let t0 = Instant::now();
    let id = env
        .broker
        .submit(&admin(), spec("b"))
        .await
        .unwrap()
        .task_id;
    let lease = tokio::time::timeout(Duration::from_secs(5), claim)
        .await
        .expect("claim woke up")
        .unwrap()
        .unwrap();
    assert_eq!(lease.task_id, id);
    assert!(t0.elapsed() < Duration::from_secs(2));
}

async fn concurrent_claimers_claim_each_task_once(backend: Backend) {
    const TASKS: usize = 60;
    const CLAIMERS: u32 = 6;
    let env = Env::start(backend, config()).await;
    let (_, subs) = env
        .broker
        .submit_batch(
            &admin(),
            (0..TASKS).map(|i| spec(&format!("t{i}"))).collect(),
        )
        .await
        .unwrap();
    let submitted: HashSet<TaskId> = subs.into_iter().map(|s| s.task_id).collect();

    let mut claimers = tokio::task::JoinSet::new();
    for n in 0..CLAIMERS {
        let broker = env.peer();
        claimers.spawn(async move {
            let w = worker(n);
            let mut got = Vec::new();
            while let Some(lease) = broker.claim(&w, Duration::from_millis(200)).await.unwrap() {
                assert_eq!(lease.attempt, 1);
                got.push(lease.task_id);
            }
            got
        });
    }
    let mut claimed = Vec::new();
    while let Some(got) = claimers.join_next().await {
        claimed.extend(got.unwrap());
    }
    assert_eq!(claimed.len(), TASKS, "every task claimed exactly once");
    assert_eq!(claimed.into_iter().collect::<HashSet<_>>(), submitted);
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!((q.queued(), q.running), (0, TASKS as u64));
}

// ---------------------------------------------------------------------------------------------
// Result cache and coalescing
// ---------------------------------------------------------------------------------------------

/// Submits `s`, claims it and completes it with `result`; returns its id.
async fn evaluate(env: &Env, s: TaskSpec, result: EvalResult) -> TaskId {
    let sub = env.broker.submit(&admin(), s).await.expect("submit");
    assert_eq!(sub.status, TaskStatus::Queued, "{sub:?}");
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease.task_id, sub.task_id);
    assert_eq!(
        env.broker.complete(&lease, result).await.unwrap(),
        AckOutcome::Accepted
    );
    sub.task_id
}

fn forced(mut s: TaskSpec) -> TaskSpec {
    s.request.force_refresh = true;
    s
}

async fn cache_counters(env: &Env) -> (u64, u64, u64) {
    let q = env.broker.queue_status().await.unwrap();
    (q.cache_hits_total, q.cache_misses_total, q.coalesced_total)
}

async fn cache_hit_is_a_new_done_task_marked_cached(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let first = evaluate(&env, spec("a"), verdict("measured")).await;
    assert!(!env.view(&first).await.cached);

    // Priority and the random seed are not part of what is compared.
    let mut again = spec_with("a", Priority::High, None);
    again.seed = 7;
    let before = Utc::now() - chrono::Duration::seconds(5);
    let hit = env.broker.submit(&admin(), again.clone()).await.unwrap();
    assert!(hit.cached && !hit.coalesced && !hit.deduplicated, "{hit:?}");
    assert_eq!(hit.status, TaskStatus::Done);
    assert_ne!(hit.task_id, first, "a hit is a task of its own");

    let view = env.view(&hit.task_id).await;
    assert_eq!(view.status, TaskStatus::Done);
    assert!(view.cached);
    assert_eq!(view.result, Some(verdict("measured")));
    assert_eq!(view.attempts, 0, "it never reached a worker");
    assert_eq!((view.worker_id, view.error), (None, None));
    assert_eq!(view.priority, Priority::High);
    let finished = view.finished_at.expect("finished_at is set");
    assert!(finished >= before && view.started_at == Some(finished));
    assert_eq!(
        env.broker.get_spec(&hit.task_id).await.unwrap(),
        Some(again)
    );
    assert_eq!(
        env.broker.claim(&worker(1), Duration::ZERO).await.unwrap(),
        None,
        "nothing was queued"
    );
    let waited = env
        .broker
        .wait_terminal(&hit.task_id, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert!(waited.cached);

    // In a batch, a hit is a done member next to a queued one.
    let (batch, subs) = env
        .broker
        .submit_batch(&admin(), vec![spec("a"), spec("b")])
        .await
        .unwrap();
    assert!(subs[0].cached && !subs[1].cached);
    assert_eq!(
        (subs[0].status, subs[1].status),
        (TaskStatus::Done, TaskStatus::Queued)
    );
    let st = env
        .broker
        .batch_status(&batch, true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((st.total, st.counts.done, st.counts.queued), (2, 1, 1));
    let tasks = st.tasks.unwrap();
    assert!(tasks[0].cached && tasks[0].batch_id.as_ref() == Some(&batch));

    let q = env.broker.queue_status().await.unwrap();
    assert_eq!(
        (q.submitted_total, q.done_total, q.queued(), q.running),
        (4, 3, 1, 0)
    );
    assert_eq!(cache_counters(&env).await, (2, 2, 0));
}

async fn force_refresh_bypasses_cache_and_coalescing(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let first = evaluate(&env, spec("a"), verdict("old")).await;

    let fresh = env
        .broker
        .submit(&admin(), forced(spec("a")))
        .await
        .unwrap();
    assert!(!fresh.cached && !fresh.coalesced, "{fresh:?}");
    assert_eq!(fresh.status, TaskStatus::Queued);
    assert_ne!(fresh.task_id, first);
    // A second forced request does not join the first one either.
    let fresh2 = env
        .broker
        .submit(&admin(), forced(spec("a")))
        .await
        .unwrap();
    assert!(!fresh2.coalesced && fresh2.task_id != fresh.task_id);
    // An ordinary one is still answered from the cache meanwhile.
    assert!(env.broker.submit(&admin(), spec("a")).await.unwrap().cached);

    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease.task_id, fresh.task_id);
    assert_eq!(lease.attempt, 1);
    env.broker.complete(&lease, verdict("new")).await.unwrap();
    let view = env.view(&fresh.task_id).await;
    assert!(!view.cached);
    assert_eq!(view.result, Some(verdict("new")));

    // The forced evaluation replaced the cached result.
    let hit = env.broker.submit(&admin(), spec("a")).await.unwrap();
    assert!(hit.cached);
    assert_eq!(env.view(&hit.task_id).await.result, Some(verdict("new")));
    // Forced submissions are not lookups: one miss (the first), two hits.
    assert_eq!(cache_counters(&env).await, (2, 1, 0));
}

async fn a_different_request_or_scope_misses(backend: Backend) {
    let env = Env::start(backend, config()).await;
    evaluate(&env, spec("a"), verdict("ok")).await;

    type Mutation = Box<dyn Fn(&mut TaskSpec)>;
    let changes: Vec<(Mutation, &str)> = vec![
        (
            Box::new(|s| s.request.kernel_code.push_str("  # v2")),
            "kernel_code",
        ),
        (Box::new(|s| s.request.num_perf_trials = 7), "perf trials"),
        (Box::new(|s| s.request.atol = 1e-4), "atol"),
        (
            Box::new(|s| s.request.backend = crucible_shared::Backend::Cuda),
            "backend",
        ),
        (Box::new(|s| s.request.seed = Some(42)), "a chosen seed"),
    ];
    for (change, what) in changes {
        let mut s = spec("a");
        change(&mut s);
        let sub = env.broker.submit(&admin(), s).await.unwrap();
        assert!(!sub.cached && !sub.coalesced, "{what}: {sub:?}");
        assert_eq!(sub.status, TaskStatus::Queued, "{what}");
    }
    assert_eq!(cache_counters(&env).await, (0, 6, 0));

    // A broker of another device class on the same store shares neither results nor work.
    if let Some(server) = &env.redis {
        let other = RedisBroker::connect(
            &server.url,
            BrokerConfig {
                cache_scope: "other-device".to_owned(),
                ..env.cfg.clone()
            },
        )
        .unwrap();
        let sub = other.submit(&admin(), spec("a")).await.unwrap();
        assert!(!sub.cached && !sub.coalesced, "{sub:?}");
        let mut open = spec("a");
        open.request.num_perf_trials = 7;
        let sub = other.submit(&admin(), open).await.unwrap();
        assert!(!sub.coalesced, "{sub:?}");
    }
}

async fn identical_open_requests_share_one_task(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let first = env.broker.submit(&admin(), spec("a")).await.unwrap();
    assert!(!first.coalesced && !first.cached);

    let joined = env
        .broker
        .submit(&admin(), spec_with("a", Priority::Low, None))
        .await
        .unwrap();
    assert_eq!(joined.task_id, first.task_id);
    assert!(joined.coalesced && !joined.deduplicated && !joined.cached);
    assert_eq!(joined.status, TaskStatus::Queued);

    // In a batch: an open task from before, and a new task repeated within the batch.
    let (batch, subs) = env
        .broker
        .submit_batch(&admin(), vec![spec("a"), spec("b"), spec("b")])
        .await
        .unwrap();
    assert_eq!(subs[0].task_id, first.task_id);
    assert!(subs[0].coalesced);
    assert!(!subs[1].coalesced);
    assert_eq!(subs[2].task_id, subs[1].task_id);
    assert!(subs[2].coalesced);
    let st = env
        .broker
        .batch_status(&batch, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((st.total, st.counts.queued), (3, 3));
    assert_eq!(env.view(&first.task_id).await.batch_id, None);
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!((q.queued(), q.submitted_total), (2, 2));

    if let Some(mut raw) = env.raw().await {
        let key = format!(
            "{}:inflight:{}:{}",
            env.cfg.key_prefix,
            admin(),
            crucible_task_manager::policy::scoped_cache_key(&env.cfg, &spec("a"))
        );
        let pttl: i64 = ::redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(pttl > 0, "{key} is bounded (PTTL {pttl})");
    }

    // A running task is joined too.
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease.task_id, first.task_id);
    let running = env.broker.submit(&admin(), spec("a")).await.unwrap();
    assert_eq!(running.task_id, first.task_id);
    assert!(running.coalesced);
    assert_eq!(running.status, TaskStatus::Running);

    env.broker.complete(&lease, verdict("one")).await.unwrap();
    let st = env
        .broker
        .batch_status(&batch, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((st.counts.done, st.counts.queued), (1, 2));

    // Once it is done, the same request is a cache hit: a new task with the same verdict.
    let after = env.broker.submit(&admin(), spec("a")).await.unwrap();
    assert!(after.cached && !after.coalesced);
    assert_ne!(after.task_id, first.task_id);
    assert_eq!(env.view(&after.task_id).await.result, Some(verdict("one")));
    if let Some(mut raw) = env.raw().await {
        let key = format!(
            "{}:inflight:{}:{}",
            env.cfg.key_prefix,
            admin(),
            crucible_task_manager::policy::scoped_cache_key(&env.cfg, &spec("a"))
        );
        let exists: bool = ::redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(!exists, "the finished task left the in-flight index");
    }

    // One evaluation per distinct request.
    let next = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(next.task_id, subs[1].task_id);
    assert_eq!(
        env.broker.claim(&worker(1), Duration::ZERO).await.unwrap(),
        None
    );
    // Misses: a and b; joined: a twice while queued and once while running, b once.
    assert_eq!(cache_counters(&env).await, (1, 2, 4));
}

async fn failed_and_cancelled_tasks_are_not_cached(backend: Backend) {
    let cfg = BrokerConfig {
        max_attempts: 1,
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    let failed = env
        .broker
        .submit(&admin(), spec("a"))
        .await
        .unwrap()
        .task_id;
    let lease = claim_now(&env.broker, &worker(1)).await;
    env.broker.release(&lease, "device lost").await.unwrap();
    assert_eq!(env.view(&failed).await.status, TaskStatus::Failed);

    let retry = env.broker.submit(&admin(), spec("a")).await.unwrap();
    assert!(!retry.cached && !retry.coalesced, "{retry:?}");
    assert_ne!(retry.task_id, failed);
    assert_eq!(retry.status, TaskStatus::Queued);

    // Cancelled while queued, then while running: neither is joined afterwards.
    env.broker.cancel(&retry.task_id).await.unwrap();
    let third = env.broker.submit(&admin(), spec("a")).await.unwrap();
    assert!(!third.cached && !third.coalesced, "{third:?}");
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease.task_id, third.task_id);
    env.broker.cancel(&third.task_id).await.unwrap();
    assert_eq!(
        env.broker.complete(&lease, verdict("late")).await.unwrap(),
        AckOutcome::Stale
    );
    let fourth = env.broker.submit(&admin(), spec("a")).await.unwrap();
    assert!(!fourth.cached && !fourth.coalesced, "{fourth:?}");

    // Reaped to failed: the same.
    let cfg = BrokerConfig {
        max_attempts: 1,
        lease_ttl: Duration::from_millis(300),
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    let id = env
        .broker
        .submit(&admin(), spec("r"))
        .await
        .unwrap()
        .task_id;
    claim_now(&env.broker, &worker(1)).await;
    let r = reap_until(&env.broker, "the lease to expire").await;
    assert_eq!(r.failed, 1);
    let again = env.broker.submit(&admin(), spec("r")).await.unwrap();
    assert!(!again.cached && !again.coalesced, "{again:?}");
    assert_ne!(again.task_id, id);
}

async fn idempotency_key_takes_precedence_over_cache_and_coalescing(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let keyed = evaluate(
        &env,
        spec_with("a", Priority::Normal, Some("k1")),
        verdict("ok"),
    )
    .await;
    let again = env
        .broker
        .submit(&admin(), spec_with("a", Priority::Normal, Some("k1")))
        .await
        .unwrap();
    assert_eq!(again.task_id, keyed);
    assert!(again.deduplicated && !again.cached);
    // Even with force_refresh, a known key returns its task.
    let forced_again = env
        .broker
        .submit(
            &admin(),
            forced(spec_with("a", Priority::Normal, Some("k1"))),
        )
        .await
        .unwrap();
    assert_eq!(forced_again.task_id, keyed);
    assert!(forced_again.deduplicated);

    // A new key is looked up; its retry returns the task it got.
    let hit = env
        .broker
        .submit(&admin(), spec_with("a", Priority::Normal, Some("k2")))
        .await
        .unwrap();
    assert!(hit.cached && hit.task_id != keyed);
    let hit_again = env
        .broker
        .submit(&admin(), spec_with("a", Priority::Normal, Some("k2")))
        .await
        .unwrap();
    assert_eq!(hit_again.task_id, hit.task_id);
    assert!(hit_again.deduplicated && !hit_again.cached);

    let open = env
        .broker
        .submit(&admin(), spec("b"))
        .await
        .unwrap()
        .task_id;
    let joined = env
        .broker
        .submit(&admin(), spec_with("b", Priority::Normal, Some("k3")))
        .await
        .unwrap();
    assert_eq!(joined.task_id, open);
    assert!(joined.coalesced);
    let joined_again = env
        .broker
        .submit(&admin(), spec_with("b", Priority::Normal, Some("k3")))
        .await
        .unwrap();
    assert_eq!(joined_again.task_id, open);
    assert!(joined_again.deduplicated && !joined_again.coalesced);

    // Deduplications are not lookups.
    assert_eq!(cache_counters(&env).await, (1, 2, 1));
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!((q.submitted_total, q.queued()), (3, 1));
}

// ---------------------------------------------------------------------------------------------
// The key-value cache (reference timings)
// ---------------------------------------------------------------------------------------------

const LONG: Duration = Duration::from_secs(600);

async fn ref_counters(env: &Env) -> (u64, u64) {
    let q = env.broker.queue_status().await.unwrap();
    (q.ref_cache_hits_total, q.ref_cache_misses_total)
}

async fn kv_put_then_get_and_overwrite(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let b = &env.broker;
    assert_eq!(b.kv_get(KvNamespace::Ref, "k1").await.unwrap(), None);
    b.kv_put(KvNamespace::Ref, "k1", r#"{"median":1.5}"#, LONG)
        .await
        .unwrap();
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "k1").await.unwrap().as_deref(),
        Some(r#"{"median":1.5}"#)
    );
    // Another node sees it; a second put replaces the value.
    let peer = env.peer();
    assert_eq!(
        peer.kv_get(KvNamespace::Ref, "k1")
            .await
            .unwrap()
            .as_deref(),
        Some(r#"{"median":1.5}"#)
    );
    peer.kv_put(KvNamespace::Ref, "k1", "second", LONG)
        .await
        .unwrap();
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "k1").await.unwrap().as_deref(),
        Some("second")
    );
    assert_eq!(b.kv_get(KvNamespace::Ref, "k2").await.unwrap(), None);
}

async fn kv_values_expire_after_their_ttl(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let b = &env.broker;
    b.kv_put(KvNamespace::Ref, "short", "v", Duration::from_millis(150))
        .await
        .unwrap();
    b.kv_put(KvNamespace::Ref, "long", "w", LONG).await.unwrap();
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "short")
            .await
            .unwrap()
            .as_deref(),
        Some("v")
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(b.kv_get(KvNamespace::Ref, "short").await.unwrap(), None);
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "long").await.unwrap().as_deref(),
        Some("w")
    );
    // A new put after expiry starts a fresh entry.
    b.kv_put(KvNamespace::Ref, "short", "again", LONG)
        .await
        .unwrap();
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "short")
            .await
            .unwrap()
            .as_deref(),
        Some("again")
    );
    if let Some(mut raw) = env.raw().await {
        let keys: Vec<String> = ::redis::cmd("KEYS")
            .arg(format!("{}:kv:*", env.cfg.key_prefix))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(keys.len(), 2, "{keys:?}");
        for key in keys {
            let ttl: i64 = ::redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap();
            assert!(ttl > 0, "{key} has no ttl ({ttl})");
        }
    }
}

async fn kv_namespaces_are_isolated(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let b = &env.broker;
    b.kv_put(KvNamespace::Ref, "k", "in ref", LONG)
        .await
        .unwrap();
    b.kv_put(KvNamespace::Build, "k", "in build", LONG)
        .await
        .unwrap();
    // A key may hold the separator (the exact, length-prefixed layout is `keys.rs`'s test).
    b.kv_put(KvNamespace::Rollouts, "f:k", "in rollouts", LONG)
        .await
        .unwrap();
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "k").await.unwrap().as_deref(),
        Some("in ref")
    );
    assert_eq!(
        b.kv_get(KvNamespace::Build, "k").await.unwrap().as_deref(),
        Some("in build")
    );
    assert_eq!(
        b.kv_get(KvNamespace::Rollouts, "f:k")
            .await
            .unwrap()
            .as_deref(),
        Some("in rollouts")
    );
    assert_eq!(b.kv_get(KvNamespace::Rollouts, "k").await.unwrap(), None);
    assert_eq!(
        b.kv_get(KvNamespace::RolloutBatchKeys, "k").await.unwrap(),
        None
    );
}

async fn kv_lookups_are_counted_per_namespace(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let b = &env.broker;
    assert_eq!(ref_counters(&env).await, (0, 0));
    assert_eq!(b.kv_get(KvNamespace::Ref, "k").await.unwrap(), None);
    b.kv_put(KvNamespace::Ref, "k", "v", LONG).await.unwrap();
    assert!(b.kv_get(KvNamespace::Ref, "k").await.unwrap().is_some());
    assert!(b.kv_get(KvNamespace::Ref, "k").await.unwrap().is_some());
    // Puts count nothing; lookups in another namespace are not reference lookups.
    b.kv_put(KvNamespace::Build, "k", "v", LONG).await.unwrap();
    assert!(b.kv_get(KvNamespace::Build, "k").await.unwrap().is_some());
    assert_eq!(b.kv_get(KvNamespace::Build, "nope").await.unwrap(), None);
    assert_eq!(ref_counters(&env).await, (2, 1));
    // Nor do they touch the result cache counters.
    assert_eq!(cache_counters(&env).await, (0, 0, 0));
    // Each namespace has counters of its own.
    let counts = |hits, misses| KvCounts { hits, misses };
    assert_eq!(b.kv_counts(KvNamespace::Ref).await.unwrap(), counts(2, 1));
    assert_eq!(b.kv_counts(KvNamespace::Build).await.unwrap(), counts(1, 1));
    assert_eq!(
        b.kv_counts(KvNamespace::Rollouts).await.unwrap(),
        counts(0, 0)
    );
    if let Some(mut raw) = env.raw().await {
        let fields: Vec<Option<u64>> = ::redis::cmd("HMGET")
            .arg(format!("{}:stats", env.cfg.key_prefix))
            .arg(&["kv:build:hits", "kv:build:misses"][..])
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(fields, [Some(1), Some(1)]);
    }
}

async fn batch_finished_log_lists_each_task_once_in_finishing_order(backend: Backend) {
    let env = Env::start(backend, config()).await;
    // A task done earlier is answered from the cache: finished at submission.
    evaluate(&env, spec("cached"), verdict("cached")).await;
    let (batch, subs) = env
        .broker
        .submit_batch(
            &admin(),
            vec![spec("a"), spec("b"), spec("a"), spec("cached"), spec("c")],
        )
        .await
        .unwrap();
    assert_eq!(
        subs[2].task_id, subs[0].task_id,
        "identical specs share a task"
    );
    let page = |after: u64, wait: Duration| {
        let broker = env.broker.clone();
        let batch = batch.clone();
        async move {
            broker
                .batch_finished(&batch, after, 100, wait)
                .await
                .unwrap()
                .expect("batch known")
        }
    };
    let first = page(0, Duration::ZERO).await;
    assert_eq!((first.finished, first.distinct), (1, 4));
    assert_eq!(first.tasks[0].0, subs[3].task_id);
    assert_eq!(
        first.tasks[0].1.as_ref().map(|v| v.status),
        Some(TaskStatus::Done)
    );

    // Nothing new: a wait returns empty at its deadline.
    let empty = page(1, Duration::from_millis(100)).await;
    assert!(empty.tasks.is_empty() && empty.finished == 1);

    // A waiting reader wakes when a task finishes; finishing order, not submission order.
    let waiter = tokio::spawn(page(1, Duration::from_secs(20)));
    let mut leases = Vec::new();
    for _ in 0..3 {
        leases.push(claim_now(&env.broker, &worker(1)).await);
    }
    let by_id = |id: &TaskId| leases.iter().find(|l| &l.task_id == id).unwrap().clone();
    let c = by_id(&subs[4].task_id);
    env.broker.complete(&c, verdict("c")).await.unwrap();
    let woke = waiter.await.unwrap();
    assert_eq!(woke.tasks.len(), 1);
    assert_eq!(woke.tasks[0].0, subs[4].task_id);

    env.broker.cancel(&subs[1].task_id).await.unwrap();
    let a = by_id(&subs[0].task_id);
    env.broker.complete(&a, verdict("a")).await.unwrap();
    let rest = page(2, Duration::ZERO).await;
    let ids: Vec<&TaskId> = rest.tasks.iter().map(|(id, _)| id).collect();
    assert_eq!(ids, [&subs[1].task_id, &subs[0].task_id]);
    assert_eq!(
        rest.tasks[0].1.as_ref().map(|v| v.status),
        Some(TaskStatus::Cancelled)
    );
    assert_eq!((rest.finished, rest.distinct), (4, 4));
    // Every page is a pure read: the same cursor gives the same entries.
    assert_eq!(page(2, Duration::ZERO).await.tasks.len(), 2);
    assert!(page(4, Duration::from_secs(5)).await.tasks.is_empty());
    assert!(
        env.broker
            .batch_finished(&BatchId::random(), 0, 10, Duration::ZERO)
            .await
            .unwrap()
            .is_none()
    );
}
