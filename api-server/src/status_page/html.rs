//! The status page as HTML, from a [`StatusPage`], or from none (signed out, broker down): the
//! same sections, each saying why it is empty. Pure, so it is tested without a server.
//!
//! Every value that comes from the broker or a worker (node, device and tenant names, ids,
//! messages) passes [`esc`]. `status.js` renders the same elements from `/status.json`: the
//! ids and `data-*` attributes here are its contract, and the end-to-end test's
//! (`tests/tests/status_page.rs`).

use super::{JSON_PATH, REFRESH_S};
use crate::auth::{AuthMode, SCRIPT_PATH, STYLE_PATH};
use chrono::{DateTime, Utc};
use crucible_shared::{
    ActivityWindow, DeviceKind, StatusPage, StatusWorker, WorkerState, wire_name,
};
use std::collections::BTreeSet;
use std::fmt::Write;

/// `s` with the five characters that mean something in HTML text or a quoted attribute
/// replaced by their entities.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A time as the page shows it (`status.js` `time` writes it alike).
fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// How long before `now` `t` was (`status.js` `age`).
fn age(now: DateTime<Utc>, t: DateTime<Utc>) -> String {
    let s = (now - t).num_seconds().max(0);
    match s {
        0..120 => format!("{s} s ago"),
        120..7200 => format!("{} min ago", s / 60),
        _ => format!("{} h ago", s / 3600),
    }
}

/// `<td>` cells: (attributes, text); the text is escaped here.
fn row(out: &mut String, attrs: &str, cells: &[(&str, String)]) {
    let _ = write!(out, "<tr{attrs}>");
    for (cell_attrs, text) in cells {
        let _ = write!(out, "<td{cell_attrs}>{}</td>", esc(text));
    }
    out.push_str("</tr>");
}

/// The one row of a table with nothing to show, saying why.
fn empty_row(out: &mut String, columns: usize, why: &str) {
    let _ = write!(
        out,
        r#"<tr class="empty"><td colspan="{columns}">{}</td></tr>"#,
        esc(why)
    );
}

/// The activity table's rows: (key, label). Error codes follow, one row each (`code-…`).
const ACTIVITY_ROWS: [(&str, &str); 10] = [
    ("finished", "Finished"),
    ("per_minute", "Per minute"),
    ("done", "Done (a verdict)"),
    ("ok", "· ok"),
    ("incorrect", "· incorrect"),
    ("decoy", "· decoy"),
    ("hack", "· hack"),
    ("error", "· error"),
    ("failed", "Failed (no verdict)"),
    ("cancelled", "Cancelled"),
];

fn activity_value(w: &ActivityWindow, key: &str) -> String {
    let v = &w.verdicts;
    let n = match key {
        "finished" => w.finished,
        "per_minute" => return format!("{:.1}", w.per_minute),
        "done" => w.done,
        "ok" => v.ok,
        "incorrect" => v.incorrect,
        "decoy" => v.decoy,
        "hack" => v.hack,
        "error" => v.error,
        "failed" => w.failed,
        "cancelled" => w.cancelled,
        code => w
            .error_codes
            .get(code.trim_start_matches("code-"))
            .copied()
            .unwrap_or(0),
    };
    n.to_string()
}

fn device(w: &StatusWorker) -> String {
    let kind = match w.info.device.kind {
        DeviceKind::Cuda => "GPU",
        DeviceKind::Cpu => "CPU",
    };
    match w.info.device_index {
        Some(i) => format!("{kind} {i} · {}", w.info.device.name),
        None => format!("{kind} · {}", w.info.device.name),
    }
}

