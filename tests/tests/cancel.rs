//! Cancelling end to end, through `crucible cancel` (the CLI over the Rust client) against a real
//! `crucible-api`, redis-server and CPU `crucible-worker` (as root in CI, like
//! outside_kills.rs: the test finds the task's processes in `/proc`): a queued task never runs;
//! a batch whose first task sleeps in its forward has that running candidate process killed
//! (and the one device slot is free again long before the task's deadline) while its queued
//! tasks never run; cancelling a finished task or batch is no failure (nothing of it runs), an
//! unknown id is.

use crucible_tests::*;
use serde_json::{Value, json};
use std::process::{Command, Output};
use std::time::Duration;

/// Far beyond anything the test waits for: the sleeping task can only end early by its cancel.
const SLEEPER_TIMEOUT_S: u32 = 900;

/// The candidate's process (the runner) of a running task.
fn runner_of(task_id: &str) -> Option<i32> {
    task_process(task_id, "2")
}

/// Whether process `pid` is asleep in `nanosleep` (the candidate's `time.sleep`).
fn sleeping(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.contains("nanosleep"))
}

/// `crucible cancel <id>` against `api`.
fn crucible_cancel(api: &Api, id: &str) -> Output {
    Command::new(bin("crucible"))
        .args(["cancel", id])
        .env("CRUCIBLE_URL", &api.base)
        .env_remove("CRUCIBLE_TOKEN")
        .output()
        .expect("crucible cancel runs")
}

/// The JSON a successful `crucible cancel` prints.
fn cancelled(api: &Api, id: &str) -> Value {
    let out = crucible_cancel(api, id);
    assert!(
        out.status.success(),
        "crucible cancel {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn relu(seed: u64) -> Value {
    let mut body = eval_body("elementwise_relu", "elementwise_relu__correct.py", 120);
    body["seed"] = json!(seed);
    body["measure_performance"] = json!(false);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crucible_cancel_stops_queued_and_running_tasks() {
    let logs = log_dir("cancel");
    let redis = Redis::start(&logs).await;
    let mut env = service_env(&redis.url, "cancel");
    // Renewals every 2 s: a cancelled child is killed within that. One task at a time on the
    // worker: the next task can only start once the sleeping child is gone.
    env.push(("CRUCIBLE_LEASE_TTL_MS".into(), "6000".into()));
    env.push(("CRUCIBLE_DEVICE_SLOTS".into(), "1".into()));
    env.push(("CRUCIBLE_PREFETCH".into(), "0".into()));
    let port = free_port();
    let _api_proc = Proc::spawn("api", api_command(port, &env), &logs);
    let api = Api::new(port);
    api.wait_ready().await;

    // No worker yet: a queued task is cancelled, and only once.
    let queued = api.submit(relu(0)).await;
    let answer = cancelled(&api, &queued);
    assert_eq!(
        (&answer["task_id"], &answer["status"], &answer["was"]),
        (&json!(queued), &json!("cancelled"), &json!("queued")),
        "{answer}"
    );
    // Again: nothing is left to cancel, which is no failure; it says so with the API's code.
    let again = crucible_cancel(&api, &queued);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        again.status.success() && again.stdout.is_empty() && stderr.contains("CONFLICT"),
        "{stderr}"
    );
    // An id the service does not know fails, with the API's code.
    let unknown = crucible_cancel(&api, "t_nope");
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        !unknown.status.success() && stderr.contains("NOT_FOUND"),
        "{stderr}"
    );
    let neither = crucible_cancel(&api, "w_nope");
    assert!(!neither.status.success());

    // A batch: the sleeper first (FIFO), then two tasks that wait behind it.
    let mut sleeper = eval_body(
        "elementwise_relu",
        "elementwise_relu__sleeps.py",
        SLEEPER_TIMEOUT_S,
    );
    sleeper["measure_performance"] = json!(false);
    let (status, batch) = api
        .post(
            "/evaluate/batch",
            json!({"tasks": [sleeper, relu(1), relu(2)]}),
        )
        .await;
    assert_eq!(status, 202, "{batch}");
    let batch_id = batch["batch_id"].as_str().unwrap().to_owned();
    let sleeper_id = batch["task_ids"][0].as_str().unwrap().to_owned();

    let _worker = Proc::spawn("worker", worker_command(&env), &logs);
    let runner = eventually(
        "the sleeper's candidate to sleep in its forward",
        Duration::from_secs(180),
        || async { runner_of(&sleeper_id).filter(|pid| sleeping(*pid)) },
    )
    .await;
    let answer = cancelled(&api, &batch_id);
    assert_eq!(
        answer,
        json!({"batch_id": batch_id, "cancelled_queued": 2, "cancelled_running": 1,
               "already_finished": 0})
    );
    // Its process is killed at the worker's next renewal, with everything else of the task.
    eventually(
        "the sleeping candidate to be killed",
        Duration::from_secs(30),
        || async {
            let gone = !std::path::Path::new(&format!("/proc/{runner}")).exists();
            (gone && runner_of(&sleeper_id).is_none()).then_some(())
        },
    )
    .await;
    let (_, view) = api.get(&format!("/tasks/{sleeper_id}")).await;
    assert_eq!(view["status"], "cancelled", "{view}");
    assert!(view["result"].is_null(), "{view}");
    assert!(
        view["error"].as_str().unwrap().contains(&batch_id),
        "{view}"
    );

    // The worker runs one task at a time: this one finishes within 120 s only if the sleeping
    // child (900 s of deadline) was killed.
    let next = api.submit(relu(3)).await;
    let task = api.wait_task(&next, Duration::from_secs(120)).await;
    assert_eq!(task["status"], "done", "{task}");
    assert_eq!(task["result"]["correct"], true, "{task}");
    // Its batch's queued tasks never ran: nothing of them reached a worker.
    let (_, status) = api.get(&format!("/batches/{batch_id}?include=tasks")).await;
    assert_eq!(status["counts"]["cancelled"], 3, "{status}");
    for task in status["tasks"].as_array().unwrap().iter().skip(1) {
        assert_eq!(task["attempts"], 0, "{task}");
        assert!(task["started_at"].is_null(), "{task}");
    }
    // Cancelling it again is no error, nor is cancelling a finished task: it is left done.
    let again = cancelled(&api, &batch_id);
    assert_eq!(again["already_finished"], 3, "{again}");
    let done = crucible_cancel(&api, &next);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(
        done.status.success() && stderr.contains("already finished as done"),
        "{stderr}"
    );
}
