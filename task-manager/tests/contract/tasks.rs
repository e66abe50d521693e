//! Tasks: submitting and reading back, idempotency keys, the queue cap, cancel in every state,
//! expiry of finished records, queue counters and the worker registry.

use crate::common::*;
use chrono::Utc;
use crucible_shared::{BrokerConfig, Priority, TaskId, TaskStatus, WorkerId, WorkerState};
use crucible_task_manager::{AckOutcome, BrokerError, CancelOutcome, LeaseState};
use std::time::Duration;

contract!(
    submit_then_get_task_and_spec,
    idempotency_key_returns_same_task,
    queue_cap_refuses_submissions,
    cancel_in_every_state,
    finished_records_expire_after_result_ttl,
    finished_records_all_carry_a_ttl,
    queue_status_counts,
    worker_registry_is_shared_and_detects_lost_workers,
);

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
        env.broker
            .claim(&worker(1), &h100(), Duration::ZERO)
            .await
            .unwrap(),
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
    // Bookkeeping whose size is bounded by the priorities, device classes and tenants, not by
    // the tasks.
    let bookkeeping = [
        "stats",
        "queued",
        "queued_class",
        "tenant_queued",
        "tenant_running",
        "unclassed",
        "claim_classes",
        "claim_seq",
    ];
    let exempt = |k: &str| {
        bookkeeping.iter().any(|b| k == format!("{p}:{b}"))
            || ["queue", "active"]
                .iter()
                .any(|b| k.starts_with(&format!("{p}:{b}:")))
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
