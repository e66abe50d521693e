//! From a model's raw completion and an evaluation result to a reward: the kernel extracted
//! from the completion (`<KERNEL>` + fenced block, `<think>`/`<thinking>` sections, falling back
//! to the first fenced block), and the built-in reward profiles of the training recipes in use
//! (`kernel_rl`, `kevin`, `drkernel`; formulas in docs/REWARDS.md). Pure functions: the API and
//! the clients call them, nothing here does I/O.

use crucible_shared::task::{EvalResult, Verdict};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

mod completion;
pub use completion::{CompletionFacts, ParsedCompletion, parse_completion};

/// A built-in reward profile (docs/REWARDS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum RewardProfile {
    /// Weighted components: format, compile, correctness (partial credit), speed, length,
    /// thinking.
    #[default]
    KernelRl,
    /// `correctness · correct + speedup · correct`; zero for bad format.
    Kevin,
    /// `0.5 · correct + 0.5 · min(speedup, 3) + 0.5 · coverage` when correct; zero for decoys.
    Drkernel,
}

/// Weights of the components; a request may override any of them. Unused by a profile: 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RewardWeights {
    /// Of the `format` component (`kernel_rl`).
    pub format: f64,
    /// Of the `compile` component (`kernel_rl`).
    pub compile: f64,
    /// Of the `correctness` component (`kernel_rl`); `kevin` and `drkernel` award it whole to
    /// a correct kernel.
    pub correctness: f64,
    /// Of the capped speedup.
    pub speed: f64,
    /// Of the `length` component (`kernel_rl`): a tie-breaker for shorter kernels.
    pub length: f64,
    /// Of the `thinking` component (`kernel_rl`).
    pub thinking: f64,
    /// Of the `coverage` component (`kernel_rl`, `drkernel`).
    pub coverage: f64,
    /// Speedups above this count as this (`drkernel`: 3, `kevin`: unbounded, here 1e9).
    pub speedup_cap: f64,
    /// Added when the kernel did not compile (a negative penalty as Dr.Kernel uses; 0, off,
    /// by default in every profile).
    #[serde(default)]
    pub penalty_compile: f64,
    /// Added when the kernel compiled but its outputs were wrong (verdict `incorrect`).
    #[serde(default)]
    pub penalty_incorrect: f64,
    /// Added when the kernel was correct but slower than the reference (speedup below 1).
    #[serde(default)]
    pub penalty_slower: f64,
}

/// Weights a request overrides; the ones it leaves out keep the profile's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WeightsOverride {
    /// The `format` weight instead of the profile's (-1000..=1000).
    pub format: Option<f64>,
    /// The `compile` weight instead of the profile's (-1000..=1000).
    pub compile: Option<f64>,
    /// The `correctness` weight instead of the profile's (-1000..=1000).
    pub correctness: Option<f64>,
    /// The `speed` weight instead of the profile's (-1000..=1000).
    pub speed: Option<f64>,
    /// The `length` weight instead of the profile's (-1000..=1000).
    pub length: Option<f64>,
    /// The `thinking` weight instead of the profile's (-1000..=1000).
    pub thinking: Option<f64>,
    /// The `coverage` weight instead of the profile's (-1000..=1000).
    pub coverage: Option<f64>,
    /// The speedup cap instead of the profile's (0..=1e9).
    pub speedup_cap: Option<f64>,
    /// A penalty for a kernel that did not compile (-1000..=0; 0, off, by default).
    pub penalty_compile: Option<f64>,
    /// A penalty for a kernel that compiled but was wrong (-1000..=0; 0 by default).
    pub penalty_incorrect: Option<f64>,
    /// A penalty for a correct kernel slower than the reference (-1000..=0; 0 by default).
    pub penalty_slower: Option<f64>,
}

