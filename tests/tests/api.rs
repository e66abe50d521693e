//! The HTTP contract against a real API process and a real redis-server: bad input never
//! crashes or wedges the server, cancel, idempotency, priorities, the queue cap, the result
//! cache and coalescing, the reference timing cache, the OpenAPI document, health and metrics.

use crucible_tests::*;
use serde_json::{Value, json};
use std::time::Duration;

struct Stack {
    api: Api,
    env: Vec<(String, String)>,
    logs: std::path::PathBuf,
    _redis: Redis,
    _api_proc: Proc,
}

async fn stack(name: &str, extra_env: &[(&str, &str)]) -> Stack {
    let logs = log_dir(name);
    let redis = Redis::start(&logs).await;
    let mut env = service_env(&redis.url, name);
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let port = free_port();
    let api_proc = Proc::spawn("api", api_command(port, &env), &logs);
    let api = Api::new(port);
    api.wait_ready().await;
    Stack {
        api,
        env,
        logs,
        _redis: redis,
        _api_proc: api_proc,
    }
}

fn minimal(field: &str, value: Value) -> Value {
    let mut body = json!({"reference_code": problem("elementwise_relu"), "kernel_code": "class ModelNew: pass"});
    body[field] = value;
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_4xx_naming_the_field_and_never_hurts_the_server() {
    let s = stack("badinput", &[]).await;
    let api = &s.api;

    let raw = |body: &'static str, content_type: &'static str| {
        let api = api.clone();
        async move {
            let resp = api
                .http
                .post(format!("{}/evaluate", api.base))
                .header("content-type", content_type)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (status, body) = raw("{not json", "application/json").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("MALFORMED_JSON")),
        "{body}"
    );
    let (status, body) = raw(r#"{"reference_code": "x"}"#, "text/plain").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (415, Some("UNSUPPORTED_MEDIA_TYPE")),
        "{body}"
    );
    let (status, body) = raw(r#"{"reference_code": "x"}"#, "application/json").await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("kernel_code"),
        "{body}"
    );

    let cases = [
        (minimal("backend", json!("opencl")), "backend"),
        (
            minimal("num_correct_trials", json!(0)),
            "num_correct_trials",
        ),
        (
            minimal("num_correct_trials", json!(21)),
            "num_correct_trials",
        ),
        (minimal("num_perf_trials", json!(1001)), "num_perf_trials"),
        (minimal("timeout_s", json!(5)), "timeout_s"),
        (minimal("timeout_s", json!(-1)), "timeout_s"),
        (minimal("atol", json!("tight")), "atol"),
        (minimal("priority", json!("urgent")), "priority"),
        (minimal("kernel_code", json!("")), "kernel_code"),
        (
            minimal("kernel_code", json!("x".repeat(256 * 1024 + 1))),
            "kernel_code",
        ),
        (minimal("idempotency_key", json!("")), "idempotency_key"),
        // A NUL (or any control character) in a key is a client's bug, refused.
        (
            minimal("idempotency_key", json!("a\u{0}b")),
            "idempotency_key",
        ),
        (
            minimal("idempotency_key", json!("line\nbreak")),
            "idempotency_key",
        ),
    ];
    for (body, field) in cases {
        let (status, answer) = api.post("/evaluate", body).await;
        assert_eq!(status, 422, "{field}: {answer}");
        assert_eq!(answer["code"], "VALIDATION", "{field}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(field),
            "{field}: {answer}"
        );
    }

    // On a connection of its own: the server answers 413 before reading the whole body and
    // closes that connection, which a pooled client would try to reuse for the next request.
    let huge = minimal("kernel_code", json!("x".repeat(5 << 20)));
    let one_off = Api {
        base: api.base.clone(),
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap(),
    };
    let (status, answer) = one_off.post("/evaluate", huge).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (413, Some("PAYLOAD_TOO_LARGE")),
        "{answer}"
    );

    let (status, answer) = api.post("/evaluate/batch", json!({"tasks": []})).await;
    assert_eq!(status, 422, "{answer}");
    let (status, answer) = api
        .post("/evaluate/batch", json!({"tasks": [minimal("priority", json!("high")), minimal("num_perf_trials", json!(0))]}))
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["field"], "tasks[1].num_perf_trials", "{answer}");

    let (status, answer) = api
        .post("/evaluate?wait=3600", minimal("priority", json!("low")))
        .await;
    assert_eq!(status, 422, "{answer}");
    for path in ["/tasks/t_nope", "/batches/b_nope", "/no/such/route"] {
        let (status, answer) = api.get(path).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (404, Some("NOT_FOUND")),
            "{path}: {answer}"
        );
    }
    let (status, answer) = api
        .call(reqwest::Method::DELETE, "/tasks/t_nope", None)
        .await;
    assert_eq!(status, 404, "{answer}");

    // Still healthy, still accepting work, and nothing bad was queued.
    let (status, _) = api.get("/health").await;
    assert_eq!(status, 200);
    let (_, queue) = api.get("/queue/status").await;
    assert_eq!(queue["submitted_total"], 0, "{queue}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_queue_cap_and_cancel_of_queued_tasks() {
    let s = stack("queuecap", &[("CRUCIBLE_QUEUE_CAP", "3")]).await;
    let api = &s.api;
    let mut keyed = eval_body("elementwise_relu", "elementwise_relu__correct.py", 60);
    keyed["idempotency_key"] = json!("rollout-17");
    let (s1, a) = api.post("/evaluate", keyed.clone()).await;
    let (s2, b) = api.post("/evaluate", keyed).await;
    assert_eq!((s1, s2), (202, 202));
    assert_eq!(a["task_id"], b["task_id"]);
    assert_eq!(b["deduplicated"], true);

    api.submit(eval_body("softmax", "softmax__correct.py", 60))
        .await;
    let third = api
        .submit(eval_body("matmul", "matmul__correct.py", 60))
        .await;
    // Joining an identical queued task adds nothing to the queue, so it is answered at the cap;
    // force_refresh asks for a new evaluation, which does not fit.
    let (status, joined) = api
        .post("/evaluate", eval_body("softmax", "softmax__correct.py", 60))
        .await;
    assert_eq!(
        (status, &joined["coalesced"]),
        (202, &json!(true)),
        "{joined}"
    );
    let mut forced = eval_body("softmax", "softmax__correct.py", 60);
    forced["force_refresh"] = json!(true);
    let (status, full) = api.post("/evaluate", forced.clone()).await;
    assert_eq!(
        (status, full["code"].as_str()),
        (429, Some("QUEUE_FULL")),
        "{full}"
    );
    let (status, _) = api
        .post("/evaluate/batch", json!({"tasks": [forced.clone()]}))
        .await;
    assert_eq!(status, 429);

    let (status, cancelled) = api
        .call(reqwest::Method::DELETE, &format!("/tasks/{third}"), None)
        .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["was"], "queued");
    let (_, view) = api.get(&format!("/tasks/{third}")).await;
    assert_eq!(view["status"], "cancelled");
    let (status, again) = api
        .call(reqwest::Method::DELETE, &format!("/tasks/{third}"), None)
        .await;
    assert_eq!(
        (status, again["code"].as_str()),
        (409, Some("CONFLICT")),
        "{again}"
    );
    // Cancelling freed a slot.
    api.submit(forced).await;
    let (_, queue) = api.get("/queue/status").await;
    assert_eq!(queue["queued_normal"], 3, "{queue}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priorities_order_claims_and_a_running_task_can_be_cancelled() {
    let s = stack("priorities", &[]).await;
    let api = &s.api;
    let mut ids = Vec::new();
    for (seed, priority) in ["low", "normal", "high"].into_iter().enumerate() {
        let mut body = eval_body("elementwise_relu", "elementwise_relu__correct.py", 120);
        body["priority"] = json!(priority);
        body["measure_performance"] = json!(false);
        // Distinct requests: identical ones would share one task.
        body["seed"] = json!(seed);
        ids.push(api.submit(body).await);
    }
    let _worker = Proc::spawn("worker", worker_command(&s.env), &s.logs);
    let mut started = Vec::new();
    for id in &ids {
        let task = api.wait_task(id, Duration::from_secs(180)).await;
        assert_eq!(task["result"]["correct"], true, "{task}");
        started.push(task["started_at"].as_str().unwrap().to_owned());
    }
    // One worker takes them one at a time: high, then normal, then low.
    assert!(
        started[2] < started[1] && started[1] < started[0],
        "{started:?}"
    );

    let hang = api
        .submit(eval_body(
            "elementwise_relu",
            "elementwise_relu__hang.py",
            120,
        ))
        .await;
    api.wait_running(&hang, Duration::from_secs(60)).await;
    let (status, cancelled) = api
        .call(reqwest::Method::DELETE, &format!("/tasks/{hang}"), None)
        .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["was"], "running");
    // The child is killed at the next lease renewal, far sooner than the 120 s deadline: the
    // worker takes the next task while the cancelled one would still be hanging.
    let next = api
        .submit(eval_body(
            "elementwise_relu",
            "elementwise_relu__correct.py",
            120,
        ))
        .await;
    let task = api.wait_task(&next, Duration::from_secs(90)).await;
    assert_eq!(task["result"]["correct"], true, "{task}");
    let (_, view) = api.get(&format!("/tasks/{hang}")).await;
    assert_eq!(view["status"], "cancelled", "{view}");
    assert!(view["result"].is_null(), "{view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_requests_share_one_evaluation_and_then_hit_the_cache() {
    let s = stack("resultcache", &[]).await;
    let api = &s.api;
    let body = eval_body("elementwise_relu", "elementwise_relu__correct.py", 120);

    // No worker yet: the second request joins the queued first one.
    let (status, first) = api.post("/evaluate", body.clone()).await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(
        (&first["coalesced"], &first["cached"]),
        (&json!(false), &json!(false))
    );
    let id = first["task_id"].as_str().unwrap().to_owned();
    let (status, joined) = api.post("/evaluate", body.clone()).await;
    assert_eq!(status, 202, "{joined}");
    assert_eq!(joined["task_id"], id.as_str(), "{joined}");
    assert_eq!(joined["coalesced"], true, "{joined}");

    let _worker = Proc::spawn("worker", worker_command(&s.env), &s.logs);
    let evaluated = api.wait_task(&id, Duration::from_secs(180)).await;
    assert_eq!(evaluated["status"], "done", "{evaluated}");
    assert_eq!(evaluated["result"]["correct"], true, "{evaluated}");
    assert_eq!(
        (&evaluated["attempts"], &evaluated["cached"]),
        (&json!(1), &json!(false)),
        "{evaluated}"
    );

    // The same body again: a new task, done at once, that never reached a worker.
    let (status, hit) = api.post("/evaluate", body.clone()).await;
    assert_eq!(status, 202, "{hit}");
    assert_eq!(
        (&hit["cached"], &hit["status"]),
        (&json!(true), &json!("done")),
        "{hit}"
    );
    let hit_id = hit["task_id"].as_str().unwrap();
    assert_ne!(hit_id, id);
    let (status, view) = api.get(&format!("/tasks/{hit_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(view["cached"], true, "{view}");
    assert_eq!(view["attempts"], 0, "{view}");
    assert!(view["worker_id"].is_null(), "{view}");
    assert_eq!(view["result"], evaluated["result"], "the same verdict");
    let (status, waited) = api.post("/evaluate?wait=5", body.clone()).await;
    assert_eq!(status, 200, "{waited}");
    assert_eq!(
        (&waited["cached"], &waited["attempts"]),
        (&json!(true), &json!(0))
    );

    // force_refresh evaluates again.
    let mut refresh = body.clone();
    refresh["force_refresh"] = json!(true);
    let (status, forced) = api.post("/evaluate", refresh).await;
    assert_eq!(status, 202, "{forced}");
    assert_eq!(
        (&forced["cached"], &forced["coalesced"]),
        (&json!(false), &json!(false))
    );
    let forced_id = forced["task_id"].as_str().unwrap();
    let again = api.wait_task(forced_id, Duration::from_secs(180)).await;
    assert_eq!(again["status"], "done", "{again}");
    assert_eq!(
        (&again["attempts"], &again["cached"]),
        (&json!(1), &json!(false)),
        "{again}"
    );
    assert_eq!(again["result"]["correct"], true, "{again}");

    let (_, queue) = api.get("/queue/status").await;
    assert_eq!(
        (
            &queue["cache_hits_total"],
            &queue["cache_misses_total"],
            &queue["coalesced_total"]
        ),
        (&json!(2), &json!(1), &json!(1)),
        "{queue}"
    );
    let metrics = api.metrics_text().await;
    assert_eq!(
        sample(
            &metrics,
            "crucible_result_cache_total",
            &[("outcome", "hit")]
        ),
        Some(2.0),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_of_one_problem_time_the_reference_once() {
    let s = stack("refcache", &[]).await;
    let api = &s.api;
    let _worker = Proc::spawn("worker", worker_command(&s.env), &s.logs);
    let body = eval_body("softmax", "softmax__correct.py", 120);
    // Distinct candidates (one comment line apart), so the result cache answers none of them.
    let sample = |n: u32, force_refresh: bool| {
        let mut b = body.clone();
        b["kernel_code"] = json!(format!(
            "{}\n# sample {n}\n",
            candidate("softmax__correct.py")
        ));
        b["force_refresh"] = json!(force_refresh);
        b
    };
    let run = |b: Value| async move {
        let id = api.submit(b).await;
        let task = api.wait_task(&id, Duration::from_secs(180)).await;
        assert_eq!(task["status"], "done", "{task}");
        assert_eq!(task["cached"], false, "{task}");
        assert_eq!(task["result"]["correct"], true, "{task}");
        assert!(
            task["result"]["ref_runtime_ms"]["median"].is_f64(),
            "{task}"
        );
        assert!(task["result"]["runtime_ms"]["median"].is_f64(), "{task}");
        task["result"].clone()
    };

    // The first task finds nothing cached (the worker knows its software from its template, so
    // this is a lookup that misses) and times the reference.
    let first = run(body.clone()).await;
    assert_eq!(first["ref_runtime_cached"], false, "{first}");
    // Another candidate of the same problem reuses that timing.
    let second = run(sample(2, false)).await;
    assert_eq!(second["ref_runtime_cached"], true, "{second}");
    assert_eq!(
        second["ref_runtime_ms"], first["ref_runtime_ms"],
        "{second}"
    );
    // force_refresh times the reference again and replaces the cached timing.
    let third = run(sample(3, true)).await;
    assert_eq!(third["ref_runtime_cached"], false, "{third}");
    assert_ne!(third["ref_runtime_ms"], first["ref_runtime_ms"], "{third}");
    let fourth = run(sample(4, false)).await;
    assert_eq!(fourth["ref_runtime_cached"], true, "{fourth}");
    assert_eq!(
        fourth["ref_runtime_ms"], third["ref_runtime_ms"],
        "{fourth}"
    );

    // The statistics say how many calls were timed: every one in fixed timing.
    let trials = &body["num_perf_trials"];
    assert_eq!(&first["runtime_ms"]["trials"], trials, "{first}");
    assert_eq!(&first["ref_runtime_ms"]["trials"], trials, "{first}");
    let ci = first["runtime_ms"]["median_ci"].as_array().unwrap();
    assert!(
        ci[0].as_f64() <= first["runtime_ms"]["median"].as_f64(),
        "{first}"
    );
    assert!(
        first["runtime_ms"]["median"].as_f64() <= ci[1].as_f64(),
        "{first}"
    );

    // An adaptive timing is never served a fixed one's reference timing (a miss that times the
    // reference again), and then serves adaptive requests with the same target and budget.
    let adaptive = |n: u32| {
        let mut b = sample(n, false);
        b["timing"] = json!({"mode": "adaptive", "target_rel_error": 0.05, "max_time_ms": 100});
        b
    };
    let fifth = run(adaptive(5)).await;
    assert_eq!(fifth["ref_runtime_cached"], false, "{fifth}");
    let made = fifth["runtime_ms"]["trials"].as_u64().unwrap();
    assert!((3..=trials.as_u64().unwrap()).contains(&made), "{fifth}");
    let sixth = run(adaptive(6)).await;
    assert_eq!(sixth["ref_runtime_cached"], true, "{sixth}");
    assert_eq!(sixth["ref_runtime_ms"], fifth["ref_runtime_ms"], "{sixth}");

    let (_, queue) = api.get("/queue/status").await;
    assert_eq!(
        (
            &queue["ref_cache_hits_total"],
            &queue["ref_cache_misses_total"]
        ),
        (&json!(3), &json!(2)),
        "{queue}"
    );
    let metrics = api.metrics_text().await;
    let lookups = |outcome| {
        crucible_tests::sample(
            &metrics,
            "crucible_reference_cache_total",
            &[("outcome", outcome)],
        )
    };
    assert_eq!(
        (lookups("hit"), lookups("miss")),
        (Some(3.0), Some(2.0)),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_docs_health_and_metrics_are_real() {
    let s = stack("docs", &[("CRUCIBLE_WORKER_LIVENESS_MS", "2000")]).await;
    let api = &s.api;
    let (status, doc) = api.get("/openapi.json").await;
    assert_eq!(status, 200);
    for path in [
        "/evaluate",
        "/evaluate/batch",
        "/tasks/{id}",
        "/batches/{id}",
        "/workers/status",
        "/queue/status",
        "/health",
        "/metrics",
        "/rollouts",
        "/batches/{id}/results",
        "/problems",
        "/problems/{level}/{id}",
        "/status",
        "/status.json",
    ] {
        assert!(doc["paths"].get(path).is_some(), "openapi lacks {path}");
    }
    let schemas = &doc["components"]["schemas"];
    for (schema, field) in [
        ("EvaluateRequest", "force_refresh"),
        ("SubmitResponse", "coalesced"),
        ("SubmitResponse", "cached"),
        ("TaskView", "cached"),
        ("QueueStatus", "cache_hits_total"),
        ("QueueStatus", "ref_cache_hits_total"),
        ("QueueStatus", "ref_cache_misses_total"),
        ("EvalResult", "ref_runtime_cached"),
        ("EvalResult", "problem_hash"),
        ("EvaluateRequest", "problem"),
        ("EvaluateRequest", "timing"),
        ("TimingRequest", "target_rel_error"),
        ("RuntimeStats", "median_ci"),
        ("Rollout", "completion"),
        ("RolloutResult", "feedback"),
        ("RolloutResultsPage", "cursor"),
        ("StatusPage", "activity"),
        ("ActivityWindow", "per_minute"),
        ("RecentFailure", "error_code"),
    ] {
        assert!(
            schemas[schema]["properties"].get(field).is_some(),
            "openapi {schema} lacks {field}"
        );
    }
    let docs = api
        .http
        .get(format!("{}/docs/", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(docs.status().as_u16(), 200);
    assert!(
        docs.text()
            .await
            .unwrap()
            .to_lowercase()
            .contains("swagger")
    );

    let (status, health) = api.get("/health").await;
    assert_eq!(
        (status, health["status"].as_str()),
        (200, Some("degraded")),
        "{health}"
    );
    // The standalone worker serves its own metrics on the port it is given.
    let metrics_port = free_port();
    let mut worker_env = s.env.clone();
    worker_env.push((
        "CRUCIBLE_WORKER_METRICS_ADDR".to_owned(),
        format!("127.0.0.1:{metrics_port}"),
    ));
    let mut worker = Proc::spawn("worker", worker_command(&worker_env), &s.logs);
    eventually(
        "health to see the worker",
        Duration::from_secs(30),
        || async {
            let (_, h) = api.get("/health").await;
            (h["status"] == "ok" && h["workers_alive"] == 1).then_some(())
        },
    )
    .await;
    let metrics = api.metrics_text().await;
    for name in [
        "crucible_queue_depth",
        "crucible_workers",
        "crucible_http_requests_total",
    ] {
        assert!(metrics.contains(name), "metrics lack {name}");
    }
    assert_eq!(
        sample(&metrics, "crucible_broker_up", &[]),
        Some(1.0),
        "{metrics}"
    );
    let replica = format!(":{}", api.base.rsplit(':').next().unwrap());
    assert!(
        metrics.contains(&format!("{replica}\"}}")),
        "cluster figures carry the replica's host:port\n{metrics}"
    );
    assert_eq!(
        sample(&metrics, "crucible_workers", &[("state", "idle")]),
        Some(1.0),
        "{metrics}"
    );
    // A verdict decided at once (the candidate does not parse): the worker counts it, and
    // its queue wait, on its own port; the API's /metrics has none of the worker's.
    let task = api
        .evaluate_and_wait(
            json!({"reference_code": problem("elementwise_relu"), "kernel_code": "def broken(:\n"}),
            Duration::from_secs(120),
        )
        .await;
    assert_eq!(task["result"]["error_code"], "SYNTAX", "{task}");
    let worker_url = format!("http://127.0.0.1:{metrics_port}/metrics");
    let worker_metrics = eventually("the worker's metrics", Duration::from_secs(10), || async {
        let text = scrape(&api.http, &worker_url).await?;
        sample(&text, "crucible_queue_wait_seconds_count", &[])
            .is_some_and(|n| n >= 1.0)
            .then_some(text)
    })
    .await;
    let worker_sample = |name, labels: &[(&str, &str)]| sample(&worker_metrics, name, labels);
    assert_eq!(
        worker_sample(
            "crucible_evaluations_total",
            &[
                ("verdict", "error"),
                ("error_code", "SYNTAX"),
                ("backend", "triton")
            ]
        ),
        Some(1.0),
        "{worker_metrics}"
    );
    assert_eq!(
        worker_sample("crucible_worker_info", &[("gpu", "cpu")]),
        Some(1.0)
    );
    assert_eq!(
        worker_sample("crucible_worker_healthy", &[("gpu", "cpu")]),
        Some(1.0)
    );
    assert_eq!(
        worker_sample("crucible_build_info", &[("component", "worker")]),
        Some(1.0),
        "{worker_metrics}"
    );
    assert_eq!(
        worker_sample(
            "crucible_evaluation_seconds_count",
            &[("backend", "triton")]
        ),
        Some(1.0)
    );
    assert!(metric_types(&worker_metrics).contains(&(
        "crucible_evaluations_total".to_owned(),
        "counter".to_owned()
    )));
    assert!(!metrics.contains("crucible_worker_info"), "{metrics}");
    assert_eq!(
        sample(
            &api.metrics_text().await,
            "crucible_build_info",
            &[("component", "api")]
        ),
        Some(1.0)
    );
    // A clean worker shutdown deregisters it.
    assert!(
        worker.terminate(Duration::from_secs(20)),
        "worker did not stop on SIGTERM"
    );
    eventually(
        "the worker to deregister",
        Duration::from_secs(10),
        || async {
            let (_, w) = api.get("/workers/status").await;
            (w["total"] == 0).then_some(())
        },
    )
    .await;
}
