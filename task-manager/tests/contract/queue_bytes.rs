//! The queue's byte budget: the spec bytes of open tasks are bounded by `queue_cap_bytes`,
//! counted at submission (only tasks that are queued anew) and given back when a task becomes
//! terminal, whichever way it gets there.

use crate::common::*;
use crucible_shared::BrokerConfig;
use crucible_task_manager::BrokerError;

contract!(queue_byte_budget_refuses_and_is_given_back_at_terminal);

async fn queue_byte_budget_refuses_and_is_given_back_at_terminal(backend: Backend) {
    // Tags of one length give specs of one JSON length.
    let one = serde_json::to_string(&spec("a")).unwrap().len() as u64;
    let cfg = BrokerConfig {
        queue_cap_bytes: 3 * one,
        ..config()
    };
    let env = Env::start(backend, cfg).await;
    let b = &env.broker;
    let a = b.submit(&admin(), spec("a")).await.unwrap().task_id;
    b.submit_batch(&admin(), vec![spec("b"), spec("c")])
        .await
        .unwrap();
    // Joining an open identical task queues nothing new, so it costs nothing.
    assert!(b.submit(&admin(), spec("a")).await.unwrap().coalesced);

    let refused = b.submit(&admin(), spec("d")).await;
    assert!(
        matches!(refused, Err(BrokerError::QueueBytesFull { bytes, cap_bytes })
            if bytes == 3 * one && cap_bytes == 3 * one),
        "{refused:?}"
    );
    let refused = b.submit_batch(&admin(), vec![spec("d")]).await;
    assert!(
        matches!(refused, Err(BrokerError::QueueBytesFull { .. })),
        "{refused:?}"
    );

    // Cancelled while queued: its bytes come back.
    b.cancel(&a).await.unwrap();
    b.submit(&admin(), spec("d")).await.unwrap();
    assert!(b.submit(&admin(), spec("e")).await.is_err());

    // Running still counts; done gives back.
    let lease = claim_now(b, &worker(1)).await;
    assert!(b.submit(&admin(), spec("e")).await.is_err());
    b.complete(&lease, verdict("ok")).await.unwrap();
    b.submit(&admin(), spec("e")).await.unwrap();
}
