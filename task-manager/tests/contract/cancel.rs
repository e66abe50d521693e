//! Cancelling a batch: every open task ends `cancelled` (queued ones never run, running ones'
//! workers learn it at renewal), finished ones are left alone, each distinct task is counted
//! once, a large batch crosses the Redis broker's chunks, and the queue stays usable.

use crate::common::*;
use crucible_shared::{BatchCancelCounts, BatchId, Priority, TaskStatus};
use crucible_task_manager::{AckOutcome, CancelOutcome, LeaseState};
use std::time::Duration;

contract!(
    cancel_batch_ends_open_tasks_and_counts_each_once,
    cancel_batch_of_many_tasks_leaves_the_queue_usable,
);

async fn cancel_batch_ends_open_tasks_and_counts_each_once(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let (batch, subs) = env
        .broker
        .submit_batch(
            &admin(),
            vec![
                spec_with("run", Priority::High, None),
                spec_with("done", Priority::High, None),
                // Low: the first two claims find the high tasks first.
                spec_with("q1", Priority::Low, None),
                spec_with("q1", Priority::Low, None),
                spec_with("q2", Priority::Low, None),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        subs[3].task_id, subs[2].task_id,
        "identical specs share a task"
    );
    let running = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(running.task_id, subs[0].task_id);
    let done = claim_now(&env.broker, &worker(2)).await;
    assert_eq!(done.task_id, subs[1].task_id);
    env.broker.complete(&done, verdict("ok")).await.unwrap();

    let counts = env.broker.cancel_batch(&batch).await.unwrap();
    assert_eq!(
        counts,
        Some(BatchCancelCounts {
            cancelled_queued: 2,
            cancelled_running: 1,
            already_finished: 1,
        })
    );
    for sub in [&subs[0], &subs[2], &subs[4]] {
        let view = env.view(&sub.task_id).await;
        assert_eq!(view.status, TaskStatus::Cancelled, "{view:?}");
        assert_eq!(view.result, None);
        let error = view.error.expect("a cancelled task says why");
        assert!(error.contains(batch.as_str()), "{error}");
        assert!(view.finished_at.is_some());
    }
    let finished = env.view(&subs[1].task_id).await;
    assert_eq!(finished.status, TaskStatus::Done);
    assert_eq!(finished.result, Some(verdict("ok")));

    // The running task's worker learns it at its next renewal, and its verdict is refused.
    assert_eq!(
        env.broker.renew(&running).await.unwrap(),
        LeaseState::Cancelled
    );
    assert_eq!(
        env.broker
            .complete(&running, verdict("late"))
            .await
            .unwrap(),
        AckOutcome::Stale
    );
    // Queued tasks never run; nothing is counted open any more.
    assert_eq!(
        env.broker
            .claim(
                &worker(3),
                &crucible_shared::DeviceClass::cpu(),
                Duration::ZERO
            )
            .await
            .unwrap(),
        None
    );
    let queue = env.broker.queue_status().await.unwrap();
    assert_eq!((queue.queued(), queue.running), (0, 0));
    assert_eq!((queue.done_total, queue.cancelled_total), (1, 3));
    assert!(env.broker.tenant_loads().await.unwrap().is_empty());

    let status = env
        .broker
        .batch_status(&batch, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            status.counts.queued,
            status.counts.running,
            status.counts.done
        ),
        (0, 0, 1)
    );
    // The batch counts the shared task twice, as it does for every status.
    assert_eq!(status.counts.cancelled, 4);
    let log = env
        .broker
        .batch_finished(&batch, 0, 100, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (log.finished, log.distinct),
        (4, 4),
        "every task logged once"
    );

    // Again: nothing is open, so everything is already finished, and a single cancel agrees.
    assert_eq!(
        env.broker.cancel_batch(&batch).await.unwrap(),
        Some(BatchCancelCounts {
            cancelled_queued: 0,
            cancelled_running: 0,
            already_finished: 4,
        })
    );
    assert_eq!(
        env.broker.cancel(&subs[2].task_id).await.unwrap(),
        CancelOutcome::AlreadyFinished(TaskStatus::Cancelled)
    );
    assert_eq!(
        env.broker.cancel_batch(&BatchId::random()).await.unwrap(),
        None
    );
}

async fn cancel_batch_of_many_tasks_leaves_the_queue_usable(backend: Backend) {
    let env = Env::start(backend, config()).await;
    // More tasks than one chunk of the Redis broker's script calls, twice over.
    const TASKS: usize = 450;
    let before = env
        .broker
        .submit(&admin(), spec("queued before"))
        .await
        .unwrap();
    let specs = (0..TASKS).map(|i| spec(&format!("many {i}"))).collect();
    let (batch, subs) = env.broker.submit_batch(&admin(), specs).await.unwrap();
    let first = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(first.task_id, before.task_id);
    let second = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(second.task_id, subs[0].task_id);

    let counts = env.broker.cancel_batch(&batch).await.unwrap().unwrap();
    assert_eq!(
        counts,
        BatchCancelCounts {
            cancelled_queued: TASKS as u64 - 1,
            cancelled_running: 1,
            already_finished: 0,
        }
    );
    let last = env.view(&subs[TASKS - 1].task_id).await;
    assert_eq!(last.status, TaskStatus::Cancelled);
    assert_eq!(env.broker.queue_status().await.unwrap().queued(), 0);

    // Work queued afterwards is claimed at once, past whatever the cancel left behind, and the
    // task claimed before the cancel is still its worker's to finish.
    let after = env
        .broker
        .submit(&admin(), spec("queued after"))
        .await
        .unwrap();
    let next = claim_now(&env.broker, &worker(2)).await;
    assert_eq!(next.task_id, after.task_id);
    assert_eq!(
        env.broker
            .claim(
                &worker(2),
                &crucible_shared::DeviceClass::cpu(),
                Duration::ZERO
            )
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        env.broker.complete(&first, verdict("ok")).await.unwrap(),
        AckOutcome::Accepted
    );
    let queue = env.broker.queue_status().await.unwrap();
    assert_eq!((queue.queued(), queue.running), (0, 1));
    assert_eq!(queue.cancelled_total, TASKS as u64);
}
