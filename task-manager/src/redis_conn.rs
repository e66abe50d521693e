//! How a process reaches Redis. [`RedisTarget`] is the URL (the credentials and the choice of
//! TLS live in it) plus the TLS files the environment names; [`redact_url`] is the only form of
//! the URL that is ever printed; [`ConnectError`] tells a configuration that cannot work (wrong
//! password, failed TLS handshake, a permission the ACL user lacks: fatal at startup) from a
//! Redis that is not up yet (tolerated: requests fail until it is).
//!
//! URLs (redis-rs): `redis://host:6379`, `redis://:password@host` (the `default` user),
//! `redis://user:password@host` (an ACL user), and `rediss://...` for TLS: the server's
//! certificate is checked against the system roots, or against [`CA_FILE_ENV`] alone when it is
//! set. Reserved characters in a password (`@ : / ? # %`) are percent-encoded. Certificate
//! checks cannot be turned off (`#insecure` is refused). Database 0 only: deployments sharing a
//! Redis are separated by the key prefix, which the ACL users of `deploy/redis.conf` are bound to.
//!
//! A primary managed by Redis Sentinel is named by `redis+sentinel://` or, over TLS,
//! `rediss+sentinel://` (`redis_conn/sentinel.rs` parses it); every connection then goes to the
//! primary the Sentinels name at the time, and the pool (`redis_conn/pool.rs`) drops
//! connections made to a former one. The TLS files the environment names are read and checked
//! in `redis_conn/tls.rs`.

mod pool;
mod sentinel;
mod tls;

pub(crate) use pool::{Connection, Manager, Nodes, Pool};
use sentinel::{Primary, SentinelUrl, is_sentinel_url};
pub use tls::TlsFiles;

use redis::{ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError, ServerErrorKind};
use std::path::PathBuf;
use std::time::Duration;

/// How long one connection attempt to Redis may take.
pub(crate) const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The shared broker's URL.
pub const REDIS_URL_ENV: &str = "REDIS_URL";
/// `crucible up`: the URL of its workers when REDIS_URL is the API's (a user per role).
pub const WORKER_REDIS_URL_ENV: &str = "CRUCIBLE_WORKER_REDIS_URL";
/// PEM bundle of the CA(s) the server's certificate must chain to, replacing the system roots
/// (a deployment's private CA).
pub const CA_FILE_ENV: &str = "CRUCIBLE_REDIS_CA_FILE";
/// PEM certificate chain presented to the server, for `tls-auth-clients yes` (mutual TLS).
pub const CLIENT_CERT_ENV: &str = "CRUCIBLE_REDIS_CLIENT_CERT";
/// PEM private key of [`CLIENT_CERT_ENV`].
pub const CLIENT_KEY_ENV: &str = "CRUCIBLE_REDIS_CLIENT_KEY";
/// Every variable that carries a Redis credential or names a TLS file. None of them ever reaches
/// a task child (the worker's child environment is an allowlist that refuses these names).
pub const REDIS_ENV_VARS: [&str; 5] = [
    REDIS_URL_ENV,
    WORKER_REDIS_URL_ENV,
    CA_FILE_ENV,
    CLIENT_CERT_ENV,
    CLIENT_KEY_ENV,
];

/// Why Redis could not be used. [`ConnectError::is_transient`] splits it: only
/// `Unreachable` may heal by waiting.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL does not parse, or asks for `#insecure` (certificate checks off).
    #[error("Redis URL {url} is not usable: {reason}")]
    InvalidUrl {
        /// The URL, redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A TLS file that is missing, unreadable or holds no usable PEM.
    #[error("{var}={path}: {reason}")]
    TlsFile {
        /// The variable that named the file.
        var: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// TLS settings that contradict each other or the URL.
    #[error("{0}")]
    TlsSettings(String),
    /// The server refused the URL's user or password.
    #[error(
        "redis at {url} refused the credentials ({detail}): the user in the URL is unknown or disabled, or its password is wrong or missing"
    )]
    Auth {
        /// The URL, redacted.
        url: String,
        /// What the client library said.
        detail: String,
    },
    /// The TLS handshake failed (certificate not trusted, wrong host, client certificate
    /// required).
    #[error("TLS with redis at {url} failed: {detail}")]
    Tls {
        /// The URL, redacted.
        url: String,
        /// What the client library said.
        detail: String,
    },
    /// The server accepted TCP and then dropped the connection: typically plain `redis://`
    /// to a TLS port.
    #[error(
        "redis at {url} closed the connection during the handshake ({detail}): a server that speaks TLS needs a rediss:// URL"
    )]
    Handshake {
        /// The URL, redacted.
        url: String,
        /// What the client library said.
        detail: String,
    },
    /// The ACL user lacks a command or key this role needs.
    #[error(
        "redis at {url} refused a command to this user ({detail}): its ACL lacks a permission this role needs (deploy/redis.conf)"
    )]
    Permission {
        /// The URL, redacted.
        url: String,
        /// What the client library said.
        detail: String,
    },
    /// No TCP connection, a timeout, or a server still loading its data: the only transient
    /// error.
    #[error("redis at {url} cannot be reached: {detail}")]
    Unreachable {
        /// The URL, redacted.
        url: String,
        /// What the client library said.
        detail: String,
    },
}

