//! Harness for the end-to-end tests: real redis-server, real `crucible-api`,
//! `crucible-worker` and `crucible` processes on free ports, the problems and candidates of
//! `tests/problems` and `tests/candidates`, and bounded waits. Every process is killed on drop.

pub mod corpus;
pub mod secure_redis;

// The harness pieces every suite shares live in `crucible-test-support`; the e2e tests keep
// importing them from here.
pub use crucible_test_support::{
    Proc, RedisServer as Redis, SentinelCluster, bin, eventually, free_port, log_dir,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The checkout the test reads its problems and corpora from: where it was built, unless
/// `CRUCIBLE_REPO_ROOT` says otherwise (a test binary carried to the GPU machine).
pub fn repo_root() -> PathBuf {
    match std::env::var_os("CRUCIBLE_REPO_ROOT") {
        Some(root) => PathBuf::from(root),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("tests/ is inside the repo")
            .to_owned(),
    }
}

/// The Python the workers use; scripts/test.sh exports it.
pub fn python() -> String {
    std::env::var("CRUCIBLE_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Environment shared by API and worker processes of one test.
pub fn service_env(redis_url: &str, prefix: &str) -> Vec<(String, String)> {
    vec![
        ("REDIS_URL".into(), redis_url.to_owned()),
        ("CRUCIBLE_KEY_PREFIX".into(), prefix.to_owned()),
        ("CRUCIBLE_PYTHON".into(), python()),
        ("CRUCIBLE_CPU_THREADS".into(), "1".into()),
        // Workers serve their metrics on a free port of their own unless a test names one:
        // the default port is per device, and tests run several CPU workers at once.
        ("CRUCIBLE_WORKER_METRICS_ADDR".into(), "127.0.0.1:0".into()),
        (
            "RUST_LOG".into(),
            std::env::var("CRUCIBLE_TEST_LOG").unwrap_or_else(|_| "info".into()),
        ),
    ]
}

/// `crucible-api` on 127.0.0.1:`port` with `env`, its reaper at a 200 ms interval so lost
/// leases come back within a test's patience.
pub fn api_command(port: u16, env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(bin("crucible-api"));
    cmd.env("CRUCIBLE_BIND", format!("127.0.0.1:{port}"))
        .env("CRUCIBLE_REAPER_INTERVAL_MS", "200")
        .envs(env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// `crucible up` with one CPU worker on 127.0.0.1:`port`, on the embedded broker (any
/// `REDIS_URL` of the test's environment removed), one CPU thread per child.
pub fn crucible_up(port: u16) -> Command {
    let mut cmd = Command::new(bin("crucible"));
    cmd.args(["up", "--cpu", "--bind", &format!("127.0.0.1:{port}")])
        .env_remove("REDIS_URL")
        .env("CRUCIBLE_PYTHON", python())
        .env("CRUCIBLE_CPU_THREADS", "1");
    cmd
}

/// A CPU `crucible-worker` with `env`: no GPU needed.
pub fn worker_command(env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(bin("crucible-worker"));
    cmd.arg("--cpu").envs(env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// A small HTTP client for one API.
#[derive(Clone)]
pub struct Api {
    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub base: String,
    /// For requests the helpers below do not make (headers, raw bodies).
    pub http: reqwest::Client,
}

impl Api {
    /// The API on 127.0.0.1:`port`, without a token; requests time out after 90 s.
    pub fn new(port: u16) -> Api {
        Api {
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(90))
                .build()
                .expect("client"),
        }
    }

    /// The same API with `Authorization: Bearer <token>` on every request.
    pub fn with_token(&self, token: &str) -> Api {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .expect("a token is a header value");
        value.set_sensitive(true);
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, value);
        Api {
            base: self.base.clone(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(90))
                .default_headers(headers)
                .build()
                .expect("client"),
        }
    }

    /// Waits up to 30 s for `/health` to answer at all (whatever its status): the server
    /// is listening.
    pub async fn wait_ready(&self) {
        eventually(
            "the API to answer /health",
            Duration::from_secs(30),
            || async {
                self.http
                    .get(format!("{}/health", self.base))
                    .send()
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await;
    }

    /// Sends a request; returns the status and the JSON body (Null when not JSON).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request sent");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// `GET path`, as [`Api::call`].
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `POST path` with a JSON body, as [`Api::call`].
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// The Prometheus exposition of `/metrics`.
    pub async fn metrics_text(&self) -> String {
        scrape(&self.http, &format!("{}/metrics", self.base))
            .await
            .expect("metrics request")
    }

    /// `POST /evaluate`, asserting 202; returns the task id.
    pub async fn submit(&self, body: Value) -> String {
        let (status, v) = self.post("/evaluate", body).await;
        assert_eq!(status, 202, "submit answered {status}: {v}");
        v["task_id"].as_str().expect("task_id").to_owned()
    }

    /// Submits `body` to `/evaluate?wait=60` and returns the finished task: the answer itself
    /// when it finished within the wait, else the task polled until `timeout`.
    pub async fn evaluate_and_wait(&self, body: Value, timeout: Duration) -> Value {
        let (status, task) = self.post("/evaluate?wait=60", body).await;
        if status == 200 {
            return task;
        }
        assert_eq!(status, 202, "{task}");
        self.wait_task(task["task_id"].as_str().expect("a task id"), timeout)
            .await
    }

    /// Waits until task `id` is `running` (a worker claimed it) and returns it.
    pub async fn wait_running(&self, id: &str, timeout: Duration) -> Value {
        eventually(&format!("task {id} to run"), timeout, || async {
            let (_, v) = self.get(&format!("/tasks/{id}")).await;
            (v["status"] == "running").then_some(v)
        })
        .await
    }

    /// Waits for a terminal status and returns the task.
    pub async fn wait_task(&self, id: &str, timeout: Duration) -> Value {
        eventually(&format!("task {id} to finish"), timeout, || async {
            let (status, v) = self.get(&format!("/tasks/{id}?wait=5")).await;
            (status == 200 && matches!(v["status"].as_str(), Some("done" | "failed" | "cancelled")))
                .then_some(v)
        })
        .await
    }
}

/// The process of a running task whose sandboxed pid is `ns_pid` (1: the judge, 2: the
/// runner, where the candidate's code runs), as the root this suite runs as in CI sees it:
/// found by its working directory (the task's own, named after the task id) and its pid in the
/// task's namespace.
pub fn task_process(task_id: &str, ns_pid: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cwd = std::fs::read_link(e.path().join("cwd")).ok()?;
        if !cwd.to_string_lossy().contains(task_id) {
            return None;
        }
        let status = std::fs::read_to_string(e.path().join("status")).ok()?;
        let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
        (nspid.split_whitespace().nth(1) == Some(ns_pid)).then_some(pid)
    })
}

/// The source of `tests/problems/<name>.py`.
pub fn problem(name: &str) -> String {
    std::fs::read_to_string(
        repo_root()
            .join("tests/problems")
            .join(format!("{name}.py")),
    )
    .unwrap_or_else(|e| panic!("problem {name}: {e}"))
}

/// The source of `tests/candidates/<file>`.
pub fn candidate(file: &str) -> String {
    std::fs::read_to_string(repo_root().join("tests/candidates").join(file))
        .unwrap_or_else(|e| panic!("candidate {file}: {e}"))
}

/// An `/evaluate` body with small trial counts (CPU workers are slow).
pub fn eval_body(problem_name: &str, candidate_file: &str, timeout_s: u32) -> Value {
    json!({
        "reference_code": problem(problem_name),
        "kernel_code": candidate(candidate_file),
        "backend": "triton",
        "num_correct_trials": 2,
        "num_perf_trials": 5,
        "timeout_s": timeout_s,
    })
}

/// The body of `GET url` (a Prometheus exposition); `None` when nothing answers with 200.
pub async fn scrape(http: &reqwest::Client, url: &str) -> Option<String> {
    let resp = http.get(url).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.text().await.ok()
}

/// The value of the sample of metric `name` in the exposition `text` whose labels include
/// every pair of `labels` (others may be there too); `None` when there is none. Panics if
/// more than one sample matches: a test names labels enough to pick one.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, found) = match series.split_once('{') {
                Some((metric, rest)) => (metric, parse_labels(rest.strip_suffix('}')?)?),
                None => (series, Vec::new()),
            };
            let wanted = metric == name
                && labels
                    .iter()
                    .all(|(k, v)| found.iter().any(|(fk, fv)| fk == k && fv == v));
            wanted.then(|| value.parse().ok()).flatten()
        })
        .collect();
    assert!(
        matching.len() <= 1,
        "{name} {labels:?} matches {} samples in\n{text}",
        matching.len()
    );
    matching.first().copied()
}

/// `a="x",b="y \"q\""` as pairs, escapes undone; `None` when it does not parse.
fn parse_labels(mut rest: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        pairs.push((key.trim_start_matches(',').to_owned(), value));
        rest = &after[end + 1..];
    }
    Some(pairs)
}

