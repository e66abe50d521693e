//! One evaluation from spec to classified verdict: private directory, child environment,
//! supervised child, classification. Used by the worker's claim loop and by `crucible eval`.

use crate::budget::task_budget;
use crate::build_cache::{BuildCache, CachedBuild};
use crate::config::WorkerConfig;
use crate::device::DeviceSlot;
use crate::harness::{HARNESS_FILE, HARNESS_MODULES, HARNESS_SOURCE};
use crate::protocol::SoftwareReport;
use crate::sandbox::{ChildSandbox, Ready, SandboxError};
use crate::spec::{HarnessStage, harness_spec};
use crate::supervisor::{ChildOutcome, ChildSpec, GateChild, Launcher, run_child};
use crate::task_dir::TaskDir;
use crate::verdict::{Classified, VerdictContext, classify};
use crucible_shared::{BuildSource, EvalResult, RuntimeStats, TaskSpec};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Variables taken from the worker's environment when set: toolchain locations, nothing else.
const INHERITED: &[&str] = &["CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH"];

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

/// What the worker adds to a task for one stage of it.
#[derive(Debug, Clone, Default)]
pub struct StageInputs {
    /// The cached timing of the reference: the harness then times only the candidate.
    pub reference_timing: Option<RuntimeStats>,
    /// Extensions built before the task took the device (copied into the task directory).
    pub prebuilt: Option<Prebuilt>,
    /// The architecture CUDA extensions are built for (`TORCH_CUDA_ARCH_LIST` spelling).
    pub cuda_arch: Option<String>,
    /// The wall-clock time left to this stage of the task's one budget (`crate::budget`);
    /// `None`: all of `timeout_s` (the task's first or only stage).
    pub budget: Option<Duration>,
}

/// A build cache entry to install into the task directory, and how it came to be.
#[derive(Debug, Clone)]
pub struct Prebuilt {
    pub cache: BuildCache,
    pub entry: CachedBuild,
    /// The digests the entry was stored with (kept in the broker, out of children's reach).
    pub digests: Vec<String>,
    pub source: BuildSource,
}

/// Runs one evaluation to a classified end, timing the reference itself. `Err` is a fault of
/// this node (no directory, no interpreter), to be treated like a `ServiceFault`.
pub async fn run_evaluation(
    cfg: &WorkerConfig,
    spec: &TaskSpec,
    label: &str,
    launcher: Launcher<'_>,
    cancel: watch::Receiver<bool>,
) -> std::io::Result<Classified> {
    run_evaluation_with(cfg, spec, label, launcher, cancel, StageInputs::default())
        .await
        .map(|e| e.classified)
}

/// What [`run_evaluation_with`] learnt.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    pub classified: Classified,
    /// The software versions the harness reported with its result (when it reported one
    /// without a protocol violation).
    pub software: Option<SoftwareReport>,
}

/// The private directory of one harness stage and the sandbox its child will enter.
pub struct StageDir {
    pub dir: TaskDir,
    pub sandbox: Option<ChildSandbox>,
}

/// Makes a stage directory: the harness, what `fill` writes (returning the stage's spec),
/// the child's sandbox (`sandbox_for`, which hands the directory to the child's user), and
/// `spec.json` with the sandbox plan in it.
pub fn stage_dir(
    cfg: &WorkerConfig,
    label: &str,
    fill: impl FnOnce(&TaskDir) -> std::io::Result<serde_json::Value>,
    sandbox_for: impl FnOnce(&Path) -> Result<Option<ChildSandbox>, SandboxError>,
) -> std::io::Result<StageDir> {
    let dir = TaskDir::create(&cfg.work_root, label)?;
    dir.write_new(HARNESS_FILE, HARNESS_SOURCE.as_bytes())?;
    for (file, source) in HARNESS_MODULES {
        dir.write_new(file, source.as_bytes())?;
    }
    let mut spec = fill(&dir)?;
    dir.subdir("tmp")?;
    dir.subdir("cache")?;
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

/// The stage directory of a task: its reference, candidate and prebuilt extensions.
fn task_stage_dir(
    cfg: &WorkerConfig,
    ready: Option<&Ready>,
    spec: &TaskSpec,
    label: &str,
    stage: HarnessStage,
    inputs: &StageInputs,
) -> std::io::Result<StageDir> {
    let fill = |dir: &TaskDir| {
        dir.write_new("reference.py", spec.request.reference_code.as_bytes())?;
        dir.write_new("candidate.py", spec.request.kernel_code.as_bytes())?;
        let prebuilt = match &inputs.prebuilt {
            Some(p) => match p.cache.install(&p.entry, &p.digests, dir.path()) {
                Ok(files) => files,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    // Changed since it was stored: never hand it out; the child builds itself.
                    tracing::warn!(key = %p.entry.key, error = %e, "build cache entry refused and removed");
                    p.cache.discard(&p.entry.key);
                    Vec::new()
                }
                Err(e) => return Err(e),
            },
            None => Vec::new(),
        };
        let harness = harness_spec(
            spec,
            &cfg.device,
            stage,
            inputs.reference_timing,
            inputs.cuda_arch.as_deref(),
            &prebuilt,
            cfg.integrity_checks,
        );
        serde_json::to_value(harness).map_err(std::io::Error::other)
    };
    stage_dir(cfg, label, fill, |path| {
        ready
            .map(|r| r.host.child(&r.active, cfg, path, label))
            .transpose()
    })
}

