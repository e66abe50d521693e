//! The key-value cache: puts and gets across nodes, TTLs, namespaces kept apart, and lookups
//! counted per namespace.

use crate::common::*;
use crucible_task_manager::{KvCounts, KvNamespace};
use std::time::Duration;

contract!(
    kv_put_then_get_and_overwrite,
    kv_values_expire_after_their_ttl,
    kv_namespaces_are_isolated,
    kv_lookups_are_counted_per_namespace,
);

const LONG: Duration = Duration::from_secs(600);

async fn ref_counters(env: &Env) -> (u64, u64) {
    let q = env.broker.queue_status().await.unwrap();
    (q.ref_cache_hits_total, q.ref_cache_misses_total)
}

async fn kv_put_then_get_and_overwrite(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let b = &env.broker;
    assert_eq!(b.kv_get(KvNamespace::Ref, "k1").await.unwrap(), None);
    b.kv_put(KvNamespace::Ref, "k1", r#"{"median":1.5}"#, LONG)
        .await
        .unwrap();
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "k1").await.unwrap().as_deref(),
        Some(r#"{"median":1.5}"#)
    );
    // Another node sees it; a second put replaces the value.
    let peer = env.peer();
    assert_eq!(
        peer.kv_get(KvNamespace::Ref, "k1")
            .await
            .unwrap()
            .as_deref(),
        Some(r#"{"median":1.5}"#)
    );
    peer.kv_put(KvNamespace::Ref, "k1", "second", LONG)
        .await
        .unwrap();
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "k1").await.unwrap().as_deref(),
        Some("second")
    );
    assert_eq!(b.kv_get(KvNamespace::Ref, "k2").await.unwrap(), None);
}

async fn kv_values_expire_after_their_ttl(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let b = &env.broker;
    b.kv_put(KvNamespace::Ref, "short", "v", Duration::from_millis(150))
        .await
        .unwrap();
    b.kv_put(KvNamespace::Ref, "long", "w", LONG).await.unwrap();
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "short")
            .await
            .unwrap()
            .as_deref(),
        Some("v")
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(b.kv_get(KvNamespace::Ref, "short").await.unwrap(), None);
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "long").await.unwrap().as_deref(),
        Some("w")
    );
    // A new put after expiry starts a fresh entry.
    b.kv_put(KvNamespace::Ref, "short", "again", LONG)
        .await
        .unwrap();
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "short")
            .await
            .unwrap()
            .as_deref(),
        Some("again")
    );
    if let Some(mut raw) = env.raw().await {
        let keys: Vec<String> = ::redis::cmd("KEYS")
            .arg(format!("{}:kv:*", env.cfg.key_prefix))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(keys.len(), 2, "{keys:?}");
        for key in keys {
            let ttl: i64 = ::redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap();
            assert!(ttl > 0, "{key} has no ttl ({ttl})");
        }
    }
}

async fn kv_namespaces_are_isolated(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let b = &env.broker;
    b.kv_put(KvNamespace::Ref, "k", "in ref", LONG)
        .await
        .unwrap();
    b.kv_put(KvNamespace::Build, "k", "in build", LONG)
        .await
        .unwrap();
    // A key may hold the separator (the exact, length-prefixed layout is `keys.rs`'s test).
    b.kv_put(KvNamespace::Rollouts, "f:k", "in rollouts", LONG)
        .await
        .unwrap();
    assert_eq!(
        b.kv_get(KvNamespace::Ref, "k").await.unwrap().as_deref(),
        Some("in ref")
    );
    assert_eq!(
        b.kv_get(KvNamespace::Build, "k").await.unwrap().as_deref(),
        Some("in build")
    );
    assert_eq!(
        b.kv_get(KvNamespace::Rollouts, "f:k")
            .await
            .unwrap()
            .as_deref(),
        Some("in rollouts")
    );
    assert_eq!(b.kv_get(KvNamespace::Rollouts, "k").await.unwrap(), None);
    assert_eq!(
        b.kv_get(KvNamespace::RolloutBatchKeys, "k").await.unwrap(),
        None
    );
}

async fn kv_lookups_are_counted_per_namespace(backend: Backend) {
    let env = Env::start(backend, config()).await;
    let b = &env.broker;
    assert_eq!(ref_counters(&env).await, (0, 0));
    assert_eq!(b.kv_get(KvNamespace::Ref, "k").await.unwrap(), None);
    b.kv_put(KvNamespace::Ref, "k", "v", LONG).await.unwrap();
    assert!(b.kv_get(KvNamespace::Ref, "k").await.unwrap().is_some());
    assert!(b.kv_get(KvNamespace::Ref, "k").await.unwrap().is_some());
    // Puts count nothing; lookups in another namespace are not reference lookups.
    b.kv_put(KvNamespace::Build, "k", "v", LONG).await.unwrap();
    assert!(b.kv_get(KvNamespace::Build, "k").await.unwrap().is_some());
    assert_eq!(b.kv_get(KvNamespace::Build, "nope").await.unwrap(), None);
    assert_eq!(ref_counters(&env).await, (2, 1));
    // Nor do they touch the result cache counters.
    assert_eq!(cache_counters(&env).await, (0, 0, 0));
    // Each namespace has counters of its own.
    let counts = |hits, misses| KvCounts { hits, misses };
    assert_eq!(b.kv_counts(KvNamespace::Ref).await.unwrap(), counts(2, 1));
    assert_eq!(b.kv_counts(KvNamespace::Build).await.unwrap(), counts(1, 1));
    assert_eq!(
        b.kv_counts(KvNamespace::Rollouts).await.unwrap(),
        counts(0, 0)
    );
    if let Some(mut raw) = env.raw().await {
        let fields: Vec<Option<u64>> = ::redis::cmd("HMGET")
            .arg(format!("{}:stats", env.cfg.key_prefix))
            .arg(&["kv:build:hits", "kv:build:misses"][..])
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(fields, [Some(1), Some(1)]);
    }
}
