//! The key-value cache's "put if absent" of a [`MemoryBroker`](super::MemoryBroker): under the
//! state's lock, so it is as atomic as the Redis `SET NX GET`; an expired entry counts as
//! absent, as in Redis.

use super::{KV_SWEEP_MIN, MemoryBroker, State};
use crate::kv::KvNamespace;
use std::time::{Duration, Instant};

impl MemoryBroker {
    pub(super) fn put_kv_if_absent(
        &self,
        namespace: KvNamespace,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Option<String> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let now = Instant::now();
        let entry = (namespace, key.to_owned());
        if let Some((existing, until)) = st.kv.get(&entry)
            && *until > now
        {
            return Some(existing.clone());
        }
        st.store_kv(entry, value, now + ttl, now);
        None
    }
}

impl State {
    /// Stores a key-value entry until `until`, sweeping expired entries once the map has
    /// doubled since the last sweep (so a put costs amortised O(1)).
    pub(super) fn store_kv(
        &mut self,
        entry: (KvNamespace, String),
        value: &str,
        until: Instant,
        now: Instant,
    ) {
        self.kv.insert(entry, (value.to_owned(), until));
        if self.kv.len() >= self.kv_sweep_at.max(KV_SWEEP_MIN) {
            self.kv.retain(|_, (_, until)| *until > now);
            self.kv_sweep_at = self.kv.len() * 2;
        }
    }
}
