//! One harness stage's private directory and child, the same for every child the worker
//! starts (a task's prepare and evaluate stages, the sandbox's self-test): the directory with
//! the harness, the stage's files and `spec.json` (with the sandbox plan), the child's
//! environment (an allowlist, never a secret) and its command line. Below both the evaluation
//! and the self-test, so that neither reaches into the other.

use crate::child::harness::{HARNESS_FILE, HARNESS_MODULES, HARNESS_SOURCE};
use crate::child::supervisor::{ChildSpec, GateChild};
use crate::config::WorkerConfig;
use crate::device::DeviceSlot;
use crate::process::limits::ChildLimits;
use crate::process::task_dir::TaskDir;
use crate::process::task_dir::space::SpaceLimits;
use crate::sandbox::{ChildSandbox, SandboxError};
use std::path::Path;
use std::time::{Duration, Instant};

/// Variables taken from the worker's environment when set: toolchain locations, nothing else.
const INHERITED: &[&str] = &["CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH"];

/// The task's host-memory bound in bytes, told to its children: the harness's choices that trade
/// memory for time read it (nvcc_overlap.py runs nvcc's two front ends at once only where both
/// fit). The watchdog and the task's cgroup enforce the bound whatever a child makes of it.
pub const TASK_MEMORY_VAR: &str = "CRUCIBLE_TASK_MEMORY_BYTES";

/// Names never passed to a child even if configured: the broker and credentials.
fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "REDIS",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "KEY",
        "CREDENTIAL",
        "AWS_",
        "CRUCIBLE_API",
    ]
    .iter()
    .any(|s| upper.contains(s))
}

/// The complete environment of a task child.
pub fn child_env(
    cfg: &WorkerConfig,
    task_dir: &Path,
    lookup: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let dir = task_dir.display().to_string();
    let mut path = String::new();
    if let Some(bin) = cfg.python.parent().filter(|p| p.is_absolute()) {
        path.push_str(&bin.display().to_string());
        path.push(':');
    }
    path.push_str("/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin");
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), path),
        ("HOME".into(), dir.clone()),
        ("TMPDIR".into(), format!("{dir}/tmp")),
        ("XDG_CACHE_HOME".into(), format!("{dir}/cache")),
        ("TRITON_CACHE_DIR".into(), format!("{dir}/cache/triton")),
        (
            "TORCH_EXTENSIONS_DIR".into(),
            format!("{dir}/cache/torch_extensions"),
        ),
        ("LANG".into(), "C.UTF-8".into()),
        ("LC_ALL".into(), "C.UTF-8".into()),
        ("PYTHONUNBUFFERED".into(), "1".into()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
    ];
    match &cfg.device {
        DeviceSlot::Gpu { index, .. } => {
            env.push(("CUDA_VISIBLE_DEVICES".into(), index.to_string()));
        }
        DeviceSlot::Cpu { .. } => {
            // No GPU for a CPU task, even on a node that has one.
            env.push(("CUDA_VISIBLE_DEVICES".into(), String::new()));
            env.push(("TRITON_INTERPRET".into(), "1".into()));
        }
    }
    env.push((
        TASK_MEMORY_VAR.into(),
        cfg.limits.max_memory_bytes.to_string(),
    ));
    if let Some(n) = cfg.cpu_threads {
        env.push(("CRUCIBLE_CPU_THREADS".into(), n.to_string()));
        env.push(("OMP_NUM_THREADS".into(), n.to_string()));
    }
    for name in INHERITED
        .iter()
        .copied()
        .chain(cfg.env_passthrough.iter().map(String::as_str))
    {
        if is_secret_name(name) || env.iter().any(|(k, _)| k == name) {
            continue;
        }
        if let Some(v) = lookup(name) {
            env.push((name.to_owned(), v));
        }
    }
    env
}

/// The private directory of one harness stage and the sandbox its child will enter.
pub(crate) struct StageDir {
    /// The directory, removed when dropped.
    pub dir: TaskDir,
    /// The sandbox the child enters; `None` when the worker runs unsandboxed.
    pub sandbox: Option<ChildSandbox>,
}

