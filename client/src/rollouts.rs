//! Rollout batches: submitted under an idempotency key, split at [`MAX_ROLLOUTS`], and their
//! results read back by long-polls, every batch at once.

use crate::{Client, ClientError};
use crucible_rl::rollout::{
    MAX_ROLLOUTS, Rollout, RolloutBatchRequest, RolloutBatchResponse, RolloutEvalSettings,
    RolloutResult, RolloutResultsPage,
};
use crucible_shared::BatchId;
use std::time::Duration;

impl Client {
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
}
