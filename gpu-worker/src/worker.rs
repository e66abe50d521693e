//! The claim loop of one worker: register, claim, renew the lease while the child runs, store
//! the verdict (or give the task back on a service fault), keep the device healthy.

use crate::build_cache::BuildCache;
use crate::config::WorkerConfig;
use crate::device::{DeviceSlot, check_gpu};
use crate::evaluation::{
    Evaluated, StageInputs, apply_reference_timing, child_env, run_evaluation_gated,
};
use crate::prepare::{PrepareContext, PrepareEnd, Ready, prepare};
use crate::reference_cache::{self, REF_CACHE_NAMESPACE, SoftwareVersions};
use crate::supervisor::Launcher;
use crate::supervisor::{self, ChildEvent, Gate};
use crate::template::{Template, TemplateSlot};
use crate::verdict::Classified;
use chrono::Utc;
use crucible_shared::{
    EvalResult, RuntimeStats, TaskId, TaskSpec, VerdictCode, WorkerId, WorkerInfo, WorkerState,
};
use crucible_task_manager::{AckOutcome, Broker, Lease, LeaseState};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinSet;

/// Why a worker stopped without being asked to.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The sandbox this worker is configured to require is not in place: it refuses to serve.
    #[error("refusing to serve: {0}")]
    Sandbox(#[from] crate::sandbox::SandboxError),
}

/// Consecutive service faults after which the worker stops claiming for a while.
const FAULTS_BEFORE_BACKOFF: u32 = 3;
const UNHEALTHY_RECHECK: Duration = Duration::from_secs(30);
/// How long a stopping worker waits for its CPU stages to give their tasks back.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

#[derive(Debug, Clone)]
struct Status {
    state: WorkerState,
    current_task: Option<TaskId>,
    tasks_done: u64,
}

pub struct Worker {
    broker: Arc<dyn Broker>,
    /// Shared with the closures that start templates (no copy per task).
    cfg: Arc<WorkerConfig>,
    id: WorkerId,
    started_at: chrono::DateTime<Utc>,
    status: Arc<Mutex<Status>>,
    template: tokio::sync::Mutex<TemplateSlot>,
    /// NVML's driver version (GPU), `"none"` (CPU), or `None` when NVML did not say: part of
    /// every reference cache key, fetched once at start.
    driver: Option<String>,
    /// The software versions of the last result a harness reported; part of the reference
    /// and build cache keys of the next task.
    software: Mutex<Option<SoftwareVersions>>,
    /// The node-wide build cache (GPU workers with the compile pool on).
    build_cache: Option<BuildCache>,
    /// The device's architecture for CUDA builds on the CPU (`"9.0"`).
    cuda_arch: Option<String>,
}

