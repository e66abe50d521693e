//! Worker settings, parsed from environment-style lookups by pure functions.
//! `config/sizing.rs` holds the defaults sized to the node, `config/metrics_bind.rs` the
//! metrics address.
//!
//! May import: `process`, `sandbox`, `cache`, `device` (`scripts/check_layout.py`).

use crate::device::DeviceSlot;
use crate::process::cores::{CoreSettings, Cores};
use crate::process::dir_owner::DirOwner;
use crate::process::limits::{ChildLimits, node_memory, task_memory_bound};
use crate::sandbox::Sandbox;
use crate::sandbox::config::SandboxSettings;
use crucible_shared::{DeviceClass, DeviceInfo};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod metrics_bind;
mod sizing;
pub use metrics_bind::{METRICS_OFF, METRICS_PORT_BASE, MetricsBind, metrics_addr};
use sizing::gpu_memory_bytes;
pub use sizing::{MAX_DEVICE_SLOTS, default_compile_jobs, default_device_slots};

/// Everything one worker runs with, read once at start-up ([`WorkerConfig::from_env`]).
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The Python interpreter that has torch (and triton).
    pub python: PathBuf,
    /// Parent of the per-task private directories.
    pub work_root: PathBuf,
    /// This process as the worker `{node}/{device}`: written in the owner file of every
    /// directory it makes under `work_root`, and whose leftovers its start-up sweep removes.
    pub dir_owner: DirOwner,
    /// Bounds on every task child (memory, processes, output, files, writable space).
    pub limits: ChildLimits,
    /// `CRUCIBLE_CHILD_MEMORY_MB` set a task's memory outright; otherwise it is derived from
    /// the node's memory and the children the node runs at once ([`WorkerConfig::with_cores`]).
    pub memory_set: bool,
    /// The device this worker owns.
    pub device: DeviceSlot,
    /// Its device class (`CRUCIBLE_DEVICE_CLASS`, else derived from the device's name): the
    /// worker claims tasks of this class and of none, and advertises it in the registry and in
    /// every result's `device.class`.
    pub device_class: DeviceClass,
    /// Device-stage children on the device at once (`CRUCIBLE_DEVICE_SLOTS`): they set up,
    /// compile, check and count side by side and time one at a time. 1 runs one task at a
    /// time, as before slots existed.
    pub device_slots: u32,
    /// The GPU's total memory (NVML; `None` for a CPU or when NVML does not answer): the
    /// device pipeline lets children go only while their footprints fit it.
    pub device_memory: Option<u64>,
    /// Host name reported in the registry.
    pub node: String,
    /// How long one claim call waits for a task before the loop checks for shutdown.
    pub claim_wait: Duration,
    /// How often the worker refreshes its registry entry.
    pub heartbeat_interval: Duration,
    /// Extra environment variable names passed through to children (never secrets).
    pub env_passthrough: Vec<String>,
    /// Threads a CPU child may use (torch.set_num_threads).
    pub cpu_threads: Option<u32>,
    /// The cores its device-stage and CPU-stage children are pinned to (`CRUCIBLE_CPUS`,
    /// `CRUCIBLE_DEVICE_CPUS`, `CRUCIBLE_STAGE_CPUS`; see [`crate::process::cores`]). A process with
    /// several GPU workers replaces it with each one's slice ([`WorkerConfig::with_cores`]).
    pub cores: Cores,
    /// Command that checks a GPU in a separate process (`<exe> probe-gpu`).
    pub probe_command: Option<PathBuf>,
    /// Fork task children from a warm template instead of starting a fresh interpreter.
    pub use_template: bool,
    /// Forks after which a template is replaced by a fresh one.
    pub template_max_forks: u32,
    /// Run each task's CPU stage (syntax, screening, import, CUDA extension builds) before it
    /// takes the device, overlapped with the device stage of other tasks.
    pub compile_pool: bool,
    /// Builds the node runs at once (shared by every worker that uses the same cache).
    pub compile_jobs: usize,
    /// The node-wide build cache directory.
    pub build_cache_dir: PathBuf,
    /// Entries the build cache keeps (least recently used go first).
    pub build_cache_entries: usize,
    /// Precompiled headers of torch/extension.h for the candidates' load_inline builds
    /// ([`crate::cache::pch`]; `CRUCIBLE_PCH`, on by default where the compile pool is; `0`
    /// turns it off). It halves main.cpp's compile, not a CUDA build's wall time (nvcc's
    /// translation unit decides that), and so the compiler work of a compile-bound node: the
    /// CUDA workload through the service on a 1×H200, 128.2 s without, 121.7 s with.
    pub pch: bool,
    /// Tasks a worker claims ahead of the one on its device, so that their CPU stages run
    /// while the device is busy.
    pub prefetch: u32,
    /// The harness's runtime integrity checks (docs/INTEGRITY.md). Off only to measure what
    /// they cost: results then carry the flag `integrity-checks-off`.
    pub integrity_checks: bool,
    /// The OS boundary around every child (settings, and once proven, the layers in force);
    /// shared by the clones of this configuration.
    pub sandbox: Arc<Sandbox>,
    /// Compile a Triton candidate's kernels in its CPU stage, by a dry run of its forward,
    /// and hand them to the device stage through the build cache (`CRUCIBLE_TRITON_PRECOMPILE`,
    /// on by default; needs the compile pool and a GPU's architecture).
    pub triton_precompile: bool,
    /// How long a draining worker (SIGTERM, or an operator's drain) lets the evaluations on
    /// its device run before it gives the rest back (`CRUCIBLE_DRAIN_TIMEOUT_S`, default
    /// [`DEFAULT_DRAIN_TIMEOUT`]).
    pub drain_timeout: Duration,
}

