//! Tests of [`super`], in a file of their own so that the module stays a readable length.

use super::*;
use crate::child::protocol::Transcript;
use crate::child::supervisor::ExitKind;
use crucible_shared::{DeviceInfo, DeviceKind};

fn ctx() -> VerdictContext {
    VerdictContext {
        trials_total: 5,
        device: DeviceInfo {
            kind: DeviceKind::Cuda,
            name: "H100".into(),
            class: None,
        },
        timeout_s: 60,
        max_output_bytes: 1 << 20,
        max_memory_bytes: 1 << 30,
        max_processes: 64,
    }
}

fn outcome(lines: &[&str], exit: ExitKind, killed_for: Option<KillReason>) -> ChildOutcome {
    let mut transcript = Transcript::default();
    for l in lines {
        transcript.push_line(l.as_bytes());
    }
    ChildOutcome {
        exit,
        killed_for,
        transcript,
        output_tail: String::new(),
        output_bytes: 0,
        wall: std::time::Duration::from_millis(10),
        peak_rss_bytes: 0,
        peak_processes: 1,
        oom_kills: 0,
        host_oom_kills: 0,
        sandbox_broken: None,
    }
}

const SETUP: &str = r#"{"event":"stage","stage":"setup"}"#;
const LOAD: &str = r#"{"event":"stage","stage":"load_candidate"}"#;

fn result_line(code: &str) -> String {
    format!(
        r#"{{"event":"result","compiled":false,"correct":false,"trials_passed":0,"trials_total":5,"error_code":"{code}","error_message":"m","device":{{"kind":"cpu","name":"x"}}}}"#
    )
}

fn code_of(v: PrepareVerdict) -> Option<VerdictCode> {
    match v {
        PrepareVerdict::Final(Classified::Verdict(r)) => r.error_code,
        _ => None,
    }
}

#[test]
fn syntax_and_compiler_failures_are_final_on_the_cpu() {
    for code in ["SYNTAX", "COMPILATION"] {
        let r = result_line(code);
        let o = outcome(&[SETUP, LOAD, &r], ExitKind::Code(0), None);
        assert!(code_of(classify_prepare(&o, &ctx())).is_some(), "{code}");
    }
}

#[test]
fn other_results_leave_the_verdict_to_the_device() {
    // A forged "correct" or an import error on the CPU decides nothing.
    for code in ["IMPORT", "RUNTIME", "CORRECTNESS"] {
        let r = result_line(code);
        let o = outcome(&[SETUP, LOAD, &r], ExitKind::Code(0), None);
        assert!(matches!(
            classify_prepare(&o, &ctx()),
            PrepareVerdict::Inconclusive(_)
        ));
    }
    let o = outcome(&[SETUP, LOAD], ExitKind::Signal(11), None);
    assert!(matches!(
        classify_prepare(&o, &ctx()),
        PrepareVerdict::Inconclusive(_)
    ));
}

#[test]
fn a_prepared_line_carries_the_builds() {
    let key = "a".repeat(64);
    let line = format!(
        r#"{{"event":"prepared","builds":[{{"name":"ext","key":"{key}","file":"build/{}/ext.so","python_module":true}}],"import_error":null}}"#,
        &key[..32]
    );
    let o = outcome(&[SETUP, LOAD, &line], ExitKind::Code(0), None);
    match classify_prepare(&o, &ctx()) {
        PrepareVerdict::Prepared(p) => assert_eq!(p.builds[0].name, "ext"),
        other => panic!("{other:?}"),
    }
    let escape = format!(
        r#"{{"event":"prepared","builds":[{{"name":"ext","key":"{key}","file":"build/../../etc/passwd","python_module":true}}],"import_error":null}}"#
    );
    let o = outcome(&[SETUP, LOAD, &escape], ExitKind::Code(0), None);
    assert!(matches!(
        classify_prepare(&o, &ctx()),
        PrepareVerdict::Inconclusive(_)
    ));
}

