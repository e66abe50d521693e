//! The defaults sized to the node: how many device-stage children a worker runs at once and
//! how many builds the node's compile pool runs, from its cores and memory.

use crate::device::DeviceSlot;

/// Most device-stage children one worker runs at once.
pub const MAX_DEVICE_SLOTS: u32 = 16;
/// Device memory each default slot is given room for: a CUDA context, the problem's tensors
/// in the judge and the runner, and the caching allocators' slack of both.
const MEMORY_PER_SLOT: u64 = 16 << 30;
/// Cores each default slot is given: its judge and runner, its share of the CPU stages and
/// compilers running beside it.
const CORES_PER_SLOT: usize = 4;
/// Most slots by default: beyond this, more children mostly add contention.
const DEFAULT_SLOTS_CAP: u32 = 4;

/// Host memory one build of the compile pool is given room for: a load_inline build of a
/// translation unit that includes `torch/extension.h`, torch's way, peaked at 3.8 GiB over its
/// processes (nvcc 13.5, 2026-12-03: cicc 3.0 GiB beside the bindings' cc1plus; the CPU-stage
/// child around it, another 0.5 GiB, is the task's own). Through nvcc_overlap a build takes
/// more, but only where the task's bound holds it (harness `MEMORY_FOR_OVERLAP`).
pub(super) const MEMORY_PER_BUILD: u64 = 4 << 30;

/// Pure: the node's builds at once unless told (`CRUCIBLE_COMPILE_JOBS`): half the cores, and
/// no more than its memory holds at [`MEMORY_PER_BUILD`] each (memory unknown: the cores decide).
pub fn default_compile_jobs(cores: usize, node_memory: Option<u64>) -> usize {
    let by_cores = (cores / 2).max(1);
    let by_memory = node_memory.map_or(by_cores, |bytes| (bytes / MEMORY_PER_BUILD) as usize);
    by_cores.min(by_memory).max(1)
}

/// Pure: how many device-stage children a worker runs at once unless told. A CPU worker runs
/// one (its timings are taken on the same cores the others would use); a GPU worker as many
/// as its cores and the GPU's memory give room for, from 1 to [`DEFAULT_SLOTS_CAP`].
pub fn default_device_slots(device: &DeviceSlot, cores: usize, gpu_memory: Option<u64>) -> u32 {
    if matches!(device, DeviceSlot::Cpu { .. }) {
        return 1;
    }
    let by_cores = (cores / CORES_PER_SLOT) as u64;
    let by_memory = gpu_memory.map_or(by_cores, |bytes| bytes / MEMORY_PER_SLOT);
    by_cores
        .min(by_memory)
        .clamp(1, u64::from(DEFAULT_SLOTS_CAP)) as u32
}

/// The GPU's total memory as NVML reports it (`None` for a CPU or when NVML does not answer).
pub(super) fn gpu_memory_bytes(device: &DeviceSlot) -> Option<u64> {
    let DeviceSlot::Gpu { index, .. } = device else {
        return None;
    };
    let nvml = nvml_wrapper::Nvml::init().ok()?;
    Some(nvml.device_by_index(*index).ok()?.memory_info().ok()?.total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_slots_follow_cores_and_gpu_memory() {
        let gpu = DeviceSlot::Gpu {
            index: 0,
            name: "H100".into(),
        };
        let cpu = DeviceSlot::Cpu { name: "x".into() };
        let gib = |n: u64| Some(n << 30);
        assert_eq!(default_device_slots(&cpu, 64, None), 1);
        assert_eq!(default_device_slots(&gpu, 16, gib(80)), 4, "the H100 node");
        assert_eq!(default_device_slots(&gpu, 16, gib(24)), 1, "a small GPU");
        assert_eq!(default_device_slots(&gpu, 8, gib(141)), 2, "few cores");
        assert_eq!(default_device_slots(&gpu, 128, gib(141)), 4, "capped");
        assert_eq!(default_device_slots(&gpu, 2, None), 1);
        assert_eq!(default_device_slots(&gpu, 16, None), 4, "memory unknown");
    }

    #[test]
    fn the_compile_pool_follows_cores_and_the_nodes_memory() {
        let gib = |n: u64| Some(n << 30);
        assert_eq!(
            default_compile_jobs(16, gib(125)),
            8,
            "the H100/H200 box: cores decide"
        );
        assert_eq!(
            default_compile_jobs(16, gib(16)),
            4,
            "little memory: 4 GiB a build"
        );
        assert_eq!(default_compile_jobs(2, gib(24)), 1);
        assert_eq!(default_compile_jobs(64, None), 32, "memory unknown");
        assert_eq!(default_compile_jobs(8, gib(2)), 1, "at least one");
    }
}
