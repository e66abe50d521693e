//! [`SentinelCluster`]: a real Sentinel-managed Redis on loopback for failover tests. Two
//! `redis-server`s (a primary and its replica, `--replicaof`) and three Sentinels (the same
//! binary with `--sentinel`, each with a writable config file of its own, as Sentinel rewrites
//! it), quorum 2, a node judged down after [`DOWN_AFTER_MS`]. Every process is killed on drop.

use crate::{Proc, free_port};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The name the Sentinels monitor the primary by.
pub const MASTER_NAME: &str = "crucible";
/// A primary that does not answer for this long is down (`down-after-milliseconds`).
pub const DOWN_AFTER_MS: u64 = 1000;
/// Sentinel's `failover-timeout`: short, so a failover that stalls is retried within a test.
const FAILOVER_TIMEOUT_MS: u64 = 5000;
/// How long the cluster gets to come up: servers answering, the replica in sync, each Sentinel
/// aware of the replica and of the two other Sentinels (they find each other every 2 s).
const READY: Duration = Duration::from_secs(30);

/// TLS on every node and the data nodes' own configuration (the shipped `deploy/redis.conf`,
/// rendered): what a deployment runs.
#[derive(Clone)]
pub struct Secure {
    /// The data nodes' configuration file; its TLS port, address and certificates are given on
    /// the command line.
    pub conf: PathBuf,
    /// The CA every node's certificate is signed by.
    pub ca: PathBuf,
    /// The certificate (for 127.0.0.1) every node presents, and its key.
    pub cert: PathBuf,
    /// The key of `cert`.
    pub key: PathBuf,
    /// The certificate nodes present when they connect to each other (replication, the
    /// Sentinels' checks): one for client authentication, and its key.
    pub client_cert: PathBuf,
    /// The key of `client_cert`.
    pub client_key: PathBuf,
    /// The user and password the replicas and the Sentinels authenticate with.
    pub admin: (String, String),
}

/// One data node: a `redis-server` and its port.
struct DataNode {
    name: String,
    proc: Proc,
    port: u16,
}

/// A data node on `port`, a replica of `replica_of` when given, its log `<log_dir>/<name>.log`.
fn data_node(
    log_dir: &Path,
    secure: Option<&Secure>,
    name: &str,
    port: u16,
    replica_of: Option<u16>,
) -> DataNode {
    let mut cmd = Command::new(redis_server());
    // Its working directory is where a replica writes the copy it syncs (dump.rdb).
    let data = log_dir.join(format!("{name}-data"));
    std::fs::create_dir_all(&data).expect("a data dir");
    cmd.current_dir(&data);
    match secure {
        None => {
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--maxmemory-policy", "noeviction"]);
        }
        Some(s) => {
            cmd.arg(&s.conf)
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--bind", "127.0.0.1", "--tls-replication", "yes"])
                .arg("--tls-cert-file")
                .arg(&s.cert)
                .arg("--tls-key-file")
                .arg(&s.key)
                .arg("--tls-ca-cert-file")
                .arg(&s.ca)
                .arg("--tls-client-cert-file")
                .arg(&s.client_cert)
                .arg("--tls-client-key-file")
                .arg(&s.client_key)
                .args(["--masteruser", &s.admin.0, "--masterauth", &s.admin.1]);
        }
    }
    if let Some(p) = replica_of {
        cmd.args(["--replicaof", "127.0.0.1", &p.to_string()]);
    }
    DataNode {
        name: name.to_owned(),
        proc: Proc::spawn(name, cmd, log_dir),
        port,
    }
}

/// Two data nodes and three Sentinels on 127.0.0.1.
pub struct SentinelCluster {
    log_dir: PathBuf,
    secure: Option<Secure>,
    nodes: Vec<DataNode>,
    sentinels: Vec<(Proc, u16)>,
}

fn redis_server() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| {
        if Path::new("/usr/bin/redis-server").exists() {
            "/usr/bin/redis-server".to_owned()
        } else {
            "redis-server".to_owned()
        }
    })
}

