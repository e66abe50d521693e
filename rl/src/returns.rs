//! Multi-turn returns (Kevin-style refinement loops): the discounted return of each turn,
//! `R_t = s_t + γ · R_{t+1}`, and the rule that ends a trajectory early. The one definition:
//! the server's episodes (`episode`) and the clients (`crucible_client::returns`) use these.

use crucible_shared::task::{EvalResult, Verdict};

/// γ of the recipes (kernel_rl, Kevin): 0.4 ([`crucible_shared::bounds::EPISODE_GAMMA`]).
pub const DEFAULT_GAMMA: f64 = crucible_shared::bounds::EPISODE_GAMMA.default;

/// `R_t = s_t + γ · R_{t+1}` for every turn `t` of one trajectory, from its per-turn scores.
pub fn discounted_returns(scores: &[f64], gamma: f64) -> Vec<f64> {
    let mut returns = vec![0.0; scores.len()];
    let mut next = 0.0;
    for (t, score) in scores.iter().enumerate().rev() {
        next = score + gamma * next;
        returns[t] = next;
    }
    returns
}

/// Whether a trajectory stops after this turn: the kernel is correct (verdict `ok`), and when a
/// threshold is given, at least that fast.
pub fn stops_early(result: &EvalResult, min_speedup: Option<f64>) -> bool {
    result.verdict == Verdict::Ok
        && min_speedup.is_none_or(|min| result.speedup.is_some_and(|s| s >= min))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_shared::task::{DeviceInfo, DeviceKind, VerdictCode};

    #[test]
    fn returns_discount_later_turns() {
        let r = discounted_returns(&[0.1, 0.3, 1.3], DEFAULT_GAMMA);
        let want = [0.1 + 0.4 * (0.3 + 0.4 * 1.3), 0.3 + 0.4 * 1.3, 1.3];
        for (got, want) in r.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{r:?}");
        }
        assert!(discounted_returns(&[], 0.4).is_empty());
    }

    #[test]
    fn a_correct_kernel_ends_the_trajectory() {
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
        r.verdict = Verdict::Incorrect;
        assert!(!stops_early(&r, None));
        r.verdict = Verdict::Ok;
        r.speedup = Some(0.8);
        assert!(stops_early(&r, None));
        assert!(!stops_early(&r, Some(1.0)));
        r.speedup = Some(1.2);
        assert!(stops_early(&r, Some(1.0)));
        r.verdict = Verdict::Hack;
        assert!(!stops_early(&r, None));
    }
}
