//! What `CRUCIBLE_REDIS_WAIT_REPLICAS` costs: the same submissions and verdicts through the
//! broker (`redis+sentinel://`, a primary and one replica on loopback) without `WAIT` and with
//! `WAIT 1`, their latencies printed (docs/BENCHMARKS.md keeps the figures; timing
//! is not asserted). What is asserted: every transition is accepted either way, and with
//! `WAIT 1` the replica has each verdict when `complete` returns.

use crucible_shared::{
    BrokerConfig, DeviceClass, EvalResult, EvaluateRequest, TaskSpec, TenantId, WorkerId,
};
use crucible_task_manager::{AckOutcome, Broker, RedisBroker, RedisTarget};
use crucible_tests::*;
use std::time::{Duration, Instant};

/// Transitions timed per setting.
const ROUNDS: usize = 200;

fn spec(n: usize) -> TaskSpec {
    let request = EvaluateRequest::new(format!("class Model: pass  # {n}"), "class ModelNew: pass");
    TaskSpec { request, seed: 7 }
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
