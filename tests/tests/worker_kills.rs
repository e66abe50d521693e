//! A worker killed with `kill -9` mid-task, with no API process anywhere (real redis-server,
//! real CPU `crucible-worker` processes; the task submitted through the broker directly): the
//! next worker's reaper (workers run it by default, elected by the reaper lease) requeues the
//! task and the worker finishes it, and its start-up sweep removes the task and template
//! directories the killed one left under the shared work root, and nothing else.

use crucible_shared::{BrokerConfig, EvaluateRequest, TaskSpec, TaskStatus, TenantId, Verdict};
use crucible_task_manager::{Broker, RedisBroker};
use crucible_tests::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

const PREFIX: &str = "kills";

/// A correct candidate that sleeps in each forward: running for several seconds.
fn slow_spec() -> TaskSpec {
    let mut request = EvaluateRequest::new(
        problem("elementwise_relu"),
        std::fs::read_to_string(repo_root().join("tests/escapes/slow_neighbour.py"))
            .expect("slow neighbour"),
    );
    request.num_correct_trials = 3;
    request.num_perf_trials = 100;
    request.timeout_s = 300;
    TaskSpec::new(request, 5)
}

/// The directories under `root` that have an owner file beside them.
fn owned_dirs(root: &Path) -> BTreeSet<String> {
    std::fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let dir = name.strip_suffix(".owner")?;
                    root.join(dir).is_dir().then(|| dir.to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_workers_task_is_requeued_and_its_directories_swept_with_no_api() {
    let logs = log_dir("worker_kills");
    let redis = Redis::start(&logs).await;
    let work = logs.join("work");
    std::fs::create_dir_all(&work).unwrap();
    // Not any worker's (no owner file): the sweep leaves it.
    let unowned = work.join("task-unowned");
    std::fs::create_dir(&unowned).unwrap();
    let mut env = service_env(&redis.url, PREFIX);
    env.extend(
        [
            // Short leases, so that the killed worker's comes back within the test.
            ("CRUCIBLE_LEASE_TTL_MS", "3000"),
            ("CRUCIBLE_REAPER_INTERVAL_MS", "200"),
            ("CRUCIBLE_WORK_DIR", work.to_str().unwrap()),
            // One identity for both workers: the second is the first restarted.
            ("HOSTNAME", "kills-node"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let cfg = BrokerConfig {
        key_prefix: PREFIX.to_owned(),
        ..BrokerConfig::default()
    };
    let broker = RedisBroker::connect(&redis.url, cfg).expect("connect");
    let id = broker
        .submit(&TenantId::builtin(), slow_spec())
        .await
        .unwrap()
        .task_id;

    let mut first = Proc::spawn("worker-1", worker_command(&env), &logs);
    let first_id = eventually(
        "the task running on the first worker, in a directory of its own",
        Duration::from_secs(300),
        || async {
            let view = broker.get_task(&id).await.unwrap()?;
            let has_task_dir = owned_dirs(&work)
                .iter()
                .any(|d| !d.starts_with("task-template-"));
            (view.status == TaskStatus::Running && has_task_dir).then_some(view.worker_id?)
        },
    )
    .await;
    first.kill9();
    let leaked = owned_dirs(&work);
    assert!(
        leaked.iter().any(|d| d.starts_with("task-template-"))
            && leaked.iter().any(|d| !d.starts_with("task-template-")),
        "a task and a template directory are left: {leaked:?}"
    );

    let second = Proc::spawn("worker-2", worker_command(&env), &logs);
    eventually(
        "the killed worker's directories swept",
        Duration::from_secs(120),
        || async {
            let now = owned_dirs(&work);
            let gone = leaked
                .iter()
                .all(|d| !now.contains(d) && !work.join(d).exists());
            gone.then_some(())
        },
    )
    .await;
    for d in &leaked {
        assert!(
            !work.join(format!("{d}.owner")).exists(),
            "{d}'s owner file"
        );
    }
    assert!(unowned.is_dir(), "a directory of no worker's was removed");

    let done = eventually(
        "the task requeued by a worker's reaper and finished",
        Duration::from_secs(300),
        || async {
            let view = broker.get_task(&id).await.unwrap()?;
            view.status.is_terminal().then_some(view)
        },
    )
    .await;
    assert_eq!(done.status, TaskStatus::Done, "{done:?}");
    assert_eq!(done.attempts, 2, "{done:?}");
    assert_ne!(done.worker_id.as_ref(), Some(&first_id), "{done:?}");
    assert_eq!(
        done.result.as_ref().map(|r| r.verdict),
        Some(Verdict::Ok),
        "{done:?}"
    );
    let log = second.log_text();
    assert!(log.contains("reaper leads"), "{log}");
    assert!(
        log.contains("swept a directory left by a dead worker process"),
        "{log}"
    );
}
