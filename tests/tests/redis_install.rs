//! `deploy/install.sh redis` (files only, no systemd): it renders a broker configuration that
//! redis-server runs, with passwords and a certificate each role connects with over TLS, and a
//! second run keeps the passwords and certificates.

use crucible_shared::BrokerConfig;
use crucible_task_manager::{Broker, RedisBroker, RedisTarget, TlsFiles};
use crucible_tests::*;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn install_redis(etc: &Path) {
    let out = Command::new("bash")
        .arg(repo_root().join("deploy/install.sh"))
        .args(["redis", "localhost", "127.0.0.1"])
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
