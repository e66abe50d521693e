//! Leases: claiming with fresh fencing tokens, waiting and waking, renewal, fenced completion,
//! the reaper and release with their retries, several nodes and concurrent claimers.

use crate::common::*;
use crucible_shared::{BrokerConfig, TaskId, TaskStatus};
use crucible_task_manager::{AckOutcome, LeaseState};
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;

contract!(
    claim_leases_with_fresh_token,
    claim_returns_none_after_wait,
    claim_wakes_on_submit,
    renew_extends_and_reports_lost_and_cancelled,
    complete_is_fenced_by_token,
    stale_complete_after_reap_writes_nothing,
    reap_requeues_then_fails_after_max_attempts,
    release_requeues_then_fails_with_reason,
    wait_terminal_returns_on_finish_or_timeout,
    task_submitted_on_one_node_is_claimed_on_another,
    concurrent_claimers_claim_each_task_once,
);

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
    assert_eq!(
        first.queued_for,
        (started - view.submitted_at).to_std().unwrap(),
        "the lease's queue wait is the record's submission to its start"
    );
}

async fn claim_returns_none_after_wait(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let t0 = Instant::now();
    let got = env
        .broker
        .claim(&worker(1), &h100(), Duration::from_millis(300))
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
        env.broker
            .claim(&worker(1), &h100(), Duration::ZERO)
            .await
            .unwrap(),
        None
    );
}

async fn claim_wakes_on_submit(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let w = worker(1);
    let class = h100();
    let mut claim = Box::pin(env.broker.claim(&w, &class, Duration::from_secs(30)));
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
        env.broker
            .claim(&worker(3), &h100(), Duration::ZERO)
            .await
            .unwrap(),
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
        .claim(&worker(1), &h100(), Duration::from_secs(5))
        .await
        .unwrap()
        .expect("node b sees node a's task");
    assert_eq!(lease.task_id, id);
    node_b.complete(&lease, verdict("ok")).await.unwrap();
    assert_eq!(env.view(&id).await.status, TaskStatus::Done);

    // A claimer blocked on one node is woken by a submit on the other.
    let w = worker(2);
    let class = h100();
    let mut claim = Box::pin(node_b.claim(&w, &class, Duration::from_secs(30)));
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
            while let Some(lease) = broker
                .claim(&w, &h100(), Duration::from_millis(200))
                .await
                .unwrap()
            {
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
