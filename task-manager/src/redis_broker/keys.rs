//! The Redis key layout: [`TABLE`] is the one place a key's name is written. The Rust side
//! builds keys from it ([`Keys`]), the Lua scripts get every name from the header made from it
//! (`keys/lua.rs`), and `deploy/redis.conf`'s ACL users are checked against the reach each row
//! gives each role (`keys/acl.rs`; docs/REDIS.md says why each grant).
//!
//! All keys live under `{prefix}:` (`CRUCIBLE_KEY_PREFIX`, passed to every script as `ARGV[1]`).
//! Placeholders: `{id}` a task or worker id, `{b}` a batch id, `{tenant}` a tenant id (`tn_...`,
//! the built-in tenant's included), `{class}` a device class or `any`
//! (`crucible_shared::device::UNCLASSED`) for none (no class may take that name), `{prio}` a
//! priority, `{k}` a client's idempotency key, `{ns}` a cache or key-value namespace, `{ckey}`
//! a scoped result cache key, `{key}` a key-value key. Ids, tenant ids and classes hold no `:`,
//! so no key of one family spells one of another. Keys are built inside the scripts from the
//! prefix, so the layout targets a single Redis node (or a primary with replicas), not Redis
//! Cluster. `tests/tests/redis_acl.rs` runs the shipped `deploy/redis.conf` against a real
//! Redis and checks each role's calls get through and others' are refused.

#[cfg(test)]
mod acl;
mod family;
mod lua;

pub(crate) use family::{Access, Family, Grant, Keys, Reach, Role, Segment, segments};
pub(super) use lua::header as lua_header;

use crate::kv::KvNamespace;
use family::{NO, R, RW, W};

/// The tenant registry's pattern: every key that names a tenant or holds its token's SHA-256
/// or its settings lives under it, and only the API's user reaches it, so that a worker's
/// credential reveals neither who the tenants are nor a way to look up a token.
const REGISTRY: Grant = Grant::Under("tenants:*");

