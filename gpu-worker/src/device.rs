//! The device a worker owns: discovery (NVML), identity and health (NVML query plus the CUDA
//! probe in a separate process); [`report`], what an operator's check reads of the node's GPUs.
//!
//! May import: `probe` (`scripts/check_layout.py`).

pub mod report;

use crate::probe::ProbeReport;
use crucible_shared::{DeviceInfo, DeviceKind};
use std::path::Path;
use std::time::Duration;

/// One worker's device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSlot {
    /// GPU `index` as NVML and `CUDA_VISIBLE_DEVICES` number it on this node.
    Gpu {
        /// The NVML index.
        index: u32,
        /// The GPU's name (NVML's, when it answered).
        name: String,
    },
    /// The host's CPU, for workers without a GPU (development, CPU-only tasks).
    Cpu {
        /// The CPU model, from /proc/cpuinfo.
        name: String,
    },
}

impl DeviceSlot {
    /// The device's kind and name; its class is the worker's to say
    /// (`WorkerConfig::device_info`).
    pub fn info(&self) -> DeviceInfo {
        let (kind, name) = match self {
            DeviceSlot::Gpu { name, .. } => (DeviceKind::Cuda, name),
            DeviceSlot::Cpu { name } => (DeviceKind::Cpu, name),
        };
        DeviceInfo {
            kind,
            name: name.clone(),
            class: None,
        }
    }

    /// The GPU's index (`CUDA_VISIBLE_DEVICES`); `None` for the CPU.
    pub fn index(&self) -> Option<u32> {
        match self {
            DeviceSlot::Gpu { index, .. } => Some(*index),
            DeviceSlot::Cpu { .. } => None,
        }
    }

    /// The host's CPU, named by its model.
    pub fn cpu() -> Self {
        DeviceSlot::Cpu {
            name: cpu_model_name(),
        }
    }

    /// The GPU at `index`, named by NVML when it answers.
    pub fn gpu(index: u32) -> Self {
        let name = nvml_name(index).unwrap_or_else(|| format!("cuda:{index}"));
        DeviceSlot::Gpu { index, name }
    }
}

/// One slot per visible GPU, or a single CPU slot when NVML finds none (no driver, no GPU).
/// `only` restricts to the listed GPU indices (from `CRUCIBLE_GPUS`).
pub fn discover_devices(only: Option<&[u32]>) -> Vec<DeviceSlot> {
    let gpus: Vec<DeviceSlot> = match nvml_wrapper::Nvml::init() {
        Ok(nvml) => {
            let count = nvml.device_count().unwrap_or(0);
            (0..count)
                .filter(|i| only.is_none_or(|o| o.contains(i)))
                .map(|i| {
                    let name = nvml
                        .device_by_index(i)
                        .and_then(|d| d.name())
                        .unwrap_or_else(|_| format!("cuda:{i}"));
                    DeviceSlot::Gpu { index: i, name }
                })
                .collect()
        }
        Err(e) => {
            tracing::info!(error = %e, "nvml unavailable, using the cpu");
            Vec::new()
        }
    };
    if gpus.is_empty() {
        vec![DeviceSlot::cpu()]
    } else {
        gpus
    }
}

/// The compute capability of GPU `index` as `TORCH_CUDA_ARCH_LIST` spells it (`"9.0"`), from
/// NVML: what the CPU stage builds CUDA extensions for. `CRUCIBLE_CUDA_ARCH` overrides it.
pub fn cuda_arch(index: u32) -> Option<String> {
    if let Ok(arch) = std::env::var("CRUCIBLE_CUDA_ARCH")
        && !arch.trim().is_empty()
    {
        return Some(arch.trim().to_owned());
    }
    let nvml = nvml_wrapper::Nvml::init().ok()?;
    let cc = nvml
        .device_by_index(index)
        .ok()?
        .cuda_compute_capability()
        .ok()?;
    Some(format!("{}.{}", cc.major, cc.minor))
}

fn nvml_name(index: u32) -> Option<String> {
    let nvml = nvml_wrapper::Nvml::init().ok()?;
    nvml.device_by_index(index).ok()?.name().ok()
}

/// Health of a GPU: NVML must answer for it and the CUDA probe, run as a separate process
/// pinned to the device, must compute the right numbers.
pub async fn check_gpu(index: u32, probe_exe: Option<&Path>) -> Result<String, String> {
    let nvml_detail = tokio::task::spawn_blocking(move || -> Result<String, String> {
        let nvml = nvml_wrapper::Nvml::init().map_err(|e| format!("nvml init: {e}"))?;
        let dev = nvml
            .device_by_index(index)
            .map_err(|e| format!("nvml device {index}: {e}"))?;
        let mem = dev.memory_info().map_err(|e| format!("nvml memory: {e}"))?;
        let temp = dev
            .temperature(nvml_wrapper::enum_wrappers::device::TemperatureSensor::Gpu)
            .map_err(|e| format!("nvml temperature: {e}"))?;
        Ok(format!(
            "nvml ok ({} MiB used of {} MiB, {temp} C)",
            mem.used >> 20,
            mem.total >> 20
        ))
    })
    .await
    .map_err(|e| format!("nvml check panicked: {e}"))??;

    let Some(exe) = probe_exe else {
        return Ok(nvml_detail);
    };
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(exe)
            .arg("probe-gpu")
            .env_clear()
            .env("CUDA_VISIBLE_DEVICES", index.to_string())
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env(
                "LD_LIBRARY_PATH",
                std::env::var("LD_LIBRARY_PATH").unwrap_or_default(),
            )
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| "cuda probe timed out".to_owned())?
    .map_err(|e| format!("cannot run cuda probe: {e}"))?;
    let report: ProbeReport = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "cuda probe answered nonsense ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    if report.ok {
        Ok(format!(
            "{nvml_detail}; probe ok in {:.0} ms",
            report.elapsed_ms
        ))
    } else {
        Err(format!("cuda probe failed: {}", report.detail))
    }
}

/// The CPU's model name from /proc/cpuinfo.
pub fn cpu_model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned())
}
