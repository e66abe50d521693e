//! Pure: what `crucible doctor` concludes about this node's own means to run workers: the
//! Python and what it imports, the GPUs, the compilers a task child finds, the disks.

use super::report::{Check, Role};
use crucible_gpu_worker::device::report::NvmlReport;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Below this much free space a directory the worker writes fails the check.
pub const DISK_FAIL_BYTES: u64 = 1 << 30;
/// Below this much it warns: a build cache of CUDA extensions takes gigabytes.
pub const DISK_WARN_BYTES: u64 = 10 << 30;

/// What the workers' Python said of itself (the doctor's probe script prints it as JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct PythonReport {
    /// `3.11.2`.
    pub python: String,
    /// torch's version, when it imports.
    pub torch: Option<String>,
    /// Why torch did not import.
    pub torch_error: Option<String>,
    /// The CUDA version torch was built for (`None`: a CPU build).
    pub torch_cuda: Option<String>,
    /// `torch.cuda.is_available()`.
    #[serde(default)]
    pub cuda_available: bool,
    /// GPUs torch sees.
    #[serde(default)]
    pub cuda_devices: u32,
    /// triton's version, when it imports.
    pub triton: Option<String>,
    /// Why triton did not import.
    pub triton_error: Option<String>,
}

/// Directories the worker's systemd unit cannot see (ProtectHome=yes).
const HIDDEN_FROM_WORKER_UNIT: [&str; 3] = ["/home", "/root", "/run/user"];

const PYTHON_FIX: &str = "set CRUCIBLE_PYTHON to a Python with torch and triton (deploy/install.sh --role worker makes one in /opt/crucible/venv; scripts/up.sh one in ~/.cache)";

/// `python`, `torch`, `triton`: the interpreter every task child runs, and what it imports.
pub fn python_checks(
    role: Role,
    python: &Path,
    report: &Result<PythonReport, String>,
) -> Vec<Check> {
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            return vec![Check::fail(
                "python",
                format!("{}: {e}", python.display()),
                PYTHON_FIX,
            )];
        }
    };
    let mut out = Vec::new();
    let detail = format!("{} (Python {})", python.display(), report.python);
    if role == Role::Worker
        && HIDDEN_FROM_WORKER_UNIT
            .iter()
            .any(|dir| python.starts_with(dir))
    {
        out.push(Check::warn(
            "python",
            format!("{detail}: hidden from crucible-worker@.service (ProtectHome=yes)"),
            "install it outside /home and /root, e.g. CRUCIBLE_VENV=/opt/crucible/venv (scripts/env.sh), and set CRUCIBLE_PYTHON",
        ));
    } else {
        out.push(Check::ok("python", detail));
    }
    out.push(match (&report.torch, &report.torch_error) {
        (Some(v), _) => Check::ok(
            "torch",
            match &report.torch_cuda {
                Some(cuda) => format!("{v} (built for CUDA {cuda})"),
                None => format!("{v} (a CPU build)"),
            },
        ),
        (None, e) => Check::fail(
            "torch",
            format!(
                "does not import: {}",
                e.as_deref().unwrap_or("unknown error")
            ),
            PYTHON_FIX,
        ),
    });
    out.push(match (&report.triton, &report.triton_error) {
        (Some(v), _) => Check::ok("triton", v.clone()),
        (None, e) => Check::fail(
            "triton",
            format!(
                "does not import: {}",
                e.as_deref().unwrap_or("unknown error")
            ),
            format!("{} -m pip install triton", python.display()),
        ),
    });
    out
}

/// One GPU's end-to-end check: the worker's own NVML query and CUDA probe.
pub type Probe = Result<String, String>;

