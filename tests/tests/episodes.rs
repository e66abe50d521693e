//! Episodes end to end: two `crucible-api` replicas on one real redis-server and a CPU
//! `crucible-worker`. A 3-turn episode with scripted completions (wrong → compile error →
//! correct) posted alternately to the two replicas, whose rewards, feedback and returns equal
//! values computed by hand; a turn posted twice is the same turn with one task, another
//! completion for a taken turn is 409, and so is a turn after the end; a group of episodes,
//! and two replicas racing for one turn with different completions (one wins).

use crucible_tests::*;
use serde_json::{Value, json};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(300);

/// `completion` in the asked format: `<KERNEL>` and a fenced block.
fn tagged(code: &str) -> String {
    format!("I refined the kernel.\n<KERNEL>\n```python\n{code}\n```\n")
}

/// Kernel_rl's weights with the length tie-breaker off, so each reward is
/// `0.1·format + 0.2·compiled + 1.0·trials_passed/trials_total` (no CPU timing in it).
fn episode_body(extra: Value) -> Value {
    let mut body = json!({
        "reference_code": problem("softmax"),
        "profile": "kernel_rl",
        "weights": {"length": 0.0},
        "backend": "triton",
        "eval": {"num_correct_trials": 2, "measure_performance": false, "timeout_s": 120},
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// Posts a turn and reads it (from `reader`, long-polling) until it is no longer pending.
async fn turn(poster: &Api, reader: &Api, episode: &str, body: Value) -> Value {
    let (status, view) = poster
        .post(&format!("/episodes/{episode}/turns?wait=30"), body)
        .await;
    assert!(status == 200 || status == 202, "{status}: {view}");
    let t = view["turn"].as_u64().unwrap();
    eventually(&format!("turn {t} of {episode}"), PATIENCE, || async {
        let (status, v) = reader
            .get(&format!("/episodes/{episode}/turns/{t}?wait=10"))
            .await;
        (status == 200 && v["status"] != "pending").then_some(v)
    })
    .await
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

struct Stack {
    a: Api,
    b: Api,
    _procs: Vec<Proc>,
    _redis: Redis,
}

async fn stack(name: &str) -> Stack {
    let logs = log_dir(name);
    let redis = Redis::start(&logs).await;
    let env = service_env(&redis.url, name);
    let (pa, pb) = (free_port(), free_port());
    let procs = vec![
        Proc::spawn("api-a", api_command(pa, &env), &logs),
        Proc::spawn("api-b", api_command(pb, &env), &logs),
        Proc::spawn("worker", worker_command(&env), &logs),
    ];
    let (a, b) = (Api::new(pa), Api::new(pb));
    a.wait_ready().await;
    b.wait_ready().await;
    Stack {
        a,
        b,
        _procs: procs,
        _redis: redis,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_turn_episode_scores_as_computed_by_hand_across_two_replicas() {
    let s = stack("episodes").await;
    let (a, b) = (&s.a, &s.b);

    let (status, started) = a.post("/episodes", episode_body(json!({}))).await;
    assert_eq!(status, 201, "{started}");
    let id = started["episode_id"].as_str().unwrap().to_owned();
    assert_eq!(started["episode_ids"], json!([id]));
    assert_eq!(
        (started["max_turns"].as_u64(), started["gamma"].as_f64()),
        (Some(4), Some(0.4))
    );
    let first = started["prompt"]["text"].as_str().unwrap().to_owned();
    assert!(
        first.contains("class Model(") && first.contains("<KERNEL>"),
        "{first}"
    );

    // Turn 0 (replica A): a wrong kernel. It compiles and fails the trials.
    let wrong = tagged(&candidate("softmax__wrong.py"));
    let t0 = turn(a, b, &id, json!({"completion": wrong})).await;
    assert_eq!(t0["status"], "scored", "{t0}");
    let r0 = &t0["rollout"]["result"];
    assert_eq!(
        (r0["verdict"].as_str(), r0["compiled"].as_bool()),
        (Some("incorrect"), Some(true))
    );
    let (passed, total) = (
        r0["trials_passed"].as_u64().unwrap(),
        r0["trials_total"].as_u64().unwrap(),
    );
    assert_eq!(total, 2);
    assert!(passed < total);
    let s0 = 0.1 + 0.2 + passed as f64 / total as f64;
    assert!(close(t0["reward"].as_f64().unwrap(), s0), "{t0}");
    let f0 = t0["feedback"].as_str().unwrap();
    assert!(
        f0.starts_with(&format!(
            "Status: correctness error.\nCompiled: yes. Trials passed: {passed}/{total}."
        )),
        "{f0}"
    );
    assert_eq!(t0["done"], false);
    assert!(t0.get("returns").is_none());
    let next = t0["next_prompt"]["text"].as_str().unwrap();
    assert!(
        next.starts_with(first.trim_end()),
        "the next prompt starts with the first"
    );
    assert!(next.contains(candidate("softmax__wrong.py").trim_end()) && next.contains(f0));

    // Posted again (to the other replica): the same turn, the same one task.
    let (status, again) = b
        .post(
            &format!("/episodes/{id}/turns"),
            json!({"completion": wrong, "turn": 0}),
        )
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["batch_id"], t0["batch_id"]);
    assert_eq!(again["rollout"]["task_id"], t0["rollout"]["task_id"]);
    assert_eq!(again["reward"], t0["reward"]);
    let (status, again) = a
        .post(
            &format!("/episodes/{id}/turns"),
            json!({"completion": wrong}),
        )
        .await;
    assert_eq!(
        (status, again["turn"].as_u64()),
        (200, Some(0)),
        "a repost of the last turn"
    );
    let (_, batch) = a
        .get(&format!("/batches/{}", t0["batch_id"].as_str().unwrap()))
        .await;
    assert_eq!(batch["total"], 1, "{batch}");
    // Another completion for the taken turn, or a turn that is not next: 409.
    let (status, err) = b
        .post(
            &format!("/episodes/{id}/turns"),
            json!({"completion": "other", "turn": 0}),
        )
        .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (409, Some("CONFLICT")),
        "{err}"
    );
    let (status, _) = b
        .post(
            &format!("/episodes/{id}/turns"),
            json!({"completion": "x", "turn": 2}),
        )
        .await;
    assert_eq!(status, 409);

    // Turn 1 (replica B): a kernel that does not compile.
    let broken = tagged(
        "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x:\n        return x\n",
    );
    let t1 = turn(b, a, &id, json!({"completion": broken})).await;
    assert_eq!(t1["status"], "scored", "{t1}");
    assert_eq!(t1["rollout"]["result"]["compiled"], false, "{t1}");
    assert!(close(t1["reward"].as_f64().unwrap(), 0.1), "{t1}");
    let f1 = t1["feedback"].as_str().unwrap();
    assert!(
        f1.starts_with("Status: compilation error.\nCompiled: no. Trials passed: 0/"),
        "{f1}"
    );
    assert!(t1["next_prompt"]["text"].as_str().unwrap().contains(f1));

    // Turn 2 (replica A): the correct kernel ends the episode early, with the returns.
    let t2 = turn(
        a,
        b,
        &id,
        json!({"completion": tagged(&candidate("softmax__correct.py"))}),
    )
    .await;
    assert_eq!(t2["rollout"]["result"]["verdict"], "ok", "{t2}");
    assert!(close(t2["reward"].as_f64().unwrap(), 1.3), "{t2}");
    assert!(
        t2["feedback"]
            .as_str()
            .unwrap()
            .starts_with("Status: correct.\nCompiled: yes. Trials passed: 2/2.")
    );
    assert_eq!(t2["done"], true);
    assert!(t2.get("next_prompt").is_none());
    // R_2 = 1.3, R_1 = 0.1 + 0.4·1.3, R_0 = s_0 + 0.4·R_1.
    let want = [s0 + 0.4 * (0.1 + 0.4 * 1.3), 0.1 + 0.4 * 1.3, 1.3];
    let returns: Vec<f64> = t2["returns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(returns.len(), 3);
    for (got, want) in returns.iter().zip(want) {
        assert!(close(*got, want), "{returns:?} vs {want}");
    }

    // Done: no turn follows; the episode reads the same from either replica.
    let (status, err) = b
        .post(
            &format!("/episodes/{id}/turns"),
            json!({"completion": "more"}),
        )
        .await;
    assert_eq!(status, 409, "{err}");
    for api in [a, b] {
        let (status, ep) = api.get(&format!("/episodes/{id}")).await;
        assert_eq!(status, 200);
        assert_eq!(ep["done"], true);
        assert_eq!(ep["turns"].as_array().unwrap().len(), 3);
        assert_eq!(ep["returns"], t2["returns"]);
    }
    let (status, _) = a.get("/episodes/e_unknown").await;
    assert_eq!(status, 404);
    let (status, _) = a.get(&format!("/episodes/{id}/turns/3")).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_starts_in_one_call_and_racing_replicas_take_a_turn_once() {
    let s = stack("episode-group").await;
    let (a, b) = (&s.a, &s.b);
    let (status, group) = a
        .post(
            "/episodes",
            episode_body(json!({"group_size": 3, "max_turns": 2})),
        )
        .await;
    assert_eq!(status, 201, "{group}");
    let ids: Vec<String> = group["episode_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(group["group_id"].as_str().unwrap().starts_with("g_"));
    for id in &ids {
        let (status, ep) = b.get(&format!("/episodes/{id}")).await;
        assert_eq!(status, 200);
        assert_eq!(ep["group_id"], group["group_id"]);
        assert_eq!(ep["prompt"], group["prompt"]);
    }

    // A completion without a kernel scores 0 at once; the next prompt says so.
    let t = turn(a, a, &ids[0], json!({"completion": "I am not sure."})).await;
    assert_eq!(t["status"], "scored");
    assert!(close(t["reward"].as_f64().unwrap(), 0.0));
    assert!(
        t["feedback"]
            .as_str()
            .unwrap()
            .starts_with("Status: format error.")
    );
    assert!(
        t["next_prompt"]["text"]
            .as_str()
            .unwrap()
            .contains("no kernel could be read")
    );
    // The last turn (max_turns 2) ends it whatever its score.
    let last = turn(b, b, &ids[0], json!({"completion": "still unsure"})).await;
    assert_eq!(last["done"], true);
    assert_eq!(last["returns"], json!([0.0, 0.0]));

    // Two replicas race for turn 0 of one episode with different completions: one takes it,
    // the other gets 409, and reads agree with the winner.
    let racer = |api: &Api, n: u32| {
        let api = api.clone();
        let path = format!("/episodes/{}/turns", ids[1]);
        let body = json!({"completion": tagged(&format!("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x:  # {n}\n"))});
        async move { api.post(&path, body).await }
    };
    let ((sa, va), (sb, vb)) = tokio::join!(racer(a, 1), racer(b, 2));
    let mut statuses = [sa, sb];
    statuses.sort();
    assert!(
        statuses[0] == 200 || statuses[0] == 202,
        "{sa} {va} / {sb} {vb}"
    );
    assert_eq!(statuses[1], 409, "{sa} {va} / {sb} {vb}");
    let winner = if sa == 409 { vb } else { va };
    let (_, read) = b.get(&format!("/episodes/{}/turns/0", ids[1])).await;
    assert_eq!(read["batch_id"], winner["batch_id"]);
}
