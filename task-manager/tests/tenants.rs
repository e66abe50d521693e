//! The tenant part of the broker contract, run against `MemoryBroker` and against `RedisBroker`
//! on a real redis-server (harness: `common/mod.rs`): the registry (create, find by token hash,
//! list, delete), ownership of tasks and batches, idempotency keys, result caches and coalescing
//! per tenant (caches shared only between tenants that share), quotas, the fair share of claims
//! and what deleting a tenant does to its open tasks.

mod common;

use common::*;

use crucible_shared::{BrokerConfig, CreateTenantRequest, TaskId, TaskStatus, TenantId};
use crucible_task_manager::{Broker, BrokerError, LeaseState};
use std::collections::HashMap;
use std::sync::Arc;

contract!(
    tenants_are_created_found_by_token_listed_and_deleted,
    tasks_and_batches_record_their_tenant,
    a_deleted_tenant_cannot_submit,
    idempotency_keys_are_per_tenant,
    results_and_open_tasks_are_never_shared_across_tenants,
    tenants_that_share_the_cache_share_results_but_not_tasks,
    max_queued_refuses_what_would_pass_the_quota,
    a_small_tenant_finishes_in_the_first_half,
    weights_divide_the_claims,
    an_idle_tenant_banks_no_credit,
    deleting_a_tenant_cancels_its_open_tasks,
    deleting_a_big_tenant_cancels_every_queued_task,
    loads_count_open_tasks_per_tenant,
);

/// Claims every queued task, returning their ids in claim order.
async fn claim_all(broker: &Arc<dyn Broker>) -> Vec<TaskId> {
    let mut out = Vec::new();
    while let Some(lease) = broker
        .claim(&worker(1), &h100(), std::time::Duration::ZERO)
        .await
        .unwrap()
    {
        out.push(lease.task_id);
    }
    out
}

/// Submits `n` distinct tasks of `tenant` as one batch; returns their ids.
async fn fill(env: &Env, tenant: &TenantId, tag: &str, n: usize) -> Vec<TaskId> {
    let specs = (0..n).map(|i| spec(&format!("{tag}-{i}"))).collect();
    let (_, subs) = env.broker.submit_batch(tenant, specs).await.unwrap();
    subs.into_iter().map(|s| s.task_id).collect()
}

