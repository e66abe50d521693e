//! The key-value cache's "put if absent" of a [`MemoryBroker`](super::MemoryBroker): under the
//! state's lock, so it is as atomic as the Redis `SET NX GET`; an expired entry counts as
//! absent, as in Redis.

use super::{KV_SWEEP_MIN, MemoryBroker};
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
        st.kv.insert(entry, (value.to_owned(), now + ttl));
        if st.kv.len() >= st.kv_sweep_at.max(KV_SWEEP_MIN) {
            st.kv.retain(|_, (_, until)| *until > now);
            st.kv_sweep_at = st.kv.len() * 2;
        }
        None
    }
}
