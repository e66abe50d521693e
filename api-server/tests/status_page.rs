//! The status page in process, on the real router and the memory broker (a worker's side
//! driven through the broker): what it shows with authentication off, what a browser without
//! a token, a tenant and the admin get with it on, its headers, and escaping of what workers
//! and candidates write.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use chrono::Utc;
use crucible_api_server::{AppState, Auth, router};
use crucible_shared::{
    BrokerConfig, DeviceInfo, DeviceKind, EvalResult, TaskId, Verdict, VerdictCode, WorkerId,
    WorkerInfo, WorkerState,
};
use crucible_task_manager::{AckOutcome, Broker, MemoryBroker};
use crucible_test_support::data_cell as cell;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

const ADMIN: &str = "0123456789abcdef0123456789abcdef-admin";
/// What a worker's host name or a candidate's exception could be.
const HOSTILE: &str = r#"<img src=x onerror="alert(1)">"#;

struct Server {
    broker: Arc<MemoryBroker>,
    app: Router,
}

impl Server {
    fn new(auth: Auth) -> Self {
        let broker = Arc::new(MemoryBroker::new(BrokerConfig::default()));
        let app = router(AppState::new(broker.clone(), auth));
        Server { broker, app }
    }

    fn with_auth() -> Self {
        let auth = Auth::from_lookup("0.0.0.0:1".parse().unwrap(), |k| {
            (k == "CRUCIBLE_ADMIN_TOKEN").then(|| ADMIN.to_owned())
        })
        .unwrap();
        Self::new(auth)
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, HeaderMap, String) {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let request = match body {
            Some(b) => request
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(b.to_string())),
            None => request.body(Body::empty()),
        }
        .unwrap();
        let response = self.app.clone().oneshot(request).await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
            .await
            .unwrap();
        (status, headers, String::from_utf8(bytes.to_vec()).unwrap())
    }

    async fn get(&self, path: &str, token: Option<&str>) -> (StatusCode, HeaderMap, String) {
        self.call("GET", path, token, None).await
    }

    async fn json(&self, token: Option<&str>) -> (StatusCode, Value) {
        let (status, _, body) = self.get("/status.json", token).await;
        (status, serde_json::from_str(&body).unwrap())
    }

    /// Submits a task as `token`'s caller; returns its id.
    async fn submit(&self, token: Option<&str>, tag: &str) -> TaskId {
        let body = json!({
            "reference_code": format!("class Model: pass  # {tag}"),
            "kernel_code": "class ModelNew: pass",
        });
        let (status, _, answer) = self.call("POST", "/evaluate", token, Some(body)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        let answer: Value = serde_json::from_str(&answer).unwrap();
        TaskId::from(answer["task_id"].as_str().unwrap())
    }

    /// A worker (on a host named [`HOSTILE`]) claims the next task and finishes it so.
    async fn finish_next(&self, result: EvalResult) -> TaskId {
        let w = WorkerId("w_page".into());
        let lease = self
            .broker
            .claim(&w, &crucible_shared::DeviceClass::cpu(), Duration::ZERO)
            .await
            .unwrap()
            .expect("a task is queued");
        self.heartbeat(Some(lease.task_id.clone())).await;
        assert_eq!(
            self.broker.complete(&lease, result).await.unwrap(),
            AckOutcome::Accepted
        );
        lease.task_id
    }

    async fn heartbeat(&self, current_task: Option<TaskId>) {
        let info = WorkerInfo {
            worker_id: WorkerId("w_page".into()),
            node: HOSTILE.into(),
            device: DeviceInfo {
                kind: DeviceKind::Cpu,
                name: "test cpu".into(),
                class: Some(crucible_shared::DeviceClass::cpu()),
            },
            device_index: None,
            state: WorkerState::Busy,
            current_task,
            tasks_done: 1,
            started_at: Utc::now(),
            last_heartbeat: Utc::now(),
            sandbox: None,
        };
        self.broker.worker_heartbeat(&info).await.unwrap();
    }
}

fn result(verdict: Verdict, message: &str) -> EvalResult {
    let device = DeviceInfo {
        kind: DeviceKind::Cpu,
        name: "test cpu".into(),
        class: Some(crucible_shared::DeviceClass::cpu()),
    };
    let mut r =
        EvalResult::failed_before_trials(VerdictCode::Correctness, message, true, 2, device);
    r.verdict = verdict;
    if verdict == Verdict::Ok {
        (r.error_code, r.error_message, r.correct) = (None, None, true);
    }
    r
}

