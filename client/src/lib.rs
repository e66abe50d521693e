//! The client side of Crucible: a typed async HTTP client (a bearer token when the server
//! requires one; retries with backoff on 429, 503 and connection errors; rollout batches
//! resubmitted under one idempotency key) used by
//! trainers and by the `crucible` CLI (episodes in `episodes`), the multi-turn return helpers
//! (`returns`, from `crucible_shared::returns`) and the
//! summary of a scored batch (`summary`).

mod episodes;
pub mod returns;
pub mod summary;

use crucible_shared::problem_set::{
    ProblemBatch, ProblemBatchRequest, ProblemSet, ProblemSetSelection,
};
use crucible_shared::prompt::{Prompt, PromptRequest, PromptSettings};
use crucible_shared::report::BatchReport;
use crucible_shared::rollout::{
    MAX_ROLLOUTS, Rollout, RolloutBatchRequest, RolloutBatchResponse, RolloutEvalSettings,
    RolloutResult, RolloutResultsPage,
};
use crucible_shared::{
    ApiError, BatchCancelResponse, BatchId, BatchRequest, BatchStatus, CancelResponse,
    CreateTenantRequest, CreatedTenant, DeletedTenant, DrainRequested, EvaluateRequest, Problem,
    ProblemList, QueueStatus, SubmitResponse, TaskId, TaskView, TenantList,
};
use serde::de::DeserializeOwned;
use std::time::Duration;

/// Why a call failed, after any retries: the variant says whether retrying later can help.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error body.
    #[error("HTTP {status}: {error}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The body: `error.code` says what to do about it.
        error: ApiError,
    },
    /// The request could not be sent or its answer read, and the failure was not one that
    /// is retried (a connection refused or a timeout is).
    #[error("transport: {0}")]
    Transport(#[from] reqwest::Error),
    /// The answer is not what the API sends: a 2xx body of the wrong shape, or an error
    /// without an [`ApiError`] body (a proxy's page, a server of another version).
    #[error("unexpected answer (HTTP {status}): {body}")]
    Unexpected {
        /// The HTTP status.
        status: u16,
        /// The body as received (lossily decoded).
        body: String,
    },
    /// Every attempt met a retryable refusal (429, 503) or connection error: the server is
    /// overloaded or down.
    #[error("gave up after {attempts} attempts: {last}")]
    Exhausted {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's error.
        last: String,
    },
    /// A wait for results passed its deadline; what says which.
    #[error("timed out: {0}")]
    TimedOut(String),
}

/// Answer of `POST /evaluate/batch`.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct BatchSubmitted {
    /// Poll it with [`Client::batch`].
    pub batch_id: crucible_shared::BatchId,
    /// One per requested task, in order; as with [`Client::evaluate`], one may be an
    /// identical open task (coalesced) or a task already done with a cached result.
    pub task_ids: Vec<TaskId>,
}

/// Not `Debug`: it holds the bearer token.
#[derive(Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    max_attempts: u32,
    /// Sent as `Authorization: Bearer <token>` with every request.
    token: Option<String>,
}