impl SentinelCluster {
    /// Starts the five processes (logs and Sentinel configs in `log_dir`) and waits until a
    /// failover could happen: the replica in sync, every Sentinel knowing the replica and the
    /// other Sentinels.
    pub async fn start(log_dir: &Path) -> SentinelCluster {
        Self::start_with(log_dir, None).await
    }

    /// [`SentinelCluster::start`], every node over TLS only and the data nodes run from
    /// `secure.conf` (their ACL users), the replicas and Sentinels authenticating as
    /// `secure.admin`.
    pub async fn start_secure(log_dir: &Path, secure: Secure) -> SentinelCluster {
        Self::start_with(log_dir, Some(secure)).await
    }

    async fn start_with(log_dir: &Path, secure: Option<Secure>) -> SentinelCluster {
        let server = redis_server();
        let s = secure.as_ref();
        let primary = data_node(log_dir, s, "redis-a", free_port(), None);
        let replica = data_node(log_dir, s, "redis-b", free_port(), Some(primary.port));
        let sentinels = (0..3)
            .map(|i| {
                let port = free_port();
                let conf = sentinel_conf(log_dir, s, i, port, primary.port);
                let mut cmd = Command::new(&server);
                cmd.arg(&conf).arg("--sentinel");
                (Proc::spawn(&format!("sentinel-{i}"), cmd, log_dir), port)
            })
            .collect();
        let cluster = SentinelCluster {
            log_dir: log_dir.to_owned(),
            secure,
            nodes: vec![primary, replica],
            sentinels,
        };
        cluster.wait_ready().await;
        cluster
    }