#[test]
fn a_prepared_line_carries_only_plain_triton_cache_files() {
    let line = |files: &[&str]| {
        format!(
            r#"{{"event":"prepared","builds":[],"import_error":null,"triton_cache":{},"triton_kernels":2,"triton_stopped":null}}"#,
            serde_json::to_string(files).unwrap()
        )
    };
    let good = [
        "cache/triton/ABC_12-x/__grp__k.json",
        "cache/triton/ABC_12-x/k.cubin",
    ];
    let o = outcome(&[SETUP, LOAD, &line(&good)], ExitKind::Code(0), None);
    match classify_prepare(&o, &ctx()) {
        PrepareVerdict::Prepared(p) => {
            assert_eq!(p.triton_cache, good);
            assert_eq!(p.triton_kernels, 2);
        }
        other => panic!("{other:?}"),
    }
    for bad in [
        "cache/triton/../x/k.cubin",
        "cache/triton/ABC/../../k",
        "/etc/passwd",
        "cache/triton/k.cubin",
        "cache/triton/A/B/k.cubin",
        "cache/triton/.hidden/k",
        "cache/triton/A/.k",
        "build/A/k.cubin",
        "cache/triton/A/k cubin",
    ] {
        let o = outcome(&[SETUP, LOAD, &line(&[bad])], ExitKind::Code(0), None);
        assert!(
            matches!(
                classify_prepare(&o, &ctx()),
                PrepareVerdict::Inconclusive(_)
            ),
            "{bad} accepted"
        );
    }
    let many: Vec<String> = (0..=crate::child::protocol::MAX_TRITON_FILES)
        .map(|i| format!("cache/triton/A/f{i}"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let o = outcome(&[SETUP, LOAD, &line(&many)], ExitKind::Code(0), None);
    assert!(matches!(
        classify_prepare(&o, &ctx()),
        PrepareVerdict::Inconclusive(_)
    ));
}

#[test]
fn a_limit_hit_in_the_dry_run_is_never_final() {
    const PRECOMPILE: &str = r#"{"event":"stage","stage":"precompile"}"#;
    for reason in [KillReason::Timeout, KillReason::Memory] {
        let o = outcome(
            &[SETUP, LOAD, PRECOMPILE],
            ExitKind::Signal(9),
            Some(reason),
        );
        assert!(matches!(
            classify_prepare(&o, &ctx()),
            PrepareVerdict::Inconclusive(_)
        ));
    }
}

#[test]
fn limits_hit_while_importing_are_final_and_before_it_are_not() {
    let o = outcome(
        &[SETUP, LOAD],
        ExitKind::Signal(9),
        Some(KillReason::Timeout),
    );
    assert_eq!(
        code_of(classify_prepare(&o, &ctx())),
        Some(VerdictCode::Timeout)
    );
    let o = outcome(&[SETUP], ExitKind::Signal(9), Some(KillReason::Timeout));
    assert!(matches!(
        classify_prepare(&o, &ctx()),
        PrepareVerdict::Inconclusive(_)
    ));
    let o = outcome(
        &[SETUP, LOAD],
        ExitKind::Signal(9),
        Some(KillReason::Cancelled),
    );
    assert_eq!(
        classify_prepare(&o, &ctx()),
        PrepareVerdict::Final(Classified::Cancelled)
    );
}

#[tokio::test]
async fn only_an_entry_whose_digests_the_broker_keeps_is_reused() {
    use crucible_shared::BrokerConfig;
    use crucible_task_manager::MemoryBroker;
    let root = tempfile::tempdir().unwrap();
    let cache = BuildCache::open(root.path(), 1, 10).unwrap();
    let task = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(task.path().join("build/k")).unwrap();
    std::fs::write(task.path().join("build/k/ext.so"), b"ELF").unwrap();
    let key = "ef".repeat(32);
    let built = crate::child::protocol::BuiltExtension {
        name: "ext".into(),
        key: "ab".repeat(32),
        file: "build/k/ext.so".into(),
        python_module: true,
    };
    let entry = cache.publish(&key, task.path(), &[built], false).unwrap();
    let stored = entry.digests.clone().expect("digests of what was stored");
    let broker = MemoryBroker::new(BrokerConfig::default());
    assert!(
        verified(&cache, None, &key).await.is_none(),
        "without a broker nothing is reused"
    );
    assert!(
        verified(&cache, Some(&broker), &key).await.is_none(),
        "an entry the broker has no record of (digests lost) is rebuilt"
    );
    broker
        .kv_put(
            BUILD_CACHE_NAMESPACE,
            &key,
            &encode_digests(&stored),
            BUILD_RECORD_TTL,
        )
        .await
        .unwrap();
    let (hit, digests) = verified(&cache, Some(&broker), &key)
        .await
        .expect("a recorded entry is reused");
    assert_eq!(hit.key, key);
    assert_eq!(digests, stored);
}
