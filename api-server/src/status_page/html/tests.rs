//! The page's HTML from fixed views: sections, cells the script and the end-to-end test read,
//! and escaping of everything that comes from the broker.

use super::*;
use crucible_shared::{
    Activity, ActivityWindow, CacheRate, DeviceInfo, DeviceKind, QueueStatus, RecentFailure,
    TaskId, TaskStatus, TenantCounts, Verdict, VerdictCode, VerdictCounts, WorkerHealth, WorkerId,
    WorkerInfo,
};
use std::collections::BTreeMap;

const HOSTILE: &str = r#"<script>alert("x")</script>&'"#;
const SECTIONS: [&str; 5] = ["workers", "queue", "activity", "caches", "failures"];

fn window(minutes: u32) -> ActivityWindow {
    ActivityWindow {
        minutes,
        since: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
        finished: 3,
        per_minute: 0.75,
        done: 2,
        failed: 1,
        cancelled: 0,
        verdicts: VerdictCounts {
            ok: 1,
            incorrect: 1,
            ..VerdictCounts::default()
        },
        error_codes: BTreeMap::from([("CORRECTNESS".to_owned(), 1)]),
    }
}

fn page() -> StatusPage {
    let now = DateTime::from_timestamp(1_700_000_300, 0).unwrap();
    let info = WorkerInfo {
        worker_id: WorkerId("w_1".into()),
        node: HOSTILE.into(),
        device: DeviceInfo {
            kind: DeviceKind::Cuda,
            name: "NVIDIA H100".into(),
            class: None,
        },
        device_index: Some(0),
        state: WorkerState::Busy,
        current_task: Some(TaskId::from("t_run")),
        tasks_done: 7,
        started_at: now,
        last_heartbeat: now - chrono::Duration::seconds(3),
        sandbox: None,
    };
    StatusPage {
        generated_at: now,
        version: "0.1.0".into(),
        broker: "memory".into(),
        admin: true,
        workers: vec![StatusWorker {
            health: WorkerHealth::Ok,
            info,
        }],
        queue: QueueStatus {
            queued_high: 1,
            queued_normal: 2,
            queued_low: 3,
            running: 1,
            queue_cap: 100,
            submitted_total: 9,
            done_total: 2,
            failed_total: 1,
            cancelled_total: 0,
            requeued_total: 0,
            cache_hits_total: 1,
            cache_misses_total: 3,
            coalesced_total: 0,
            ref_cache_hits_total: 0,
            ref_cache_misses_total: 0,
            classes: None,
            tenants: Some(vec![TenantCounts {
                tenant: HOSTILE.into(),
                queued: 6,
                running: 1,
            }]),
        },
        activity: Activity {
            windows: vec![window(5), window(60)],
            recent_failures: vec![RecentFailure {
                task_id: TaskId::from("t_bad"),
                finished_at: now,
                status: TaskStatus::Done,
                verdict: Some(Verdict::Incorrect),
                error_code: Some(VerdictCode::Correctness),
                message: Some(HOSTILE.into()),
                tenant: Some(HOSTILE.into()),
            }],
        },
        caches: vec![CacheRate::new("result", 1, 3)],
    }
}

#[test]
fn a_page_shows_every_section_and_the_cells_the_script_reads() {
    let html = render(Some(&page()), AuthMode::Off, None);
    for id in SECTIONS {
        assert!(html.contains(&format!(r#"<section id="{id}">"#)), "{id}");
    }
    assert!(html.contains(r#"data-worker-id="w_1""#), "{html}");
    assert!(html.contains(r#"data-state="busy""#));
    assert!(html.contains(">t_run<") && html.contains(">3 s ago<"));
    assert!(html.contains(r#"<td data-cell="w5-ok" class="num">1</td>"#));
    assert!(html.contains(r#"<td data-cell="w60-code-CORRECTNESS" class="num">1</td>"#));
    assert!(html.contains(r#"<td data-cell="w5-per_minute" class="num">0.8</td>"#));
    assert!(html.contains(r#"<td data-cell="queued-low" class="num">3</td>"#));
    assert!(html.contains(r#"data-cell="hit-rate">25.0 %<"#));
    assert!(html.contains(r#"data-task-id="t_bad""#));
    assert!(
        html.contains(r#"data-source="server">Rendered by the server at 2023-11-14 22:18:20 UTC<"#)
    );
    assert!(html.contains(r#"<p id="notice" role="status" hidden>"#));
    assert!(html.contains(r#"data-auth="off""#));
    assert!(html.contains(r#"data-live="0""#));
}

#[test]
fn names_and_messages_from_the_broker_are_escaped() {
    let html = render(Some(&page()), AuthMode::Off, None);
    // Our own script tag is the only one; the node, the tenant and the message are text.
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    assert!(!html.contains(HOSTILE));
    let escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;";
    // Node (cell and attribute), tenant (queue cell and attribute, failure), message.
    assert!(html.matches(escaped).count() >= 6, "{html}");
    assert_eq!(esc(r#"a<b>&"'"#), "a&lt;b&gt;&amp;&quot;&#39;");
}

#[test]
fn without_data_every_section_says_why() {
    let html = render(None, AuthMode::Required, Some("Authentication is on."));
    for id in SECTIONS {
        assert!(html.contains(&format!(r#"<section id="{id}">"#)), "{id}");
    }
    assert!(html.contains(r#"<p id="notice" role="status">Authentication is on.</p>"#));
    assert!(html.contains(r#"data-auth="required""#));
    assert!(html.contains(r#"data-source="none""#));
    assert!(
        html.contains("curl -H"),
        "the noscript note says how to read it"
    );
    assert!(html.matches(r#"<tr class="empty">"#).count() >= 5);
    assert!(!html.contains("data-worker-id"));
}

#[test]
fn ages_are_seconds_minutes_or_hours() {
    let now = DateTime::from_timestamp(10_000, 0).unwrap();
    let ago = |s| age(now, now - chrono::Duration::seconds(s));
    assert_eq!(ago(5), "5 s ago");
    assert_eq!(ago(300), "5 min ago");
    assert_eq!(ago(7300), "2 h ago");
    // A heartbeat stamped a little ahead of the API's clock.
    assert_eq!(ago(-2), "0 s ago");
}
