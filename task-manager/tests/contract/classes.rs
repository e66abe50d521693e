//! Device classes: a task with a class is claimed only by workers of that class, a task without
//! one by anyone; each class's claims keep the tenants' fair share and the priority cycle; a
//! requeued task goes back to its class; the queue view counts each class and flags those no
//! live worker can serve.

use crate::common::*;
use crucible_shared::{Priority, TaskId, TaskSpec, TaskStatus, TenantId, WorkerState};
use crucible_task_manager::{AckOutcome, Broker};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

contract!(
    a_worker_claims_only_its_class_and_tasks_of_none,
    tasks_without_a_class_go_to_any_worker,
    within_a_priority_the_first_queued_goes_first,
    each_class_shares_its_claims_fairly_between_tenants,
    priorities_still_apply_within_a_class,
    a_requeued_task_goes_back_to_its_class,
    a_blocked_claimer_wakes_only_for_work_it_can_take,
    cancel_and_tenant_deletion_reach_every_class,
    the_queue_view_counts_classes_and_flags_the_unservable,
);

/// A task of class `class` (`None`: any worker).
fn on(tag: &str, class_name: Option<&str>) -> TaskSpec {
    let mut s = spec(tag);
    s.request.device_class = class_name.map(class);
    s
}

async fn submit(env: &Env, tenant: &TenantId, s: TaskSpec) -> TaskId {
    env.broker.submit(tenant, s).await.unwrap().task_id
}

/// Claims for a worker of `class_name` without waiting.
async fn claim_as(broker: &Arc<dyn Broker>, class_name: &str) -> Option<TaskId> {
    broker
        .claim(&worker(7), &class(class_name), Duration::ZERO)
        .await
        .unwrap()
        .map(|lease| lease.task_id)
}

/// Every task a worker of `class_name` can take now, in claim order.
async fn drain_as(broker: &Arc<dyn Broker>, class_name: &str) -> Vec<TaskId> {
    let mut out = Vec::new();
    while let Some(id) = claim_as(broker, class_name).await {
        out.push(id);
    }
    out
}

/// `n` new tasks of `tenant` for `class_name`, in one batch.
async fn fill_class(
    env: &Env,
    tenant: &TenantId,
    class_name: Option<&str>,
    n: usize,
) -> Vec<TaskId> {
    // Distinct from every earlier task: an identical one would join an open task instead.
    let tag = format!(
        "{tenant}-{}-{}",
        class_name.unwrap_or("any"),
        uuid::Uuid::new_v4()
    );
    let specs = (0..n)
        .map(|i| on(&format!("{tag}-{i}"), class_name))
        .collect();
    let (_, subs) = env.broker.submit_batch(tenant, specs).await.unwrap();
    subs.into_iter().map(|s| s.task_id).collect()
}

async fn a_worker_claims_only_its_class_and_tasks_of_none(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let h = submit(&env, &admin(), on("h", Some("h100"))).await;
    let c = submit(&env, &admin(), on("c", Some("cpu"))).await;
    let any = submit(&env, &admin(), on("any", None)).await;
    // A cpu worker takes its own and the unclassed one, never the h100 task.
    assert_eq!(drain_as(&env.broker, "cpu").await, [c, any.clone()]);
    assert_eq!(env.view(&h).await.status, TaskStatus::Queued);
    assert_eq!(claim_as(&env.broker, "a100").await, None);
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease.task_id, h);
    assert_eq!(
        lease.spec.request.device_class.as_ref().map(|c| c.as_str()),
        Some("h100")
    );
    // The task's view says what it must run on.
    assert_eq!(env.view(&h).await.device_class, Some(h100()));
    assert_eq!(env.view(&any).await.device_class, None);
}

async fn tasks_without_a_class_go_to_any_worker(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let ids = fill_class(&env, &admin(), None, 6).await;
    let mut claimed = Vec::new();
    for class_name in ["cpu", "h100", "a100", "cpu", "h100", "a100"] {
        claimed.push(
            claim_as(&env.broker, class_name)
                .await
                .expect("a task for anyone"),
        );
    }
    assert_eq!(claimed, ids);
    assert_eq!(claim_as(&env.broker, "cpu").await, None);
}

async fn within_a_priority_the_first_queued_goes_first(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let mut ids = Vec::new();
    for (i, class_name) in [None, Some("h100"), None, Some("h100"), Some("h100"), None]
        .into_iter()
        .enumerate()
    {
        ids.push(submit(&env, &admin(), on(&format!("t{i}"), class_name)).await);
    }
    // The class's queue and the unclassed one are served as one FIFO.
    assert_eq!(drain_as(&env.broker, "h100").await, ids);
}

