//! The run loop of a worker: prove the sandbox, then drive the device. Prepared tasks arrive
//! from the claimer ([`super::claim`]); each one's device-stage child runs as a tokio task in
//! a `JoinSet` owned here, while [`DevicePipeline`] (pure) decides who may use the device when.
//! Service faults in a row and an unhealthy device make it stop claiming for a while.
//! A drain ([`Worker::drain`]: SIGTERM, or an operator's drain) stops claiming, gives back at
//! once the tasks claimed ahead, lets the device stages already started finish (up to
//! `drain_timeout`), then stops; shutdown (the caller's token, or the drain's bound) gives every
//! task still in flight back to the queue.

use super::claim::DeviceBoundTask;
use super::neighbours::Neighbours;
use super::pipeline::{DevicePipeline, DeviceTiming};
use super::{TaskEnd, Worker, WorkerError};
use crate::cache::reference_cache::SoftwareVersions;
use crate::child::supervisor::{self, ChildEvent, Launcher};
use crate::child::template::Template;
use crate::metrics::gpu_label;
use crate::task::evaluation::{
    Evaluated, StageInputs, apply_reference_timing, run_evaluation_gated,
};
use crate::task::verdict::Classified;
use crucible_shared::{TaskId, VerdictCode, WorkerState};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Consecutive service faults after which the worker stops claiming for a while.
const FAULTS_BEFORE_BACKOFF: u32 = 3;
const UNHEALTHY_RECHECK: Duration = Duration::from_secs(30);
/// How long a stopping worker waits for its CPU stages to give their tasks back.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// Longest wait for a neighbour's timing to end before the GPU is probed after a CUDA fault.
const QUIET_BEFORE_PROBE: Duration = Duration::from_secs(60);

/// What a device-stage child left behind.
struct DeviceDone {
    ready: DeviceBoundTask,
    template: Option<Arc<Template>>,
    outcome: std::io::Result<Evaluated>,
}

impl DeviceDone {
    /// The child's verdict is a CUDA fault (which the GPU's health decides whether to believe).
    fn cuda_fault(&self) -> bool {
        matches!(&self.outcome, Ok(Evaluated { classified: Classified::Verdict(r), .. })
            if r.error_code == Some(VerdictCode::CudaFault))
    }
}

/// Feeds the children's events in until no child is timing (bounded), with the gates held.
async fn quiet_device(device: &mut DevicePipeline, tasks: &mut DeviceTasks) {
    let deadline = tokio::time::sleep(QUIET_BEFORE_PROBE);
    tokio::pin!(deadline);
    while device.timing_now() {
        tokio::select! {
            Some((task_id, event)) = tasks.events.recv() => device.on_event(&task_id, event),
            () = &mut deadline => {
                tracing::warn!("a neighbour is still timing, probing the gpu anyway");
                return;
            }
        }
    }
}

/// The tokio side of the device, kept out of [`DevicePipeline`]: the device-stage children's
/// tasks and the feed of their events.
struct DeviceTasks {
    children: JoinSet<DeviceDone>,
    events_tx: mpsc::UnboundedSender<(TaskId, ChildEvent)>,
    events: mpsc::UnboundedReceiver<(TaskId, ChildEvent)>,
}

impl DeviceTasks {
    fn new() -> Self {
        let (events_tx, events) = mpsc::unbounded_channel();
        Self {
            children: JoinSet::new(),
            events_tx,
            events,
        }
    }
}

