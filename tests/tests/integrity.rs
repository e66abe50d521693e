//! The integrity corpora through the real service (redis-server, crucible-api, a CPU
//! crucible-worker running the judge/runner harness): every planted exploit of
//! tests/exploits/manifest.json that is visible on a CPU gets its expected verdict and rule;
//! every honest candidate of tests/legit/manifest.json is `ok` with no flag at all. The
//! GPU-only entries run in scripts/gpu-integrity.sh.

use crucible_tests::*;
use serde_json::{Value, json};
use std::time::Duration;

fn manifest(dir: &str) -> Vec<Value> {
    let path = repo_root().join("tests").join(dir).join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// Entries without `devices` predate the runtime checks: static screening, visible anywhere.
fn runs_on_cpu(entry: &Value) -> bool {
    entry["devices"]
        .as_array()
        .is_none_or(|d| d.iter().any(|x| x == "cpu"))
}

fn body(dir: &str, entry: &Value) -> Value {
    let file = entry["candidate"].as_str().expect("candidate");
    let code = std::fs::read_to_string(repo_root().join("tests").join(dir).join(file))
        .unwrap_or_else(|e| panic!("{dir}/{file}: {e}"));
    json!({
        "reference_code": problem(entry["problem"].as_str().expect("problem")),
        "kernel_code": code,
        "backend": entry["backend"].as_str().unwrap_or("triton"),
        "num_correct_trials": 2,
        "num_perf_trials": 6,
        "timeout_s": 300,
        "screening": entry.get("screening").cloned().unwrap_or(json!({})),
    })
}

/// What an exploit entry expects: the verdicts allowed and the rule that must be flagged.
fn expectation(entry: &Value) -> (Vec<String>, Option<String>) {
    let expect = &entry["expect"];
    let verdicts = match (&entry["verdict_any"], &expect["verdict"]) {
        (Value::Array(any), _) => any
            .iter()
            .filter_map(|v| v.as_str())
            .map(String::from)
            .collect(),
        (_, Value::String(v)) => vec![v.clone()],
        // The screening entries predate verdicts: rejected by screening is `hack`, except a
        // missing ModelNew, which is a format error.
        _ if expect["error_code"] == "SCREENED" && entry["rule"] == "no-modelnew" => {
            vec!["error".to_owned()]
        }
        _ if expect["error_code"] == "SCREENED" => vec!["hack".to_owned()],
        _ => vec!["decoy".to_owned()],
    };
    let rule = expect["rule"]
        .as_str()
        .or(entry["rule"].as_str())
        .map(String::from);
    (verdicts, rule)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exploits_are_caught_and_honest_candidates_are_not_flagged() {
    let logs = log_dir("integrity");
    let redis = Redis::start(&logs).await;
    let env = service_env(&redis.url, "integrity");
    let port = free_port();
    let _api = Proc::spawn("api", api_command(port, &env), &logs);
    let _w = Proc::spawn("worker", worker_command(&env), &logs);
    let api = Api::new(port);
    api.wait_ready().await;

    let exploits: Vec<Value> = manifest("exploits")
        .into_iter()
        .filter(runs_on_cpu)
        .collect();
    let legit: Vec<Value> = manifest("legit").into_iter().filter(runs_on_cpu).collect();
    assert!(exploits.len() >= 15, "only {} CPU exploits", exploits.len());
    assert!(
        legit.len() >= 10,
        "only {} CPU legit candidates",
        legit.len()
    );
    let mut submitted = Vec::new();
    for entry in &exploits {
        submitted.push(("exploits", entry, api.submit(body("exploits", entry)).await));
    }
    for entry in &legit {
        submitted.push(("legit", entry, api.submit(body("legit", entry)).await));
    }

    let mut failures = Vec::new();
    for (dir, entry, id) in &submitted {
        let file = entry["candidate"].as_str().unwrap_or("?");
        let task = api.wait_task(id, Duration::from_secs(900)).await;
        let r = &task["result"];
        let verdict = r["verdict"].as_str().unwrap_or("none").to_owned();
        let flags: Vec<&Value> = r["flags"]
            .as_array()
            .map(|f| f.iter().collect())
            .unwrap_or_default();
        let rules: Vec<&str> = flags.iter().filter_map(|f| f["rule"].as_str()).collect();
        if *dir == "legit" {
            if verdict != "ok" || !flags.is_empty() || r["correct"] != true {
                failures.push(format!(
                    "legit {file}: verdict {verdict}, flags {rules:?}: {}",
                    r["error_message"]
                ));
            }
            continue;
        }
        let (allowed, rule) = expectation(entry);
        let rule_ok = rule.as_deref().is_none_or(|want| rules.contains(&want));
        // Where the entry says what the rule's detail must name (why it is a decoy).
        let detail_ok = entry["expect"]["detail_contains"]
            .as_str()
            .is_none_or(|want| {
                flags.iter().any(|f| {
                    f["rule"].as_str() == rule.as_deref()
                        && f["detail"].as_str().is_some_and(|d| d.contains(want))
                })
            });
        if !detail_ok {
            failures.push(format!(
                "exploit {file}: no {rule:?} flag whose detail names {}: {flags:?}",
                entry["expect"]["detail_contains"]
            ));
        }
        if !allowed.contains(&verdict) || !rule_ok || (verdict == "hack" && r["correct"] == true) {
            failures.push(format!(
                "exploit {file}: verdict {verdict} (want {allowed:?}), rules {rules:?} (want {rule:?}): {}",
                r["error_message"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} entries misjudged:\n{}",
        failures.len(),
        submitted.len(),
        failures.join("\n")
    );
}
