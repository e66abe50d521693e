//! No candidate takes down, fills or wedges a node: the hostile corpus of tests/hostile (deep
//! chains built both ways, a disk fill past the quota, an inode flood, /dev/shm and /tmp fills,
//! a fork loop, descriptors the worker inherited, the host's cgroups, FIFOs, sockets and links
//! left behind) through the real service (redis-server, crucible-api, two CPU workers as the
//! test runs: root in CI), with screening off, as a policy that learnt to evade it would send
//! them, beside honest neighbours. It checks from outside:
//! - every hostile task ends with the verdict its manifest entry names (`RESOURCE` naming the
//!   limit where one was passed), every neighbour with its own;
//! - `/health` answers within [`HEALTH_BOUND`] throughout;
//! - a worker killed with `kill -9` in the middle of it restarts cleanly (its sweep removes
//!   what it left, mounted spaces included) and its tasks are finished by the others;
//! - the secret the workers' parent left open on fds 10 and 251 reaches no result, nor does a
//!   worker's cgroup name;
//! - once the workers stopped, nothing is left: no directory or owner file under the work
//!   root, no task space mounted, no process of a task.
//!
//! Needs the storage and cgroup layers (a worker running as root): elsewhere it says so and
//! passes without running. `CRUCIBLE_TEST_WORKER_ARGS` (default `--cpu`) runs the workers on a
//! GPU instead (scripts/gpu-node-safety.sh).

use crucible_tests::corpus::{
    CorpusEntry, corpus_entries, missing_layers, sandbox_reports, screening_off, services_died,
};
use crucible_tests::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const TASK_DEADLINE: Duration = Duration::from_secs(900);
/// The longest `/health` may take at any moment of the run.
const HEALTH_BOUND: Duration = Duration::from_secs(1);
/// The descriptors the workers' parent leaves open on the secret (as a shell's or a
/// supervisor's stray ones reach whatever they start).
const STRAY_FDS: [u32; 2] = [10, 251];

struct Hostile {
    name: String,
    source: String,
    expect: Value,
}

fn corpus() -> Vec<Hostile> {
    corpus_entries("hostile")
        .into_iter()
        .map(|CorpusEntry { entry, source }| Hostile {
            name: entry["name"].as_str().expect("name").to_owned(),
            source,
            expect: entry["expect"].clone(),
        })
        .collect()
}

/// What a result must show for `expect` (a manifest entry's): `None` when it does.
fn mismatch(task: &Value, expect: &Value) -> Option<String> {
    let r = &task["result"];
    let mut wrong = Vec::new();
    if task["status"] != "done" {
        wrong.push(format!("status {}", task["status"]));
    }
    for field in ["verdict", "error_code"] {
        if !expect[field].is_null() && r[field] != expect[field] {
            wrong.push(format!("{field} {} (want {})", r[field], expect[field]));
        }
    }
    for (field, key) in [("error_message", "message"), ("output_tail", "output")] {
        if let Some(want) = expect[key].as_str()
            && !r[field].as_str().unwrap_or_default().contains(want)
        {
            wrong.push(format!("{field} lacks {want:?}"));
        }
    }
    (!wrong.is_empty()).then(|| {
        format!(
            "{}; error: {}; output: {}",
            wrong.join(", "),
            r["error_message"],
            r["output_tail"]
        )
    })
}