/// A draining worker's bound by default: evaluations take seconds, and one that outlasts it
/// (a long `timeout_s`) is given back and runs again elsewhere. The systemd unit's
/// `TimeoutStopSec` (deploy/crucible-worker@.service) stays above it plus a lease, for the
/// last acks.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(120);

impl WorkerConfig {
    /// Reads `CRUCIBLE_PYTHON`, `CRUCIBLE_WORK_DIR`, `CRUCIBLE_CHILD_MEMORY_MB` (default
    /// [`task_memory_bound`] of the node), `CRUCIBLE_TASK_SPACE_MB`, `CRUCIBLE_TASK_SPACE_INODES`,
    /// `CRUCIBLE_CHILD_MAX_PROCS`, `CRUCIBLE_CHILD_OUTPUT_KB`, `CRUCIBLE_CHILD_ENV_PASSTHROUGH`,
    /// `CRUCIBLE_CPU_THREADS`, `CRUCIBLE_TEMPLATE` (0 turns the warm template off),
    /// `CRUCIBLE_TEMPLATE_MAX_FORKS`, `CRUCIBLE_COMPILE_POOL` (0/1; on by default for GPUs),
    /// `CRUCIBLE_COMPILE_JOBS` (default [`default_compile_jobs`]), `CRUCIBLE_BUILD_CACHE` (directory),
    /// `CRUCIBLE_BUILD_CACHE_ENTRIES`, `CRUCIBLE_PREFETCH` (default 4 with the pool, else 0),
    /// `CRUCIBLE_INTEGRITY_CHECKS` (0 only to measure their cost), `CRUCIBLE_DEVICE_SLOTS`
    /// (default [`default_device_slots`] of the cores and the GPU's memory),
    /// `CRUCIBLE_TRITON_PRECOMPILE` (0 turns the CPU stage's Triton compiles off),
    /// `CRUCIBLE_DRAIN_TIMEOUT_S` (a drain's bound), `CRUCIBLE_CPUS`, `CRUCIBLE_DEVICE_CPUS`
    /// and `CRUCIBLE_STAGE_CPUS` (the cores of its children), and the sandbox's
    /// (`CRUCIBLE_SANDBOX*`, see [`SandboxSettings::from_lookup`]).
    pub fn from_lookup(
        device: DeviceSlot,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let num = |key: &str| -> Result<Option<u64>, String> {
            lookup(key)
                .filter(|v| !v.trim().is_empty())
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|e| format!("{key}: cannot parse {v:?}: {e}"))
                })
                .transpose()
        };
        let mut limits = ChildLimits::default();
        let memory_set = num("CRUCIBLE_CHILD_MEMORY_MB")?;
        if let Some(mb) = memory_set {
            limits.max_memory_bytes = mb << 20;
        }
        if let Some(mb) = num("CRUCIBLE_TASK_SPACE_MB")? {
            limits.max_space_bytes = mb.clamp(16, 1 << 20) << 20;
        }
        if let Some(n) = num("CRUCIBLE_TASK_SPACE_INODES")? {
            limits.max_space_inodes = n.clamp(1024, 1 << 32);
        }
        if let Some(n) = num("CRUCIBLE_CHILD_MAX_PROCS")? {
            limits.max_processes = n.max(8);
        }
        if let Some(kb) = num("CRUCIBLE_CHILD_OUTPUT_KB")? {
            limits.max_output_bytes = kb << 10;
        }
        let switch =
            |key: &str| lookup(key).map(|v| !matches!(v.trim(), "0" | "false" | "off" | "no"));
        let compile_pool =
            switch("CRUCIBLE_COMPILE_POOL").unwrap_or(matches!(device, DeviceSlot::Gpu { .. }));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let compile_jobs = num("CRUCIBLE_COMPILE_JOBS")?
            .map(|n| n.clamp(1, 1024) as usize)
            .unwrap_or_else(|| default_compile_jobs(cores, node_memory()));
        let prefetch = num("CRUCIBLE_PREFETCH")?
            .map(|n| n.min(64) as u32)
            .unwrap_or(if compile_pool { 4 } else { 0 });
        let device_class = device_class(&device, lookup("CRUCIBLE_DEVICE_CLASS").as_deref())?;
        let child_cores = CoreSettings::from_lookup(&lookup, crate::process::cores::available())?
            .cores_for(device.index().map(|_| 0), 1);
        let device_memory = gpu_memory_bytes(&device);
        let device_slots = match num("CRUCIBLE_DEVICE_SLOTS")? {
            Some(n) => n.clamp(1, u64::from(MAX_DEVICE_SLOTS)) as u32,
            None => default_device_slots(&device, cores, device_memory),
        };
        let build_cache_dir = lookup("CRUCIBLE_BUILD_CACHE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("crucible-builds"));
        let build_cache_entries = num("CRUCIBLE_BUILD_CACHE_ENTRIES")?
            .map(|n| n.max(1) as usize)
            .unwrap_or(1000);
        let work_root = lookup("CRUCIBLE_WORK_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("crucible"));
        let node = lookup("HOSTNAME")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(read_hostname);
        let dir_owner = DirOwner::this_process(worker_identity(&node, &device))
            .map_err(|e| format!("this worker's process record: {e}"))?;
        let mut cfg = Self {
            python: resolve_program(
                &lookup("CRUCIBLE_PYTHON")
                    .filter(|v| !v.is_empty())
                    .unwrap_or_else(|| "python3".to_owned()),
                lookup("PATH").as_deref(),
            ),
            work_root,
            dir_owner,
            limits,
            memory_set: memory_set.is_some(),
            device,
            device_class,
            device_slots,
            device_memory,
            node,
            claim_wait: Duration::from_secs(1),
            heartbeat_interval: Duration::from_secs(2),
            env_passthrough: lookup("CRUCIBLE_CHILD_ENV_PASSTHROUGH")
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            cpu_threads: num("CRUCIBLE_CPU_THREADS")?.map(|n| n as u32),
            cores: child_cores,
            probe_command: std::env::current_exe().ok(),
            use_template: lookup("CRUCIBLE_TEMPLATE")
                .is_none_or(|v| !matches!(v.trim(), "0" | "false" | "off")),
            template_max_forks: num("CRUCIBLE_TEMPLATE_MAX_FORKS")?
                .map(|n| n.clamp(1, u64::from(u32::MAX)) as u32)
                .unwrap_or(200),
            compile_pool,
            compile_jobs,
            build_cache_dir,
            build_cache_entries,
            pch: compile_pool && switch("CRUCIBLE_PCH").unwrap_or(true),
            prefetch,
            integrity_checks: switch("CRUCIBLE_INTEGRITY_CHECKS").unwrap_or(true),
            triton_precompile: switch("CRUCIBLE_TRITON_PRECOMPILE").unwrap_or(true),
            sandbox: Arc::new(Sandbox::new(SandboxSettings::from_lookup(&lookup)?)),
            drain_timeout: num("CRUCIBLE_DRAIN_TIMEOUT_S")?
                .map_or(DEFAULT_DRAIN_TIMEOUT, Duration::from_secs),
        };
        cfg.derive_task_memory(1);
        Ok(cfg)
    }

    /// The node's precompiled headers ([`crate::cache::pch`]), where this worker builds CUDA
    /// extensions and uses them.
    pub fn pch_dir(&self) -> Option<PathBuf> {
        (self.pch && self.device.index().is_some())
            .then(|| crate::cache::pch::dir(&self.build_cache_dir))
    }

    /// The task children this worker runs at once: one per task it holds (a task's CPU stage
    /// and device stage run one after the other), and it holds at most its device slots and
    /// the tasks it claims ahead for their CPU stages (`prefetch`). Not the compile pool's
    /// `compile_jobs`: those slots are the node's, shared by every worker, and only gate
    /// builds of the tasks the workers hold. (Counting them per worker gave a 4×H200 node of
    /// 512 GiB 144 children and 2.6 GiB a task, which no CUDA build fits in.)
    pub fn concurrent_children(&self) -> u64 {
        u64::from(self.device_slots)
            + if self.compile_pool {
                u64::from(self.prefetch)
            } else {
                0
            }
    }

    /// Sets a task's memory from the node's (unless the operator set it): this worker's
    /// children times the `workers` of its kind the node runs share three quarters of it.
    fn derive_task_memory(&mut self, workers: usize) {
        if self.memory_set {
            return;
        }
        if let Some(node) = node_memory() {
            let children = self.concurrent_children() * workers.max(1) as u64;
            self.limits.max_memory_bytes = task_memory_bound(node, children);
        }
    }

    /// The device as results and the registry report it, with this worker's class.
    pub fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            class: Some(self.device_class.clone()),
            ..self.device.info()
        }
    }

    /// The settings from the process environment (`CRUCIBLE_*`); `Err` names the variable that
    /// does not parse.
    pub fn from_env(device: DeviceSlot) -> Result<Self, String> {
        Self::from_lookup(device, |k| std::env::var(k).ok())
    }

    /// This configuration as GPU worker `index` of `gpu_workers` on the node: its own slice of
    /// the device cores (see [`crate::process::cores`]; a CPU worker keeps every core), and its share of
    /// the node's memory for each task ([`task_memory_bound`]).
    pub fn with_cores(
        mut self,
        index: usize,
        gpu_workers: usize,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        self.cores = CoreSettings::from_lookup(lookup, crate::process::cores::available())?
            .cores_for(self.device.index().map(|_| index), gpu_workers);
        if self.device.index().is_some() {
            self.derive_task_memory(gpu_workers);
        }
        Ok(self)
    }
}

