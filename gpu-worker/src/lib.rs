//! The GPU worker: one process per device. Owns the claim loop (lease renewal, cancellation,
//! retries on service faults), device ownership and health (NVML plus a tiny CUDA probe in a
//! separate process), and the supervision of the task child that runs untrusted code: spawn
//! with a cleared environment, its own session, rlimits and a private directory; the result
//! pipe; output caps; the memory/process watchdog; the deadline; and the classification of
//! every way a child can end; the warm template that forks those children; the CPU stage of
//! each task (syntax, screening, import, CUDA extension builds) run ahead of the device stage,
//! with the node-wide build cache and compile slots; the owner files of the directories it makes
//! and the start-up sweep of those a killed worker left; the reference-timing cache key; the
//! sandbox every child runs in (namespaces, an unprivileged user, Landlock, seccomp, a cgroup)
//! and its start-up self-test. The Python harness and template are embedded here.
//!
//! The modules are layered, bottom first: [`process`], [`sandbox`], [`child`], [`cache`], the
//! cross-cutting [`probe`], [`device`], [`metrics`] and [`config`], then [`task`] and
//! [`worker`]; each says which of the others it may import (`scripts/check_layout.py`).

pub mod cache;
pub mod child;
pub mod config;
pub mod device;
pub mod metrics;
pub mod probe;
pub mod process;
pub mod sandbox;
pub mod task;
pub mod worker;

pub use config::WorkerConfig;
pub use device::{DeviceSlot, discover_devices};
pub use metrics::WorkerMetrics;
pub use process::limits::ChildLimits;
pub use task::evaluation::{evaluate_local, run_evaluation};
pub use worker::{Worker, WorkerError};
