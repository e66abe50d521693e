//! The fd-3 protocol's parsing: what a child may say, what is refused.

use super::*;

const RESULT: &str = r#"{"event":"result","compiled":true,"correct":true,"trials_passed":5,"trials_total":5,"max_abs_diff":0.0,"mean_abs_diff":0.0,"runtime_ms":{"median":1.0,"mean":1.0,"std":0.1,"min":0.9,"max":1.2},"ref_runtime_ms":{"median":2.0,"mean":2.0,"std":0.1,"min":1.9,"max":2.2},"speedup":2.0,"error_code":null,"error_message":null,"device":{"kind":"cpu","name":"x"},"stage_ms":{"setup":1.0}}"#;

#[test]
fn parses_stages_then_result() {
    let mut t = Transcript::default();
    t.push_line(br#"{"event":"stage","stage":"setup"}"#);
    t.push_line(br#"{"event":"stage","stage":"correctness"}"#);
    t.push_line(RESULT.as_bytes());
    assert_eq!(t.violation, None);
    assert_eq!(t.last_stage(), Some(Stage::Correctness));
    let r = t.result.unwrap();
    assert_eq!(r.speedup, Some(2.0));
    assert_eq!(r.runtime_ms.unwrap().median, 1.0);
}

#[test]
fn the_first_footprint_is_kept_and_a_malformed_one_is_a_violation() {
    let mut t = Transcript::default();
    t.push_line(br#"{"event":"footprint","bytes":38654705664}"#);
    t.push_line(br#"{"event":"footprint","bytes":1}"#);
    assert_eq!(t.violation, None);
    assert_eq!(t.footprint, Some(36 << 30));
    for bad in [
        &br#"{"event":"footprint","bytes":-1}"#[..],
        br#"{"event":"footprint","bytes":1e30}"#,
        br#"{"event":"footprint"}"#,
    ] {
        let mut t = Transcript::default();
        t.push_line(bad);
        assert!(t.violation.is_some(), "{}", String::from_utf8_lossy(bad));
        assert_eq!(t.footprint, None);
    }
}

#[test]
fn every_stage_keeps_its_wire_name() {
    for (stage, name) in Stage::NAMES {
        assert_eq!(Stage::parse(name), Some(stage));
        assert_eq!(stage.as_str(), name);
    }
    assert_eq!(Stage::parse("Setup"), None);
}

#[test]
fn an_unknown_stage_is_recorded_not_a_violation_of_the_candidate() {
    let mut t = Transcript::default();
    t.push_line(br#"{"event":"stage","stage":"setup"}"#);
    t.push_line(br#"{"event":"stage","stage":"warp_drive"}"#);
    t.push_line(br#"{"event":"stage","stage":"load_reference"}"#);
    assert_eq!(t.violation, None);
    assert_eq!(t.unknown_stage.as_deref(), Some("warp_drive"));
    assert_eq!(t.stages, vec![Stage::Setup, Stage::LoadReference]);
}

#[test]
fn a_second_result_is_a_violation() {
    let mut t = Transcript::default();
    t.push_line(RESULT.as_bytes());
    t.push_line(RESULT.as_bytes());
    assert_eq!(t.violation.as_deref(), Some("output after the result"));
}

#[test]
fn garbage_and_inconsistent_results_are_violations() {
    for line in [
        &b"not json"[..],
        br#"{"event":"launch_missiles"}"#,
        br#"{"event":"stage","stage":"a b"}"#,
        RESULT
            .replace(r#""trials_passed":5"#, r#""trials_passed":6"#)
            .as_bytes(),
        RESULT
            .replace(r#""trials_passed":5"#, r#""trials_passed":4"#)
            .as_bytes(),
        RESULT
            .replace(r#""speedup":2.0"#, r#""speedup":-1.0"#)
            .as_bytes(),
        RESULT
            .replace(r#""compiled":true,"#, r#""compiled":true,"bonus":1,"#)
            .as_bytes(),
    ] {
        let mut t = Transcript::default();
        t.push_line(line);
        assert!(t.violation.is_some(), "{}", String::from_utf8_lossy(line));
        assert!(t.result.is_none());
    }
}

#[test]
fn cached_reference_timing_and_software_are_read() {
    let line = RESULT.replace(
        r#""stage_ms":{"setup":1.0}"#,
        r#""stage_ms":{"setup":1.0},"ref_timing_cached":true,"software":{"torch":"2.5.1","triton":null,"cuda":"12.4","python":"3.11.7"}"#,
    );
    let mut t = Transcript::default();
    t.push_line(line.as_bytes());
    assert_eq!(t.violation, None);
    let r = t.result.unwrap();
    assert!(r.ref_timing_cached);
    let sw = r.software.unwrap();
    assert_eq!(sw["torch"].as_deref(), Some("2.5.1"));
    assert_eq!(sw["triton"], None);

    let mut t = Transcript::default();
    t.push_line(RESULT.as_bytes());
    assert!(!t.result.as_ref().unwrap().ref_timing_cached);
    assert_eq!(t.result.unwrap().software, None);

    for bad in [
        RESULT
            .replace(
                r#""ref_runtime_ms":{"median":2.0,"mean":2.0,"std":0.1,"min":1.9,"max":2.2}"#,
                r#""ref_runtime_ms":null"#,
            )
            .replace(
                r#""stage_ms":{"setup":1.0}"#,
                r#""stage_ms":{},"ref_timing_cached":true"#,
            ),
        RESULT.replace(
            r#""stage_ms":{"setup":1.0}"#,
            &format!(
                r#""stage_ms":{{}},"software":{{"torch":"{}"}}"#,
                "x".repeat(200)
            ),
        ),
    ] {
        let mut t = Transcript::default();
        t.push_line(bad.as_bytes());
        assert!(t.violation.is_some(), "{bad}");
    }
}

#[test]
fn flags_are_read_and_bounded() {
    let screened = r#"{"event":"result","compiled":false,"correct":false,"trials_passed":0,"trials_total":5,"error_code":"SCREENED","error_message":"x","device":{"kind":"cpu","name":"x"},"stage_ms":{},"flags":[{"rule":"dynamic-code","severity":"reject","detail":"line 3: uses builtins.exec"}]}"#;
    let mut t = Transcript::default();
    t.push_line(screened.as_bytes());
    assert_eq!(t.violation, None);
    let r = t.result.unwrap();
    assert_eq!(r.error_code, Some(VerdictCode::Screened));
    assert_eq!(r.flags[0].rule, "dynamic-code");

    let many = format!(
        r#"[{}]"#,
        vec![r#"{"rule":"a","severity":"flag","detail":"d"}"#; 65].join(",")
    );
    for bad in [
        screened.replace(r#""severity":"reject""#, r#""severity":"flag""#),
        screened.replace(r#""severity":"reject""#, r#""severity":"fatal""#),
        screened.replace("line 3", &"x".repeat(300)),
        RESULT.replace(
            r#""stage_ms":{"setup":1.0}"#,
            &format!(r#""stage_ms":{{}},"flags":{many}"#),
        ),
    ] {
        let mut t = Transcript::default();
        t.push_line(bad.as_bytes());
        assert!(t.violation.is_some(), "{bad}");
    }
}

#[test]
fn integrity_findings_are_consistent_with_the_verdict() {
    let caught = r#"{"event":"result","compiled":true,"correct":false,"trials_passed":2,"trials_total":2,"error_code":"INTEGRITY","error_message":"x","device":{"kind":"cpu","name":"x"},"flags":[{"rule":"input-mutated","severity":"hack","detail":"trial 0"}],"custom_kernel_count":1,"total_kernel_count":2,"custom_time_coverage":0.5}"#;
    let mut t = Transcript::default();
    t.push_line(caught.as_bytes());
    assert_eq!(t.violation, None);
    let r = t.result.unwrap();
    assert_eq!(r.error_code, Some(VerdictCode::Integrity));
    assert_eq!(r.custom_kernel_count, Some(1));
    for bad in [
        // A hack finding is never correct.
        caught
            .replace(r#""correct":false"#, r#""correct":true"#)
            .replace(r#""error_code":"INTEGRITY","error_message":"x","#, ""),
        // INTEGRITY needs the finding that decided it.
        caught.replace(r#""severity":"hack""#, r#""severity":"flag""#),
        caught.replace(r#""custom_kernel_count":1"#, r#""custom_kernel_count":3"#),
        caught.replace(
            r#""custom_time_coverage":0.5"#,
            r#""custom_time_coverage":1.5"#,
        ),
    ] {
        let mut t = Transcript::default();
        t.push_line(bad.as_bytes());
        assert!(t.violation.is_some(), "{bad}");
    }
}

#[test]
fn nulls_are_accepted_for_optional_fields() {
    let mut t = Transcript::default();
    t.push_line(
        br#"{"event":"result","compiled":false,"correct":false,"trials_passed":0,"trials_total":5,"max_abs_diff":null,"runtime_ms":null,"error_code":"SYNTAX","error_message":"bad","device":{"kind":"cuda","name":"H100"},"stage_ms":{}}"#,
    );
    assert_eq!(t.violation, None);
    assert_eq!(t.result.unwrap().error_code, Some(VerdictCode::Syntax));
}