impl Client {
    /// A client of the server at `base_url` (e.g. `http://127.0.0.1:10907`), without a token;
    /// each request times out after 120 s and is tried up to 6 times.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base: base_url.into().trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .expect("reqwest client builds"),
            max_attempts: 6,
            token: None,
        }
    }

    /// Authenticates every request with `token`: a tenant's token, or the admin token for
    /// the admin calls. None (or empty) sends none, as a server with `CRUCIBLE_AUTH=off` (a
    /// `crucible up` on a loopback address) needs.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// Creates a tenant (admin token only); the answer holds its token, shown this once.
    pub async fn create_tenant(
        &self,
        request: &CreateTenantRequest,
    ) -> Result<CreatedTenant, ClientError> {
        self.send(reqwest::Method::POST, "/admin/tenants", Some(request))
            .await
    }

    /// Every tenant with its settings and open tasks (admin token only).
    pub async fn tenants(&self) -> Result<TenantList, ClientError> {
        self.send::<(), _>(reqwest::Method::GET, "/admin/tenants", None)
            .await
    }

    /// Deletes a tenant and cancels its open tasks (admin token only).
    pub async fn delete_tenant(&self, name: &str) -> Result<DeletedTenant, ClientError> {
        self.send::<(), _>(
            reqwest::Method::DELETE,
            &format!("/admin/tenants/{name}"),
            None,
        )
        .await
    }

    /// Submits one evaluation. Give it an `idempotency_key` so a retried submission cannot
    /// create a second task.
    pub async fn evaluate(&self, request: &EvaluateRequest) -> Result<SubmitResponse, ClientError> {
        self.send(reqwest::Method::POST, "/evaluate", Some(request))
            .await
    }

    /// Submits up to 1000 evaluations as one batch; all are accepted or none (queue cap,
    /// quota).
    pub async fn evaluate_batch(
        &self,
        batch: &BatchRequest,
    ) -> Result<BatchSubmitted, ClientError> {
        self.send(reqwest::Method::POST, "/evaluate/batch", Some(batch))
            .await
    }

    /// The task's status and, once `done`, its result; [`Client::wait`] polls it to the end.
    pub async fn task(&self, id: &TaskId) -> Result<TaskView, ClientError> {
        self.send::<(), _>(reqwest::Method::GET, &format!("/tasks/{id}"), None)
            .await
    }

    /// A batch's counts by status, with every task's view.
    pub async fn batch(&self, id: &crucible_shared::BatchId) -> Result<BatchStatus, ClientError> {
        self.send::<(), _>(
            reqwest::Method::GET,
            &format!("/batches/{id}?include=tasks"),
            None,
        )
        .await
    }

    /// Cancels a task (`DELETE /tasks/{id}`): a queued one never runs, a running one has its
    /// child killed. A task that already finished is [`ClientError::Api`] with status 409.
    pub async fn cancel_task(&self, id: &TaskId) -> Result<CancelResponse, ClientError> {
        self.send::<(), _>(reqwest::Method::DELETE, &format!("/tasks/{id}"), None)
            .await
    }

    /// Cancels every open task of a batch (`DELETE /batches/{id}`, a rollout batch's too) and
    /// says what became of each distinct task; cancelling a finished batch is not an error.
    pub async fn cancel_batch(&self, id: &BatchId) -> Result<BatchCancelResponse, ClientError> {
        self.send::<(), _>(reqwest::Method::DELETE, &format!("/batches/{id}"), None)
            .await
    }

    /// Queue depths, lifetime counters and cache figures (`GET /queue/status`).
    pub async fn queue(&self) -> Result<QueueStatus, ClientError> {
        self.send::<(), _>(reqwest::Method::GET, "/queue/status", None)
            .await
    }

    /// The workers as the registry reports them (`GET /workers/status`), untyped: the CLI
    /// prints it as it comes.
    pub async fn workers(&self) -> Result<serde_json::Value, ClientError> {
        self.send::<(), _>(reqwest::Method::GET, "/workers/status", None)
            .await
    }

    /// Asks worker `id` to drain (admin token only): it finishes what is on its device,
    /// deregisters and exits.
    pub async fn drain_worker(&self, id: &str) -> Result<DrainRequested, ClientError> {
        self.send::<(), _>(
            reqwest::Method::POST,
            &format!("/admin/workers/{id}/drain"),
            None,
        )
        .await
    }

    /// Polls (with the server's long-poll `wait`) until the task is terminal or `timeout`.
    pub async fn wait(&self, id: &TaskId, timeout: Duration) -> Result<TaskView, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let wait_s = left.as_secs_f64().min(30.0);
            let view: TaskView = self
                .send::<(), _>(
                    reqwest::Method::GET,
                    &format!("/tasks/{id}?wait={wait_s:.1}"),
                    None,
                )
                .await?;
            if view.status.is_terminal() || left.is_zero() {
                return Ok(view);
            }
        }
    }

    /// The server's problem registry, without sources.
    pub async fn problems(&self) -> Result<ProblemList, ClientError> {
        self.send::<(), _>(reqwest::Method::GET, "/problems", None)
            .await
    }

    /// One registered problem with its reference source.
    pub async fn problem(&self, level: u32, id: u32) -> Result<Problem, ClientError> {
        self.send::<(), _>(
            reqwest::Method::GET,
            &format!("/problems/{level}/{id}"),
            None,
        )
        .await
    }

    /// A registered problem's first-turn prompt (`GET /problems/{level}/{id}/prompt`): the
    /// text, its settings with `k` resolved, its examples' ids and the response format.
    pub async fn prompt(
        &self,
        level: u32,
        id: u32,
        settings: &PromptSettings,
    ) -> Result<Prompt, ClientError> {
        let mut path = format!(
            "/problems/{level}/{id}/prompt?option={}&backend={}&thinking={}",
            settings.option.as_str(),
            settings.backend.as_str(),
            settings.thinking
        );
        if let Some(k) = settings.k {
            path.push_str(&format!("&k={k}"));
        }
        self.send::<(), _>(reqwest::Method::GET, &path, None).await
    }

    /// The first-turn prompt of a registered problem or of a source sent whole
    /// (`POST /prompts`).
    pub async fn prompt_for(&self, request: &PromptRequest) -> Result<Prompt, ClientError> {
        self.send(reqwest::Method::POST, "/prompts", Some(request))
            .await
    }

    /// Submits one rollout batch (up to [`MAX_ROLLOUTS`]). Without an idempotency key one is
    /// made here, so that a retry after a lost answer returns the same batch instead of
    /// submitting it twice.
    pub async fn submit_rollouts(
        &self,
        batch: &RolloutBatchRequest,
    ) -> Result<RolloutBatchResponse, ClientError> {
        let keyed;
        let batch = if batch.idempotency_key.is_some() {
            batch
        } else {
            keyed = RolloutBatchRequest {
                idempotency_key: Some(format!("rb-{}", uuid::Uuid::new_v4().simple())),
                ..batch.clone()
            };
            &keyed
        };
        self.send(reqwest::Method::POST, "/rollouts", Some(batch))
            .await
    }

    /// Submits any number of rollouts as batches of at most [`MAX_ROLLOUTS`] (never one
    /// request per rollout); returns the batch ids in order.
    pub async fn submit_all_rollouts(
        &self,
        rollouts: &[Rollout],
        eval: &RolloutEvalSettings,
        batch_size: usize,
    ) -> Result<Vec<RolloutBatchResponse>, ClientError> {
        let mut out = Vec::new();
        for chunk in rollouts.chunks(batch_size.clamp(1, MAX_ROLLOUTS)) {
            let batch = RolloutBatchRequest {
                rollouts: chunk.to_vec(),
                eval: eval.clone(),
                idempotency_key: None,
            };
            out.push(self.submit_rollouts(&batch).await?);
        }
        Ok(out)
    }

    /// One page of a rollout batch's results after `after`, long-polling up to `wait`.
    pub async fn batch_results(
        &self,
        batch: &BatchId,
        after: u64,
        wait: Duration,
    ) -> Result<RolloutResultsPage, ClientError> {
        // The server refuses a longer `wait` (422).
        let wait_s = wait.as_secs_f64().min(crucible_shared::bounds::WAIT_S.max);
        self.send::<(), _>(
            reqwest::Method::GET,
            &format!("/batches/{batch}/results?after={after}&wait={wait_s:.1}"),
            None,
        )
        .await
    }

    /// Reads every result of `batches` in completion order, calling `on_result` as each
    /// arrives, until all are done or `timeout` passes; returns how many arrived. Each batch has
    /// one long-poll in flight at a time, so no batch waits on another and an idle batch costs
    /// one request per 30 s.
    pub async fn stream_results(
        &self,
        batches: &[BatchId],
        timeout: Duration,
        mut on_result: impl FnMut(RolloutResult),
    ) -> Result<usize, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let (tx, mut rx) = tokio::sync::mpsc::channel(batches.len().max(1));
        // Dropped on return, which aborts the readers still polling.
        let mut readers = tokio::task::JoinSet::new();
        for batch in batches {
            let (client, batch, tx) = (self.clone(), batch.clone(), tx.clone());
            readers.spawn(async move {
                let mut after = 0;
                loop {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        let late = ClientError::TimedOut(format!(
                            "batch {batch} not done after {timeout:?}"
                        ));
                        let _ = tx.send(Err(late)).await;
                        return;
                    }
                    let page = client
                        .batch_results(&batch, after, left.min(Duration::from_secs(30)))
                        .await;
                    let done = page.as_ref().map_or(true, |p| p.done);
                    if let Ok(p) = &page {
                        after = p.cursor;
                    }
                    if tx.send(page.map(|p| p.results)).await.is_err() || done {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut seen = 0;
        while let Some(results) = rx.recv().await {
            let results = results?;
            seen += results.len();
            results.into_iter().for_each(&mut on_result);
        }
        Ok(seen)
    }

    /// `GET /problem-sets`: the train and test splits `selection` names.
    pub async fn problem_set(
        &self,
        selection: &ProblemSetSelection,
    ) -> Result<ProblemSet, ClientError> {
        self.send::<(), _>(
            reqwest::Method::GET,
            &format!("/problem-sets?{}", problem_set_query(selection)),
            None,
        )
        .await
    }

    /// `POST /problem-sets/batches`: the problems of one step of an epoch.
    pub async fn problem_batch(
        &self,
        request: &ProblemBatchRequest,
    ) -> Result<ProblemBatch, ClientError> {
        self.send(
            reqwest::Method::POST,
            "/problem-sets/batches",
            Some(request),
        )
        .await
    }

    /// `GET /batches/{id}/report`: correct rate, fast_p and speedups per level of a batch.
    pub async fn report(&self, id: &BatchId) -> Result<BatchReport, ClientError> {
        self.send::<(), _>(reqwest::Method::GET, &format!("/batches/{id}/report"), None)
            .await
    }

    async fn send<B: serde::Serialize, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let mut last = String::new();
        for attempt in 1..=self.max_attempts {
            // What the server asked for with `Retry-After`, on the last refusal.
            let mut server_pause = None;
            let mut req = self
                .http
                .request(method.clone(), format!("{}{path}", self.base));
            if let Some(b) = body {
                req = req.json(b);
            }
            if let Some(token) = &self.token {
                req = req.bearer_auth(token);
            }
            match req.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let retryable = status == 429 || status == 503;
                    server_pause = resp
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(retry_after);
                    let bytes = resp.bytes().await?;
                    if (200..300).contains(&status) {
                        return serde_json::from_slice(&bytes).map_err(|_| {
                            ClientError::Unexpected {
                                status,
                                body: String::from_utf8_lossy(&bytes).into_owned(),
                            }
                        });
                    }
                    let err = match serde_json::from_slice::<ApiError>(&bytes) {
                        Ok(error) => ClientError::Api { status, error },
                        Err(_) => ClientError::Unexpected {
                            status,
                            body: String::from_utf8_lossy(&bytes).into_owned(),
                        },
                    };
                    if !retryable {
                        return Err(err);
                    }
                    last = err.to_string();
                }
                Err(e) if e.is_connect() || e.is_timeout() => last = e.to_string(),
                Err(e) => return Err(e.into()),
            }
            if attempt < self.max_attempts {
                tokio::time::sleep(pause_before_retry(attempt, server_pause)).await;
            }
        }
        Err(ClientError::Exhausted {
            attempts: self.max_attempts,
            last,
        })
    }
}

