//! Drains asked of workers: a registered worker asked to drain hears it in its heartbeat's
//! answer (from any replica), others do not, an unknown worker cannot be asked, and a worker
//! that deregisters takes its drain with it.

use crate::common::*;
use crucible_shared::{WorkerId, WorkerState};
use crucible_task_manager::HeartbeatAnswer;

contract!(
    a_drain_is_answered_to_that_worker_alone,
    an_unregistered_worker_cannot_be_drained,
);

async fn a_drain_is_answered_to_that_worker_alone(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let api = env.peer();
    let (w1, w2) = (worker(1), worker(2));
    let idle = |w: &WorkerId| worker_info(w, WorkerState::Idle);
    let quiet = HeartbeatAnswer { drain: false };
    assert_eq!(
        env.broker.worker_heartbeat(&idle(&w1)).await.unwrap(),
        quiet
    );
    assert_eq!(
        env.broker.worker_heartbeat(&idle(&w2)).await.unwrap(),
        quiet
    );

    assert!(api.drain_worker(&w1).await.unwrap(), "a registered worker");
    let told = env.broker.worker_heartbeat(&idle(&w1)).await.unwrap();
    assert!(told.drain, "the drained worker hears it");
    assert!(
        env.broker
            .worker_heartbeat(&worker_info(&w1, WorkerState::Draining))
            .await
            .unwrap()
            .drain,
        "and keeps hearing it until it deregisters"
    );
    assert_eq!(
        env.broker.worker_heartbeat(&idle(&w2)).await.unwrap(),
        quiet,
        "another worker does not"
    );
    let listed = api.list_workers().await.unwrap();
    let shown = listed.iter().find(|w| w.worker_id == w1).unwrap();
    assert_eq!(shown.state, WorkerState::Draining, "its own report");

    env.broker.deregister_worker(&w1).await.unwrap();
    // The same id registering again (not done by real workers, whose ids are fresh per
    // process) starts with no drain: the deregistration took it away.
    assert_eq!(
        env.broker.worker_heartbeat(&idle(&w1)).await.unwrap(),
        quiet
    );
}

async fn an_unregistered_worker_cannot_be_drained(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let ghost = worker(9);
    assert!(!env.broker.drain_worker(&ghost).await.unwrap());
    // Nor does the refused request wait for it: it registers undrained.
    let answer = env
        .broker
        .worker_heartbeat(&worker_info(&ghost, WorkerState::Idle))
        .await
        .unwrap();
    assert!(!answer.drain);
}
