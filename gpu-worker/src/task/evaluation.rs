//! One evaluation from spec to classified verdict: the task's stage directory, its child
//! (in the sandbox, proven first by `crate::task::sandbox_selftest`), supervision, classification.
//! Used by the worker's claim loop and by `crucible eval`. The stage directory and the child's
//! environment are `crate::task::stage`'s.

use crate::cache::build_cache::{BuildCache, CachedBuild};
use crate::child::protocol::SoftwareReport;
use crate::child::supervisor::{ChildOutcome, GateChild, KillReason, Launcher, run_child};
use crate::config::WorkerConfig;
use crate::process::lending::LentCores;
use crate::process::task_dir::TaskDir;
use crate::sandbox::SandboxInForce;
use crate::sandbox::cgroup::TaskCgroup;
use crate::task::budget::task_budget;
use crate::task::sandbox_selftest;
use crate::task::spec::{HarnessStage, harness_spec};
use crate::task::stage::{StageDir, child_env, harness_child, stage_dir};
use crate::task::verdict::{Classified, VerdictContext, classify, over_space};
use crucible_shared::{Backend, BuildSource, EvalResult, RuntimeStats, SandboxLayer, TaskSpec};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What the worker adds to a task for one stage of it.
#[derive(Debug, Clone, Default)]
pub struct StageInputs {
    /// The cached timing of the reference: the harness then times only the candidate.
    pub reference_timing: Option<RuntimeStats>,
    /// Extensions built before the task took the device (copied into the task directory).
    pub prebuilt: Option<Prebuilt>,
    /// The architecture CUDA extensions are built for (`TORCH_CUDA_ARCH_LIST` spelling).
    pub cuda_arch: Option<String>,
    /// The wall-clock time left to this stage of the task's one budget (`crate::task::budget`);
    /// `None`: all of `timeout_s` (the task's first or only stage).
    pub budget: Option<Duration>,
    /// The CPU stage dry-runs a Triton candidate to compile its kernels for `cuda_arch`.
    pub triton_precompile: bool,
    /// The worker's lent device cores: the worker lends them to a CPU stage outside its
    /// device's timings ([`crate::process::lending`]).
    pub lent_cores: Option<Arc<LentCores>>,
}

/// A build cache entry to install into the task directory (CUDA extensions, or a Triton
/// candidate's compiled kernels), and how it came to be.
#[derive(Debug, Clone)]
pub struct Prebuilt {
    /// The cache the entry lives in.
    pub cache: BuildCache,
    /// The entry whose files are copied into the task directory.
    pub entry: CachedBuild,
    /// The digests the entry was stored with (kept in the broker, out of children's reach).
    pub digests: Vec<String>,
    /// Built for this task by the compile pool, or reused from the cache (reported in the
    /// result's `build`).
    pub source: BuildSource,
}

/// Runs one evaluation to a classified end, timing the reference itself. `Err` is a fault of
/// this node (no directory, no interpreter), to be treated like a `ServiceFault`.
pub async fn run_evaluation(
    cfg: &WorkerConfig,
    spec: &TaskSpec,
    label: &str,
    launcher: Launcher<'_>,
    cancel: CancellationToken,
) -> std::io::Result<Classified> {
    run_evaluation_with(cfg, spec, label, launcher, cancel, StageInputs::default())
        .await
        .map(|e| e.classified)
}

/// What [`run_evaluation_with`] learnt.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    /// The task's end: a verdict, a service fault or a cancellation.
    pub classified: Classified,
    /// The software versions the harness reported with its result (when it reported one
    /// without a protocol violation).
    pub software: Option<SoftwareReport>,
    /// Why the worker killed the child, if it did: a kill for the child's own memory or
    /// processes is its own doing whoever was beside it.
    pub killed_for: Option<KillReason>,
}

