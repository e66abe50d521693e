//! Losing processes loses no work: a worker killed with SIGKILL mid-task has its task finished
//! by another worker (attempts = 2, one result), a worker stopped with SIGTERM drains (gives
//! back at once every task it had claimed ahead, finishes the one on its device, deregisters
//! and exits 0; at its bound, `CRUCIBLE_DRAIN_TIMEOUT_S`, it gives back what still runs), and
//! an API replica killed mid-batch is replaced without losing a task.

use crucible_tests::*;
use serde_json::json;
use std::time::Duration;

/// The correct ReLU candidate, made slow at import so a test can catch it running.
fn slow_correct_candidate(seconds: u32) -> String {
    format!(
        "import time\ntime.sleep({seconds})\n{}",
        candidate("elementwise_relu__correct.py")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_task_loses_nothing() {
    let logs = log_dir("failover-worker");
    let redis = Redis::start(&logs).await;
    let mut env = service_env(&redis.url, "failover");
    env.push(("CRUCIBLE_LEASE_TTL_MS".into(), "1500".into()));
    env.push(("CRUCIBLE_WORKER_LIVENESS_MS".into(), "3000".into()));
    let port = free_port();
    let _api = Proc::spawn("api", api_command(port, &env), &logs);
    let mut first = Proc::spawn("worker-first", worker_command(&env), &logs);
    let api = Api::new(port);
    api.wait_ready().await;

    let id = api
        .submit(json!({
            "reference_code": problem("elementwise_relu"),
            "kernel_code": slow_correct_candidate(8),
            "num_correct_trials": 2,
            "num_perf_trials": 5,
            "timeout_s": 120,
        }))
        .await;
    let running = api.wait_running(&id, Duration::from_secs(60)).await;
    let first_worker = running["worker_id"].as_str().unwrap().to_owned();
    assert_eq!(running["attempts"], 1);

    first.kill9();
    let _second = Proc::spawn("worker-second", worker_command(&env), &logs);
    // The dead worker is reported lost, not silently dropped. Checked now: the registry forgets
    // a worker 5 liveness windows (15 s here) after its last heartbeat, which a slow second
    // attempt (8 s of torch imports under load, then the task) can outlast.
    eventually(
        "the killed worker to be reported lost",
        Duration::from_secs(10),
        || async {
            let (_, w) = api.get("/workers/status").await;
            w["workers"]
                .as_array()?
                .iter()
                .any(|w| w["worker_id"] == first_worker.as_str() && w["state"] == "lost")
                .then_some(())
        },
    )
    .await;

    let task = api.wait_task(&id, Duration::from_secs(180)).await;
    assert_eq!(task["status"], "done", "{task}");
    assert_eq!(task["attempts"], 2, "{task}");
    assert_ne!(task["worker_id"].as_str().unwrap(), first_worker);
    assert_eq!(task["result"]["correct"], true, "{task}");

    let (_, queue) = api.get("/queue/status").await;
    assert_eq!(queue["done_total"], 1, "exactly one result: {queue}");
    assert_eq!(queue["requeued_total"], 1, "{queue}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_api_restart_mid_batch_loses_nothing() {
    let logs = log_dir("failover-api");
    let redis = Redis::start(&logs).await;
    let env = service_env(&redis.url, "apirestart");
    let port = free_port();
    let mut first_api = Proc::spawn("api-first", api_command(port, &env), &logs);
    let _worker = Proc::spawn("worker", worker_command(&env), &logs);
    let api = Api::new(port);
    api.wait_ready().await;

    let tasks: Vec<_> = ["elementwise_relu", "softmax", "reduction_sum", "matmul"]
        .iter()
        .map(|p| eval_body(p, &format!("{p}__correct.py"), 120))
        .collect();
    let (status, batch) = api.post("/evaluate/batch", json!({ "tasks": tasks })).await;
    assert_eq!(status, 202, "{batch}");
    let batch_id = batch["batch_id"].as_str().unwrap().to_owned();

    first_api.kill9();
    let second_port = free_port();
    let _second_api = Proc::spawn("api-second", api_command(second_port, &env), &logs);
    let api = Api::new(second_port);
    api.wait_ready().await;

    let done = eventually("the batch to finish", Duration::from_secs(300), || async {
        let (_, b) = api.get(&format!("/batches/{batch_id}?include=tasks")).await;
        (b["counts"]["done"] == 4).then_some(b)
    })
    .await;
    assert_eq!(done["total"], 4);
    for task in done["tasks"].as_array().unwrap() {
        assert_eq!(task["result"]["correct"], true, "{task}");
        assert_eq!(task["attempts"], 1, "{task}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_draining_worker_finishes_its_task_and_gives_back_the_ones_claimed_ahead() {
    let logs = log_dir("failover-drain");
    let redis = Redis::start(&logs).await;
    let mut env = service_env(&redis.url, "drain");
    // Long leases: tasks that come back quickly were given back, not reaped.
    env.push(("CRUCIBLE_LEASE_TTL_MS".into(), "120000".into()));
    let port = free_port();
    let _api = Proc::spawn("api", api_command(port, &env), &logs);
    let mut pipelined = env.clone();
    pipelined.extend([
        ("CRUCIBLE_COMPILE_POOL".to_owned(), "1".to_owned()),
        ("CRUCIBLE_PREFETCH".to_owned(), "3".to_owned()),
    ]);
    let mut worker = Proc::spawn("worker", worker_command(&pipelined), &logs);
    let api = Api::new(port);
    api.wait_ready().await;

    // Slow at import: each claimed task sits in its CPU stage (or on the device) for a while.
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(
            api.submit(json!({
                "reference_code": problem("elementwise_relu"),
                // Distinct sources: identical requests would share one task.
                "kernel_code": format!("{}\n# sample {n}\n", slow_correct_candidate(8)),
                "num_correct_trials": 1,
                "num_perf_trials": 1,
                "timeout_s": 300,
            }))
            .await,
        );
    }
    // One task on the device, the other three claimed ahead.
    let (worker_id, on_device) = eventually(
        "the worker to hold all four, one of them on its device",
        Duration::from_secs(120),
        || async {
            let (_, q) = api.get("/queue/status").await;
            let (_, w) = api.get("/workers/status").await;
            let w = w["workers"].as_array()?.first()?;
            (q["running"] == 4 && w["state"] == "busy").then(|| {
                (
                    w["worker_id"].as_str().unwrap().to_owned(),
                    w["current_task"].as_str().unwrap().to_owned(),
                )
            })
        },
    )
    .await;

    worker.sigterm();
    // The three claimed ahead go back at once, long before their leases could expire, while
    // the worker still drains its device.
    eventually(
        "the tasks claimed ahead to be given back",
        Duration::from_secs(60),
        || async {
            let (_, q) = api.get("/queue/status").await;
            (q["queued_normal"] == 3).then_some(())
        },
    )
    .await;
    let status = eventually(
        "the drained worker to exit",
        Duration::from_secs(150),
        || std::future::ready(worker.exited()),
    )
    .await;
    assert!(status.success(), "a drain exits 0: {status}");

    let task = api.wait_task(&on_device, Duration::from_secs(10)).await;
    assert_eq!(
        task["status"], "done",
        "the task on the device finished: {task}"
    );
    assert_eq!(task["attempts"], 1, "{task}");
    assert_eq!(task["worker_id"], worker_id.as_str(), "{task}");
    assert_eq!(task["result"]["correct"], true, "{task}");
    let (_, workers) = api.get("/workers/status").await;
    assert!(
        workers["workers"].as_array().unwrap().is_empty(),
        "the drained worker deregistered: {workers}"
    );
    let (_, queue) = api.get("/queue/status").await;
    assert_eq!(queue["running"], 0, "{queue}");
    assert_eq!(queue["queued_normal"], 3, "{queue}");
    assert_eq!(queue["done_total"], 1, "{queue}");
    assert_eq!(queue["failed_total"], 0, "{queue}");
    assert_eq!(queue["requeued_total"], 3, "{queue}");
    for id in ids.iter().filter(|id| **id != on_device) {
        let (_, task) = api.get(&format!("/tasks/{id}")).await;
        assert_eq!(task["status"], "queued", "{task}");
        let (status, _) = api
            .call(reqwest::Method::DELETE, &format!("/tasks/{id}"), None)
            .await;
        assert_eq!(status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_that_reaches_its_bound_gives_the_running_task_back() {
    let logs = log_dir("failover-drain-bound");
    let redis = Redis::start(&logs).await;
    let mut env = service_env(&redis.url, "drainbound");
    // Long leases: a task that comes back quickly was given back, not reaped.
    env.push(("CRUCIBLE_LEASE_TTL_MS".into(), "120000".into()));
    let port = free_port();
    let _api = Proc::spawn("api", api_command(port, &env), &logs);
    let mut bounded = env.clone();
    bounded.push(("CRUCIBLE_DRAIN_TIMEOUT_S".into(), "2".into()));
    let mut worker = Proc::spawn("worker", worker_command(&bounded), &logs);
    let api = Api::new(port);
    api.wait_ready().await;

    let id = api
        .submit(json!({
            "reference_code": problem("elementwise_relu"),
            "kernel_code": slow_correct_candidate(300),
            "num_correct_trials": 1,
            "num_perf_trials": 1,
            "timeout_s": 600,
        }))
        .await;
    api.wait_running(&id, Duration::from_secs(120)).await;
    worker.sigterm();
    // Far less than the task's 300 s: the bound ended the drain.
    let status = eventually(
        "the worker to exit at its drain bound",
        Duration::from_secs(60),
        || std::future::ready(worker.exited()),
    )
    .await;
    assert!(status.success(), "{status}");
    let (_, task) = api.get(&format!("/tasks/{id}")).await;
    assert_eq!(task["status"], "queued", "given back at the bound: {task}");
    assert!(
        worker.log_text().contains("drain bound reached"),
        "{}",
        worker.log_text()
    );
    let (status, _) = api
        .call(reqwest::Method::DELETE, &format!("/tasks/{id}"), None)
        .await;
    assert_eq!(status, 200);
}
