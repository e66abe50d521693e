//! `RedisBroker` on a Sentinel-managed primary, driven directly:
//!
//! - What `CRUCIBLE_REDIS_WAIT_REPLICAS` costs: the same submissions and verdicts without
//!   `WAIT` and with `WAIT 1`, their latencies printed (docs/BENCHMARKS.md keeps the figures;
//!   timing is not asserted). Asserted: every transition is accepted either way, and with
//!   `WAIT 1` the replica has each verdict when `complete` returns.
//! - The deployment's form: `rediss+sentinel://`, data nodes run from the shipped
//!   `deploy/redis.conf` (TLS only, the roles' ACL users: `ROLE` and `WAIT` are in them), the
//!   Sentinels over TLS too; the API's and the worker's users do their transitions before and
//!   after the primary is killed.

use crucible_shared::{
    BrokerConfig, DeviceClass, EvalResult, EvaluateRequest, TaskSpec, TenantId, WorkerId,
};
use crucible_task_manager::{AckOutcome, Broker, RedisBroker, RedisTarget, TlsFiles};
use crucible_test_support::sentinel::Secure;
use crucible_tests::secure_redis::{Pki, Role, render_redis_conf};
use crucible_tests::*;
use std::time::{Duration, Instant};

/// Transitions timed per setting.
const ROUNDS: usize = 200;

fn spec(n: usize) -> TaskSpec {
    let request = EvaluateRequest::new(format!("class Model: pass  # {n}"), "class ModelNew: pass");
    TaskSpec::new(request, 7)
}

fn verdict() -> EvalResult {
    cpu_verdict()
}

/// Median and 99th percentile, in microseconds.
fn summary(mut samples: Vec<Duration>) -> (u128, u128) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_micros();
    (at(0.5), at(0.99))
}

