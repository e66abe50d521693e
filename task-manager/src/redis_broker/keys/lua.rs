//! The Lua header put in front of every script (`redis_broker/scripts.rs`): every key name,
//! hash field and constant the scripts share with the Rust side, written here from their one
//! Rust definition, so that `lua/` spells none of them.

use super::{FIELDS, Family, Segment, TABLE, WAKE_MAX, WAKE_TTL_MS, segments};
use crate::activity::{BUCKET_MS, BUCKETS_KEPT, FAILURES_KEPT, MESSAGE_BYTES};
use crucible_shared::device::UNCLASSED;
use crucible_shared::{Priority, TaskStatus};
use std::fmt::Write;

/// A Lua expression that spells `name` (placeholders as in `Family::name`), under the prefix
/// `P` for a key.
fn expression(key: bool, name: &'static str) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut text = String::new();
    if key {
        parts.push("P".to_owned());
        text.push(':');
    }
    let flush = |text: &mut String, parts: &mut Vec<String>| {
        if !text.is_empty() {
            parts.push(format!("'{}'", std::mem::take(text)));
        }
    };
    for s in segments(name) {
        match s {
            Segment::Text(t) => text.push_str(t),
            Segment::Param(p) => {
                flush(&mut text, &mut parts);
                parts.push(p.to_owned());
            }
            Segment::Len(p) => {
                flush(&mut text, &mut parts);
                parts.push(format!("#{p}"));
            }
        }
    }
    flush(&mut text, &mut parts);
    parts.join(" .. ")
}

/// `local NAME = expr` for a constant, `local function name(params) return expr end` else.
fn local(out: &mut String, lua: &str, params: &[&str], expr: &str) {
    if params.is_empty() {
        let _ = writeln!(out, "local {lua} = {expr}");
    } else {
        let _ = writeln!(
            out,
            "local function {lua}({}) return {expr} end",
            params.join(", ")
        );
    }
}

fn key(out: &mut String, f: &Family) {
    local(out, f.lua, &f.params(), &expression(true, f.name));
}

/// `{ 'a', 'b' }`.
fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = items.into_iter().map(|s| format!("'{s}'")).collect();
    format!("{{ {} }}", quoted.join(", "))
}

/// The header: `P` (the prefix, `ARGV[1]` of every script), the key table's names, the shared
/// hash fields, then the constants.
pub(crate) fn header() -> String {
    let mut out = String::from(
        "-- Made by redis_broker/keys/lua.rs from the key table (redis_broker/keys.rs).\n\
         local P = ARGV[1]\n",
    );
    for f in TABLE {
        key(&mut out, f);
    }
    for (lua, field) in FIELDS {
        let params: Vec<&str> = segments(field)
            .filter_map(|s| match s {
                Segment::Param(p) => Some(p),
                Segment::Text(_) | Segment::Len(_) => None,
            })
            .collect();
        local(&mut out, lua, &params, &expression(false, field));
    }
    let terminal: Vec<String> = TaskStatus::ALL
        .into_iter()
        .filter(|s| s.is_terminal())
        .map(|s| format!("{} = true", s.as_str()))
        .collect();
    let initials: Vec<String> = Priority::ALL
        .into_iter()
        .map(|p| format!("{} = '{}'", &p.as_str()[..1], p.as_str()))
        .collect();
    let _ = write!(
        out,
        "local ANY = '{UNCLASSED}'\n\
         local WAKE_MAX = {WAKE_MAX}\n\
         local WAKE_TTL_MS = {WAKE_TTL_MS}\n\
         local TERMINAL = {{ {} }}\n\
         local PRIORITIES = {}\n\
         local PRIORITY_BY_INITIAL = {{ {} }}\n\
         local ACTIVITY_BUCKET_MS = {BUCKET_MS}\n\
         local ACTIVITY_BUCKETS = {BUCKETS_KEPT}\n\
         local ACTIVITY_FAILURES = {FAILURES_KEPT}\n\
         local ACTIVITY_MESSAGE_BYTES = {MESSAGE_BYTES}\n",
        terminal.join(", "),
        list(Priority::ALL.map(Priority::as_str)),
        initials.join(", "),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_spells_the_layout() {
        let h = header();
        for line in [
            "local P = ARGV[1]\n",
            "local STATS = P .. ':stats'\n",
            "local function task_key(id) return P .. ':task:' .. id end\n",
            "local function batch_finished_key(b) return P .. ':batch:' .. b .. ':finished' end\n",
            "local function queue_key(class, tenant, prio) return P .. ':queue:' .. class .. ':' \
             .. tenant .. ':' .. prio end\n",
            "local function kv_key(ns, key) return P .. ':kv:' .. #ns .. ':' .. ns .. ':' .. key \
             end\n",
            "local TOKENS = P .. ':tenants:tokens'\n",
            "local function tenant_key(tenant) return P .. ':tenants:record:' .. tenant end\n",
            "local OPEN_BYTES = 'open_bytes'\n",
            "local function activity_field(minute) return 'activity:' .. minute end\n",
            "local function kv_hits_field(ns) return 'kv:' .. ns .. ':hits' end\n",
            "local function claim_seq_field(class, tenant) return class .. ':' .. tenant end\n",
            "local ANY = 'any'\n",
            "local WAKE_MAX = 1024\n",
            "local WAKE_TTL_MS = 60000\n",
            "local TERMINAL = { done = true, failed = true, cancelled = true }\n",
            "local PRIORITIES = { 'high', 'normal', 'low' }\n",
            "local PRIORITY_BY_INITIAL = { h = 'high', n = 'normal', l = 'low' }\n",
            "local ACTIVITY_BUCKETS = 60\n",
            "local ACTIVITY_BUCKET_MS = 60000\n",
        ] {
            assert!(h.contains(line), "{line:?} not in\n{h}");
        }
    }

    #[test]
    fn the_scripts_spell_no_key_themselves() {
        // Every key comes from the header: a script that joins the prefix itself, or names a
        // key family's text, bypasses the table.
        for (name, body) in crate::redis_broker::scripts::SOURCES {
            for line in body.lines().filter(|l| !l.trim_start().starts_with("--")) {
                assert!(!line.contains("P .."), "{name} builds a key: {line}");
                assert!(!line.contains("ARGV[1]"), "{name} reads the prefix: {line}");
                // Names with a ':' (a bare word like 'queued' is also a status).
                for f in TABLE {
                    let head = f.name.split('{').next().unwrap_or_default();
                    if head.contains(':') {
                        let quoted = format!("'{head}");
                        assert!(!line.contains(&quoted), "{name} spells {}: {line}", f.name);
                    }
                }
                for (_, field) in FIELDS {
                    let head = field.split('{').next().unwrap_or_default();
                    if head.contains(':') || !field.contains('{') {
                        let quoted = format!("'{head}");
                        assert!(!line.contains(&quoted), "{name} spells {field}: {line}");
                    }
                }
            }
        }
    }
}
