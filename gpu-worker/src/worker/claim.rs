//! Claiming and leases: the claimer keeps up to `device_slots + prefetch` tasks claimed, renews each
//! one's lease while it is held (a lost lease or the worker's shutdown stops the task's
//! children), and runs each claimed task's CPU stage at once, handing what it prepared to the
//! run loop ([`super::run`]). A drain stops the claimer and the CPU stages: their tasks have
//! not reached the device, so they go back to the queue at once.

use super::Worker;
use super::ack::{HeldAt, backoff};
use crate::child::supervisor::Launcher;
use crate::task::budget::{remaining, task_budget};
use crate::task::prepare::{CpuStageEnd, DeviceHandoff, PrepareContext, prepare};
use crate::task::verdict::{Classified, VerdictContext, budget_spent};
use crucible_task_manager::{Lease, LeaseState};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A claimed task: its lease, renewed until the task ends, and the token that stops its
/// children. Holding it holds one of the worker's places in the pipeline.
pub(super) struct ClaimedTask {
    pub(super) lease: Lease,
    /// A child of the worker's shutdown: cancelled by the shutdown, by the lease's end, or
    /// from the worker's side (a child on standby abandoned).
    pub(super) cancel: CancellationToken,
    renewer: tokio::task::JoinHandle<()>,
    /// When the broker last said the lease is held: an ack through an outage is retried
    /// until that lease has run out ([`super::ack`]).
    pub(super) held: HeldAt,
    _place: OwnedSemaphorePermit,
    /// When it was claimed: the start of its `crucible_evaluation_seconds`.
    pub(super) claimed_at: Instant,
}

