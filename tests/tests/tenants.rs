//! Tenants end to end, against a real `crucible-api` and a real redis-server: 401 without a
//! token or with a bad one, 403 for admin paths with a tenant's token, 404 for another tenant's
//! task, batch and rollout results (and their cancel), 429 at a tenant's quota, idempotency keys
//! and coalescing per tenant, per-tenant counts for the admin only, a deleted tenant's token
//! refused at once, the fair share as workers see it, the `crucible` CLI with a token, the
//! documented security scheme, and the start-up rules (off on loopback, refused on a public
//! address without an admin token).

use crucible_shared::{BrokerConfig, TaskId, WorkerId};
use crucible_task_manager::{Broker, RedisBroker};
use crucible_tests::*;
use reqwest::Method;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef0123456789";

struct Stack {
    /// No token.
    anon: Api,
    admin: Api,
    prefix: String,
    redis: Redis,
    logs: std::path::PathBuf,
    _api: Proc,
}

async fn stack(name: &str) -> Stack {
    let logs = log_dir(name);
    let redis = Redis::start(&logs).await;
    let mut env = service_env(&redis.url, name);
    env.push(("CRUCIBLE_AUTH".into(), "required".into()));
    env.push(("CRUCIBLE_ADMIN_TOKEN".into(), ADMIN_TOKEN.into()));
    let port = free_port();
    let api = Proc::spawn("api", api_command(port, &env), &logs);
    let anon = Api::new(port);
    anon.wait_ready().await;
    Stack {
        admin: anon.with_token(ADMIN_TOKEN),
        anon,
        prefix: name.to_owned(),
        redis,
        logs,
        _api: api,
    }
}

/// Creates a tenant; returns an API client with its token.
async fn tenant(s: &Stack, body: Value) -> Api {
    let (status, created) = s.admin.post("/admin/tenants", body).await;
    assert_eq!(status, 201, "{created}");
    let token = created["token"].as_str().expect("token");
    assert!(token.starts_with("crt_") && token.len() == 68, "{created}");
    s.anon.with_token(token)
}

fn relu(kernel_tag: &str) -> Value {
    json!({
        "reference_code": problem("elementwise_relu"),
        "kernel_code": format!("class ModelNew: pass  # {kernel_tag}"),
    })
}