/// The names of the metric families `text` declares with `# TYPE name kind`, with their kind.
pub fn metric_types(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|t| t.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect()
}

/// A verdict as a CPU worker reports it (wrong output, before any perf trial): what tests that
/// drive the broker directly complete their leases with.
pub fn cpu_verdict() -> crucible_shared::EvalResult {
    let device = crucible_shared::DeviceInfo {
        kind: crucible_shared::DeviceKind::Cpu,
        name: "test cpu".to_owned(),
        class: None,
    };
    crucible_shared::EvalResult::failed_before_trials(
        crucible_shared::VerdictCode::Correctness,
        "wrong",
        true,
        2,
        device,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_found_by_name_and_labels() {
        let text = "# TYPE a_total counter\n\
                    a_total{x=\"1\",y=\"q \\\"z\\\", w\"} 3\n\
                    a_total{x=\"2\",y=\"\"} 4\n\
                    b 5.5\n\
                    a_total_bucket{x=\"1\"} 9\n";
        assert_eq!(sample(text, "a_total", &[("x", "2")]), Some(4.0));
        assert_eq!(sample(text, "a_total", &[("y", "q \"z\", w")]), Some(3.0));
        assert_eq!(sample(text, "a_total", &[("y", "")]), Some(4.0));
        assert_eq!(sample(text, "b", &[]), Some(5.5));
        assert_eq!(sample(text, "a_total", &[("x", "3")]), None);
        assert_eq!(
            metric_types(text),
            vec![("a_total".to_owned(), "counter".to_owned())]
        );
    }
}
