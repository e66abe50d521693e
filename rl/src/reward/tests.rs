//! The reward profiles, completion parsing and feedback, on hand-made results.

use super::*;
use crucible_shared::task::{DeviceInfo, DeviceKind, VerdictCode};

const GOOD: &str = "<think>use one block per row</think>\nHere it is.\n<KERNEL>\n```python\nclass ModelNew: pass\n```";

fn result(verdict: Verdict, passed: u32, speedup: Option<f64>) -> EvalResult {
    let mut r = EvalResult::failed_before_trials(
        VerdictCode::Correctness,
        "",
        true,
        5,
        DeviceInfo {
            kind: DeviceKind::Cuda,
            name: "H100".into(),
            class: None,
        },
    );
    r.verdict = verdict;
    r.trials_passed = passed;
    r.speedup = speedup;
    r.correct = verdict == Verdict::Ok || verdict == Verdict::Decoy;
    r.custom_time_coverage = Some(0.8);
    r
}

#[test]
fn completions_are_parsed_as_the_recipes_do() {
    let p = parse_completion(GOOD);
    assert_eq!(p.kernel.as_deref(), Some("class ModelNew: pass\n"));
    assert!(p.format_ok);
    assert_eq!(p.thinking.as_deref(), Some("use one block per row"));

    // No tag: the first fenced block is still the kernel, without the format score.
    let p = parse_completion("text\n```\nA\n```\n```\nB\n```");
    assert_eq!(p.kernel.as_deref(), Some("A\n"));
    assert!(!p.format_ok);
    assert_eq!(p.thinking, None);

    // Code drafted inside <thinking> is not the answer.
    let p = parse_completion("<thinking>\n```\ndraft\n```\n</thinking><KERNEL>```py\nfinal\n```");
    assert_eq!(p.kernel.as_deref(), Some("final\n"));
    assert!(p.thinking.is_some());

    let p = parse_completion("<KERNEL> no code at all");
    assert_eq!(p.kernel, None);
    assert!(!p.format_ok);
    assert_eq!(
        parse_completion("<think>  </think>```\nx\n```").thinking,
        None
    );
}

/// The reward of `result` for `facts` under `p`'s default weights, decoys scoring 0.
fn score(p: RewardProfile, facts: &CompletionFacts, result: &EvalResult) -> f64 {
    reward(p, &p.weights(), facts, Some(result), DecoyReward::Zero).0
}

#[test]
fn profiles_follow_their_formulas() {
    let good = parse_completion(GOOD).facts();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let ok = result(Verdict::Ok, 5, Some(2.0));
    let p = RewardProfile::KernelRl;
    // 0.1 format + 0.2 compile + 1.0 correct + 0.05 length + 0.1 thinking (speed weight 0).
    assert!(close(score(p, &good, &ok), 1.45));
    // Partial credit: 3 of 5 trials.
    let wrong = result(Verdict::Incorrect, 3, None);
    assert!(close(score(p, &good, &wrong), 0.1 + 0.2 + 0.6 + 0.05 + 0.1));

    let p = RewardProfile::Kevin;
    assert!(close(score(p, &good, &ok), 0.3 + 2.0));
    assert_eq!(score(p, &good, &wrong), 0.0);
    let untagged = parse_completion("```\nclass ModelNew: pass\n```").facts();
    assert_eq!(score(p, &untagged, &ok), 0.0);

    let p = RewardProfile::Drkernel;
    let fast = result(Verdict::Ok, 5, Some(7.0));
    assert!(close(score(p, &good, &fast), 0.5 + 0.5 * 3.0 + 0.5 * 0.8));
    let decoy = result(Verdict::Decoy, 5, Some(1.5));
    assert_eq!(score(p, &good, &decoy), 0.0);
}

#[test]
fn feedback_says_what_happened_in_a_few_capped_lines() {
    let good = parse_completion(GOOD);
    let text = feedback(&good.facts(), Some(&result(Verdict::Ok, 5, Some(1.5))));
    assert!(text.starts_with("Status: correct and faster."), "{text}");
    assert!(
        text.contains("Trials passed: 5/5") && text.contains("1.50x"),
        "{text}"
    );
    let mut wrong = result(Verdict::Incorrect, 2, None);
    wrong.error_message = Some(format!("3 of 5 trials failed\n{}", "line\n".repeat(400)));
    let text = feedback(&parse_completion("```\nx\n```").facts(), Some(&wrong));
    assert!(text.contains("correctness error") && text.contains("Format: expected"));
    assert!(text.len() <= MAX_FEEDBACK_BYTES, "{}", text.len());
    assert_eq!(
        text.matches("line").count(),
        FEEDBACK_ERROR_LINES - 1,
        "{text}"
    );
    wrong.error_message = Some(format!("{}\nsecond line", "é".repeat(1000)));
    let text = feedback(&parse_completion("```\nx\n```").facts(), Some(&wrong));
    let excerpt = text.split_once("Error:\n").unwrap().1;
    assert!(
        excerpt.len() <= FEEDBACK_ERROR_BYTES + 4,
        "{}",
        excerpt.len()
    );
    assert!(!excerpt.contains("second line"));
    let text = feedback(&parse_completion("no code").facts(), None);
    assert!(text.contains("format error"), "{text}");
}

