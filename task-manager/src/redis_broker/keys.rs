//! The Redis key layout, described here once. The Lua scripts spell the same names in
//! `lua/prelude.lua`; `deploy/redis.conf` grants each role's ACL user its keys by these names
//! (docs/REDIS.md says why each one): a key added here needs its pattern there, and the
//! per-role test (`tests/tests/redis_acl.rs`) fails until it has one.
//!
//! Keys, all under `{prefix}:` (`{t}` is a tenant id: `tn_...`, the built-in tenant's included).
//!
//! Reached by both roles, each with the access its calls need (claim, renew, complete, release
//! and heartbeat for the workers):
//! - `task:{id}` hash: status, spec, attempts, priority, class (its device class; absent for
//!   none), qseq (its place in the order tasks were queued), worker_id, lease_token,
//!   submitted_at, started_at, finished_at (ms), result, error, batch_id, batches (every batch
//!   counting the task), idem, tenant, ckey (scoped result cache key), cns (its tenant's cache
//!   namespace), cached (`1` when answered from the cache), bytes (its spec's length, counted
//!   in `stats`' `open_bytes` while it is open). Expires `result_ttl` after the task finishes.
//! - `queue:{c}:{t}:{high|normal|low}` lists of task ids (FIFO; ids whose task is no longer queued, left by a batch
//!   cancel or expired, are dropped by the claim that reaches them), `{c}` the task's device class
//!   or `any` for none (a class may not be named `any`); `active:{c}` zset per claiming class
//!   `{c}` of the tenants with work for its workers, scored by their pass in its fair share
//!   (fair.rs); `claim_seq` hash of claims per `{c}:{t}`; `unclassed` hash of each tenant's
//!   queued tasks of no class (the tenants a claim brings into its class's share);
//!   `claim_classes` hash of the classes that claim (→ last claim ms: whose wake lists a task of
//!   no class wakes); `tenant_weights` hash of each created tenant's weight (the one tenant
//!   setting a claim reads, so it lives outside the registry), `queued` hash of queued tasks
//!   per priority, `queued_class` per queue class (a field for each class that ever had one),
//!   `tenant_queued` / `tenant_running` hashes per tenant, `leases` zset scored by expiry ms,
//!   `wake:{c}` list that blocked claimers of class `{c}` BLPOP on.
//! - `batch:{id}` hash of counters by status and its tenant, `batch:{id}:tasks` list,
//!   `batch:{id}:finished` list (its distinct tasks in the order they finished);
//!   `idem:{t}:{key}` string. Expire `result_ttl` after their tasks finish.
//! - `rcache:{ns}:{ckey}` the result JSON of the last `done` task with that key in cache
//!   namespace `ns` (a tenant id, or `shared`), `inflight:{t}:{ckey}` the
//!   id of the tenant's open task evaluating it (deleted when it finishes); both expire after
//!   `result_ttl`. `ckey` is `{cache_scope}:{sha256}`.
//! - `stats` hash of lifetime counters (and `queue_seq`, the last qseq given, and `open_bytes`,
//!   the spec bytes of open tasks that `queue_cap_bytes` bounds); the key-value cache counts its lookups in fields
//!   `kv:{namespace}:hits` / `misses`; the recent activity (`activity.rs`) is its fields
//!   `activity:{minute}` (JSON counts of the tasks that finished in that minute of Redis time,
//!   the last hour's only), `activity:head` (the newest minute written) and
//!   `activity:failures` (JSON, the latest failures). Kept in `stats` because every
//!   transition that makes a task terminal writes it, the workers' (complete, release) and the
//!   API's (cancel, reap, tenant deletion) alike, and both roles already read and write
//!   `stats` with the commands it needs: no grant is added.
//! - `kv:{len(namespace)}:{namespace}:{key}` strings of the key-value cache, each with its TTL;
//!   each role reaches only its own namespaces.
//! - `worker:{id}` JSON and `workers` zset of last-seen ms, both expiring when workers go quiet.
//! - `drain:{id}` a drain asked of worker `{id}` (written by the API, read by the worker's
//!   heartbeat, deleted when it deregisters), expiring with the registry's retention.
//! - `reaper` string: the holder of the reaper lease (one process of those running the reaper,
//!   API replicas and workers alike), expiring with it.
//!
//! The API's alone: the tenant registry, `tenants:`, where every key that names a tenant or
//! holds its token's SHA-256 or its settings lives, so that a worker's credential reveals
//! neither who the tenants are nor a way to look up a token (`redis_broker/tenants.rs`):
//! - `tenants:record:{t}` hash (name, token SHA-256, max_queued, share_cache, cache_ns,
//!   created_at), `tenants:names` hash name → id, `tenants:tokens` hash token SHA-256 → id,
//!   `tenants:purging` hash of deleted tenants whose queued tasks are being cancelled → their
//!   error. Kept until the admin deletes the tenant.
//!
//! Keys are built inside the scripts from the prefix, so this layout targets a single Redis
//! node (or a primary with replicas), not Redis Cluster.

use crate::kv::KvNamespace;
use crucible_shared::{BatchId, DeviceClass, TaskId, WorkerId};

/// The keys the Rust side reads and writes directly (everything else only the scripts touch).
pub(super) struct Keys<'a>(pub(super) &'a str);

impl Keys<'_> {
    fn under(&self, suffix: std::fmt::Arguments<'_>) -> String {
        format!("{}:{suffix}", self.0)
    }

    pub(super) fn task(&self, id: &TaskId) -> String {
        self.under(format_args!("task:{id}"))
    }

    pub(super) fn batch(&self, id: &BatchId) -> String {
        self.under(format_args!("batch:{id}"))
    }

    pub(super) fn batch_tasks(&self, id: &BatchId) -> String {
        self.under(format_args!("batch:{id}:tasks"))
    }

    pub(super) fn batch_finished(&self, id: &BatchId) -> String {
        self.under(format_args!("batch:{id}:finished"))
    }

    pub(super) fn queued(&self) -> String {
        self.under(format_args!("queued"))
    }

    pub(super) fn leases(&self) -> String {
        self.under(format_args!("leases"))
    }

    /// The list blocked claimers of `class` BLPOP on.
    pub(super) fn wake(&self, class: &DeviceClass) -> String {
        self.under(format_args!("wake:{class}"))
    }

    pub(super) fn queued_class(&self) -> String {
        self.under(format_args!("queued_class"))
    }

    pub(super) fn stats(&self) -> String {
        self.under(format_args!("stats"))
    }

    pub(super) fn worker(&self, id: &WorkerId) -> String {
        self.under(format_args!("worker:{id}"))
    }

    /// A drain asked of worker `id` (`lua/drain_worker.lua`, read by `lua/heartbeat.lua`).
    pub(super) fn drain(&self, id: &WorkerId) -> String {
        self.under(format_args!("drain:{id}"))
    }

    pub(super) fn workers(&self) -> String {
        self.under(format_args!("workers"))
    }

    /// A key-value cache entry. The namespace is length-prefixed so that no (namespace, key)
    /// pair spells another's key.
    pub(super) fn kv(&self, namespace: KvNamespace, key: &str) -> String {
        let namespace = namespace.as_str();
        self.under(format_args!("kv:{}:{namespace}:{key}", namespace.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
