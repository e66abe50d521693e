//! What an operator's check (`crucible doctor`) reads of the node's GPUs from NVML: the driver,
//! and per GPU the settings that make timings steady or not (persistence mode, clocks, the
//! reasons the clocks are held down). The worker itself never needs these; they are here, beside
//! its discovery, so that NVML is read in one module.

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::Clock;

/// The driver and every GPU NVML lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlReport {
    /// The driver's version (`550.54.15`).
    pub driver: String,
    /// The CUDA version the driver supports, as NVML encodes it (12040 = 12.4).
    pub cuda_driver: Option<i32>,
    /// One entry per GPU, by NVML index.
    pub gpus: Vec<GpuReport>,
}

/// One GPU's settings; `None` where NVML does not answer for that GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuReport {
    /// The NVML index (`--gpu`).
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Persistence mode: the driver stays initialised between processes.
    pub persistence: Option<bool>,
    /// The SM clock now, in MHz.
    pub sm_clock_mhz: Option<u32>,
    /// The SM clock's maximum, in MHz.
    pub sm_max_mhz: Option<u32>,
    /// The SM applications clock (what a busy GPU runs at unless locked or throttled), in MHz.
    pub sm_app_mhz: Option<u32>,
    /// Reasons the clocks are held down now that slow a timing (thermal, power), by name.
    pub slowdowns: Vec<&'static str>,
}

/// Clock limiters that make a timing slower than the GPU's own: heat and power. Idle, the
/// applications-clock setting and the display clock are the GPU's ordinary state.
const SLOWDOWNS: [(ThrottleReasons, &str); 6] = [
    (ThrottleReasons::SW_POWER_CAP, "power cap"),
    (ThrottleReasons::HW_SLOWDOWN, "hardware slowdown"),
    (ThrottleReasons::SW_THERMAL_SLOWDOWN, "thermal (software)"),
    (ThrottleReasons::HW_THERMAL_SLOWDOWN, "thermal (hardware)"),
    (ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN, "power brake"),
    (ThrottleReasons::SYNC_BOOST, "sync boost group"),
];

/// Pure: the names of the slowdowns among `reasons`.
pub fn slowdowns(reasons: ThrottleReasons) -> Vec<&'static str> {
    SLOWDOWNS
        .iter()
        .filter(|(bit, _)| reasons.contains(*bit))
        .map(|(_, name)| *name)
        .collect()
}

/// Reads the driver and every GPU; `Err` when NVML cannot be loaded or initialised (no driver:
/// a CPU-only node).
pub fn nvml_report() -> Result<NvmlReport, String> {
    let nvml = nvml_wrapper::Nvml::init().map_err(|e| format!("nvml: {e}"))?;
    let driver = nvml
        .sys_driver_version()
        .map_err(|e| format!("nvml driver version: {e}"))?;
    let count = nvml
        .device_count()
        .map_err(|e| format!("nvml device count: {e}"))?;
    let gpus = (0..count)
        .map(|index| match nvml.device_by_index(index) {
            Ok(dev) => GpuReport {
                index,
                name: dev.name().unwrap_or_else(|_| format!("cuda:{index}")),
                persistence: dev.is_in_persistent_mode().ok(),
                sm_clock_mhz: dev.clock_info(Clock::SM).ok(),
                sm_max_mhz: dev.max_clock_info(Clock::SM).ok(),
                sm_app_mhz: dev.applications_clock(Clock::SM).ok(),
                slowdowns: dev
                    .current_throttle_reasons()
                    .map(slowdowns)
                    .unwrap_or_default(),
            },
            Err(_) => GpuReport {
                index,
                name: format!("cuda:{index} (NVML does not answer for it)"),
                persistence: None,
                sm_clock_mhz: None,
                sm_max_mhz: None,
                sm_app_mhz: None,
                slowdowns: Vec::new(),
            },
        })
        .collect();
    Ok(NvmlReport {
        driver,
        cuda_driver: nvml.sys_cuda_driver_version().ok(),
        gpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_heat_and_power_count_as_slowdowns() {
        assert!(slowdowns(ThrottleReasons::GPU_IDLE | ThrottleReasons::NONE).is_empty());
        assert!(slowdowns(ThrottleReasons::APPLICATIONS_CLOCKS_SETTING).is_empty());
        assert_eq!(
            slowdowns(ThrottleReasons::HW_THERMAL_SLOWDOWN | ThrottleReasons::GPU_IDLE),
            vec!["thermal (hardware)"]
        );
        assert_eq!(
            slowdowns(ThrottleReasons::SW_POWER_CAP | ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN),
            vec!["power cap", "power brake"]
        );
    }
}
