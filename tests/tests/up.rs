//! The README's first command's binary: `crucible up` on the embedded broker serves an
//! evaluation end to end, and its one `/metrics` the API's and its workers' metrics; SIGTERM
//! drains it (the running evaluation's verdict is served, during the drain and after it,
//! before it exits 0); its logs carry no colour codes off a terminal, and are JSON lines with
//! `CRUCIBLE_LOG_FORMAT=json`; `crucible eval` evaluates a pair without a server.

use crucible_tests::*;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crucible_up_serves_on_the_embedded_broker() {
    let logs = log_dir("up");
    let port = free_port();
    let mut up = Proc::spawn("crucible-up", crucible_up(port), &logs);
    let api = Api::new(port);
    api.wait_ready().await;
    let (_, health) = api.get("/health").await;
    assert_eq!(health["broker"], "memory", "{health}");

    let task = api
        .evaluate_and_wait(
            eval_body("softmax", "softmax__correct.py", 120),
            Duration::from_secs(120),
        )
        .await;
    assert_eq!(task["status"], "done", "{task}");
    assert_eq!(task["result"]["correct"], true, "{task}");
    assert_eq!(task["result"]["device"]["kind"], "cpu");

    // The worker's metrics are in the API's /metrics: the process opens no other port.
    let metrics = eventually(
        "the verdict in /metrics",
        Duration::from_secs(10),
        || async {
            let text = api.metrics_text().await;
            let counted = sample(
                &text,
                "crucible_evaluations_total",
                &[("verdict", "ok"), ("error_code", ""), ("backend", "triton")],
            );
            (counted == Some(1.0)).then_some(text)
        },
    )
    .await;
    let types = metric_types(&metrics);
    for (name, kind) in [
        ("crucible_evaluations_total", "counter"),
        ("crucible_tasks_finished_total", "counter"),
        ("crucible_evaluation_seconds", "histogram"),
        ("crucible_evaluation_stage_seconds", "histogram"),
        ("crucible_queue_wait_seconds", "histogram"),
    ] {
        assert!(
            types.contains(&(name.to_owned(), kind.to_owned())),
            "{name} is not a {kind} in\n{metrics}"
        );
    }
    for (name, kind) in &types {
        assert!(
            !name.ends_with("_total") || kind == "counter",
            "{name} is a {kind}"
        );
    }
    let one = |name, labels: &[(&str, &str)]| sample(&metrics, name, labels);
    assert_eq!(
        one("crucible_tasks_finished_total", &[("status", "done")]),
        Some(1.0)
    );
    assert_eq!(
        one("crucible_queue_wait_seconds_count", &[]),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        one(
            "crucible_evaluation_seconds_count",
            &[("backend", "triton")]
        ),
        Some(1.0)
    );
    // Every stage the result reports is observed under its own name.
    let stages = task["result"]["stage_ms"].as_object().expect("stage_ms");
    assert!(stages.contains_key("correctness"), "{task}");
    for stage in stages.keys() {
        assert_eq!(
            one(
                "crucible_evaluation_stage_seconds_count",
                &[("stage", stage)]
            ),
            Some(1.0),
            "stage {stage}\n{metrics}"
        );
    }
    assert_eq!(one("crucible_worker_info", &[("gpu", "cpu")]), Some(1.0));
    assert_eq!(one("crucible_worker_healthy", &[("gpu", "cpu")]), Some(1.0));
    assert_eq!(
        one("crucible_build_info", &[("component", "up")]),
        Some(1.0)
    );
    assert!(
        !metrics.contains(r#"component="api""#) && !metrics.contains(r#"component="worker""#),
        "one build_info for the one process\n{metrics}"
    );
    // Every metric the shipped alerts and dashboard use is one this process really exports.
    let exported: Vec<&str> = types.iter().map(|(name, _)| name.as_str()).collect();
    for file in [
        "deploy/prometheus/alerts.yml",
        "deploy/grafana/crucible.json",
    ] {
        let text = std::fs::read_to_string(repo_root().join(file)).expect("deploy file");
        for used in metric_names_in(&text) {
            assert!(
                exported.contains(&used.as_str()),
                "{file} uses {used}, which crucible up does not export"
            );
        }
    }
    assert!(
        up.terminate(Duration::from_secs(20)),
        "crucible up did not stop on SIGTERM:\n{}",
        up.log_text()
    );
    // Its logs went to a file: text lines, without a terminal's colour codes.
    let text = up.log_text();
    assert!(
        text.contains("crucible up") && !text.contains('\u{1b}'),
        "{text}"
    );
}

/// `CRUCIBLE_LOG_FORMAT`: `json` makes every line of the shared log set-up a JSON object; a
/// format nobody knows stops the binary at start, naming the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crucible_up_logs_json_when_asked_and_refuses_an_unknown_format() {
    let refused = crucible_up(free_port())
        .env("CRUCIBLE_LOG_FORMAT", "xml")
        .output()
        .expect("crucible up runs");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("CRUCIBLE_LOG_FORMAT=\"xml\""),
        "{stderr}"
    );

    let logs = log_dir("up-json");
    let port = free_port();
    let mut cmd = crucible_up(port);
    cmd.env("CRUCIBLE_LOG_FORMAT", "json");
    let up = Proc::spawn("crucible-up", cmd, &logs);
    Api::new(port).wait_ready().await;
    let text = up.log_text();
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let started = lines
        .iter()
        .find(|l| l["fields"]["message"] == "crucible up")
        .unwrap_or_else(|| panic!("no JSON line says `crucible up`:\n{text}"));
    assert_eq!(started["level"], "INFO", "{started}");
    assert_eq!(started["fields"]["broker"], "memory", "{started}");
    assert!(!text.contains('\u{1b}'), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_crucible_up_and_the_running_verdict_is_served() {
    let logs = log_dir("up-drain");
    let port = free_port();
    let mut up = Proc::spawn("crucible-up", crucible_up(port), &logs);
    let api = Api::new(port);
    api.wait_ready().await;
    // Long enough to be on the device when the signal comes, whatever the machine's load.
    let id = api
        .submit(json!({
            "reference_code": problem("elementwise_relu"),
            "kernel_code": format!(
                "import time\ntime.sleep(8)\n{}",
                candidate("elementwise_relu__correct.py")
            ),
            "num_correct_trials": 1,
            "num_perf_trials": 2,
            "timeout_s": 120,
        }))
        .await;
    // On the device, not only claimed: a drain gives back what has not reached the device.
    eventually(
        "the task on the worker's device",
        Duration::from_secs(120),
        || async {
            let (_, w) = api.get("/workers/status").await;
            let w = w["workers"].as_array()?.first()?.clone();
            (w["state"] == "busy" && w["current_task"] == id.as_str()).then_some(())
        },
    )
    .await;
    up.sigterm();
    // A long-poll that starts during the drain is answered (the task sleeps for seconds more).
    let (status, during) = api.get(&format!("/tasks/{id}?wait=1")).await;
    assert_eq!(status, 200, "{during}\n{}", up.log_text());
    assert_eq!(during["status"], "running", "{during}");
    // The drain is over (the worker stopped): a client that only now asks is still answered,
    // since the verdict ends with this process (the embedded broker). Before, the API stopped
    // accepting here and a client between two polls found the port closed.
    eventually("the drain to be over", Duration::from_secs(90), || {
        std::future::ready(
            up.log_text()
                .contains("drained, serving until")
                .then_some(()),
        )
    })
    .await;
    let (status, task) = api.get(&format!("/tasks/{id}?wait=5")).await;
    assert_eq!(status, 200, "{task}\n{}", up.log_text());
    assert_eq!(task["status"], "done", "{task}\n{}", up.log_text());
    assert_eq!(task["result"]["correct"], true, "{task}");
    assert_eq!(
        task["attempts"], 1,
        "finished by the attempt that ran: {task}"
    );

    // Every verdict of the drain read: it exits without waiting out CRUCIBLE_DRAIN_READ_S.
    let exit = eventually(
        "crucible up to exit once its verdicts were read",
        Duration::from_secs(20),
        || std::future::ready(up.exited()),
    )
    .await;
    assert!(exit.success(), "{exit}\n{}", up.log_text());
    assert!(
        up.log_text().contains("draining the workers"),
        "{}",
        up.log_text()
    );
}

#[test]
fn crucible_eval_runs_a_pair_without_a_server() {
    let root = repo_root();
    let out = Command::new(bin("crucible"))
        .args(["eval", "--cpu", "--trials", "2", "--perf-trials", "3"])
        .arg("--reference")
        .arg(root.join("tests/problems/matmul.py"))
        .arg("--kernel")
        .arg(root.join("tests/candidates/matmul__wrong.py"))
        .env("CRUCIBLE_PYTHON", python())
        .output()
        .expect("crucible eval runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("JSON result on stdout");
    assert_eq!(result["correct"], false, "{result}");
    assert_eq!(result["error_code"], "CORRECTNESS", "{result}");
    assert_eq!(result["compiled"], true, "{result}");
    assert_eq!(
        result["problem_hash"].as_str(),
        Some(crucible_shared::problem_hash(&problem("matmul")).as_str()),
        "{result}"
    );
}

/// The `crucible_*` metric names a PromQL text uses, a histogram's series by its own name.
fn metric_names_in(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crucible_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        names.insert(base.to_owned());
        rest = &tail[end..];
    }
    names
}
