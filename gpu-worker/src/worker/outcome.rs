//! How a task ends: its verdict stored (after a GPU health check when it is a CUDA fault),
//! or the task given back to the queue; and the reference-timing cache the verdicts feed and
//! the next tasks of the same problem read.

use super::ack::{ACK_GRACE, backoff, next_wait, retry_until, worth_retrying};
use super::claim::ClaimedTask;
use super::{TaskEnd, Worker};
use crate::cache::reference_cache::{self, REF_CACHE_NAMESPACE, SoftwareVersions};
use crate::device::{DeviceSlot, check_gpu};
use crate::task::verdict::Classified;
use crucible_shared::{EvalResult, RuntimeStats, TaskSpec, VerdictCode};
use crucible_task_manager::{AckOutcome, BrokerError, LeaseState};
use std::time::{Duration, Instant};

impl Worker {
    /// Stores a task's verdict, or gives the task back: the end of every claimed task.
    pub(super) async fn finish(
        &self,
        task: &ClaimedTask,
        outcome: std::io::Result<Classified>,
    ) -> TaskEnd {
        let lease = &task.lease;
        match outcome {
            Ok(Classified::Verdict(result)) => self.store_verdict(task, *result).await,
            Ok(Classified::ServiceFault(reason)) => {
                self.give_back(task, &reason).await;
                TaskEnd::ServiceFault
            }
            Ok(Classified::Cancelled) => {
                // Cancelled by a client, or our lease was lost, or we are shutting down: in
                // the last case the task goes back to the queue now rather than at expiry.
                if matches!(self.broker.renew(lease).await, Ok(LeaseState::Held)) {
                    self.give_back(task, "worker shut down during the task")
                        .await;
                }
                TaskEnd::Cancelled
            }
            Err(e) => {
                self.give_back(task, &format!("worker could not run the task: {e}"))
                    .await;
                TaskEnd::ServiceFault
            }
        }
    }

    /// The cached timing of the task's reference on this worker, unless performance is not
    /// measured, `force_refresh` asks for a fresh timing, or a part of the key is unknown. The
    /// first task a worker ever runs knows no software versions yet (the harness reports them
    /// with its result), so it always times the reference; its timing then fills the cache.
    pub(super) async fn cached_reference(&self, spec: &TaskSpec) -> Option<RuntimeStats> {
        if spec.request.force_refresh {
            return None;
        }
        let software = self.software.lock().expect("software lock").clone();
        let key = reference_cache::key_for(
            spec,
            &self.cfg.device,
            self.cfg.cpu_threads,
            self.driver.as_deref(),
            software.as_ref(),
        )?;
        match self.broker.kv_get(REF_CACHE_NAMESPACE, &key).await {
            Ok(Some(value)) => {
                let stats = reference_cache::decode(&value);
                if stats.is_none() {
                    tracing::warn!(worker_id = %self.id, key, "unreadable reference cache entry, timing the reference");
                }
                stats
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(worker_id = %self.id, error = %e, "reference cache lookup failed, timing the reference");
                None
            }
        }
    }

    /// The key and timing to cache from a verdict: a reference timed now (not taken from the
    /// cache) for a correct candidate, on a quiet device with the rest of its task stopped (the
    /// judge's `timing_check`: a timing that may have been contaminated is never stored),
    /// keyed by the software this very run reported.
    pub(super) fn timing_to_cache(
        &self,
        spec: &TaskSpec,
        result: &EvalResult,
        software: &SoftwareVersions,
    ) -> Option<(String, RuntimeStats)> {
        let quiet = result.timing_check.as_ref().is_some_and(|c| c.device_quiet);
        if !result.correct || result.ref_runtime_cached || !quiet {
            return None;
        }
        let stats = result.ref_runtime_ms?;
        let key = reference_cache::key_for(
            spec,
            &self.cfg.device,
            self.cfg.cpu_threads,
            self.driver.as_deref(),
            Some(software),
        )?;
        Some((key, stats))
    }

    /// Stores a fresh reference timing (replacing any older one, as `force_refresh` wants)
    /// before the verdict is stored, so the next task of the same problem finds it.
    pub(super) async fn cache_reference(&self, key: &str, stats: &RuntimeStats) {
        let ttl = self.broker.config().result_ttl;
        if let Err(e) = self
            .broker
            .kv_put(
                REF_CACHE_NAMESPACE,
                key,
                &reference_cache::encode(stats),
                ttl,
            )
            .await
        {
            tracing::warn!(worker_id = %self.id, error = %e, "could not cache the reference timing");
        }
    }

