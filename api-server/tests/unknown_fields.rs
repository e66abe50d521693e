//! A misspelt field is refused, never run with its default: every request body the API takes
//! answers 422 naming the unknown field. In process, on the real router and the memory broker.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use crucible_api_server::{AppState, Auth, router};
use crucible_shared::BrokerConfig;
use crucible_task_manager::MemoryBroker;
use serde_json::{Value, json};
use std::sync::Arc;
use tower::ServiceExt;

async fn post(path: &str, body: Value) -> (StatusCode, Value) {
    let state = AppState::new(
        Arc::new(MemoryBroker::new(BrokerConfig::default())),
        Auth::off(),
    );
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = router(state).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

fn task() -> Value {
    json!({"reference_code": "class Model: pass", "kernel_code": "class ModelNew: pass"})
}

/// 422 `VALIDATION`, the message naming `name` and `field` pointing at it.
fn assert_refused(answer: (StatusCode, Value), name: &str, field: &str) {
    let (status, body) = answer;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["code"], "VALIDATION", "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("unknown field `{name}`")),
        "{body}"
    );
    assert_eq!(body["field"], field, "{body}");
}

#[tokio::test]
async fn evaluate_refuses_an_unknown_field() {
    let mut body = task();
    body["num_perf_trial"] = json!(3);
    assert_refused(
        post("/evaluate", body).await,
        "num_perf_trial",
        "num_perf_trial",
    );
    let mut body = task();
    body["problem"] = json!({"level": 1, "id": 19, "lvl": 2});
    body.as_object_mut().unwrap().remove("reference_code");
    assert_refused(post("/evaluate", body).await, "lvl", "problem.lvl");
    // The same body without the typo is accepted: the refusal is the field's alone.
    assert_eq!(post("/evaluate", task()).await.0, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn batch_refuses_an_unknown_field_in_a_task_or_beside_them() {
    let mut typo = task();
    typo["timeout"] = json!(60);
    assert_refused(
        post("/evaluate/batch", json!({"tasks": [task(), typo]})).await,
        "timeout",
        "tasks[1].timeout",
    );
    assert_refused(
        post(
            "/evaluate/batch",
            json!({"tasks": [task()], "priority": "high"}),
        )
        .await,
        "priority",
        "priority",
    );
    assert_eq!(
        post("/evaluate/batch", json!({"tasks": [task()]})).await.0,
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn rollouts_refuse_an_unknown_field() {
    let rollout =
        json!({"id": "r1", "reference_code": "class Model: pass", "completion": "no kernel"});
    let mut typo = rollout.clone();
    typo["profil"] = json!("kevin");
    assert_refused(
        post("/rollouts", json!({"rollouts": [typo]})).await,
        "profil",
        "rollouts[0].profil",
    );
    assert_refused(
        post(
            "/rollouts",
            json!({"rollouts": [rollout], "eval": {"num_perf_trial": 3}}),
        )
        .await,
        "num_perf_trial",
        "eval.num_perf_trial",
    );
    assert_eq!(
        post("/rollouts", json!({"rollouts": [rollout]})).await.0,
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn timing_refuses_an_unknown_field_and_names_a_bound_it_breaks() {
    let mut body = task();
    body["timing"] = json!({"mode": "adaptive", "target": 0.01});
    assert_refused(post("/evaluate", body).await, "target", "timing.target");
    let mut body = task();
    body["timing"] = json!({"mode": "adaptive", "target_rel_error": 0.9});
    let (status, answer) = post("/evaluate", body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["field"], "timing.target_rel_error", "{answer}");
    let mut body = task();
    body["timing"] = json!({"mode": "adaptive"});
    body["num_perf_trials"] = json!(2);
    let (status, answer) = post("/evaluate/batch", json!({"tasks": [task(), body]})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["field"], "tasks[1].num_perf_trials", "{answer}");
    let mut body = task();
    body["timing"] = json!({"mode": "adaptive", "max_time_ms": 500});
    assert_eq!(post("/evaluate", body).await.0, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn admin_refuses_an_unknown_field() {
    assert_refused(
        post("/admin/tenants", json!({"name": "team-a", "max_queue": 5})).await,
        "max_queue",
        "max_queue",
    );
}
