//! `deploy/install.sh redis` and `--role broker` (files only, no systemd): it renders a broker
//! configuration that redis-server runs, with passwords and a certificate each role connects
//! with over TLS, and a second run keeps the passwords and certificates; `--redis-bind` makes
//! Redis listen on that address, and the role files it writes for other nodes connect as they
//! are.

use crucible_shared::BrokerConfig;
use crucible_task_manager::{Broker, RedisBroker, RedisTarget, TlsFiles};
use crucible_tests::*;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn install_redis(etc: &Path) {
    install(etc, &["redis", "localhost", "127.0.0.1"]);
}

fn install(etc: &Path, args: &[&str]) {
    let out = Command::new("bash")
        .arg(repo_root().join("deploy/install.sh"))
        .args(args)
        .env("CRUCIBLE_ETC", etc)
        .env("CRUCIBLE_NO_SYSTEMD", "1")
        .output()
        .expect("run deploy/install.sh");
    assert!(
        out.status.success(),
        "install.sh redis failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_script_renders_a_broker_each_role_can_use() {
    let logs = log_dir("redis-install");
    let etc = logs.join("etc");
    let _ = std::fs::remove_dir_all(&etc);
    install_redis(&etc);
    let (conf, credentials) = (
        read(&etc.join("redis.conf")),
        read(&etc.join("redis-credentials")),
    );
    install_redis(&etc);
    assert_eq!(
        read(&etc.join("redis.conf")),
        conf,
        "a second run changed the configuration"
    );
    assert_eq!(read(&etc.join("redis-credentials")), credentials);
    let mode = |p: &str| std::fs::metadata(etc.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("redis-credentials"), 0o600);
    assert_eq!(mode("redis-tls/ca.key"), 0o600);

    let passwords: HashMap<&str, &str> = credentials
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("CRUCIBLE_") && k.ends_with("_PASSWORD"))
        .collect();
    assert_eq!(passwords.len(), 3, "{credentials}");
    for password in passwords.values() {
        assert!(
            !conf.contains(password),
            "a plaintext password in redis.conf"
        );
    }

    let data = logs.join("redis-data");
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let mut cmd = Command::new("redis-server");
    cmd.arg(etc.join("redis.conf"))
        .args(["--tls-port", &port.to_string(), "--bind", "127.0.0.1"])
        .current_dir(&data);
    let _redis = Proc::spawn("redis", cmd, &logs);
    let tls = TlsFiles {
        ca_file: Some(etc.join("redis-ca.crt")),
        ..TlsFiles::default()
    };
    for (user, var) in [
        ("crucible-api", "CRUCIBLE_API_PASSWORD"),
        ("crucible-worker", "CRUCIBLE_WORKER_PASSWORD"),
    ] {
        let url = format!("rediss://{user}:{}@localhost:{port}", passwords[var]);
        let target = RedisTarget::new(url).with_tls(tls.clone());
        let broker = RedisBroker::connect_to(&target, BrokerConfig::default()).unwrap();
        eventually(
            &format!("{user} to reach the rendered broker"),
            Duration::from_secs(15),
            || async { broker.ping().await.ok() },
        )
        .await;
    }
}

/// The value of `key` in an environment file `install.sh` wrote.
fn env_value(file: &str, key: &str) -> String {
    file.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in:\n{file}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_node_listens_on_its_bound_address_for_the_role_files_it_writes() {
    let logs = log_dir("redis-install-bind");
    let etc = logs.join("etc");
    let _ = std::fs::remove_dir_all(&etc);
    // Another loopback address stands for the node's network address: Redis must listen there
    // because the rendered file says so (nothing on its command line binds it).
    let address = "127.0.0.2";
    install(&etc, &["--role", "broker", "--redis-bind", address]);
    let conf = read(&etc.join("redis.conf"));
    assert!(
        conf.lines()
            .any(|l| l == format!("bind 127.0.0.1 -::1 {address}")),
        "no bind line with {address}:\n{conf}"
    );
    for setting in ["appendonly yes", "maxmemory-policy noeviction"] {
        assert!(conf.lines().any(|l| l == setting), "{setting} missing");
    }
    assert!(!conf.lines().any(|l| l.starts_with("requirepass")));
    let mode = |p: &str| std::fs::metadata(etc.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("api.env"), 0o600);
    assert_eq!(mode("worker.env"), 0o600);
    let api_env = read(&etc.join("api.env"));
    assert_eq!(env_value(&api_env, "CRUCIBLE_ADMIN_TOKEN").len(), 64);

    let data = logs.join("redis-data");
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let mut cmd = Command::new("redis-server");
    cmd.arg(etc.join("redis.conf"))
        .args(["--tls-port", &port.to_string()])
        .current_dir(&data);
    let _redis = Proc::spawn("redis", cmd, &logs);
    for role in ["api", "worker"] {
        let file = read(&etc.join(format!("{role}.env")));
        // The file as another node gets it; only the port differs from a node's.
        let url = env_value(&file, "REDIS_URL").replace(":6379", &format!(":{port}"));
        assert!(url.contains(&format!("@{address}:")), "{role}: {url}");
        let tls = TlsFiles {
            ca_file: Some(env_value(&file, "CRUCIBLE_REDIS_CA_FILE").into()),
            ..TlsFiles::default()
        };
        let target = RedisTarget::new(url).with_tls(tls);
        let broker = RedisBroker::connect_to(&target, BrokerConfig::default()).unwrap();
        eventually(
            &format!("the {role} role to reach {address}"),
            Duration::from_secs(15),
            || async { broker.ping().await.ok() },
        )
        .await;
    }
}
