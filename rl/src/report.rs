//! Batch reports (`GET /batches/{id}/report`): per level and overall, the correct rate,
//! KernelBench's fast_p, the speedups and the cheating counts of a batch's samples. The one
//! definition of those figures: the API's report and the Rust client's rollout summary both
//! read them from here. Pure.
//!
//! Definitions, all over every sample of the group (the denominator never drops a sample):
//! - *correct*: verdict `ok` (a decoy's or a hack's outputs may match, but it is not counted);
//! - *fast_p*: correct and a measured speedup strictly greater than p (KernelBench's
//!   `is_correct & (speedup > p)`); a correct sample without a speedup (timing off) is not
//!   fast for any p, not even 0;
//! - samples without a verdict (the service failed, cancelled, expired, or still running)
//!   count as not correct and are reported as `unscored` (`pending` for the running ones);
//! - mean and geometric-mean speedup are over the correct samples with a speedup.

use crate::rollout::{RolloutResult, RolloutStatus};
use crucible_shared::ids::BatchId;
use crucible_shared::task::{TaskStatus, TaskView, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// The p of the reported fast_p, in order (KernelBench reports fast_0, fast_1 and up).
pub const FAST_P_THRESHOLDS: [f64; 5] = [0.0, 1.0, 1.2, 1.5, 2.0];

/// What became of one sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SampleOutcome {
    /// Evaluated: its verdict and, when it was timed, its speedup.
    Judged {
        /// The result's verdict.
        verdict: Verdict,
        /// The result's speedup; None when it was not timed.
        speedup: Option<f64>,
    },
    /// A rollout whose completion held no kernel: judged as not correct without evaluation.
    NoKernel,
    /// Still queued or running.
    Pending,
    /// No verdict: the service failed it, it was cancelled, or its record expired.
    Unscored,
}

impl SampleOutcome {
    /// The outcome of a task's view; None for a task whose record expired.
    pub fn of_task(task: Option<&TaskView>) -> Self {
        let Some(task) = task else {
            return SampleOutcome::Unscored;
        };
        match (task.status, &task.result) {
            (TaskStatus::Queued | TaskStatus::Running, _) => SampleOutcome::Pending,
            (TaskStatus::Done, Some(r)) => SampleOutcome::Judged {
                verdict: r.verdict,
                speedup: r.speedup,
            },
            _ => SampleOutcome::Unscored,
        }
    }

    /// The outcome of a scored rollout.
    pub fn of_rollout(r: &RolloutResult) -> Self {
        match (r.status, &r.result) {
            (RolloutStatus::NoKernel, _) => SampleOutcome::NoKernel,
            (RolloutStatus::Done, Some(result)) => SampleOutcome::Judged {
                verdict: result.verdict,
                speedup: result.speedup,
            },
            _ => SampleOutcome::Unscored,
        }
    }

    /// Verdict `ok`.
    pub fn correct(&self) -> bool {
        matches!(
            self,
            SampleOutcome::Judged {
                verdict: Verdict::Ok,
                ..
            }
        )
    }

    /// The speedup of a correct sample that was timed.
    pub fn correct_speedup(&self) -> Option<f64> {
        match self {
            SampleOutcome::Judged {
                verdict: Verdict::Ok,
                speedup,
            } => *speedup,
            _ => None,
        }
    }

    /// Counted in fast_p: correct and faster than `p` times the reference.
    pub fn is_fast(&self, p: f64) -> bool {
        self.correct_speedup().is_some_and(|s| s > p)
    }
}

/// One sample of a batch: its level (None when it named no registered problem) and outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// The KernelBench level of its problem, when it named a registered one.
    pub level: Option<u32>,
    /// What became of it.
    pub outcome: SampleOutcome,
}

/// fast_p for one p.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FastP {
    /// The speedup a sample must exceed.
    pub p: f64,
    /// Samples correct with a speedup above `p`.
    pub count: usize,
    /// `count` over all samples of the group (0 for none).
    pub rate: f64,
}