/// `ROUNDS` submit + claim + complete through a broker whose config asks `replicas`; the
/// submit and complete latencies.
async fn run(
    url: &str,
    replica: &redis::Client,
    prefix: &str,
    replicas: u32,
) -> (Vec<Duration>, Vec<Duration>) {
    let cfg = BrokerConfig {
        key_prefix: prefix.to_owned(),
        redis_wait_replicas: replicas,
        redis_wait_timeout: Duration::from_secs(2),
        ..BrokerConfig::default()
    };
    let broker = RedisBroker::open(&RedisTarget::new(url), cfg)
        .await
        .expect("the broker reaches the primary through the Sentinels");
    let worker = WorkerId("wait-bench".to_owned());
    let (mut submits, mut completes) = (Vec::new(), Vec::new());
    for n in 0..ROUNDS {
        let started = Instant::now();
        broker.submit(&TenantId::builtin(), spec(n)).await.unwrap();
        submits.push(started.elapsed());
        let lease = broker
            .claim(&worker, &DeviceClass::cpu(), Duration::from_secs(2))
            .await
            .unwrap()
            .expect("the task just submitted");
        let started = Instant::now();
        let ack = broker.complete(&lease, verdict()).await.unwrap();
        completes.push(started.elapsed());
        assert_eq!(ack, AckOutcome::Accepted);
        if replicas > 0 {
            let mut c = replica.get_multiplexed_async_connection().await.unwrap();
            let status: Option<String> = redis::cmd("HGET")
                .arg(format!("{prefix}:task:{}", lease.task_id))
                .arg("status")
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(
                matches!(status.as_deref(), Some("done" | "failed")),
                "the replica has the verdict once complete returns: {status:?}"
            );
        }
    }
    (submits, completes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_one_replica_costs_a_round_trip_to_it() {
    let logs = log_dir("sentinel-wait");
    let cluster = SentinelCluster::start(&logs).await;
    let url = cluster.url();
    let replica_port = cluster.replica_ports().await[0];
    let replica = redis::Client::open(format!("redis://127.0.0.1:{replica_port}")).unwrap();
    let mut lines = Vec::new();
    for (replicas, prefix) in [(0, "nowait"), (1, "wait1")] {
        let (submits, completes) = run(&url, &replica, prefix, replicas).await;
        let (s50, s99) = summary(submits);
        let (c50, c99) = summary(completes);
        lines.push(format!(
            "WAIT {replicas}: submit p50 {s50} us p99 {s99} us; complete p50 {c50} us p99 {c99} us ({ROUNDS} each)"
        ));
    }
    for l in &lines {
        println!("redis wait cost (loopback, 1 replica): {l}");
    }
}

/// One submission by the API's broker, a claim and a verdict by the worker's; the id of the
/// task completed.
async fn round(api: &RedisBroker, worker: &RedisBroker, n: usize) -> Result<String, String> {
    api.submit(&TenantId::builtin(), spec(n))
        .await
        .map_err(|e| format!("submit: {e}"))?;
    let who = WorkerId("tls-worker".to_owned());
    let lease = worker
        .claim(&who, &DeviceClass::cpu(), Duration::from_secs(2))
        .await
        .map_err(|e| format!("claim: {e}"))?
        .ok_or("nothing to claim")?;
    let ack = worker
        .complete(&lease, verdict())
        .await
        .map_err(|e| format!("complete: {e}"))?;
    if ack != AckOutcome::Accepted {
        return Err(format!("complete answered {ack:?}"));
    }
    // Not necessarily the task just submitted: an earlier attempt may have left one ahead.
    Ok(lease.task_id.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_roles_follow_a_failover_over_tls() {
    let logs = log_dir("sentinel-tls");
    let pki = Pki::issue(&logs.join("pki"));
    let conf = logs.join("redis.conf");
    std::fs::write(&conf, render_redis_conf()).expect("write redis.conf");
    let secure = Secure {
        conf,
        ca: pki.ca.clone(),
        cert: pki.server_cert.clone(),
        key: pki.server_key.clone(),
        client_cert: pki.client_cert.clone(),
        client_key: pki.client_key.clone(),
        admin: (Role::Admin.user().to_owned(), Role::Admin.password()),
    };
    let mut cluster = SentinelCluster::start_secure(&logs, secure).await;
    let open = |role: Role| {
        let url = cluster.url().replacen(
            "redis+sentinel://",
            &format!("rediss+sentinel://{}:{}@", role.user(), role.password()),
            1,
        );
        let target = RedisTarget::new(url).with_tls(TlsFiles {
            ca_file: Some(pki.ca.clone()),
            ..TlsFiles::default()
        });
        let cfg = BrokerConfig {
            // The prefix the shipped ACL users are bound to.
            key_prefix: "crucible".to_owned(),
            redis_wait_replicas: 1,
            redis_wait_timeout: Duration::from_millis(500),
            ..BrokerConfig::default()
        };
        async move {
            RedisBroker::open(&target, cfg)
                .await
                .unwrap_or_else(|e| panic!("{role:?} cannot connect: {e}"))
        }
    };
    let api = open(Role::Api).await;
    let worker = open(Role::Worker).await;
    let before = round(&api, &worker, 0)
        .await
        .expect("a round before the failover");

    let old = cluster.kill_primary().await;
    cluster.wait_new_primary(old, Duration::from_secs(30)).await;
    // Each attempt submits a task of its own: one half done before Redis answered again
    // must not be mistaken for the next.
    let attempts = std::sync::atomic::AtomicUsize::new(1);
    let after = eventually(
        "both roles to work on the new primary",
        Duration::from_secs(30),
        || async {
            let n = attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            round(&api, &worker, n).await.ok()
        },
    )
    .await;
    for id in [before, after] {
        let task = api
            .get_task(&crucible_shared::TaskId(id.clone()))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("task {id} is on the new primary"));
        assert!(task.status.is_terminal(), "{task:?}");
    }
}