impl Worker {
    /// Runs until `shutdown` is cancelled or a drain ([`Worker::drain`]) has ended. Tasks in
    /// flight at shutdown (or at the drain's bound) are stopped and given back to the queue so
    /// other workers take them at once.
    ///
    /// Two loops: the claimer keeps up to `device_slots + prefetch` tasks claimed and runs
    /// each one's CPU stage as soon as it is claimed; the device loop (here) runs up to
    /// `device_slots` device stages at once, each timing alone ([`DevicePipeline`]), while the
    /// CPU stages of the next tasks overlap with them.
    ///
    /// Before its first claim it proves its sandbox (`crate::task::sandbox_selftest`); without the layers
    /// it requires it registers as unhealthy, deregisters and returns the reason.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Result<(), WorkerError> {
        tracing::info!(worker_id = %self.id, device = ?self.cfg.device, device_class = %self.cfg.device_class, device_slots = self.cfg.device_slots, compile_pool = self.cfg.compile_pool, prefetch = self.cfg.prefetch, cores = %self.cfg.cores, "worker starting");
        // The end of every task still in flight: the caller's shutdown, or a drain's bound.
        let shutdown = shutdown.child_token();
        self.sweep_leftovers().await;
        // Dropped, and its compiler killed, when the worker stops.
        let _pch = match (self.cfg.pch_dir(), &self.build_cache) {
            (Some(dir), Some(_)) => Some(tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
                crate::cache::pch::build(self.cfg.python.clone(), dir),
            ))),
            _ => None,
        };
        let registry = {
            let me = self.clone();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                loop {
                    me.publish().await;
                    tokio::select! {
                        _ = tokio::time::sleep(me.cfg.heartbeat_interval) => {}
                        () = stop.cancelled() => return,
                    }
                }
            })
        };

        let mut healthy = self.ensure_healthy().await;
        if healthy {
            // Warm the template before the first claim, so the first task does not wait for
            // `import torch` either; the sandbox's self-test forks from it like a task.
            let template = self.ready_template().await;
            let launcher = template
                .as_deref()
                .map_or(Launcher::Direct, Launcher::Template);
            if let Err(e) = crate::task::sandbox_selftest::ready(&self.cfg, launcher).await {
                tracing::error!(worker_id = %self.id, error = %e, "refusing to serve: the sandbox is not in place");
                registry.abort();
                self.set(WorkerState::Unhealthy, None);
                self.publish().await;
                if let Err(e) = self.broker.deregister_worker(&self.id).await {
                    tracing::warn!(worker_id = %self.id, error = %e, "deregister failed");
                }
                return Err(e.into());
            }
            // The registry shows the layers in force, and the worker ready, from now on: not
            // at the next heartbeat, by which time a fast task may have come and gone.
            self.set(WorkerState::Idle, None);
            self.publish().await;
        }
        let places = Arc::new(Semaphore::new(
            self.cfg.device_slots as usize + self.cfg.prefetch as usize,
        ));
        let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<DeviceBoundTask>();
        let (gate_tx, gate_rx) = watch::channel(healthy);
        let claimer =
            tokio::spawn(
                self.clone()
                    .claim_loop(places, ready_tx, gate_rx, shutdown.clone()),
            );
        let mut faults = 0u32;
        let mut device =
            DevicePipeline::new(self.cfg.device_slots as usize, self.cfg.device_memory);
        let mut tasks = DeviceTasks::new();
        let mut neighbours = Neighbours::new(matches!(
            self.cfg.device,
            crate::device::DeviceSlot::Gpu { .. }
        ));
        let mut drain_until: Option<tokio::time::Instant> = None;
        let mut lent_sweep = tokio::time::interval(crate::process::lending::SWEEP_INTERVAL);
        lent_sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !shutdown.is_cancelled() {
            let draining = self.drain.is_cancelled();
            if draining {
                if drain_until.is_none() {
                    drain_until = Some(tokio::time::Instant::now() + self.cfg.drain_timeout);
                    let _ = gate_tx.send(false);
                    // Shown at once, not at the next heartbeat.
                    self.set(WorkerState::Draining, device.active().cloned());
                    self.publish().await;
                }
                // What has not started on the device goes back at once: children on standby
                // (they give their tasks back as they end) and tasks waiting for the device.
                device.abandon_standby();
                while let Ok(task) = ready_rx.try_recv() {
                    self.give_back(&task.task, "worker draining before the task ran")
                        .await;
                }
                if device.is_empty() && tasks.children.is_empty() {
                    tracing::info!(worker_id = %self.id, "drained");
                    break;
                }
            }
            let backing_off = !draining && (!healthy || faults >= FAULTS_BEFORE_BACKOFF);
            if backing_off {
                let _ = gate_tx.send(false);
                // A child on standby has not started its task: give the task back.
                device.abandon_standby();
                if device.is_empty() && tasks.children.is_empty() {
                    self.set(WorkerState::Unhealthy, None);
                    self.publish().await;
                    // Tasks prepared for this device go back to the queue for healthy workers.
                    while let Ok(task) = ready_rx.try_recv() {
                        self.give_back(&task.task, "worker device unhealthy").await;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(UNHEALTHY_RECHECK) => {}
                        () = shutdown.cancelled() => break,
                        // Nothing runs: the drain ends at once, at the top of the loop.
                        () = self.drain.cancelled() => continue,
                    }
                    healthy = self.ensure_healthy().await;
                    faults = 0;
                    let _ = gate_tx.send(healthy);
                    continue;
                }
            }
            while let Some((task_id, spec)) = device.next_to_go() {
                // Looked up now, not at the fork: the task before it may have just stored
                // this problem's timing.
                let timing = self.cached_reference(&spec).await;
                device.go(&task_id, timing);
            }
            self.advance_device(&mut device);
            let vacated = self.lent_cores.as_ref().is_some_and(|l| l.vacated());
            self.set(
                if draining {
                    WorkerState::Draining
                } else if device.active().is_some() {
                    WorkerState::Busy
                } else {
                    WorkerState::Idle
                },
                device.active().cloned(),
            );
            let take_task = !draining && !backing_off && device.has_room(self.cfg.prefetch > 0);
            let drain_bound = tokio::time::sleep_until(
                drain_until.unwrap_or_else(|| tokio::time::Instant::now() + UNHEALTHY_RECHECK),
            );
            tokio::select! {
                Some((task_id, event)) = tasks.events.recv() => device.on_event(&task_id, event),
                // Outside timings: lends the device cores to CPU stages that have just started.
                _ = lent_sweep.tick(), if self.lent_cores.is_some() && !vacated => {
                    if let Some(lent) = &self.lent_cores {
                        lent.sweep();
                    }
                }
                Some(joined) = tasks.children.join_next(), if !tasks.children.is_empty() => {
                    let Ok(done) = joined else {
                        tracing::error!(worker_id = %self.id, "device stage task panicked, its lease will expire");
                        continue;
                    };
                    let timing = device.ended(&done.ready.task.lease.task_id);
                    if done.cuda_fault() && !device.is_empty() {
                        // The GPU is probed before the fault is believed: not in the middle
                        // of a neighbour's timing, and nothing new starts meanwhile.
                        device.hold(true);
                        quiet_device(&mut device, &mut tasks).await;
                    }
                    let end = self.end_device_stage(done, timing, &mut neighbours).await;
                    device.hold(false);
                    match end {
                        TaskEnd::Stored | TaskEnd::Cancelled => faults = 0,
                        TaskEnd::Retried => {}
                        TaskEnd::ServiceFault => faults += 1,
                        TaskEnd::DeviceUnhealthy => healthy = false,
                    }
                }
                next = ready_rx.recv(), if take_task => {
                    let Some(task) = next else { break };
                    if let Err(e) = self.start_device_stage(&mut device, &mut tasks, task).await {
                        tracing::error!(worker_id = %self.id, error = %e, "could not start a device stage");
                    }
                }
                () = self.drain.cancelled(), if !draining => {}
                () = drain_bound, if drain_until.is_some() => {
                    tracing::warn!(worker_id = %self.id, drain_timeout = ?self.cfg.drain_timeout, "drain bound reached, giving back the tasks still running");
                    shutdown.cancel();
                }
                () = shutdown.cancelled() => {}
            }
        }
        // Children still on the device were cancelled by the shutdown (or the drain's bound):
        // end each (their tasks go back to the queue).
        while let Ok(Some(joined)) =
            tokio::time::timeout(SHUTDOWN_GRACE, tasks.children.join_next()).await
        {
            if let Ok(done) = joined {
                let timing = device.ended(&done.ready.task.lease.task_id);
                self.end_device_stage(done, timing, &mut neighbours).await;
            }
        }
        self.set(WorkerState::Stopping, None);
        let _ = gate_tx.send(false);
        // The claimer returns once every CPU stage in flight has ended (each gives its task
        // back: the shutdown cancelled it).
        if tokio::time::timeout(SHUTDOWN_GRACE, claimer).await.is_err() {
            tracing::warn!(worker_id = %self.id, "cpu stages did not end in time, their leases will expire");
        }
        while let Ok(task) = ready_rx.try_recv() {
            self.give_back(&task.task, "worker shut down before the task ran")
                .await;
        }
        registry.abort();
        if let Err(e) = self.broker.deregister_worker(&self.id).await {
            tracing::warn!(worker_id = %self.id, error = %e, "deregister failed");
        }
        self.cfg.sandbox.release();
        tracing::info!(worker_id = %self.id, "worker stopped");
        Ok(())
    }

    /// Opens the device's gates that may open ([`DevicePipeline::advance_with`]); its lent
    /// cores are taken back before a timing's gate opens, and lent again once no child of
    /// this device times ([`crate::process::lending`]).
    fn advance_device(&self, device: &mut DevicePipeline) {
        let lent = self.lent_cores.as_deref();
        device.advance_with(|| {
            if let Some(lent) = lent {
                lent.vacate();
            }
        });
        if let Some(lent) = lent
            && !device.timing_now()
        {
            lent.restore();
        }
    }

    /// Forks (or spawns) the device-stage child of a prepared task. It sets itself up and
    /// imports the reference, then waits at its gate for its turn: see [`DevicePipeline`].
    async fn start_device_stage(
        self: &Arc<Self>,
        device: &mut DevicePipeline,
        tasks: &mut DeviceTasks,
        ready: DeviceBoundTask,
    ) -> std::io::Result<()> {
        let task_id = ready.task.lease.task_id.clone();
        let template = self.ready_template().await;
        let inputs = StageInputs {
            // Sent through the gate when the child is let go.
            reference_timing: None,
            prebuilt: ready.handoff.prebuilt.clone(),
            cuda_arch: self.cuda_arch.clone(),
            budget: Some(ready.budget),
            // The dry run is the CPU stage's; the device stage only finds its kernels.
            triton_precompile: false,
            // A device child is never lent anything: it has its own cores.
            lent_cores: None,
        };
        let events = tasks.events_tx.clone();
        let id = task_id.clone();
        let (gate, gate_child) = supervisor::gate(move |event| {
            let _ = events.send((id.clone(), event));
        })?;
        device.add(
            task_id.clone(),
            gate,
            ready.task.cancel.clone(),
            ready.task.lease.spec.clone(),
            ready.task.lease.attempt > 1,
        );
        self.advance_device(device);
        let me = self.clone();
        tasks.children.spawn(async move {
            let launcher = template
                .as_deref()
                .map_or(Launcher::Direct, Launcher::Template);
            let outcome = run_evaluation_gated(
                &me.cfg,
                &ready.task.lease.spec,
                task_id.as_str(),
                launcher,
                ready.task.cancel.clone(),
                inputs,
                Some(gate_child),
            )
            .await;
            DeviceDone {
                ready,
                template,
                outcome,
            }
        });
        Ok(())
    }

    /// The end of a device stage: caches, timings, the template's health, the verdict (a
    /// failure a neighbour on the device may have caused is given back instead).
    async fn end_device_stage(
        &self,
        done: DeviceDone,
        timing: DeviceTiming,
        neighbours: &mut Neighbours,
    ) -> TaskEnd {
        let DeviceDone {
            ready,
            template,
            outcome,
        } = done;
        let lease = &ready.task.lease;
        if let (Some(from), Some(until)) = (timing.timed_from, timing.timed_until) {
            // One line per timing: a benchmark of several workers checks from these that no
            // device ever timed two children at once (scripts/bench/scale.py).
            let us = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros());
            tracing::info!(worker_id = %self.id, task_id = %lease.task_id, gpu = %gpu_label(&self.cfg.device), from_unix_us = us(from), until_unix_us = us(until), "timing window");
        }
        let outcome = match outcome {
            Ok(Evaluated {
                mut classified,
                software,
                killed_for,
            }) => {
                if let Classified::Verdict(result) = &classified
                    && let Some(reason) = neighbours.retry_reason(result, &timing, killed_for)
                {
                    tracing::warn!(worker_id = %self.id, task_id = %lease.task_id, reason, "a neighbour on the device may have caused the failure, retrying");
                    self.finish(&ready.task, Ok(Classified::ServiceFault(reason)))
                        .await;
                    return TaskEnd::Retried;
                }
                if let Classified::Verdict(result) = &mut classified {
                    apply_reference_timing(result, timing.reference);
                }
                let versions = software.as_ref().and_then(SoftwareVersions::from_report);
                if let Some(v) = &versions {
                    *self.software.lock().expect("software lock") = Some(v.clone());
                }
                if let (Classified::Verdict(result), Some(v)) = (&classified, &versions)
                    && let Some((key, stats)) = self.timing_to_cache(&lease.spec, result, v)
                {
                    self.cache_reference(&key, &stats).await;
                }
                if let Classified::Verdict(result) = &mut classified {
                    result.stage_ms.extend(ready.handoff.stage_ms);
                    if let Some(go) = timing.go {
                        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
                        result
                            .stage_ms
                            .insert("wait_for_device".into(), ms(ready.ready_at, go));
                        result.stage_ms.insert(
                            "device_stage".into(),
                            ms(go, timing.result.unwrap_or_else(Instant::now)),
                        );
                    }
                }
                Ok(classified)
            }
            Err(e) => Err(e),
        };
        if let Some(t) = &template {
            let mut slot = self.template.lock().await;
            if matches!(outcome, Err(_) | Ok(Classified::ServiceFault(_))) {
                // Any trouble around a forked child may be the template's: start afresh.
                slot.discard(t);
            } else {
                slot.note_success();
            }
        }
        self.finish(&ready.task, outcome).await
    }
}
