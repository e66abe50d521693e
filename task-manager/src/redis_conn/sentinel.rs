//! A primary managed by Redis Sentinel: the URL form that names it, and [`Primary`], which
//! asks the Sentinels where the primary is each time a connection is made (and every
//! [`WATCH_INTERVAL`] besides).
//!
//! `redis+sentinel://[user:password@]host1:26379,host2:26379/<master-name>` names the
//! Sentinels (one or more `host:port`, port 26379 when left out) and the name they monitor the
//! primary by; the user and password are those of the data nodes (the same ACL user as with a
//! plain `redis://` URL). Sentinels that require a password of their own take it in the query:
//! `?sentinel_username=...&sentinel_password=...`. Reserved characters are percent-encoded, as
//! in any Redis URL. The form cannot be parsed as one URL (several hosts), so it is parsed here,
//! and [`SentinelUrl::redacted`] is how it is printed. `rediss+sentinel://` speaks TLS to the
//! Sentinels and to the data nodes alike, checked against the same CA (`CRUCIBLE_REDIS_CA_FILE`,
//! or the system roots) and with the same client certificate, if any.

use super::ConnectError;
use percent_encoding::percent_decode_str;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redis::sentinel::SentinelClientBuilder;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, RedisError,
    RedisResult, TlsCertificates, TlsMode,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The scheme of a Sentinel-managed primary.
pub(crate) const SENTINEL_SCHEME: &str = "redis+sentinel";
/// The same over TLS, to the Sentinels and the data nodes.
pub(crate) const SENTINEL_TLS_SCHEME: &str = "rediss+sentinel";
/// The Sentinels' own port, when a host names none.
const SENTINEL_PORT: u16 = 26379;

/// True when `raw` names Sentinels rather than one server.
pub(crate) fn is_sentinel_url(raw: &str) -> bool {
    let scheme = raw.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    matches!(
        scheme.as_deref(),
        Some(SENTINEL_SCHEME | SENTINEL_TLS_SCHEME)
    )
}

/// A Sentinel URL that does not parse, as it may be printed: the password after the user and
/// the whole query (it may hold `sentinel_password`) left out.
pub(crate) fn redact_unparsed(raw: &str) -> String {
    let Some((scheme, rest)) = raw.split_once("://") else {
        return "<unparseable URL>".to_owned();
    };
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    let (authority, path) = rest
        .split_once('/')
        .map_or((rest, None), |(a, p)| (a, Some(p)));
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{hosts}"),
            None => format!("{userinfo}@{hosts}"),
        },
        None => authority.to_owned(),
    };
    match path {
        Some(p) => format!("{scheme}://{authority}/{p}"),
        None => format!("{scheme}://{authority}"),
    }
}

