//! Escape attempts through the real service (redis-server, crucible-api, two workers, as the
//! test runs: root in CI). Each entry of tests/escapes/manifest.json is a correct kernel that
//! also tries one attack, written to pass static screening; each runs twice, with the default
//! screening and with every rule off, beside honest neighbours. Every attack must fail with
//! evidence the test checks from outside: no key written in Redis and nothing flushed, no file
//! planted, no process left once its task ended, no listener reachable, the planted secret in
//! no result, the victim not cancelled, the workers alive, and every neighbour's verdict as
//! expected. The attack's own printed line serves only to show that it ran.
//!
//! `CRUCIBLE_TEST_WORKER_ARGS` (default `--cpu`) runs the workers on a GPU instead
//! (scripts/gpu-escapes.sh). `CRUCIBLE_TEST_ESCAPES` (names, comma-separated) runs a subset.
//!
//! The corpus attacks the machine it runs on: it runs only against workers whose every layer is
//! in force (checked on /workers/status first). To see that the test fails where a layer is
//! missing, `CRUCIBLE_TEST_ESCAPES_UNSANDBOXED=1` lets a subset run against workers started with
//! `CRUCIBLE_SANDBOX=off`, refusing the entries that would kill processes of the host.

use crucible_tests::corpus::{
    CorpusEntry, corpus_entries, require_sandboxed_workers, screening_off, services_died,
};
use crucible_tests::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TASK_DEADLINE: Duration = Duration::from_secs(900);
const CASES: [&str; 2] = ["screened", "unscreened"];

struct Escape {
    name: String,
    source: String,
    may_claim: bool,
    /// Runtime findings its attack may earn, making the verdict `hack` (a process it leaves
    /// running is `processes-left`): with only these, `hack` is as right as `ok`.
    hack_rules: Vec<String>,
    /// Kills or signals processes: never run outside the sandbox.
    harms_host: bool,
}

fn corpus() -> Vec<Escape> {
    corpus_entries("escapes")
        .into_iter()
        .map(|CorpusEntry { entry: e, source }| Escape {
            name: e["name"].as_str().expect("name").to_owned(),
            source,
            may_claim: e["may_claim"].as_bool().unwrap_or(false),
            hack_rules: e["hack_rules"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|r| r.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            harms_host: e["harms_host"].as_bool().unwrap_or(false),
        })
        .filter(|e| match std::env::var("CRUCIBLE_TEST_ESCAPES") {
            Ok(names) => names.split(',').any(|n| n.trim() == e.name),
            Err(_) => true,
        })
        .collect()
}

fn unique() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{}{nanos:x}", std::process::id())
}

