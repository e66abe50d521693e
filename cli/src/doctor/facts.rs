//! What `crucible doctor` looks at, gathered once: the worker's settings as the worker itself
//! reads them (`WorkerConfig::from_lookup`: its Python, work directory and build cache, and the
//! task children's PATH), the Python's own report, NVML and the worker's CUDA probe, the
//! broker, the disks and the API. Each gatherer returns facts for `node` and `services` to judge; none
//! decides anything.

use super::node::{DiskSpace, PythonReport, Toolchain};
use super::services::{BrokerSettings, RedisFacts};
use crucible_gpu_worker::config::resolve_program;
use crucible_gpu_worker::device::report::{NvmlReport, nvml_report};
use crucible_gpu_worker::task::stage::child_env;
use crucible_gpu_worker::{DeviceSlot, WorkerConfig};
use crucible_task_manager::{ConnectError, RedisTarget, TlsFiles, redact_url};
use std::path::Path;
use std::time::Duration;

/// How long the Python may take to import torch and triton and answer.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(180);
/// How long the API may take to answer `/health`.
const API_TIMEOUT: Duration = Duration::from_secs(10);

/// The settings lookup: the env files given, then this process's environment.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The worker's settings, read as a worker reads them (for a CPU slot: the device does not
/// change the Python or the directories).
pub fn worker_config(lookup: Lookup<'_>) -> Result<WorkerConfig, String> {
    WorkerConfig::from_lookup(DeviceSlot::cpu(), lookup)
}

/// The task children's PATH and inherited toolchain variables, as the worker gives them.
fn children_env(cfg: &WorkerConfig, lookup: Lookup<'_>) -> Vec<(String, String)> {
    child_env(cfg, Path::new("/nonexistent"), lookup)
        .into_iter()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "PATH" | "CUDA_HOME" | "CUDA_PATH" | "LD_LIBRARY_PATH"
            )
        })
        .collect()
}

/// The compilers a task child finds: `c++` and `ninja` in its PATH, `nvcc` in CUDA_HOME (as
/// torch looks first) or its PATH.
pub fn toolchain(cfg: &WorkerConfig, lookup: Lookup<'_>) -> Toolchain {
    let env = children_env(cfg, lookup);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let path = get("PATH").unwrap_or_default();
    let find = |name: &str| Some(resolve_program(name, Some(&path))).filter(|p| p.is_absolute());
    let nvcc = get("CUDA_HOME")
        .or_else(|| get("CUDA_PATH"))
        .map(|home| Path::new(&home).join("bin/nvcc"))
        .filter(|p| p.is_file())
        .or_else(|| find("nvcc"));
    Toolchain {
        cxx: find("c++"),
        ninja: find("ninja"),
        nvcc,
        path,
    }
}

/// The probe the Python runs: its version, torch's and triton's, and the GPUs torch sees.
const PYTHON_PROBE: &str = r#"
import json, sys
r = {"python": sys.version.split()[0]}
try:
    import torch
    r["torch"] = torch.__version__
    r["torch_cuda"] = torch.version.cuda
    r["cuda_available"] = bool(torch.cuda.is_available())
    r["cuda_devices"] = torch.cuda.device_count() if r["cuda_available"] else 0
except Exception as e:
    r["torch_error"] = f"{type(e).__name__}: {e}"
try:
    import triton
    r["triton"] = triton.__version__
