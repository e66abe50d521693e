//! Every candidate of tests/candidates/manifest.json, through the real service (redis-server,
//! crucible-api, two CPU crucible-workers, one of them with the CPU stage and claiming ahead),
//! gets its expected verdict; the workers survive every kind of child failure and keep serving.

use crucible_tests::*;
use serde_json::Value;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_candidate_gets_its_verdict_and_workers_keep_serving() {
    let logs = log_dir("verdicts");
    let redis = Redis::start(&logs).await;
    let mut env = service_env(&redis.url, "verdicts");
    env.extend([
        ("CRUCIBLE_CHILD_MEMORY_MB".to_owned(), "2048".to_owned()),
        ("CRUCIBLE_CHILD_MAX_PROCS".to_owned(), "64".to_owned()),
        ("CRUCIBLE_CHILD_OUTPUT_KB".to_owned(), "512".to_owned()),
    ]);
    let port = free_port();
    let _api = Proc::spawn("api", api_command(port, &env), &logs);
    let _w1 = Proc::spawn("worker1", worker_command(&env), &logs);
    // The second worker runs each task's CPU stage ahead, claims ahead and runs three device
    // stages at once (parking at their gates, timing one at a time): the verdicts must not
    // depend on which worker (which path) took a task.
    let mut pipelined = env.clone();
    pipelined.extend([
        ("CRUCIBLE_COMPILE_POOL".to_owned(), "1".to_owned()),
        ("CRUCIBLE_PREFETCH".to_owned(), "2".to_owned()),
        ("CRUCIBLE_DEVICE_SLOTS".to_owned(), "3".to_owned()),
    ]);
    let _w2 = Proc::spawn("worker2", worker_command(&pipelined), &logs);
    let api = Api::new(port);
    api.wait_ready().await;

    let manifest: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("tests/candidates/manifest.json")).unwrap(),
    )
    .unwrap();
    assert!(
        manifest.len() >= 15,
        "manifest has {} entries",
        manifest.len()
    );

    let mut submitted = Vec::new();
    for entry in &manifest {
        let problem_name = entry["problem"].as_str().unwrap();
        let file = entry["candidate"].as_str().unwrap();
        let expect = &entry["expect"];
        // A hang is decided by the deadline: keep it at the minimum.
        let timeout = if expect["error_code"] == "TIMEOUT" {
            10
        } else {
            180
        };
        let mut body = eval_body(problem_name, file, timeout);
        body["backend"] = entry["backend"].clone();
        if !entry["screening"].is_null() {
            // Fault-injection candidates opt out of the screening rule they would trip, so
            // the worker's supervision is still what judges them.
            body["screening"] = entry["screening"].clone();
        }
        submitted.push((file.to_owned(), expect.clone(), api.submit(body).await));
    }

    let mut failures = Vec::new();
    let mut cpu_staged = 0;
    for (file, expect, id) in &submitted {
        let task = api.wait_task(id, Duration::from_secs(600)).await;
        let result = &task["result"];
        if !result["stage_ms"]["cpu_stage"].is_null() {
            cpu_staged += 1;
        }
        let got_code = result["error_code"].clone();
        let ok = task["status"] == "done"
            && got_code == expect["error_code"]
            && result["correct"] == expect["correct"]
            && (expect["compiled"].is_null() || result["compiled"] == expect["compiled"]);
        if !ok {
            failures.push(format!(
                "{file}: expected {expect}, got status {} code {got_code} correct {} compiled {} message {}",
                task["status"], result["correct"], result["compiled"], result["error_message"]
            ));
            continue;
        }
        assert_eq!(result["device"]["kind"], "cpu", "{file}");
        assert_eq!(
            task["attempts"], 1,
            "{file}: a kernel's failure is never retried"
        );
        if expect["correct"] == true {
            assert!(
                result["runtime_ms"]["median"].as_f64().unwrap() > 0.0,
                "{file}"
            );
            assert!(
                result["ref_runtime_ms"]["median"].as_f64().unwrap() > 0.0,
                "{file}"
            );
            assert!(result["speedup"].as_f64().unwrap() > 0.0, "{file}");
            assert_eq!(result["trials_passed"], result["trials_total"], "{file}");
        }
    }
    assert!(
        failures.is_empty(),
        "wrong verdicts:\n{}",
        failures.join("\n")
    );
    assert!(cpu_staged > 0, "the pipelined worker ran no CPU stage");

    // Both workers are alive and idle and still serve after all of that.
    let after = api
        .submit(eval_body(
            "elementwise_relu",
            "elementwise_relu__correct.py",
            120,
        ))
        .await;
    let task = api.wait_task(&after, Duration::from_secs(120)).await;
    assert_eq!(task["result"]["correct"], true, "{task}");
    let expected_done = submitted.len() as u64 + 1;
    let workers = eventually(
        "both workers to report their tasks",
        Duration::from_secs(15),
        || async {
            let (_, workers) = api.get("/workers/status").await;
            let done: u64 = workers["workers"]
                .as_array()?
                .iter()
                .filter_map(|w| w["tasks_done"].as_u64())
                .sum();
            (workers["alive"] == 2 && done == expected_done).then_some(workers)
        },
    )
    .await;
    assert!(
        workers["workers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["state"] == "idle"),
        "{workers}"
    );
    let (_, queue) = api.get("/queue/status").await;
    assert_eq!(queue["failed_total"], 0, "{queue}");
    assert_eq!(queue["requeued_total"], 0, "{queue}");
}
