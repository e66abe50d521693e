//! What the CPU-stage integration tests share: the repository root and a GPU slot's worker
//! config that runs on a machine without one.

use crucible_gpu_worker::child::supervisor::Launcher;
use crucible_gpu_worker::{DeviceSlot, WorkerConfig};
use std::path::{Path, PathBuf};

/// The workspace root (problems and candidates are read from it).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// A worker config for a GPU slot: the CPU stage never touches the device (its child sees no
/// GPU), so it runs on a machine without one. The sandbox (shared by the clones of a config)
/// is proven through a CPU slot's self-test: a GPU slot's would need the device.
pub async fn gpu_config(work: &Path, cache: &Path) -> WorkerConfig {
    let mut cfg = WorkerConfig::from_env(DeviceSlot::Gpu {
        index: 0,
        name: "test".into(),
    })
    .unwrap();
    cfg.work_root = work.to_owned();
    cfg.build_cache_dir = cache.to_owned();
    let mut cpu = cfg.clone();
    cpu.device = DeviceSlot::Cpu {
        name: "test".into(),
    };
    crucible_gpu_worker::task::sandbox_selftest::ready(&cpu, Launcher::Direct)
        .await
        .expect("the sandbox holds on the test machine");
    cfg
}
