//! Batches: counts by status through every transition, and the log of finished tasks.

use crate::common::*;
use crucible_shared::{BatchId, Priority, TaskId, TaskStatus};
use std::collections::HashSet;
use std::time::Duration;

contract!(
    batch_status_counts_every_transition,
    batch_finished_log_lists_each_task_once_in_finishing_order,
);

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
