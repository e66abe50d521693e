//! The bounds that keep one API replica alive under slow or greedy clients: how long a client
//! may take to send headers and a body, how many connections it holds at once, and how many
//! request-body bytes it buffers at once. Each bound has one default here and one variable.

use crucible_shared::ConfigError;
use crucible_shared::config::parse;
use std::time::Duration;

/// How much of the replica one client, or all of them together, may hold.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeLimits {
    /// Time a connection may take to send a request's headers, counted from when it opened or
    /// its previous response was sent: hyper starts the same timer while a keep-alive
    /// connection waits for its next request, so this is also the idle timeout. A client that
    /// sends a partial request line (slowloris) or nothing at all is closed after it.
    pub header_read_timeout: Duration,
    /// Time a client may take to send a whole request body once its headers are read; beyond
    /// it the request gets 408 and its bytes leave the body budget.
    pub body_read_timeout: Duration,
    /// Connections served at once. Beyond it each new connection asks the oldest one to close
    /// (at once when idle or still sending headers, after its response otherwise), so that a
    /// flood of idle connections cannot lock out `/health`; past [`ServeLimits::hard_connection_limit`]
    /// new connections are closed unread. Keep the hard limit well below the process's open-file
    /// limit (`LimitNOFILE`), which Redis connections and files share.
    pub max_connections: usize,
    /// Request-body bytes buffered at once, over every request: a body is admitted only if its
    /// `Content-Length` (or, chunked, each chunk as it arrives) fits, else the request gets 503
    /// with `Retry-After`. Bounds the API's memory under concurrent large batches.
    pub body_bytes_in_flight: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60),
            // 16,384 + 1/8 shed margin = 18,432 sockets: under a third of the units'
            // LimitNOFILE=65536, leaving the rest to Redis connections, logs and task files.
            max_connections: 16_384,
            // Four largest batches (64 MiB each) at once.
            body_bytes_in_flight: 256 << 20,
        }
    }
}

impl ServeLimits {
    /// Reads `CRUCIBLE_HEADER_TIMEOUT_MS`, `CRUCIBLE_BODY_TIMEOUT_MS`,
    /// `CRUCIBLE_MAX_CONNECTIONS`, `CRUCIBLE_BODY_BYTES_IN_FLIGHT`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut limits = Self::default();
        if let Some(ms) = parse::<u64>(&lookup, "CRUCIBLE_HEADER_TIMEOUT_MS")? {
            limits.header_read_timeout = Duration::from_millis(ms.max(1));
        }
        if let Some(ms) = parse::<u64>(&lookup, "CRUCIBLE_BODY_TIMEOUT_MS")? {
            limits.body_read_timeout = Duration::from_millis(ms.max(1));
        }
        if let Some(n) = parse::<usize>(&lookup, "CRUCIBLE_MAX_CONNECTIONS")? {
            limits.max_connections = n.max(1);
        }
        if let Some(n) = parse::<usize>(&lookup, "CRUCIBLE_BODY_BYTES_IN_FLIGHT")? {
            limits.body_bytes_in_flight = n;
        }
        Ok(limits)
    }

    /// [`ServeLimits::from_lookup`] over the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Connections beyond which new ones are closed unread: the cap plus an eighth, room for
    /// the oldest connections asked to close that are still finishing a response.
    pub fn hard_connection_limit(&self) -> usize {
        self.max_connections + self.max_connections.div_ceil(8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_override_defaults_and_bad_values_are_named() {
        let limits = ServeLimits::from_lookup(|k| match k {
            "CRUCIBLE_HEADER_TIMEOUT_MS" => Some("1500".to_owned()),
            "CRUCIBLE_MAX_CONNECTIONS" => Some("100".to_owned()),
            _ => None,
        })
        .unwrap();
        assert_eq!(limits.header_read_timeout, Duration::from_millis(1500));
        assert_eq!(limits.max_connections, 100);
        assert_eq!(limits.hard_connection_limit(), 113);
        assert_eq!(
            limits.body_bytes_in_flight,
            ServeLimits::default().body_bytes_in_flight
        );
        let err = ServeLimits::from_lookup(|k| {
            (k == "CRUCIBLE_BODY_BYTES_IN_FLIGHT").then(|| "lots".to_owned())
        })
        .unwrap_err();
        assert!(err.to_string().contains("CRUCIBLE_BODY_BYTES_IN_FLIGHT"));
    }
}
