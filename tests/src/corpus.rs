//! What the attack corpora's end-to-end tests share (tests/tests/escapes.rs, the sandbox's;
//! tests/tests/measurement.rs, the measurement's): screening turned off, and the check that
//! every worker has the layers that keep a corpus from attacking the machine it runs on.

use crate::{Api, Proc, eventually, repo_root};
use serde_json::{Value, json};
use std::time::Duration;

/// The layers every worker must have before a corpus is let loose.
pub const REQUIRED_LAYERS: [&str; 6] = ["network", "pid", "mount", "user", "landlock", "seccomp"];

/// Every screening rule id, from the harness's own policy (screen.py), all turned off.
pub fn screening_off() -> Value {
    let screen = std::fs::read_to_string(repo_root().join("gpu-worker/harness/screen.py"))
        .expect("screen.py");
    let policy = screen
        .split("DEFAULT_POLICY = {")
        .nth(1)
        .and_then(|rest| rest.split('}').next())
        .expect("DEFAULT_POLICY in screen.py");
    let rules: serde_json::Map<String, Value> = policy
        .lines()
        .filter_map(|l| l.trim().strip_prefix('"')?.split_once('"'))
        .map(|(rule, _)| (rule.to_owned(), json!("off")))
        .collect();
    assert!(rules.len() >= 10, "read only {} rules", rules.len());
    Value::Object(rules)
}

/// Waits until `count` workers report their sandbox, and refuses to go on unless every
/// required layer is active on each.
pub async fn require_sandboxed_workers(api: &Api, count: usize) {
    let workers = eventually(
        "the workers' sandbox reports",
        Duration::from_secs(300),
        || async {
            let (_, v) = api.get("/workers/status").await;
            let workers = v["workers"].as_array().cloned().unwrap_or_default();
            (workers.len() >= count && workers.iter().all(|w| w["sandbox"].is_object()))
                .then_some(workers)
        },
    )
    .await;
    for w in &workers {
        let layers = w["sandbox"]["layers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for want in REQUIRED_LAYERS {
            let active = layers
                .iter()
                .any(|l| l["layer"] == want && l["state"] == "active");
            assert!(
                active,
                "worker {} lacks the {want} layer ({}): the corpus would attack this machine, refusing to run it",
                w["worker_id"], w["sandbox"]
            );
        }
    }
}

/// What a corpus's run did to the services: one line per process of them that died.
pub fn services_died(api: &mut Proc, workers: &mut [Proc]) -> Vec<String> {
    let mut died = Vec::new();
    for w in workers.iter_mut() {
        if let Ok(Some(status)) = w.child.try_wait() {
            died.push(format!("{} died ({status}):\n{}", w.name, w.log_text()));
        }
    }
    if let Ok(Some(status)) = api.child.try_wait() {
        died.push(format!("the API died ({status})"));
    }
    died
}