async fn each_class_shares_its_claims_fairly_between_tenants(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let big = create(&env, "big", |_| {}).await.id;
    let small = create(&env, "small", |_| {}).await.id;
    fill_class(&env, &big, Some("h100"), 100).await;
    let small_h100 = fill_class(&env, &small, Some("h100"), 10).await;
    // The small tenant's ten come within the first twenty claims, as without classes.
    let order = drain_as(&env.broker, "h100").await;
    assert_eq!(order.len(), 110);
    let positions: Vec<usize> = small_h100
        .iter()
        .map(|t| order.iter().position(|o| o == t).expect("claimed"))
        .collect();
    assert!(positions.iter().all(|p| *p < 20), "{positions:?}");

    // big's use of the h100s costs it nothing on the cpu workers: each class keeps its own
    // passes. It has h100 work left while both queue for the cpu.
    fill_class(&env, &big, Some("h100"), 30).await;
    for _ in 0..20 {
        claim_as(&env.broker, "h100").await.unwrap();
    }
    let big_cpu = fill_class(&env, &big, Some("cpu"), 10).await;
    fill_class(&env, &small, Some("cpu"), 10).await;
    let order = drain_as(&env.broker, "cpu").await;
    let big_first = order[..10].iter().filter(|t| big_cpu.contains(t)).count();
    assert_eq!(big_first, 5, "{order:?}");

    // Tasks of no class enter a class's share as any new work does: level with the others.
    let small_any = fill_class(&env, &small, None, 10).await;
    let order = drain_as(&env.broker, "h100").await;
    let small_first = order[..10].iter().filter(|t| small_any.contains(t)).count();
    assert!((4..=6).contains(&small_first), "{order:?}");
}

async fn priorities_still_apply_within_a_class(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let s = |tag: &str, class_name: Option<&str>, priority| {
        let mut s = on(tag, class_name);
        s.request.priority = priority;
        s
    };
    let low = submit(&env, &admin(), s("l", Some("h100"), Priority::Low)).await;
    let normal = submit(&env, &admin(), s("n", None, Priority::Normal)).await;
    let high = submit(&env, &admin(), s("h", Some("h100"), Priority::High)).await;
    assert_eq!(drain_as(&env.broker, "h100").await, [high, normal, low]);
    // Low is not starved by a class's high work either.
    let specs: Vec<TaskSpec> = (0..20)
        .map(|i| s(&format!("h{i}"), Some("h100"), Priority::High))
        .collect();
    env.broker.submit_batch(&admin(), specs).await.unwrap();
    let low = submit(&env, &admin(), s("l2", None, Priority::Low)).await;
    let mut claimed = Vec::new();
    for _ in 0..7 {
        claimed.push(claim_as(&env.broker, "h100").await.unwrap());
    }
    assert!(claimed.contains(&low), "low not among the first 7 claims");
}

async fn a_requeued_task_goes_back_to_its_class(backend: Backend) {
    let cfg = crucible_shared::BrokerConfig {
        lease_ttl: Duration::from_millis(300),
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    let h = submit(&env, &admin(), on("h", Some("h100"))).await;
    let any = submit(&env, &admin(), on("any", None)).await;
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease.task_id, h);
    // Released by its worker: back to the h100 queue, out of a cpu worker's reach.
    assert_eq!(
        env.broker.release(&lease, "device lost").await.unwrap(),
        AckOutcome::Accepted
    );
    let other = env
        .broker
        .claim(&worker(2), &class("cpu"), Duration::ZERO)
        .await
        .unwrap()
        .expect("the task of no class");
    assert_eq!(other.task_id, any);
    env.broker.complete(&other, verdict("ok")).await.unwrap();
    assert_eq!(claim_as(&env.broker, "cpu").await, None);
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!((lease.task_id.clone(), lease.attempt), (h.clone(), 2));
    // Expired and reaped: the same.
    let report = reap_until(&env.broker, "the lease to expire").await;
    assert!(report.requeued >= 1, "{report:?}");
    assert_eq!(claim_as(&env.broker, "cpu").await, None);
    let view = env.view(&h).await;
    assert_eq!(
        (view.status, view.device_class),
        (TaskStatus::Queued, Some(h100()))
    );
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!((lease.task_id, lease.attempt), (h, 3));
}