async fn tenants_are_created_found_by_token_listed_and_deleted(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let a = create(&env, "alice", |r| {
        r.weight = Some(2);
        r.max_queued = Some(5);
    })
    .await;
    let b = create(&env, "bob", |r| r.share_cache = true).await;
    assert_ne!(a.id, b.id);
    assert!(!a.id.is_builtin());
    assert_eq!(
        (a.name.as_str(), a.weight, a.max_queued, a.share_cache),
        ("alice", 2, Some(5), false)
    );
    assert_eq!((b.weight, b.max_queued, b.share_cache), (1, None, true));

    let again = env
        .broker
        .create_tenant(&CreateTenantRequest::new("alice"), "another-hash")
        .await;
    assert!(
        matches!(again, Err(BrokerError::TenantExists(ref n)) if n == "alice"),
        "{again:?}"
    );

    let found = env.broker.tenant_by_token(&token_hash("alice")).await;
    assert_eq!(found.unwrap(), Some(a.clone()));
    assert_eq!(env.broker.tenant_by_token("nope").await.unwrap(), None);
    let names: Vec<String> = env
        .broker
        .list_tenants()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["alice", "bob"]);

    let deleted = env.broker.delete_tenant("bob").await.unwrap().unwrap();
    assert_eq!(
        (deleted.cancelled_queued, deleted.cancelled_running),
        (0, 0)
    );
    assert_eq!(
        env.broker
            .tenant_by_token(&token_hash("bob"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(env.broker.delete_tenant("bob").await.unwrap(), None);
    assert_eq!(env.broker.list_tenants().await.unwrap(), vec![a]);

    // The name is free again; the new tenant is a different one.
    let b2 = create(&env, "bob", |_| {}).await;
    assert_ne!(b2.id, b.id);
}

async fn tasks_and_batches_record_their_tenant(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let a = create(&env, "a", |_| {}).await;
    let task = env.broker.submit(&a.id, spec("x")).await.unwrap().task_id;
    let (batch, _) = env
        .broker
        .submit_batch(&a.id, vec![spec("y")])
        .await
        .unwrap();
    // A rollout batch with nothing to evaluate has an owner too.
    let (empty, _) = env.broker.submit_batch(&a.id, vec![]).await.unwrap();
    let own = env
        .broker
        .submit(&admin(), spec("z"))
        .await
        .unwrap()
        .task_id;

    assert_eq!(
        env.broker.task_tenant(&task).await.unwrap(),
        Some(a.id.clone())
    );
    assert_eq!(
        env.broker.batch_tenant(&batch).await.unwrap(),
        Some(a.id.clone())
    );
    assert_eq!(
        env.broker.batch_tenant(&empty).await.unwrap(),
        Some(a.id.clone())
    );
    assert_eq!(env.broker.task_tenant(&own).await.unwrap(), Some(admin()));
    assert_eq!(
        env.broker.task_tenant(&TaskId::random()).await.unwrap(),
        None
    );
    assert_eq!(
        env.broker
            .batch_tenant(&crucible_shared::BatchId::random())
            .await
            .unwrap(),
        None
    );
}

async fn a_deleted_tenant_cannot_submit(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let a = create(&env, "a", |_| {}).await;
    env.broker.delete_tenant("a").await.unwrap().unwrap();
    let refused = env.broker.submit(&a.id, spec("x")).await;
    assert!(
        matches!(refused, Err(BrokerError::UnknownTenant(ref t)) if *t == a.id),
        "{refused:?}"
    );
    let refused = env.broker.submit_batch(&a.id, vec![spec("y")]).await;
    assert!(
        matches!(refused, Err(BrokerError::UnknownTenant(_))),
        "{refused:?}"
    );
    let never = TenantId::from("tn_never_created");
    assert!(matches!(
        env.broker.submit(&never, spec("x")).await,
        Err(BrokerError::UnknownTenant(_))
    ));
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!((q.queued(), q.submitted_total), (0, 0));
}

async fn idempotency_keys_are_per_tenant(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let (a, b) = (
        create(&env, "a", |_| {}).await,
        create(&env, "b", |_| {}).await,
    );
    let key = Some("rollout-1");
    let first_a = env
        .broker
        .submit(
            &a.id,
            spec_with("a", crucible_shared::Priority::Normal, key),
        )
        .await
        .unwrap();
    // The same key from another tenant is another task, never a's.
    let first_b = env
        .broker
        .submit(
            &b.id,
            spec_with("b", crucible_shared::Priority::Normal, key),
        )
        .await
        .unwrap();
    assert_ne!(first_a.task_id, first_b.task_id);
    assert!(!first_b.deduplicated);
    for (tenant, first) in [(&a, &first_a), (&b, &first_b)] {
        let again = env
            .broker
            .submit(
                &tenant.id,
                spec_with("other", crucible_shared::Priority::Normal, key),
            )
            .await
            .unwrap();
        assert_eq!(again.task_id, first.task_id);
        assert!(again.deduplicated);
    }
    let (_, in_batch) = env
        .broker
        .submit_batch(
            &admin(),
            vec![spec_with("c", crucible_shared::Priority::Normal, key)],
        )
        .await
        .unwrap();
    assert!(!in_batch[0].deduplicated);
    assert_ne!(in_batch[0].task_id, first_a.task_id);
    assert_ne!(in_batch[0].task_id, first_b.task_id);
}

async fn results_and_open_tasks_are_never_shared_across_tenants(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let (a, b) = (
        create(&env, "a", |_| {}).await,
        create(&env, "b", |_| {}).await,
    );
    // a's result is cached for a only.
    let done = env.broker.submit(&a.id, spec("x")).await.unwrap();
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease.task_id, done.task_id);
    env.broker.complete(&lease, verdict("a's")).await.unwrap();
    let b_x = env.broker.submit(&b.id, spec("x")).await.unwrap();
    assert!(!b_x.cached && !b_x.coalesced, "{b_x:?}");
    assert_eq!(b_x.status, TaskStatus::Queued);
    let builtin_x = env.broker.submit(&admin(), spec("x")).await.unwrap();
    assert!(!builtin_x.cached && !builtin_x.coalesced);
    let a_x = env.broker.submit(&a.id, spec("x")).await.unwrap();
    assert!(a_x.cached);
    assert_eq!(
        env.view(&a_x.task_id)
            .await
            .result
            .unwrap()
            .error_message
            .as_deref(),
        Some("a's")
    );

    // An open task of a is joined by a alone.
    let open = env.broker.submit(&a.id, spec("y")).await.unwrap();
    let b_y = env.broker.submit(&b.id, spec("y")).await.unwrap();
    assert!(!b_y.coalesced);
    assert_ne!(b_y.task_id, open.task_id);
    let a_y = env.broker.submit(&a.id, spec("y")).await.unwrap();
    assert!(a_y.coalesced);
    assert_eq!(a_y.task_id, open.task_id);

    // b's own evaluation of x lands in b's cache, a's stays a's.
    let mut leases = HashMap::new();
    while let Some(l) = env
        .broker
        .claim(&worker(1), &h100(), std::time::Duration::ZERO)
        .await
        .unwrap()
    {
        leases.insert(l.task_id.clone(), l);
    }
    env.broker
        .complete(&leases[&b_x.task_id], verdict("b's"))
        .await
        .unwrap();
    let b_again = env.broker.submit(&b.id, spec("x")).await.unwrap();
    assert!(b_again.cached);
    assert_eq!(
        env.view(&b_again.task_id)
            .await
            .result
            .unwrap()
            .error_message
            .as_deref(),
        Some("b's")
    );
    let a_again = env.broker.submit(&a.id, spec("x")).await.unwrap();
    assert_eq!(
        env.view(&a_again.task_id)
            .await
            .result
            .unwrap()
            .error_message
            .as_deref(),
        Some("a's")
    );
}

async fn tenants_that_share_the_cache_share_results_but_not_tasks(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let s1 = create(&env, "s1", |r| r.share_cache = true).await;
    let s2 = create(&env, "s2", |r| r.share_cache = true).await;
    let own = create(&env, "own", |_| {}).await;
    env.broker.submit(&s1.id, spec("x")).await.unwrap();
    let lease = claim_now(&env.broker, &worker(1)).await;
    env.broker
        .complete(&lease, verdict("shared"))
        .await
        .unwrap();

    let hit = env.broker.submit(&s2.id, spec("x")).await.unwrap();
    assert!(hit.cached, "{hit:?}");
    assert_eq!(
        env.broker.task_tenant(&hit.task_id).await.unwrap(),
        Some(s2.id.clone())
    );
    for outsider in [&own.id, &admin()] {
        let miss = env.broker.submit(outsider, spec("x")).await.unwrap();
        assert!(!miss.cached, "{miss:?}");
    }
    // Open tasks stay their tenant's own, sharing or not.
    let open = env.broker.submit(&s1.id, spec("y")).await.unwrap();
    let other = env.broker.submit(&s2.id, spec("y")).await.unwrap();
    assert!(!other.coalesced);
    assert_ne!(other.task_id, open.task_id);
}

async fn max_queued_refuses_what_would_pass_the_quota(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let a = create(&env, "a", |r| r.max_queued = Some(3)).await;
    let b = create(&env, "b", |_| {}).await;
    let queued = fill(&env, &a.id, "a", 3).await;
    let refused = env.broker.submit(&a.id, spec("a-3")).await;
    assert!(
        matches!(
            refused,
            Err(BrokerError::QuotaExceeded {
                queued: 3,
                max_queued: 3
            })
        ),
        "{refused:?}"
    );
    // All or nothing: a batch that would pass the quota queues none of its tasks.
    let refused = env
        .broker
        .submit_batch(&a.id, vec![spec("a-4"), spec("a-5")])
        .await;
    assert!(matches!(refused, Err(BrokerError::QuotaExceeded { .. })));
    assert_eq!(env.broker.queue_status().await.unwrap().queued(), 3);
    // Joining a's own open task adds nothing to the queue, so it is answered at the quota.
    let joined = env.broker.submit(&a.id, spec("a-0-0")).await;
    assert!(matches!(joined, Err(BrokerError::QuotaExceeded { .. })));
    let joined = env.broker.submit(&a.id, spec("a-0")).await.unwrap();
    assert!(joined.coalesced);
    assert_eq!(joined.task_id, queued[0]);
    // Other tenants are not held back by a's quota.
    fill(&env, &b.id, "b", 5).await;

    // A started task frees a place (a's first claim within two: b may be served first);
    // cancelling a queued one does too.
    for _ in 0..2 {
        if queued.contains(&claim_now(&env.broker, &worker(1)).await.task_id) {
            break;
        }
    }
    env.broker.submit(&a.id, spec("a-3")).await.unwrap();
    env.broker.cancel(&queued[2]).await.unwrap();
    env.broker.submit(&a.id, spec("a-4")).await.unwrap();
    assert!(matches!(
        env.broker.submit(&a.id, spec("a-5")).await,
        Err(BrokerError::QuotaExceeded { .. })
    ));
}

async fn a_small_tenant_finishes_in_the_first_half(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let big = create(&env, "big", |_| {}).await;
    let small = create(&env, "small", |_| {}).await;
    let big_tasks = fill(&env, &big.id, "big", 200).await;
    let small_tasks = fill(&env, &small.id, "small", 10).await;
    let order = claim_all(&env.broker).await;
    assert_eq!(order.len(), 210);
    let positions: Vec<usize> = small_tasks
        .iter()
        .map(|t| order.iter().position(|o| o == t).expect("claimed"))
        .collect();
    assert!(
        positions.iter().all(|p| *p < order.len() / 2),
        "the small tenant's tasks were claimed at {positions:?} of {}",
        order.len()
    );
    // Alternating at equal weights: all of it within the first 20 claims.
    assert!(positions.iter().all(|p| *p < 20), "{positions:?}");
    // Each tenant's own tasks keep their order.
    let big_order: Vec<&TaskId> = order.iter().filter(|t| big_tasks.contains(t)).collect();
    assert_eq!(big_order, big_tasks.iter().collect::<Vec<_>>());
}

async fn weights_divide_the_claims(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let heavy = create(&env, "heavy", |r| r.weight = Some(3)).await;
    let light = create(&env, "light", |_| {}).await;
    let heavy_tasks = fill(&env, &heavy.id, "h", 60).await;
    fill(&env, &light.id, "l", 60).await;
    let order = claim_all(&env.broker).await;
    let heavy_in_first_40 = order[..40]
        .iter()
        .filter(|t| heavy_tasks.contains(t))
        .count();
    assert!(
        (29..=31).contains(&heavy_in_first_40),
        "weight 3 against 1 got {heavy_in_first_40} of the first 40 claims"
    );
}

async fn an_idle_tenant_banks_no_credit(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let early = create(&env, "early", |_| {}).await;
    let late = create(&env, "late", |_| {}).await;
    fill(&env, &early.id, "e", 40).await;
    for _ in 0..20 {
        claim_now(&env.broker, &worker(1)).await;
    }
    // `late` was idle while `early` was served 20 times: it starts level, not 20 ahead.
    let late_tasks = fill(&env, &late.id, "l", 40).await;
    let mut late_claims = 0;
    for _ in 0..10 {
        let lease = claim_now(&env.broker, &worker(1)).await;
        late_claims += usize::from(late_tasks.contains(&lease.task_id));
    }
    assert!(
        (4..=6).contains(&late_claims),
        "late got {late_claims} of 10"
    );
}

async fn deleting_a_tenant_cancels_its_open_tasks(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let gone = create(&env, "gone", |_| {}).await;
    let stays = create(&env, "stays", |_| {}).await;
    let gone_tasks = fill(&env, &gone.id, "g", 3).await;
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease.task_id, gone_tasks[0]);
    let stays_tasks = fill(&env, &stays.id, "s", 2).await;

    let deleted = env.broker.delete_tenant("gone").await.unwrap().unwrap();
    assert_eq!(
        (
            deleted.name.as_str(),
            deleted.cancelled_queued,
            deleted.cancelled_running
        ),
        ("gone", 2, 1)
    );
    for id in &gone_tasks {
        let view = env.view(id).await;
        assert_eq!(view.status, TaskStatus::Cancelled, "{id}");
        assert!(
            view.error
                .as_deref()
                .unwrap_or("")
                .contains("tenant gone was deleted"),
            "{view:?}"
        );
    }
    // Its worker learns at its next renewal, and its result would not be accepted.
    assert_eq!(
        env.broker.renew(&lease).await.unwrap(),
        LeaseState::Cancelled
    );
    // Only the other tenant's work is left.
    assert_eq!(claim_all(&env.broker).await, stays_tasks);
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!((q.queued(), q.running, q.cancelled_total), (0, 2, 3));
    let loads = env.broker.tenant_loads().await.unwrap();
    assert!(loads.iter().all(|l| l.id != gone.id), "{loads:?}");
}

