//! Priorities: high before normal before low, low never starved, FIFO within a priority.

use crate::common::*;
use crucible_shared::{Priority, TaskSpec};

contract!(
    high_before_normal_before_low,
    low_is_not_starved,
    fifo_within_priority,
);

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
