//! The key-value cache's put-if-absent: exactly one of many racing callers stores its value,
//! the others read it back; a live value is never replaced; an expired one is absent.

use crate::common::*;
use crucible_task_manager::KvNamespace;
use std::time::Duration;

contract!(
    kv_put_if_absent_stores_once_and_answers_what_is_there,
    kv_put_if_absent_has_one_winner_among_racing_nodes,
    kv_put_if_absent_treats_an_expired_value_as_absent,
);

const LONG: Duration = Duration::from_secs(600);
const NS: KvNamespace = KvNamespace::Episodes;

async fn kv_put_if_absent_stores_once_and_answers_what_is_there(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let b = &env.broker;
    assert_eq!(
        b.kv_put_if_absent(NS, "e_1:0", "first", LONG)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        b.kv_put_if_absent(NS, "e_1:0", "second", LONG)
            .await
            .unwrap()
            .as_deref(),
        Some("first")
    );
    assert_eq!(
        b.kv_get(NS, "e_1:0").await.unwrap().as_deref(),
        Some("first")
    );
    // Another key, and the same key in another namespace, are their own.
    assert_eq!(
        b.kv_put_if_absent(NS, "e_1:1", "x", LONG).await.unwrap(),
        None
    );
    assert_eq!(
        b.kv_put_if_absent(KvNamespace::Rollouts, "e_1:0", "y", LONG)
            .await
            .unwrap(),
        None
    );
    // A plain put still replaces it (the API rewrites a failed turn's record on a retry).
    b.kv_put(NS, "e_1:0", "third", LONG).await.unwrap();
    assert_eq!(
        b.kv_put_if_absent(NS, "e_1:0", "fourth", LONG)
            .await
            .unwrap()
            .as_deref(),
        Some("third")
    );
    if let Some(mut raw) = env.raw().await {
        let ttl: i64 = ::redis::cmd("PTTL")
            .arg(format!("{}:kv:8:episodes:e_1:1", env.cfg.key_prefix))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(ttl > 0, "no ttl ({ttl})");
    }
}

async fn kv_put_if_absent_has_one_winner_among_racing_nodes(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let mut racers = tokio::task::JoinSet::new();
    for i in 0..8 {
        let node = env.peer();
        racers.spawn(async move {
            let value = format!("v{i}");
            let answer = node
                .kv_put_if_absent(NS, "race", &value, LONG)
                .await
                .unwrap();
            (value, answer)
        });
    }
    let mut answers = Vec::new();
    while let Some(joined) = racers.join_next().await {
        answers.push(joined.unwrap());
    }
    let winners: Vec<&String> = answers
        .iter()
        .filter(|(_, a)| a.is_none())
        .map(|(v, _)| v)
        .collect();
    assert_eq!(winners.len(), 1, "{answers:?}");
    let stored = winners[0].clone();
    for (_, a) in &answers {
        assert!(a.is_none() || a.as_ref() == Some(&stored), "{answers:?}");
    }
    assert_eq!(env.broker.kv_get(NS, "race").await.unwrap(), Some(stored));
}

async fn kv_put_if_absent_treats_an_expired_value_as_absent(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let b = &env.broker;
    let short = Duration::from_millis(150);
    assert_eq!(
        b.kv_put_if_absent(NS, "k", "old", short).await.unwrap(),
        None
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        b.kv_put_if_absent(NS, "k", "new", LONG).await.unwrap(),
        None
    );
    assert_eq!(b.kv_get(NS, "k").await.unwrap().as_deref(), Some("new"));
}