impl Worker {
    pub fn new(broker: Arc<dyn Broker>, cfg: WorkerConfig) -> Self {
        let id = WorkerId(format!(
            "{}-{}-{}",
            cfg.node,
            match &cfg.device {
                DeviceSlot::Gpu { index, .. } => format!("gpu{index}"),
                DeviceSlot::Cpu { .. } => "cpu".to_owned(),
            },
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        let driver = reference_cache::driver_version(&cfg.device);
        let cuda_arch = match &cfg.device {
            DeviceSlot::Gpu { index, .. } => crate::device::cuda_arch(*index),
            DeviceSlot::Cpu { .. } => None,
        };
        let build_cache = (cfg.compile_pool && cuda_arch.is_some())
            .then(|| {
                BuildCache::open(
                    &cfg.build_cache_dir,
                    cfg.compile_jobs,
                    cfg.build_cache_entries,
                )
                .map_err(|e| {
                    tracing::warn!(dir = %cfg.build_cache_dir.display(), error = %e, "build cache unavailable, cuda candidates build on the device stage");
                })
                .ok()
            })
            .flatten();
        Self {
            broker,
            driver,
            build_cache,
            cuda_arch,
            software: Mutex::new(None),
            cfg: Arc::new(cfg),
            id,
            started_at: Utc::now(),
            status: Arc::new(Mutex::new(Status {
                state: WorkerState::Starting,
                current_task: None,
                tasks_done: 0,
            })),
            template: tokio::sync::Mutex::new(TemplateSlot::default()),
        }
    }

    pub fn id(&self) -> &WorkerId {
        &self.id
    }

    fn set(&self, state: WorkerState, current_task: Option<TaskId>) {
        let mut s = self.status.lock().expect("worker status lock");
        s.state = state;
        s.current_task = current_task;
    }

    fn info(&self) -> WorkerInfo {
        let s = self.status.lock().expect("worker status lock").clone();
        WorkerInfo {
            worker_id: self.id.clone(),
            node: self.cfg.node.clone(),
            device: self.cfg.device.info(),
            device_index: self.cfg.device.index(),
            state: s.state,
            current_task: s.current_task,
            tasks_done: s.tasks_done,
            started_at: self.started_at,
            last_heartbeat: Utc::now(),
            sandbox: self.cfg.sandbox.status(),
        }
    }

    async fn publish(&self) {
        if let Err(e) = self.broker.worker_heartbeat(&self.info()).await {
            tracing::warn!(worker_id = %self.id, error = %e, "worker heartbeat failed");
        }
    }

    /// Runs until `shutdown` turns true. Tasks in flight at shutdown are stopped and given
    /// back to the queue so other workers take them at once.
    ///
    /// Two loops: the claimer keeps up to `1 + prefetch` tasks claimed and runs each one's CPU
    /// stage as soon as it is claimed; the device loop (here) takes prepared tasks one at a
    /// time, so the device stage is exclusive while the CPU stages of the next tasks overlap
    /// with it.
    ///
    /// Before its first claim it proves its sandbox (`sandbox::selftest`); without the layers
    /// it requires it registers as unhealthy, deregisters and returns the reason.
    pub async fn run(
        self: Arc<Self>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), WorkerError> {
        tracing::info!(worker_id = %self.id, device = ?self.cfg.device, compile_pool = self.cfg.compile_pool, prefetch = self.cfg.prefetch, "worker starting");
        let registry = {
            let me = self.clone();
            let mut stop = shutdown.clone();
            tokio::spawn(async move {
                loop {
                    me.publish().await;
                    tokio::select! {
                        _ = tokio::time::sleep(me.cfg.heartbeat_interval) => {}
                        _ = stop.changed() => return,
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
            if let Err(e) = self.cfg.sandbox.ready(&self.cfg, launcher).await {
                tracing::error!(worker_id = %self.id, error = %e, "refusing to serve: the sandbox is not in place");
                registry.abort();
                self.set(WorkerState::Unhealthy, None);
                self.publish().await;
                if let Err(e) = self.broker.deregister_worker(&self.id).await {
                    tracing::warn!(worker_id = %self.id, error = %e, "deregister failed");
                }
                return Err(e.into());
            }
            // The registry shows the layers in force from now on.
            self.publish().await;
        }
        let places = Arc::new(Semaphore::new(1 + self.cfg.prefetch as usize));
        let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<ReadyTask>();
        let (gate_tx, gate_rx) = watch::channel(healthy);
        let claimer =
            tokio::spawn(
                self.clone()
                    .claim_loop(places, ready_tx, gate_rx, shutdown.clone()),
            );
        let mut faults = 0u32;
        let mut device = DevicePipeline::new();
        while !*shutdown.borrow() {
            let backing_off = !healthy || faults >= FAULTS_BEFORE_BACKOFF;
            if backing_off {
                let _ = gate_tx.send(false);
                // A child on standby has not started its task: give the task back.
                device.abandon_standby();
                if device.is_empty() {
                    self.set(WorkerState::Unhealthy, None);
                    self.publish().await;
                    // Tasks prepared for this device go back to the queue for healthy workers.
                    while let Ok(task) = ready_rx.try_recv() {
                        self.give_back(&task.task.lease, "worker device unhealthy")
                            .await;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(UNHEALTHY_RECHECK) => {}
                        _ = shutdown.changed() => break,
                    }
                    healthy = self.ensure_healthy().await;
                    faults = 0;
                    let _ = gate_tx.send(healthy);
                    continue;
                }
            }
            if let Some((task_id, spec)) = device.next_to_go() {
                // Looked up now, not at the fork: the task before it may have just stored
                // this problem's timing.
                let timing = self.cached_reference(&spec).await;
                device.go(&task_id, timing);
            }
            device.advance();
            self.set(
                if device.active().is_some() {
                    WorkerState::Busy
                } else {
                    WorkerState::Idle
                },
                device.active().cloned(),
            );
            let take_task = !backing_off && device.has_room(self.cfg.prefetch > 0);
            tokio::select! {
                Some((task_id, event)) = device.events.recv() => device.on_event(&task_id, event),
                Some(joined) = device.children.join_next(), if !device.children.is_empty() => {
                    let Ok(done) = joined else {
                        tracing::error!(worker_id = %self.id, "device stage task panicked, its lease will expire");
                        continue;
                    };
                    let timing = device.ended(&done.ready.task.lease.task_id);
                    match self.end_device_stage(done, timing).await {
                        TaskEnd::Stored | TaskEnd::Cancelled => faults = 0,
                        TaskEnd::ServiceFault => faults += 1,
                        TaskEnd::DeviceUnhealthy => healthy = false,
                    }
                }
                next = ready_rx.recv(), if take_task => {
                    let Some(task) = next else { break };
                    if let Err(e) = self.start_device_stage(&mut device, task).await {
                        tracing::error!(worker_id = %self.id, error = %e, "could not start a device stage");
                    }
                }
                _ = shutdown.changed() => {}
            }
        }
        // Children still on the device were cancelled by the shutdown: end each (their tasks
        // go back to the queue).
        while let Ok(Some(joined)) =
            tokio::time::timeout(SHUTDOWN_GRACE, device.children.join_next()).await
        {
            if let Ok(done) = joined {
                let timing = device.ended(&done.ready.task.lease.task_id);
                self.end_device_stage(done, timing).await;
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
            self.give_back(&task.task.lease, "worker shut down before the task ran")
                .await;
        }
        registry.abort();
        if let Err(e) = self.broker.deregister_worker(&self.id).await {
            tracing::warn!(worker_id = %self.id, error = %e, "deregister failed");
        }
        tracing::info!(worker_id = %self.id, "worker stopped");
        Ok(())
    }

    /// Claims while there is room in the pipeline and claiming is allowed, and starts each
    /// claimed task's CPU stage at once.
    async fn claim_loop(
        self: Arc<Self>,
        places: Arc<Semaphore>,
        ready_tx: mpsc::UnboundedSender<ReadyTask>,
        mut gate: watch::Receiver<bool>,
        shutdown: watch::Receiver<bool>,
    ) {
        let mut cpu_stages = JoinSet::new();
        let mut claim_errors = 0u32;
        let stopped = || {
            let mut rx = shutdown.clone();
            async move {
                let _ = rx.wait_for(|stop| *stop).await;
            }
        };
        loop {
            while cpu_stages.try_join_next().is_some() {}
            if *shutdown.borrow() {
                break;
            }
            if !*gate.borrow_and_update() {
                tokio::select! {
                    r = gate.changed() => if r.is_err() { break },
                    _ = stopped() => {}
                }
                continue;
            }
            let place = tokio::select! {
                p = places.clone().acquire_owned() => p.expect("the pipeline semaphore is never closed"),
                _ = stopped() => continue,
            };
            let claimed = tokio::select! {
                c = self.broker.claim(&self.id, self.cfg.claim_wait) => c,
                _ = stopped() => continue,
            };
            match claimed {
                Ok(Some(lease)) => {
                    claim_errors = 0;
                    let task = self.claimed(lease, place, shutdown.clone());
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

    /// Starts renewing a fresh lease; the task's cancel signal fires when the lease is lost,
    /// the task is cancelled or the worker shuts down.
    fn claimed(
        &self,
        lease: Lease,
        place: OwnedSemaphorePermit,
        mut shutdown: watch::Receiver<bool>,
    ) -> ClaimedTask {
        tracing::info!(worker_id = %self.id, task_id = %lease.task_id, attempt = lease.attempt, "task claimed");
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let renewer = {
            let broker = self.broker.clone();
            let lease = lease.clone();
            let cancel_tx = cancel_tx.clone();
            let every = broker.config().lease_ttl / 3;
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    match broker.renew(&lease).await {
                        Ok(LeaseState::Held) => {}
                        Ok(state) => {
                            tracing::info!(task_id = %lease.task_id, ?state, "lease ended, stopping the task");
                            let _ = cancel_tx.send(true);
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(task_id = %lease.task_id, error = %e, "lease renewal failed")
                        }
                    }
                }
            })
        };
        let shutdown_watch = {
            let cancel_tx = cancel_tx.clone();
            tokio::spawn(async move {
                if shutdown.wait_for(|stop| *stop).await.is_ok() {
                    let _ = cancel_tx.send(true);
                }
            })
        };
        ClaimedTask {
            lease,
            cancel: cancel_rx,
            cancel_tx,
            renewer,
            shutdown_watch,
            _place: place,
        }
    }

    /// The CPU stage of a claimed task; a task it cannot finish goes on to the device loop.
    async fn cpu_stage(
        self: Arc<Self>,
        task: ClaimedTask,
        ready_tx: mpsc::UnboundedSender<ReadyTask>,
    ) {
        let mut ready = Ready::default();
        if self.cfg.compile_pool {
            // A template may be warming (seconds, more on a loaded node): a task cancelled
            // meanwhile, by a client or by the worker's shutdown, must not wait for it.
            let mut cancel = task.cancel.clone();
            let cancelled = async move { cancel.wait_for(|c| *c).await.is_ok() };
            let template = tokio::select! {
                template = self.ready_template() => Some(template),
                true = cancelled => None,
            };
            let Some(template) = template else {
                self.finish(&task.lease, Ok(Classified::Cancelled)).await;
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
            };
            let label = format!("{}_cpu", task.lease.task_id);
            match prepare(
                &ctx,
                &task.lease.spec,
                &label,
                launcher,
                task.cancel.clone(),
            )
            .await
            {
                Ok(PrepareEnd::Ready(r)) => ready = r,
                Ok(PrepareEnd::Final(classified)) => {
                    tracing::info!(worker_id = %self.id, task_id = %task.lease.task_id, "decided in the cpu stage");
                    self.finish(&task.lease, Ok(classified)).await;
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
        let task = ReadyTask {
            task,
            ready,
            ready_at: Instant::now(),
        };
        if let Err(mpsc::error::SendError(task)) = ready_tx.send(task) {
            self.give_back(&task.task.lease, "worker stopped before the task ran")
                .await;
        }
    }

    /// The template to fork the next child from, started if needed; `None` when templates are
    /// off or unavailable (the child is then spawned directly).
    async fn ready_template(&self) -> Option<Arc<Template>> {
        if !self.cfg.use_template {
            return None;
        }
        let mut slot = self.template.lock().await;
        let cfg = &self.cfg;
        let env_cfg = Arc::clone(cfg);
        let template = slot
            .ready(
                &cfg.python,
                &cfg.work_root,
                move |dir: &std::path::Path| child_env(&env_cfg, dir, |k| std::env::var(k).ok()),
                &cfg.limits,
                cfg.template_max_forks,
            )
            .await?;
        // Known before the first result: the first tasks already find cached builds and
        // reference timings.
        let mut software = self.software.lock().expect("software lock");
        if software.is_none() {
            *software = template
                .software
                .as_ref()
                .and_then(SoftwareVersions::from_report);
        }
        drop(software);
        Some(template)
    }

    /// GPU workers check their device before taking work; CPU workers are always ready.
    async fn ensure_healthy(&self) -> bool {
        let DeviceSlot::Gpu { index, .. } = &self.cfg.device else {
            return true;
        };
        match check_gpu(*index, self.cfg.probe_command.as_deref()).await {
            Ok(detail) => {
                tracing::info!(worker_id = %self.id, gpu = index, detail, "gpu healthy");
                true
            }
            Err(detail) => {
                tracing::error!(worker_id = %self.id, gpu = index, detail, "gpu unhealthy");
                false
            }
        }
    }

    /// Forks (or spawns) the device-stage child of a prepared task. It sets itself up and
    /// imports the reference, then waits at its gate for its turn: see [`DevicePipeline`].
    async fn start_device_stage(
        self: &Arc<Self>,
        device: &mut DevicePipeline,
        ready: ReadyTask,
    ) -> std::io::Result<()> {
        let task_id = ready.task.lease.task_id.clone();
        let template = self.ready_template().await;
        let inputs = StageInputs {
            // Sent through the gate when the child is let go.
            reference_timing: None,
            prebuilt: ready.ready.prebuilt.clone(),
            cuda_arch: self.cuda_arch.clone(),
        };
        let events = device.events_tx.clone();
        let id = task_id.clone();
        let (gate, gate_child) = supervisor::gate(move |event| {
            let _ = events.send((id.clone(), event));
        })?;
        device.add(
            task_id.clone(),
            gate,
            ready.task.cancel_tx.clone(),
            ready.task.lease.spec.clone(),
        );
        let me = self.clone();
        device.children.spawn(async move {
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

    /// The end of a device stage: caches, timings, the template's health, the verdict.
    async fn end_device_stage(&self, done: DeviceDone, timing: DeviceTiming) -> TaskEnd {
        let DeviceDone {
            ready,
            template,
            outcome,
        } = done;
        let lease = &ready.task.lease;
        let outcome = match outcome {
            Ok(Evaluated {
                mut classified,
                software,
            }) => {
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
                    result.stage_ms.extend(ready.ready.stage_ms);
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
        self.finish(lease, outcome).await
    }

    /// Stores a task's verdict, or gives the task back: the end of every claimed task.
    async fn finish(&self, lease: &Lease, outcome: std::io::Result<Classified>) -> TaskEnd {
        match outcome {
            Ok(Classified::Verdict(result)) => self.store_verdict(lease, *result).await,
            Ok(Classified::ServiceFault(reason)) => {
                self.give_back(lease, &reason).await;
                TaskEnd::ServiceFault
            }
            Ok(Classified::Cancelled) => {
                // Cancelled by a client, or our lease was lost, or we are shutting down: in
                // the last case the task goes back to the queue now rather than at expiry.
                if matches!(self.broker.renew(lease).await, Ok(LeaseState::Held)) {
                    self.give_back(lease, "worker shut down during the task")
                        .await;
                }
                TaskEnd::Cancelled
            }
            Err(e) => {
                self.give_back(lease, &format!("worker could not run the task: {e}"))
                    .await;
                TaskEnd::ServiceFault
            }
        }
    }

    /// The cached timing of the task's reference on this worker, unless performance is not
    /// measured, `force_refresh` asks for a fresh timing, or a part of the key is unknown. The
    /// first task a worker ever runs knows no software versions yet (the harness reports them
    /// with its result), so it always times the reference; its timing then fills the cache.
    async fn cached_reference(&self, spec: &TaskSpec) -> Option<RuntimeStats> {
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
    /// cache) for a correct candidate, keyed by the software this very run reported.
    fn timing_to_cache(
        &self,
        spec: &TaskSpec,
        result: &EvalResult,
        software: &SoftwareVersions,
    ) -> Option<(String, RuntimeStats)> {
        if !result.correct || result.ref_runtime_cached {
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
    async fn cache_reference(&self, key: &str, stats: &RuntimeStats) {
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

    async fn store_verdict(&self, lease: &Lease, mut result: EvalResult) -> TaskEnd {
        // Every verdict names the version of the problem it judged.
        result.problem_hash = Some(crucible_shared::problem_hash(
            &lease.spec.request.reference_code,
        ));
        if result.error_code == Some(VerdictCode::CudaFault)
            && let DeviceSlot::Gpu { index, .. } = &self.cfg.device
        {
            // A fault is the kernel's only if the GPU is fine afterwards; otherwise the
            // verdict cannot be trusted and the task is retried on a healthy device.
            if let Err(detail) = check_gpu(*index, self.cfg.probe_command.as_deref()).await {
                tracing::error!(worker_id = %self.id, task_id = %lease.task_id, detail, "gpu unhealthy after a cuda fault");
                self.give_back(
                    lease,
                    &format!("gpu failed its health check after a cuda fault: {detail}"),
                )
                .await;
                return TaskEnd::DeviceUnhealthy;
            }
            tracing::info!(worker_id = %self.id, task_id = %lease.task_id, "gpu healthy after a cuda fault");
        }
        let verdict = result.error_code;
        match self.broker.complete(lease, result).await {
            Ok(AckOutcome::Accepted) => {
                self.status.lock().expect("worker status lock").tasks_done += 1;
                tracing::info!(worker_id = %self.id, task_id = %lease.task_id, ?verdict, "task done");
            }
            Ok(AckOutcome::Stale) => {
                tracing::warn!(worker_id = %self.id, task_id = %lease.task_id, "result refused, lease no longer ours");
            }
            Err(e) => {
                tracing::error!(worker_id = %self.id, task_id = %lease.task_id, error = %e, "could not store result, the lease will expire and the task be retried");
            }
        }
        TaskEnd::Stored
    }

    async fn give_back(&self, lease: &Lease, reason: &str) {
        tracing::warn!(worker_id = %self.id, task_id = %lease.task_id, reason, "giving task back");
        if let Err(e) = self.broker.release(lease, reason).await {
            tracing::error!(worker_id = %self.id, task_id = %lease.task_id, error = %e, "release failed, the lease will expire instead");
        }
    }
}

/// A claimed task: its lease, renewed until the task ends, and the signal that stops its
/// children. Holding it holds one of the worker's places in the pipeline.
struct ClaimedTask {
    lease: Lease,
    cancel: watch::Receiver<bool>,
    /// Stops the task's children from the worker's side.
    cancel_tx: watch::Sender<bool>,
    renewer: tokio::task::JoinHandle<()>,
    shutdown_watch: tokio::task::JoinHandle<()>,
    _place: OwnedSemaphorePermit,
}

impl Drop for ClaimedTask {
    fn drop(&mut self) {
        self.renewer.abort();
        self.shutdown_watch.abort();
    }
}

/// A task whose CPU stage is over, waiting for the device.
struct ReadyTask {
    task: ClaimedTask,
    ready: Ready,
    ready_at: Instant,
}

/// What a device-stage child left behind.
struct DeviceDone {
    ready: ReadyTask,
    template: Option<Arc<Template>>,
    outcome: std::io::Result<Evaluated>,
}

/// When a device child was let go and when its result arrived, and the reference timing it
/// was given then.
#[derive(Debug, Clone, Copy, Default)]
struct DeviceTiming {
    go: Option<Instant>,
    result: Option<Instant>,
    reference: Option<RuntimeStats>,
}

/// Where a device child is, as its events tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Forked; setting up (CUDA context) and importing the reference.
    Starting,
    /// Set up, blocked at its gate until it is let go.
    Standby,
    /// Let go: loading, instantiating and checking the candidate.
    Running,
    /// Blocked at its gate before timing.
    WantsTiming,
    /// Timing, alone on the device.
    Timing,
    /// Result written; the process is ending.
    Ended,
}

struct DeviceChild {
    gate: Gate,
    phase: Phase,
    cancel: watch::Sender<bool>,
    spec: TaskSpec,
    timing: DeviceTiming,
}

/// The children on one device and the rules of who runs when. One child is *active* (let go:
/// loading, checking and timing its candidate). When it has reported, the next task's child
/// is forked and sets itself up (CUDA context, the reference) while the last one exits, then
/// waits on *standby* and is let go the moment that one is gone. A child times its kernel only
/// when every other child on the device is dead or blocked on standby: timings are taken
/// alone.
struct DevicePipeline {
    children: JoinSet<DeviceDone>,
    controls: HashMap<TaskId, DeviceChild>,
    active: Option<TaskId>,
    standby: Option<TaskId>,
    events_tx: mpsc::UnboundedSender<(TaskId, ChildEvent)>,
    events: mpsc::UnboundedReceiver<(TaskId, ChildEvent)>,
}

impl DevicePipeline {
    fn new() -> Self {
        let (events_tx, events) = mpsc::unbounded_channel();
        Self {
            children: JoinSet::new(),
            controls: HashMap::new(),
            active: None,
            standby: None,
            events_tx,
            events,
        }
    }

    fn is_empty(&self) -> bool {
        self.controls.is_empty() && self.children.is_empty()
    }

    fn active(&self) -> Option<&TaskId> {
        self.active.as_ref()
    }

    /// Room for another child: with no child on the device, always; otherwise (claiming
    /// ahead) one on standby at most, and only while no child is active, that is while the
    /// last one is exiting. A new CUDA context set up beside a child that checks or times its
    /// candidate slowed that child's work by about as long as the set-up took (measured on
    /// the H100, docs/BENCHMARKS.md); beside a child that tears its context down it costs
    /// nothing, and the two overlap.
    fn has_room(&self, pipelined: bool) -> bool {
        if self.controls.is_empty() {
            return true;
        }
        pipelined
            && self.standby.is_none()
            && self.active.is_none()
            && self.controls.values().all(|c| c.phase == Phase::Ended)
    }

    fn add(&mut self, task_id: TaskId, gate: Gate, cancel: watch::Sender<bool>, spec: TaskSpec) {
        self.controls.insert(
            task_id.clone(),
            DeviceChild {
                gate,
                phase: Phase::Starting,
                cancel,
                spec,
                timing: DeviceTiming::default(),
            },
        );
        self.standby = Some(task_id);
    }

    /// The standby child, when it may go: no child is active and the previous one has exited
    /// (a child tearing down a large CUDA context slows the allocations of the next).
    fn next_to_go(&self) -> Option<(TaskId, TaskSpec)> {
        if self.active.is_some() || self.controls.values().any(|c| c.phase == Phase::Ended) {
            return None;
        }
        let id = self.standby.as_ref()?;
        Some((id.clone(), self.controls.get(id)?.spec.clone()))
    }

    /// Lets the standby child go, with the reference timing it is to use.
    fn go(&mut self, task_id: &TaskId, reference: Option<RuntimeStats>) {
        if self.standby.as_ref() != Some(task_id) {
            return;
        }
        self.standby = None;
        if let Some(child) = self.controls.get_mut(task_id) {
            let message = serde_json::json!({ "reference_timing": reference });
            if child.gate.open_with(&message).is_err() {
                tracing::warn!(task_id = %task_id, "could not open a child's gate");
            }
            child.timing.go = Some(Instant::now());
            child.timing.reference = reference;
            if child.phase == Phase::Standby {
                child.phase = Phase::Running;
            }
        }
        self.active = Some(task_id.clone());
    }

    /// Lets the active child time when it asks and it would be alone.
    fn advance(&mut self) {
        let Some(active) = self.active.clone() else {
            return;
        };
        let alone = self
            .controls
            .iter()
            .all(|(id, c)| *id == active || c.phase == Phase::Standby);
        if let Some(child) = self.controls.get_mut(&active)
            && child.phase == Phase::WantsTiming
            && alone
        {
            if child.gate.open().is_err() {
                tracing::warn!(task_id = %active, "could not open a child's gate");
            }
            child.phase = Phase::Timing;
        }
    }

    fn on_event(&mut self, task_id: &TaskId, event: ChildEvent) {
        let Some(child) = self.controls.get_mut(task_id) else {
            return;
        };
        match event {
            ChildEvent::Stage(stage) => match stage.as_str() {
                // A child let go before it reached standby passes it on the byte waiting.
                "standby" if child.timing.go.is_some() => child.phase = Phase::Running,
                "standby" => child.phase = Phase::Standby,
                "timing_gate" => child.phase = Phase::WantsTiming,
                _ if child.phase == Phase::Starting && child.timing.go.is_some() => {
                    child.phase = Phase::Running
                }
                _ => {}
            },
            ChildEvent::Result => {
                child.phase = Phase::Ended;
                child.timing.result = Some(Instant::now());
                if self.active.as_ref() == Some(task_id) {
                    self.active = None;
                }
            }
        }
    }

    /// Forgets a child whose stage ended; returns its timing.
    fn ended(&mut self, task_id: &TaskId) -> DeviceTiming {
        if self.active.as_ref() == Some(task_id) {
            self.active = None;
        }
        if self.standby.as_ref() == Some(task_id) {
            self.standby = None;
        }
        self.controls
            .remove(task_id)
            .map(|c| c.timing)
            .unwrap_or_default()
    }

    /// Stops the child on standby (its task goes back to the queue when it ends).
    fn abandon_standby(&mut self) {
        if let Some(id) = &self.standby
            && let Some(child) = self.controls.get(id)
        {
            let _ = child.cancel.send(true);
        }
    }
}

enum TaskEnd {
    Stored,
    Cancelled,
    ServiceFault,
    DeviceUnhealthy,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::GateChild;

    /// Lines the worker sent through a child's gate so far (the child's end, non-blocking):
    /// each opening is one line.
    fn opened(child: &GateChild) -> usize {
        let fd = child.read_end();
        let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
        let mut buf = [0u8; 4096];
        let n = nix::unistd::read(fd, &mut buf).unwrap_or(0);
        buf[..n].iter().filter(|b| **b == b'\n').count()
    }

    fn child(device: &mut DevicePipeline, id: &TaskId) -> GateChild {
        let (gate, child) = supervisor::gate(|_| {}).unwrap();
        let (cancel, _) = watch::channel(false);
        let spec = TaskSpec {
            request: crucible_shared::EvaluateRequest::new("ref", "cand"),
            seed: 1,
        };
        device.add(id.clone(), gate, cancel, spec);
        child
    }

    fn stage(device: &mut DevicePipeline, id: &TaskId, s: &str) {
        device.on_event(id, ChildEvent::Stage(s.to_owned()));
        device.advance();
    }

    /// What the device loop does: the standby child goes when it may, then grants.
    fn let_go(device: &mut DevicePipeline) {
        if let Some((id, _)) = device.next_to_go() {
            device.go(&id, None);
        }
        device.advance();
    }

    #[test]
    fn a_child_times_only_when_every_other_child_is_on_standby_or_gone() {
        let mut device = DevicePipeline::new();
        let (a, b, c) = (
            TaskId("t_a".into()),
            TaskId("t_b".into()),
            TaskId("t_c".into()),
        );

        assert!(device.has_room(false), "an empty device always has room");
        let a_gate = child(&mut device, &a);
        let_go(&mut device);
        assert_eq!(
            device.active(),
            Some(&a),
            "a free device lets the first child go"
        );
        assert_eq!(opened(&a_gate), 1);
        stage(&mut device, &a, "standby");
        stage(&mut device, &a, "correctness");
        assert!(
            !device.has_room(true),
            "no new context beside a child at work"
        );

        // Alone, `a` times at once.
        stage(&mut device, &a, "timing_gate");
        assert_eq!(opened(&a_gate), 1);

        // `a` reported: the next child sets up while `a` exits, and goes once `a` is gone.
        device.on_event(&a, ChildEvent::Result);
        assert!(device.has_room(true) && !device.has_room(false));
        let b_gate = child(&mut device, &b);
        let_go(&mut device);
        assert_eq!(opened(&b_gate), 0, "a is still exiting");
        let timing = device.ended(&a);
        assert!(timing.go.is_some() && timing.result.is_some());
        let_go(&mut device);
        assert_eq!(device.active(), Some(&b));
        assert_eq!(opened(&b_gate), 1);

        // A child still setting up holds back another's timing (the pipeline never forks one
        // beside a working child, but its gate does not rely on that).
        let c_gate = child(&mut device, &c);
        stage(&mut device, &b, "timing_gate");
        assert_eq!(opened(&b_gate), 0, "c is setting up");
        stage(&mut device, &c, "standby");
        assert_eq!(opened(&b_gate), 1, "c is blocked: b is alone");
        assert_eq!(opened(&c_gate), 0);
    }
}
