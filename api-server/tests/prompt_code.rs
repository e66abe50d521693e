//! `POST /prompts` checks a reference sent whole as every request's code is checked
//! (`crucible_shared::check_code`): blank, over the bound or holding a NUL byte is 422. In
//! process, on the real router and the memory broker.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use crucible_api_server::{AppState, Auth, router};
use crucible_shared::BrokerConfig;
use crucible_task_manager::MemoryBroker;
use serde_json::{Value, json};
use std::sync::Arc;
use tower::ServiceExt;

async fn prompt(reference_code: &str) -> (StatusCode, Value) {
    let state = AppState::new(
        Arc::new(MemoryBroker::new(BrokerConfig::default())),
        Auth::off(),
    );
    let body = json!({ "reference_code": reference_code });
    let request = Request::post("/prompts")
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

#[tokio::test]
async fn a_reference_with_a_nul_byte_is_refused() {
    let (status, body) = prompt("class Model: pass\0").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["field"], "reference_code", "{body}");
    assert_eq!(
        body["message"], "reference_code: must not contain NUL bytes",
        "{body}"
    );
    // Blank keeps its message.
    let (status, body) = prompt("  ").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("must be 1-"),
        "{body}"
    );
}