except Exception as e:
    r["triton_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(r))
"#;

/// Runs the Python with the children's PATH and toolchain variables (nothing else of this
/// environment) and reads its report.
pub async fn python_report(cfg: &WorkerConfig, lookup: Lookup<'_>) -> Result<PythonReport, String> {
    let mut cmd = tokio::process::Command::new(&cfg.python);
    cmd.args(["-I", "-c", PYTHON_PROBE])
        .env_clear()
        .envs(children_env(cfg, lookup))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(PYTHON_TIMEOUT, cmd.output())
        .await
        .map_err(|_| format!("no answer within {PYTHON_TIMEOUT:?}"))?
        .map_err(|e| format!("cannot run it: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    match line {
        Some(line) if out.status.success() => {
            serde_json::from_str(line).map_err(|e| format!("unreadable report ({e}): {line}"))
        }
        _ => Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// NVML's view of the node (off the async runtime: NVML blocks).
pub async fn nvml() -> Result<NvmlReport, String> {
    tokio::task::spawn_blocking(nvml_report)
        .await
        .map_err(|e| format!("nvml query panicked: {e}"))?
}

/// The worker's own health check of each GPU: NVML, then the CUDA probe in a separate process
/// (this binary's hidden `probe-gpu`).
pub async fn probes(report: &NvmlReport) -> Vec<(u32, Result<String, String>)> {
    let exe = std::env::current_exe().ok();
    let mut out = Vec::new();
    for gpu in &report.gpus {
        let result = crucible_gpu_worker::device::check_gpu(gpu.index, exe.as_deref()).await;
        out.push((gpu.index, result));
    }
    out
}

/// Free space at `dir`, or at its nearest existing parent when it is not made yet.
pub fn disk_space(dir: &Path) -> DiskSpace {
    let measured = dir
        .ancestors()
        .find(|a| a.exists())
        .ok_or_else(|| "no existing parent".to_owned())
        .and_then(|at| {
            let stat = nix::sys::statvfs::statvfs(at)
                .map_err(|e| format!("statvfs {}: {e}", at.display()))?;
            let block = stat.fragment_size();
            Ok((
                at.to_path_buf(),
                stat.blocks_available().saturating_mul(block),
                stat.blocks().saturating_mul(block),
            ))
        });
    DiskSpace {
        dir: dir.to_path_buf(),
        measured,
    }
}

/// The broker at REDIS_URL, with the TLS files the lookup names: a connection as this role
/// makes it (TLS, AUTH, PING), then its durability settings if the user may read them.
pub async fn redis(lookup: Lookup<'_>) -> RedisFacts {
    let Some(url) = lookup("REDIS_URL").filter(|u| !u.trim().is_empty()) else {
        return RedisFacts::Unset;
    };
    let redacted = redact_url(&url);
    let failed = |e: ConnectError| RedisFacts::Failed {
        url: redacted.clone(),
        unreachable: e.is_transient(),
        error: e.to_string(),
    };
    let tls = match TlsFiles::from_lookup(lookup) {
        Ok(tls) => tls,
        Err(e) => return failed(e),
    };
    let mut conn = match RedisTarget::new(url).with_tls(tls).connect().await {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let mut values = Vec::new();
    for parameter in ["maxmemory-policy", "appendonly"] {
        let answer: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(parameter)
            .query_async(&mut conn)
            .await;
        match answer {
            Ok(pair) => values.push(pair.get(1).cloned()),
            Err(e) if e.code() == Some("NOPERM") => {
                return RedisFacts::Reached {
                    url: redacted,
                    settings: BrokerSettings::Denied(e.to_string()),
                };
            }
            Err(e) => {
                return RedisFacts::Reached {
                    url: redacted,
                    settings: BrokerSettings::Failed(e.to_string()),
                };
            }
        }
    }
    let appendonly = values.pop().flatten();
    let maxmemory_policy = values.pop().flatten();
    RedisFacts::Reached {
        url: redacted,
        settings: BrokerSettings::Read {
            maxmemory_policy,
            appendonly,
        },
    }
}

/// `GET <url>/health`: its status code and body.
pub async fn api_health(url: &str) -> Result<(u16, String), String> {
    let health = format!("{}/health", url.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .timeout(API_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    let response = client.get(&health).send().await.map_err(|e| {
        // reqwest's own text is terse ("error sending request"): the cause says which.
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text = format!("{text}: {s}");
            source = s.source();
        }
        text
    })?;
    let status = response.status().as_u16();
    let body = response.text().await.map_err(|e| e.to_string())?;
    Ok((status, body))
}

/// Whether the device node CUDA's unified memory needs exists.
pub fn uvm_node() -> bool {
    Path::new("/dev/nvidia-uvm").exists()
}