/// The figures of one group of samples (a level, the level-less ones, or all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GroupReport {
    /// The level; null for the samples that named no registered problem, and for `overall`.
    pub level: Option<u32>,
    /// Every sample of the group: the denominator of every rate.
    pub samples: usize,
    /// Verdict `ok`.
    pub correct: usize,
    /// `correct` over `samples`.
    pub correct_rate: f64,
    /// fast_p for p in 0, 1, 1.2, 1.5, 2: correct and speedup > p, over all samples.
    pub fast_p: Vec<FastP>,
    /// Correct samples with a speedup: what the two means are over.
    pub timed: usize,
    /// Arithmetic mean speedup of the correct, timed samples.
    pub mean_speedup: Option<f64>,
    /// Geometric mean speedup of the correct, timed samples.
    pub geomean_speedup: Option<f64>,
    /// Verdict `incorrect`.
    pub incorrect: usize,
    /// Verdict `error` (did not compile, crashed, timed out, ...).
    pub errors: usize,
    /// Verdict `hack`: caught gaming the evaluation.
    pub hacks: usize,
    /// Verdict `decoy`: correct, but no kernel of its own did the work.
    pub decoys: usize,
    /// Rollouts whose completion held no kernel.
    pub no_kernel: usize,
    /// No verdict (failed, cancelled, expired): counted as not correct.
    pub unscored: usize,
    /// Still queued or running: counted as not correct until they finish.
    pub pending: usize,
}

impl GroupReport {
    /// The figures of `samples`, labelled `level`.
    pub fn of<'a>(
        level: Option<u32>,
        samples: impl IntoIterator<Item = &'a SampleOutcome>,
    ) -> Self {
        let samples: Vec<&SampleOutcome> = samples.into_iter().collect();
        let n = samples.len();
        let rate = |k: usize| if n == 0 { 0.0 } else { k as f64 / n as f64 };
        let count = |f: &dyn Fn(&SampleOutcome) -> bool| samples.iter().filter(|s| f(s)).count();
        let verdicts = |v: Verdict| {
            count(&|s| matches!(s, SampleOutcome::Judged { verdict, .. } if *verdict == v))
        };
        let speedups: Vec<f64> = samples
            .iter()
            .filter_map(|s| s.correct_speedup())
            .filter(|s| s.is_finite() && *s > 0.0)
            .collect();
        let mean = |xs: &[f64]| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
        let logs: Vec<f64> = speedups.iter().map(|s| s.ln()).collect();
        let correct = verdicts(Verdict::Ok);
        GroupReport {
            level,
            samples: n,
            correct,
            correct_rate: rate(correct),
            fast_p: FAST_P_THRESHOLDS
                .iter()
                .map(|&p| {
                    let k = count(&|s| s.is_fast(p));
                    FastP {
                        p,
                        count: k,
                        rate: rate(k),
                    }
                })
                .collect(),
            timed: speedups.len(),
            mean_speedup: mean(&speedups),
            geomean_speedup: mean(&logs).map(f64::exp),
            incorrect: verdicts(Verdict::Incorrect),
            errors: verdicts(Verdict::Error),
            hacks: verdicts(Verdict::Hack),
            decoys: verdicts(Verdict::Decoy),
            no_kernel: count(&|s| *s == SampleOutcome::NoKernel),
            unscored: count(&|s| *s == SampleOutcome::Unscored),
            pending: count(&|s| *s == SampleOutcome::Pending),
        }
    }

    /// fast_p for `p` (one of [`FAST_P_THRESHOLDS`]); 0 for another p.
    pub fn fast(&self, p: f64) -> f64 {
        self.fast_p
            .iter()
            .find(|f| f.p == p)
            .map_or(0.0, |f| f.rate)
    }
}

/// What kind of batch a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportSource {
    /// `POST /rollouts`: one sample per rollout (rollouts sharing a task each count).
    Rollouts,
    /// `POST /evaluate/batch`: one sample per task of the batch.
    Evaluations,
}

/// `GET /batches/{id}/report`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchReport {
    /// The batch reported on.
    pub batch_id: BatchId,
    /// Rollouts or evaluations.
    pub source: ReportSource,
    /// True when no sample is pending: the figures are final.
    pub done: bool,
    /// Every sample of the batch.
    pub overall: GroupReport,
    /// One group per level, ascending; the samples of no registered problem last, with
    /// `level` null.
    pub levels: Vec<GroupReport>,
}

impl BatchReport {
    /// The report over `samples`.
    pub fn of(batch_id: BatchId, source: ReportSource, samples: &[Sample]) -> Self {
        // Levels ascending, the level-less group after them.
        let mut groups: BTreeMap<(bool, u32), Vec<&SampleOutcome>> = BTreeMap::new();
        for s in samples {
            let key = s.level.map_or((true, 0), |l| (false, l));
            groups.entry(key).or_default().push(&s.outcome);
        }
        let overall = GroupReport::of(None, samples.iter().map(|s| &s.outcome));
        BatchReport {
            batch_id,
            source,
            done: overall.pending == 0,
            overall,
            levels: groups
                .into_iter()
                .map(|((none, l), outcomes)| GroupReport::of((!none).then_some(l), outcomes))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