/// Makes a stage directory (on a bounded space of its own with `space`, see
/// [`crate::process::task_dir::space`]): the harness, what `fill` writes (returning the stage's spec),
/// the child's sandbox (`sandbox_for`, which hands the directory to the child's user), and
/// `spec.json` with the sandbox plan in it.
pub(crate) fn stage_dir(
    cfg: &WorkerConfig,
    label: &str,
    space: Option<SpaceLimits>,
    fill: impl FnOnce(&TaskDir) -> std::io::Result<serde_json::Value>,
    sandbox_for: impl FnOnce(&Path) -> Result<Option<ChildSandbox>, SandboxError>,
) -> std::io::Result<StageDir> {
    let dir = TaskDir::create(&cfg.work_root, label, &cfg.dir_owner, space)?;
    dir.write_new(HARNESS_FILE, HARNESS_SOURCE.as_bytes())?;
    for (file, source) in HARNESS_MODULES {
        dir.write_new(file, source.as_bytes())?;
    }
    // Before `fill`: prebuilt Triton kernels are installed under cache/triton.
    dir.subdir("tmp")?;
    dir.subdir("cache")?;
    let mut spec = fill(&dir)?;
    let started = Instant::now();
    let mut sandbox = sandbox_for(dir.path())?;
    if let Some(s) = &mut sandbox {
        s.prepared_ms = started.elapsed().as_secs_f64() * 1e3;
    }
    spec["sandbox"] = match &sandbox {
        Some(s) => serde_json::to_value(&s.plan).map_err(std::io::Error::other)?,
        None => serde_json::Value::Null,
    };
    let path = dir.write_new("spec.json", spec.to_string().as_bytes())?;
    if let Some(s) = &sandbox {
        s.own(&path)?;
    }
    Ok(StageDir { dir, sandbox })
}

/// The child of a harness stage in `stage`'s directory.
pub(crate) fn harness_child(
    cfg: &WorkerConfig,
    stage: &mut StageDir,
    env: Vec<(String, String)>,
    gate: Option<GateChild>,
    deadline: Duration,
) -> ChildSpec {
    let dir = stage.dir.path();
    ChildSpec {
        program: cfg.python.clone(),
        args: vec![
            "-I".into(),
            "-B".into(),
            dir.join(HARNESS_FILE).display().to_string(),
            dir.display().to_string(),
        ],
        cwd: dir.to_owned(),
        env,
        limits: ChildLimits {
            processes_per_task: stage
                .sandbox
                .as_ref()
                .is_some_and(ChildSandbox::limits_processes),
            ..cfg.limits.clone()
        },
        deadline,
        gate,
        sandbox: stage.sandbox.take(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(device: DeviceSlot) -> WorkerConfig {
        let mut c = WorkerConfig::from_lookup(device, |_| None).unwrap();
        c.python = "/opt/venv/bin/python3".into();
        c.env_passthrough = vec!["REDIS_URL".into(), "MY_FLAG".into(), "HF_TOKEN".into()];
        c
    }

    #[test]
    fn child_env_is_an_allowlist_without_secrets() {
        let worker_env = |k: &str| match k {
            "REDIS_URL" => Some("redis://secret".to_owned()),
            "HF_TOKEN" => Some("hf_x".to_owned()),
            "MY_FLAG" => Some("1".to_owned()),
            "LD_LIBRARY_PATH" => Some("/usr/local/cuda/lib64".to_owned()),
            _ => None,
        };
        let gpu = cfg(DeviceSlot::Gpu {
            index: 3,
            name: "H100".into(),
        });
        let env = child_env(&gpu, Path::new("/t/x"), worker_env);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("3"));
        assert_eq!(get("HOME"), Some("/t/x"));
        assert_eq!(get("MY_FLAG"), Some("1"));
        assert_eq!(get("LD_LIBRARY_PATH"), Some("/usr/local/cuda/lib64"));
        assert!(get("PATH").unwrap().starts_with("/opt/venv/bin:"));
        assert_eq!(get("REDIS_URL"), None);
        assert_eq!(get("HF_TOKEN"), None);
        assert_eq!(get("TRITON_INTERPRET"), None);
        let bound = gpu.limits.max_memory_bytes.to_string();
        assert_eq!(get(TASK_MEMORY_VAR), Some(bound.as_str()));

        let cpu = child_env(
            &cfg(DeviceSlot::Cpu { name: "x".into() }),
            Path::new("/t/y"),
            |_| None,
        );
        let get = |k: &str| cpu.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("TRITON_INTERPRET"), Some("1"));
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some(""));
    }

    #[test]
    fn no_redis_setting_reaches_a_child_even_when_passed_through() {
        use crucible_task_manager::redis_conn::REDIS_ENV_VARS;
        let mut c = cfg(DeviceSlot::Cpu { name: "x".into() });
        c.env_passthrough = REDIS_ENV_VARS.iter().map(|v| (*v).to_owned()).collect();
        let env = child_env(&c, Path::new("/t/z"), |k| Some(format!("value of {k}")));
        for var in REDIS_ENV_VARS {
            let value = format!("value of {var}");
            assert!(
                env.iter().all(|(k, v)| k != var && v != &value),
                "{var} reached the child: {env:?}"
            );
        }
    }
}