/// A user and password, decoded. Never printed.
#[derive(Clone, Default, PartialEq)]
pub(crate) struct Credentials {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

/// A parsed `redis+sentinel://` URL.
#[derive(Clone, PartialEq)]
pub(crate) struct SentinelUrl {
    /// `rediss+sentinel://`: TLS to the Sentinels and the data nodes.
    pub(crate) tls: bool,
    /// The Sentinels, in the order they are asked.
    pub(crate) sentinels: Vec<(String, u16)>,
    /// The name the Sentinels monitor the primary by (`sentinel monitor <name> ...`).
    pub(crate) master_name: String,
    /// For the primary (and its replicas): the ACL user of this role.
    pub(crate) data: Credentials,
    /// For the Sentinels, when they have `requirepass` / ACL users of their own.
    pub(crate) sentinel: Credentials,
}

impl std::fmt::Debug for SentinelUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

fn decode(what: &str, raw: &str) -> Result<String, String> {
    percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| format!("the {what} is not UTF-8 once percent-decoded"))
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

impl SentinelUrl {
    /// Parses the URL. The error never includes the password.
    pub(crate) fn parse(raw: &str) -> Result<Self, String> {
        let (scheme, rest) = raw
            .split_once("://")
            .ok_or("a Sentinel URL starts with redis+sentinel://")?;
        let tls = scheme.eq_ignore_ascii_case(SENTINEL_TLS_SCHEME);
        if !tls && !scheme.eq_ignore_ascii_case(SENTINEL_SCHEME) {
            return Err(format!("the scheme is not {SENTINEL_SCHEME}"));
        }
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest
            .split_once('/')
            .ok_or("the URL names no master: redis+sentinel://host:26379/<master-name>")?;
        let master_name = decode("master name", path)?;
        if master_name.is_empty() || master_name.contains('/') {
            return Err(
                "the path must be the master name the Sentinels monitor, e.g. /crucible".to_owned(),
            );
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let data = match userinfo {
            None => Credentials::default(),
            Some(u) => {
                let (user, pass) = u.split_once(':').map_or((u, None), |(a, b)| (a, Some(b)));
                Credentials {
                    username: non_empty(decode("user", user)?),
                    password: pass.map(|p| decode("password", p)).transpose()?,
                }
            }
        };
        let sentinels = hosts
            .split(',')
            .map(parse_host)
            .collect::<Result<Vec<_>, _>>()?;
        let mut sentinel = Credentials::default();
        for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
            match key.as_ref() {
                "sentinel_username" => sentinel.username = non_empty(value.into_owned()),
                "sentinel_password" => sentinel.password = Some(value.into_owned()),
                other => {
                    return Err(format!(
                        "unknown query parameter {other:?} (sentinel_username and sentinel_password are known)"
                    ));
                }
            }
        }
        Ok(Self {
            tls,
            sentinels,
            master_name,
            data,
            sentinel,
        })
    }

    /// The URL as it may be printed: passwords replaced by `***`.
    pub(crate) fn redacted(&self) -> String {
        let userinfo = match (&self.data.username, &self.data.password) {
            (None, None) => String::new(),
            (u, p) => format!(
                "{}{}@",
                u.as_deref().unwrap_or(""),
                if p.is_some() { ":***" } else { "" }
            ),
        };
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(h, p)| format!("{h}:{p}"))
            .collect();
        let mut query = Vec::new();
        if let Some(u) = &self.sentinel.username {
            query.push(format!("sentinel_username={u}"));
        }
        if self.sentinel.password.is_some() {
            query.push("sentinel_password=***".to_owned());
        }
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };
        let scheme = if self.tls {
            SENTINEL_TLS_SCHEME
        } else {
            SENTINEL_SCHEME
        };
        format!(
            "{scheme}://{userinfo}{}/{}{query}",
            hosts.join(","),
            self.master_name
        )
    }

    /// The Sentinels' addresses, for a TCP probe.
    pub(crate) fn sentinel_addrs(&self) -> &[(String, u16)] {
        &self.sentinels
    }

    /// How to reach each Sentinel, its credentials (and with TLS, `certs`) included.
    fn sentinel_infos(&self, certs: Option<&TlsCertificates>) -> RedisResult<Vec<ConnectionInfo>> {
        self.sentinels
            .iter()
            .map(|(h, p)| {
                let info = node_addr(self.tls, h, *p)
                    .into_connection_info()?
                    .set_redis_settings(settings(&self.sentinel));
                match certs {
                    // The client fills in the parsed certificates; its info carries them.
                    Some(c) => Ok(Client::build_with_tls(info, c.clone())?
                        .get_connection_info()
                        .clone()),
                    None => Ok(info),
                }
            })
            .collect()
    }

    /// The client that asks the Sentinels for the primary and checks (`ROLE`) that it is one.
    fn client(&self, certs: Option<&TlsCertificates>) -> RedisResult<SentinelClient> {
        if !self.tls {
            let nodes = SentinelNodeConnectionInfo::default()
                .set_redis_connection_info(settings(&self.data));
            return SentinelClient::build(
                self.sentinel_infos(None)?,
                &self.master_name,
                Some(nodes),
                SentinelServerType::Master,
            );
        }
        // Only the builder passes a private CA on to the data nodes' connections (it cannot
        // skip `CLIENT SETINFO`, whose refusal by the ACL users the client ignores).
        let addrs = self.sentinels.iter().map(|(h, p)| node_addr(true, h, *p));
        let mut b =
            SentinelClientBuilder::new(addrs, &self.master_name, SentinelServerType::Master)?
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
        if let Some(c) = certs {
            b = b
                .set_client_to_redis_certificates(c.clone())
                .set_client_to_sentinel_certificates(c.clone());
        }
        if let Some(u) = &self.data.username {
            b = b.set_client_to_redis_username(u);
        }
        if let Some(p) = &self.data.password {
            b = b.set_client_to_redis_password(p);
        }
        if let Some(u) = &self.sentinel.username {
            b = b.set_client_to_sentinel_username(u);
        }
        if let Some(p) = &self.sentinel.password {
            b = b.set_client_to_sentinel_password(p);
        }
        b.build()
    }
}

