//! The result cache and coalescing: hits are new done tasks, `force_refresh`, what misses,
//! identical open requests sharing a task, what is never cached, and idempotency first.

use crate::common::*;
use chrono::Utc;
use crucible_shared::{BrokerConfig, Priority, TaskSpec, TaskStatus};
use crucible_task_manager::{AckOutcome, Broker, RedisBroker};
use std::time::Duration;

contract!(
    cache_hit_is_a_new_done_task_marked_cached,
    force_refresh_bypasses_cache_and_coalescing,
    a_different_request_or_scope_misses,
    identical_open_requests_share_one_task,
    failed_and_cancelled_tasks_are_not_cached,
    idempotency_key_takes_precedence_over_cache_and_coalescing,
);

fn forced(mut s: TaskSpec) -> TaskSpec {
    s.request.force_refresh = true;
    s
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
        env.broker
            .claim(&worker(1), &h100(), Duration::ZERO)
            .await
            .unwrap(),
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
        env.broker
            .claim(&worker(1), &h100(), Duration::ZERO)
            .await
            .unwrap(),
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
