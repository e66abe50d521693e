//! Harness for the end-to-end tests: real redis-server, real `crucible-api`,
//! `crucible-worker` and `crucible` processes on free ports, the problems and candidates of
//! `tests/problems` and `tests/candidates`, and bounded waits. Every process is killed on drop.

pub mod secure_redis;

// The harness pieces every suite shares live in `crucible-test-support`; the e2e tests keep
// importing them from here.
pub use crucible_test_support::{Proc, RedisServer as Redis, bin, eventually, free_port, log_dir};
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

/// A CPU `crucible-worker` with `env`: no GPU needed.
pub fn worker_command(env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(bin("crucible-worker"));
    cmd.arg("--cpu").envs(env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// `crucible up --cpu` on the embedded broker (no `REDIS_URL`) at 127.0.0.1:`port`: the API,
/// its reaper and one CPU worker (one thread) in one process.
pub fn up_command(port: u16) -> Command {
    let mut cmd = Command::new(bin("crucible"));
    cmd.args(["up", "--cpu", "--bind", &format!("127.0.0.1:{port}")])
        .env_remove("REDIS_URL")
        .env("CRUCIBLE_PYTHON", python())
        .env("CRUCIBLE_CPU_THREADS", "1");
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
        self.http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("metrics request")
            .text()
            .await
            .expect("metrics body")
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
