//! One worker: a process's hold on one device, from registration to deregistration. This
//! file owns the worker's identity and what it shows the registry (state, heartbeats), its
//! warm template and its device's health; the rest is split by concept, each file small
//! enough to read whole:
//!
//! - [`run`]: the run loop: the start-up self-test, the device loop, back-off, shutdown;
//! - [`claim`]: claiming, the lease renewers and the CPU stage of each claimed task;
//! - [`pipeline`]: who may use the device when, as a pure state machine (no tokio tasks);
//! - [`outcome`]: how a task ends: verdicts stored, tasks given back, the reference cache;
//! - [`ack`]: acks kept and retried through a broker outage (pure schedule, the claim gate).
//!
//! May import: `process`, `sandbox`, `child`, `cache`, `device`, `config`, `metrics`, `task`:
//! the top of the crate (`scripts/check_layout.py` checks every folder's rule).

mod ack;
mod claim;
mod neighbours;
mod outcome;
mod pipeline;
mod run;

use crate::cache::build_cache::BuildCache;
use crate::cache::reference_cache::{self, SoftwareVersions};
use crate::child::template::{Template, TemplateSlot};
use crate::config::WorkerConfig;
use crate::device::{DeviceSlot, check_gpu};
use crate::metrics::WorkerMetrics;
use crate::process::lending::LentCores;
use crate::task::stage::child_env;
use chrono::Utc;
use crucible_shared::{TaskId, WorkerId, WorkerInfo, WorkerState};
use crucible_task_manager::Broker;
use std::sync::{Arc, Mutex};

/// Why a worker stopped without being asked to.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The sandbox this worker is configured to require is not in place: it refuses to serve.
    #[error("refusing to serve: {0}")]
    Sandbox(#[from] crate::sandbox::SandboxError),
}

#[derive(Debug, Clone)]
struct Status {
    state: WorkerState,
    current_task: Option<TaskId>,
    tasks_done: u64,
    /// Tasks whose verdict was stored after the drain began: a process that serves them
    /// (`crucible up`) keeps answering until their clients have read them.
    stored_while_draining: Vec<TaskId>,
}

/// One worker: claims tasks for its device from the broker, runs them and stores their
/// verdicts (the module's doc says which file does what).
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
    /// The process's worker metrics, shared by its workers.
    metrics: Arc<WorkerMetrics>,
    /// Its CPU stages on its lent device cores, moved off while its device times
    /// (`CRUCIBLE_LEND_DEVICE_CORES`; [`crate::process::lending`]).
    lent_cores: Option<Arc<LentCores>>,
    /// Shut while an ack is retried through a broker outage: the claimer waits on it.
    acks: ack::AckGate,
    /// Cancelled when the worker starts draining ([`Worker::drain`]): by SIGTERM, or by an
    /// operator's drain heard in a heartbeat's answer.
    drain: tokio_util::sync::CancellationToken,
}

impl Worker {
    /// A worker for `cfg`'s device, counted in `metrics`; nothing is sent to the broker until
    /// it runs.
    pub fn new(broker: Arc<dyn Broker>, cfg: WorkerConfig, metrics: Arc<WorkerMetrics>) -> Self {
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
        // The precompiled headers' directory exists before the sandbox lists what children
        // may read; the headers themselves are made in the background (run).
        if let Some(dir) = cfg.pch_dir().filter(|_| build_cache.is_some())
            && let Err(e) = crate::cache::pch::prepare(&dir)
        {
            tracing::warn!(dir = %dir.display(), error = %e, "precompiled headers unavailable");
        }
        metrics.worker_started(&cfg.node, &cfg.device, &cfg.device_class);
        Self {
            broker,
            metrics,
            lent_cores: cfg.cores.lent_cores(),
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
                stored_while_draining: Vec::new(),
            })),
            template: tokio::sync::Mutex::new(TemplateSlot::default()),
            acks: ack::AckGate::new(),
            drain: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Starts a drain (once; later calls do nothing): the worker stops claiming, gives back at
    /// once what it claimed ahead, lets the evaluations on its device finish (up to
    /// `drain_timeout`), stores their verdicts, deregisters, and its `run` returns.
    pub fn drain(&self, why: &str) {
        if !self.drain.is_cancelled() {
            tracing::info!(worker_id = %self.id, why, drain_timeout = ?self.cfg.drain_timeout, "draining");
            self.drain.cancel();
        }
    }

    /// The tasks whose verdicts this worker stored after its drain began.
    pub fn verdicts_stored_while_draining(&self) -> Vec<TaskId> {
        self.status
            .lock()
            .expect("worker status lock")
            .stored_while_draining
            .clone()
    }

    /// The worker's id in the registry and in claims.
    pub fn id(&self) -> &WorkerId {
        &self.id
    }

    pub(super) fn set(&self, state: WorkerState, current_task: Option<TaskId>) {
        let mut s = self.status.lock().expect("worker status lock");
        s.state = state;
        s.current_task = current_task;
    }

    pub(super) fn info(&self) -> WorkerInfo {
        let s = self.status.lock().expect("worker status lock").clone();
        WorkerInfo {
            worker_id: self.id.clone(),
            node: self.cfg.node.clone(),
            device: self.cfg.device_info(),
            device_index: self.cfg.device.index(),
            state: s.state,
            current_task: s.current_task,
            tasks_done: s.tasks_done,
            started_at: self.started_at,
            last_heartbeat: Utc::now(),
            sandbox: self.cfg.sandbox.status(),
        }
    }

    pub(super) async fn publish(&self) {
        match self.broker.worker_heartbeat(&self.info()).await {
            Ok(answer) if answer.drain => self.drain("an operator asked for a drain"),
            Ok(_) => {}
            Err(e) => tracing::warn!(worker_id = %self.id, error = %e, "worker heartbeat failed"),
        }
    }

    /// Removes what dead processes of this worker's identity left under its work root (task
    /// and template directories of a worker killed with `kill -9`), before it makes any.
    pub(super) async fn sweep_leftovers(&self) {
        let (root, me) = (
            self.cfg.work_root.clone(),
            self.cfg.dir_owner.worker.clone(),
        );
        let swept =
            tokio::task::spawn_blocking(move || crate::process::sweep::sweep(&root, &me)).await;
        match swept {
            Ok(Ok(report)) => tracing::info!(
                worker_id = %self.id,
                removed = report.removed.len(),
                left = report.left.len(),
                "swept the work root"
            ),
            Ok(Err(e)) => {
                tracing::warn!(worker_id = %self.id, error = %e, "sweeping the work root failed")
            }
            Err(e) => {
                tracing::warn!(worker_id = %self.id, error = %e, "sweeping the work root failed")
            }
        }
    }

    /// The template to fork the next child from, started if needed; `None` when templates are
    /// off or unavailable (the child is then spawned directly).
    pub(super) async fn ready_template(&self) -> Option<Arc<Template>> {
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
                &cfg.dir_owner,
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
    pub(super) async fn ensure_healthy(&self) -> bool {
        let healthy = match &self.cfg.device {
            DeviceSlot::Cpu { .. } => true,
            DeviceSlot::Gpu { index, .. } => {
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
        };
        self.metrics.device_health(&self.cfg.device, healthy);
        healthy
    }
}

/// How a claimed task ended, as the run loop counts it.
enum TaskEnd {
    Stored,
    Cancelled,
    ServiceFault,
    /// Given back because a neighbour on the device failed first: no fault of this worker.
    Retried,
    DeviceUnhealthy,
}