impl ConnectError {
    /// True when the configuration may be right and Redis simply is not up (yet): worth starting
    /// anyway, as every request retries. Everything else will not heal by waiting.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }
}

/// The URL with its password (and a `pass` query parameter) replaced by `***`, for logs and
/// errors. A string that does not parse as a URL is not echoed at all: it may be a password.
pub fn redact_url(raw: &str) -> String {
    if is_sentinel_url(raw) {
        return SentinelUrl::parse(raw)
            .map(|u| u.redacted())
            .unwrap_or_else(|_| sentinel::redact_unparsed(raw));
    }
    let Ok(mut url) = url::Url::parse(raw) else {
        return "<unparseable URL>".to_owned();
    };
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    let secret_query = url
        .query_pairs()
        .any(|(k, _)| k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password"));
    if secret_query {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let secret = k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password");
                (
                    k.into_owned(),
                    if secret { "***".into() } else { v.into_owned() },
                )
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

/// Where and how to connect. Its `Debug` form is redacted.
#[derive(Clone)]
pub struct RedisTarget {
    url: String,
    tls: TlsFiles,
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTarget")
            .field("url", &self.redacted())
            .field("tls", &self.tls)
            .finish()
    }
}

impl RedisTarget {
    /// The URL alone: a `rediss://` server is checked against the system roots.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            tls: TlsFiles::default(),
        }
    }

    /// The same URL with these TLS files (checked when the client is built, not here).
    pub fn with_tls(mut self, tls: TlsFiles) -> Self {
        self.tls = tls;
        self
    }

    /// The URL with the TLS files of this process's environment.
    pub fn from_env(url: impl Into<String>) -> Result<Self, ConnectError> {
        Ok(Self::new(url).with_tls(TlsFiles::from_lookup(|k| std::env::var(k).ok())?))
    }

    /// The URL as it may be printed.
    pub fn redacted(&self) -> String {
        redact_url(&self.url)
    }

    /// Where every connection is made: the URL's server, or the primary its Sentinels name.
    pub(crate) fn nodes(&self) -> Result<Nodes, ConnectError> {
        if !is_sentinel_url(&self.url) {
            return self.client().map(Nodes::Direct);
        }
        let invalid = |reason: String| ConnectError::InvalidUrl {
            url: self.redacted(),
            reason,
        };
        let url = SentinelUrl::parse(&self.url).map_err(invalid)?;
        if !url.tls && !self.tls.is_empty() {
            return Err(ConnectError::TlsSettings(format!(
                "TLS files are set ({}) but the Redis URL {} is not rediss+sentinel://: the \
                 connections would not be encrypted",
                self.tls_vars_set().join(", "),
                self.redacted()
            )));
        }
        if url.tls {
            // ring is the one provider built in (see `client`).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let certs = if url.tls && !self.tls.is_empty() {
            Some(self.tls.load()?)
        } else {
            None
        };
        Primary::new(url, certs.as_ref())
            .map(Nodes::Sentinel)
            .map_err(|e| invalid(e.to_string()))
    }

    /// The client of a single server's URL: URL parsed, TLS files read and checked.
    pub(crate) fn client(&self) -> Result<redis::Client, ConnectError> {
        let invalid = |reason: String| ConnectError::InvalidUrl {
            url: self.redacted(),
            reason,
        };
        let info = self
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| invalid(e.to_string()))?;
        // No `CLIENT SETINFO` on connect: the ACL users need not (and do not) allow it.
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.set_redis_settings(settings);
        let tls = match info.addr() {
            ConnectionAddr::TcpTls { insecure: true, .. } => {
                return Err(invalid(
                    "#insecure turns off certificate checks; give the CA in CRUCIBLE_REDIS_CA_FILE instead"
                        .to_owned(),
                ));
            }
            ConnectionAddr::TcpTls { .. } => true,
            _ => false,
        };
        if !tls {
            if !self.tls.is_empty() {
                return Err(ConnectError::TlsSettings(format!(
                    "TLS files are set ({}) but the Redis URL {} is not rediss://: the connection \
                     would not be encrypted",
                    self.tls_vars_set().join(", "),
                    self.redacted()
                )));
            }
            return redis::Client::open(info).map_err(|e| invalid(e.to_string()));
        }
        // ring is the one provider built in; installing it names it when another crate in the
        // binary would make the choice ambiguous. Already installed (by us or the binary) is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        if self.tls.is_empty() {
            return redis::Client::open(info).map_err(|e| invalid(e.to_string()));
        }
        let certificates = self.tls.load()?;
        redis::Client::build_with_tls(info, certificates).map_err(|e| {
            ConnectError::TlsSettings(format!("TLS files for {}: {e}", self.redacted()))
        })
    }

    fn tls_vars_set(&self) -> Vec<&'static str> {
        [
            (CA_FILE_ENV, &self.tls.ca_file),
            (CLIENT_CERT_ENV, &self.tls.client_cert),
            (CLIENT_KEY_ENV, &self.tls.client_key),
        ]
        .into_iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| k)
        .collect()
    }
}

