//! Rollouts end to end: `crucible up` with the problem registry of `tests/rollouts`, the
//! corpus of `tests/rollouts/rollouts.jsonl` through `crucible rollouts submit`, and every
//! reward checked against the value computed by hand in `tests/rollouts/expected.json`; then
//! the API's edges (unknown problems, cursors, idempotent resubmission) on the same server.

use crucible_tests::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::process::Command;
use std::time::Duration;

fn corpus_file(name: &str) -> std::path::PathBuf {
    repo_root().join("tests/rollouts").join(name)
}

/// Expected reward: `const + per_speedup · min(speedup, cap) + per_coverage · coverage`.
fn expected_reward(spec: &Value, result: &Value) -> f64 {
    let num = |v: &Value| v.as_f64().unwrap_or(0.0);
    let speedup = num(&result["speedup"]);
    let capped = spec["speedup_cap"]
        .as_f64()
        .map_or(speedup, |c| speedup.min(c));
    num(&spec["const"])
        + num(&spec["per_speedup"]) * capped
        + num(&spec["per_coverage"]) * num(&result["custom_time_coverage"])
}

async fn start_service(test: &str) -> (Proc, Api) {
    let logs = log_dir(test);
    let port = free_port();
    let mut cmd = Command::new(bin("crucible"));
    cmd.args(["up", "--cpu", "--extra-cpu-workers", "1"])
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .env_remove("REDIS_URL")
        .env_remove("KERNELBENCH_ROOT")
        .env("CRUCIBLE_PROBLEMS", corpus_file("problems.jsonl"))
        .env("CRUCIBLE_PYTHON", python())
        .env("CRUCIBLE_CPU_THREADS", "1");
    let up = Proc::spawn("crucible-up", cmd, &logs);
    let api = Api::new(port);
    api.wait_ready().await;
    (up, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_corpus_scores_as_computed_by_hand_through_the_cli() {
    let (_up, api) = start_service("rollouts-cli").await;
    let out = log_dir("rollouts-cli").join("rewards.jsonl");
    let cli = tokio::task::spawn_blocking({
        let out = out.clone();
        let base = api.base.clone();
        move || {
            Command::new(bin("crucible"))
                .args(["rollouts", "submit"])
                .arg(corpus_file("rollouts.jsonl"))
                .args(["--url", &base, "--wait", "--wait-timeout-s", "1500"])
                .args(["--num-correct-trials", "3", "--num-perf-trials", "5"])
                .args(["--batch-size", "16"])
                .arg("--out")
                .arg(&out)
                .output()
                .expect("crucible rollouts runs")
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&cli.stdout);
    assert!(
        cli.status.success(),
        "crucible rollouts failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert!(
        stdout.contains("fast_1") && stdout.contains("hacks"),
        "{stdout}"
    );

    let expected: BTreeMap<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(corpus_file("expected.json")).unwrap())
            .unwrap();
    let results: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: HashSet<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), results.len(), "each rollout comes back once");
    assert_eq!(results.len(), expected.len(), "every rollout comes back");
    assert!(results.len() >= 40);

    let (_, problems) = api.get("/problems").await;
    let hashes: BTreeMap<(u64, u64), &str> = problems["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                (p["level"].as_u64().unwrap(), p["id"].as_u64().unwrap()),
                p["hash"].as_str().unwrap(),
            )
        })
        .collect();

    let mut mismatches = Vec::new();
    for r in &results {
        let id = r["id"].as_str().unwrap();
        let want = &expected[id];
        let result = &r["result"];
        let reward = r["reward"].as_f64();
        let hand = expected_reward(&want["reward"], result);
        let mut wrong = Vec::new();
        if r["status"] != want["status"] {
            wrong.push(format!("status {} (want {})", r["status"], want["status"]));
        }
        if result["verdict"] != want["verdict"] {
            wrong.push(format!(
                "verdict {} (want {})",
                result["verdict"], want["verdict"]
            ));
        }
        if r["format_ok"] != want["format_ok"] {
            wrong.push(format!("format_ok {}", r["format_ok"]));
        }
        if !reward.is_some_and(|x| (x - hand).abs() < 1e-6) {
            wrong.push(format!("reward {reward:?} (by hand {hand})"));
        }
        let key = (
            r["problem"]["level"].as_u64().unwrap(),
            r["problem"]["id"].as_u64().unwrap(),
        );
        if r["problem_hash"].as_str() != hashes.get(&key).copied() {
            wrong.push(format!("problem_hash {}", r["problem_hash"]));
        }
        if !result.is_null() && result["problem_hash"] != r["problem_hash"] {
            wrong.push("the result names another problem version".into());
        }
        let feedback = r["feedback"].as_str().unwrap();
        if !feedback.starts_with("Status: ") || feedback.len() > 1200 {
            wrong.push(format!("feedback {feedback:?}"));
        }
        if !wrong.is_empty() {
            mismatches.push(format!("{id}: {}", wrong.join("; ")));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} rollouts differ from expected.json:\n{}",
        mismatches.len(),
        results.len(),
        mismatches.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_stream_by_cursor_once_each_and_resubmission_is_idempotent() {
    let (_up, api) = start_service("rollouts-api").await;
    let good = format!(
        "<think>one program per block</think>\n<KERNEL>\n```python\n{}```",
        candidate("elementwise_relu__correct.py")
    );
    let wrong = format!("```python\n{}```", candidate("elementwise_relu__wrong.py"));
    let rollout = |id: &str, completion: &str, profile: &str| {
        json!({"id": id, "problem": {"level": 1, "id": 19}, "completion": completion,
               "profile": profile, "turn": 1})
    };
    let body = json!({
        "rollouts": [
            rollout("good-a", &good, "kernel_rl"),
            rollout("good-b", &good, "kevin"),
            rollout("wrong", &wrong, "drkernel"),
            rollout("prose", "I would write a kernel here.", "kernel_rl"),
            {"id": "inline", "reference_code": problem("elementwise_relu"), "completion": good,
             "profile": "kernel_rl", "weights": {"speed": 0.5, "thinking": 0.0}},
        ],
        "eval": {"num_correct_trials": 2, "num_perf_trials": 3},
        "idempotency_key": "trainer-step-7",
    });
    let (status, submitted) = api.post("/rollouts", body.clone()).await;
    assert_eq!(status, 202, "{submitted}");
    assert_eq!(
        (
            submitted["rollouts"].as_u64(),
            submitted["evaluated"].as_u64()
        ),
        (Some(5), Some(4))
    );
    let batch = submitted["batch_id"].as_str().unwrap().to_owned();

    // A retry under the same key is the same batch; nothing is submitted twice.
    let (status, again) = api.post("/rollouts", body).await;
    assert_eq!(status, 202);
    assert_eq!(again["batch_id"], submitted["batch_id"]);
    assert_eq!(again["deduplicated"], true);

    // One result per page: every rollout exactly once, in completion order.
    let mut cursor = 0;
    let mut seen: Vec<Value> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "batch not done: {seen:?}"
        );
        let (status, page) = api
            .get(&format!(
                "/batches/{batch}/results?after={cursor}&wait=20&limit=1"
            ))
            .await;
        assert_eq!(status, 200, "{page}");
        seen.extend(page["results"].as_array().unwrap().iter().cloned());
        cursor = page["cursor"].as_u64().unwrap();
        if page["done"] == true {
            break;
        }
    }
    let by_id: BTreeMap<&str, &Value> = seen
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r))
        .collect();
    assert_eq!(by_id.len(), 5, "{seen:?}");
    assert_eq!(seen.len(), 5, "no rollout twice: {seen:?}");
    assert_eq!(
        seen[0]["id"], "prose",
        "rollouts without a kernel come first"
    );
    assert_eq!(by_id["prose"]["status"], "no_kernel");
    assert_eq!(by_id["prose"]["reward"], 0.0);
    assert_eq!(
        by_id["good-a"]["task_id"], by_id["good-b"]["task_id"],
        "one evaluation"
    );
    assert_eq!(by_id["good-a"]["turn"], 1);
    let close = |v: &Value, x: f64| v.as_f64().is_some_and(|r| (r - x).abs() < 1e-9);
    // kernel_rl: 0.1 format + 0.2 compile + 1.0 correct + 0.05 length + 0.1 thinking.
    assert!(
        close(&by_id["good-a"]["reward"], 1.45),
        "{}",
        by_id["good-a"]
    );
    let speedup = by_id["good-b"]["result"]["speedup"].as_f64().unwrap();
    assert!(close(&by_id["good-b"]["reward"], 0.3 + speedup));
    assert_eq!(by_id["wrong"]["result"]["verdict"], "incorrect");
    assert_eq!(by_id["wrong"]["reward"], 0.0);
    // Overridden weights: speed 0.5 (capped at 10), thinking 0.
    assert!(close(
        &by_id["inline"]["reward"],
        1.35 + 0.5 * speedup.min(10.0)
    ));
    assert!(
        by_id["wrong"]["feedback"]
            .as_str()
            .unwrap()
            .contains("correctness error")
    );

    // The page after the end is empty and done; a cursor is a pure read.
    let (_, tail) = api
        .get(&format!("/batches/{batch}/results?after={cursor}"))
        .await;
    assert_eq!(
        (tail["results"].as_array().unwrap().len(), &tail["done"]),
        (0, &json!(true))
    );
    let (_, first) = api.get(&format!("/batches/{batch}/results")).await;
    assert_eq!(first["results"].as_array().unwrap().len(), 5);

    // Problems by reference, and the clear errors around them.
    let task = api
        .evaluate_and_wait(
            json!({"problem": {"level": 1, "id": 19}, "kernel_code": candidate("elementwise_relu__correct.py"),
                   "num_correct_trials": 2, "num_perf_trials": 3}),
            Duration::from_secs(120),
        )
        .await;
    assert_eq!(task["result"]["verdict"], "ok", "{task}");
    let (_, relu) = api.get("/problems/1/19").await;
    assert_eq!(task["result"]["problem_hash"], relu["hash"]);
    assert!(
        relu["reference_code"]
            .as_str()
            .unwrap()
            .contains("class Model")
    );

    let (status, err) = api
        .post(
            "/rollouts",
            json!({"rollouts": [{"id": "x", "problem": {"level": 9, "id": 9}, "completion": good}]}),
        )
        .await;
    assert_eq!(status, 422, "{err}");
    assert_eq!(err["field"], "rollouts[0].problem");
    assert!(
        err["message"].as_str().unwrap().contains("unknown problem"),
        "{err}"
    );
    let (status, _) = api.get("/problems/9/9").await;
    assert_eq!(status, 404);
    let (status, err) = api
        .post(
            "/evaluate",
            json!({"problem": {"level": 1, "id": 19}, "reference_code": "x", "kernel_code": "y"}),
        )
        .await;
    assert_eq!((status, &err["field"]), (422, &json!("problem")), "{err}");
    let (status, _) = api.get("/batches/b_unknown/results").await;
    assert_eq!(status, 404);
    let (status, err) = api.get(&format!("/batches/{batch}/results?limit=0")).await;
    assert_eq!((status, &err["field"]), (422, &json!("limit")));
}
