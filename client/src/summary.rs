//! What a trainer wants to know about a scored batch at a glance: how many were correct, how
//! fast, how many were caught cheating, the mean reward. Pure, over the results.

use crucible_rl::report::{GroupReport, SampleOutcome};
use crucible_rl::rollout::{RolloutResult, RolloutStatus};
use serde::Serialize;

/// The headline figures of a set of rollout results (`Serialize`, for a trainer's logs).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RolloutSummary {
    /// Results summarised: the denominator of the rates.
    pub rollouts: usize,
    /// Rollouts with a verdict (status `done`).
    pub evaluated: usize,
    /// No kernel could be extracted (status `no_kernel`): a format failure of the model.
    pub no_kernel: usize,
    /// No verdict: `failed`, `cancelled` or `expired`.
    pub unscored: usize,
    /// Verdict `ok`, over all rollouts.
    pub correct_rate: f64,
    /// Mean speedup of the rollouts with verdict `ok` and a speedup.
    pub mean_speedup: Option<f64>,
    /// Share of all rollouts that are `ok` and faster than the reference (KernelBench's
    /// fast_1).
    pub fast_1: f64,
    /// Verdict `hack`: caught gaming the evaluation.
    pub hacks: usize,
    /// Verdict `decoy`: correct, but no kernel of its own did the work.
    pub decoys: usize,
    /// Mean reward over the rollouts that have one.
    pub mean_reward: Option<f64>,
}

impl RolloutSummary {
    /// The summary of `results`; all zero (rates 0, means None) for none. The rates and
    /// speedups are `crucible_rl::report`'s, the one definition of them.
    pub fn of<'a>(results: impl IntoIterator<Item = &'a RolloutResult>) -> Self {
        let mut s = Self::default();
        let mut rewards = Vec::new();
        let mut outcomes = Vec::new();
        for r in results {
            match r.status {
                RolloutStatus::Done => s.evaluated += 1,
                RolloutStatus::NoKernel => s.no_kernel += 1,
                _ => s.unscored += 1,
            }
            rewards.extend(r.reward);
            outcomes.push(SampleOutcome::of_rollout(r));
        }
        let group = GroupReport::of(None, &outcomes);
        s.rollouts = group.samples;
        s.correct_rate = group.correct_rate;
        s.fast_1 = group.fast(1.0);
        s.mean_speedup = group.mean_speedup;
        s.hacks = group.hacks;
        s.decoys = group.decoys;
        s.mean_reward =
            (!rewards.is_empty()).then(|| rewards.iter().sum::<f64>() / rewards.len() as f64);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_rl::reward::RewardProfile;
    use crucible_shared::Verdict;
    use crucible_shared::{DeviceInfo, DeviceKind, EvalResult, VerdictCode};

    fn rollout(
        status: RolloutStatus,
        verdict: Option<Verdict>,
        speedup: Option<f64>,
    ) -> RolloutResult {
        let result = verdict.map(|v| {
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
            r.verdict = v;
            r.speedup = speedup;
            r
        });
        RolloutResult {
            id: "r".into(),
            task_id: None,
            status,
            turn: 0,
            problem: None,
            problem_hash: String::new(),
            profile: RewardProfile::Kevin,
            reward: (status == RolloutStatus::Done || status == RolloutStatus::NoKernel)
                .then_some(1.0),
            components: None,
            format_ok: true,
            result,
            feedback: String::new(),
            error: None,
        }
    }

    #[test]
    fn rates_are_over_all_rollouts_and_speedups_over_correct_ones() {
        use RolloutStatus::*;
        let results = [
            rollout(Done, Some(Verdict::Ok), Some(2.0)),
            rollout(Done, Some(Verdict::Ok), Some(0.5)),
            rollout(Done, Some(Verdict::Hack), None),
            rollout(Done, Some(Verdict::Decoy), Some(1.5)),
            rollout(NoKernel, None, None),
            rollout(Failed, None, None),
            rollout(Done, Some(Verdict::Incorrect), None),
            rollout(Done, Some(Verdict::Ok), None),
        ];
        let s = RolloutSummary::of(&results);
        assert_eq!(
            (s.rollouts, s.evaluated, s.no_kernel, s.unscored),
            (8, 6, 1, 1)
        );
        assert_eq!((s.hacks, s.decoys), (1, 1));
        assert_eq!(s.correct_rate, 3.0 / 8.0);
        assert_eq!(s.fast_1, 1.0 / 8.0);
        assert_eq!(s.mean_speedup, Some(1.25));
        assert_eq!(s.mean_reward, Some(1.0));
        assert_eq!(RolloutSummary::of(&[]).mean_reward, None);
    }
}
