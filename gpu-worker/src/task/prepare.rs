//! The CPU stage of a task: what can be done before it takes the device, run while the device
//! works on other tasks. A child with no GPU visible checks the syntax, screens the source and
//! imports the candidate; for a CUDA candidate the import builds its `load_inline` extensions
//! (`TORCH_CUDA_ARCH_LIST` set to the device's architecture), which the worker then stores in
//! the node-wide [`BuildCache`]. A candidate whose build is cached skips the child entirely
//! (unless `force_refresh`, which rebuilds and replaces the entry).
//!
//! A Triton candidate (with `CRUCIBLE_TRITON_PRECOMPILE` on) gets a dry run of its forward on
//! CPU tensors in the same child, compiling each kernel it launches for the device's target
//! (the harness's `triton_aot.py`); the worker stores the Triton cache files in the build
//! cache under a key of its own ([`triton_entry_key`]) and installs checked copies into the
//! device stage's `cache/triton/`, where the JIT finds them instead of compiling while the
//! device waits. A kernel the dry run missed is compiled there as before.
//!
//! Final here (the task never takes the device): `SYNTAX`, `SCREENED`, a compiler failure
//! (`COMPILATION`, with the compiler's message), and a child that blew a limit while importing
//! (timeout, output, memory, processes). Anything else the import raised on the CPU is left to
//! the device stage, which imports again and judges it there: module-level code may need the
//! GPU.

use crate::cache::build_cache::{
    BUILD_CACHE_NAMESPACE, BUILD_RECORD_TTL, BuildCache, CachedBuild, decode_digests,
    encode_digests, entry_key, triton_entry_key,
};
use crate::cache::reference_cache::SoftwareVersions;
use crate::child::protocol::{PreparedReport, Stage};
use crate::child::supervisor::{ChildOutcome, KillReason, Launcher};
use crate::config::WorkerConfig;
use crate::metrics::COMPILE_SLOT_WAIT_STAGE;
use crate::process::lending::LentCores;
use crate::task::evaluation::{Prebuilt, StageInputs, run_prepare_child};
use crate::task::verdict::{Classified, VerdictContext, classify, space_result};
use crucible_shared::{Backend, BuildSource, TaskSpec, VerdictCode};
use crucible_task_manager::Broker;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How a CPU stage ended.
#[derive(Debug, Clone)]
pub enum CpuStageEnd {
    /// The verdict (or cancellation, or a service fault) is known without the device.
    Final(Classified),
    /// The task goes on to the device, with its prebuilt extensions if any.
    ToDevice(Box<DeviceHandoff>),
}

/// What a task takes to its device stage.
#[derive(Debug, Clone, Default)]
pub struct DeviceHandoff {
    /// The extensions the CPU stage built or found in the cache; `None`: the device stage builds
    /// whatever the candidate needs.
    pub prebuilt: Option<Prebuilt>,
    /// Worker-side times of the CPU stage (`cpu_stage`, `build_cache` or `triton_cache`, and
    /// the harness's `triton_precompile`), merged into the result's `stage_ms`.
    pub stage_ms: BTreeMap<String, f64>,
    /// How long the CPU stage's child ran: charged to the task's budget (`crate::task::budget`).
    pub cpu_used: Duration,
}

/// How the outcome of a prepare child reads, before any cache work.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PrepareVerdict {
    /// The CPU stage reached the task's verdict (a compile failure, a screening rejection, ...).
    Final(Classified),
    /// The candidate imported and its extensions were built: the device stage takes over.
    Prepared(PreparedReport),
    /// Nothing decided on the CPU (a crash, a protocol violation, a setup failure): the
    /// device stage does everything as if there had been no CPU stage.
    Inconclusive(String),
}

/// Verdict codes the CPU stage may give. Everything else needs the device to be sure.
const FINAL_ON_CPU: &[VerdictCode] = &[
    VerdictCode::Syntax,
    VerdictCode::Screened,
    VerdictCode::Compilation,
];

