//! The namespaces of the broker's small key-value cache: one enum, so every user of the cache
//! (the worker's reference timings and builds, the API's rollout records, batch keys and
//! episodes) is
//! named in one place, each with its own hit and miss counters. The names are part of the
//! Redis key layout (`kv:<len>:<name>:<key>`, `kv:<name>:hits`) that deploy/redis.conf grants
//! per role, so they must never change.

/// The stats hash's field counting a namespace's hits, `{ns}` its name.
pub(crate) const HITS_FIELD: &str = "kv:{ns}:hits";
/// The stats hash's field counting a namespace's misses.
pub(crate) const MISSES_FIELD: &str = "kv:{ns}:misses";

/// A namespace of the key-value cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KvNamespace {
    /// Reference timings, by problem and software versions (the worker's `reference_cache`).
    Ref,
    /// Records of built CUDA extensions (the worker's `build_cache`).
    Build,
    /// The rollout records of a rollout batch, by batch id (the API's `rollouts`).
    Rollouts,
    /// Rollout batch idempotency keys, by tenant and key; the value is the batch id.
    RolloutBatchKeys,
    /// Episodes and their turns, by episode id and `{episode}:{turn}` (the API's `episodes`).
    Episodes,
    /// KernelGYM clients' own task ids, by tenant and id; the value names our task (the API's
    /// `kernelgym`).
    KernelGym,
}

impl KvNamespace {
    /// Every namespace, in [`KvNamespace::index`] order (the stats report each).
    pub const ALL: [KvNamespace; 6] = [
        KvNamespace::Ref,
        KvNamespace::Build,
        KvNamespace::Rollouts,
        KvNamespace::RolloutBatchKeys,
        KvNamespace::Episodes,
        KvNamespace::KernelGym,
    ];

    /// The name in keys and counters.
    pub const fn as_str(self) -> &'static str {
        match self {
            KvNamespace::Ref => "ref",
            KvNamespace::Build => "build",
            KvNamespace::Rollouts => "rollouts",
            KvNamespace::RolloutBatchKeys => "rollout-batch-keys",
            KvNamespace::Episodes => "episodes",
            KvNamespace::KernelGym => "kernelgym",
        }
    }

    /// Its place in [`KvNamespace::ALL`], for per-namespace arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The field of the stats hash that counts its hits (the scripts get it from the key
    /// table's header: `redis_broker/keys.rs`).
    pub fn hits_field(self) -> String {
        HITS_FIELD.replace("{ns}", self.as_str())
    }

    /// The field of the stats hash that counts its misses.
    pub fn misses_field(self) -> String {
        MISSES_FIELD.replace("{ns}", self.as_str())
    }
}

impl std::fmt::Display for KvNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Lifetime lookups of one namespace: every `kv_get` is a hit or a miss.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvCounts {
    /// Lookups that found a live entry.
    pub hits: u64,
    /// Lookups that found none (absent or expired).
    pub misses: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_counters_keep_the_deployed_layout() {
        let names: Vec<&str> = KvNamespace::ALL.iter().map(|n| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "ref",
                "build",
                "rollouts",
                "rollout-batch-keys",
                "episodes",
                "kernelgym"
            ]
        );
        for (i, ns) in KvNamespace::ALL.into_iter().enumerate() {
            assert_eq!(ns.index(), i);
        }
        assert_eq!(KvNamespace::Ref.hits_field(), "kv:ref:hits");
        assert_eq!(
            KvNamespace::RolloutBatchKeys.misses_field(),
            "kv:rollout-batch-keys:misses"
        );
    }
}