fn assert_page_headers(headers: &HeaderMap, content_type: &str) {
    let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with(content_type),
        "{headers:?}"
    );
}

#[tokio::test]
async fn with_auth_off_the_page_shows_everything_escaped() {
    let server = Server::new(Auth::off());
    server.submit(None, "a").await;
    server.submit(None, "b").await;
    server.finish_next(result(Verdict::Ok, "")).await;
    let bad = server
        .finish_next(result(Verdict::Incorrect, &format!("mismatch {HOSTILE}")))
        .await;

    for path in ["/", "/status"] {
        let (status, headers, html) = server.get(path, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_page_headers(&headers, "text/html");
        assert!(html.contains(r#"data-worker-id="w_page""#), "{html}");
        assert!(html.contains(r#"data-state="busy""#));
        assert_eq!(cell(&html, "w5-finished"), "2");
        assert_eq!(cell(&html, "w5-ok"), "1");
        assert_eq!(cell(&html, "w60-incorrect"), "1");
        assert_eq!(cell(&html, "w5-code-CORRECTNESS"), "1");
        assert!(html.contains(&format!(r#"data-task-id="{bad}""#)));
        // The worker's host and the candidate's message are text, never markup.
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"));
    }

    let (status, page) = server.json(None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["admin"], true);
    assert_eq!(page["broker"], "memory");
    assert_eq!(page["workers"][0]["health"], "ok");
    assert_eq!(page["workers"][0]["current_task"], bad.as_str());
    assert_eq!(page["activity"]["windows"][0]["verdicts"]["incorrect"], 1);
    let failure = &page["activity"]["recent_failures"][0];
    assert_eq!(failure["task_id"], bad.as_str());
    assert_eq!(failure["tenant"], "admin");
    let caches: Vec<&str> = page["caches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cache"].as_str().unwrap())
        .collect();
    assert_eq!(caches, ["result", "reference", "build"]);

    for (path, kind) in [
        ("/status.js", "text/javascript"),
        ("/status.css", "text/css"),
    ] {
        let (status, headers, body) = server.get(path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_page_headers(&headers, kind);
        assert!(body.len() > 500, "{path}");
    }
}

#[tokio::test]
async fn with_auth_on_data_needs_a_token_and_tenants_see_their_own() {
    let server = Server::with_auth();
    // A browser: the page and its assets, with no data.
    let (status, headers, html) = server.get("/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_page_headers(&headers, "text/html");
    assert!(html.contains(r#"data-auth="required""#));
    assert!(html.contains("Authentication is on"), "{html}");
    assert!(!html.contains("data-worker-id") && !html.contains("data-task-id"));
    assert_eq!(server.get("/status.js", None).await.0, StatusCode::OK);
    assert_eq!(server.json(None).await.0, StatusCode::UNAUTHORIZED);
    let (status, _, html) = server.get("/status", Some("crt_wrong")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(html.contains("names no tenant") && !html.contains("data-worker-id"));

    let (status, _, created) = server
        .call(
            "POST",
            "/admin/tenants",
            Some(ADMIN),
            Some(json!({"name": "team-a"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let created: Value = serde_json::from_str(&created).unwrap();
    let tenant = created["token"].as_str().unwrap().to_owned();
    server.submit(Some(&tenant), "mine").await;
    let mine = server
        .finish_next(result(Verdict::Incorrect, "tenant's"))
        .await;
    server.submit(Some(ADMIN), "admins").await;
    let admins = server.finish_next(result(Verdict::Hack, "admin's")).await;
    server.heartbeat(Some(admins.clone())).await;

    let (status, page) = server.json(Some(&tenant)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["admin"], false);
    assert_eq!(page["workers"][0]["current_task"], Value::Null);
    let failures = page["activity"]["recent_failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{page}");
    assert_eq!(failures[0]["task_id"], mine.as_str());
    assert!(failures[0].get("tenant").is_none(), "{page}");
    // Counts of the whole service, as /queue/status's lifetime counters.
    assert_eq!(page["activity"]["windows"][1]["done"], 2);
    let (_, _, html) = server.get("/", Some(&tenant)).await;
    assert!(html.contains(&format!(r#"data-task-id="{mine}""#)));
    assert!(!html.contains(&format!(r#"data-task-id="{admins}""#)));
    assert!(
        !html.contains(admins.as_str()),
        "not even as a current task"
    );

    let (status, page) = server.json(Some(ADMIN)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["admin"], true);
    assert_eq!(page["workers"][0]["current_task"], admins.as_str());
    let tenants: Vec<&str> = page["activity"]["recent_failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(tenants, ["admin", "team-a"]);
}