/// Pure: what the end of a prepare child means.
pub(crate) fn classify_prepare(outcome: &ChildOutcome, ctx: &VerdictContext) -> PrepareVerdict {
    let transcript = &outcome.transcript;
    match outcome.killed_for {
        Some(KillReason::Cancelled) => return PrepareVerdict::Final(Classified::Cancelled),
        Some(_) if transcript.last_stage() == Some(Stage::LoadCandidate) => {
            // The candidate's import (and build) ran into a limit: the same limits apply on
            // the device.
            return PrepareVerdict::Final(classify(outcome, ctx));
        }
        Some(reason) => {
            return PrepareVerdict::Inconclusive(format!(
                "killed ({reason:?}) before the candidate ran"
            ));
        }
        None => {}
    }
    if let Some(name) = &transcript.unknown_stage {
        return PrepareVerdict::Inconclusive(format!("unknown stage {name:?}"));
    }
    if let Some(why) = &transcript.violation {
        return PrepareVerdict::Inconclusive(format!("protocol violation: {why}"));
    }
    let clean_exit = outcome.exit == crate::child::supervisor::ExitKind::Code(0);
    if let Some(result) = &transcript.result {
        if clean_exit
            && result
                .error_code
                .is_some_and(|code| FINAL_ON_CPU.contains(&code))
        {
            return PrepareVerdict::Final(classify(outcome, ctx));
        }
        return PrepareVerdict::Inconclusive(format!(
            "result {:?} is not final on the cpu",
            result.error_code
        ));
    }
    match (&transcript.prepared, clean_exit) {
        (Some(prepared), true) => PrepareVerdict::Prepared(prepared.clone()),
        _ => PrepareVerdict::Inconclusive(format!("ended with {:?}", outcome.exit)),
    }
}

/// Everything the CPU stage needs from its worker.
pub struct PrepareContext<'a> {
    /// The worker's settings (interpreter, limits, sandbox).
    pub cfg: &'a WorkerConfig,
    /// The node's build cache; `None`: builds are made for the task alone and kept nowhere.
    pub cache: Option<&'a BuildCache>,
    /// The device's architecture CUDA extensions are built for (`TORCH_CUDA_ARCH_LIST` spelling).
    pub cuda_arch: Option<&'a str>,
    /// The versions the worker's harnesses last reported: part of the build cache key.
    pub software: Option<SoftwareVersions>,
    /// Where entry digests are kept; without a broker no entry is reused.
    pub broker: Option<&'a dyn Broker>,
    /// The worker's lent device cores, where it lends them ([`crate::process::lending`]).
    pub lent_cores: Option<&'a Arc<LentCores>>,
}

/// An entry whose digests the broker has: the only kind a task may reuse.
async fn verified(
    cache: &BuildCache,
    broker: Option<&dyn Broker>,
    key: &str,
) -> Option<(CachedBuild, Vec<String>)> {
    let entry = cache.lookup(key)?;
    let record = broker?
        .kv_get(BUILD_CACHE_NAMESPACE, key)
        .await
        .ok()
        .flatten()?;
    let digests = decode_digests(&record)?;
    Some((entry, digests))
}

