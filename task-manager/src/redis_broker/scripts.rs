//! The Lua scripts of the queue's transitions and reads. Each is sent as one text: the
//! activity constants (`activity::lua_header`, so their values are written once, in Rust),
//! the shared helpers of `lua/prelude.lua`, then the script itself.

use crate::activity::lua_header;
use redis::Script;

/// `body` (a script of `lua/`) with the header and the prelude in front of it.
pub(super) fn script(body: &str) -> Script {
    Script::new(&format!(
        "{}{}\n{body}",
        lua_header(),
        include_str!("../lua/prelude.lua")
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
            submit: script(include_str!("../lua/submit.lua")),
            claim: script(include_str!("../lua/claim.lua")),
            renew: script(include_str!("../lua/renew.lua")),
            complete: script(include_str!("../lua/complete.lua")),
            release: script(include_str!("../lua/release.lua")),
            reap: script(include_str!("../lua/reap.lua")),
            cancel: script(include_str!("../lua/cancel.lua")),
            cancel_batch: script(include_str!("../lua/cancel_batch.lua")),
            heartbeat: script(include_str!("../lua/heartbeat.lua")),
            list_workers: script(include_str!("../lua/list_workers.lua")),
            kv_get: script(include_str!("../lua/kv_get.lua")),
            activity: script(include_str!("../lua/activity.lua")),
            drain_worker: script(include_str!("../lua/drain_worker.lua")),
        }
    }
}
