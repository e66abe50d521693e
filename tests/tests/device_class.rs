//! Device classes end to end: `crucible up --cpu` runs one CPU worker, of class `cpu`; a
//! request for `cpu` runs on it and says so in its view and result, one for `h100` is refused
//! at submission (422, through the API and through `crucible submit --device-class`) and
//! nothing is queued for it.

use crucible_tests::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_worker_runs_class_cpu_and_h100_is_refused() {
    let logs = log_dir("device-class");
    let port = free_port();
    let mut cmd = crucible_up(port);
    // The class derived from the CPU, whatever the environment says.
    cmd.env_remove("CRUCIBLE_DEVICE_CLASS");
    let mut up = Proc::spawn("crucible-up", cmd, &logs);
    let api = Api::new(port);
    api.wait_ready().await;
    // The submit check reads the registry: wait for the worker to be in it.
    let workers = eventually(
        "the cpu worker to register",
        Duration::from_secs(60),
        || async {
            let (_, w) = api.get("/workers/status").await;
            let listed = w["workers"].as_array().is_some_and(|a| !a.is_empty());
            listed.then_some(w)
        },
    )
    .await;
    assert_eq!(workers["workers"][0]["device"]["class"], "cpu", "{workers}");

    let mut body = eval_body("softmax", "softmax__correct.py", 120);
    body["device_class"] = "cpu".into();
    let task = api.evaluate_and_wait(body, Duration::from_secs(120)).await;
    assert_eq!(task["status"], "done", "{task}");
    assert_eq!(task["device_class"], "cpu", "{task}");
    assert_eq!(task["result"]["correct"], true, "{task}");
    assert_eq!(task["result"]["device"]["class"], "cpu", "{task}");

    let mut body = eval_body("softmax", "softmax__correct.py", 120);
    body["device_class"] = "h100".into();
    let (status, error) = api.post("/evaluate", body).await;
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["code"], "DEVICE_CLASS_UNAVAILABLE", "{error}");
    assert_eq!(error["field"], "device_class", "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("h100") && m.contains("cpu (1)")),
        "{error}"
    );

    // The CLI says the same and exits non-zero.
    let root = repo_root();
    let out = Command::new(bin("crucible"))
        .args(["submit", "--device-class", "h100", "--wait-s", "5"])
        .arg("--reference")
        .arg(root.join("tests/problems/softmax.py"))
        .arg("--kernel")
        .arg(root.join("tests/candidates/softmax__correct.py"))
        .args(["--url", &format!("http://127.0.0.1:{port}")])
        .env_remove("CRUCIBLE_TOKEN")
        .output()
        .expect("crucible submit runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no live worker has device class h100"),
        "{stderr}"
    );

    // Nothing was queued for h100; the queue view counts the cpu class's worker.
    let (_, queue) = api.get("/queue/status").await;
    let classes: &Vec<Value> = queue["classes"].as_array().expect("classes");
    assert!(
        classes.iter().all(|c| c["device_class"] != "h100"),
        "{queue}"
    );
    let cpu = classes
        .iter()
        .find(|c| c["device_class"] == "cpu")
        .expect("a cpu row");
    assert_eq!(
        (&cpu["workers"], &cpu["unservable"]),
        (&1.into(), &false.into()),
        "{queue}"
    );
    assert!(
        up.terminate(Duration::from_secs(20)),
        "crucible up did not stop on SIGTERM:\n{}",
        up.log_text()
    );
}
