//! The real processes against the shipped broker configuration (`deploy/redis.conf`: TLS, ACL
//! users per role): `crucible-api` (authentication required) and a CPU `crucible-worker`, each
//! with its own role's credentials over `rediss://`, run a tenant's evaluation end to end, from
//! the tenant's creation to its deletion; `crucible up` runs both roles; a wrong password, a
//! missing CA or a plain URL fails at startup with an error that names the problem and never
//! the password.

use crucible_shared::BrokerConfig;
use crucible_task_manager::{ConnectError, RedisBroker, RedisTarget, TlsFiles};
use crucible_tests::secure_redis::{Role, SecureRedis};
use crucible_tests::*;
use reqwest::Method;
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

const ADMIN_TOKEN: &str = "tls-test-admin-token-0123456789abcdef01234567";

/// A node's environment for `role`: its URL, the CA, the prefix the ACL allows.
fn node_env(server: &SecureRedis, role: Role) -> Vec<(String, String)> {
    server.node_env(role)
}

fn assert_no_password(what: &str, text: &str) {
    for role in Role::ALL {
        assert!(
            !text.contains(&role.password()),
            "{what} shows the {role:?} password:\n{text}"
        );
    }
}

async fn open_err(target: RedisTarget) -> ConnectError {
    let started = Instant::now();
    let result = RedisBroker::open(&target, BrokerConfig::default()).await;
    let err = result
        .err()
        .unwrap_or_else(|| panic!("{target:?} connected"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?} to fail",
        started.elapsed()
    );
    assert_no_password("the error", &format!("{err} {err:?}"));
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_and_worker_evaluate_over_tls_each_with_its_role() {
    let logs = log_dir("redis-tls-e2e");
    let server = SecureRedis::start(&logs, false).await;
    let port = free_port();
    let mut api_env = node_env(&server, Role::Api);
    api_env.push(("CRUCIBLE_AUTH".into(), "required".into()));
    api_env.push(("CRUCIBLE_ADMIN_TOKEN".into(), ADMIN_TOKEN.into()));
    let mut api_proc = Proc::spawn("api", api_command(port, &api_env), &logs);
    let mut worker_proc = Proc::spawn(
        "worker",
        worker_command(&node_env(&server, Role::Worker)),
        &logs,
    );
    let anon = Api::new(port);
    anon.wait_ready().await;
    let admin = anon.with_token(ADMIN_TOKEN);

    // The admin creates a tenant (the registry is the API role's alone); the tenant evaluates.
    let (status, created) = admin
        .post(
            "/admin/tenants",
            json!({"name": "team-tls", "weight": 2, "max_queued": 10}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let token = created["token"].as_str().expect("a token");
    let api = anon.with_token(token);
    let task = api
        .evaluate_and_wait(
            eval_body("softmax", "softmax__correct.py", 120),
            Duration::from_secs(180),
        )
        .await;
    assert_eq!(task["status"], "done", "{task}");
    assert_eq!(task["result"]["correct"], true, "{task}");
    let (_, health) = anon.get("/health").await;
    assert_eq!(
        (health["broker_ok"].as_bool(), health["broker"].as_str()),
        (Some(true), Some("redis")),
        "{health}"
    );
    // The admin's views read the registry and every tenant's counters.
    let (_, workers) = admin.get("/workers/status").await;
    assert_eq!(
        workers["workers"].as_array().map(Vec::len),
        Some(1),
        "{workers}"
    );
    assert!(workers["tenants"].is_array(), "{workers}");
    let (_, queue) = admin.get("/queue/status").await;
    assert_eq!(queue["done_total"], 1, "{queue}");
    let (_, list) = admin.get("/admin/tenants").await;
    assert_eq!(list["tenants"][0]["name"], "team-tls", "{list}");
    assert_eq!(list["tenants"][0]["weight"], 2, "{list}");
    let (status, deleted) = admin
        .call(Method::DELETE, "/admin/tenants/team-tls", None)
        .await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(api.get("/queue/status").await.0, 401);

    assert!(
        worker_proc.terminate(Duration::from_secs(30)),
        "worker did not stop"
    );
    assert!(
        api_proc.terminate(Duration::from_secs(20)),
        "api did not stop"
    );
    // Nothing either role sent was refused, and no log line shows a password.
    assert_eq!(server.acl_denials().await, Vec::<String>::new());
    for proc in [&api_proc, &worker_proc] {
        let log = proc.log_text();
        assert!(log.contains("redis connected"), "{}:\n{log}", proc.name);
        assert_no_password(&proc.name, &log);
        assert!(
            !log.contains(ADMIN_TOKEN) && !log.contains(token),
            "{} logged a token",
            proc.name
        );
    }
    assert!(
        api_proc
            .log_text()
            .contains("rediss://crucible-api:***@localhost")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crucible_up_runs_both_roles_over_tls() {
    let logs = log_dir("redis-tls-up");
    let server = SecureRedis::start(&logs, false).await;
    let port = free_port();
    let mut cmd = Command::new(bin("crucible"));
    cmd.args(["up", "--cpu", "--bind", &format!("127.0.0.1:{port}")])
        .envs(node_env(&server, Role::Api))
        .env("CRUCIBLE_WORKER_REDIS_URL", server.url(Role::Worker));
    let mut up = Proc::spawn("crucible-up", cmd, &logs);
    let api = Api::new(port);
    api.wait_ready().await;
    let (_, health) = api.get("/health").await;
    assert_eq!(health["broker"], "redis", "{health}");
    // The worker registered (heartbeat) and is waiting for work (claim, BLPOP) as its role.
    eventually(
        "the worker to be ready",
        Duration::from_secs(120),
        || async {
            let (_, w) = api.get("/workers/status").await;
            let workers = w["workers"].as_array()?.clone();
            (workers.len() == 1 && workers[0]["state"] == "idle").then_some(())
        },
    )
    .await;
    assert!(
        up.terminate(Duration::from_secs(30)),
        "crucible up did not stop"
    );
    assert_eq!(server.acl_denials().await, Vec::<String>::new());
    assert_no_password("crucible up", &up.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_or_tls_fail_at_startup_without_showing_the_password() {
    let logs = log_dir("redis-tls-errors");
    let server = SecureRedis::start(&logs, false).await;
    let wrong = format!(
        "rediss://crucible-api:{}@localhost:{}",
        Role::Worker.password(),
        server.port
    );
    let tls = server.tls_files();

    let e = open_err(RedisTarget::new(&wrong).with_tls(tls.clone())).await;
    assert!(matches!(e, ConnectError::Auth { .. }), "{e}");
    assert!(e.to_string().contains("refused the credentials"), "{e}");
    let anonymous = format!("rediss://localhost:{}", server.port);
    let e = open_err(RedisTarget::new(anonymous).with_tls(tls.clone())).await;
    assert!(matches!(e, ConnectError::Auth { .. }), "{e}");
    // The system roots do not know the test CA.
    let e = open_err(server.target(Role::Api).with_tls(TlsFiles::default())).await;
    assert!(matches!(e, ConnectError::Tls { .. }), "{e}");
    assert!(e.to_string().contains("CRUCIBLE_REDIS_CA_FILE"), "{e}");
    // A plain URL to the TLS port.
    let plain = server.url(Role::Api).replacen("rediss://", "redis://", 1);
    let e = open_err(RedisTarget::new(plain)).await;
    assert!(matches!(e, ConnectError::Handshake { .. }), "{e}");
    // A server that requires client certificates, reached without one.
    let mutual = SecureRedis::start(&log_dir("redis-tls-errors-mtls"), true).await;
    let ca_only = TlsFiles {
        ca_file: Some(mutual.pki.ca.clone()),
        ..TlsFiles::default()
    };
    let e = open_err(mutual.target(Role::Worker).with_tls(ca_only)).await;
    assert!(matches!(e, ConnectError::Tls { .. }), "{e}");
    // Nothing listening: tolerated at startup (requests fail until Redis is up).
    let gone = format!(
        "rediss://crucible-api:{}@localhost:{}",
        Role::Api.password(),
        free_port()
    );
    RedisBroker::open(
        &RedisTarget::new(gone).with_tls(tls),
        BrokerConfig::default(),
    )
    .await
    .expect("an unreachable Redis is not a startup error");

    // The binaries exit at once with that error, and show the URL only redacted.
    let env = |role: Role, url: &str| {
        let mut env = node_env(&server, role);
        env.retain(|(k, _)| k != "REDIS_URL");
        env.push(("REDIS_URL".to_owned(), url.to_owned()));
        env
    };
    let missing_ca = logs.join("missing-ca.crt");
    let cases: Vec<(&str, Command, &str)> = vec![
        (
            "crucible-api",
            api_command(free_port(), &env(Role::Api, &wrong)),
            "refused the credentials",
        ),
        (
            "crucible-worker",
            worker_command(&env(Role::Worker, &wrong)),
            "refused the credentials",
        ),
        (
            "crucible up",
            crucible_up(&env(Role::Api, &wrong)),
            "refused the credentials",
        ),
        (
            "crucible-api with a missing CA file",
            {
                let mut c = api_command(free_port(), &env(Role::Api, &server.url(Role::Api)));
                c.env("CRUCIBLE_REDIS_CA_FILE", &missing_ca);
                c
            },
            "CRUCIBLE_REDIS_CA_FILE",
        ),
    ];
    for (what, mut cmd, expected) in cases {
        let out = run_bounded(&mut cmd, Duration::from_secs(20));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{what} started:\n{text}");
        assert!(
            text.contains(expected),
            "{what} does not say {expected:?}:\n{text}"
        );
        assert_no_password(what, &text);
    }
    // --help prints the variables it reads, never their values.
    for (name, args) in [
        ("crucible-api", &["--help"][..]),
        ("crucible-worker", &["--help"]),
        ("crucible", &["up", "--help"]),
    ] {
        let out = Command::new(bin(name))
            .args(args)
            .envs(env(Role::Api, &server.url(Role::Api)))
            .output()
            .expect("--help");
        assert_no_password(
            &format!("{name} --help"),
            &String::from_utf8_lossy(&out.stdout),
        );
    }
}

fn crucible_up(env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(bin("crucible"));
    cmd.args([
        "up",
        "--cpu",
        "--bind",
        &format!("127.0.0.1:{}", free_port()),
    ])
    .envs(env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// Runs `cmd` to its end, killing it after `limit` (a process that started serving instead of
/// failing must not hang the test).
fn run_bounded(cmd: &mut Command, limit: Duration) -> std::process::Output {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}