/// Runs the CPU stage of one task. `Err` is a fault of this node.
pub async fn prepare(
    ctx: &PrepareContext<'_>,
    spec: &TaskSpec,
    label: &str,
    launcher: Launcher<'_>,
    cancel: CancellationToken,
) -> std::io::Result<CpuStageEnd> {
    let started = Instant::now();
    let cuda = spec.request.backend == Backend::Cuda;
    let on_gpu = ctx.cfg.device.index().is_some();
    let mut ready = DeviceHandoff::default();
    if cuda && !on_gpu {
        // A CPU worker answers CUDA candidates UNSUPPORTED without building anything.
        return Ok(CpuStageEnd::ToDevice(Box::new(ready)));
    }
    let triton = spec.request.backend == Backend::Triton && ctx.cfg.triton_precompile;
    let cache = ctx.cache.filter(|_| cuda || triton);
    let key = match (cache, ctx.cuda_arch, &ctx.software) {
        (Some(_), Some(arch), Some(sw)) => stage_key(spec, sw, arch),
        _ => None,
    };
    // Where the CPU stage's time goes in `stage_ms` when the cache answers.
    let hit_ms = if cuda { "build_cache" } else { "triton_cache" };
    // Held until this task's build is stored: a twin on another worker waits, then hits.
    let mut _key_lock = None;
    let refresh = spec.request.force_refresh;
    let mut stale = refresh;
    if let (Some(cache), Some(key)) = (cache, &key) {
        for locked in [false, true] {
            if locked {
                _key_lock = Some(cache.lock_key(key).await?);
            }
            if refresh {
                break;
            }
            if let Some((entry, digests)) = verified(cache, ctx.broker, key).await {
                ready.stage_ms.insert(hit_ms.into(), ms(started));
                ready.prebuilt = Some(Prebuilt {
                    cache: cache.clone(),
                    entry,
                    digests,
                    source: BuildSource::Cache,
                });
                return Ok(CpuStageEnd::ToDevice(Box::new(ready)));
            }
            // An entry without a record in the broker is not trusted: rebuilt and replaced.
            stale = cache.lookup(key).is_some();
        }
    }
    // Only builds and dry runs take one of the node's compile slots; the rest is light.
    let _slot = match cache {
        Some(cache) => {
            let waiting = Instant::now();
            let slot = cache.slot().await?;
            // Several workers share the node's slots: how long this task queued for one.
            ready
                .stage_ms
                .insert(COMPILE_SLOT_WAIT_STAGE.into(), ms(waiting));
            Some(slot)
        }
        None => None,
    };
    let inputs = StageInputs {
        cuda_arch: ctx.cuda_arch.map(str::to_owned),
        // Compiled kernels need somewhere to go: the cache, and a target to compile for. A
        // CUDA candidate's dry run builds what ModelNew builds lazily, for the cache too.
        triton_precompile: (triton || cuda) && cache.is_some() && ctx.cuda_arch.is_some(),
        lent_cores: ctx.lent_cores.cloned(),
        ..StageInputs::default()
    };
    let child_started = Instant::now();
    let (outcome, dir) = run_prepare_child(ctx.cfg, spec, label, launcher, cancel, &inputs).await?;
    ready.stage_ms.insert("cpu_stage".into(), ms(child_started));
    ready.cpu_used = outcome.wall;
    let vctx = VerdictContext::for_task(spec, ctx.cfg);
    let mut verdict = classify_prepare(&outcome, &vctx);
    if let Some(exhausted) = dir.exhausted()
        && !matches!(verdict, PrepareVerdict::Final(Classified::Cancelled))
    {
        // The device stage has the same bound: the candidate's end is decided here.
        let result = space_result(exhausted, &vctx, false);
        verdict = PrepareVerdict::Final(Classified::Verdict(Box::new(result)));
    }
    let prepared = match verdict {
        PrepareVerdict::Final(mut classified) => {
            if let Classified::Verdict(result) = &mut classified {
                result.stage_ms.extend(ready.stage_ms);
            }
            return Ok(CpuStageEnd::Final(classified));
        }
        PrepareVerdict::Inconclusive(why) => {
            tracing::info!(
                task = label,
                why,
                "cpu stage inconclusive, the device stage decides"
            );
            return Ok(CpuStageEnd::ToDevice(Box::new(ready)));
        }
        PrepareVerdict::Prepared(p) => p,
    };
    // The child's own clock: kept only when it is a plausible duration.
    for stage in ["triton_precompile", "build_dry_run"] {
        if let Some(ms) = prepared
            .stage_ms
            .get(stage)
            .filter(|ms| ms.is_finite() && **ms >= 0.0)
        {
            ready.stage_ms.insert(stage.into(), *ms);
        }
    }
    if inputs.triton_precompile {
        tracing::info!(
            task = label,
            backend = spec.request.backend.as_str(),
            builds = prepared.builds.len(),
            kernels = prepared.triton_kernels,
            files = prepared.triton_cache.len(),
            stopped = prepared.triton_stopped.as_deref().unwrap_or(""),
            "cpu stage dry run done"
        );
    }
    let has_files = if cuda {
        !prepared.builds.is_empty()
    } else {
        !prepared.triton_cache.is_empty()
    };
    // Keyed by the versions this very child reported (the worker may not know them yet).
    let software = prepared
        .software
        .as_ref()
        .and_then(SoftwareVersions::from_report);
    if let (Some(cache), Some(arch), Some(sw), true) = (cache, ctx.cuda_arch, software, has_files)
        && let Some(key) = stage_key(spec, &sw, arch)
    {
        // Copying out of the task directory is blocking I/O on what the child left: off the
        // runtime.
        let (owned, task_dir, publish_key) = (cache.clone(), dir.path().to_owned(), key.clone());
        let (builds, triton_files) = (prepared.builds.clone(), prepared.triton_cache.clone());
        let stored = tokio::task::spawn_blocking(move || {
            if cuda {
                owned.publish(&publish_key, &task_dir, &builds, stale)
            } else {
                owned.publish_triton(&publish_key, &task_dir, &triton_files, stale)
            }
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(format!("storing the build: {e}"))));
        ready.prebuilt = record(ctx, cache, &key, stored, label).await;
    }
    Ok(CpuStageEnd::ToDevice(Box::new(ready)))
}

