//! `DELETE /batches/{id}` in process, on the real router and the memory broker: the counts of
//! distinct tasks, a second cancel that finds everything finished, 404 for an unknown batch and
//! for another tenant's (whose tasks stay queued), and the operation in the OpenAPI document.
//! What a cancel does to a running child is tests/tests/cancel.rs's, end to end.

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use crucible_api_server::{AppState, Auth, router};
use crucible_shared::BrokerConfig;
use crucible_task_manager::MemoryBroker;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use tower::ServiceExt;

const ADMIN_TOKEN: &str = "cancel-test-admin-token-0123456789abcdef";

/// The router with authentication required (tenants by token, the admin by `ADMIN_TOKEN`).
fn app() -> Router {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let auth = Auth::from_lookup(addr, |key| match key {
        "CRUCIBLE_AUTH" => Some("required".to_owned()),
        "CRUCIBLE_ADMIN_TOKEN" => Some(ADMIN_TOKEN.to_owned()),
        _ => None,
    })
    .unwrap();
    router(AppState::new(
        Arc::new(MemoryBroker::new(BrokerConfig::default())),
        auth,
    ))
}

async fn call(
    app: &Router,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn tenant(app: &Router, name: &str) -> String {
    let (status, created) = call(
        app,
        Method::POST,
        "/admin/tenants",
        ADMIN_TOKEN,
        Some(json!({"name": name})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["token"].as_str().unwrap().to_owned()
}

fn task(tag: &str) -> Value {
    json!({"reference_code": "class Model: pass", "kernel_code": format!("class ModelNew: pass  # {tag}")})
}

/// Submits a batch of `tasks` as `token`; returns its id.
async fn batch(app: &Router, token: &str, tasks: Vec<Value>) -> String {
    let (status, answer) = call(
        app,
        Method::POST,
        "/evaluate/batch",
        token,
        Some(json!({ "tasks": tasks })),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    answer["batch_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_tenant_cancels_its_batch_and_only_its_own() {
    let app = app();
    let (alice, bob) = (tenant(&app, "alice").await, tenant(&app, "bob").await);
    // "a" twice: one task, counted once.
    let mine = batch(&app, &alice, vec![task("a"), task("b"), task("a")]).await;
    let theirs = batch(&app, &bob, vec![task("c")]).await;

    let path = format!("/batches/{mine}");
    let (status, answer) = call(&app, Method::DELETE, &path, &alice, None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer,
        json!({"batch_id": mine, "cancelled_queued": 2, "cancelled_running": 0,
               "already_finished": 0})
    );
    let (_, view) = call(&app, Method::GET, &path, &alice, None).await;
    assert_eq!(view["counts"]["cancelled"], 3, "{view}");
    assert_eq!(view["counts"]["queued"], 0, "{view}");

    // Again: not an error, everything has finished.
    let (status, again) = call(&app, Method::DELETE, &path, &alice, None).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(
        (&again["already_finished"], &again["cancelled_queued"]),
        (&json!(2), &json!(0))
    );

    // Another tenant's batch is as unknown as one that never existed, and stays queued.
    let other = format!("/batches/{theirs}");
    for path in [other.as_str(), "/batches/b_nope"] {
        let (status, answer) = call(&app, Method::DELETE, path, &alice, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {answer}");
        assert_eq!(answer["code"], "NOT_FOUND", "{answer}");
    }
    let (_, view) = call(&app, Method::GET, &other, &bob, None).await;
    assert_eq!(view["counts"]["queued"], 1, "{view}");
    // The admin may cancel anyone's.
    let (status, answer) = call(&app, Method::DELETE, &other, ADMIN_TOKEN, None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["cancelled_queued"], 1, "{answer}");
    // No token: 401, like every protected path.
    let request = Request::delete(&path).body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_contract_documents_the_batch_cancel() {
    let doc = serde_json::to_value(crucible_api_server::openapi::doc()).unwrap();
    let op = &doc["paths"]["/batches/{id}"]["delete"];
    assert_eq!(op["operationId"], "cancel_batch", "{op}");
    let ok = op["responses"]["200"].to_string();
    assert!(ok.contains("BatchCancelResponse"), "{ok}");
    for status in ["401", "404"] {
        assert!(op["responses"].get(status).is_some(), "{status}: {op}");
    }
    let schema = &doc["components"]["schemas"]["BatchCancelResponse"];
    let required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        required,
        [
            "batch_id",
            "cancelled_queued",
            "cancelled_running",
            "already_finished"
        ]
    );
    assert!(doc["components"]["schemas"].get("CancelResponse").is_some());
}