/// The child of a harness stage in `stage`'s directory.
pub fn harness_child(
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
        limits: cfg.limits.clone(),
        deadline,
        gate,
        sandbox: stage.sandbox.take(),
    }
}

/// The deadline of a stage's child: what is left of the task's budget.
fn stage_deadline(spec: &TaskSpec, inputs: &StageInputs) -> Duration {
    inputs.budget.unwrap_or_else(|| task_budget(spec))
}

/// The environment of a prepare-stage child: a task child's, with no GPU visible and CUDA
/// extensions built for `cuda_arch` (nvcc cannot ask a device it does not see).
pub fn prepare_env(
    cfg: &WorkerConfig,
    task_dir: &Path,
    cuda_arch: Option<&str>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = child_env(cfg, task_dir, lookup)
        .into_iter()
        .filter(|(k, _)| k != "CUDA_VISIBLE_DEVICES" && k != "MAX_JOBS")
        .collect();
    env.push(("CUDA_VISIBLE_DEVICES".into(), String::new()));
    // One extension has two translation units; the pool, not ninja, spreads builds on cores.
    env.push(("MAX_JOBS".into(), "2".into()));
    if let Some(arch) = cuda_arch {
        env.push(("TORCH_CUDA_ARCH_LIST".into(), arch.to_owned()));
    }
    env
}

/// Runs the prepare stage's child (see [`crate::prepare`]); the directory is returned with the
/// outcome because the worker copies the built files out of it.
pub async fn run_prepare_child(
    cfg: &WorkerConfig,
    spec: &TaskSpec,
    label: &str,
    launcher: Launcher<'_>,
    cancel: watch::Receiver<bool>,
    inputs: &StageInputs,
) -> std::io::Result<(ChildOutcome, TaskDir)> {
    let ready = cfg.sandbox.ready(cfg, launcher).await?;
    let mut stage = task_stage_dir(cfg, ready, spec, label, HarnessStage::Prepare, inputs)?;
    let env = prepare_env(cfg, stage.dir.path(), inputs.cuda_arch.as_deref(), |k| {
        std::env::var(k).ok()
    });
    let child = harness_child(cfg, &mut stage, env, None, stage_deadline(spec, inputs));
    let outcome = run_child(child, launcher, cancel).await?;
    Ok((outcome, stage.dir))
}

/// [`run_evaluation`] with what the worker knows ahead: the reference's cached timing (the
/// harness then times only the candidate and reports these statistics, marked
/// `ref_runtime_cached`), prebuilt extensions, the CUDA architecture.
pub async fn run_evaluation_with(
    cfg: &WorkerConfig,
    spec: &TaskSpec,
    label: &str,
    launcher: Launcher<'_>,
    cancel: watch::Receiver<bool>,
    inputs: StageInputs,
) -> std::io::Result<Evaluated> {
    run_evaluation_gated(cfg, spec, label, launcher, cancel, inputs, None).await
}