    async fn store_verdict(&self, task: &ClaimedTask, mut result: EvalResult) -> TaskEnd {
        let lease = &task.lease;
        // Every verdict names the version of the problem it judged.
        result.problem_hash = Some(crucible_shared::problem_hash(
            &lease.spec.request.reference_code,
        ));
        if result.error_code == Some(VerdictCode::CudaFault)
            && let DeviceSlot::Gpu { index, .. } = &self.cfg.device
        {
            // A fault is the kernel's only if the GPU is fine afterwards; otherwise the
            // verdict cannot be trusted and the task is retried on a healthy device.
            let check = check_gpu(*index, self.cfg.probe_command.as_deref()).await;
            self.metrics.device_health(&self.cfg.device, check.is_ok());
            if let Err(detail) = check {
                tracing::error!(worker_id = %self.id, task_id = %lease.task_id, detail, "gpu unhealthy after a cuda fault");
                self.give_back(
                    task,
                    &format!("gpu failed its health check after a cuda fault: {detail}"),
                )
                .await;
                return TaskEnd::DeviceUnhealthy;
            }
            tracing::info!(worker_id = %self.id, task_id = %lease.task_id, "gpu healthy after a cuda fault");
        }
        let (verdict, error_code) = (result.verdict, result.error_code);
        // Counted only once the broker accepted it: a stale verdict is not this worker's.
        let counted = result.clone();
        let stored = self
            .ack_until_answered(task, "result", || {
                self.broker.complete(lease, result.clone())
            })
            .await;
        match stored {
            Ok(AckOutcome::Accepted) => {
                self.metrics.verdict_stored(
                    lease.spec.request.backend,
                    &counted,
                    task.claimed_at.elapsed(),
                );
                let mut status = self.status.lock().expect("worker status lock");
                status.tasks_done += 1;
                if self.drain.is_cancelled() {
                    status.stored_while_draining.push(lease.task_id.clone());
                }
                drop(status);
                tracing::info!(worker_id = %self.id, task_id = %lease.task_id, ?verdict, ?error_code, "task done");
            }
            Ok(AckOutcome::Stale) => {
                tracing::warn!(worker_id = %self.id, task_id = %lease.task_id, "result refused, lease no longer ours");
            }
            Err(e) => {
                tracing::error!(worker_id = %self.id, task_id = %lease.task_id, error = %e, "could not store result before the lease ran out, the task will be retried");
            }
        }
        TaskEnd::Stored
    }

    /// Gives a task back to the queue, retried through a broker outage like a verdict.
    pub(super) async fn give_back(&self, task: &ClaimedTask, reason: &str) {
        let lease = &task.lease;
        tracing::warn!(worker_id = %self.id, task_id = %lease.task_id, reason, "giving task back");
        let released = self
            .ack_until_answered(task, "release", || self.broker.release(lease, reason))
            .await;
        if let Err(e) = released {
            tracing::error!(worker_id = %self.id, task_id = %lease.task_id, error = %e, "release failed, the lease will expire instead");
        }
    }

    /// Runs the fenced ack `op` until the broker answers: an unreachable broker is retried with
    /// [`backoff`] until the lease, as last renewed, has run out plus [`ACK_GRACE`], or the
    /// task's token fires (its lease is known lost, or the worker stops hard). The first
    /// attempt is always made. Meanwhile the claimer claims nothing ([`super::ack::AckGate`]).
    async fn ack_until_answered<F, Fut>(
        &self,
        task: &ClaimedTask,
        what: &'static str,
        mut op: F,
    ) -> Result<AckOutcome, BrokerError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<AckOutcome, BrokerError>>,
    {
        let lease = &task.lease;
        let mut pauses = backoff();
        let mut hold = None;
        let mut attempts = 1u32;
        loop {
            let error = match op().await {
                Ok(answer) => {
                    if attempts > 1 {
                        tracing::info!(worker_id = %self.id, task_id = %lease.task_id, what, attempts, ?answer, "broker answered the ack after retries");
                    }
                    return Ok(answer);
                }
                Err(e) => e,
            };
            if !worth_retrying(&error) {
                return Err(error);
            }
            let until = retry_until(task.held.get(), self.broker.config().lease_ttl, ACK_GRACE);
            let pause = pauses.next().unwrap_or(Duration::from_secs(1));
            let Some(wait) = next_wait(Instant::now(), until, pause) else {
                return Err(error);
            };
            if hold.is_none() {
                tracing::warn!(worker_id = %self.id, task_id = %lease.task_id, what, error = %error, retry_for = ?until.saturating_duration_since(Instant::now()), "broker unreachable, keeping the ack and retrying");
                hold = Some(self.acks.hold());
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = task.cancel.cancelled() => return Err(error),
            }
            attempts += 1;
        }
    }
}