pub(crate) const TASK: Family = Family {
    lua: "task_key",
    name: "task:{id}",
    holds: "hash: status, spec, attempts, priority, class (its device class; absent for none), \
            qseq (its place in the order tasks were queued), worker_id, lease_token, \
            submitted_at, started_at, finished_at (ms), result, error, batch_id, batches (every \
            batch counting the task), idem, tenant, ckey (scoped result cache key), cns (its \
            tenant's cache namespace), cached (`1` when answered from the cache), bytes (its \
            spec's length, counted in OPEN_BYTES while it is open). Expires result_ttl after \
            the task finishes.",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const QUEUE: Family = Family {
    lua: "queue_key",
    name: "queue:{class}:{tenant}:{prio}",
    holds: "list of task ids, FIFO; ids whose task is no longer queued (left by a batch cancel, \
            or expired) are dropped by the claim that reaches them.",
    api: RW,
    // LLEN and LINDEX: does the claimed tenant have more; which of two queues' heads came first.
    worker: Reach {
        keys: Access::Both,
        only: &["llen", "lindex"],
    },
    grant: Grant::Own,
};
pub(crate) const ACTIVE: Family = Family {
    lua: "active_key",
    name: "active:{class}",
    holds: "zset per claiming class of the tenants with work for its workers, scored by their \
            pass in its fair share (fair.rs).",
    // A tenant with new work enters a share; nothing else of a zset is the API's to write.
    api: Reach {
        keys: Access::Both,
        only: &["zadd", "zscore"],
    },
    worker: Reach {
        keys: Access::No,
        only: &["zrange", "zscore", "zincrby", "zadd", "zrem"],
    },
    grant: Grant::Own,
};
pub(crate) const CLAIM_SEQ: Family = Family {
    lua: "CLAIM_SEQ",
    name: "claim_seq",
    holds: "hash, field claim_seq_field(class, tenant) -> claims the class's workers served the \
            tenant: its place in the priority cycle.",
    api: W,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const UNCLASSED_QUEUED: Family = Family {
    lua: "UNCLASSED",
    name: "unclassed",
    holds: "hash tenant -> its queued tasks of no class: the tenants a claim brings into its \
            class's share.",
    api: RW,
    worker: Reach {
        keys: Access::Both,
        only: &["hgetall"],
    },
    grant: Grant::Own,
};
pub(crate) const CLAIM_CLASSES: Family = Family {
    lua: "CLAIM_CLASSES",
    name: "claim_classes",
    holds: "hash class -> its last claim (ms): whose wake lists a task of no class wakes, whose \
            fair shares a deleted tenant leaves.",
    api: R,
    worker: Reach {
        keys: Access::Both,
        only: &["hgetall"],
    },
    grant: Grant::Own,
};
pub(crate) const TENANT_WEIGHTS: Family = Family {
    lua: "TENANT_WEIGHTS",
    name: "tenant_weights",
    holds: "hash tenant -> its weight in the fair share: the one tenant setting a claim reads, \
            kept outside the registry, read-only to workers.",
    api: RW,
    worker: R,
    grant: Grant::Own,
};
pub(crate) const QUEUED: Family = Family {
    lua: "QUEUED",
    name: "queued",
    holds: "hash priority -> queued tasks.",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const QUEUED_CLASS: Family = Family {
    lua: "QUEUED_CLASS",
    name: "queued_class",
    holds: "hash queue class -> queued tasks; a field for every class that ever had one (the \
            classes a deleted tenant's tasks may be queued in).",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const TENANT_QUEUED: Family = Family {
    lua: "TENANT_QUEUED",
    name: "tenant_queued",
    holds: "hash tenant -> its queued tasks (quotas, the views).",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const TENANT_RUNNING: Family = Family {
    lua: "TENANT_RUNNING",
    name: "tenant_running",
    holds: "hash tenant -> its running tasks.",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const LEASES: Family = Family {
    lua: "LEASES",
    name: "leases",
    holds: "zset of running task ids scored by lease expiry (ms).",
    api: RW,
    // The reaper that workers run reads the leases due; nothing else of them.
    worker: Reach {
        keys: Access::Write,
        only: &["zrangebyscore"],
    },
    grant: Grant::Own,
};
pub(crate) const WAKE: Family = Family {
    lua: "wake_key",
    name: "wake:{class}",
    holds: "list that blocked claimers of the class BLPOP on: one token per task queued for \
            them, at most WAKE_MAX, expiring WAKE_TTL_MS after the last push.",
    api: W,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const BATCH: Family = Family {
    lua: "batch_key",
    name: "batch:{b}",
    holds: "hash of counters by status, and its tenant. Expires result_ttl after its tasks \
            finish, as do its lists.",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const BATCH_TASKS: Family = Family {
    lua: "batch_tasks_key",
    name: "batch:{b}:tasks",
    holds: "list of its task ids.",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const BATCH_FINISHED: Family = Family {
    lua: "batch_finished_key",
    name: "batch:{b}:finished",
    holds: "list of its distinct tasks in the order they finished (each once): what a reader \
            of its results pages through.",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const IDEM: Family = Family {
    lua: "idem_key",
    name: "idem:{tenant}:{k}",
    holds: "string: the task id of the tenant's idempotency key; expires result_ttl after it \
            finishes.",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const RCACHE: Family = Family {
    lua: "rcache_key",
    name: "rcache:{ns}:{ckey}",
    holds: "string: the result JSON of the last `done` task with scoped key ckey \
            (`{cache_scope}:{sha256}`) in cache namespace ns (a tenant id, or `shared`); \
            expires after result_ttl. Written by workers, read by the API.",
    api: R,
    worker: W,
    grant: Grant::Own,
};
pub(crate) const INFLIGHT: Family = Family {
    lua: "inflight_key",
    name: "inflight:{tenant}:{ckey}",
    holds: "string: the tenant's open task evaluating ckey (coalescing never crosses tenants); \
            deleted when it finishes, expires after result_ttl.",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const STATS: Family = Family {
    lua: "STATS",
    name: "stats",
    holds: "hash of lifetime counters and of the fields of STATS_FIELDS (recent activity, \
            queue_seq, open bytes, key-value lookups). Kept here because every transition that \
            makes a task terminal writes it, the workers' and the API's alike, and both roles \
            already reach it: no grant is added.",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const KV: Family = Family {
    lua: "kv_key",
    name: "kv:{#ns}:{ns}:{key}",
    holds: "string of the key-value cache, with its TTL. The namespace is length-prefixed so \
            that no (namespace, key) pair spells another's key; each role reaches only its own \
            namespaces (kv_owner).",
    api: RW,
    worker: RW,
    grant: Grant::PerKvNamespace,
};
pub(crate) const WORKER: Family = Family {
    lua: "worker_key",
    name: "worker:{id}",
    holds: "string: a worker's JSON record, expiring when it goes quiet.",
    api: R,
    worker: W,
    grant: Grant::Own,
};
pub(crate) const WORKERS: Family = Family {
    lua: "WORKERS",
    name: "workers",
    holds: "zset of worker ids by last-seen ms (Redis time), expiring when all go quiet.",
    api: RW,
    worker: W,
    grant: Grant::Own,
};
pub(crate) const DRAIN: Family = Family {
    lua: "drain_key",
    name: "drain:{id}",
    holds: "string: a drain asked of the worker (written by the API, read by its heartbeat, \
            deleted when it deregisters), expiring with the registry's retention.",
    api: W,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const REAPER: Family = Family {
    lua: "REAPER",
    name: "reaper",
    holds: "string: the holder of the reaper lease (one process of those running the reaper, \
            API replicas and workers alike), expiring with it.",
    api: RW,
    worker: RW,
    grant: Grant::Own,
};
pub(crate) const TENANT_RECORD: Family = Family {
    lua: "tenant_key",
    name: "tenants:record:{tenant}",
    holds: "hash: name, token SHA-256, max_queued, share_cache, cache_ns, created_at. Kept \
            until the admin deletes the tenant, as are the registry's other keys.",
    api: RW,
    worker: NO,
    grant: REGISTRY,
};
pub(crate) const TENANT_NAMES: Family = Family {
    lua: "TENANT_NAMES",
    name: "tenants:names",
    holds: "hash tenant name -> id.",
    api: RW,
    worker: NO,
    grant: REGISTRY,
};
pub(crate) const TOKENS: Family = Family {
    lua: "TOKENS",
    name: "tenants:tokens",
    holds: "hash token SHA-256 -> tenant id.",
    api: RW,
    worker: NO,
    grant: REGISTRY,
};
pub(crate) const PURGING: Family = Family {
    lua: "PURGING",
    name: "tenants:purging",
    holds: "hash: deleted tenants whose queued tasks are still being cancelled -> the error \
            they get.",
    api: RW,
    worker: NO,
    grant: REGISTRY,
};

/// Every family: a key is added here, and nowhere else.
pub(crate) const TABLE: &[&Family] = &[
    &TASK,
    &QUEUE,
    &ACTIVE,
    &CLAIM_SEQ,
    &UNCLASSED_QUEUED,
    &CLAIM_CLASSES,
    &TENANT_WEIGHTS,
    &QUEUED,
    &QUEUED_CLASS,
    &TENANT_QUEUED,
    &TENANT_RUNNING,
    &LEASES,
    &WAKE,
    &BATCH,
    &BATCH_TASKS,
    &BATCH_FINISHED,
    &IDEM,
    &RCACHE,
    &INFLIGHT,
    &STATS,
    &KV,
    &WORKER,
    &WORKERS,
    &DRAIN,
    &REAPER,
    &TENANT_RECORD,
    &TENANT_NAMES,
    &TOKENS,
    &PURGING,
];

#[cfg_attr(not(test), expect(dead_code, reason = "read by the ACL check, a test"))]
/// The role whose ACL user reaches a key-value namespace (exhaustive, so a new namespace is
/// given to a role before it compiles).
pub(crate) fn kv_owner(namespace: KvNamespace) -> Role {
    match namespace {
        KvNamespace::Ref | KvNamespace::Build => Role::Worker,
        KvNamespace::Rollouts
        | KvNamespace::RolloutBatchKeys
        | KvNamespace::Episodes
        | KvNamespace::KernelGym => Role::Api,
    }
}

/// Fields of hashes that the scripts and the Rust side both name, as (Lua name, field), the
/// functions' placeholders as in [`Family::name`].
pub(crate) const FIELDS: &[(&str, &str)] = &[
    // STATS: the spec bytes of open (queued or running) tasks, which queue_cap_bytes bounds.
    ("OPEN_BYTES", "open_bytes"),
    // STATS: the last qseq given.
    ("QUEUE_SEQ", "queue_seq"),
    // STATS: the recent activity (activity.rs): the JSON counts of the tasks that finished in
    // that minute of Redis time (the last ACTIVITY_BUCKETS only), the newest minute written,
    // and the latest failures (JSON, newest first).
    ("activity_field", "activity:{minute}"),
    ("ACTIVITY_HEAD", "activity:head"),
    ("ACTIVITY_FAILURES_FIELD", "activity:failures"),
    // STATS: the key-value cache's lookups per namespace (kv.rs).
    ("kv_hits_field", crate::kv::HITS_FIELD),
    ("kv_misses_field", crate::kv::MISSES_FIELD),
    // CLAIM_SEQ's fields.
    ("claim_seq_field", "{class}:{tenant}"),
];

/// Most wake tokens a wake list holds: more than the claimers that could be blocked on it.
pub(crate) const WAKE_MAX: u32 = 1024;
/// Tokens only matter to claimers blocked right now; an unread token is useless after a while.
pub(crate) const WAKE_TTL_MS: u32 = 60_000;

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_shared::device::UNCLASSED;
    use crucible_shared::{BatchId, DeviceClass, TaskId};

    #[test]
    fn key_value_namespaces_cannot_spell_each_other() {
        let keys = Keys("p");
        // The layout deploy/redis.conf grants per role (`~crucible:kv:3:ref:*`, ...).
        assert_eq!(keys.kv(KvNamespace::Ref, "x"), "p:kv:3:ref:x");
        assert_eq!(keys.kv(KvNamespace::Build, "x"), "p:kv:5:build:x");
        assert_eq!(keys.kv(KvNamespace::Rollouts, "b_1"), "p:kv:8:rollouts:b_1");
        assert_eq!(
            keys.kv(KvNamespace::RolloutBatchKeys, "t:k"),
            "p:kv:18:rollout-batch-keys:t:k"
        );
        assert_eq!(keys.task(&TaskId::from("t_1")), "p:task:t_1");
        assert_eq!(keys.wake(&DeviceClass::cpu()), "p:wake:cpu");
        assert_eq!(
            keys.batch_finished(&BatchId::from("b_1")),
            "p:batch:b_1:finished"
        );
    }

    #[test]
    fn every_family_has_one_lua_name_and_a_name_of_its_own() {
        let mut lua: Vec<_> = TABLE.iter().map(|f| f.lua).collect();
        let mut names: Vec<_> = TABLE.iter().map(|f| f.name).collect();
        lua.extend(FIELDS.iter().map(|(l, _)| *l));
        for v in [&mut lua, &mut names] {
            let n = v.len();
            v.sort_unstable();
            v.dedup();
            assert_eq!(v.len(), n, "a name is used twice: {v:?}");
        }
        for f in TABLE {
            assert!(f.holds.ends_with('.'), "{} says what it holds", f.name);
            // A single key is a constant, a family a function of its placeholders.
            let constant = f.lua.chars().all(|c| c.is_ascii_uppercase() || c == '_');
            assert_eq!(constant, f.params().is_empty(), "{}", f.lua);
        }
    }

    #[test]
    fn the_queues_of_no_class_cannot_be_a_class() {
        // No device class may take this name (`DeviceClass::parse` refuses it), so no class's
        // queues can be the unclassed ones.
        assert!(DeviceClass::parse(UNCLASSED).is_err());
        let header = lua_header();
        assert!(
            header.contains(&format!("local ANY = '{UNCLASSED}'\n")),
            "{header}"
        );
    }
}