/// Polls `/health` until `stop`, each answer bounded by [`HEALTH_BOUND`]; returns how many
/// answered, the slowest, and what went wrong.
async fn watch_health(port: u16, stop: Arc<AtomicBool>) -> (u32, Duration, Vec<String>) {
    let http = reqwest::Client::builder()
        .timeout(HEALTH_BOUND)
        .build()
        .expect("http client");
    let url = format!("http://127.0.0.1:{port}/health");
    let (mut answered, mut slowest, mut failures) = (0u32, Duration::ZERO, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let asked = Instant::now();
        match http.get(&url).send().await {
            Ok(resp) if resp.status().is_success() => {
                answered += 1;
                slowest = slowest.max(asked.elapsed());
            }
            Ok(resp) => failures.push(format!("/health answered {}", resp.status())),
            Err(e) => failures.push(format!(
                "/health within {HEALTH_BOUND:?}: {e} (after {:?})",
                asked.elapsed()
            )),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (answered, slowest, failures)
}

/// A worker started the way a careless parent starts it: the secret file open on
/// [`STRAY_FDS`] without close-on-exec.
fn worker(name: &str, env: &[(String, String)], secret_file: &Path, logs: &Path) -> Proc {
    let args = std::env::var("CRUCIBLE_TEST_WORKER_ARGS").unwrap_or_else(|_| "--cpu".into());
    let opens: Vec<String> = STRAY_FDS.iter().map(|fd| format!("{fd}<\"$1\"")).collect();
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c")
        .arg(format!("exec {}; shift; exec \"$@\"", opens.join(" ")))
        .arg("sh")
        .arg(secret_file)
        .arg(bin("crucible-worker"))
        .args(args.split_whitespace())
        .envs(env.iter().map(|(k, v)| (k, v)));
    Proc::spawn(name, cmd, logs)
}

/// Whether `text` holds a worker's cgroup directory name (`crucible-w<pid>`).
fn names_a_worker_cgroup(text: &str) -> bool {
    text.match_indices("crucible-w").any(|(at, m)| {
        text[at + m.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    })
}

/// The task spaces still mounted under `root`.
fn mounted_under(root: &Path) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let root = root.display().to_string();
    table
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .filter(|point| point.starts_with(&root))
        .map(str::to_owned)
        .collect()
}

/// The layers this test's attacks need.
const NEEDED_LAYERS: [&str; 8] = [
    "network", "pid", "mount", "user", "landlock", "seccomp", "cgroup", "storage",
];

/// Whether every worker has [`NEEDED_LAYERS`] in force (why not, on stderr).
async fn layers_in_force(api: &Api, count: usize) -> bool {
    let mut ok = true;
    for w in &sandbox_reports(api, count).await {
        let missing = missing_layers(w, &NEEDED_LAYERS);
        if !missing.is_empty() {
            eprintln!(
                "skipped: worker {} lacks {missing:?}: {}",
                w["worker_id"], w["sandbox"]
            );
            ok = false;
        }
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_tasks_leave_the_node_serving_and_clean() {
    let logs = log_dir("node_safety");
    let redis = Redis::start(&logs).await;
    let work = logs.join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let secret = format!("crucible-stray-secret-{}", std::process::id());
    let secret_file = logs.join("stray-secret");
    std::fs::write(&secret_file, &secret).expect("secret file");
    let passwd_before = std::fs::read("/etc/passwd").unwrap_or_default();
    let mut env = service_env(&redis.url, "node-safety");
    env.extend(
        [
            ("CRUCIBLE_WORK_DIR", work.display().to_string()),
            (
                "CRUCIBLE_BUILD_CACHE",
                logs.join("builds").display().to_string(),
            ),
            // Small bounds, so that the fills end in seconds; /dev/shm (8 GiB) is left larger
            // than the task's memory on a CPU (`CRUCIBLE_TEST_CHILD_MEMORY_MB`, 3072), whose
            // limit must stop it first.
            ("CRUCIBLE_TASK_SPACE_MB", "512".into()),
            ("CRUCIBLE_SANDBOX_TMP_MB", "512".into()),
            (
                "CRUCIBLE_CHILD_MEMORY_MB",
                std::env::var("CRUCIBLE_TEST_CHILD_MEMORY_MB").unwrap_or_else(|_| "3072".into()),
            ),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let port = free_port();
    let mut api_proc = Proc::spawn("api", api_command(port, &env), &logs);
    let mut workers: Vec<Proc> = (0..2)
        .map(|i| worker(&format!("worker{i}"), &env, &secret_file, &logs))
        .collect();
    let api = Api::new(port);
    api.wait_ready().await;
    if !layers_in_force(&api, workers.len()).await {
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let health = tokio::spawn(watch_health(port, stop.clone()));

    let hostile = corpus();
    assert!(
        hostile.len() >= 11,
        "only {} hostile entries",
        hostile.len()
    );
    let neighbours = [
        ("softmax", "softmax__correct.py", "ok"),
        ("softmax", "softmax__wrong.py", "incorrect"),
        ("matmul", "matmul__correct.py", "ok"),
        ("elementwise_relu", "elementwise_relu__correct.py", "ok"),
    ];
    let mut submitted = Vec::new();
    let mut neighbour_ids = Vec::new();
    for (i, h) in hostile.iter().enumerate() {
        let id = api
            .submit(json!({
                "reference_code": problem("elementwise_relu"),
                "kernel_code": h.source,
                "num_correct_trials": 2,
                "num_perf_trials": 5,
                "timeout_s": 300,
                "screening": screening_off(),
            }))
            .await;
        submitted.push((h, id));
        if i % 3 == 1 {
            let (p, c, v) = neighbours[(i / 3) % neighbours.len()];
            neighbour_ids.push((c, v, api.submit(eval_body(p, c, 300)).await));
        }
    }

    // A worker dies with `kill -9` while the first hostile task runs, and comes back.
    api.wait_running(&submitted[0].1, TASK_DEADLINE).await;
    workers[0].kill9();
    workers[0] = worker("worker0-restarted", &env, &secret_file, &logs);

    let mut failures = Vec::new();
    let mut outputs = Vec::new();
    for (h, id) in &submitted {
        let task = api.wait_task(id, TASK_DEADLINE).await;
        let r = &task["result"];
        let message = r["error_message"].as_str().unwrap_or_default();
        eprintln!(
            "{:<24} {} {} {}",
            h.name,
            r["verdict"],
            r["error_code"],
            message.lines().next().unwrap_or_default()
        );
        if let Some(why) = mismatch(&task, &h.expect) {
            failures.push(format!("{}: {why}", h.name));
        }
        outputs.push(task.to_string());
    }
    for (file, want, id) in &neighbour_ids {
        let task = api.wait_task(id, TASK_DEADLINE).await;
        if task["status"] != "done" || task["result"]["verdict"] != *want {
            failures.push(format!(
                "neighbour {file}: {} {} (want {want}): {}",
                task["status"], task["result"]["verdict"], task["result"]["error_message"]
            ));
        }
        outputs.push(task.to_string());
    }
    stop.store(true, Ordering::Relaxed);
    let (answered, slowest, health_failures) = health.await.expect("health watcher");
    eprintln!("/health answered {answered} times, the slowest in {slowest:?}");
    failures.extend(health_failures);
    if answered == 0 {
        failures.push("/health never answered".into());
    }
    if let Some(leak) = outputs.iter().find(|o| o.contains(&secret)) {
        failures.push(format!("an inherited descriptor reached a task: {leak}"));
    }
    if let Some(leak) = outputs.iter().find(|o| names_a_worker_cgroup(o)) {
        failures.push(format!("a task saw a worker's cgroup: {leak}"));
    }
    if std::fs::read("/etc/passwd").unwrap_or_default() != passwd_before {
        failures.push("/etc/passwd changed".into());
    }
    failures.extend(services_died(&mut api_proc, &mut workers));

    // Stopped, the workers leave nothing behind.
    for w in &mut workers {
        if !w.terminate(Duration::from_secs(180)) {
            failures.push(format!("{} did not stop on SIGTERM", w.name));
        }
    }
    let left: Vec<PathBuf> = std::fs::read_dir(&work)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    if !left.is_empty() {
        failures.push(format!("left under the work root: {left:?}"));
    }
    let mounted = mounted_under(&work);
    if !mounted.is_empty() {
        failures.push(format!("task spaces still mounted: {mounted:?}"));
    }
    assert!(
        failures.is_empty(),
        "{} node-safety check(s) failed over {} hostile tasks:\n{}",
        failures.len(),
        submitted.len(),
        failures.join("\n")
    );
}