/// Pure: the class of a worker on `device`: the operator's `CRUCIBLE_DEVICE_CLASS` when set
/// (to tell apart what the name does not, e.g. H100 PCIe from SXM, or to pool kinds on
/// purpose), else [`DeviceClass::of_device`] (`cpu` for a CPU).
pub fn device_class(device: &DeviceSlot, set: Option<&str>) -> Result<DeviceClass, String> {
    match set.map(str::trim).filter(|v| !v.is_empty()) {
        Some(v) => DeviceClass::parse(v).map_err(|e| format!("CRUCIBLE_DEVICE_CLASS: {e}")),
        None => Ok(DeviceClass::of_device(&device.info())),
    }
}

/// The absolute path of `program` as the worker's own PATH finds it. Children get a PATH of
/// their own, so a bare `python3` would otherwise resolve to a different interpreter there.
pub fn resolve_program(program: &str, path: Option<&str>) -> PathBuf {
    if program.contains('/') {
        return PathBuf::from(program);
    }
    path.unwrap_or_default()
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| is_executable(candidate))
        .unwrap_or_else(|| PathBuf::from(program))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A worker's identity on the node: `{node}/gpu{index}` or `{node}/cpu`. Several workers of
/// one identity may run at once (CPU workers of `crucible up`); the sweep tells them apart by
/// their processes.
pub fn worker_identity(node: &str, device: &DeviceSlot) -> String {
    match device.index() {
        Some(index) => format!("{node}/gpu{index}"),
        None => format!("{node}/cpu"),
    }
}