async fn a_blocked_claimer_wakes_only_for_work_it_can_take(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let (cpu, gpu) = (class("cpu"), h100());
    let (w_cpu, w_gpu) = (worker(1), worker(2));
    let mut cpu_claim = Box::pin(env.broker.claim(&w_cpu, &cpu, Duration::from_secs(30)));
    env.block(&mut cpu_claim).await;
    let mut gpu_claim = Box::pin(env.broker.claim(&w_gpu, &gpu, Duration::from_secs(30)));
    env.block(&mut gpu_claim).await;

    let h = submit(&env, &admin(), on("h", Some("h100"))).await;
    let lease = tokio::time::timeout(Duration::from_secs(5), gpu_claim)
        .await
        .expect("the h100 claimer woke")
        .unwrap()
        .expect("and got the task");
    assert_eq!(lease.task_id, h);
    // The cpu claimer is still waiting, and a task of no class wakes it.
    let any = submit(&env, &admin(), on("any", None)).await;
    let lease = tokio::time::timeout(Duration::from_secs(5), cpu_claim)
        .await
        .expect("the cpu claimer woke")
        .unwrap()
        .expect("and got the task of no class");
    assert_eq!(lease.task_id, any);
}

async fn cancel_and_tenant_deletion_reach_every_class(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let cancelled = submit(&env, &admin(), on("c", Some("h100"))).await;
    env.broker.cancel(&cancelled).await.unwrap();
    assert_eq!(claim_as(&env.broker, "h100").await, None);

    let gone = create(&env, "gone", |_| {}).await.id;
    let mut tasks = fill_class(&env, &gone, Some("h100"), 3).await;
    tasks.extend(fill_class(&env, &gone, None, 3).await);
    tasks.extend(fill_class(&env, &gone, Some("a100"), 2).await);
    // A cpu worker has claimed before, so the tenant is in the cpu share too.
    let running = claim_as(&env.broker, "cpu")
        .await
        .expect("a task of no class");
    let deleted = env.broker.delete_tenant("gone").await.unwrap().unwrap();
    assert_eq!(
        (deleted.cancelled_queued, deleted.cancelled_running),
        (7, 1)
    );
    assert!(tasks.contains(&running));
    for class_name in ["h100", "cpu", "a100"] {
        assert_eq!(
            claim_as(&env.broker, class_name).await,
            None,
            "{class_name}"
        );
    }
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!(q.queued(), 0);
    let rows = q.classes.expect("classes");
    assert!(rows.iter().all(|r| r.queued == 0), "{rows:?}");
    // The tenant is gone from every class's share: new work of others is served at once.
    let fresh = submit(&env, &admin(), on("after", None)).await;
    assert_eq!(claim_as(&env.broker, "cpu").await, Some(fresh));
}

async fn the_queue_view_counts_classes_and_flags_the_unservable(backend: Backend) {
    let env = Env::start(backend, config()).await;
    fill_class(&env, &admin(), Some("h100"), 2).await;
    fill_class(&env, &admin(), Some("a100"), 1).await;
    fill_class(&env, &admin(), None, 3).await;
    let rows = |q: crucible_shared::QueueStatus| -> HashSet<(Option<String>, u64, u64, bool)> {
        q.classes
            .expect("classes")
            .into_iter()
            .map(|r| {
                let name = r.device_class.map(|c| c.as_str().to_owned());
                (name, r.queued, r.workers, r.unservable)
            })
            .collect()
    };
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!((q.queued(), q.queued_normal), (6, 6));
    let h100_name = || Some("h100".to_owned());
    assert_eq!(
        rows(q),
        [
            (None, 3, 0, true),
            (h100_name(), 2, 0, true),
            (Some("a100".to_owned()), 1, 0, true)
        ]
        .into()
    );
    // An h100 worker registers: its class and the unclassed tasks can be served now.
    env.broker
        .worker_heartbeat(&worker_info(&worker(1), WorkerState::Idle))
        .await
        .unwrap();
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!(
        rows(q),
        [
            (None, 3, 1, false),
            (h100_name(), 2, 1, false),
            (Some("a100".to_owned()), 1, 0, true)
        ]
        .into()
    );
    // Its claims move the counts; the a100 task waits, never lost.
    assert_eq!(drain_as(&env.broker, "h100").await.len(), 5);
    let q = env.broker.queue_status().await.unwrap();
    assert_eq!(
        rows(q),
        [
            (h100_name(), 0, 1, false),
            (Some("a100".to_owned()), 1, 0, true)
        ]
        .into()
    );
    // A submission for a class is the broker's to accept: the API checks for live workers.
    let late = env.broker.submit(&admin(), on("late", Some("l4"))).await;
    assert_eq!(late.unwrap().status, TaskStatus::Queued);
}
