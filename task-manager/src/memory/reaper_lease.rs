//! The reaper lease of a [`MemoryBroker`](super::MemoryBroker): one process shares it, yet it
//! keeps the Redis lease's semantics (a holder and an expiry), so the reaper and the contract
//! suite see the same election on both brokers.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Who leads and until when; `None` when nobody has ever taken it or it was given up.
#[derive(Default)]
pub(super) struct ReaperLease(Mutex<Option<(String, Instant)>>);

impl ReaperLease {
    /// Takes the lease for `holder` (free or expired) or renews it (held by `holder`).
    pub(super) fn take(&self, holder: &str, ttl: Duration) -> bool {
        let mut lease = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let taken = match lease.as_ref() {
            Some((current, until)) => current == holder || *until <= now,
            None => true,
        };
        if taken {
            *lease = Some((holder.to_owned(), now + ttl));
        }
        taken
    }

    /// Gives the lease up if `holder` has it.
    pub(super) fn release(&self, holder: &str) {
        let mut lease = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if lease.as_ref().is_some_and(|(current, _)| current == holder) {
            *lease = None;
        }
    }
}