/// Pure: the query string of `GET /problem-sets` for `selection` (`start`/`end` only when set).
pub fn problem_set_query(selection: &ProblemSetSelection) -> String {
    let mut query = format!(
        "level={}&backend={}&test_fraction={}&seed={}",
        selection.level,
        selection.backend.as_str(),
        selection.test_fraction,
        selection.seed
    );
    for (name, value) in [("start", selection.start), ("end", selection.end)] {
        if let Some(v) = value {
            query.push_str(&format!("&{name}={v}"));
        }
    }
    query
}

/// Most a `Retry-After` may make a client wait before its next attempt: a header asking for
/// more is capped here rather than stalling a trainer for an hour.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Pure: the seconds a `Retry-After` header asks for, when it is a number of seconds (the form
/// the API sends; an HTTP date is not honoured and the backoff applies), capped at
/// [`MAX_RETRY_AFTER`].
pub fn retry_after(value: &str) -> Option<Duration> {
    let seconds: u64 = value.trim().parse().ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// The pause before the attempt after `attempt`: the jittered backoff, but never less than
/// what the server asked for.
fn pause_before_retry(attempt: u32, server: Option<Duration>) -> Duration {
    jittered(backoff(attempt)).max(server.unwrap_or_default())
}

/// Exponential backoff with a cap: 0.25 s, 0.5 s, 1 s, ... 8 s (before jitter).
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(250u64.saturating_mul(1 << attempt.saturating_sub(1).min(5)))
}

