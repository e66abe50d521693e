//! Settings every process must agree on, parsed from environment-style key/value pairs by a pure
//! function (the caller passes the lookup, so tests need no environment).

use std::time::Duration;

/// Why [`BrokerConfig`] could not be read; fatal at startup, before any connection is made.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// A variable is set but does not parse as its type.
    #[error("{key}: cannot parse {value:?}: {reason}")]
    Invalid {
        /// The variable, e.g. `CRUCIBLE_QUEUE_CAP`.
        key: String,
        /// Its value as set, untrimmed.
        value: String,
        /// The parser's complaint.
        reason: String,
    },
}

/// Queue semantics shared by the API, the reaper and the workers.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerConfig {
    /// A lease not renewed for this long is returned to the queue by the reaper.
    pub lease_ttl: Duration,
    /// Attempts before a task whose workers keep disappearing is marked `failed`.
    pub max_attempts: u32,
    /// How long finished tasks, batches and idempotency keys are kept.
    pub result_ttl: Duration,
    /// Most queued tasks; beyond it submissions get 429.
    pub queue_cap: u64,
    /// A worker with no heartbeat for this long is reported `lost`.
    pub worker_liveness: Duration,
    /// Key prefix, so several deployments (or tests) can share one Redis.
    pub key_prefix: String,
    /// The device class results are cached for. A result depends on the GPU model, driver and
    /// software versions it was measured with, but the worker that will run a task is unknown
    /// when it is submitted, so cached results are keyed by the scope of the broker the
    /// request arrives at. A deployment whose workers differ in GPU model or software versions
    /// must give each homogeneous pool its own scope (and queue), or results measured on one
    /// kind of device are served for another.
    pub cache_scope: String,
    /// Most bytes of open (queued or running) tasks, counted as the length of each task's
    /// spec JSON; beyond it submissions get 429. Keep it well under Redis's `maxmemory`
    /// (deploy/redis.conf), which also holds results, batches and the cache.
    pub queue_cap_bytes: u64,
    /// Replicas that must have a terminal transition's write (a submission, a verdict) before
    /// the broker answers: after each, `WAIT <n> <redis_wait_timeout>` on the same connection.
    /// 0 (the default) sends no `WAIT`: with asynchronous replication a failover can then lose
    /// the last writes the old primary acknowledged (docs/REDIS.md).
    pub redis_wait_replicas: u32,
    /// How long one `WAIT` may block. When it passes with fewer replicas, the transition stands
    /// (it is on the primary) and a warning is logged.
    pub redis_wait_timeout: Duration,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(30),
            max_attempts: 3,
            result_ttl: Duration::from_secs(24 * 3600),
            queue_cap: 100_000,
            worker_liveness: Duration::from_secs(15),
            key_prefix: "crucible".to_owned(),
            cache_scope: "default".to_owned(),
            queue_cap_bytes: 1 << 30,
            redis_wait_replicas: 0,
            redis_wait_timeout: Duration::from_millis(1000),
        }
    }
}

impl BrokerConfig {
    /// Reads `CRUCIBLE_LEASE_TTL_MS`, `CRUCIBLE_MAX_ATTEMPTS`, `CRUCIBLE_RESULT_TTL_S`,
    /// `CRUCIBLE_QUEUE_CAP`, `CRUCIBLE_WORKER_LIVENESS_MS`, `CRUCIBLE_KEY_PREFIX`,
    /// `CRUCIBLE_CACHE_SCOPE`, `CRUCIBLE_QUEUE_CAP_BYTES`, `CRUCIBLE_REDIS_WAIT_REPLICAS`,
    /// `CRUCIBLE_REDIS_WAIT_TIMEOUT_MS`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut cfg = Self::default();
        if let Some(ms) = parse::<u64>(&lookup, "CRUCIBLE_LEASE_TTL_MS")? {
            cfg.lease_ttl = Duration::from_millis(ms.max(100));
        }
        if let Some(n) = parse::<u32>(&lookup, "CRUCIBLE_MAX_ATTEMPTS")? {
            cfg.max_attempts = n.max(1);
        }
        if let Some(s) = parse::<u64>(&lookup, "CRUCIBLE_RESULT_TTL_S")? {
            cfg.result_ttl = Duration::from_secs(s.max(1));
        }
        if let Some(n) = parse::<u64>(&lookup, "CRUCIBLE_QUEUE_CAP")? {
            cfg.queue_cap = n;
        }
        if let Some(ms) = parse::<u64>(&lookup, "CRUCIBLE_WORKER_LIVENESS_MS")? {
            cfg.worker_liveness = Duration::from_millis(ms.max(100));
        }
        if let Some(p) = lookup("CRUCIBLE_KEY_PREFIX").filter(|p| !p.is_empty()) {
            cfg.key_prefix = p;
        }
        if let Some(s) = lookup("CRUCIBLE_CACHE_SCOPE").filter(|s| !s.trim().is_empty()) {
            cfg.cache_scope = s.trim().to_owned();
        }
        if let Some(n) = parse::<u64>(&lookup, "CRUCIBLE_QUEUE_CAP_BYTES")? {
            cfg.queue_cap_bytes = n;
        }
        if let Some(n) = parse::<u32>(&lookup, "CRUCIBLE_REDIS_WAIT_REPLICAS")? {
            cfg.redis_wait_replicas = n;
        }
        if let Some(ms) = parse::<u64>(&lookup, "CRUCIBLE_REDIS_WAIT_TIMEOUT_MS")? {
            // `WAIT` with timeout 0 blocks for ever.
            cfg.redis_wait_timeout = Duration::from_millis(ms.max(1));
        }
        Ok(cfg)
    }

    /// [`BrokerConfig::from_lookup`] over the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }
}

/// The value of `key` parsed as `T`; `None` when unset or blank (so the default applies).
pub fn parse<T: std::str::FromStr>(
    lookup: &impl Fn(&str) -> Option<String>,
    key: &str,
) -> Result<Option<T>, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match lookup(key) {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Ok(None),
        Some(v) => v
            .trim()
            .parse::<T>()
            .map(Some)
            .map_err(|e| ConfigError::Invalid {
                key: key.to_owned(),
                value: v.clone(),
                reason: e.to_string(),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn overrides_and_errors() {
        let env: HashMap<&str, &str> = [
            ("CRUCIBLE_LEASE_TTL_MS", "2000"),
            ("CRUCIBLE_MAX_ATTEMPTS", "5"),
            ("CRUCIBLE_QUEUE_CAP", "10"),
            ("CRUCIBLE_KEY_PREFIX", "t1"),
            ("CRUCIBLE_CACHE_SCOPE", "h100-cu12.8-torch2.7"),
            ("CRUCIBLE_QUEUE_CAP_BYTES", "4096"),
        ]
        .into();
        let cfg = BrokerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(cfg.lease_ttl, Duration::from_secs(2));
        assert_eq!(cfg.max_attempts, 5);
        assert_eq!(cfg.queue_cap, 10);
        assert_eq!(cfg.key_prefix, "t1");
        assert_eq!(cfg.cache_scope, "h100-cu12.8-torch2.7");
        assert_eq!(cfg.queue_cap_bytes, 4096);
        assert_eq!(BrokerConfig::default().cache_scope, "default");
        assert_eq!(cfg.result_ttl, Duration::from_secs(86400));

        let err = BrokerConfig::from_lookup(|k| {
            (k == "CRUCIBLE_MAX_ATTEMPTS").then(|| "three".to_owned())
        })
        .unwrap_err();
        assert!(err.to_string().contains("CRUCIBLE_MAX_ATTEMPTS"));
    }
}