/// Kills the processes `processes_with` listed (`pid: cmdline`), so a failed run leaves none.
fn kill_all(listed: &[String]) {
    for line in listed {
        if let Some(pid) = line.split(':').next().and_then(|p| p.parse().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Host processes whose command line contains `marker` (this test's own excluded).
fn processes_with(marker: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(marker)
                .then(|| format!("{}: {cmd}", e.file_name().to_string_lossy()))
        })
        .collect()
}

fn python_purelib() -> PathBuf {
    let out = std::process::Command::new(python())
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .expect("python runs");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

struct Placeholders {
    values: BTreeMap<&'static str, String>,
}

impl Placeholders {
    fn fill(&self, source: &str, nonce: &str) -> String {
        let mut out = source.replace("{{NONCE}}", nonce);
        for (key, value) in &self.values {
            out = out.replace(&format!("{{{{{key}}}}}"), value);
        }
        assert!(!out.contains("{{"), "unfilled placeholder in:\n{out}");
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn escapes_fail_and_neighbours_keep_their_verdicts() {
    let logs = log_dir("escapes");
    let redis = Redis::start(&logs).await;
    let work = tempfile_dir(&logs, "work");
    let cache = tempfile_dir(&logs, "builds");
    let run = unique();
    let secret = format!("crucible-secret-{run}");
    let mut env = service_env(&redis.url, "escapes");
    env.extend([
        ("CRUCIBLE_WORK_DIR".to_owned(), work.display().to_string()),
        (
            "CRUCIBLE_BUILD_CACHE".to_owned(),
            cache.display().to_string(),
        ),
        // A secret in the services' environment: no result may ever show it.
        ("CRUCIBLE_ESCAPE_SECRET".to_owned(), secret.clone()),
    ]);
    let port = free_port();
    let mut api_proc = Proc::spawn("api", api_command(port, &env), &logs);
    let worker_args = std::env::var("CRUCIBLE_TEST_WORKER_ARGS").unwrap_or_else(|_| "--cpu".into());
    let mut workers: Vec<Proc> = (0..2)
        .map(|i| {
            let mut cmd = std::process::Command::new(bin("crucible-worker"));
            cmd.args(worker_args.split_whitespace())
                .envs(env.iter().map(|(k, v)| (k, v)));
            Proc::spawn(&format!("worker{i}"), cmd, &logs)
        })
        .collect();
    let api = Api::new(port);
    api.wait_ready().await;
    let escapes = corpus();
    let unsandboxed = std::env::var("CRUCIBLE_TEST_ESCAPES_UNSANDBOXED").as_deref() == Ok("1");
    if unsandboxed {
        let harmful: Vec<&str> = escapes
            .iter()
            .filter(|e| e.harms_host)
            .map(|e| e.name.as_str())
            .collect();
        assert!(
            harmful.is_empty(),
            "{harmful:?} would signal this machine's processes: name a subset without them in CRUCIBLE_TEST_ESCAPES"
        );
    } else {
        require_sandboxed_workers(&api, workers.len()).await;
    }

    let mut redis_conn = redis::Client::open(redis.url.as_str())
        .and_then(|c| c.get_connection())
        .expect("redis connection");
    let _: () = redis::cmd("SET")
        .arg("escape-sentinel")
        .arg("present")
        .query(&mut redis_conn)
        .expect("sentinel set");
    let abstract_name = format!("crucible-escape-listener-{run}");
    use std::os::linux::net::SocketAddrExt;
    let listener = std::os::unix::net::UnixListener::bind_addr(
        &std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .expect("abstract address"),
    )
    .expect("abstract listener");
    listener
        .set_nonblocking(true)
        .expect("nonblocking listener");

    // The victim: an honest, slow task the api_cancel escape tries to cancel while it runs.
    let slow = std::fs::read_to_string(repo_root().join("tests/escapes/slow_neighbour.py"))
        .expect("slow neighbour");
    let victim = api
        .submit(json!({
            "reference_code": problem("elementwise_relu"),
            "kernel_code": slow,
            "num_correct_trials": 3,
            "num_perf_trials": 200,
            "timeout_s": 600,
        }))
        .await;
    api.wait_running(&victim, Duration::from_secs(300)).await;

    let daemon_port = free_port();
    let placeholders = Placeholders {
        values: BTreeMap::from([
            (
                "REDIS_PORT",
                redis.url.rsplit(':').next().unwrap().to_owned(),
            ),
            ("API_PORT", port.to_string()),
            ("VICTIM", victim.clone()),
            ("DAEMON_PORT", daemon_port.to_string()),
            ("WORK_ROOT", work.display().to_string()),
            ("BUILD_CACHE", cache.display().to_string()),
            ("ABSTRACT", abstract_name.clone()),
        ]),
    };

    // Honest neighbours with known verdicts, between the escapes.
    let neighbours = [
        ("softmax", "softmax__correct.py", "ok"),
        ("softmax", "softmax__wrong.py", "incorrect"),
        ("matmul", "matmul__correct.py", "ok"),
        ("elementwise_relu", "elementwise_relu__correct.py", "ok"),
    ];
    let mut neighbour_ids = Vec::new();
    if std::env::var("CRUCIBLE_TEST_ESCAPES").is_err() {
        assert!(escapes.len() >= 16, "only {} escapes", escapes.len());
    }
    let mut submitted = Vec::new();
    for (round, case) in CASES.iter().enumerate() {
        for (i, escape) in escapes.iter().enumerate() {
            let nonce = format!("{}-{case}-{run}", escape.name);
            let screening = if *case == "unscreened" {
                screening_off()
            } else {
                json!({})
            };
            let id = api
                .submit(json!({
                    "reference_code": problem("elementwise_relu"),
                    "kernel_code": placeholders.fill(&escape.source, &nonce),
                    "num_correct_trials": 2,
                    "num_perf_trials": 5,
                    "timeout_s": 300,
                    "screening": screening,
                }))
                .await;
            submitted.push((escape, *case, nonce, id));
            if i % 5 == 2 {
                let (p, c, v) = neighbours[(i / 5 + round * 2) % neighbours.len()];
                neighbour_ids.push((c, v, api.submit(eval_body(p, c, 300)).await));
            }
        }
    }

    let purelib = python_purelib();
    let mut failures = Vec::new();
    let mut outputs = Vec::new();
    for (escape, case, nonce, id) in &submitted {
        let task = api.wait_task(id, TASK_DEADLINE).await;
        let r = &task["result"];
        let tail = r["output_tail"].as_str().unwrap_or_default().to_owned();
        let label = format!("{} ({case})", escape.name);
        // `hack` only by the runtime findings its attack may earn (a process left running).
        let hacks: Vec<&str> = r["flags"]
            .as_array()
            .map(|f| {
                f.iter()
                    .filter(|x| x["severity"] == "hack")
                    .filter_map(|x| x["rule"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        let earned_hack = r["verdict"] == "hack"
            && !hacks.is_empty()
            && hacks
                .iter()
                .all(|h| escape.hack_rules.iter().any(|a| a == h));
        if task["status"] != "done" || (r["verdict"] != "ok" && !earned_hack) {
            failures.push(format!(
                "{label}: status {} verdict {} (an escape's kernel is correct: its attack must not change that): {}",
                task["status"], r["verdict"], r["error_message"]
            ));
        }
        if !tail.contains(&format!("crucible-escape {}: attempted", escape.name)) {
            failures.push(format!(
                "{label}: the attack did not run (output: {tail:?})"
            ));
        }
        if !escape.may_claim
            && tail.contains(&format!("crucible-escape {}: SUCCEEDED", escape.name))
        {
            failures.push(format!("{label}: the attack succeeded: {tail}"));
        }
        if r["speedup"].as_f64() == Some(777.0) {
            failures.push(format!("{label}: the forged result was taken"));
        }
        // Once its task ended, nothing the attack started runs on.
        let left = processes_with(&format!("crucible-escape-{nonce}"));
        if !left.is_empty() {
            kill_all(&left);
            failures.push(format!("{label}: processes outlived the task: {left:?}"));
        }
        for path in [
            work.join(format!("crucible-escape-{nonce}")),
            PathBuf::from(format!("/var/tmp/crucible-escape-{nonce}")),
            purelib.join(format!("crucible_escape_{nonce}.py")),
        ] {
            if path.exists() {
                let _ = std::fs::remove_file(&path);
                failures.push(format!("{label}: wrote {}", path.display()));
            }
        }
        let key: Option<String> = redis::cmd("GET")
            .arg(format!("escape:{nonce}"))
            .query(&mut redis_conn)
            .unwrap_or(None);
        if key.is_some() {
            failures.push(format!("{label}: wrote a key into Redis"));
        }
        outputs.push(task.to_string());
    }

    // The whole run: nothing flushed, no listener left, nobody reached the test's socket, the
    // secret nowhere, the victim and the neighbours judged as they should be, everyone alive.
    let sentinel: Option<String> = redis::cmd("GET")
        .arg("escape-sentinel")
        .query(&mut redis_conn)
        .unwrap_or(None);
    if sentinel.as_deref() != Some("present") {
        failures.push("Redis was flushed".to_owned());
    }
    if std::net::TcpStream::connect(("127.0.0.1", daemon_port)).is_ok() {
        failures.push(format!(
            "a daemon listens on port {daemon_port} of the host"
        ));
    }
    if listener.accept().is_ok() {
        failures.push("a task connected to the host's abstract socket".to_owned());
    }
    let victim_task = api.wait_task(&victim, TASK_DEADLINE).await;
    if victim_task["status"] != "done" || victim_task["result"]["verdict"] != "ok" {
        failures.push(format!(
            "the victim was {} ({})",
            victim_task["status"], victim_task["result"]["verdict"]
        ));
    }
    outputs.push(victim_task.to_string());
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
    if let Some(leak) = outputs.iter().find(|o| o.contains(&secret)) {
        failures.push(format!("the services' secret leaked into a result: {leak}"));
    }
    failures.extend(services_died(&mut api_proc, &mut workers));
    assert!(
        failures.is_empty(),
        "{} escape check(s) failed over {} escape tasks:\n{}",
        failures.len(),
        submitted.len(),
        failures.join("\n")
    );
}

fn tempfile_dir(logs: &Path, name: &str) -> PathBuf {
    let dir = logs.join(name);
    std::fs::create_dir_all(&dir).expect("test dir");
    dir
}