impl WeightsOverride {
    /// `base` with every weight given here replaced.
    pub fn apply(&self, base: RewardWeights) -> RewardWeights {
        RewardWeights {
            format: self.format.unwrap_or(base.format),
            compile: self.compile.unwrap_or(base.compile),
            correctness: self.correctness.unwrap_or(base.correctness),
            speed: self.speed.unwrap_or(base.speed),
            length: self.length.unwrap_or(base.length),
            thinking: self.thinking.unwrap_or(base.thinking),
            coverage: self.coverage.unwrap_or(base.coverage),
            speedup_cap: self.speedup_cap.unwrap_or(base.speedup_cap),
            penalty_compile: self.penalty_compile.unwrap_or(base.penalty_compile),
            penalty_incorrect: self.penalty_incorrect.unwrap_or(base.penalty_incorrect),
            penalty_slower: self.penalty_slower.unwrap_or(base.penalty_slower),
        }
    }

    /// The name of the first weight that is not a finite number in -1000..=1000 (the cap:
    /// 0..=1e9; the penalties: -1000..=0).
    pub fn invalid_field(&self) -> Option<&'static str> {
        let weights = [
            ("format", self.format),
            ("compile", self.compile),
            ("correctness", self.correctness),
            ("speed", self.speed),
            ("length", self.length),
            ("thinking", self.thinking),
            ("coverage", self.coverage),
        ];
        let bad = |v: Option<f64>, lo: f64, hi: f64| {
            v.is_some_and(|v| !(v.is_finite() && (lo..=hi).contains(&v)))
        };
        let penalties = [
            ("penalty_compile", self.penalty_compile),
            ("penalty_incorrect", self.penalty_incorrect),
            ("penalty_slower", self.penalty_slower),
        ];
        weights
            .into_iter()
            .find(|(_, v)| bad(*v, -1e3, 1e3))
            .map(|(name, _)| name)
            .or_else(|| bad(self.speedup_cap, 0.0, 1e9).then_some("speedup_cap"))
            .or_else(|| {
                penalties
                    .into_iter()
                    .find(|(_, v)| bad(*v, -1e3, 0.0))
                    .map(|(name, _)| name)
            })
    }
}

impl RewardProfile {
    /// The profile's documented weights.
    pub fn weights(self) -> RewardWeights {
        let zero = RewardWeights {
            format: 0.0,
            compile: 0.0,
            correctness: 0.0,
            speed: 0.0,
            length: 0.0,
            thinking: 0.0,
            coverage: 0.0,
            speedup_cap: 1e9,
            penalty_compile: 0.0,
            penalty_incorrect: 0.0,
            penalty_slower: 0.0,
        };
        match self {
            RewardProfile::KernelRl => RewardWeights {
                format: 0.1,
                compile: 0.2,
                correctness: 1.0,
                length: 0.05,
                thinking: 0.1,
                speedup_cap: 10.0,
                ..zero
            },
            RewardProfile::Kevin => RewardWeights {
                correctness: 0.3,
                speed: 1.0,
                ..zero
            },
            RewardProfile::Drkernel => RewardWeights {
                correctness: 0.5,
                speed: 0.5,
                coverage: 0.5,
                speedup_cap: 3.0,
                ..zero
            },
        }
    }
}

/// What a decoy scores: a candidate that is correct but ran no kernel of its own (PyTorch
/// only, a dead kernel path, a kernel defined and never launched). A candidate screened for
/// `no-kernel` (when a request rejects it) is already a hack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum DecoyReward {
    /// 0 under every profile, like a hack: a torch-only answer must never outscore an honest
    /// attempt that failed (under `kernel_rl` its format, compile and length components gave
    /// 0.35-0.45, more than a kernel that did not compile), or a policy learns to fall back
    /// to PyTorch.
    #[default]
    Zero,
    /// The profile's formula, as before this switch existed (`kernel_rl`: every component but
    /// correctness; `kevin`, `drkernel`: 0 anyway).
    Profile,
}

impl DecoyReward {
    /// What a rollout record stored before this switch existed was scored with.
    pub fn before_the_switch() -> Self {
        DecoyReward::Profile
    }
}

/// Kernels up to this many bytes get the whole length score; it falls to 0 at
/// [`LENGTH_ZERO_BYTES`].
pub const LENGTH_FULL_BYTES: usize = 2_000;
/// Kernels of this many bytes or more get no length score; between the two it falls linearly.
pub const LENGTH_ZERO_BYTES: usize = 20_000;