impl Drop for ClaimedTask {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

/// A task whose CPU stage is over, waiting for the device.
pub(super) struct DeviceBoundTask {
    pub(super) task: ClaimedTask,
    pub(super) handoff: DeviceHandoff,
    pub(super) ready_at: Instant,
    /// What is left of the task's `timeout_s` for its device stage.
    pub(super) budget: Duration,
}

impl Worker {
    /// Claims while there is room in the pipeline and claiming is allowed, and starts each
    /// claimed task's CPU stage at once.
    pub(super) async fn claim_loop(
        self: Arc<Self>,
        places: Arc<Semaphore>,
        ready_tx: mpsc::UnboundedSender<DeviceBoundTask>,
        mut gate: watch::Receiver<bool>,
        shutdown: CancellationToken,
    ) {
        let mut cpu_stages = JoinSet::new();
        let mut claim_errors = 0u32;
        // A drain ends claiming too; a claim already waiting (`claim_wait`, short) is let
        // finish, and what it took is given back.
        let stopped = || async {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = self.drain.cancelled() => {}
            }
        };
        loop {
            while cpu_stages.try_join_next().is_some() {}
            if shutdown.is_cancelled() || self.drain.is_cancelled() {
                break;
            }
            if !*gate.borrow_and_update() {
                tokio::select! {
                    r = gate.changed() => if r.is_err() { break },
                    _ = stopped() => {}
                }
                continue;
            }
            // A verdict kept through a broker outage is stored before new work is taken.
            tokio::select! {
                () = self.acks.open() => {}
                _ = stopped() => continue,
            }
            let place = tokio::select! {
                p = places.clone().acquire_owned() => p.expect("the pipeline semaphore is never closed"),
                _ = stopped() => continue,
            };
            let claimed = tokio::select! {
                c = self.broker.claim(&self.id, &self.cfg.device_class, self.cfg.claim_wait) => c,
                () = shutdown.cancelled() => continue,
            };
            match claimed {
                Ok(Some(lease)) => {
                    claim_errors = 0;
                    self.metrics.queue_waited(lease.queued_for);
                    let task = self.claimed(lease, place, &shutdown);
                    if self.drain.is_cancelled() {
                        self.give_back(&task, "worker draining").await;
                        continue;
                    }
                    cpu_stages.spawn(self.clone().cpu_stage(task, ready_tx.clone()));
                }
                Ok(None) => {}
                Err(e) => {
                    claim_errors += 1;
                    let backoff = Duration::from_millis(200 * 2u64.pow(claim_errors.min(5)));
                    tracing::warn!(worker_id = %self.id, error = %e, ?backoff, "claim failed");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = stopped() => {}
                    }
                }
            }
        }
        while cpu_stages.join_next().await.is_some() {}
    }

    /// Starts renewing a fresh lease; the task's cancel token fires when the lease is lost,
    /// the task is cancelled or the worker shuts down.
    fn claimed(
        &self,
        lease: Lease,
        place: OwnedSemaphorePermit,
        shutdown: &CancellationToken,
    ) -> ClaimedTask {
        tracing::info!(worker_id = %self.id, task_id = %lease.task_id, attempt = lease.attempt, "task claimed");
        let cancel = shutdown.child_token();
        let held = HeldAt::now();
        let renewer = {
            let broker = self.broker.clone();
            let lease = lease.clone();
            let cancel = cancel.clone();
            let every = broker.config().lease_ttl / 3;
            let held = held.clone();
            tokio::spawn(async move {
                // After a failed renewal the next comes on the ack's short backoff, not a
                // third of the lease later: the lease is pushed out as soon as the broker
                // is back, before the reaper can take it.
                let mut retrying: Option<Box<dyn Iterator<Item = Duration> + Send>> = None;
                loop {
                    let pause = retrying.as_mut().and_then(|p| p.next()).unwrap_or(every);
                    tokio::time::sleep(pause.min(every)).await;
                    match broker.renew(&lease).await {
                        Ok(LeaseState::Held) => {
                            held.renewed();
                            retrying = None;
                        }
                        Ok(state) => {
                            tracing::info!(task_id = %lease.task_id, ?state, "lease ended, stopping the task");
                            cancel.cancel();
                            return;
                        }
                        // Only the broker's answer ends the task: an unreachable broker (an
                        // outage, a restart) neither stops the evaluation nor drops the lease
                        // here; its verdict is kept and acked when the broker is back.
                        Err(e) => {
                            tracing::warn!(task_id = %lease.task_id, error = %e, "lease renewal failed, the task goes on");
                            retrying.get_or_insert_with(|| Box::new(backoff()));
                        }
                    }
                }
            })
        };
        ClaimedTask {
            lease,
            cancel,
            renewer,
            held,
            _place: place,
            claimed_at: Instant::now(),
        }
    }

    /// The CPU stage of a claimed task; a task it cannot finish goes on to the device loop.
    async fn cpu_stage(
        self: Arc<Self>,
        task: ClaimedTask,
        ready_tx: mpsc::UnboundedSender<DeviceBoundTask>,
    ) {
        let mut ready = DeviceHandoff::default();
        if self.cfg.compile_pool {
            // A template may be warming (seconds, more on a loaded node): a task cancelled
            // meanwhile, by a client or by the worker's shutdown, must not wait for it.
            let template = tokio::select! {
                template = self.ready_template() => Some(template),
                () = task.cancel.cancelled() => None,
                () = self.drain.cancelled() => None,
            };
            let Some(template) = template else {
                self.finish(&task, Ok(Classified::Cancelled)).await;
                return;
            };
            let launcher = template
                .as_deref()
                .map_or(Launcher::Direct, Launcher::Template);
            let ctx = PrepareContext {
                cfg: &self.cfg,
                cache: self.build_cache.as_ref(),
                cuda_arch: self.cuda_arch.as_deref(),
                software: self.software.lock().expect("software lock").clone(),
                broker: Some(&*self.broker),
                lent_cores: self.lent_cores.as_ref(),
            };
            let label = format!("{}_cpu", task.lease.task_id);
            // Its own token, so that a drain stops the CPU stage and not the task's lease.
            let stage_cancel = task.cancel.child_token();
            let prepared = prepare(
                &ctx,
                &task.lease.spec,
                &label,
                launcher,
                stage_cancel.clone(),
            );
            tokio::pin!(prepared);
            let prepared = loop {
                tokio::select! {
                    end = &mut prepared => break end,
                    () = self.drain.cancelled(), if !stage_cancel.is_cancelled() => stage_cancel.cancel(),
                }
            };
            match prepared {
                Ok(CpuStageEnd::ToDevice(r)) => ready = *r,
                Ok(CpuStageEnd::Final(classified)) => {
                    tracing::info!(worker_id = %self.id, task_id = %task.lease.task_id, "decided in the cpu stage");
                    self.finish(&task, Ok(classified)).await;
                    return;
                }
                Err(e) => {
                    if let Some(t) = &template {
                        self.template.lock().await.discard(t);
                    }
                    tracing::warn!(worker_id = %self.id, task_id = %task.lease.task_id, error = %e, "cpu stage failed, the device stage does everything");
                }
            }
        }
        if self.drain.is_cancelled() {
            self.give_back(&task, "worker draining before the task ran")
                .await;
            return;
        }
        // One budget for the whole task: the device stage gets what the CPU stage left.
        let Some(budget) = remaining(task_budget(&task.lease.spec), ready.cpu_used) else {
            tracing::info!(worker_id = %self.id, task_id = %task.lease.task_id, "budget spent in the cpu stage");
            let ctx = VerdictContext::for_task(&task.lease.spec, &self.cfg);
            self.finish(&task, Ok(budget_spent(&ctx))).await;
            return;
        };
        let task = DeviceBoundTask {
            task,
            handoff: ready,
            ready_at: Instant::now(),
            budget,
        };
        if let Err(mpsc::error::SendError(task)) = ready_tx.send(task) {
            self.give_back(&task.task, "worker stopped before the task ran")
                .await;
        }
    }
}
