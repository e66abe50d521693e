//! When a call is tried again and after how long: on a refusal that says "not now" or a lost
//! connection, with exponential backoff and jitter (backon's schedule), never sooner than the
//! server's `Retry-After`.

use crate::ClientError;
use backon::ExponentialBuilder;
use std::time::Duration;

/// Statuses that say "not now" rather than "not this request": 429, the queue (or the
/// tenant's quota) is full; 503, the broker is unreachable.
pub(crate) const RETRYABLE_STATUS: [u16; 2] = [429, 503];

/// The longest pause of the first retry, doubling each retry up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const LONGEST_PAUSE: Duration = Duration::from_secs(8);

/// Most a `Retry-After` may make a client wait before its next attempt: a header asking for
/// more is capped here rather than stalling a trainer for an hour.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Pure: the seconds a `Retry-After` header asks for, when it is a number of seconds (the form
/// the API sends; an HTTP date is not honoured and the backoff applies), capped at
/// [`MAX_RETRY_AFTER`].
pub fn retry_after(value: &str) -> Option<Duration> {
    let seconds: u64 = value.trim().parse().ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// Exponential backoff with a cap: 0.25 s, 0.5 s, 1 s, ... 8 s, the longest pause after
/// attempt `attempt`; the pause itself is jittered within its upper half.
pub fn backoff(attempt: u32) -> Duration {
    FIRST_PAUSE
        .saturating_mul(1 << attempt.saturating_sub(1).min(5))
        .min(LONGEST_PAUSE)
}

/// The pauses between `max_attempts` attempts: after attempt `n` one drawn from
/// `[backoff(n) / 2, backoff(n))`, so that many trainer processes refused at the same moment
/// do not all come back at the same moment. backon's jitter adds up to the delay again, hence
/// half of each bound here.
pub(crate) fn schedule(max_attempts: u32) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(FIRST_PAUSE / 2)
        .with_factor(2.0)
        .with_max_delay(LONGEST_PAUSE / 2)
        .with_jitter()
        .with_max_times(max_attempts.saturating_sub(1) as usize)
}

/// The pause before the next attempt: the schedule's, but never less than what the server
/// asked for; None (the schedule ran out) stays None.
pub(crate) fn pause(scheduled: Option<Duration>, server: Option<Duration>) -> Option<Duration> {
    scheduled.map(|p| p.max(server.unwrap_or_default()))
}

/// How one attempt failed, as the retry policy sees it.
pub(crate) enum Failure {
    /// No retry can help: returned as it is.
    Final(ClientError),
    /// A "not now" refusal or a connection error: tried again while the schedule lasts.
    Retryable {
        /// The error, for [`ClientError::Exhausted`].
        last: String,
        /// What the server asked for with `Retry-After`.
        server_pause: Option<Duration>,
    },
}

impl Failure {
    pub(crate) fn is_retryable(&self) -> bool {
        matches!(self, Failure::Retryable { .. })
    }

    pub(crate) fn server_pause(&self) -> Option<Duration> {
        match self {
            Failure::Retryable { server_pause, .. } => *server_pause,
            Failure::Final(_) => None,
        }
    }

    /// The call's error once it gives up, after `attempts` attempts.
    pub(crate) fn into_error(self, attempts: u32) -> ClientError {
        match self {
            Failure::Final(e) => e,
            Failure::Retryable { last, .. } => ClientError::Exhausted { attempts, last },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use backon::BackoffBuilder;

    #[test]
    fn jitter_stays_within_half_to_full_and_varies() {
        let firsts: std::collections::HashSet<Duration> = (0..20)
            .map(|_| schedule(6).build().next().unwrap())
            .collect();
        assert!(firsts.len() > 1, "{firsts:?}");
        for _ in 0..20 {
            let pauses: Vec<Duration> = schedule(6).build().collect();
            // Six attempts, five pauses between them.
            assert_eq!(pauses.len(), 5, "{pauses:?}");
            for (n, p) in (1..).zip(pauses) {
                assert!(p >= backoff(n) / 2 && p <= backoff(n), "{n}: {p:?}");
            }
        }
        let long: Vec<Duration> = schedule(9).build().collect();
        assert!(long[7] >= Duration::from_secs(4) && long[7] <= Duration::from_secs(8));
    }

    #[test]
    fn retry_after_is_read_in_seconds_capped_and_waited_at_least() {
        assert_eq!(retry_after("1"), Some(Duration::from_secs(1)));
        assert_eq!(retry_after(" 30 "), Some(Duration::from_secs(30)));
        assert_eq!(retry_after("7200"), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(retry_after("-1"), None);
        // The server's pause wins over a shorter backoff; a longer backoff stays.
        let first = schedule(6).build().next();
        let sixth = schedule(7).build().nth(5);
        assert_eq!(
            pause(first, Some(Duration::from_secs(3))),
            Some(Duration::from_secs(3))
        );
        assert!(pause(sixth, Some(Duration::from_millis(10))).unwrap() >= Duration::from_secs(4));
        assert!(pause(first, None).unwrap() <= Duration::from_millis(250));
        // Once the schedule runs out no Retry-After keeps the call going.
        assert_eq!(pause(None, Some(Duration::from_secs(3))), None);
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(1), Duration::from_millis(250));
        assert_eq!(backoff(2), Duration::from_millis(500));
        assert_eq!(backoff(6), Duration::from_secs(8));
        assert_eq!(backoff(60), Duration::from_secs(8));
    }
}