/// Each component's score in 0..=1 (speed: the capped speedup) before weighting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema, Default)]
pub struct RewardComponents {
    /// 1 when the completion has `<KERNEL>` and a fenced block.
    pub format: f64,
    /// 1 when the kernel compiled.
    pub compile: f64,
    /// Share of correctness trials passed (partial credit); 0 for a decoy.
    pub correctness: f64,
    /// The speedup over the reference, capped at `speedup_cap`; 0 unless the verdict is `ok`.
    pub speed: f64,
    /// 1 up to 2,000 bytes of kernel, falling linearly to 0 at 20,000; 0 with no kernel.
    pub length: f64,
    /// 1 when the completion has a non-blank thinking section.
    pub thinking: f64,
    /// Share of device time spent in the candidate's own kernels; 0 unless the verdict is
    /// `ok`.
    pub coverage: f64,
    /// The penalty added (0, or one of the `penalty_*` weights; never positive).
    #[serde(default)]
    pub penalty: f64,
}

/// The reward of one rollout and the component scores it came from. `result` is None when
/// no kernel could be extracted (nothing was evaluated); `decoys` says what a decoy scores.
pub fn reward(
    profile: RewardProfile,
    weights: &RewardWeights,
    facts: &CompletionFacts,
    result: Option<&EvalResult>,
    decoys: DecoyReward,
) -> (f64, RewardComponents) {
    let mut c = components(weights, facts, result);
    let verdict = result.map(|r| r.verdict);
    // A flagged hack scores zero under every profile, whatever else it did; so does a decoy
    // unless the request asks for the profile's formula. With penalties on, they score the
    // lowest penalty: never more than an honest failure.
    if verdict == Some(Verdict::Hack)
        || (verdict == Some(Verdict::Decoy) && decoys == DecoyReward::Zero)
    {
        c.penalty = weights
            .penalty_compile
            .min(weights.penalty_incorrect)
            .min(weights.penalty_slower)
            .min(0.0);
        return (c.penalty, c);
    }
    let w = weights;
    let total = match profile {
        RewardProfile::KernelRl => {
            w.format * c.format
                + w.compile * c.compile
                + w.correctness * c.correctness
                + w.speed * c.speed
                + w.length * c.length
                + w.thinking * c.thinking
                + w.coverage * c.coverage
        }
        RewardProfile::Kevin => {
            let correct = verdict == Some(Verdict::Ok);
            if !facts.format_ok || !correct {
                0.0
            } else {
                w.correctness + w.speed * c.speed
            }
        }
        RewardProfile::Drkernel => {
            if verdict != Some(Verdict::Ok) {
                0.0 // not completed, incorrect, or a decoy
            } else {
                w.correctness + w.speed * c.speed + w.coverage * c.coverage
            }
        }
    };
    (total + c.penalty, c)
}

fn components(
    w: &RewardWeights,
    facts: &CompletionFacts,
    result: Option<&EvalResult>,
) -> RewardComponents {
    let length = facts.kernel_bytes.map_or(0.0, |n| {
        if n <= LENGTH_FULL_BYTES {
            1.0
        } else {
            let span = (LENGTH_ZERO_BYTES - LENGTH_FULL_BYTES) as f64;
            (1.0 - (n - LENGTH_FULL_BYTES) as f64 / span).max(0.0)
        }
    });
    let mut c = RewardComponents {
        format: f64::from(u8::from(facts.format_ok)),
        thinking: f64::from(u8::from(facts.thinking)),
        length,
        ..RewardComponents::default()
    };
    let Some(r) = result else { return c };
    c.compile = f64::from(u8::from(r.compiled));
    c.penalty = match r.verdict {
        Verdict::Error if !r.compiled => w.penalty_compile,
        Verdict::Incorrect => w.penalty_incorrect,
        Verdict::Ok if r.speedup.is_some_and(|s| s < 1.0) => w.penalty_slower,
        _ => 0.0,
    }
    .min(0.0);
    if r.trials_total > 0 && r.verdict != Verdict::Decoy {
        c.correctness = f64::from(r.trials_passed) / f64::from(r.trials_total);
    }
    if r.verdict == Verdict::Ok {
        c.speed = r.speedup.unwrap_or(0.0).clamp(0.0, w.speedup_cap);
        c.coverage = r.custom_time_coverage.unwrap_or(0.0).clamp(0.0, 1.0);
    }
    c
}