/// `gpu`, `driver`, `cuda`, `gpu N`, `nvidia-uvm`: the node's GPUs as NVML, torch and the
/// worker's probe see them, and the settings that make timings steady. No GPU is a warning: a
/// CPU worker.
pub fn gpu_checks(
    nvml: &Result<NvmlReport, String>,
    torch: Option<&PythonReport>,
    probes: &[(u32, Probe)],
    uvm_node: bool,
) -> Vec<Check> {
    let report = match nvml {
        Ok(r) if !r.gpus.is_empty() => r,
        Ok(_) => return vec![no_gpu("NVML lists no GPU")],
        Err(e) => return vec![no_gpu(e)],
    };
    let mut out = vec![Check::ok(
        "driver",
        match report.cuda_driver {
            Some(v) => format!(
                "NVIDIA {} (CUDA {}.{})",
                report.driver,
                v / 1000,
                (v % 1000) / 10
            ),
            None => format!("NVIDIA {}", report.driver),
        },
    )];
    if let Some(t) = torch.filter(|t| t.torch.is_some()) {
        let listed = report.gpus.len();
        out.push(if t.cuda_available && t.cuda_devices as usize == listed {
            Check::ok("cuda", format!("torch sees {listed} GPU(s)"))
        } else if t.cuda_available {
            Check::warn(
                "cuda",
                format!("torch sees {} GPU(s), NVML lists {listed}", t.cuda_devices),
                "unset CUDA_VISIBLE_DEVICES for the workers (each worker picks its own GPU)",
            )
        } else {
            Check::fail(
                "cuda",
                format!("torch sees no GPU while NVML lists {listed}"),
                "a torch built for CUDA (PyPI's Linux wheels are) whose CUDA version the driver supports",
            )
        });
    }
    if !uvm_node {
        out.push(Check::warn(
            "nvidia-uvm",
            "/dev/nvidia-uvm is missing: CUDA makes it on first use with nvidia-modprobe, which crucible-worker@.service may not run",
            "create it at boot: nvidia-modprobe -u -c=0 (or run nvidia-persistenced), then restart the workers",
        ));
    }
    for gpu in &report.gpus {
        let name = format!("gpu {}", gpu.index);
        let probe = probes.iter().find(|(i, _)| *i == gpu.index).map(|(_, p)| p);
        if let Some(Err(e)) = probe {
            out.push(Check::fail(
                &name,
                format!("{}: {e}", gpu.name),
                "look at nvidia-smi and dmesg; a GPU that fails the probe takes no task (reset it or drain the node)",
            ));
            continue;
        }
        let mut detail = vec![gpu.name.clone()];
        if probe.is_some() {
            detail.push("CUDA probe ok".into());
        }
        let mut fixes = Vec::new();
        match gpu.persistence {
            Some(true) => detail.push("persistence on".into()),
            Some(false) => {
                detail.push("persistence OFF".into());
                fixes.push("nvidia-smi -pm 1 (or run nvidia-persistenced): the driver then stays up between processes".to_owned());
            }
            None => {}
        }
        if let (Some(now), Some(max)) = (gpu.sm_clock_mhz, gpu.sm_max_mhz) {
            let app = gpu
                .sm_app_mhz
                .map(|a| format!(", applications {a}"))
                .unwrap_or_default();
            detail.push(format!("SM clock {now}/{max} MHz{app}"));
        }
        if !gpu.slowdowns.is_empty() {
            detail.push(format!("clocks held down: {}", gpu.slowdowns.join(", ")));
            fixes.push("check cooling and power (nvidia-smi -q -d PERFORMANCE): timings taken now are slow".to_owned());
        }
        let detail = detail.join("; ");
        out.push(match fixes.is_empty() {
            true => Check::ok(&name, detail),
            false => Check::warn(&name, detail, fixes.join("; ")),
        });
    }
    out
}

fn no_gpu(why: &str) -> Check {
    Check::warn(
        "gpu",
        format!("no GPU: cpu worker ({why})"),
        "none for a CPU worker; on a GPU node install the NVIDIA driver (nvidia-smi must list the GPUs)",
    )
}

/// Where the task children's toolchain was found in their PATH (`None`: missing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Toolchain {
    /// The children's PATH, for the report.
    pub path: String,
    /// The C++ compiler `load_inline` and Triton's helpers build with.
    pub cxx: Option<PathBuf>,
    /// ninja, which `load_inline` builds with.
    pub ninja: Option<PathBuf>,
    /// CUDA's compiler, for the `cuda` backend.
    pub nvcc: Option<PathBuf>,
}

/// `c++`, `ninja`, `nvcc`: what building a candidate's extensions needs, as a task child finds
/// it. nvcc is required only where there is a GPU to run CUDA candidates on.
pub fn toolchain_checks(tools: &Toolchain, gpu: bool) -> Vec<Check> {
    let found = |name: &str, p: &Option<PathBuf>| {
        p.as_ref().map(|p| Check::ok(name, p.display().to_string()))
    };
    let missing = format!("not in the task children's PATH ({})", tools.path);
    vec![
        found("c++", &tools.cxx).unwrap_or_else(|| {
            Check::fail("c++", &*missing, "apt-get install g++ (load_inline and Triton build with it)")
        }),
        found("ninja", &tools.ninja).unwrap_or_else(|| {
            Check::fail("ninja", &*missing, "pip install ninja into CRUCIBLE_PYTHON's environment (its bin is first in the children's PATH)")
        }),
        found("nvcc", &tools.nvcc).unwrap_or_else(|| match gpu {
            true => Check::fail(
                "nvcc",
                format!("{missing}: cuda-backend candidates cannot be built"),
                "install the CUDA toolkit (/usr/local/cuda) or set CUDA_HOME for the workers",
            ),
            false => Check::warn(
                "nvcc",
                format!("{missing}; no GPU: cpu worker"),
                "none for a CPU worker (the cuda backend needs a GPU node with the CUDA toolkit)",
            ),
        }),
    ]
}

/// Free space where a worker writes: the directory (or, before it exists, its nearest
/// existing parent) and the bytes available and in total there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskSpace {
    /// The directory as configured.
    pub dir: PathBuf,
    /// Where it was measured, and the available and total bytes; `Err` when it could not be.
    pub measured: Result<(PathBuf, u64, u64), String>,
}

/// `work dir`, `build cache`: enough free space for task directories and built extensions.
pub fn disk_check(name: &str, variable: &str, disk: &DiskSpace) -> Check {
    let (at, available, total) = match &disk.measured {
        Ok(m) => m,
        Err(e) => {
            return Check::warn(
                name,
                format!("{}: cannot measure free space: {e}", disk.dir.display()),
                format!("check that {variable} names a directory the worker can create"),
            );
        }
    };
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let mut detail = format!(
        "{}: {:.1} GiB free of {:.1} GiB",
        disk.dir.display(),
        gib(*available),
        gib(*total)
    );
    if at != &disk.dir {
        detail.push_str(&format!(" (not made yet; measured at {})", at.display()));
    }
    let fix = format!("free space there, or point {variable} at a larger file system");
    if *available < DISK_FAIL_BYTES {
        Check::fail(name, detail, fix)
    } else if *available < DISK_WARN_BYTES {
        Check::warn(name, detail, fix)
    } else {
        Check::ok(name, detail)
    }
}

#[cfg(test)]
mod tests;
