//! The reaper lease: one holder at a time, renewed by its holder, taken over once it expires,
//! given up by its holder only.

use crate::common::*;
use crucible_shared::BrokerConfig;
use std::time::Duration;
use tokio::time::Instant;

contract!(
    reaper_lease_has_one_holder_until_it_expires,
    reaper_lease_is_released_by_its_holder_only,
);

const LONG: Duration = Duration::from_secs(30);

async fn reaper_lease_has_one_holder_until_it_expires(backend: Backend) {
    let env = Env::start(backend, BrokerConfig::default()).await;
    let (broker, peer) = (env.broker.clone(), env.peer());
    assert!(broker.reaper_lease("a", LONG).await.unwrap(), "free: taken");
    assert!(!peer.reaper_lease("b", LONG).await.unwrap(), "held by a");
    // Its holder renews it, here for a short while only.
    let short = Duration::from_millis(200);
    assert!(broker.reaper_lease("a", short).await.unwrap(), "renewed");
    assert!(
        !peer.reaper_lease("b", LONG).await.unwrap(),
        "still held by a"
    );
    // Once a's lease expires, b takes it over (polled: expiry is the broker's clock).
    let deadline = Instant::now() + POLL_DEADLINE;
    while !peer.reaper_lease("b", LONG).await.unwrap() {
        assert!(
            Instant::now() < deadline,
            "the expired lease was never taken over"
        );
        tokio::time::sleep(POLL_EVERY).await;
    }
    assert!(
        !broker.reaper_lease("a", LONG).await.unwrap(),
        "b holds it now"
    );
}

async fn reaper_lease_is_released_by_its_holder_only(backend: Backend) {
    let env = Env::start(backend, BrokerConfig::default()).await;
    let (broker, peer) = (env.broker.clone(), env.peer());
    assert!(broker.reaper_lease("a", LONG).await.unwrap());
    // Someone else's release changes nothing.
    peer.release_reaper_lease("b").await.unwrap();
    assert!(
        !peer.reaper_lease("b", LONG).await.unwrap(),
        "still held by a"
    );
    // The holder's hands it over at once.
    broker.release_reaper_lease("a").await.unwrap();
    assert!(
        peer.reaper_lease("b", LONG).await.unwrap(),
        "released: taken"
    );
    // Releasing a lease one does not hold is no error.
    broker.release_reaper_lease("a").await.unwrap();
    assert!(!broker.reaper_lease("a", LONG).await.unwrap(), "b holds it");
}
