//! Static screening through the real service (redis-server, crucible-api, a CPU
//! crucible-worker): planted exploits are `SCREENED` with their rule in `flags`; honest
//! candidates are correct with no flags.

use crucible_tests::*;
use serde_json::{Value, json};
use std::time::Duration;

fn exploit_body(file: &str) -> Value {
    let code = std::fs::read_to_string(repo_root().join("tests/exploits").join(file))
        .unwrap_or_else(|e| panic!("exploit {file}: {e}"));
    json!({
        "reference_code": problem("elementwise_relu"),
        "kernel_code": code,
        "backend": "triton",
        "num_correct_trials": 2,
        "num_perf_trials": 5,
        "timeout_s": 120,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exploits_are_screened_and_honest_candidates_are_not() {
    let logs = log_dir("screening");
    let redis = Redis::start(&logs).await;
    let env = service_env(&redis.url, "screening");
    let port = free_port();
    let _api = Proc::spawn("api", api_command(port, &env), &logs);
    let _w = Proc::spawn("worker", worker_command(&env), &logs);
    let api = Api::new(port);
    api.wait_ready().await;

    let exploits = [
        (
            "elementwise_relu__try_except_fallback.py",
            "try-except-fallback",
        ),
        (
            "elementwise_relu__module_attribute_assignment.py",
            "module-attribute-assignment",
        ),
        ("elementwise_relu__introspection.py", "introspection"),
    ];
    let mut ids = Vec::new();
    for (file, rule) in exploits {
        ids.push((file, rule, api.submit(exploit_body(file)).await));
    }
    let honest = [
        "elementwise_relu__correct.py",
        "fused_linear_relu__correct.py",
    ];
    let mut honest_ids = Vec::new();
    for file in honest {
        let problem_name = file.split("__").next().unwrap();
        honest_ids.push((file, api.submit(eval_body(problem_name, file, 180)).await));
    }

    for (file, rule, id) in &ids {
        let task = api.wait_task(id, Duration::from_secs(300)).await;
        let r = &task["result"];
        assert_eq!(task["status"], "done", "{file}: {task}");
        assert_eq!(r["error_code"], "SCREENED", "{file}: {task}");
        assert_eq!(r["correct"], false, "{file}");
        assert_eq!(r["compiled"], false, "{file}");
        let flags = r["flags"].as_array().expect("flags");
        assert!(
            flags
                .iter()
                .any(|f| f["rule"] == *rule && f["severity"] == "reject"),
            "{file}: no reject for {rule} in {flags:?}"
        );
    }
    for (file, id) in &honest_ids {
        let task = api.wait_task(id, Duration::from_secs(300)).await;
        let r = &task["result"];
        assert_eq!(r["correct"], true, "{file}: {task}");
        assert!(
            r.get("flags")
                .is_none_or(|f| f.as_array().is_some_and(Vec::is_empty)),
            "{file}: unexpected flags {task}"
        );
    }
}
