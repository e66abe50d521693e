//! The status page in a real browser: a live `crucible up` evaluates a correct, a wrong and a
//! syntactically broken candidate; headless Chromium (Debian's `chromium`) then loads `/`,
//! and the DOM it rendered shows the worker with its state, the verdict mix of what was
//! submitted and the failing tasks, with the script's live marker; a screenshot is kept in the
//! test's log directory. With JavaScript off the server's page has the same sections and
//! figures.
//!
//! Chromium is installed by `scripts/test.sh` (`ensure_chromium` in `scripts/env.sh`). Without
//! it the test fails and says so; `CRUCIBLE_SKIP_BROWSER=1` skips it on a developer machine.

use crucible_test_support::data_cell as cell;
use crucible_tests::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Longest a browser run may take.
const BROWSER_DEADLINE: Duration = Duration::from_secs(90);

/// The browser: `CRUCIBLE_CHROMIUM`, else `chromium` or `chromium-browser` on the PATH.
fn find_chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CRUCIBLE_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs)
        .flat_map(|d| ["chromium", "chromium-browser"].map(|n| d.join(n)))
        .find(|p| p.is_file())
}

/// Runs headless Chromium on `url` with `args`, with JavaScript on or off, in a profile of its
/// own under `logs`; returns its stdout. Bounded by [`BROWSER_DEADLINE`].
async fn chromium(
    browser: &Path,
    logs: &Path,
    name: &str,
    javascript: bool,
    args: &[&str],
    url: &str,
) -> String {
    let profile = logs.join(format!("chromium-profile-{name}"));
    if !javascript {
        // The profile's content setting, as a user who turned JavaScript off has it (Blink's
        // `scriptEnabled=false` would also stop the DevTools call that dumps the DOM).
        std::fs::create_dir_all(profile.join("Default")).unwrap();
        std::fs::write(
            profile.join("Default/Preferences"),
            r#"{"profile":{"default_content_setting_values":{"javascript":2}}}"#,
        )
        .unwrap();
    }
    let mut cmd = tokio::process::Command::new(browser);
    cmd.args([
        "--headless=new",
        // Root in a container: Chromium's own sandbox needs user namespaces it may not get.
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        // Lets the page's script fetch and render (and refresh once) before the dump.
        "--virtual-time-budget=8000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args)
    .arg(url)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(std::fs::File::create(logs.join(format!("chromium-{name}.log"))).unwrap())
    .kill_on_drop(true);
    let out = tokio::time::timeout(BROWSER_DEADLINE, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("chromium ({name}) ran past {BROWSER_DEADLINE:?}"))
        .expect("chromium starts");
    assert!(
        out.status.success(),
        "chromium ({name}) failed: {:?}; see {}",
        out.status,
        logs.join(format!("chromium-{name}.log")).display()
    );
    String::from_utf8(out.stdout).expect("the DOM is UTF-8")
}

/// What every rendering of the page shows for this test's tasks, JS or not.
fn assert_page_shows(dom: &str, verdicts: &BTreeMap<String, u64>, failing: &[String]) {
    for section in ["workers", "queue", "activity", "caches", "failures"] {
        assert!(
            dom.contains(&format!(r#"<section id="{section}">"#)),
            "{section}"
        );
    }
    assert!(
        dom.contains(r#"data-state="idle""#) || dom.contains(r#"data-state="busy""#),
        "the worker's row with its state:\n{dom}"
    );
    let finished: u64 = verdicts.values().sum();
    for window in [5, 60] {
        assert_eq!(
            cell(dom, &format!("w{window}-finished")),
            finished.to_string()
        );
        for verdict in ["ok", "incorrect", "decoy", "hack", "error"] {
            let n = verdicts.get(verdict).copied().unwrap_or(0);
            assert_eq!(
                cell(dom, &format!("w{window}-{verdict}")),
                n.to_string(),
                "{verdict} in the last {window} min"
            );
        }
    }
    assert_eq!(cell(dom, "w5-code-SYNTAX"), "1");
    assert_eq!(cell(dom, "w5-code-CORRECTNESS"), "1");
    for id in failing {
        assert!(
            dom.contains(&format!(r#"data-task-id="{id}""#)),
            "failure {id} listed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_renders_live_in_chromium() {
    let Some(browser) = find_chromium() else {
        if std::env::var("CRUCIBLE_SKIP_BROWSER").as_deref() == Ok("1") {
            eprintln!("skipped: no chromium and CRUCIBLE_SKIP_BROWSER=1");
            return;
        }
        panic!(
            "chromium is not installed: scripts/test.sh installs it (ensure_chromium in \
             scripts/env.sh; apt-get install chromium), or set CRUCIBLE_CHROMIUM to a \
             Chromium binary; CRUCIBLE_SKIP_BROWSER=1 skips this test on a developer machine"
        );
    };
    let logs = log_dir("status-page");
    let port = free_port();
    let _up = Proc::spawn("crucible-up", crucible_up(port), &logs);
    let api = Api::new(port);
    api.wait_ready().await;

    let submitted = [
        ("softmax", "softmax__correct.py"),
        ("softmax", "softmax__wrong.py"),
        ("elementwise_relu", "elementwise_relu__syntax_error.py"),
    ];
    let mut ids = Vec::new();
    for (problem, candidate) in submitted {
        ids.push(api.submit(eval_body(problem, candidate, 120)).await);
    }
    let mut verdicts: BTreeMap<String, u64> = BTreeMap::new();
    let mut failing = Vec::new();
    for id in &ids {
        let task = api.wait_task(id, Duration::from_secs(300)).await;
        assert_eq!(task["status"], "done", "{task}");
        let verdict = task["result"]["verdict"].as_str().unwrap().to_owned();
        if verdict != "ok" {
            failing.push(id.clone());
        }
        *verdicts.entry(verdict).or_default() += 1;
    }
    assert_eq!(
        failing.len(),
        2,
        "the wrong and the broken one: {verdicts:?}"
    );
    assert_eq!(verdicts.get("incorrect"), Some(&1), "{verdicts:?}");
    assert_eq!(verdicts.get("error"), Some(&1), "{verdicts:?}");

    let (status, page) = api.get("/status.json").await;
    assert_eq!(status, 200, "{page}");
    let hour = &page["activity"]["windows"][1];
    assert_eq!(hour["done"], 3, "{page}");
    assert_eq!(
        page["activity"]["recent_failures"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Without any browser: the HTML as served, with its policy.
    let url = format!("{}/", api.base);
    let served = api.http.get(&url).send().await.unwrap();
    let csp = served.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    let html = served.text().await.unwrap();
    assert_page_shows(&html, &verdicts, &failing);

    // The browser with the page's script: it fetched /status.json and rendered from it.
    let dom = chromium(&browser, &logs, "js", true, &["--dump-dom"], &url).await;
    std::fs::write(logs.join("status-page-dom.html"), &dom).unwrap();
    assert!(dom.contains(r#"data-live="1""#), "the script ran:\n{dom}");
    assert!(dom.contains(r#"data-source="live""#) && dom.contains("Live: updated"));
    assert!(
        !dom.contains("Rendered by the server"),
        "replaced by the script"
    );
    assert_page_shows(&dom, &verdicts, &failing);

    let shot = logs.join("status-page.png");
    chromium(
        &browser,
        &logs,
        "screenshot",
        true,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,1600",
        ],
        &url,
    )
    .await;
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{}",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());

    // The browser with JavaScript off: the server's rendering, the same figures.
    let dom = chromium(&browser, &logs, "nojs", false, &["--dump-dom"], &url).await;
    std::fs::write(logs.join("status-page-dom-nojs.html"), &dom).unwrap();
    assert!(dom.contains(r#"data-live="0""#), "no script ran:\n{dom}");
    assert!(dom.contains(r#"data-source="server""#));
    assert_page_shows(&dom, &verdicts, &failing);
}

/// With authentication on, a browser that has no token gets the page without data, and the
/// script asks for one instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_the_browser_is_asked_for_a_token() {
    let Some(browser) = find_chromium() else {
        assert_eq!(
            std::env::var("CRUCIBLE_SKIP_BROWSER").as_deref(),
            Ok("1"),
            "chromium is not installed (see the test above)"
        );
        return;
    };
    let logs = log_dir("status-page-auth");
    let port = free_port();
    let mut cmd = crucible_up(port);
    cmd.env("CRUCIBLE_AUTH", "required").env(
        "CRUCIBLE_ADMIN_TOKEN",
        "status-page-test-admin-token-0123456789",
    );
    let _up = Proc::spawn("crucible-up", cmd, &logs);
    let api = Api::new(port);
    api.wait_ready().await;
    assert_eq!(api.get("/status.json").await.0, 401);

    let url = format!("{}/", api.base);
    let dom = chromium(&browser, &logs, "signed-out", true, &["--dump-dom"], &url).await;
    std::fs::write(logs.join("status-page-signed-out.html"), &dom).unwrap();
    assert!(dom.contains(r#"data-auth="required""#), "{dom}");
    assert!(
        dom.contains(r#"<form id="token-form">"#),
        "the script shows the token form:\n{dom}"
    );
    assert!(dom.contains("Authentication is on"));
    assert!(!dom.contains("data-worker-id") && !dom.contains(r#"data-live="1""#));
}
