//! The warm template against a real Python with torch (`CRUCIBLE_PYTHON`, as scripts/test.sh
//! exports it): children forked from it evaluate exactly like fresh ones, a template killed
//! under a running task turns into a service fault (never a verdict), and templates are
//! recycled after their fork budget.

use crucible_gpu_worker::child::supervisor::Launcher;
use crucible_gpu_worker::child::template::TemplateSlot;
use crucible_gpu_worker::task::evaluation::run_evaluation;
use crucible_gpu_worker::task::stage::child_env;
use crucible_gpu_worker::task::verdict::Classified;
use crucible_gpu_worker::{DeviceSlot, WorkerConfig};
use crucible_shared::{EvaluateRequest, TaskSpec, VerdictCode};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap()
}

/// A CPU worker's configuration whose sandbox is proven already (by a child started
/// directly), so that the forks counted below are the tasks' own.
async fn config(work: &Path) -> WorkerConfig {
    let mut cfg = WorkerConfig::from_env(DeviceSlot::Cpu {
        name: "test".into(),
    })
    .unwrap();
    cfg.work_root = work.to_owned();
    cfg.cpu_threads = Some(1);
    crucible_gpu_worker::task::sandbox_selftest::ready(&cfg, Launcher::Direct)
        .await
        .expect("the sandbox holds on the test machine");
    cfg
}

fn spec(kernel: String) -> TaskSpec {
    let mut request = EvaluateRequest::new(read("tests/problems/softmax.py"), kernel);
    request.num_correct_trials = 2;
    request.num_perf_trials = 3;
    request.timeout_s = 60;
    TaskSpec::new(request, 7)
}

async fn ready(
    slot: &mut TemplateSlot,
    cfg: &WorkerConfig,
    max_forks: u32,
) -> std::sync::Arc<crucible_gpu_worker::child::template::Template> {
    let env_cfg = cfg.clone();
    slot.ready(
        &cfg.python,
        &cfg.work_root,
        &cfg.dir_owner,
        move |dir: &Path| child_env(&env_cfg, dir, |k| std::env::var(k).ok()),
        &cfg.limits,
        max_forks,
    )
    .await
    .expect("a template starts with the test Python (set CRUCIBLE_PYTHON to one with torch)")
}

