//! `POST /admin/workers/{id}/drain` on the shipped Redis configuration (its ACL: the API's user
//! writes the drain, the worker's heartbeat reads it): the worker shows `draining`, finishes
//! the task on its device (done by its first attempt), deregisters and exits 0 by itself. The
//! route answers 404 for an unknown worker, 401 without a token, 403 to a tenant.
//! (SIGTERM's drain is tested in failover.rs.)

use crucible_tests::secure_redis::{Role, SecureRedis};
use crucible_tests::*;
use serde_json::json;
use std::time::Duration;

const ADMIN_TOKEN: &str = "test-admin-token-drain-0123456789abcdef0123";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_admin_drain_finishes_the_task_and_ends_the_worker() {
    let logs = log_dir("admin-drain");
    let redis = SecureRedis::start(&logs, false).await;
    let mut api_env = redis.node_env(Role::Api);
    api_env.push(("CRUCIBLE_AUTH".into(), "required".into()));
    api_env.push(("CRUCIBLE_ADMIN_TOKEN".into(), ADMIN_TOKEN.into()));
    let port = free_port();
    let _api = Proc::spawn("api", api_command(port, &api_env), &logs);
    let mut worker = Proc::spawn(
        "worker",
        worker_command(&redis.node_env(Role::Worker)),
        &logs,
    );
    let anonymous = Api::new(port);
    anonymous.wait_ready().await;
    let admin = anonymous.with_token(ADMIN_TOKEN);

    let id = admin
        .submit(json!({
            "reference_code": problem("elementwise_relu"),
            "kernel_code": format!(
                "import time\ntime.sleep(10)\n{}",
                candidate("elementwise_relu__correct.py")
            ),
            "num_correct_trials": 1,
            "num_perf_trials": 2,
            "timeout_s": 120,
        }))
        .await;
    let running = admin.wait_running(&id, Duration::from_secs(120)).await;
    let worker_id = running["worker_id"].as_str().unwrap().to_owned();
    let drain = format!("/admin/workers/{worker_id}/drain");

    let (status, body) = anonymous.post(&drain, json!({})).await;
    assert_eq!(status, 401, "{body}");
    let (status, tenant) = admin
        .post("/admin/tenants", json!({ "name": "drain-tenant" }))
        .await;
    assert_eq!(status, 201, "{tenant}");
    let (status, body) = anonymous
        .with_token(tenant["token"].as_str().unwrap())
        .post(&drain, json!({}))
        .await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = admin.post("/admin/workers/w-nobody/drain", json!({})).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "NOT_FOUND", "{body}");

    let (status, body) = admin.post(&drain, json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["worker_id"], worker_id.as_str(), "{body}");
    eventually(
        "the worker to show draining",
        Duration::from_secs(30),
        || async {
            let (_, w) = admin.get("/workers/status").await;
            w["workers"]
                .as_array()?
                .iter()
                .any(|w| w["worker_id"] == worker_id.as_str() && w["state"] == "draining")
                .then_some(())
        },
    )
    .await;
    let exited = eventually(
        "the drained worker to exit",
        Duration::from_secs(150),
        || std::future::ready(worker.exited()),
    )
    .await;
    assert!(exited.success(), "a drain exits 0: {exited}");

    let task = admin.wait_task(&id, Duration::from_secs(10)).await;
    assert_eq!(task["status"], "done", "{task}");
    assert_eq!(task["attempts"], 1, "{task}");
    assert_eq!(task["result"]["correct"], true, "{task}");
    let (_, workers) = admin.get("/workers/status").await;
    assert!(
        workers["workers"].as_array().unwrap().is_empty(),
        "the drained worker deregistered: {workers}"
    );
}