/// `pause` scaled by a random factor in 0.5..1, so that many trainer processes refused at the
/// same moment do not all come back at the same moment.
fn jittered(pause: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // A fresh RandomState is randomly keyed: enough randomness for spreading retries.
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    pause.mul_f64(0.5 + 0.5 * (bits >> 11) as f64 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_to_full_and_varies() {
        let pauses: std::collections::HashSet<Duration> =
            (0..20).map(|_| jittered(Duration::from_secs(8))).collect();
        assert!(pauses.len() > 1, "{pauses:?}");
        for p in pauses {
            assert!(
                p >= Duration::from_secs(4) && p <= Duration::from_secs(8),
                "{p:?}"
            );
        }
    }

    #[test]
    fn retry_after_is_read_in_seconds_capped_and_waited_at_least() {
        assert_eq!(retry_after("1"), Some(Duration::from_secs(1)));
        assert_eq!(retry_after(" 30 "), Some(Duration::from_secs(30)));
        assert_eq!(retry_after("7200"), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(retry_after("-1"), None);
        // The server's pause wins over a shorter backoff; a longer backoff stays.
        assert_eq!(
            pause_before_retry(1, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert!(pause_before_retry(6, Some(Duration::from_millis(10))) >= Duration::from_secs(4));
        assert!(pause_before_retry(1, None) <= Duration::from_millis(250));
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(1), Duration::from_millis(250));
        assert_eq!(backoff(2), Duration::from_millis(500));
        assert_eq!(backoff(6), Duration::from_secs(8));
        assert_eq!(backoff(60), Duration::from_secs(8));
    }
}
