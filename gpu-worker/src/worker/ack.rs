//! Acks that outlive a broker outage. A finished verdict (or a task given back) is kept and its
//! fenced ack retried with backoff until the broker answers, `Accepted` or `Stale`: the fence,
//! not the worker, decides whether the work still counts. The retries stop once the lease, as
//! this worker last knew it, has expired and a grace has passed too: by then the reaper has
//! requeued the task (a late ack would be refused as stale), and a worker must not wedge on
//! a broker that never comes back. While an ack is being retried the worker claims nothing
//! new ([`AckGate`]): a result already paid for comes before fresh work.
//!
//! The schedule and the deadline are pure functions ([`retry_until`], [`backoff`],
//! [`next_wait`]), tested here without a broker.

use backon::{BackoffBuilder, ExponentialBuilder};
use crucible_task_manager::BrokerError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long after the lease's expiry (as the worker last renewed it) an ack is still tried:
/// the reaper may not have run yet (its interval, clocks), and then the fence still
/// accepts the verdict.
pub(super) const ACK_GRACE: Duration = Duration::from_secs(5);
/// The first pause between attempts, doubled up to [`ACK_MAX_PAUSE`] (with jitter).
const ACK_FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause: short, so the ack lands within about a second of the broker's return,
/// before the reaper can requeue a lease that ran out during the outage.
const ACK_MAX_PAUSE: Duration = Duration::from_secs(1);

/// The last instant the worker knew its lease held (claim, then each successful renewal).
#[derive(Clone, Debug)]
pub(super) struct HeldAt(Arc<Mutex<Instant>>);

impl HeldAt {
    /// Held as of now (a fresh claim).
    pub(super) fn now() -> Self {
        Self(Arc::new(Mutex::new(Instant::now())))
    }

    /// The broker just answered that the lease is held.
    pub(super) fn renewed(&self) {
        *self.0.lock().expect("lease time lock") = Instant::now();
    }

    /// When it was last known held.
    pub(super) fn get(&self) -> Instant {
        *self.0.lock().expect("lease time lock")
    }
}

/// Until when an ack is worth trying: the lease's expiry as last renewed (`last_held` +
/// `lease_ttl`) plus `grace`.
pub(super) fn retry_until(last_held: Instant, lease_ttl: Duration, grace: Duration) -> Instant {
    last_held + lease_ttl + grace
}

/// The pauses between attempts: exponential from [`ACK_FIRST_PAUSE`] to [`ACK_MAX_PAUSE`],
/// jittered, endless (the deadline ends the retries, not a count).
pub(super) fn backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(ACK_FIRST_PAUSE)
        .with_max_delay(ACK_MAX_PAUSE)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

/// The pause before the next attempt, or `None` when that attempt would start after `until`
/// (the last attempt is then the one just made). A pause that would overshoot is cut to
/// end at `until`, so the last attempt comes right at the deadline.
pub(super) fn next_wait(now: Instant, until: Instant, pause: Duration) -> Option<Duration> {
    let left = until.checked_duration_since(now)?;
    (!left.is_zero()).then(|| pause.min(left))
}

/// Whether an ack that failed with `error` may succeed if tried again: when the broker could
/// not be reached (an outage, a restart, a Redis still loading its data) or refused the write
/// at its `maxmemory` (results expire, an operator makes room). Data the broker cannot decode
/// stays undecodable: that ack is not retried.
pub(super) fn worth_retrying(error: &BrokerError) -> bool {
    matches!(
        error,
        BrokerError::Unavailable(_) | BrokerError::OutOfMemory(_)
    )
}

/// How many acks are being retried; while any is, the claimer waits.
#[derive(Debug)]
pub(super) struct AckGate(watch::Sender<u32>);

impl AckGate {
    pub(super) fn new() -> Self {
        Self(watch::channel(0).0)
    }

    /// Holds the gate shut until the returned guard is dropped.
    pub(super) fn hold(&self) -> AckHold<'_> {
        self.0.send_modify(|n| *n += 1);
        AckHold(self)
    }

    /// Resolves once no ack is being retried.
    pub(super) async fn open(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives as long as the worker: the wait cannot fail.
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

/// One ack being retried: the claimer waits while it lives.
pub(super) struct AckHold<'a>(&'a AckGate);

impl Drop for AckHold<'_> {
    fn drop(&mut self) {
        self.0.0.send_modify(|n| *n -= 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_the_lease_expiry_plus_the_grace() {
        let t = Instant::now();
        let until = retry_until(t, Duration::from_secs(30), ACK_GRACE);
        assert_eq!(until - t, Duration::from_secs(35));
    }

    #[test]
    fn pauses_grow_to_the_cap_and_never_end() {
        let pauses: Vec<Duration> = backoff().take(50).collect();
        assert_eq!(pauses.len(), 50, "endless: the deadline stops the retries");
        // Jitter adds up to one more pause on top of the exponential one.
        assert!(pauses[0] >= ACK_FIRST_PAUSE && pauses[0] <= 2 * ACK_FIRST_PAUSE);
        assert!(pauses.iter().all(|p| *p <= 2 * ACK_MAX_PAUSE), "{pauses:?}");
        assert!(pauses[49] >= ACK_MAX_PAUSE, "{pauses:?}");
        // The whole outage of a 30 s lease is covered by about 30 attempts, not thousands.
        let in_30s = pauses
            .iter()
            .scan(Duration::ZERO, |sum, p| {
                *sum += *p;
                Some(*sum)
            })
            .take_while(|sum| *sum < Duration::from_secs(30))
            .count();
        assert!((10..=40).contains(&in_30s), "{in_30s} attempts in 30 s");
    }

    #[test]
    fn the_last_pause_ends_at_the_deadline_and_none_follows() {
        let now = Instant::now();
        let pause = Duration::from_secs(1);
        assert_eq!(next_wait(now, now + pause * 5, pause), Some(pause));
        let short = Duration::from_millis(300);
        assert_eq!(next_wait(now, now + short, pause), Some(short));
        assert_eq!(next_wait(now, now, pause), None);
        assert_eq!(next_wait(now + pause, now, pause), None);
    }

    #[test]
    fn only_an_unreachable_broker_is_retried() {
        assert!(worth_retrying(&BrokerError::Unavailable(
            "connection refused".into()
        )));
        assert!(worth_retrying(&BrokerError::OutOfMemory(
            "OOM command not allowed when used memory > 'maxmemory'".into()
        )));
        assert!(!worth_retrying(&BrokerError::Corrupt("not json".into())));
    }

    #[tokio::test]
    async fn the_gate_opens_when_the_last_hold_ends() {
        let gate = AckGate::new();
        tokio::time::timeout(Duration::from_secs(5), gate.open())
            .await
            .expect("open with nothing held");
        let first = gate.hold();
        let second = gate.hold();
        drop(first);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), gate.open())
                .await
                .is_err(),
            "one ack still retried"
        );
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), gate.open())
            .await
            .expect("open once every hold ended");
    }
}