#[test]
fn a_decoys_feedback_says_why() {
    let good = parse_completion(GOOD);
    let mut decoy = result(Verdict::Decoy, 5, None);
    decoy.flags.push(crucible_shared::task::Flag {
        rule: "no-custom-kernel".into(),
        severity: crucible_shared::task::SEVERITY_FLAG.into(),
        detail: "load_inline(name='relu') raised RuntimeError: Error building extension; the \
                 candidate caught it and its fallback ran instead"
            .into(),
    });
    let text = feedback(&good.facts(), Some(&decoy));
    assert!(text.contains("no kernel of your own ran"), "{text}");
    assert!(
        text.contains("Why: load_inline(name='relu') raised RuntimeError"),
        "{text}"
    );
    // Not a decoy: the proof-of-work flag is not repeated as a why.
    let mut ok = result(Verdict::Ok, 5, Some(1.2));
    ok.flags = decoy.flags.clone();
    assert!(!feedback(&good.facts(), Some(&ok)).contains("Why:"));
}

#[test]
fn a_hack_scores_zero_under_every_profile() {
    let good = parse_completion(GOOD);
    let hack = result(Verdict::Hack, 5, Some(9.0));
    for p in [
        RewardProfile::KernelRl,
        RewardProfile::Kevin,
        RewardProfile::Drkernel,
    ] {
        assert_eq!(
            reward(
                p,
                &p.weights(),
                &good.facts(),
                Some(&hack),
                DecoyReward::Profile
            )
            .0,
            0.0,
            "{p:?}"
        );
    }
}

#[test]
fn a_decoy_scores_zero_under_every_profile_unless_asked_for_the_formula() {
    let good = parse_completion(GOOD);
    let decoy = result(Verdict::Decoy, 5, Some(1.5));
    let failed_build = EvalResult {
        compiled: false,
        ..result(Verdict::Error, 0, None)
    };
    let p = RewardProfile::KernelRl;
    let w = p.weights();
    for profile in [p, RewardProfile::Kevin, RewardProfile::Drkernel] {
        let weights = profile.weights();
        let (r, _) = reward(
            profile,
            &weights,
            &good.facts(),
            Some(&decoy),
            DecoyReward::Zero,
        );
        assert_eq!(r, 0.0, "{profile:?}");
    }
    // The honest attempt that did not compile now outscores the torch-only answer...
    let failed = reward(p, &w, &good.facts(), Some(&failed_build), DecoyReward::Zero).0;
    assert!(failed > 0.0);
    // ... which, under the old formula, had every component but correctness and speed.
    let (old, c) = reward(p, &w, &good.facts(), Some(&decoy), DecoyReward::Profile);
    assert!((old - (0.1 + 0.2 + 0.05 + 0.1)).abs() < 1e-9, "{old}");
    assert!(old > failed && c.correctness == 0.0);
}

#[test]
fn penalties_are_off_by_default_and_a_hack_never_beats_a_penalised_failure() {
    let good = parse_completion(GOOD).facts();
    let did_not_compile = EvalResult {
        compiled: false,
        ..result(Verdict::Error, 0, None)
    };
    let wrong = result(Verdict::Incorrect, 2, None);
    let slow = result(Verdict::Ok, 5, Some(0.5));
    let fast = result(Verdict::Ok, 5, Some(2.0));
    let hack = result(Verdict::Hack, 5, Some(9.0));
    let decoy = result(Verdict::Decoy, 5, Some(1.0));
    let penalties = WeightsOverride {
        penalty_compile: Some(-1.0),
        penalty_incorrect: Some(-0.5),
        penalty_slower: Some(-0.1),
        ..WeightsOverride::default()
    };
    for p in [
        RewardProfile::KernelRl,
        RewardProfile::Kevin,
        RewardProfile::Drkernel,
    ] {
        let off = p.weights();
        let on = penalties.apply(off);
        let score =
            |w: &RewardWeights, r: &EvalResult| reward(p, w, &good, Some(r), DecoyReward::Zero);
        for r in [&did_not_compile, &wrong, &slow, &fast, &hack, &decoy] {
            assert_eq!(score(&off, r).1.penalty, 0.0, "{p:?}: off by default");
        }
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(
            score(&on, &did_not_compile).0,
            score(&off, &did_not_compile).0 - 1.0
        ));
        assert!(close(score(&on, &wrong).0, score(&off, &wrong).0 - 0.5));
        assert!(close(score(&on, &slow).0, score(&off, &slow).0 - 0.1));
        assert!(
            close(score(&on, &fast).0, score(&off, &fast).0),
            "{p:?}: no penalty"
        );
        // A hack and a decoy take the harshest penalty, below every honest failure.
        assert_eq!(score(&on, &hack).0, -1.0, "{p:?}");
        assert_eq!(score(&on, &decoy).0, -1.0, "{p:?}");
    }
    let bonus = WeightsOverride {
        penalty_slower: Some(0.5),
        ..WeightsOverride::default()
    };
    assert_eq!(
        bonus.invalid_field(),
        Some("penalty_slower"),
        "a penalty is never positive"
    );
    assert_eq!(penalties.invalid_field(), None);
}

#[test]
fn weights_can_be_overridden_and_length_breaks_ties() {
    let p = RewardProfile::KernelRl;
    let w = RewardWeights {
        speed: 0.5,
        ..p.weights()
    };
    let good = parse_completion(GOOD);
    let ok = result(Verdict::Ok, 5, Some(2.0));
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(
        reward(p, &w, &good.facts(), Some(&ok), DecoyReward::Zero).0,
        1.45 + 0.5 * 2.0
    ));
    let long = parse_completion(&format!("<KERNEL>```\n{}\n```", "x".repeat(11_000)));
    let length = reward(p, &p.weights(), &long.facts(), None, DecoyReward::Zero)
        .1
        .length;
    assert!((length - 0.5).abs() < 1e-3, "{length}");
    // No kernel extracted: nothing evaluated, only what the text earns.
    assert!(close(
        reward(
            p,
            &p.weights(),
            &parse_completion("<think>t</think>").facts(),
            None,
            DecoyReward::Zero
        )
        .0,
        0.1
    ));
}