/// [`run_evaluation_with`] for a child that waits at its gate (fd 4) before the candidate is
/// loaded and before timing; the worker opens the gate (see `worker/pipeline.rs`).
pub async fn run_evaluation_gated(
    cfg: &WorkerConfig,
    spec: &TaskSpec,
    label: &str,
    launcher: Launcher<'_>,
    cancel: watch::Receiver<bool>,
    inputs: StageInputs,
    gate: Option<GateChild>,
) -> std::io::Result<Evaluated> {
    let started = Instant::now();
    let gated = gate.is_some();
    let ready = cfg.sandbox.ready(cfg, launcher).await?;
    let mut stage = task_stage_dir(cfg, ready, spec, label, HarnessStage::Evaluate, &inputs)?;
    let prepare_ms = started.elapsed().as_secs_f64() * 1e3;
    let env = child_env(cfg, stage.dir.path(), |k| std::env::var(k).ok());
    let sandbox_ms = stage.sandbox.as_ref().map(|s| s.prepared_ms);
    let child = harness_child(cfg, &mut stage, env, gate, stage_deadline(spec, &inputs));
    let outcome = run_child(child, launcher, cancel).await?;
    tracing::debug!(
        label,
        exit = ?outcome.exit,
        killed_for = ?outcome.killed_for,
        wall_ms = outcome.wall.as_millis() as u64,
        peak_rss_mib = outcome.peak_rss_bytes >> 20,
        peak_processes = outcome.peak_processes,
        "task child ended"
    );
    let ctx = VerdictContext::for_task(spec, cfg);
    let mut classified = classify(&outcome, &ctx);
    if let Classified::Verdict(result) = &mut classified {
        result.stage_ms.insert("worker_prepare".into(), prepare_ms);
        result
            .stage_ms
            .insert("child_wall".into(), outcome.wall.as_secs_f64() * 1e3);
        // What the sandbox cost: the worker's part (user, cgroup, ruleset) and the child's
        // (namespaces, mounts, identity, Landlock, seccomp).
        if let Some(ms) = sandbox_ms {
            result.stage_ms.insert("sandbox_worker".into(), ms);
        }
        if let Some(ms) = outcome.transcript.sandbox_ms {
            result.stage_ms.insert("sandbox_child".into(), ms);
        }
        if let Some(p) = &inputs.prebuilt
            && outcome
                .transcript
                .result
                .as_ref()
                .is_some_and(|r| r.builds_reused > 0)
        {
            result.build = Some(p.source);
        }
        // A gated child learns its reference timing at its gate: the worker applies it then.
        if !gated {
            apply_reference_timing(result, inputs.reference_timing);
        }
    }
    let software = match (&outcome.transcript.result, &outcome.transcript.violation) {
        (Some(r), None) => r.software.clone(),
        _ => None,
    };
    drop(stage);
    Ok(Evaluated {
        classified,
        software,
    })
}

/// The reference statistics the worker handed to the child (`spec.json` or its gate) become
/// the result's `ref_runtime_ms` when the child says it used them: the figures are the
/// worker's own, a claim of the child is not trusted.
pub fn apply_reference_timing(result: &mut EvalResult, given: Option<RuntimeStats>) {
    match given {
        Some(stats) if result.ref_runtime_cached => result.ref_runtime_ms = Some(stats),
        _ => result.ref_runtime_cached = false,
    }
}

/// Evaluates one pair on this machine without a server (`crucible eval`); no reference cache.
pub async fn evaluate_local(cfg: &WorkerConfig, spec: &TaskSpec) -> std::io::Result<Classified> {
    let (_keep, cancel) = watch::channel(false);
    let mut classified = run_evaluation(cfg, spec, "local", Launcher::Direct, cancel).await?;
    if let Classified::Verdict(result) = &mut classified {
        result.problem_hash = Some(crucible_shared::problem_hash(&spec.request.reference_code));
    }
    Ok(classified)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WorkerConfig;

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
        let env = child_env(
            &cfg(DeviceSlot::Gpu {
                index: 3,
                name: "H100".into(),
            }),
            Path::new("/t/x"),
            worker_env,
        );
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("3"));
        assert_eq!(get("HOME"), Some("/t/x"));
        assert_eq!(get("MY_FLAG"), Some("1"));
        assert_eq!(get("LD_LIBRARY_PATH"), Some("/usr/local/cuda/lib64"));
        assert!(get("PATH").unwrap().starts_with("/opt/venv/bin:"));
        assert_eq!(get("REDIS_URL"), None);
        assert_eq!(get("HF_TOKEN"), None);
        assert_eq!(get("TRITON_INTERPRET"), None);

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
