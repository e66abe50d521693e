//! The API phases: concurrent POSTs of one body against the real `crucible-api`.

use crucible_tests::Api;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What one API phase measured.
pub(crate) struct HttpPhase {
    pub(crate) requests: usize,
    pub(crate) tasks: usize,
    pub(crate) elapsed: Duration,
    pub(crate) latencies: Vec<Duration>,
    pub(crate) errors: usize,
    pub(crate) first_error: Option<String>,
    pub(crate) last_task_id: Option<String>,
}

/// Sends `requests` POSTs of `body` to `path` from `clients` concurrent clients; each answer
/// carries `tasks_per_request` tasks. Bounded by the count and by `timeout`.
pub(crate) async fn http_phase(
    api: &Api,
    path: &str,
    body: bytes_body::Body,
    requests: usize,
    tasks_per_request: usize,
    clients: usize,
    timeout: Duration,
) -> HttpPhase {
    let next = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + timeout;
    let url = format!("{}{path}", api.base);
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..clients.max(1) {
        let next = next.clone();
        let http = api.http.clone();
        let url = url.clone();
        let body = body.clone();
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0usize;
            let mut first_error = None;
            let mut last_id = None;
            while next.fetch_add(1, Ordering::Relaxed) < requests && Instant::now() < deadline {
                let t0 = Instant::now();
                let resp = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.bytes())
                    .send()
                    .await;
                let outcome = match resp {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let text = r.text().await.unwrap_or_default();
                        if status == 202 {
                            Ok(text)
                        } else {
                            Err(format!(
                                "{status}: {}",
                                text.chars().take(200).collect::<String>()
                            ))
                        }
                    }
                    Err(e) => Err(e.to_string()),
                };
                let dt = t0.elapsed();
                match outcome {
                    Ok(text) => {
                        lat.push(dt);
                        if last_id.is_none()
                            && let Ok(v) = serde_json::from_str::<Value>(&text)
                        {
                            last_id = v["task_id"]
                                .as_str()
                                .or_else(|| v["task_ids"][0].as_str())
                                .map(str::to_owned);
                        }
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            (lat, errors, first_error, last_id)
        }));
    }
    let mut out = HttpPhase {
        requests: 0,
        tasks: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
        errors: 0,
        first_error: None,
        last_task_id: None,
    };
    for h in handles {
        let (lat, errors, first_error, last_id) = h.await.expect("client task");
        out.latencies.extend(lat);
        out.errors += errors;
        if out.first_error.is_none() {
            out.first_error = first_error;
        }
        if out.last_task_id.is_none() {
            out.last_task_id = last_id;
        }
    }
    out.elapsed = start.elapsed();
    out.requests = out.latencies.len();
    out.tasks = out.requests * tasks_per_request;
    out
}

/// A request body serialised once and shared by every client.
pub(crate) mod bytes_body {
    use std::sync::Arc;

    #[derive(Clone)]
    pub struct Body(Arc<Vec<u8>>);

    impl Body {
        pub fn new(v: Vec<u8>) -> Self {
            Self(Arc::new(v))
        }
        pub fn len(&self) -> usize {
            self.0.len()
        }
        /// reqwest takes an owned body; a copy of a few KB is cheap next to the request.
        pub fn bytes(&self) -> Vec<u8> {
            self.0.as_ref().clone()
        }
    }
}