fn workers(out: &mut String, page: Option<&StatusPage>, why: &str) {
    let Some(page) = page else {
        return empty_row(out, 7, why);
    };
    if page.workers.is_empty() {
        return empty_row(out, 7, "No worker is registered.");
    }
    for w in &page.workers {
        let state = wire_name(&w.info.state);
        let health = wire_name(&w.health);
        let attrs = format!(
            r#" data-worker-id="{}" data-node="{}" data-state="{}""#,
            esc(w.info.worker_id.as_str()),
            esc(&w.info.node),
            esc(&state)
        );
        let task = w.info.current_task.as_ref().map_or("–", |t| t.as_str());
        row(
            out,
            &attrs,
            &[
                ("", w.info.node.clone()),
                ("", device(w)),
                (&format!(r#" class="state-{state}""#), state.clone()),
                (&format!(r#" class="health-{health}""#), health.clone()),
                (r#" class="mono""#, task.to_owned()),
                (r#" class="num""#, w.info.tasks_done.to_string()),
                ("", age(page.generated_at, w.info.last_heartbeat)),
            ],
        );
    }
}

fn queue(out: &mut String, page: Option<&StatusPage>, why: &str) {
    out.push_str(r#"<table id="queue-priorities"><thead><tr><th>High</th><th>Normal</th><th>Low</th><th>Running</th><th>Cap</th></tr></thead><tbody id="priority-rows">"#);
    match page {
        Some(p) => {
            let q = &p.queue;
            let cells: Vec<(String, String)> = [
                ("queued-high", q.queued_high),
                ("queued-normal", q.queued_normal),
                ("queued-low", q.queued_low),
                ("running", q.running),
                ("queue-cap", q.queue_cap),
            ]
            .iter()
            .map(|(k, n)| (format!(r#" data-cell="{k}" class="num""#), n.to_string()))
            .collect();
            let cells: Vec<(&str, String)> =
                cells.iter().map(|(a, t)| (a.as_str(), t.clone())).collect();
            row(out, "", &cells);
        }
        None => empty_row(out, 5, why),
    }
    out.push_str(r#"</tbody></table><h3>By tenant</h3><table id="queue-tenants"><thead><tr><th>Tenant</th><th>Queued</th><th>Running</th></tr></thead><tbody id="tenant-rows">"#);
    let tenants = page.and_then(|p| p.queue.tenants.as_deref());
    match tenants {
        None => empty_row(out, 3, why),
        Some([]) => empty_row(out, 3, "No tenant has open tasks."),
        Some(tenants) => {
            for t in tenants {
                row(
                    out,
                    &format!(r#" data-tenant="{}""#, esc(&t.tenant)),
                    &[
                        ("", t.tenant.clone()),
                        (r#" class="num""#, t.queued.to_string()),
                        (r#" class="num""#, t.running.to_string()),
                    ],
                );
            }
        }
    }
    out.push_str("</tbody></table>");
}

fn activity(out: &mut String, page: Option<&StatusPage>, why: &str) {
    let Some(windows) = page.map(|p| &p.activity.windows) else {
        return empty_row(out, 3, why);
    };
    let codes: BTreeSet<String> = windows
        .iter()
        .flat_map(|w| w.error_codes.keys().map(|c| format!("code-{c}")))
        .collect();
    let labels = ACTIVITY_ROWS
        .iter()
        .map(|(k, l)| ((*k).to_owned(), (*l).to_owned()))
        .chain(
            codes
                .iter()
                .map(|c| (c.clone(), format!("· · {}", &c[5..]))),
        );
    for (key, label) in labels {
        let _ = write!(
            out,
            r#"<tr data-row="{}"><th scope="row">{}</th>"#,
            esc(&key),
            esc(&label)
        );
        for w in windows {
            let _ = write!(
                out,
                r#"<td data-cell="w{}-{}" class="num">{}</td>"#,
                w.minutes,
                esc(&key),
                esc(&activity_value(w, &key))
            );
        }
        out.push_str("</tr>");
    }
}

fn caches(out: &mut String, page: Option<&StatusPage>, why: &str) {
    let Some(page) = page else {
        return empty_row(out, 4, why);
    };
    for c in &page.caches {
        let rate = c
            .hit_rate
            .map_or("–".to_owned(), |r| format!("{:.1} %", r * 100.0));
        row(
            out,
            &format!(r#" data-cache="{}""#, esc(&c.cache)),
            &[
                ("", c.cache.clone()),
                (r#" class="num""#, c.hits.to_string()),
                (r#" class="num""#, c.misses.to_string()),
                (r#" class="num" data-cell="hit-rate""#, rate),
            ],
        );
    }
}

fn failures(out: &mut String, page: Option<&StatusPage>, why: &str) {
    let Some(page) = page else {
        return empty_row(out, 7, why);
    };
    let list = &page.activity.recent_failures;
    if list.is_empty() {
        return empty_row(out, 7, "No failure in the last tasks.");
    }
    for f in list {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "–".to_owned());
        row(
            out,
            &format!(r#" data-task-id="{}""#, esc(f.task_id.as_str())),
            &[
                ("", time(f.finished_at)),
                (r#" class="mono""#, f.task_id.as_str().to_owned()),
                ("", wire_name(&f.status)),
                ("", opt(f.verdict.map(|v| wire_name(&v)))),
                ("", opt(f.error_code.map(|c| wire_name(&c)))),
                (r#" class="message""#, opt(f.message.clone())),
                ("", opt(f.tenant.clone())),
            ],
        );
    }
}

/// The whole page. `page` is None when there is nothing to show (`notice` says why); `auth`
/// tells the script whether to ask for a token.
pub(super) fn render(page: Option<&StatusPage>, auth: AuthMode, notice: Option<&str>) -> String {
    let auth = match auth {
        AuthMode::Off => "off",
        AuthMode::Required => "required",
    };
    let why = notice.unwrap_or("No data.");
    let mut out = String::with_capacity(16 << 10);
    let _ = write!(
        out,
        r#"<!doctype html>
<html lang="en" data-live="0">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Crucible status</title>
<link rel="stylesheet" href="{STYLE_PATH}">
<script src="{SCRIPT_PATH}" defer></script>
</head>
<body data-auth="{auth}" data-refresh-s="{REFRESH_S}" data-json="{JSON_PATH}">
<header>
<h1>Crucible status</h1>
<p id="meta">"#
    );
    match page {
        Some(p) => {
            let _ = write!(
                out,
                r#"<span id="generated-at" data-source="server">Rendered by the server at {}</span> · <span id="broker">broker: {}</span> · <span id="version">version {}</span>"#,
                esc(&time(p.generated_at)),
                esc(&p.broker),
                esc(&p.version)
            );
        }
        None => out.push_str(
            r#"<span id="generated-at" data-source="none">No data</span> · <span id="broker"></span> · <span id="version"></span>"#,
        ),
    }
    out.push_str("</p>\n");
    let hidden = if notice.is_some() { "" } else { " hidden" };
    let _ = write!(
        out,
        r#"<p id="notice" role="status"{hidden}>{}</p>
<form id="token-form" hidden><label for="token">Token</label> <input id="token" type="password" autocomplete="off" required> <button type="submit">Show</button></form>
<button id="forget-token" type="button" hidden>Forget the token</button>
<noscript><p>JavaScript is off: this page shows the moment it was loaded; reload it to refresh."#,
        esc(notice.unwrap_or(""))
    );
    if auth == "required" {
        out.push_str(
            " With authentication on, a browser without JavaScript sends no token: read \
             <code>/status.json</code> with <code>curl -H 'Authorization: Bearer TOKEN'</code>.",
        );
    }
    out.push_str("</p></noscript>\n</header>\n<main>\n");

    out.push_str(r#"<section id="workers"><h2>Workers</h2><p id="workers-summary">"#);
    if let Some(p) = page {
        let alive = p
            .workers
            .iter()
            .filter(|w| w.info.state != WorkerState::Lost)
            .count();
        let _ = write!(out, "{} registered, {alive} alive", p.workers.len());
    }
    out.push_str(r#"</p><table><thead><tr><th>Node</th><th>Device</th><th>State</th><th>Health</th><th>Current task</th><th>Tasks done</th><th>Last heartbeat</th></tr></thead><tbody id="worker-rows">"#);
    workers(&mut out, page, why);
    out.push_str("</tbody></table></section>\n");

    out.push_str(r#"<section id="queue"><h2>Queue</h2>"#);
    queue(&mut out, page, why);
    out.push_str("</section>\n");

    out.push_str(r#"<section id="activity"><h2>Throughput and verdicts</h2><table><thead><tr id="activity-head"><th></th>"#);
    let minutes: Vec<u32> = match page {
        Some(p) => p.activity.windows.iter().map(|w| w.minutes).collect(),
        None => Vec::new(),
    };
    for m in &minutes {
        let _ = write!(out, r#"<th data-window="{m}">Last {m} min</th>"#);
    }
    out.push_str(r#"</tr></thead><tbody id="activity-rows">"#);
    activity(&mut out, page, why);
    out.push_str("</tbody></table></section>\n");

    out.push_str(r#"<section id="caches"><h2>Caches</h2><table><thead><tr><th>Cache</th><th>Hits</th><th>Misses</th><th>Hit rate</th></tr></thead><tbody id="cache-rows">"#);
    caches(&mut out, page, why);
    out.push_str("</tbody></table></section>\n");

    out.push_str(r#"<section id="failures"><h2>Recent failures</h2><table><thead><tr><th>Finished</th><th>Task</th><th>Status</th><th>Verdict</th><th>Code</th><th>Message</th><th>Tenant</th></tr></thead><tbody id="failure-rows">"#);
    failures(&mut out, page, why);
    out.push_str("</tbody></table></section>\n</main>\n</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests;