/// Most bytes of [`feedback`]: the next turn's prompt has room for it.
pub const MAX_FEEDBACK_BYTES: usize = 1_200;
/// Most lines of the error excerpt in [`feedback`].
const FEEDBACK_ERROR_LINES: usize = 10;
/// Most bytes of the error excerpt in [`feedback`] (the recipes quote about 800 characters).
const FEEDBACK_ERROR_BYTES: usize = 800;

/// The flags that say why a candidate is a decoy: the profiled forward's proof of work, then
/// static screening's (harness rule ids).
const DECOY_RULES: [&str; 2] = ["no-custom-kernel", "no-kernel"];

/// The text a trainer puts in the next turn's prompt: the status category, compiled or not,
/// trials passed, the speedup and the key lines of the error. Built only from what the result
/// already tells the client (no reference outputs, no seeds), capped at
/// [`MAX_FEEDBACK_BYTES`].
pub fn feedback(facts: &CompletionFacts, result: Option<&EvalResult>) -> String {
    let Some(r) = result else {
        return "Status: format error. No kernel found: put the code in a fenced block after \
                <KERNEL>."
            .to_owned();
    };
    let status = match r.verdict {
        Verdict::Ok if r.speedup.is_some_and(|s| s >= 1.0) => "correct and faster",
        Verdict::Ok if r.speedup.is_some() => "correct but slower",
        Verdict::Ok => "correct",
        Verdict::Decoy => "correct, but no kernel of your own ran (PyTorch only)",
        Verdict::Hack => "rejected: the evaluation caught a shortcut",
        Verdict::Incorrect => "correctness error",
        Verdict::Error if !r.compiled => "compilation error",
        Verdict::Error => "runtime error",
    };
    let mut lines = vec![format!("Status: {status}.")];
    if !facts.format_ok {
        lines.push("Format: expected <KERNEL> followed by a fenced code block.".to_owned());
    }
    lines.push(format!(
        "Compiled: {}. Trials passed: {}/{}.",
        if r.compiled { "yes" } else { "no" },
        r.trials_passed,
        r.trials_total
    ));
    if let Some(s) = r.speedup {
        lines.push(format!("Speedup over PyTorch: {s:.2}x."));
    }
    for f in r
        .flags
        .iter()
        .filter(|f| f.severity != crucible_shared::task::SEVERITY_FLAG)
    {
        lines.push(format!("Finding {}: {}", f.rule, f.detail));
    }
    // A decoy's why: the runtime proof of work (with what the candidate's own kernel or
    // build raised before its fallback ran, when the harness saw it) or the screening rule.
    if r.verdict == Verdict::Decoy
        && let Some(f) = r
            .flags
            .iter()
            .find(|f| DECOY_RULES.contains(&f.rule.as_str()))
    {
        lines.push(format!("Why: {}.", f.detail.trim_end_matches('.')));
    }
    if let Some(message) = r.error_message.as_deref().filter(|m| !m.is_empty()) {
        let excerpt: Vec<&str> = message.lines().take(FEEDBACK_ERROR_LINES).collect();
        let mut excerpt = excerpt.join("\n");
        if excerpt.len() > FEEDBACK_ERROR_BYTES {
            let mut cut = FEEDBACK_ERROR_BYTES;
            while !excerpt.is_char_boundary(cut) {
                cut -= 1;
            }
            excerpt.truncate(cut);
            excerpt.push_str(" ...");
        }
        lines.push(format!("Error:\n{excerpt}"));
    }
    let mut text = lines.join("\n");
    if text.len() > MAX_FEEDBACK_BYTES {
        let mut cut = MAX_FEEDBACK_BYTES - 16;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n...[truncated]");
    }
    text
}

#[cfg(test)]
mod tests;
