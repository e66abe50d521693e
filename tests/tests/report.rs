//! Batch reports end to end: `crucible up --cpu` with the registry of `tests/rollouts`, an
//! `/evaluate/batch` batch and a `/rollouts` batch of candidates with known verdicts, and each
//! report's figures checked against a computation by hand over the batch's own task results
//! (CPU speedups vary from run to run, so the expected values come from the fetched results,
//! never from constants); then `crucible report --json` writes the same report.

use crucible_tests::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

const FAST_P: [f64; 5] = [0.0, 1.0, 1.2, 1.5, 2.0];

async fn start_service(test: &str) -> (Proc, Api) {
    let logs = log_dir(test);
    let port = free_port();
    let mut cmd = crucible_up(port);
    cmd.args(["--extra-cpu-workers", "1"])
        .env_remove("KERNELBENCH_ROOT")
        .env(
            "CRUCIBLE_PROBLEMS",
            repo_root().join("tests/rollouts/problems.jsonl"),
        );
    let up = Proc::spawn("crucible-up", cmd, &logs);
    let api = Api::new(port);
    api.wait_ready().await;
    (up, api)
}

/// The batch's task views by id, once every task has finished.
async fn finished_tasks(api: &Api, batch_id: &str) -> BTreeMap<String, Value> {
    let batch = eventually(
        &format!("batch {batch_id} to finish"),
        Duration::from_secs(900),
        || async {
            let (status, b) = api.get(&format!("/batches/{batch_id}?include=tasks")).await;
            let c = &b["counts"];
            let finished = ["done", "failed", "cancelled"]
                .iter()
                .map(|k| c[k].as_u64().unwrap_or(0))
                .sum::<u64>();
            (status == 200 && finished == b["total"].as_u64().unwrap()).then_some(b)
        },
    )
    .await;
    batch["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["task_id"].as_str().unwrap().to_owned(), t.clone()))
        .collect()
}

/// The figures of one group, by hand: `samples` are (verdict, speedup) with verdict None for
/// a sample without one.
fn by_hand(samples: &[(Option<&str>, Option<f64>)]) -> Value {
    let n = samples.len() as f64;
    let speedups: Vec<f64> = samples
        .iter()
        .filter(|(v, _)| *v == Some("ok"))
        .filter_map(|(_, s)| *s)
        .collect();
    let count = |verdict: &str| samples.iter().filter(|(v, _)| *v == Some(verdict)).count();
    let mean = |xs: &[f64]| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
    let logs: Vec<f64> = speedups.iter().map(|s| s.ln()).collect();
    json!({
        "samples": samples.len(),
        "correct_rate": count("ok") as f64 / n,
        "fast_p": FAST_P.map(|p| speedups.iter().filter(|s| **s > p).count() as f64 / n),
        "mean_speedup": mean(&speedups),
        "geomean_speedup": mean(&logs).map(f64::exp),
        "hacks": count("hack"),
        "decoys": count("decoy"),
    })
}

fn assert_group(got: &Value, want: &Value, what: &str) {
    let close = |a: &Value, b: &Value| match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() < 1e-9,
        _ => a == b,
    };
    for key in [
        "samples",
        "correct_rate",
        "mean_speedup",
        "geomean_speedup",
        "hacks",
        "decoys",
    ] {
        assert!(
            close(&got[key], &want[key]),
            "{what} {key}: {} want {}",
            got[key],
            want[key]
        );
    }
    let rates: Vec<Value> = got["fast_p"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rate"].clone())
        .collect();
    let ps: Vec<f64> = got["fast_p"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["p"].as_f64().unwrap())
        .collect();
    assert_eq!(ps, FAST_P, "{what}");
    for (g, w) in rates.iter().zip(want["fast_p"].as_array().unwrap()) {
        assert!(
            close(g, w),
            "{what} fast_p: {rates:?} want {}",
            want["fast_p"]
        );
    }
}

fn verdict_of(task: &Value) -> (Option<&str>, Option<f64>) {
    (
        task["result"]["verdict"].as_str(),
        task["result"]["speedup"].as_f64(),
    )
}

fn group(report: &Value, level: Value) -> &Value {
    report["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["level"] == level)
        .unwrap_or_else(|| panic!("no group {level} in {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_equal_the_hand_computation_over_the_batch_results() {
    let (_up, api) = start_service("report").await;
    let named = |level: u32, id: u32, file: &str| {
        json!({"problem": {"level": level, "id": id}, "kernel_code": candidate(file),
               "num_correct_trials": 2, "num_perf_trials": 5, "timeout_s": 300})
    };
    // (level, task): relu correct, wrong and a syntax error, softmax correct (level 1); the
    // MLP (level 3); the matmul by source, no registered problem (level-less).
    let mut inline = eval_body("matmul", "matmul__correct.py", 300);
    inline["num_correct_trials"] = json!(2);
    let tasks = [
        (Some(1), named(1, 19, "elementwise_relu__correct.py")),
        (Some(1), named(1, 19, "elementwise_relu__wrong.py")),
        (Some(1), named(1, 19, "elementwise_relu__syntax_error.py")),
        (Some(1), named(1, 23, "softmax__correct.py")),
        (Some(3), named(3, 1, "small_mlp__correct.py")),
        (None, inline),
    ];
    let body = json!({"tasks": tasks.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>()});
    let (status, submitted) = api.post("/evaluate/batch", body).await;
    assert_eq!(status, 202, "{submitted}");
    let batch_id = submitted["batch_id"].as_str().unwrap().to_owned();
    let task_ids: Vec<&str> = submitted["task_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();

    // Rollouts: the relu kernel by reference, a completion without a kernel, the softmax
    // kernel wrong by source (level-less).
    let fenced = |file: &str| format!("<KERNEL>\n```python\n{}\n```\n", candidate(file));
    let rollouts = json!({
        "rollouts": [
            {"id": "good", "problem": {"level": 1, "id": 19}, "completion": fenced("elementwise_relu__correct.py")},
            {"id": "none", "problem": {"level": 1, "id": 23}, "completion": "I cannot write this kernel."},
            {"id": "wrong", "reference_code": problem("softmax"), "completion": fenced("softmax__wrong.py")},
        ],
        "eval": {"num_correct_trials": 2, "num_perf_trials": 5, "timeout_s": 300},
    });
    let (status, rollout_batch) = api.post("/rollouts", rollouts).await;
    assert_eq!(status, 202, "{rollout_batch}");
    let rollout_batch_id = rollout_batch["batch_id"].as_str().unwrap().to_owned();

    // The evaluation batch, by hand from its tasks' results.
    let views = finished_tasks(&api, &batch_id).await;
    let outcome = |k: usize| verdict_of(&views[task_ids[k]]);
    assert_eq!(outcome(0).0, Some("ok"), "{}", views[task_ids[0]]);
    assert_eq!(outcome(1).0, Some("incorrect"));
    assert_eq!(outcome(2).0, Some("error"));
    let samples_of = |level: Option<u32>| -> Vec<(Option<&str>, Option<f64>)> {
        (0..tasks.len())
            .filter(|k| tasks[*k].0 == level)
            .map(outcome)
            .collect()
    };
    let (status, report) = api.get(&format!("/batches/{batch_id}/report")).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        (report["source"].as_str(), report["done"].as_bool()),
        (Some("evaluations"), Some(true))
    );
    let levels: Vec<&Value> = report["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["level"])
        .collect();
    assert_eq!(
        levels,
        [&json!(1), &json!(3), &Value::Null],
        "levels ascending, level-less last"
    );
    assert_group(
        group(&report, json!(1)),
        &by_hand(&samples_of(Some(1))),
        "level 1",
    );
    assert_group(
        group(&report, json!(3)),
        &by_hand(&samples_of(Some(3))),
        "level 3",
    );
    assert_group(
        group(&report, Value::Null),
        &by_hand(&samples_of(None)),
        "level-less",
    );
    let all: Vec<_> = (0..tasks.len()).map(outcome).collect();
    assert_group(&report["overall"], &by_hand(&all), "overall");
    assert_eq!(group(&report, json!(1))["errors"], 1);
    assert_eq!(group(&report, json!(1))["incorrect"], 1);

    // `crucible report --json` writes the same report.
    let out = log_dir("report").join("report.json");
    let cli = tokio::task::spawn_blocking({
        let (base, id, out) = (api.base.clone(), batch_id.clone(), out.clone());
        move || {
            Command::new(bin("crucible"))
                .args(["report", &id, "--url", &base, "--wait-s", "60", "--json"])
                .arg(&out)
                .output()
                .expect("crucible report runs")
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&cli.stdout);
    assert!(
        cli.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert!(
        stdout.contains("fast_1") && stdout.lines().any(|l| l.starts_with("all ")),
        "{stdout}"
    );
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(written, report);

    // The rollout batch: one sample per rollout, the one without a kernel not correct.
    let views = finished_tasks(&api, &rollout_batch_id).await;
    let (_, page) = api
        .get(&format!("/batches/{rollout_batch_id}/results?wait=30"))
        .await;
    let results: BTreeMap<&str, &Value> = page["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r))
        .collect();
    let rollout = |id: &str| -> (Option<&str>, Option<f64>) {
        match results[id]["task_id"].as_str() {
            Some(t) => verdict_of(&views[t]),
            None => (None, None),
        }
    };
    let (status, report) = api
        .get(&format!("/batches/{rollout_batch_id}/report"))
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["source"], "rollouts");
    assert_eq!(rollout("good").0, Some("ok"), "{}", results["good"]);
    let level1 = group(&report, json!(1));
    assert_group(
        level1,
        &by_hand(&[rollout("good"), rollout("none")]),
        "rollouts level 1",
    );
    assert_eq!(
        (level1["no_kernel"].as_u64(), level1["unscored"].as_u64()),
        (Some(1), Some(0))
    );
    assert_group(
        group(&report, Value::Null),
        &by_hand(&[rollout("wrong")]),
        "rollouts level-less",
    );
    assert_group(
        &report["overall"],
        &by_hand(&[rollout("good"), rollout("none"), rollout("wrong")]),
        "rollouts overall",
    );

    let (status, err) = api.get("/batches/b_nosuchbatch/report").await;
    assert_eq!(
        (status, err["code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{err}"
    );
}
