//! `crucible doctor` run for real: on this machine (its Python, compilers, disks, and its GPU
//! or lack of one), against a live `crucible up`, and against the shipped broker configuration
//! as a role's user (which may not read CONFIG) and as the admin (who reads noeviction and AOF).

use crucible_tests::secure_redis::{Role, SecureRedis};
use crucible_tests::*;
use std::process::{Command, Output};
use std::time::Duration;

/// `crucible doctor ARGS` with only the variables given (and PATH, as a shell would have).
fn doctor(args: &[&str], env: &[(&str, String)]) -> Output {
    Command::new(bin("crucible"))
        .arg("doctor")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run crucible doctor")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The line of check `name` (its level first).
fn line<'a>(report: &'a str, name: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no `{name}` line in:\n{report}"))
}

#[test]
fn doctor_checks_this_node_for_each_role() {
    let python = [("CRUCIBLE_PYTHON", python())];
    let out = doctor(&["--role", "all"], &python);
    let report = stdout(&out);
    // The suite's own machine has what a CPU node needs: it passes, with warnings only.
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["python", "torch", "triton", "c++", "ninja"] {
        assert!(line(&report, name).starts_with("ok "), "{name}:\n{report}");
    }
    // Free space is the machine's: a shared disk may be below the warning's 10 GiB.
    for name in ["work", "build"] {
        assert!(
            !line(&report, name).starts_with("FAIL"),
            "{name}:\n{report}"
        );
    }
    assert!(
        line(&report, "redis").contains("in-process broker"),
        "{report}"
    );
    if report.lines().any(|l| l.starts_with("ok    driver")) {
        assert!(line(&report, "gpu").starts_with("ok "), "{report}");
    } else {
        let gpu = line(&report, "gpu");
        assert!(
            gpu.starts_with("warn ") && gpu.contains("no GPU: cpu worker"),
            "{report}"
        );
    }
    assert!(report.trim_end().ends_with("0 FAIL"), "{report}");

    // A standalone worker needs the shared broker: without REDIS_URL the node fails.
    let out = doctor(&["--role", "worker"], &python);
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let redis = line(&report, "redis");
    assert!(
        redis.starts_with("FAIL ") && redis.contains("-- fix: "),
        "{report}"
    );

    // An API that would refuse to start (public address, no admin token) fails its check.
    let out = doctor(
        &["--role", "api"],
        &[("CRUCIBLE_BIND", "0.0.0.0:10907".to_owned())],
    );
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(line(&report, "auth").starts_with("FAIL "), "{report}");
    assert!(
        !report.contains("torch"),
        "an API node has no Python checks:\n{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reaches_a_live_api_and_names_one_that_is_not() {
    let logs = log_dir("doctor-api");
    let port = free_port();
    let cmd = crucible_up(port);
    let _up = Proc::spawn("crucible-up", cmd, &logs);
    let api = Api::new(port);
    api.wait_ready().await;
    // Its worker is ready once its sandbox self-test passed.
    eventually("a ready worker", Duration::from_secs(60), || async {
        let (_, health) = api.get("/health").await;
        (health["status"] == "ok").then_some(())
    })
    .await;
    let url = format!("http://127.0.0.1:{port}");
    let env = [("CRUCIBLE_PYTHON", python())];
    let out = doctor(&["--role", "all", "--api", &url], &env);
    let report = stdout(&out);
    assert!(out.status.success(), "{report}");
    let line_api = line(&report, "api");
    assert!(
        line_api.starts_with("ok ")
            && line_api.contains("/health: ok (memory broker, 1 worker(s) ready"),
        "{report}"
    );

    let closed = format!("http://127.0.0.1:{}", free_port());
    let out = doctor(&["--role", "api", "--api", &closed], &[]);
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(line(&report, "api").starts_with("FAIL "), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_the_shipped_broker_as_each_user_sees_it() {
    let logs = log_dir("doctor-redis");
    let redis = SecureRedis::start(&logs, false).await;
    let ca = ("CRUCIBLE_REDIS_CA_FILE", redis.pki.ca.display().to_string());
    // A worker node's env file, as install.sh writes it.
    let env_file = logs.join("worker.env");
    std::fs::write(
        &env_file,
        format!(
            "# worker role\nREDIS_URL={}\n{}={}\n",
            redis.url(Role::Worker),
            ca.0,
            ca.1
        ),
    )
    .unwrap();
    let out = doctor(
        &["--role", "api", "--env-file", env_file.to_str().unwrap()],
        &[],
    );
    let report = stdout(&out);
    assert!(out.status.success(), "{report}");
    assert!(line(&report, "redis").starts_with("ok "), "{report}");
    let config = report.lines().find(|l| l.contains("redis config")).unwrap();
    assert!(
        config.starts_with("warn ") && config.contains("may not run CONFIG"),
        "{report}"
    );
    assert!(
        !report.contains(&Role::Worker.password()),
        "a password printed:\n{report}"
    );

    // The admin reads what deploy/redis.conf sets.
    let admin = [("REDIS_URL", redis.url(Role::Admin)), ca.clone()];
    let report = stdout(&doctor(&["--role", "api"], &admin));
    let config = report.lines().find(|l| l.contains("redis config")).unwrap();
    assert!(
        config.starts_with("ok ") && config.contains("noeviction, appendonly yes"),
        "{report}"
    );

    // A wrong password is refused at the door, and says so without printing it.
    let wrong = redis
        .url(Role::Api)
        .replace(&Role::Api.password(), "not-the-password");
    let out = doctor(&["--role", "api"], &[("REDIS_URL", wrong), ca]);
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let redis_line = line(&report, "redis");
    assert!(
        redis_line.starts_with("FAIL ") && redis_line.contains("refused the credentials"),
        "{report}"
    );
    assert!(!report.contains("not-the-password"), "{report}");
}
