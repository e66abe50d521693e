//! The shapes of the key table (`keys.rs`): how a family is named, who reaches it and how, and
//! how a key is built from its name.

use crate::kv::KvNamespace;
use crucible_shared::{BatchId, DeviceClass, TaskId, WorkerId};

use super::{
    BATCH, BATCH_FINISHED, BATCH_TASKS, DRAIN, KV, LEASES, QUEUED, QUEUED_CLASS, STATS, TASK, WAKE,
    WORKER, WORKERS,
};

/// A role with an ACL user of its own in `deploy/redis.conf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The API replicas (and the reaper they run): `crucible-api`.
    Api,
    /// The workers (and the reaper they run): `crucible-worker`.
    Worker,
}

/// What a role's top-level key patterns allow on a family (`~`, `%R~`, `%W~`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Not granted.
    No,
    /// `%R~`: the role's read commands only.
    Read,
    /// `%W~`: the role's write commands only.
    Write,
    /// `~`: both.
    Both,
}

/// How one role reaches one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reach {
    /// Through the user's key patterns, with the commands it may send on any of its keys.
    pub(crate) keys: Access,
    /// Commands allowed on this family alone, through a selector `(~pattern +cmd ...)`: those
    /// the role needs here but must not send on its other keys.
    pub(crate) only: &'static [&'static str],
}

pub(super) const fn reach(keys: Access) -> Reach {
    Reach { keys, only: &[] }
}
pub(super) const NO: Reach = reach(Access::No);
pub(super) const R: Reach = reach(Access::Read);
pub(super) const W: Reach = reach(Access::Write);
pub(super) const RW: Reach = reach(Access::Both);

/// Which ACL pattern grants a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Its own name up to the first placeholder, then `*` (the name itself when it has none).
    Own,
    /// A pattern covering several families, under the prefix (the tenant registry's
    /// `tenants:*`, so that a registry key added later needs no grant of its own).
    Under(&'static str),
    /// One pattern per key-value namespace, each granted only to the role [`kv_owner`](super::kv_owner) names.
    PerKvNamespace,
}

/// One family of keys.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "read by the ACL check of deploy/redis.conf, a test (keys/acl.rs)"
    )
)]
#[derive(Debug)]
pub(crate) struct Family {
    /// The name the Lua header gives it: a constant for a single key (`STATS`), a function of
    /// the placeholders, in order, for a family (`task_key(id)`).
    pub(crate) lua: &'static str,
    /// Its name under `{prefix}:`, placeholders in braces; `{#x}` is the byte length of the
    /// placeholder `x` that follows it.
    pub(crate) name: &'static str,
    /// What it holds, and when it expires.
    pub(crate) holds: &'static str,
    /// How the API's user reaches it.
    pub(crate) api: Reach,
    /// How the workers' user reaches it.
    pub(crate) worker: Reach,
    /// Which pattern grants it.
    pub(crate) grant: Grant,
}

impl Family {
    /// How `role` reaches it.
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "read by the ACL check of deploy/redis.conf, a test (keys/acl.rs)"
        )
    )]
    pub(crate) fn reach(&self, role: Role) -> Reach {
        match role {
            Role::Api => self.api,
            Role::Worker => self.worker,
        }
    }

    /// The placeholders a key of it is built from, in order (`{#x}` is derived, not one).
    pub(crate) fn params(&self) -> Vec<&'static str> {
        segments(self.name)
            .filter_map(|s| match s {
                Segment::Param(p) => Some(p),
                Segment::Text(_) | Segment::Len(_) => None,
            })
            .collect()
    }
}

/// A piece of a family's name.
pub(crate) enum Segment {
    Text(&'static str),
    Param(&'static str),
    Len(&'static str),
}

/// The pieces of `name`: text, `{param}` and `{#param}`.
pub(crate) fn segments(name: &'static str) -> impl Iterator<Item = Segment> {
    let mut rest = name;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Some(stripped) = rest.strip_prefix('{') else {
            let end = rest.find('{').unwrap_or(rest.len());
            let (text, tail) = rest.split_at(end);
            rest = tail;
            return Some(Segment::Text(text));
        };
        let end = stripped.find('}').expect("a placeholder is closed");
        let (inner, tail) = stripped.split_at(end);
        rest = &tail[1..];
        Some(match inner.strip_prefix('#') {
            Some(p) => Segment::Len(p),
            None => Segment::Param(inner),
        })
    })
}

/// Builds `family`'s key under `prefix` from its placeholders' values, in order.
pub(crate) fn build(prefix: &str, family: &Family, values: &[&str]) -> String {
    let params = family.params();
    assert_eq!(params.len(), values.len(), "{}: {params:?}", family.name);
    let value = |p: &str| values[params.iter().position(|q| *q == p).expect("a placeholder")];
    let mut key = format!("{prefix}:");
    for s in segments(family.name) {
        match s {
            Segment::Text(t) => key.push_str(t),
            Segment::Param(p) => key.push_str(value(p)),
            Segment::Len(p) => key.push_str(&value(p).len().to_string()),
        }
    }
    key
}

/// The keys the Rust side reads and writes directly (everything else only the scripts touch).
pub(crate) struct Keys<'a>(pub(crate) &'a str);

impl Keys<'_> {
    fn of(&self, family: &Family, values: &[&str]) -> String {
        build(self.0, family, values)
    }

    pub(crate) fn task(&self, id: &TaskId) -> String {
        self.of(&TASK, &[id.as_str()])
    }

    pub(crate) fn batch(&self, id: &BatchId) -> String {
        self.of(&BATCH, &[id.as_str()])
    }

    pub(crate) fn batch_tasks(&self, id: &BatchId) -> String {
        self.of(&BATCH_TASKS, &[id.as_str()])
    }

    pub(crate) fn batch_finished(&self, id: &BatchId) -> String {
        self.of(&BATCH_FINISHED, &[id.as_str()])
    }

    pub(crate) fn queued(&self) -> String {
        self.of(&QUEUED, &[])
    }

    pub(crate) fn leases(&self) -> String {
        self.of(&LEASES, &[])
    }

    /// The list blocked claimers of `class` BLPOP on.
    pub(crate) fn wake(&self, class: &DeviceClass) -> String {
        self.of(&WAKE, &[class.as_str()])
    }

    pub(crate) fn queued_class(&self) -> String {
        self.of(&QUEUED_CLASS, &[])
    }

    pub(crate) fn stats(&self) -> String {
        self.of(&STATS, &[])
    }

    pub(crate) fn worker(&self, id: &WorkerId) -> String {
        self.of(&WORKER, &[id.as_str()])
    }

    /// A drain asked of worker `id` (`lua/drain_worker.lua`, read by `lua/heartbeat.lua`).
    pub(crate) fn drain(&self, id: &WorkerId) -> String {
        self.of(&DRAIN, &[id.as_str()])
    }

    pub(crate) fn workers(&self) -> String {
        self.of(&WORKERS, &[])
    }

    /// A key-value cache entry.
    pub(crate) fn kv(&self, namespace: KvNamespace, key: &str) -> String {
        self.of(&KV, &[namespace.as_str(), key])
    }
}