/// Opens one connection and sends `PING`. A server that cannot be reached over TCP (or is still
/// loading its data) is [`ConnectError::Unreachable`]; a server that accepts the TCP connection
/// and then fails the TLS handshake, the credentials or the command is misconfigured for us.
pub(crate) async fn check(nodes: &Nodes, url: &str, timeout: Duration) -> Result<(), ConnectError> {
    match nodes {
        Nodes::Direct(client) => checked_connection(client, url, timeout).await.map(drop),
        Nodes::Sentinel(primary) => sentinel::checked_connection(primary, timeout)
            .await
            .map(drop),
    }
}

impl RedisTarget {
    /// One connection that answered `PING`, for an operator's checks (`crucible doctor`): the
    /// same URL, TLS files and diagnosis as a process's start-up, except that a server that
    /// cannot be reached is an error here too.
    pub async fn connect(&self) -> Result<redis::aio::MultiplexedConnection, ConnectError> {
        match self.nodes()? {
            Nodes::Direct(client) => {
                checked_connection(&client, &self.redacted(), CONNECT_TIMEOUT).await
            }
            Nodes::Sentinel(primary) => {
                sentinel::checked_connection(&primary, CONNECT_TIMEOUT).await
            }
        }
    }
}

/// [`check`]'s connection, kept.
async fn checked_connection(
    client: &redis::Client,
    url: &str,
    timeout: Duration,
) -> Result<redis::aio::MultiplexedConnection, ConnectError> {
    let info = client.get_connection_info();
    let tcp = match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some((host.clone(), *port))
        }
        _ => None,
    };
    let unreachable = |detail: String| ConnectError::Unreachable {
        url: url.to_owned(),
        detail,
    };
    if let Some(addr) = tcp {
        match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => return Err(unreachable(format!("no TCP connection within {timeout:?}"))),
        }
    }
    let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    let cfg = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let result = async {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        Ok(conn)
    }
    .await;
    result.map_err(|e| classify(&e, url, tls))
}

/// What a failed connection attempt to a server that accepted TCP means.
fn classify(e: &RedisError, url: &str, tls: bool) -> ConnectError {
    let url = url.to_owned();
    let detail = e.to_string();
    match (e.kind(), e.code()) {
        (ErrorKind::AuthenticationFailed, _) | (_, Some("WRONGPASS" | "NOAUTH")) => {
            ConnectError::Auth { url, detail }
        }
        (ErrorKind::Server(ServerErrorKind::NoPerm), _) | (_, Some("NOPERM")) => {
            ConnectError::Permission { url, detail }
        }
        (ErrorKind::Server(ServerErrorKind::BusyLoading), _) => ConnectError::Unreachable {
            url,
            detail: format!("still loading its data: {detail}"),
        },
        _ if e.is_timeout() => ConnectError::Unreachable { url, detail },
        (ErrorKind::Io, _) if tls => ConnectError::Tls {
            url,
            detail: tls_hint(detail),
        },
        (ErrorKind::Io, _) => ConnectError::Handshake { url, detail },
        (ErrorKind::InvalidClientConfig, _) => ConnectError::TlsSettings(format!(
            "redis at {url} cannot be used with these settings: {detail}"
        )),
        _ => ConnectError::Handshake { url, detail },
    }
}

/// The remedy of the usual certificate failures, after rustls's own words.
fn tls_hint(detail: String) -> String {
    if detail.contains("UnknownIssuer") {
        format!(
            "{detail}: the server's certificate is not signed by a trusted CA; set {CA_FILE_ENV} to the CA that signed it"
        )
    } else if detail.contains("NotValidForName") {
        format!("{detail}: the server's certificate does not name the host in the URL")
    } else if detail.contains("CertificateRequired") {
        format!(
            "{detail}: the server requires a client certificate ({CLIENT_CERT_ENV}, {CLIENT_KEY_ENV})"
        )
    } else {
        detail
    }
}

#[cfg(test)]
mod tests;
