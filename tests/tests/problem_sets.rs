//! Problem sets end to end: two `crucible-api` replicas on one redis-server, serving the same
//! registry (a JSONL file written here), answer every split and every step of two epochs
//! identically; another seed gives another split; an epoch's steps cover its split once; bad
//! selections are refused with a 422 naming the field.

use crucible_tests::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// 20 level-1 problems (ids 1-20) and 3 of level 2, each with its own source.
fn write_registry(dir: &std::path::Path) -> std::path::PathBuf {
    let mut lines = String::new();
    for (level, n) in [(1, 20), (2, 3)] {
        for id in 1..=n {
            let line = json!({
                "level": level, "id": id, "name": format!("P{level}_{id}"),
                "reference_code": format!("class Model:  # level {level} problem {id}\n    pass\n"),
            });
            lines += &format!("{line}\n");
        }
    }
    let path = dir.join("problems.jsonl");
    std::fs::write(&path, lines).unwrap();
    path
}

fn ids(list: &Value) -> Vec<u64> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_split_and_batch_alike() {
    let logs = log_dir("problem-sets");
    let redis = Redis::start(&logs).await;
    let mut env = service_env(&redis.url, "problem-sets");
    env.push((
        "CRUCIBLE_PROBLEMS".into(),
        write_registry(&logs).display().to_string(),
    ));
    let (port_a, port_b) = (free_port(), free_port());
    let _a = Proc::spawn("api-a", api_command(port_a, &env), &logs);
    let _b = Proc::spawn("api-b", api_command(port_b, &env), &logs);
    let (a, b) = (Api::new(port_a), Api::new(port_b));
    a.wait_ready().await;
    b.wait_ready().await;

    let query = "/problem-sets?level=1&test_fraction=0.25&seed=3";
    let (status, set) = a.get(query).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(b.get(query).await, (200, set.clone()), "replicas agree");
    let (train, test) = (ids(&set["train"]), ids(&set["test"]));
    assert_eq!(
        (train.len(), test.len()),
        (15, 5),
        "round(20 × 0.25) held out"
    );
    let all: BTreeSet<u64> = train.iter().chain(&test).copied().collect();
    assert_eq!(
        all,
        (1..=20).collect(),
        "every problem in exactly one split"
    );
    assert_eq!(set["selection"]["start"], 1);
    assert_eq!(set["selection"]["end"], 20);
    assert_eq!(set["selection"]["backend"], "triton");
    let (_, other) = a
        .get("/problem-sets?level=1&test_fraction=0.25&seed=4")
        .await;
    assert_ne!(ids(&other["test"]), test, "another seed, another split");
    let (_, ranged) = b
        .get("/problem-sets?level=1&start=5&end=14&test_fraction=0.25&seed=3")
        .await;
    assert_eq!(ids(&ranged["train"]).len() + ids(&ranged["test"]).len(), 10);

    // Two epochs of batches of 4 from the train split, each step asked of both replicas.
    let mut orders = Vec::new();
    for epoch in 0..2 {
        let mut order = Vec::new();
        for step in 0..4 {
            let body = json!({
                "set": {"level": 1, "test_fraction": 0.25, "seed": 3},
                "epoch": epoch, "step": step, "batch_size": 4, "group_size": 2,
            });
            let (status, batch) = a.post("/problem-sets/batches", body.clone()).await;
            assert_eq!(status, 200, "{batch}");
            assert_eq!(
                b.post("/problem-sets/batches", body).await,
                (200, batch.clone())
            );
            assert_eq!(batch["steps_per_epoch"], 4, "ceil(15 / 4)");
            assert_eq!(batch["last_step"], step == 3);
            assert!(
                batch["problems"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|p| p["group_size"] == 2)
            );
            order.extend(ids(&batch["problems"]));
        }
        let covered: BTreeSet<u64> = order.iter().copied().collect();
        assert_eq!(order.len(), 15, "each train problem once per epoch");
        assert_eq!(covered, train.iter().copied().collect());
        orders.push(order);
    }
    assert_ne!(orders[0], orders[1], "each epoch has its own shuffle");

    // Refusals name the field.
    for (path, field) in [
        ("/problem-sets?level=7", "level"),
        ("/problem-sets?start=9&end=3", "start"),
        ("/problem-sets?start=50&end=60", "start"),
        ("/problem-sets?test_fraction=1", "test_fraction"),
        ("/problem-sets?backend=rust", "backend"),
    ] {
        let (status, err) = a.get(path).await;
        assert_eq!(
            (status, err["field"].as_str()),
            (422, Some(field)),
            "{path}: {err}"
        );
    }
    let past = json!({"set": {"test_fraction": 0.25, "seed": 3}, "epoch": 0, "step": 4});
    let (status, err) = b.post("/problem-sets/batches", past).await;
    assert_eq!(
        (status, err["field"].as_str()),
        (422, Some("step")),
        "{err}"
    );
    let typo = json!({"set": {"levle": 1}, "epoch": 0, "step": 0});
    let (status, err) = b.post("/problem-sets/batches", typo).await;
    assert_eq!(
        (status, err["field"].as_str()),
        (422, Some("set.levle")),
        "{err}"
    );
    let (status, err) = b
        .post(
            "/problem-sets/batches",
            json!({"set": {"level": 2}, "epoch": 0, "step": 0, "batch_size": 0}),
        )
        .await;
    assert_eq!(
        (status, err["field"].as_str()),
        (422, Some("batch_size")),
        "{err}"
    );
}
