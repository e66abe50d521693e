//! A redis-server run from the shipped `deploy/redis.conf`, as `deploy/install.sh redis` renders
//! it: each role's password hashed into its placeholder (test passwords here), TLS with a
//! throwaway CA issued at test time, on a free port. The tests of credentials, TLS and the
//! per-role ACL run against it, so the file that ships is the file that is tested.

use crate::{Proc, eventually, free_port, repo_root};
use crucible_task_manager::{RedisTarget, TlsFiles};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The ACL users of `deploy/redis.conf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `crucible-api`: the API replicas and their reaper.
    Api,
    /// `crucible-worker`: the workers; no access to the tenant registry.
    Worker,
    /// `crucible-admin`: operators, everything; no Crucible process uses it.
    Admin,
}

impl Role {
    /// Every role, each a user of the file.
    pub const ALL: [Role; 3] = [Role::Api, Role::Worker, Role::Admin];

    /// The role's ACL user name.
    pub fn user(self) -> &'static str {
        match self {
            Role::Api => "crucible-api",
            Role::Worker => "crucible-worker",
            Role::Admin => "crucible-admin",
        }
    }

    /// The placeholder of the role's password hash in `deploy/redis.conf`.
    fn placeholder(self) -> &'static str {
        match self {
            Role::Api => "@CRUCIBLE_API_PASSWORD_SHA256@",
            Role::Worker => "@CRUCIBLE_WORKER_PASSWORD_SHA256@",
            Role::Admin => "@CRUCIBLE_ADMIN_PASSWORD_SHA256@",
        }
    }

    /// A test password, distinctive enough to be searched for in logs and messages.
    pub fn password(self) -> String {
        format!("pw-{}-{}-Zq8", self.user(), std::process::id())
    }
}

/// `deploy/redis.conf` with every role's password hash filled in.
pub fn render_redis_conf() -> String {
    let path = repo_root().join("deploy/redis.conf");
    let mut conf = std::fs::read_to_string(&path).expect("deploy/redis.conf");
    for role in Role::ALL {
        let hash = hex(&Sha256::digest(role.password().as_bytes()));
        assert!(
            conf.contains(role.placeholder()),
            "{} lacks {}",
            path.display(),
            role.placeholder()
        );
        conf = conf.replace(role.placeholder(), &hash);
    }
    conf
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A throwaway CA with a server certificate for `localhost`/127.0.0.1 and a client certificate,
/// written as PEM files.
pub struct Pki {
    /// The CA certificate, which both sides trust.
    pub ca: PathBuf,
    /// The server's certificate, for `localhost` and 127.0.0.1.
    pub server_cert: PathBuf,
    /// The server certificate's key.
    pub server_key: PathBuf,
    /// A node's certificate, for mutual TLS.
    pub client_cert: PathBuf,
    /// The client certificate's key.
    pub client_key: PathBuf,
}

impl Pki {
    /// Issues a fresh CA and both certificates into `dir` (created if missing).
    pub fn issue(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).expect("pki dir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "crucible test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("ca key"))
            .expect("ca certificate");
        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose, cn: &str| {
            let mut params = CertificateParams::new(names).expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().expect("leaf key");
            let cert = params.signed_by(&key, &ca).expect("leaf certificate");
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(
            vec!["localhost".into(), "127.0.0.1".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            "localhost",
        );
        let (client_cert, client_key) = leaf(
            Vec::new(),
            ExtendedKeyUsagePurpose::ClientAuth,
            "crucible test node",
        );
        let write = |name: &str, pem: &str| {
            let path = dir.join(name);
            std::fs::write(&path, pem).expect("write pem");
            path
        };
        Pki {
            ca: write("ca.crt", &ca.pem()),
            server_cert: write("server.crt", &server_cert),
            server_key: write("server.key", &server_key),
            client_cert: write("client.crt", &client_cert),
            client_key: write("client.key", &client_key),
        }
    }
}

/// The shipped broker configuration on a free TLS port.
pub struct SecureRedis {
    /// Its TLS port on 127.0.0.1 (no plain port).
    pub port: u16,
    /// The certificates it and its clients use.
    pub pki: Pki,
    /// True when the server requires client certificates (`tls-auth-clients yes`).
    pub mutual_tls: bool,
    /// Holds the rendered configuration and the data directory, kept across a restart.
    log_dir: PathBuf,
    /// The running redis-server (replaced by [`SecureRedis::restart`]).
    pub proc: Proc,
}

impl SecureRedis {
    /// Issues the certificates, renders the configuration into `log_dir` and starts the
    /// server; returns once the admin user can connect. `mutual_tls` requires client
    /// certificates.
    pub async fn start(log_dir: &Path, mutual_tls: bool) -> SecureRedis {
        let pki = Pki::issue(&log_dir.join("pki"));
        let port = free_port();
        let proc = Self::spawn(log_dir, &pki, port, mutual_tls, "redis");
        let server = SecureRedis {
            port,
            pki,
            mutual_tls,
            log_dir: log_dir.to_owned(),
            proc,
        };
        server.wait_ready().await;
        server
    }

    /// Stops the server as an operator would (SIGTERM: the AOF is flushed) and starts it again
    /// on the same port, data directory and files; the new log is `redis-restarted.log`.
    pub async fn restart(&mut self) {
        self.stop();
        self.start_again().await;
    }

    /// Stops the server as an operator would (SIGTERM: the AOF is flushed); the port stays
    /// this server's for [`SecureRedis::start_again`] (an outage, as its clients see it).
    pub fn stop(&mut self) {
        assert!(
            self.proc.terminate(Duration::from_secs(15)),
            "redis did not stop on SIGTERM"
        );
    }

    /// Starts a stopped server again on the same port, data directory and files; the new log
    /// is `redis-restarted.log`.
    pub async fn start_again(&mut self) {
        self.proc = Self::spawn(
            &self.log_dir,
            &self.pki,
            self.port,
            self.mutual_tls,
            "redis-restarted",
        );
        self.wait_ready().await;
    }

    fn spawn(log_dir: &Path, pki: &Pki, port: u16, mutual_tls: bool, name: &str) -> Proc {
        let data = log_dir.join("redis-data");
        std::fs::create_dir_all(&data).expect("redis data dir");
        let conf = log_dir.join("redis.conf");
        std::fs::write(&conf, render_redis_conf()).expect("write redis.conf");
        // Only where this test's server differs from a node's: its port, address, data
        // directory and certificate files. Users, commands, keys and TLS policy are the file's.
        let mut cmd = Command::new("redis-server");
        cmd.arg(&conf)
            .args(["--tls-port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--tls-cert-file")
            .arg(&pki.server_cert)
            .arg("--tls-key-file")
            .arg(&pki.server_key)
            .arg("--tls-ca-cert-file")
            .arg(&pki.ca)
            .current_dir(&data);
        if mutual_tls {
            cmd.args(["--tls-auth-clients", "yes"]);
        }
        Proc::spawn(name, cmd, log_dir)
    }

    async fn wait_ready(&self) {
        eventually(
            "the TLS redis to answer the admin",
            Duration::from_secs(15),
            || async { self.connection(Role::Admin).await.ok().map(|_| ()) },
        )
        .await;
    }

    /// The role's URL: its user and password, TLS, the host name its certificate carries.
    pub fn url(&self, role: Role) -> String {
        format!(
            "rediss://{}:{}@localhost:{}",
            role.user(),
            role.password(),
            self.port
        )
    }

    /// A node's environment for `role`: its URL, the CA, and the prefix the file's ACL grants
    /// (`crucible`).
    pub fn node_env(&self, role: Role) -> Vec<(String, String)> {
        let mut env = crate::service_env(&self.url(role), "crucible");
        env.extend(self.tls_env());
        env
    }

    /// The TLS files a node gets, as environment variables.
    pub fn tls_env(&self) -> Vec<(String, String)> {
        let mut env = vec![(
            "CRUCIBLE_REDIS_CA_FILE".to_owned(),
            self.pki.ca.display().to_string(),
        )];
        if self.mutual_tls {
            env.push((
                "CRUCIBLE_REDIS_CLIENT_CERT".to_owned(),
                self.pki.client_cert.display().to_string(),
            ));
            env.push((
                "CRUCIBLE_REDIS_CLIENT_KEY".to_owned(),
                self.pki.client_key.display().to_string(),
            ));
        }
        env
    }

    /// The TLS files a node's broker connection uses: the CA, and the client certificate
    /// when mutual TLS is on.
    pub fn tls_files(&self) -> TlsFiles {
        TlsFiles {
            ca_file: Some(self.pki.ca.clone()),
            client_cert: self.mutual_tls.then(|| self.pki.client_cert.clone()),
            client_key: self.mutual_tls.then(|| self.pki.client_key.clone()),
        }
    }

    /// What a broker connects with as `role`: its URL and the TLS files.
    pub fn target(&self, role: Role) -> RedisTarget {
        RedisTarget::new(self.url(role)).with_tls(self.tls_files())
    }

    /// A plain redis-rs connection as `role`, for commands no broker sends.
    pub async fn connection(
        &self,
        role: Role,
    ) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        self.connect(&self.url(role)).await
    }

    /// A TLS connection that names no user: what a client without credentials gets.
    pub async fn anonymous_connection(
        &self,
    ) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        self.connect(&format!("rediss://localhost:{}", self.port))
            .await
    }

    async fn connect(&self, url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        let pem = |p: &Path| std::fs::read(p).expect("read pem");
        let certificates = redis::TlsCertificates {
            root_cert: Some(pem(&self.pki.ca)),
            client_tls: self.mutual_tls.then(|| redis::ClientTlsConfig {
                client_cert: pem(&self.pki.client_cert),
                client_key: pem(&self.pki.client_key),
            }),
        };
        let client = redis::Client::build_with_tls(url, certificates)?;
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(5)));
        client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
    }

    /// The refusals the server logged (`ACL LOG`, its last 128 distinct ones), as
    /// `user reason object` lines.
    pub async fn acl_denials(&self) -> Vec<String> {
        let mut admin = self
            .connection(Role::Admin)
            .await
            .expect("admin connection");
        let entries: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("ACL")
            .arg("LOG")
            .arg(1000)
            .query_async(&mut admin)
            .await
            .expect("ACL LOG");
        let text = |v: Option<&redis::Value>| match v {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(other) => format!("{other:?}"),
            None => String::new(),
        };
        entries
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}",
                    text(e.get("username")),
                    text(e.get("reason")),
                    text(e.get("object"))
                )
            })
            .collect()
    }
}
