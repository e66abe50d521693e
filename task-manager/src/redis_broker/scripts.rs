//! The Lua scripts of the queue's transitions and reads. Each is sent as one text: the header
//! made from the key table (`keys::lua_header`: every key name, shared field and constant, so
//! their values are written once, in Rust), the shared helpers of `lua/prelude.lua`, then the
//! script itself.

use super::keys::lua_header;
use redis::Script;

/// Every script's source by name (`lua/{name}.lua`), the prelude first.
pub(super) const SOURCES: &[(&str, &str)] = &[
    ("prelude", include_str!("../lua/prelude.lua")),
    ("activity", include_str!("../lua/activity.lua")),
    ("cancel", include_str!("../lua/cancel.lua")),
    ("cancel_batch", include_str!("../lua/cancel_batch.lua")),
    ("claim", include_str!("../lua/claim.lua")),
    ("complete", include_str!("../lua/complete.lua")),
    ("drain_worker", include_str!("../lua/drain_worker.lua")),
    ("heartbeat", include_str!("../lua/heartbeat.lua")),
    ("kv_get", include_str!("../lua/kv_get.lua")),
    ("list_workers", include_str!("../lua/list_workers.lua")),
    ("reap", include_str!("../lua/reap.lua")),
    ("reaper_lease", include_str!("../lua/reaper_lease.lua")),
    ("reaper_release", include_str!("../lua/reaper_release.lua")),
    ("release", include_str!("../lua/release.lua")),
    ("renew", include_str!("../lua/renew.lua")),
    ("submit", include_str!("../lua/submit.lua")),
    ("tenant_auth", include_str!("../lua/tenant_auth.lua")),
    ("tenant_create", include_str!("../lua/tenant_create.lua")),
    ("tenant_delete", include_str!("../lua/tenant_delete.lua")),
    ("tenant_list", include_str!("../lua/tenant_list.lua")),
    ("tenant_loads", include_str!("../lua/tenant_loads.lua")),
    ("tenant_purge", include_str!("../lua/tenant_purge.lua")),
];

fn source(name: &str) -> &'static str {
    SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, body)| *body)
        .unwrap_or_else(|| panic!("no script lua/{name}.lua"))
}

/// Script `lua/{name}.lua` with the header and the prelude in front of it.
pub(super) fn script(name: &str) -> Script {
    Script::new(&format!(
        "{}{}\n{}",
        lua_header(),
        source("prelude"),
        source(name)
    ))
}

/// The scripts of the broker's own calls (the tenant registry's are in `tenants.rs`).
pub(super) struct Scripts {
    pub(super) submit: Script,
    pub(super) claim: Script,
    pub(super) renew: Script,
    pub(super) complete: Script,
    pub(super) release: Script,
    pub(super) reap: Script,
    pub(super) cancel: Script,
    pub(super) cancel_batch: Script,
    pub(super) heartbeat: Script,
    pub(super) list_workers: Script,
    pub(super) kv_get: Script,
    pub(super) activity: Script,
    pub(super) drain_worker: Script,
}

impl Scripts {
    pub(super) fn load() -> Self {
        Self {
            submit: script("submit"),
            claim: script("claim"),
            renew: script("renew"),
            complete: script("complete"),
            release: script("release"),
            reap: script("reap"),
            cancel: script("cancel"),
            cancel_batch: script("cancel_batch"),
            heartbeat: script("heartbeat"),
            list_workers: script("list_workers"),
            kv_get: script("kv_get"),
            activity: script("activity"),
            drain_worker: script("drain_worker"),
        }
    }
}