/// A node's address, TLS with certificate checks when `tls`.
fn node_addr(tls: bool, host: &str, port: u16) -> ConnectionAddr {
    if tls {
        ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host.to_owned(), port)
    }
}

/// The handshake of a connection with these credentials (no `CLIENT SETINFO`: the ACL users
/// need not allow it).
fn settings(c: &Credentials) -> RedisConnectionInfo {
    let mut s = RedisConnectionInfo::default().set_skip_set_lib_name();
    if let Some(u) = &c.username {
        s = s.set_username(u);
    }
    if let Some(p) = &c.password {
        s = s.set_password(p);
    }
    s
}

/// `host`, `host:port` or `[v6]:port`.
fn parse_host(raw: &str) -> Result<(String, u16), String> {
    if raw.is_empty() {
        return Err("an empty Sentinel host (two commas, or none before the path)".to_owned());
    }
    let (host, port) = match raw.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && (!h.starts_with('[') || h.ends_with(']')) => {
            let port = p
                .parse::<u16>()
                .map_err(|_| format!("Sentinel {raw:?}: the port is not a number"))?;
            (h, port)
        }
        _ => (raw, SENTINEL_PORT),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("Sentinel {raw:?} names no host"));
    }
    Ok((host.to_owned(), port))
}

/// How often a process asks a Sentinel which node is the primary, besides each new connection:
/// a primary demoted while still up (`SENTINEL FAILOVER`, a partition) keeps answering the
/// connections made to it until Sentinel reconfigures it, which can take seconds, and writes it
/// takes meanwhile are lost when it becomes a replica.
const WATCH_INTERVAL: Duration = Duration::from_millis(500);

/// The primary's address last seen and how many different ones were seen: shared by the
/// lookups of new connections and the watch.
#[derive(Default)]
struct Seen {
    last: Mutex<Option<String>>,
    epoch: AtomicU64,
}

impl Seen {
    /// Records that the Sentinels name `addr`; a change starts a new epoch.
    fn observe(&self, addr: String, master: &str) -> u64 {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() != Some(addr.as_str()) {
            if last.is_some() {
                self.epoch.fetch_add(1, Ordering::AcqRel);
                tracing::warn!(primary = %addr, master, "redis primary changed; reconnecting to it");
            }
            *last = Some(addr);
        }
        self.epoch.load(Ordering::Acquire)
    }
}

/// The current primary, as the Sentinels name it. Every connection is made to the primary of
/// the moment; [`Primary::epoch`] counts the changes seen (by a new connection's lookup, or by
/// the watch every [`WATCH_INTERVAL`]), so that the pool drops connections made to an earlier
/// primary.
pub(crate) struct Primary {
    url: SentinelUrl,
    /// The client caches its connections to the Sentinels; one lookup at a time.
    client: tokio::sync::Mutex<SentinelClient>,
    seen: Arc<Seen>,
    /// How the watch reaches the Sentinels.
    sentinels: Vec<ConnectionInfo>,
    /// The watch task, started with the first lookup (a runtime is running then).
    watch: std::sync::OnceLock<()>,
}

impl Primary {
    /// `certs`: the TLS files' contents, for `rediss+sentinel://` (none: the system roots).
    pub(crate) fn new(url: SentinelUrl, certs: Option<&TlsCertificates>) -> RedisResult<Self> {
        Ok(Self {
            client: tokio::sync::Mutex::new(url.client(certs)?),
            sentinels: url.sentinel_infos(certs)?,
            url,
            seen: Arc::default(),
            watch: std::sync::OnceLock::new(),
        })
    }