async fn deleting_a_big_tenant_cancels_every_queued_task(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let big = create(&env, "big", |_| {}).await;
    let mut tasks = fill(&env, &big.id, "a", 1000).await;
    tasks.extend(fill(&env, &big.id, "b", 300).await);
    let deleted = env.broker.delete_tenant("big").await.unwrap().unwrap();
    assert_eq!(deleted.cancelled_queued, 1300);
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!((q.queued(), q.cancelled_total), (0, 1300));
    for id in [&tasks[0], &tasks[999], &tasks[1299]] {
        assert_eq!(env.view(id).await.status, TaskStatus::Cancelled);
    }
    assert_eq!(
        env.broker
            .claim(&worker(1), &h100(), std::time::Duration::ZERO)
            .await
            .unwrap(),
        None
    );
}

async fn loads_count_open_tasks_per_tenant(backend: Backend) {
    let cfg = BrokerConfig {
        queue_cap: 100,
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    assert_eq!(env.broker.tenant_loads().await.unwrap(), vec![]);
    let a = create(&env, "a", |_| {}).await;
    let b = create(&env, "b", |_| {}).await;
    fill(&env, &a.id, "a", 1).await;
    claim_now(&env.broker, &worker(1)).await;
    fill(&env, &a.id, "a2", 2).await;
    fill(&env, &b.id, "b", 1).await;
    env.broker.submit(&admin(), spec("own")).await.unwrap();
    let loads: HashMap<TenantId, (Option<String>, u64, u64)> = env
        .broker
        .tenant_loads()
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.id, (l.name, l.queued, l.running)))
        .collect();
    assert_eq!(loads[&a.id], (Some("a".to_owned()), 2, 1));
    assert_eq!(loads[&b.id], (Some("b".to_owned()), 1, 0));
    assert_eq!(loads[&admin()], (Some("admin".to_owned()), 1, 0));
    assert_eq!(loads.len(), 3);
    // The queue cap counts every tenant's tasks.
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!((q.queued(), q.running), (4, 1));
}
