//! One method per endpoint of the API that is a single request (and [`Client::wait`], the
//! long-poll of one task); rollouts are in `rollouts`, episodes in `episodes`.

use crate::{Client, ClientError};
use crucible_rl::problem_set::{
    ProblemBatch, ProblemBatchRequest, ProblemSet, ProblemSetSelection,
};
use crucible_rl::prompt::{Prompt, PromptRequest, PromptSettings};
use crucible_rl::report::BatchReport;
use crucible_shared::{
    BatchCancelResponse, BatchId, BatchRequest, BatchStatus, CancelResponse, CreateTenantRequest,
    CreatedTenant, DeletedTenant, DrainRequested, EvaluateRequest, Problem, ProblemList,
    QueueStatus, SubmitResponse, TaskId, TaskView, TenantList,
};
use std::time::Duration;

/// Answer of `POST /evaluate/batch`.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct BatchSubmitted {
    /// Poll it with [`Client::batch`].
    pub batch_id: crucible_shared::BatchId,
    /// One per requested task, in order; as with [`Client::evaluate`], one may be an
    /// identical open task (coalesced) or a task already done with a cached result.
    pub task_ids: Vec<TaskId>,
}

impl Client {
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
