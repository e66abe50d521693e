//! Who is outside the task (real redis-server, crucible-api and a CPU crucible-worker, as root
//! in CI). A judge killed by SIGKILL that nobody in the task sent (the candidate cannot reach
//! it) is a fault of the service: the task is given back and evaluated again (attempt 2) to its
//! own verdict, and only that verdict is cached, so the identical request is answered from the
//! cache with it, never with the kill. The candidate's own process is another matter: only the
//! worker and the OOM killer count as outside it, since a candidate can have the kernel kill it
//! (an RLIMIT_CPU, a SIGKILL timer) to escape a score; a runner killed by a SIGKILL neither sent
//! is the candidate's `CRASH`, decided once.

use crucible_tests::*;
use serde_json::{Value, json};
use std::time::Duration;

fn slow_task() -> Value {
    json!({
        "reference_code": problem("elementwise_relu"),
        "kernel_code": std::fs::read_to_string(repo_root().join("tests/escapes/slow_neighbour.py"))
            .expect("slow neighbour"),
        "num_correct_trials": 3,
        "num_perf_trials": 100,
        "timeout_s": 300,
    })
}

/// Kills task `id`'s process with namespace pid `ns_pid` once it runs.
async fn kill_when_running(id: &str, ns_pid: &str) {
    let victim = eventually(
        &format!("task {id}'s process with namespace pid {ns_pid}"),
        Duration::from_secs(300),
        || async { task_process(id, ns_pid) },
    )
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("the test (root) may kill a task's process");
}

async fn kill_and_expect_a_retry(api: &Api, ns_pid: &str, body: Value) {
    let id = api.submit(body.clone()).await;
    kill_when_running(&id, ns_pid).await;
    let task = api.wait_task(&id, Duration::from_secs(600)).await;
    assert_eq!(task["status"], "done", "{task}");
    assert_eq!(
        task["result"]["verdict"], "ok",
        "a kill from outside became the verdict: {task}"
    );
    assert_eq!(
        task["attempts"], 2,
        "evaluated again after the kill: {task}"
    );

    // The identical request is answered from the cache, with the task's own verdict.
    let (status, again) = api.post("/evaluate", body).await;
    assert_eq!(status, 202, "{again}");
    let again = api
        .wait_task(
            again["task_id"].as_str().expect("task_id"),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(again["cached"], true, "{again}");
    assert_eq!(again["result"]["verdict"], "ok", "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_judge_killed_from_outside_is_retried_and_a_killed_runner_is_the_candidates_crash() {
    let logs = log_dir("outside_kills");
    let redis = Redis::start(&logs).await;
    let env = service_env(&redis.url, "outside");
    let port = free_port();
    let _api = Proc::spawn("api", api_command(port, &env), &logs);
    let _worker = Proc::spawn("worker", worker_command(&env), &logs);
    let api = Api::new(port);
    api.wait_ready().await;

    // The judge (pid 1 of the task's namespace): retried, its own verdict cached.
    kill_and_expect_a_retry(&api, "1", slow_task()).await;

    // The runner (pid 2) of another task, once the candidate is built (killed before, the
    // runner had run no candidate code: a fault of the node, retried): the judge cannot tell
    // the kill from one the candidate arranged for itself, and no OOM kill was recorded:
    // CRASH, one attempt. The candidate says it was built with a file in its task directory.
    let mut runner_task = slow_task();
    runner_task["seed"] = json!(11);
    runner_task["kernel_code"] = json!(format!(
        "{}\n\nclass Built(ModelNew):\n    def __init__(self):\n        super().__init__()\n        \
         open('candidate-built', 'w').close()\n\n\nModelNew = Built\n",
        runner_task["kernel_code"].as_str().expect("kernel")
    ));
    let id = api.submit(runner_task).await;
    let runner = eventually(
        &format!("task {id}'s candidate built in its runner"),
        Duration::from_secs(300),
        || async {
            let pid = task_process(&id, "2")?;
            std::path::Path::new(&format!("/proc/{pid}/cwd/candidate-built"))
                .exists()
                .then_some(pid)
        },
    )
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("the test (root) may kill a task's process");
    let task = api.wait_task(&id, Duration::from_secs(600)).await;
    assert_eq!(task["status"], "done", "{task}");
    assert_eq!(task["result"]["verdict"], "error", "{task}");
    assert_eq!(task["result"]["error_code"], "CRASH", "{task}");
    assert_eq!(task["attempts"], 1, "decided once: {task}");
}