    pub(crate) fn url(&self) -> &SentinelUrl {
        &self.url
    }

    /// How many times the primary has changed, as far as this process has seen.
    pub(crate) fn epoch(&self) -> u64 {
        self.seen.epoch.load(Ordering::Acquire)
    }

    /// A client for the primary of the moment (asked of the Sentinels, checked with `ROLE`),
    /// within `timeout`, and the epoch it belongs to.
    pub(crate) async fn client(&self, timeout: Duration) -> RedisResult<(redis::Client, u64)> {
        self.watch.get_or_init(|| {
            tokio::spawn(watch(
                Arc::downgrade(&self.seen),
                self.sentinels.clone(),
                self.url.master_name.clone(),
            ));
        });
        let lookup = async { self.client.lock().await.async_get_client().await };
        let client = tokio::time::timeout(timeout, lookup).await.map_err(|_| {
            RedisError::from((redis::ErrorKind::Io, "no Sentinel named a primary in time"))
        })??;
        let addr = client.get_connection_info().addr().to_string();
        let epoch = self.seen.observe(addr, &self.url.master_name);
        Ok((client, epoch))
    }
}

/// Asks the Sentinels (one at a time, the next when one fails) which node is the primary,
/// every [`WATCH_INTERVAL`], until the [`Primary`] is dropped.
async fn watch(seen: Weak<Seen>, sentinels: Vec<ConnectionInfo>, master: String) {
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(WATCH_INTERVAL))
        .set_response_timeout(Some(WATCH_INTERVAL));
    let ask = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(&master)
        .clone();
    let mut conn: Option<MultiplexedConnection> = None;
    let mut next = 0;
    loop {
        tokio::time::sleep(WATCH_INTERVAL).await;
        let Some(seen) = seen.upgrade() else {
            return;
        };
        if conn.is_none() {
            let info = sentinels[next % sentinels.len()].clone();
            next += 1;
            conn = match redis::Client::open(info) {
                Ok(c) => c
                    .get_multiplexed_async_connection_with_config(&cfg)
                    .await
                    .ok(),
                Err(_) => None,
            };
        }
        let Some(c) = conn.as_mut() else {
            continue;
        };
        match ask.query_async::<Option<(String, u16)>>(c).await {
            Ok(Some((host, port))) => {
                seen.observe(format!("{host}:{port}"), &master);
            }
            Ok(None) => {}
            Err(_) => conn = None,
        }
    }
}

/// [`super::check`] for Sentinels: one connection to the primary they name, which answered
/// `PING`. Refused credentials (the data nodes' or the Sentinels') or a missing permission
/// (`ROLE`, which confirms the primary, is in each role's ACL) are fatal; anything else (no
/// Sentinel up, none naming a primary yet, a failover in progress, a wrong master name) is
/// [`ConnectError::Unreachable`], as it may heal.
pub(crate) async fn checked_connection(
    primary: &Primary,
    timeout: Duration,
) -> Result<MultiplexedConnection, ConnectError> {
    let url = primary.url().redacted();
    let unreachable = |detail: String| ConnectError::Unreachable {
        url: url.clone(),
        detail,
    };
    let mut listening = false;
    for (host, port) in primary.url().sentinel_addrs() {
        let probe = tokio::net::TcpStream::connect((host.as_str(), *port));
        if matches!(tokio::time::timeout(timeout, probe).await, Ok(Ok(_))) {
            listening = true;
            break;
        }
    }
    if !listening {
        return Err(unreachable(
            "no Sentinel accepts a TCP connection".to_owned(),
        ));
    }
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let result = async {
        let (client, _) = primary.client(timeout).await?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        Ok::<_, RedisError>(conn)
    }
    .await;
    result.map_err(|e| match super::classify(&e, &url, primary.url().tls) {
        fatal @ (ConnectError::Auth { .. } | ConnectError::Permission { .. }) => fatal,
        _ => unreachable(format!(
            "{e} (is {:?} the name the Sentinels monitor? is a failover in progress?)",
            primary.url().master_name
        )),
    })
}

#[cfg(test)]
mod tests;