    /// `redis+sentinel://` naming the three Sentinels and [`MASTER_NAME`].
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(_, p)| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The primary's port as the first Sentinel that answers names it.
    pub async fn primary_port(&self) -> Option<u16> {
        let cmd = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER_NAME)
            .clone();
        for (_, port) in &self.sentinels {
            if let Ok(Some((_, p))) = self.query::<Option<(String, u16)>>(*port, &cmd).await {
                return Some(p);
            }
        }
        None
    }

    /// The ports of the data nodes that are not the primary the Sentinels name.
    pub async fn replica_ports(&self) -> Vec<u16> {
        let primary = self.primary_port().await;
        self.nodes
            .iter()
            .map(|n| n.port)
            .filter(|p| Some(*p) != primary)
            .collect()
    }

    /// SIGKILL the node the Sentinels call primary; returns its port.
    pub async fn kill_primary(&mut self) -> u16 {
        let port = self
            .primary_port()
            .await
            .expect("a Sentinel names the primary");
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("the primary is one of the cluster's nodes");
        node.proc.kill9();
        port
    }

    /// Starts the node on `port` again (killed before), empty, as a primary: the Sentinels
    /// turn it into a replica of the current primary. Returns once it is in sync with it.
    pub async fn restart(&mut self, port: u16, timeout: Duration) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of the cluster");
        let name = format!("{}-restarted", node.name);
        *node = data_node(&self.log_dir, self.secure.as_ref(), &name, port, None);
        crate::eventually(
            "the restarted node to be a replica in sync",
            timeout,
            || async {
                let info: String = self
                    .query(port, redis::cmd("INFO").arg("replication"))
                    .await
                    .ok()?;
                info.contains("master_link_status:up").then_some(())
            },
        )
        .await;
    }

    /// `SENTINEL FAILOVER`: a graceful failover to the replica, the primary still up (it is
    /// demoted and its clients disconnected). Returns the old primary's port.
    /// Retried within `timeout` while the Sentinel has no replica it deems good yet (it
    /// refreshes what it knows of a replica every 10 s).
    pub async fn failover(&self, timeout: Duration) -> u16 {
        let old = self
            .primary_port()
            .await
            .expect("a Sentinel names the primary");
        let cmd = redis::cmd("SENTINEL")
            .arg("failover")
            .arg(MASTER_NAME)
            .clone();
        let (_, port) = &self.sentinels[0];
        crate::eventually(
            "a Sentinel to accept SENTINEL FAILOVER",
            timeout,
            || async { self.query::<()>(*port, &cmd).await.ok() },
        )
        .await;
        old
    }

    /// Waits (bounded) until the Sentinels name a primary other than `old` that says it is one.
    pub async fn wait_new_primary(&self, old: u16, timeout: Duration) -> u16 {
        crate::eventually(
            "the Sentinels to promote a new primary",
            timeout,
            || async {
                let port = self.primary_port().await.filter(|p| *p != old)?;
                let role: redis::Value = self.query(port, &redis::cmd("ROLE")).await.ok()?;
                let redis::Value::Array(items) = role else {
                    return None;
                };
                matches!(items.first(), Some(redis::Value::BulkString(b)) if b == b"master")
                    .then_some(port)
            },
        )
        .await
    }

    /// `cmd` on the node or Sentinel at `port` (over TLS and as the admin when secure).
    async fn query<T: redis::FromRedisValue>(
        &self,
        port: u16,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(1)));
        let client = match &self.secure {
            None => redis::Client::open(format!("redis://127.0.0.1:{port}"))?,
            Some(s) => {
                let sentinel = self.sentinels.iter().any(|(_, p)| *p == port);
                // Sentinels take no user here; data nodes only their ACL users.
                let user = if sentinel {
                    String::new()
                } else {
                    format!("{}:{}@", s.admin.0, s.admin.1)
                };
                let root_cert = Some(std::fs::read(&s.ca).expect("the CA file"));
                redis::Client::build_with_tls(
                    format!("rediss://{user}127.0.0.1:{port}"),
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert,
                    },
                )?
            }
        };
        let mut c = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await?;
        cmd.query_async(&mut c).await
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + READY;
        let replica = self.nodes[1].port;
        loop {
            if self.ready(replica).await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Sentinel cluster did not come up within {READY:?} (see the logs of redis-a, redis-b, sentinel-*)"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn ready(&self, replica: u16) -> bool {
        let info: redis::RedisResult<String> = self
            .query(replica, redis::cmd("INFO").arg("replication"))
            .await;
        if !info.is_ok_and(|i| i.contains("master_link_status:up")) {
            return false;
        }
        for (_, port) in &self.sentinels {
            let replicas: redis::RedisResult<Vec<redis::Value>> = self
                .query(
                    *port,
                    redis::cmd("SENTINEL").arg("replicas").arg(MASTER_NAME),
                )
                .await;
            let peers: redis::RedisResult<Vec<redis::Value>> = self
                .query(
                    *port,
                    redis::cmd("SENTINEL").arg("sentinels").arg(MASTER_NAME),
                )
                .await;
            let known = replicas.is_ok_and(|r| r.len() == 1) && peers.is_ok_and(|s| s.len() == 2);
            if !known {
                return false;
            }
        }
        true
    }
}

/// The config file of Sentinel `i` (Sentinel needs a file it can rewrite).
fn sentinel_conf(
    dir: &Path,
    secure: Option<&Secure>,
    i: usize,
    port: u16,
    primary: u16,
) -> PathBuf {
    let path = dir.join(format!("sentinel-{i}.conf"));
    let listen = match secure {
        None => format!("port {port}\n"),
        // TLS to clients, to the data nodes and between Sentinels; client certificates are not
        // required (the data nodes' `tls-auth-clients optional` alike).
        Some(s) => format!(
            "port 0\ntls-port {port}\ntls-replication yes\ntls-auth-clients no\n\
             tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
             tls-client-cert-file {}\ntls-client-key-file {}\n",
            s.cert.display(),
            s.key.display(),
            s.ca.display(),
            s.client_cert.display(),
            s.client_key.display()
        ),
    };
    let auth = match secure {
        None => String::new(),
        Some(s) => format!(
            "sentinel auth-user {MASTER_NAME} {}\nsentinel auth-pass {MASTER_NAME} {}\n",
            s.admin.0, s.admin.1
        ),
    };
    let text = format!(
        "{listen}bind 127.0.0.1\ndir {dir}\n\
         sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} 2\n{auth}\
         sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
         sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
         sentinel parallel-syncs {MASTER_NAME} 1\n",
        dir = dir.display()
    );
    std::fs::write(&path, text).expect("write a Sentinel config");
    path
}