fn read_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::sizing::MEMORY_PER_BUILD;
    use super::*;

    #[test]
    fn a_task_has_room_for_a_build_on_a_node_of_many_gpus() {
        let gpu = DeviceSlot::Gpu {
            index: 0,
            name: "H200".into(),
        };
        let cfg = WorkerConfig::from_lookup(gpu, |k| {
            match k {
                "CRUCIBLE_DEVICE_SLOTS" => Some("4"),
                "CRUCIBLE_COMPILE_JOBS" => Some("32"),
                "CRUCIBLE_PREFETCH" => Some("4"),
                _ => None,
            }
            .map(str::to_owned)
        })
        .unwrap();
        // One child per task held: the device slots and the tasks claimed ahead; the node's
        // 32 compile slots are not the worker's children.
        assert_eq!(cfg.concurrent_children(), 8);
        // Four such workers on a 4×H200 node of 512 GiB: each task gets 12 GiB, a build's
        // 3 GiB with room (it was 2.6 GiB when the compile slots counted per worker).
        let per_task = task_memory_bound(512 << 30, cfg.concurrent_children() * 4);
        assert_eq!(per_task, 12 << 30);
        assert!(per_task >= MEMORY_PER_BUILD);
    }

    #[test]
    fn the_class_is_derived_from_the_device_unless_set() {
        let gpu = DeviceSlot::Gpu {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
        };
        let cpu = DeviceSlot::Cpu {
            name: "Intel(R) Xeon(R) Platinum 8480+".into(),
        };
        let class = |d: &DeviceSlot, v: Option<&str>| device_class(d, v).map(|c| c.to_string());
        assert_eq!(class(&gpu, None).unwrap(), "h100");
        assert_eq!(class(&gpu, Some("  ")).unwrap(), "h100");
        assert_eq!(class(&cpu, None).unwrap(), "cpu");
        assert_eq!(class(&gpu, Some("h100-sxm")).unwrap(), "h100-sxm");
        let err = class(&gpu, Some("H100")).unwrap_err();
        assert!(err.starts_with("CRUCIBLE_DEVICE_CLASS: "), "{err}");
        assert!(class(&cpu, Some("any")).is_err());
    }

    #[test]
    fn a_bare_program_name_resolves_through_the_workers_path() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("python3");
        std::fs::write(&exe, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let path = format!("/nonexistent:{}", dir.path().display());
        assert_eq!(resolve_program("python3", Some(&path)), exe);
        assert_eq!(
            resolve_program("/opt/py/bin/python3", Some(&path)),
            PathBuf::from("/opt/py/bin/python3")
        );
        assert_eq!(resolve_program("python3", None), PathBuf::from("python3"));
    }
}
