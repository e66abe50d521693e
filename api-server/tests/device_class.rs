//! Device classes at the API: a class no live worker has is refused at submission (422
//! `DEVICE_CLASS_UNAVAILABLE`, naming the classes there are) and nothing is queued; a batch's
//! groups without a class are placed whole on one live class; `/queue/status` counts classes
//! and flags the unservable. In process, on the real router and the memory broker, with
//! workers registered through the broker as real ones do.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use chrono::Utc;
use crucible_api_server::{AppState, Auth, router};
use crucible_shared::{
    BrokerConfig, DeviceClass, DeviceInfo, DeviceKind, WorkerId, WorkerInfo, WorkerState,
};
use crucible_task_manager::{Broker, MemoryBroker};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tower::ServiceExt;

struct Api {
    state: AppState,
}

impl Api {
    /// An API whose registry lists `workers` (name of the device's class, count) as idle.
    async fn with_workers(workers: &[(&str, usize)]) -> Self {
        let broker: Arc<dyn Broker> = Arc::new(MemoryBroker::new(BrokerConfig::default()));
        let api = Self {
            state: AppState::new(broker, Auth::off()),
        };
        for (class, n) in workers {
            for _ in 0..*n {
                api.register(class).await;
            }
        }
        api
    }

    async fn register(&self, class: &str) -> WorkerId {
        let id = WorkerId::random();
        let kind = if class == "cpu" {
            DeviceKind::Cpu
        } else {
            DeviceKind::Cuda
        };
        let info = WorkerInfo {
            worker_id: id.clone(),
            node: "node-a".to_owned(),
            device: DeviceInfo {
                kind,
                name: format!("a {class}"),
                class: Some(DeviceClass::parse(class).unwrap()),
            },
            device_index: None,
            state: WorkerState::Idle,
            current_task: None,
            tasks_done: 0,
            started_at: Utc::now(),
            last_heartbeat: Utc::now(),
            sandbox: None,
        };
        self.state.broker.worker_heartbeat(&info).await.unwrap();
        id
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let response = router(self.state.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 22)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> Value {
        let (status, body) = self.call(Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    async fn queued(&self) -> u64 {
        self.state.broker.queue_status().await.unwrap().queued()
    }
}

fn task(problem: &str, sample: usize) -> Value {
    json!({
        "reference_code": format!("class Model: pass  # {problem}"),
        "kernel_code": format!("class ModelNew: pass  # {sample}"),
    })
}

fn on(class: &str) -> Value {
    let mut t = task("p", 0);
    t["device_class"] = json!(class);
    t
}

/// 422 `DEVICE_CLASS_UNAVAILABLE` naming `field`.
fn assert_unavailable(answer: &(StatusCode, Value), field: &str) {
    let (status, body) = answer;
    assert_eq!(*status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["code"], "DEVICE_CLASS_UNAVAILABLE", "{body}");
    assert_eq!(body["field"], field, "{body}");
}

#[tokio::test]
async fn a_class_without_a_live_worker_is_refused_naming_the_live_ones() {
    let api = Api::with_workers(&[("cpu", 1)]).await;
    let answer = api.post("/evaluate", on("h100")).await;
    assert_unavailable(&answer, "device_class");
    assert_eq!(
        answer.1["message"],
        "device_class: no live worker has device class h100; classes with workers: cpu (1)"
    );
    assert_eq!(api.queued().await, 0, "nothing was queued");

    let (status, body) = api.post("/evaluate", on("cpu")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let view = api
        .get(&format!("/tasks/{}", body["task_id"].as_str().unwrap()))
        .await;
    assert_eq!(view["device_class"], "cpu", "{view}");
    // Without a class, a single task may run anywhere and says nothing of a class.
    let (status, body) = api.post("/evaluate", task("p", 1)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let view = api
        .get(&format!("/tasks/{}", body["task_id"].as_str().unwrap()))
        .await;
    assert!(view.get("device_class").is_none(), "{view}");
}

#[tokio::test]
async fn a_malformed_class_is_a_validation_error() {
    let api = Api::with_workers(&[("cpu", 1)]).await;
    for bad in ["H100", "any", "h100:x", ""] {
        let (status, body) = api.post("/evaluate", on(bad)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad:?}: {body}");
        assert_eq!(body["code"], "VALIDATION", "{body}");
        assert_eq!(body["field"], "device_class", "{body}");
    }
}

#[tokio::test]
async fn a_worker_that_stopped_does_not_count() {
    let api = Api::with_workers(&[]).await;
    let id = api.register("h100").await;
    assert_eq!(
        api.post("/evaluate", on("h100")).await.0,
        StatusCode::ACCEPTED
    );
    api.state.broker.deregister_worker(&id).await.unwrap();
    let answer = api.post("/evaluate", on("h100")).await;
    assert_unavailable(&answer, "device_class");
    assert!(
        answer.1["message"]
            .as_str()
            .unwrap()
            .ends_with("no worker is up at all"),
        "{}",
        answer.1
    );
    // The task queued while the worker was there stays, shown as unservable.
    let status = api.get("/queue/status").await;
    let classes = status["classes"].as_array().unwrap();
    let h100 = classes
        .iter()
        .find(|r| r["device_class"] == "h100")
        .expect("an h100 row");
    assert_eq!(
        (&h100["queued"], &h100["workers"], &h100["unservable"]),
        (&json!(1), &json!(0), &json!(true)),
        "{status}"
    );
}

#[tokio::test]
async fn a_batch_is_refused_whole_naming_the_task() {
    let api = Api::with_workers(&[("cpu", 1)]).await;
    let answer = api
        .post(
            "/evaluate/batch",
            json!({"tasks": [on("cpu"), on("a100"), task("p", 2)]}),
        )
        .await;
    assert_unavailable(&answer, "tasks[1].device_class");
    assert_eq!(api.queued().await, 0);
}

/// Each task's `device_class` in a batch, by the problem it evaluates.
async fn classes_by_problem(api: &Api, batch_id: &str) -> BTreeMap<String, BTreeSet<String>> {
    let batch = api.get(&format!("/batches/{batch_id}?include=tasks")).await;
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for view in batch["tasks"].as_array().unwrap() {
        let id = view["task_id"].as_str().unwrap();
        let spec = api
            .state
            .broker
            .get_spec(&crucible_shared::TaskId::from(id))
            .await
            .unwrap()
            .unwrap();
        let class = view["device_class"].as_str().unwrap_or("none").to_owned();
        out.entry(spec.request.reference_code)
            .or_default()
            .insert(class);
    }
    out
}

#[tokio::test]
async fn a_batch_places_each_group_whole_on_one_gpu_class() {
    let api = Api::with_workers(&[("h100", 2), ("a100", 1), ("cpu", 2)]).await;
    let tasks: Vec<Value> = (0..4)
        .flat_map(|p| (0..8).map(move |s| task(&format!("p{p}"), s)))
        .collect();
    let (status, body) = api.post("/evaluate/batch", json!({"tasks": tasks})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let placed = classes_by_problem(&api, body["batch_id"].as_str().unwrap()).await;
    assert_eq!(placed.len(), 4);
    for (problem, classes) in &placed {
        assert_eq!(classes.len(), 1, "{problem} is on {classes:?}");
    }
    let used: Vec<&String> = placed.values().flatten().collect();
    assert!(!used.iter().any(|c| *c == "cpu"), "{placed:?}");
    // Two h100s take twice the groups of one a100.
    let h100 = used.iter().filter(|c| **c == "h100").count();
    assert_eq!(h100, 3, "{placed:?}");

    // A task that names its class keeps it.
    let mut mixed = vec![on("cpu")];
    mixed.extend((0..3).map(|s| task("q", s)));
    let (status, body) = api.post("/evaluate/batch", json!({"tasks": mixed})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let placed = classes_by_problem(&api, body["batch_id"].as_str().unwrap()).await;
    let q = &placed["class Model: pass  # q"];
    assert_eq!(q.len(), 1);
    assert_ne!(q.iter().next().unwrap(), "cpu");
    assert!(placed["class Model: pass  # p"].contains("cpu"));
}

#[tokio::test]
async fn rollouts_are_placed_by_problem_or_on_the_class_asked() {
    let api = Api::with_workers(&[("h100", 1), ("a100", 1)]).await;
    let rollout = |id: String, problem: usize| {
        json!({
            "id": id,
            "reference_code": format!("class Model: pass  # r{problem}"),
            "completion": format!("```python\nclass ModelNew: pass  # {id}\n```"),
        })
    };
    let rollouts: Vec<Value> = (0..2)
        .flat_map(|p| (0..4).map(move |s| rollout(format!("{p}-{s}"), p)))
        .collect();
    let (status, body) = api
        .post("/rollouts", json!({"rollouts": rollouts.clone()}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["evaluated"], 8, "{body}");
    let placed = classes_by_problem(&api, body["batch_id"].as_str().unwrap()).await;
    assert_eq!(placed.len(), 2);
    // One class per group, and the two groups spread over the two classes.
    assert!(placed.values().all(|c| c.len() == 1), "{placed:?}");
    let used: BTreeSet<&String> = placed.values().flatten().collect();
    assert_eq!(used.len(), 2, "{placed:?}");

    let answer = api
        .post(
            "/rollouts",
            json!({"rollouts": rollouts.clone(), "eval": {"device_class": "l4"}}),
        )
        .await;
    assert_unavailable(&answer, "eval.device_class");
    let (status, body) = api
        .post(
            "/rollouts",
            json!({"rollouts": rollouts, "eval": {"device_class": "a100"}}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let placed = classes_by_problem(&api, body["batch_id"].as_str().unwrap()).await;
    assert!(placed.values().flatten().all(|c| c == "a100"), "{placed:?}");
}

#[tokio::test]
async fn the_queue_view_counts_each_class() {
    let api = Api::with_workers(&[("cpu", 1)]).await;
    api.post("/evaluate", on("cpu")).await;
    api.post("/evaluate", task("p", 9)).await;
    let status = api.get("/queue/status").await;
    assert_eq!(
        status["classes"],
        json!([
            {"device_class": null, "queued": 1, "workers": 1, "unservable": false},
            {"device_class": "cpu", "queued": 1, "workers": 1, "unservable": false},
        ]),
        "{status}"
    );
}