/// The build cache key of what `spec`'s CPU stage hands over: its CUDA extensions, or its
/// Triton kernels (which also depend on the reference's inputs). `None`: nothing to key on.
fn stage_key(spec: &TaskSpec, sw: &SoftwareVersions, arch: &str) -> Option<String> {
    let r = &spec.request;
    match r.backend {
        Backend::Cuda => Some(entry_key(&r.kernel_code, sw, arch)),
        Backend::Triton => triton_entry_key(&r.kernel_code, &r.reference_code, sw, arch),
    }
}

/// Records a stored entry's digests in the broker and returns it for the device stage; `None`
/// (the device stage builds or compiles itself) when it could not be stored or recorded.
async fn record(
    ctx: &PrepareContext<'_>,
    cache: &BuildCache,
    key: &str,
    stored: std::io::Result<CachedBuild>,
    label: &str,
) -> Option<Prebuilt> {
    let digests = match &stored {
        Ok(CachedBuild {
            digests: Some(d), ..
        }) => {
            if let Some(broker) = ctx.broker
                && let Err(e) = broker
                    .kv_put(
                        BUILD_CACHE_NAMESPACE,
                        key,
                        &encode_digests(d),
                        BUILD_RECORD_TTL,
                    )
                    .await
            {
                tracing::warn!(task = label, error = %e, "could not record the build's digests");
            }
            Some(d.clone())
        }
        // Stored by another process first: its record is in the broker.
        Ok(_) => verified(cache, ctx.broker, key).await.map(|(_, d)| d),
        Err(_) => None,
    };
    match (stored, digests) {
        (Ok(entry), Some(digests)) => Some(Prebuilt {
            cache: cache.clone(),
            entry,
            digests,
            source: BuildSource::CompilePool,
        }),
        (Ok(_), None) => {
            tracing::warn!(
                task = label,
                "build stored without a record, the device stage builds again"
            );
            None
        }
        (Err(e), _) => {
            tracing::warn!(task = label, error = %e, "could not store the build, the device stage builds again");
            None
        }
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests;
