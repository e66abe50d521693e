//! Pure: what `crucible doctor` concludes about the services this node talks to or is: the
//! shared broker (reached with this role's credentials, and whether it keeps its tasks), the
//! API's own start-up rule, and a running API's `/health`.

use super::report::{Check, Role};
use crucible_api_server::auth::AuthMode;
use crucible_shared::HealthStatus;

/// What `CONFIG GET` told of the broker's durability settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerSettings {
    /// The values (`None`: the server did not return that parameter).
    Read {
        /// `maxmemory-policy`.
        maxmemory_policy: Option<String>,
        /// `appendonly`.
        appendonly: Option<String>,
    },
    /// The ACL user may not run CONFIG (every role of deploy/redis.conf).
    Denied(String),
    /// Another error.
    Failed(String),
}

/// The shared broker as this node's role reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisFacts {
    /// REDIS_URL is not set.
    Unset,
    /// Connected (TLS and AUTH as the URL says) and PING answered.
    Reached {
        /// The URL, redacted.
        url: String,
        /// Its durability settings.
        settings: BrokerSettings,
    },
    /// It could not be used.
    Failed {
        /// The URL, redacted.
        url: String,
        /// Why (the process's own start-up diagnosis).
        error: String,
        /// Nothing answered: Redis down or out of reach (rather than refused credentials or TLS).
        unreachable: bool,
    },
}

/// `redis`, `redis config`: the broker answers this role's credentials, and keeps tasks
/// (`noeviction`) across restarts (`appendonly yes`).
pub fn redis_checks(role: Role, redis: &RedisFacts) -> Vec<Check> {
    let (url, settings) = match redis {
        RedisFacts::Unset if role == Role::All => {
            return vec![Check::ok(
                "redis",
                "REDIS_URL unset: crucible up runs its in-process broker",
            )];
        }
        RedisFacts::Unset => {
            return vec![Check::fail(
                "redis",
                "REDIS_URL is not set: this role needs the shared broker",
                "pass the role's env file (--env-file /etc/crucible/worker.env or api.env), or export REDIS_URL",
            )];
        }
        RedisFacts::Failed {
            url,
            error,
            unreachable,
        } => {
            let fix = match unreachable {
                true => {
                    "start crucible-redis on the broker node; check that it binds an address this node reaches (install.sh --redis-bind) and the firewall"
                }
                false => {
                    "fix what the message names: the role's user and password or the TLS files (docs/REDIS.md); copy the role's env file and redis-ca.crt from the broker node again"
                }
            };
            return vec![Check::fail("redis", format!("{url}: {error}"), fix)];
        }
        RedisFacts::Reached { url, settings } => (url, settings),
    };
    let mut out = vec![Check::ok(
        "redis",
        format!("{url}: authenticated, PING answered"),
    )];
    out.push(match settings {
        BrokerSettings::Read {
            maxmemory_policy,
            appendonly,
        } => {
            let mut wrong = Vec::new();
            if maxmemory_policy.as_deref() != Some("noeviction") {
                wrong.push(format!(
                    "maxmemory-policy is {} (Redis may evict queued tasks when full)",
                    maxmemory_policy.as_deref().unwrap_or("unknown")
                ));
            }
            if appendonly.as_deref() != Some("yes") {
                wrong.push(format!(
                    "appendonly is {} (a restart loses every task)",
                    appendonly.as_deref().unwrap_or("unknown")
                ));
            }
            match wrong.is_empty() {
                true => Check::ok("redis config", "maxmemory-policy noeviction, appendonly yes"),
                false => Check::fail(
                    "redis config",
                    wrong.join("; "),
                    "maxmemory-policy noeviction and appendonly yes (deploy/redis.conf has both)",
                ),
            }
        }
        BrokerSettings::Denied(why) => Check::warn(
            "redis config",
            format!("cannot read maxmemory-policy and appendonly: this role's ACL user may not run CONFIG (by design) ({why})"),
            "on the broker node, as the admin user: redis-cli --tls --cacert /etc/crucible/redis-tls/ca.crt --user crucible-admin --askpass CONFIG GET maxmemory-policy (and appendonly); expect noeviction and yes",
        ),
        BrokerSettings::Failed(why) => Check::warn(
            "redis config",
            format!("CONFIG GET failed: {why}"),
            "check maxmemory-policy noeviction and appendonly yes as crucible-admin (redis-cli CONFIG GET)",
        ),
    });
    out
}

/// `auth`: the API's address and CRUCIBLE_AUTH / CRUCIBLE_ADMIN_TOKEN agree (it refuses to
/// start otherwise). `bind`: CRUCIBLE_BIND, when set; `verdict`: what the API's own rule says.
pub fn auth_check(bind: Option<&str>, verdict: Option<Result<AuthMode, String>>) -> Check {
    let Some(bind) = bind else {
        return Check::ok(
            "auth",
            "CRUCIBLE_BIND unset: the API listens on its loopback default, authentication off",
        );
    };
    match verdict {
        None => Check::warn(
            "auth",
            format!("CRUCIBLE_BIND={bind} is not an IP address and port: cannot tell"),
            "give CRUCIBLE_BIND as ADDRESS:PORT, e.g. 0.0.0.0:10907",
        ),
        Some(Ok(AuthMode::Required)) => Check::ok(
            "auth",
            format!("{bind}: bearer tokens required, admin token set"),
        ),
        Some(Ok(AuthMode::Off)) => {
            Check::ok("auth", format!("{bind}: authentication off (single user)"))
        }
        Some(Err(e)) => Check::fail(
            "auth",
            format!("{bind}: the API would refuse to start: {e}"),
            "set CRUCIBLE_ADMIN_TOKEN (openssl rand -hex 32) in /etc/crucible/api.env, the same on every replica",
        ),
    }
}

/// `api`: `GET <url>/health` answered; `answer` is its status code and body.
pub fn api_check(url: &str, answer: &Result<(u16, String), String>) -> Check {
    let health = format!("{}/health", url.trim_end_matches('/'));
    let down_fix = "is crucible-api running and listening there? systemctl status crucible-api; CRUCIBLE_BIND in /etc/crucible/api.env";
    let (status, body) = match answer {
        Ok(a) => a,
        Err(e) => return Check::fail("api", format!("{health}: {e}"), down_fix),
    };
    let parsed: Option<HealthStatus> = serde_json::from_str(body).ok();
    match (status, parsed) {
        (200, Some(h)) if h.status == "ok" => Check::ok(
            "api",
            format!(
                "{health}: ok ({} broker, {} worker(s) ready, version {})",
                h.broker, h.workers_alive, h.version
            ),
        ),
        (200, Some(h)) => Check::warn(
            "api",
            format!(
                "{health}: {} ({} broker up, no worker ready, {} unhealthy)",
                h.status, h.broker, h.workers_unhealthy
            ),
            "start the workers (crucible doctor --role worker on the GPU nodes says what they lack)",
        ),
        (503, _) => Check::fail(
            "api",
            format!("{health}: 503, the API cannot reach its broker"),
            "check the API's REDIS_URL and the broker (crucible doctor --role api --env-file /etc/crucible/api.env on that node)",
        ),
        (code, _) => Check::fail(
            "api",
            format!("{health}: unexpected answer {code}"),
            format!("{url} may not be a Crucible API: {down_fix}"),
        ),
    }
}

#[cfg(test)]
mod tests;
