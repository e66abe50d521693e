//! `timeout_s` is one budget for the whole task (`crucible_gpu_worker::task::budget`): a task whose
//! CPU stage took most of it gets only the rest on the device. Against a real Python with
//! torch (`CRUCIBLE_PYTHON`, as scripts/test.sh exports it), on a CPU slot.

use crucible_gpu_worker::child::supervisor::Launcher;
use crucible_gpu_worker::task::budget::{remaining, task_budget};
use crucible_gpu_worker::task::evaluation::{StageInputs, run_evaluation_with};
use crucible_gpu_worker::task::verdict::Classified;
use crucible_gpu_worker::{DeviceSlot, WorkerConfig};
use crucible_shared::{EvaluateRequest, TaskSpec, VerdictCode};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn read(rel: &str) -> String {
    let repo: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned();
    std::fs::read_to_string(repo.join(rel)).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_whose_cpu_stage_took_most_of_its_timeout_gets_only_the_rest_on_the_device() {
    let work = tempfile::tempdir().unwrap();
    let mut cfg = WorkerConfig::from_env(DeviceSlot::Cpu {
        name: "test".into(),
    })
    .unwrap();
    cfg.work_root = work.path().to_owned();
    cfg.cpu_threads = Some(1);
    crucible_gpu_worker::task::sandbox_selftest::ready(&cfg, Launcher::Direct)
        .await
        .expect("the sandbox holds on the test machine");

    // A forward that never returns: only a deadline ends it.
    let mut request = EvaluateRequest::new(
        read("tests/problems/elementwise_relu.py"),
        read("tests/candidates/elementwise_relu__hang.py"),
    );
    request.timeout_s = 600;
    let spec = TaskSpec::new(request, 7);
    // The CPU stage took 570 of its 600 seconds: 30 are left, enough for the child to set up
    // and reach the candidate's forward.
    let left = remaining(task_budget(&spec), Duration::from_secs(570)).unwrap();
    assert_eq!(left, Duration::from_secs(30));

    let cancel = CancellationToken::new();
    let inputs = StageInputs {
        budget: Some(left),
        ..StageInputs::default()
    };
    let evaluated = run_evaluation_with(&cfg, &spec, "budget", Launcher::Direct, cancel, inputs)
        .await
        .unwrap();
    let Classified::Verdict(result) = evaluated.classified else {
        panic!("expected a verdict, got {:?}", evaluated.classified);
    };
    assert_eq!(result.error_code, Some(VerdictCode::Timeout), "{result:?}");
    // Killed at what the CPU stage left, not after another whole `timeout_s`.
    let wall = result.stage_ms["child_wall"];
    assert!(
        (30_000.0..120_000.0).contains(&wall),
        "the device child ran {wall} ms"
    );
    // The message still names the task's one budget.
    assert!(
        result
            .error_message
            .as_deref()
            .unwrap()
            .contains("600s deadline"),
        "{result:?}"
    );
}