/// The stage directory of a task: its reference, candidate and prebuilt extensions.
fn task_stage_dir(
    cfg: &WorkerConfig,
    ready: Option<&SandboxInForce>,
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
        let mut harness = harness_spec(
            spec,
            &cfg.device,
            stage,
            inputs.reference_timing,
            inputs.cuda_arch.as_deref(),
            &prebuilt,
            cfg.integrity_checks,
        );
        harness.triton_precompile = inputs
            .triton_precompile
            .then(|| dry_run_seconds(stage_deadline(spec, inputs), spec.request.backend));
        if spec.request.backend == Backend::Cuda {
            harness.pch_dir = cfg
                .pch_dir()
                .filter(|d| d.is_dir())
                .map(|d| d.to_string_lossy().into_owned());
        }
        serde_json::to_value(harness).map_err(std::io::Error::other)
    };
    // A CPU stage never runs on the cores a device child times on: it starts on the stage
    // cores, and where its cgroup will list its threads, at idle priority, for the worker to
    // lend it the device cores between timings (crate::process::lending).
    let trackable = inputs.lent_cores.is_some()
        && ready.is_some_and(|r| {
            r.active.contains(&SandboxLayer::Cgroup) && r.host.cgroups().is_some()
        });
    let placement = match stage {
        HarnessStage::Prepare => cfg.cores.cpu_stage_placement(trackable),
        HarnessStage::Evaluate => cfg.cores.device_placement(),
    };
    // A bounded space of its own where the sandbox's storage layer is in force.
    let space = ready
        .filter(|r| r.active.contains(&SandboxLayer::Storage))
        .map(|_| cfg.limits.space());
    stage_dir(cfg, label, space, fill, |path| {
        ready
            .map(|r| {
                r.host
                    .child(&r.active, &cfg.limits, &placement, path, label)
            })
            .transpose()
    })
}

/// What a CPU stage's dry run may take of `budget` (the task's, which it is charged to): for
/// Triton a quarter, at most [`MAX_DRY_RUN`], so a short `timeout_s` keeps most of its time for
/// the device; for CUDA, whose dry run builds the extensions `ModelNew` builds lazily (each a
/// cold `load_inline` of 20-70 s, which the device stage would otherwise spend), half, at most
/// [`MAX_BUILD_DRY_RUN`].
fn dry_run_seconds(budget: Duration, backend: Backend) -> u64 {
    let (share, most) = match backend {
        Backend::Triton => (budget / 4, MAX_DRY_RUN),
        Backend::Cuda => (budget / 2, MAX_BUILD_DRY_RUN),
    };
    share.min(most).as_secs().max(1)
}

/// The longest Triton dry run of a CPU stage (an autotuned kernel compiles once per config).
const MAX_DRY_RUN: Duration = Duration::from_secs(30);
/// The longest CUDA dry run of a CPU stage: a few cold extension builds.
const MAX_BUILD_DRY_RUN: Duration = Duration::from_secs(180);

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

/// Runs the prepare stage's child (see [`crate::task::prepare`]); the directory is returned with the
/// outcome because the worker copies the built files out of it.
pub async fn run_prepare_child(
    cfg: &WorkerConfig,
    spec: &TaskSpec,
    label: &str,
    launcher: Launcher<'_>,
    cancel: CancellationToken,
    inputs: &StageInputs,
) -> std::io::Result<(ChildOutcome, TaskDir)> {
    let ready = sandbox_selftest::ready(cfg, launcher).await?;
    let mut stage = task_stage_dir(cfg, ready, spec, label, HarnessStage::Prepare, inputs)?;
    // Registered before the child starts (it starts on the stage cores): the worker lends its
    // threads the device cores once its cgroup lists them, outside timings.
    let _lent = match (&inputs.lent_cores, &stage.sandbox) {
        (Some(lent), Some(sandbox)) if sandbox.plan.idle_priority => sandbox
            .cgroup
            .as_ref()
            .and_then(TaskCgroup::threads_file)
            .map(|file| lent.register(file)),
        _ => None,
    };
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
    cancel: CancellationToken,
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
    cancel: CancellationToken,
    inputs: StageInputs,
    gate: Option<GateChild>,
) -> std::io::Result<Evaluated> {
    let started = Instant::now();
    let gated = gate.is_some();
    let ready = sandbox_selftest::ready(cfg, launcher).await?;
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
    if let Some(exhausted) = stage.dir.exhausted() {
        over_space(&mut classified, exhausted, &ctx);
    }
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
        killed_for: outcome.killed_for,
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
    // Nothing cancels a local evaluation.
    let cancel = CancellationToken::new();
    let mut classified = run_evaluation(cfg, spec, "local", Launcher::Direct, cancel).await?;
    if let Classified::Verdict(result) = &mut classified {
        result.problem_hash = Some(crucible_shared::problem_hash(&spec.request.reference_code));
    }
    Ok(classified)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dry_run_takes_a_bounded_share_of_the_budget() {
        let triton = |s| dry_run_seconds(Duration::from_secs(s), Backend::Triton);
        assert_eq!(triton(300), 30);
        assert_eq!(triton(40), 10);
        assert_eq!(triton(2), 1);
        let cuda = |s| dry_run_seconds(Duration::from_secs(s), Backend::Cuda);
        assert_eq!(cuda(300), 150);
        assert_eq!(cuda(900), 180);
        assert_eq!(cuda(40), 20);
    }
}
