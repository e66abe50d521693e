//! The CPU stage's Triton dry run through the worker, against a real Python with torch and
//! Triton (`CRUCIBLE_PYTHON`): a GPU slot's CPU stage never touches the device, so it runs
//! here; ptxas comes with Triton's wheel. The kernels compiled on the CPU are stored in the
//! build cache, found again without a child, and installed into a device stage's
//! `cache/triton/` (that Triton's own JIT hits those entries is tests/harness/check_triton_aot.py).

mod common;

use common::{gpu_config, repo};
use crucible_gpu_worker::WorkerConfig;
use crucible_gpu_worker::cache::build_cache::BuildCache;
use crucible_gpu_worker::cache::reference_cache::SoftwareVersions;
use crucible_gpu_worker::child::supervisor::Launcher;
use crucible_gpu_worker::task::prepare::{CpuStageEnd, DeviceHandoff, PrepareContext, prepare};
use crucible_shared::{Backend, BrokerConfig, BuildSource, EvaluateRequest, TaskSpec};
use crucible_task_manager::MemoryBroker;
use std::path::Path;
use tokio_util::sync::CancellationToken;

fn spec() -> TaskSpec {
    let dir = repo().join("tests/harness/triton_aot");
    let mut request = EvaluateRequest::new(
        std::fs::read_to_string(dir.join("problem.py")).unwrap(),
        std::fs::read_to_string(dir.join("candidate.py")).unwrap(),
    );
    request.backend = Backend::Triton;
    request.timeout_s = 600;
    TaskSpec::new(request, 7)
}

/// Whether this Python's Triton ships ptxas (compiling to a cubin needs it).
fn has_ptxas(python: &Path) -> bool {
    let code = "import os, triton; p = os.path.join(os.path.dirname(triton.__file__), \
                'backends', 'nvidia', 'bin', 'ptxas'); print(os.access(p, os.X_OK))";
    std::process::Command::new(python)
        .args(["-c", code])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "True")
}

/// The versions the harness reports (what the worker keys its cache on once it has seen a
/// result).
fn software(python: &Path) -> SoftwareVersions {
    let code = "import torch, importlib.metadata as m; print(torch.__version__); \
                print(m.version('triton')); print(torch.version.cuda)";
    let out = std::process::Command::new(python)
        .args(["-c", code])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines().map(str::to_owned);
    SoftwareVersions {
        torch: lines.next(),
        triton: lines.next(),
        cuda: lines.next().filter(|v| v != "None"),
    }
}

async fn run(
    cfg: &WorkerConfig,
    cache: &BuildCache,
    broker: &MemoryBroker,
    label: &str,
) -> DeviceHandoff {
    let ctx = PrepareContext {
        cfg,
        cache: Some(cache),
        cuda_arch: Some("9.0"),
        software: Some(software(&cfg.python)),
        broker: Some(broker),
        lent_cores: None,
    };
    match prepare(
        &ctx,
        &spec(),
        label,
        Launcher::Direct,
        CancellationToken::new(),
    )
    .await
    .unwrap()
    {
        CpuStageEnd::ToDevice(r) => *r,
        CpuStageEnd::Final(c) => panic!("expected the task to go on to the device, got {c:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernels_compiled_on_the_cpu_reach_the_device_stage_through_the_cache() {
    let work = tempfile::tempdir().unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    let mut cfg = gpu_config(work.path(), cache_dir.path()).await;
    if !has_ptxas(&cfg.python) {
        eprintln!(
            "skipped: the Triton of {} ships no ptxas",
            cfg.python.display()
        );
        return;
    }
    let cache = BuildCache::open(cache_dir.path(), 1, 100).unwrap();
    let broker = MemoryBroker::new(BrokerConfig::default());

    let first = run(&cfg, &cache, &broker, "aot").await;
    let prebuilt = first.prebuilt.expect("the dry run's kernels, stored");
    assert_eq!(prebuilt.source, BuildSource::CompilePool);
    let files = &prebuilt.entry.manifest.triton;
    assert!(
        files.iter().any(|f| f.ends_with(".cubin")),
        "a cubin among {files:?}"
    );
    assert!(first.stage_ms.contains_key("triton_precompile"));

    // The same candidate and problem again: found in the cache, no child at all.
    let again = run(&cfg, &cache, &broker, "aot2").await;
    let hit = again.prebuilt.expect("cached kernels");
    assert_eq!(hit.source, BuildSource::Cache);
    assert_eq!(hit.entry.key, prebuilt.entry.key);
    assert!(again.stage_ms.contains_key("triton_cache"));
    assert!(!again.stage_ms.contains_key("cpu_stage"));

    // The device stage's directory gets checked copies where Triton looks.
    let gpu_dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(gpu_dir.path().join("cache")).unwrap();
    cache
        .install(&hit.entry, &hit.digests, gpu_dir.path())
        .unwrap();
    for f in files {
        assert!(gpu_dir.path().join(f).is_file(), "{f} installed");
    }

    // Switched off (CRUCIBLE_TRITON_PRECOMPILE=0): no dry run, nothing handed over.
    cfg.triton_precompile = false;
    let cache_off = BuildCache::open(&cache_dir.path().join("off"), 1, 100).unwrap();
    let off = run(&cfg, &cache_off, &broker, "off").await;
    assert!(off.prebuilt.is_none());
    assert!(!off.stage_ms.contains_key("triton_precompile"));
}