fn verdict(c: Classified) -> crucible_shared::EvalResult {
    match c {
        Classified::Verdict(r) => *r,
        other => panic!("expected a verdict, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forked_children_evaluate_like_fresh_ones_and_templates_are_recycled() {
    let work = tempfile::tempdir().unwrap();
    let cfg = config(work.path()).await;
    let mut slot = TemplateSlot::default();
    let cancel = CancellationToken::new();
    let good = spec(read("tests/candidates/softmax__correct.py"));
    let bad = spec(read("tests/candidates/softmax__wrong.py"));

    let mut pids = Vec::new();
    for (i, task) in [&good, &bad, &good].into_iter().enumerate() {
        let template = ready(&mut slot, &cfg, 2).await;
        // It says what its children will run with: the worker keys its caches on that.
        let software = template.software.clone().unwrap_or_default();
        assert!(
            software.get("torch").is_some_and(|v| v.is_some()),
            "{software:?}"
        );
        pids.push(template.pid());
        let result = verdict(
            run_evaluation(
                &cfg,
                task,
                &format!("t{i}"),
                Launcher::Template(&template),
                cancel.clone(),
            )
            .await
            .unwrap(),
        );
        if i == 1 {
            assert_eq!(
                result.error_code,
                Some(VerdictCode::Correctness),
                "{result:?}"
            );
        } else {
            assert!(result.correct, "{result:?}");
        }
    }
    // Two forks per template: the third task ran in a fresh one.
    assert_eq!(pids[0], pids[1]);
    assert_ne!(pids[1], pids[2]);

    // The direct path gives the same verdict.
    let direct = verdict(
        run_evaluation(&cfg, &bad, "direct", Launcher::Direct, cancel.clone())
            .await
            .unwrap(),
    );
    assert_eq!(direct.error_code, Some(VerdictCode::Correctness));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_killed_under_a_task_is_a_service_fault_and_is_replaced() {
    let work = tempfile::tempdir().unwrap();
    let cfg = config(work.path()).await;
    let mut slot = TemplateSlot::default();
    let cancel = CancellationToken::new();
    let slow = spec(format!(
        "import time\ntime.sleep(30)\n{}",
        read("tests/candidates/softmax__correct.py")
    ));
    let template = ready(&mut slot, &cfg, 100).await;
    let template_pid = template.pid();
    let killer = tokio::spawn(async move {
        // Once the template has forked the task's child (it has no other children by then).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !crucible_gpu_worker::process::watchdog::read_table()
            .iter()
            .any(|p| p.ppid == template_pid)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the template never forked the task"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(template_pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    });
    let started = std::time::Instant::now();
    let outcome = run_evaluation(
        &cfg,
        &slow,
        "slow",
        Launcher::Template(&template),
        cancel.clone(),
    )
    .await;
    killer.await.unwrap();
    assert!(
        outcome.is_err(),
        "a dead template must not produce a verdict: {outcome:?}"
    );
    // The forked child died with its template instead of sleeping out its 30 s.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    let template = ready(&mut slot, &cfg, 100).await;
    assert_ne!(template.pid(), template_pid);
    let result = verdict(
        run_evaluation(
            &cfg,
            &spec(read("tests/candidates/softmax__correct.py")),
            "after",
            Launcher::Template(&template),
            cancel,
        )
        .await
        .unwrap(),
    );
    assert!(result.correct, "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_attacks_the_template_channel_only_hurts_itself() {
    let work = tempfile::tempdir().unwrap();
    let cfg = config(work.path()).await;
    let mut slot = TemplateSlot::default();
    let cancel = CancellationToken::new();
    // Writes garbage to every descriptor it can find except its own stdio and result pipe,
    // then fails; the template must neither notice nor die.
    let attacker = format!(
        "import os\nfor fd in range(4, 64):\n    try:\n        os.write(fd, b'garbage\\n' * 100)\n    except OSError:\n        pass\n{}",
        read("tests/candidates/softmax__wrong.py")
    );
    let template = ready(&mut slot, &cfg, 100).await;
    let pid = template.pid();
    let result = verdict(
        run_evaluation(
            &cfg,
            &spec(attacker),
            "attacker",
            Launcher::Template(&template),
            cancel.clone(),
        )
        .await
        .unwrap(),
    );
    // Its garbage reached its own channel to the judge (the runner's socket): caught as
    // tampering, the evaluation ends there.
    assert_eq!(result.error_code, Some(VerdictCode::Runtime), "{result:?}");
    assert_eq!(result.verdict, crucible_shared::Verdict::Hack, "{result:?}");
    assert!(
        result.flags.iter().any(|f| f.rule == "protocol-tampered"),
        "{result:?}"
    );
    let template = ready(&mut slot, &cfg, 100).await;
    assert_eq!(template.pid(), pid, "the template survived");
    let result = verdict(
        run_evaluation(
            &cfg,
            &spec(read("tests/candidates/softmax__correct.py")),
            "next",
            Launcher::Template(&template),
            cancel,
        )
        .await
        .unwrap(),
    );
    assert!(result.correct, "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_successor_template_imports_while_the_current_serves_its_last_forks() {
    let work = tempfile::tempdir().unwrap();
    let cfg = config(work.path()).await;
    let mut slot = TemplateSlot::default();
    let cancel = CancellationToken::new();
    let good = spec(read("tests/candidates/softmax__correct.py"));
    let mut pids = Vec::new();
    for i in 0..5 {
        let template = ready(&mut slot, &cfg, 4).await;
        pids.push(template.pid());
        // The last quarter of the first template's forks: its successor is on its way.
        assert_eq!(slot.warming(), i == 3, "task {i}");
        let result = verdict(
            run_evaluation(
                &cfg,
                &good,
                &format!("s{i}"),
                Launcher::Template(&template),
                cancel.clone(),
            )
            .await
            .unwrap(),
        );
        assert!(result.correct, "{result:?}");
    }
    assert!(pids[..4].iter().all(|p| *p == pids[0]));
    assert_ne!(pids[4], pids[0], "the fifth task ran in the successor");
}