async fn delete(api: &Api, path: &str) -> (u16, Value) {
    api.call(Method::DELETE, path, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_decide_who_may_see_and_do_what() {
    let s = stack("tenants-http").await;

    // No token, a bad token, a malformed header: 401 with a Bearer challenge; public paths open.
    for path in [
        "/tasks/t_x",
        "/queue/status",
        "/problems",
        "/admin/tenants",
        "/no/route",
    ] {
        let (status, body) = s.anon.get(path).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (401, Some("UNAUTHORIZED")),
            "{path}"
        );
    }
    let raw = s
        .anon
        .http
        .post(format!("{}/evaluate", s.anon.base))
        .json(&relu("k"))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 401);
    assert_eq!(raw.headers()["www-authenticate"], "Bearer");
    let (status, _) = s
        .anon
        .with_token("crt_not-a-token")
        .get("/queue/status")
        .await;
    assert_eq!(status, 401);
    let basic = s
        .anon
        .http
        .get(format!("{}/queue/status", s.anon.base))
        .header("authorization", format!("Basic {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status().as_u16(), 401);
    // The status page and its assets too (the page without data: docs/STATUS-PAGE.md).
    for path in [
        "/health",
        "/metrics",
        "/openapi.json",
        "/docs/",
        "/",
        "/status",
        "/status.js",
        "/status.css",
    ] {
        let status = s
            .anon
            .http
            .get(format!("{}{path}", s.anon.base))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(status, 200, "{path}");
    }

    // The admin creates tenants; names are checked and unique.
    let alice = tenant(&s, json!({"name": "alice"})).await;
    let bob = tenant(&s, json!({"name": "bob", "weight": 2})).await;
    let carol = tenant(&s, json!({"name": "carol", "max_queued": 2})).await;
    let (status, body) = s
        .admin
        .post("/admin/tenants", json!({"name": "alice"}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("CONFLICT")),
        "{body}"
    );
    for bad in [
        json!({"name": "Alice"}),
        json!({"name": "admin"}),
        json!({"name": "x", "weight": 0}),
    ] {
        let (status, body) = s.admin.post("/admin/tenants", bad.clone()).await;
        assert_eq!(status, 422, "{bad}: {body}");
    }
    let (status, body) = s
        .admin
        .post("/admin/tenants", json!({"name": "x", "token": "mine"}))
        .await;
    assert_eq!(status, 422, "unknown fields are refused: {body}");

    // A tenant's token on admin paths: 403.
    let (status, body) = alice
        .post("/admin/tenants", json!({"name": "mallory"}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("FORBIDDEN")),
        "{body}"
    );
    assert_eq!(alice.get("/admin/tenants").await.0, 403);
    assert_eq!(delete(&alice, "/admin/tenants/bob").await.0, 403);

    // Tasks: only their owner (and the admin) see and cancel them.
    let task = alice.submit(relu("a1")).await;
    for path in [format!("/tasks/{task}"), format!("/tasks/{task}?wait=0.1")] {
        let (status, body) = bob.get(&path).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("NOT_FOUND")),
            "{body}"
        );
    }
    assert_eq!(delete(&bob, &format!("/tasks/{task}")).await.0, 404);
    assert_eq!(alice.get(&format!("/tasks/{task}")).await.0, 200);
    assert_eq!(s.admin.get(&format!("/tasks/{task}")).await.0, 200);
    let (status, cancelled) = delete(&alice, &format!("/tasks/{task}")).await;
    assert_eq!(
        (status, cancelled["was"].as_str()),
        (200, Some("queued")),
        "{cancelled}"
    );

    // Batches and rollout results too.
    let (status, batch) = alice
        .post("/evaluate/batch", json!({"tasks": [relu("a2")]}))
        .await;
    assert_eq!(status, 202, "{batch}");
    let batch_id = batch["batch_id"].as_str().unwrap();
    assert_eq!(bob.get(&format!("/batches/{batch_id}")).await.0, 404);
    assert_eq!(delete(&bob, &format!("/batches/{batch_id}")).await.0, 404);
    assert_eq!(alice.get(&format!("/batches/{batch_id}")).await.0, 200);
    let rollouts = json!({"rollouts": [{"id": "r1", "reference_code": problem("elementwise_relu"),
        "completion": "no kernel in here"}], "idempotency_key": "rb-1"});
    let (status, rb) = alice.post("/rollouts", rollouts.clone()).await;
    assert_eq!(status, 202, "{rb}");
    let results = format!("/batches/{}/results", rb["batch_id"].as_str().unwrap());
    assert_eq!(bob.get(&results).await.0, 404);
    let (status, page) = alice.get(&results).await;
    assert_eq!((status, page["total"].as_u64()), (200, Some(1)), "{page}");
    // A batch idempotency key is the tenant's own.
    let (_, again) = alice.post("/rollouts", rollouts.clone()).await;
    assert_eq!(
        (&again["batch_id"], &again["deduplicated"]),
        (&rb["batch_id"], &json!(true))
    );
    let (_, bobs) = bob.post("/rollouts", rollouts).await;
    assert_ne!(bobs["batch_id"], rb["batch_id"]);
    assert_eq!(bobs["deduplicated"], false);

    // Idempotency keys and coalescing never cross tenants.
    let mut keyed = relu("same");
    keyed["idempotency_key"] = json!("k-1");
    let (a1, b1) = (
        alice.submit(keyed.clone()).await,
        bob.submit(keyed.clone()).await,
    );
    assert_ne!(a1, b1);
    let (_, b2) = bob.post("/evaluate", keyed).await;
    assert_eq!(
        (b2["task_id"].as_str(), &b2["deduplicated"]),
        (Some(b1.as_str()), &json!(true))
    );
    let (_, a3) = alice.post("/evaluate", relu("same")).await;
    assert_eq!(
        (a3["task_id"].as_str(), &a3["coalesced"]),
        (Some(a1.as_str()), &json!(true))
    );

    // Quota: carol may have 2 queued.
    carol.submit(relu("c1")).await;
    carol.submit(relu("c2")).await;
    let full = carol
        .http
        .post(format!("{}/evaluate", carol.base))
        .json(&relu("c3"))
        .send()
        .await
        .unwrap();
    assert_eq!(full.status().as_u16(), 429);
    assert!(full.headers().contains_key("retry-after"));
    let body: Value = full.json().await.unwrap();
    assert_eq!(body["code"], "QUOTA_EXCEEDED", "{body}");
    let (status, _) = carol
        .post("/evaluate/batch", json!({"tasks": [relu("c4")]}))
        .await;
    assert_eq!(status, 429);
    // Others are not held back by carol's quota.
    bob.submit(relu("b-more")).await;

    // Per-tenant counts: all of them for the admin, only its own for a tenant.
    let (_, q) = s.admin.get("/queue/status").await;
    let names: Vec<&str> = q["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tenant"].as_str().unwrap())
        .collect();
    for name in ["alice", "bob", "carol"] {
        assert!(names.contains(&name), "{q}");
    }
    let (_, q) = carol.get("/queue/status").await;
    assert_eq!(
        q["tenants"],
        json!([{"tenant": "carol", "queued": 2, "running": 0}]),
        "{q}"
    );
    assert_eq!(
        q["queued_normal"],
        s.admin.get("/queue/status").await.1["queued_normal"]
    );
    let (_, w) = carol.get("/workers/status").await;
    assert!(w.get("tenants").is_none(), "{w}");
    let (_, w) = s.admin.get("/workers/status").await;
    assert!(w["tenants"].is_array(), "{w}");
    let (_, list) = s.admin.get("/admin/tenants").await;
    let carol_info = list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "carol")
        .cloned()
        .unwrap();
    assert_eq!(
        (
            carol_info["max_queued"].as_u64(),
            carol_info["queued"].as_u64()
        ),
        (Some(2), Some(2))
    );
    assert!(
        !list.to_string().contains("crt_"),
        "no token is listed: {list}"
    );

    // The CLI takes a token.
    let cli = |args: &[&str], token: Option<&str>| {
        let mut cmd = Command::new(bin("crucible"));
        cmd.args(args)
            .args(["--url", &s.anon.base])
            .env_remove("CRUCIBLE_TOKEN");
        if let Some(t) = token {
            cmd.env("CRUCIBLE_TOKEN", t);
        }
        cmd.output().expect("run crucible")
    };
    let listed = cli(&["tenants", "list"], Some(ADMIN_TOKEN));
    assert!(listed.status.success(), "{listed:?}");
    assert!(String::from_utf8_lossy(&listed.stdout).contains("carol"));
    let denied = cli(&["status"], None);
    assert!(!denied.status.success());
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("401"),
        "{denied:?}"
    );
    let created = cli(
        &["tenants", "create", "dave", "--weight", "3"],
        Some(ADMIN_TOKEN),
    );
    assert!(created.status.success(), "{created:?}");
    let created: Value = serde_json::from_slice(&created.stdout).unwrap();
    let dave_token = created["token"].as_str().unwrap();
    let status = cli(&["status"], Some(dave_token));
    assert!(status.status.success(), "{status:?}");

    // Deleting a tenant: its token stops at once, its open tasks are cancelled.
    let (status, deleted) = delete(&s.admin, "/admin/tenants/bob").await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["cancelled_queued"], 2, "{deleted}");
    assert_eq!(bob.get("/queue/status").await.0, 401);
    let (_, gone) = s.admin.get(&format!("/tasks/{b1}")).await;
    assert_eq!(gone["status"], "cancelled", "{gone}");
    assert!(
        gone["error"]
            .as_str()
            .unwrap()
            .contains("tenant bob was deleted"),
        "{gone}"
    );
    assert_eq!(delete(&s.admin, "/admin/tenants/bob").await.0, 404);

    let log = std::fs::read_to_string(s.logs.join("api.log")).unwrap_or_default();
    assert!(
        !log.contains(ADMIN_TOKEN) && !log.contains(dave_token),
        "a token was logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_tenant_is_served_in_the_first_half_through_the_api() {
    let s = stack("tenants-fair").await;
    let big = tenant(&s, json!({"name": "big"})).await;
    let small = tenant(&s, json!({"name": "small"})).await;
    let batch = |tag: &str, n: usize| json!({"tasks": (0..n).map(|i| relu(&format!("{tag}{i}"))).collect::<Vec<_>>()});
    let (status, _) = big.post("/evaluate/batch", batch("big", 200)).await;
    assert_eq!(status, 202);
    let (status, small_batch) = small.post("/evaluate/batch", batch("small", 10)).await;
    assert_eq!(status, 202);
    let small_ids: Vec<TaskId> = serde_json::from_value(small_batch["task_ids"].clone()).unwrap();

    // Claim everything as a worker would, from the same Redis.
    let broker = RedisBroker::connect(
        &s.redis.url,
        BrokerConfig {
            key_prefix: s.prefix.clone(),
            ..BrokerConfig::default()
        },
    )
    .unwrap();
    let worker = WorkerId::from("w_fair");
    let mut order = Vec::new();
    while let Some(lease) = broker
        .claim(
            &worker,
            &crucible_shared::DeviceClass::cpu(),
            Duration::ZERO,
        )
        .await
        .unwrap()
    {
        order.push(lease.task_id);
    }
    assert_eq!(order.len(), 210);
    let last_small = small_ids
        .iter()
        .map(|id| order.iter().position(|t| t == id).unwrap())
        .max()
        .unwrap();
    assert!(
        last_small < 105,
        "the small tenant's last task was claim {last_small} of 210"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_is_off_on_loopback_and_refused_on_a_public_address_without_an_admin_token() {
    let logs = log_dir("tenants-startup");
    let redis = Redis::start(&logs).await;
    let env = service_env(&redis.url, "tenants-startup");

    // Loopback, nothing set: single-user mode, every caller is the admin.
    let port = free_port();
    let _api = Proc::spawn("api-loopback", api_command(port, &env), &logs);
    let api = Api::new(port);
    api.wait_ready().await;
    assert_eq!(api.get("/queue/status").await.0, 200);
    let (status, created) = api.post("/admin/tenants", json!({"name": "solo"})).await;
    assert_eq!(status, 201, "{created}");
    api.submit(relu("solo")).await;

    // A public address with auth required by default but no admin token: refused at start.
    let refused = |extra: &[(&str, &str)], name: &str| {
        let mut cmd = api_command(free_port(), &env);
        cmd.env("CRUCIBLE_BIND", format!("0.0.0.0:{}", free_port()));
        cmd.env_remove("CRUCIBLE_ADMIN_TOKEN");
        cmd.envs(extra.iter().copied());
        Proc::spawn(name, cmd, &logs)
    };
    for (extra, name, says) in [
        (&[][..], "api-public", "CRUCIBLE_ADMIN_TOKEN"),
        (
            &[("CRUCIBLE_AUTH", "sometimes")][..],
            "api-badmode",
            "CRUCIBLE_AUTH",
        ),
        (
            &[("CRUCIBLE_ADMIN_TOKEN", "short")][..],
            "api-weak",
            "at least 32",
        ),
    ] {
        let mut proc = refused(extra, name);
        let code = eventually(&format!("{name} to exit"), Duration::from_secs(20), || {
            let exited = proc.child.try_wait().ok().flatten();
            async move { exited }
        })
        .await;
        assert!(!code.success(), "{name} started");
        let log = proc.log_text();
        assert!(log.contains(says), "{name}: {log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contract_documents_the_bearer_scheme_on_every_protected_path() {
    let s = stack("tenants-openapi").await;
    let (status, doc) = s.anon.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer",
        "{}",
        doc["components"]["securitySchemes"]
    );
    for schema in [
        "CreateTenantRequest",
        "CreatedTenant",
        "TenantInfo",
        "TenantList",
        "DeletedTenant",
        "TenantCounts",
    ] {
        assert!(
            doc["components"]["schemas"].get(schema).is_some(),
            "{schema}"
        );
    }
    // The public paths as the middleware decides them (the service's and OpenEnv's health, the
    // scrape, the contract, the status page): every other path is behind the token.
    let mut protected = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let methods = ["get", "post", "put", "delete", "patch"];
        for (method, op) in item.as_object().unwrap() {
            if !methods.contains(&method.as_str()) {
                continue;
            }
            let responses = &op["responses"];
            if crucible_api_server::auth::is_public(path) {
                assert!(op.get("security").is_none(), "{method} {path}");
                continue;
            }
            protected += 1;
            assert_eq!(op["security"], json!([{"bearer": []}]), "{method} {path}");
            assert!(responses.get("401").is_some(), "{method} {path} lacks 401");
            assert_eq!(
                responses.get("403").is_some(),
                path.starts_with("/admin/"),
                "{method} {path}: 403 on admin paths only"
            );
        }
    }
    assert!(protected >= 14, "{protected}");
    for path in ["/admin/tenants", "/admin/tenants/{name}"] {
        assert!(doc["paths"].get(path).is_some(), "{path}");
    }
}
