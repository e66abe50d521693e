//! A Redis failover under a running service: the API and a CPU worker reach Redis through
//! three Sentinels (`redis+sentinel://`); the primary is killed with SIGKILL mid-batch, the
//! Sentinels promote the replica, and both processes follow it. Tasks submitted before the
//! failover (acknowledged after `WAIT 1`, so on the replica too) and after it finish, and
//! `/health` recovers within a bound. The killed node then comes back as a replica and a
//! graceful `SENTINEL FAILOVER` moves the primary back to it while the other is still up (so
//! connections to a demoted, still answering node are left behind too); tasks submitted after
//! that finish as well. The times to recovery are printed, not asserted.

use crucible_tests::*;
use std::time::{Duration, Instant};

/// From the kill to an API that answers `/health` with 200 again: Sentinel's down-after
/// (1 s), the vote and promotion, then a fresh connection. Generous for a loaded CI machine.
const RECOVERY: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_and_worker_follow_a_sentinel_failover() {
    let logs = log_dir("sentinel-failover");
    let mut cluster = SentinelCluster::start(&logs).await;
    let mut env = service_env(&cluster.url(), "sentinel");
    env.extend([
        // A lease lost with the old primary comes back soon.
        ("CRUCIBLE_LEASE_TTL_MS".to_owned(), "5000".to_owned()),
        // Submissions and verdicts are on the replica before they are acknowledged.
        ("CRUCIBLE_REDIS_WAIT_REPLICAS".to_owned(), "1".to_owned()),
        (
            "CRUCIBLE_REDIS_WAIT_TIMEOUT_MS".to_owned(),
            "500".to_owned(),
        ),
    ]);
    let port = free_port();
    let api_proc = Proc::spawn("api", api_command(port, &env), &logs);
    let worker = Proc::spawn("worker", worker_command(&env), &logs);
    let api = Api::new(port);
    api.wait_ready().await;
    health_ok(&api, Duration::from_secs(60)).await;

    let body = |n: usize| {
        let mut b = eval_body("elementwise_relu", "elementwise_relu__correct.py", 120);
        // Distinct sources: identical requests would share one task.
        b["kernel_code"] = format!("{}\n# sample {n}\n", b["kernel_code"].as_str().unwrap()).into();
        b
    };
    let mut ids = Vec::new();
    for n in 0..2 {
        ids.push(api.submit(body(n)).await);
    }

    let killed_at = Instant::now();
    let old = cluster.kill_primary().await;
    let new = cluster.wait_new_primary(old, RECOVERY).await;
    let promoted = killed_at.elapsed();
    health_ok(&api, RECOVERY.saturating_sub(killed_at.elapsed())).await;
    let recovered = killed_at.elapsed();
    println!(
        "sentinel failover: primary :{old} killed; :{new} promoted after {:.2} s; /health 200 again after {:.2} s",
        promoted.as_secs_f64(),
        recovered.as_secs_f64()
    );

    for n in 2..4 {
        ids.push(api.submit(body(n)).await);
    }

    // The killed node comes back (empty) and the Sentinels make it a replica; then a graceful
    // failover back to it: the primary of the moment is demoted while still up.
    cluster.restart(old, RECOVERY).await;
    let switched_at = Instant::now();
    let demoted = cluster.failover(RECOVERY).await;
    let back = cluster.wait_new_primary(demoted, RECOVERY).await;
    // The demoted node still answers as a primary until the Sentinels reconfigure it, so a
    // healthy connection proves nothing: each process must have seen the change (its watch
    // asks a Sentinel every 500 ms) and dropped its connections to the demoted node.
    eventually(
        "the API and the worker to see the second change",
        RECOVERY,
        || async {
            let changes = |p: &Proc| p.log_text().matches("redis primary changed").count();
            (changes(&api_proc) >= 2 && changes(&worker) >= 2).then_some(())
        },
    )
    .await;
    health_ok(&api, RECOVERY).await;
    println!(
        "sentinel failover: SENTINEL FAILOVER from :{demoted}; /health 200 again after {:.2} s",
        switched_at.elapsed().as_secs_f64()
    );
    for n in 4..6 {
        ids.push(api.submit(body(n)).await);
    }
    for id in &ids {
        let task = api.wait_task(id, Duration::from_secs(240)).await;
        assert_eq!(task["status"], "done", "{task}");
        assert_eq!(task["result"]["correct"], true, "{task}");
    }
    // The last tasks and their verdicts are on the primary of the moment.
    let client = redis::Client::open(format!("redis://127.0.0.1:{back}")).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    for id in &ids[4..] {
        let status: Option<String> = redis::cmd("HGET")
            .arg(format!("sentinel:task:{id}"))
            .arg("status")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(status.as_deref(), Some("done"), "task {id} on :{back}");
    }
    // The worker reports to the new primary: it is listed there, alive.
    let (status, workers) = api.get("/workers/status").await;
    assert_eq!(status, 200, "{workers}");
    assert!(
        workers["workers"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["state"] != "lost")),
        "{workers}"
    );
}

/// `/health` answers 200 (the broker answers PING) within `timeout`.
async fn health_ok(api: &Api, timeout: Duration) {
    eventually("/health to answer 200", timeout, || async {
        let (status, _) = api.get("/health").await;
        (status == 200).then_some(())
    })
    .await;
}
