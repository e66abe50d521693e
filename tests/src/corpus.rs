//! What the attack corpora's end-to-end tests share (tests/tests/escapes.rs, the sandbox's;
//! tests/tests/measurement.rs, the measurement's; tests/tests/node_safety.rs, the node's): a
//! corpus read from its manifest, screening turned off, and the check that every worker has the
//! layers that keep a corpus from attacking the machine it runs on.

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

/// Waits until `count` workers report their sandbox; their `/workers/status` entries.
pub async fn sandbox_reports(api: &Api, count: usize) -> Vec<Value> {
    eventually(
        "the workers' sandbox reports",
        Duration::from_secs(300),
        || async {
            let (_, v) = api.get("/workers/status").await;
            let workers = v["workers"].as_array().cloned().unwrap_or_default();
            (workers.len() >= count && workers.iter().all(|w| w["sandbox"].is_object()))
                .then_some(workers)
        },
    )
    .await
}

/// The layers of `wanted` that `worker` (a `/workers/status` entry) does not have in force.
pub fn missing_layers<'a>(worker: &Value, wanted: &[&'a str]) -> Vec<&'a str> {
    let layers = worker["sandbox"]["layers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    wanted
        .iter()
        .copied()
        .filter(|want| {
            !layers
                .iter()
                .any(|l| l["layer"] == *want && l["state"] == "active")
        })
        .collect()
}

/// Waits until `count` workers report their sandbox, and refuses to go on unless every
/// required layer is active on each.
pub async fn require_sandboxed_workers(api: &Api, count: usize) {
    for w in &sandbox_reports(api, count).await {
        let missing = missing_layers(w, &REQUIRED_LAYERS);
        assert!(
            missing.is_empty(),
            "worker {} lacks the {missing:?} layers ({}): the corpus would attack this machine, refusing to run it",
            w["worker_id"],
            w["sandbox"]
        );
    }
}

/// One entry of an attack corpus (`tests/<corpus>/manifest.json`): its manifest entry and its
/// candidate, the entry's file followed by the corpus's `kernel.py` that runs it.
pub struct CorpusEntry {
    /// The manifest's entry (`name`, `file`, and what the corpus's test reads of it).
    pub entry: Value,
    /// The candidate's source.
    pub source: String,
}

/// The entries of `tests/<corpus>/manifest.json`, each with its candidate.
pub fn corpus_entries(corpus: &str) -> Vec<CorpusEntry> {
    let dir = repo_root().join("tests").join(corpus);
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("corpus manifest");
    let entries: Vec<Value> = serde_json::from_str(&text).expect("corpus manifest JSON");
    let kernel = std::fs::read_to_string(dir.join("kernel.py")).expect("corpus kernel");
    entries
        .into_iter()
        .map(|entry| {
            let file = entry["file"].as_str().expect("file");
            let body = std::fs::read_to_string(dir.join(file)).expect("corpus file");
            // The entry first (it defines NAME and what the kernel runs), then the kernel.
            CorpusEntry {
                source: format!("{body}\n\n{kernel}"),
                entry,
            }
        })
        .collect()
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
