//! The README's first command's binary: `crucible up` on the embedded broker serves an
//! evaluation end to end; `crucible eval` evaluates a pair without a server.

use crucible_tests::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crucible_up_serves_on_the_embedded_broker() {
    let logs = log_dir("up");
    let port = free_port();
    let mut up = Proc::spawn("crucible-up", up_command(port), &logs);
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
    assert!(
        up.terminate(Duration::from_secs(20)),
        "crucible up did not stop on SIGTERM:\n{}",
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
