//! Episodes: Kevin-style multi-turn refinement. A problem's first-turn prompt, then per turn a
//! completion evaluated as a rollout (the same scoring as `POST /rollouts`), its reward and
//! feedback, the next turn's prompt (the first prompt, the previous kernel and its feedback)
//! and, once the episode is done, the discounted return of every turn. The wire types of
//! `POST /episodes`, `POST /episodes/{id}/turns` and their reads, what the API keeps of an
//! episode and each turn in the broker, and the pure steps between them.

use crate::prompt::{Prompt, PromptOption};
use crate::returns::{discounted_returns, stops_early};
use crate::reward::{DecoyReward, RewardProfile, RewardWeights, WeightsOverride};
use crate::rollout::{
    MAX_COMPLETION_BYTES, RolloutEvalSettings, RolloutRecord, RolloutResult, RolloutStatus,
};
use crucible_shared::bounds::{
    EPISODE_GAMMA, EPISODE_GROUP, EPISODE_TURNS, MAX_PROMPT_FEEDBACK_BYTES,
    MAX_PROMPT_KERNEL_BYTES, MAX_SPEEDUP,
};
use crucible_shared::error::ApiError;
use crucible_shared::ids::{BatchId, EpisodeGroupId, EpisodeId, TenantId};
use crucible_shared::problem::ProblemRef;
use crucible_shared::request::Backend;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

/// `POST /episodes`: start one episode of a problem, or `group_size` of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EpisodeRequest {
    /// The problem, by reference (`GET /problems`) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemRef>,
    /// ... or its source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crucible_shared::bounds::rollout_reference_code_schema)]
    pub reference_code: Option<String>,
    /// How every turn is scored.
    #[serde(default)]
    pub profile: RewardProfile,
    /// Weights that replace the profile's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<WeightsOverride>,
    /// What a decoy scores (as a rollout's `decoy_reward`).
    #[serde(default)]
    pub decoy_reward: DecoyReward,
    /// What the kernels are written in.
    #[serde(default)]
    pub backend: Backend,
    /// Which examples the first prompt carries.
    #[serde(default)]
    pub prompt_option: PromptOption,
    /// Ask for reasoning in a `<think>` section first. Left out: asked for exactly when the
    /// profile's `thinking` weight (after `weights`) is above 0, as kernel_rl does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<bool>,
    /// Most turns.
    #[serde(default = "crucible_shared::bounds::default_max_turns")]
    #[schema(schema_with = crucible_shared::bounds::max_turns_schema)]
    pub max_turns: u32,
    /// Discount of the returns.
    #[serde(default = "crucible_shared::bounds::default_gamma")]
    #[schema(schema_with = crucible_shared::bounds::gamma_schema)]
    pub gamma: f64,
    /// End the episode at the first correct kernel (verdict `ok`).
    #[serde(default = "crucible_shared::bounds::default_true")]
    pub early_stop_on_correct: bool,
    /// With `early_stop_on_correct`, stop only at a correct kernel at least this fast.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_threshold: Option<f64>,
    /// How every turn's kernel is evaluated (as `POST /rollouts`'s `eval`).
    #[serde(default)]
    pub eval: RolloutEvalSettings,
    /// Episodes of this problem to start (a GRPO group); left out, one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crucible_shared::bounds::episode_group_size_schema)]
    pub group_size: Option<u32>,
}

impl EpisodeRequest {
    /// Whether the prompts ask for a `<think>` section: as sent, or else when thinking is
    /// rewarded (the profile's `thinking` weight with the overrides applied is above 0).
    pub fn asks_for_thinking(&self) -> bool {
        self.thinking.unwrap_or_else(|| {
            self.weights
                .unwrap_or_default()
                .apply(self.profile.weights())
                .thinking
                > 0.0
        })
    }

    /// Bounds that do not need the problem registry.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.problem.is_some() == self.reference_code.is_some() {
            return Err(ApiError::invalid(
                "problem",
                "give exactly one of problem and reference_code",
            ));
        }
        let turns = EPISODE_TURNS;
        if !(turns.min..=turns.max).contains(&self.max_turns) {
            return Err(ApiError::invalid(
                "max_turns",
                format!(
                    "{} is out of range {}-{}",
                    self.max_turns, turns.min, turns.max
                ),
            ));
        }
        let gamma = EPISODE_GAMMA;
        if !(gamma.min..=gamma.max).contains(&self.gamma) {
            return Err(ApiError::invalid(
                "gamma",
                format!("{} is out of range {}-{}", self.gamma, gamma.min, gamma.max),
            ));
        }
        if let Some(s) = self.speedup_threshold
            && !(0.0..=MAX_SPEEDUP.max).contains(&s)
        {
            return Err(ApiError::invalid(
                "speedup_threshold",
                format!("{s} is out of range 0-{}", MAX_SPEEDUP.max),
            ));
        }
        let group = EPISODE_GROUP;
        if let Some(n) = self.group_size
            && !(group.min..=group.max).contains(&n)
        {
            return Err(ApiError::invalid(
                "group_size",
                format!("{n} is out of range {}-{}", group.min, group.max),
            ));
        }
        if let Some(name) = self
            .weights
            .as_ref()
            .and_then(WeightsOverride::invalid_field)
        {
            return Err(ApiError::invalid(
                &format!("weights.{name}"),
                "is out of range",
            ));
        }
        Ok(())
    }
}

/// `201` answer of `POST /episodes`. Every episode of a group has the same first prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EpisodesStarted {
    /// The episode (the group's first, with `group_size`).
    pub episode_id: EpisodeId,
    /// Every episode started, in order (one without `group_size`).
    pub episode_ids: Vec<EpisodeId>,
    /// The group's id, with `group_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<EpisodeGroupId>,
    /// The first turn's prompt.
    pub prompt: Prompt,
    /// Most turns.
    pub max_turns: u32,
    /// Discount of the returns.
    pub gamma: f64,
}

/// `POST /episodes/{id}/turns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnRequest {
    /// The model's answer to the turn's prompt; the kernel is extracted from it as from a
    /// rollout's (docs/REWARDS.md).
    pub completion: String,
    /// Which turn this answers (0 for the first prompt). Left out: the next turn, or the last
    /// one when it was posted with this very completion (a retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
}

impl TurnRequest {
    /// Bounds that need nothing stored.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.completion.len() > MAX_COMPLETION_BYTES {
            return Err(ApiError::invalid(
                "completion",
                format!(
                    "is {} bytes; the limit is {MAX_COMPLETION_BYTES}",
                    self.completion.len()
                ),
            ));
        }
        Ok(())
    }
}

/// Where a turn stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// Its evaluation is queued or running: read it again (`?wait=`).
    Pending,
    /// Scored (`done` or `no_kernel`): `reward` and `feedback` are set.
    Scored,
    /// The service produced no verdict (`failed`, `cancelled`, `expired`): no reward. Post the
    /// same completion for the same turn again to evaluate it again.
    Failed,
}

/// One turn of an episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TurnView {
    /// The episode.
    pub episode_id: EpisodeId,
    /// The turn (0 for the first).
    pub turn: u32,
    /// Where it stands.
    pub status: TurnStatus,
    /// The one-rollout batch evaluating it (`GET /batches/{batch_id}`).
    pub batch_id: BatchId,
    /// The turn's score; None until scored, and for a service failure.
    pub reward: Option<f64>,
    /// Text for the next prompt (docs/REWARDS.md); empty while pending.
    pub feedback: String,
    /// The turn scored as a rollout (components, the evaluation result); None while pending.
    pub rollout: Option<RolloutResult>,
    /// The episode ended with this turn: `max_turns` reached, or an early stop.
    pub done: bool,
    /// The prompt of the next turn, once this one is scored and the episode goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_prompt: Option<Prompt>,
    /// Once `done`: the discounted return of every turn, first to last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns: Option<Vec<f64>>,
}

/// `GET /episodes/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EpisodeView {
    /// The episode.
    pub episode_id: EpisodeId,
    /// Its group, when started with `group_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<EpisodeGroupId>,
    /// The problem, when named by reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemRef>,
    /// Version of the problem (`sha256:` and the hex SHA-256 of its reference source).
    pub problem_hash: String,
    /// How turns are scored.
    pub profile: RewardProfile,
    /// Most turns.
    pub max_turns: u32,
    /// Discount of the returns.
    pub gamma: f64,
    /// The first turn's prompt.
    pub prompt: Prompt,
    /// The turns posted so far, in order.
    pub turns: Vec<TurnView>,
    /// No turn can follow: the last one ended the episode.
    pub done: bool,
    /// Once `done`: the discounted return of every turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns: Option<Vec<f64>>,
}

/// What the API keeps of an episode in the broker (namespace `episodes`, key: its id); written
/// once at its start (and again, unchanged, to extend its life at each new turn).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeRecord {
    /// Who may read and continue it.
    pub tenant: TenantId,
    /// Its group, when started with `group_size`.
    pub group_id: Option<EpisodeGroupId>,
    /// The problem, when named by reference.
    pub problem: Option<ProblemRef>,
    /// The source every turn is evaluated against.
    pub reference_code: String,
    /// How turns are scored.
    pub profile: RewardProfile,
    /// The weight overrides as sent (each turn's rollout applies them to the profile).
    pub weights: Option<WeightsOverride>,
    /// What a decoy scores.
    pub decoy_reward: DecoyReward,
    /// What the kernels are written in.
    pub backend: Backend,
    /// Most turns.
    pub max_turns: u32,
    /// Discount of the returns.
    pub gamma: f64,
    /// End at the first correct kernel.
    pub early_stop_on_correct: bool,
    /// ... at least this fast.
    pub speedup_threshold: Option<f64>,
    /// How kernels are evaluated.
    pub eval: RolloutEvalSettings,
    /// The first prompt, kept so every replica builds the same next prompts.
    pub prompt: Prompt,
}

/// What the API keeps of a posted turn (key: `{episode}:{turn}`), put only if absent so two
/// replicas racing for a turn agree on one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// [`completion_digest`] of the completion: a repost with the same one is the same turn.
    pub completion_digest: String,
    /// The extracted kernel, capped at [`MAX_PROMPT_KERNEL_BYTES`]: the next prompt quotes it.
    pub kernel: Option<String>,
    /// The one-rollout batch evaluating it.
    pub batch_id: BatchId,
    /// The rollout's record: what scores it (no text).
    pub record: RolloutRecord,
}

/// The digest a completion is known by in its turn's record.
pub fn completion_digest(completion: &str) -> String {
    let digest = Sha256::digest(completion.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The weights a turn is scored with.
pub fn weights_of(record: &EpisodeRecord) -> RewardWeights {
    record
        .weights
        .unwrap_or_default()
        .apply(record.profile.weights())
}

/// [`TurnStatus`] of a scored (or unscored) rollout.
pub fn turn_status(rollout: Option<&RolloutResult>) -> TurnStatus {
    match rollout.map(|r| r.status) {
        None => TurnStatus::Pending,
        Some(RolloutStatus::Done | RolloutStatus::NoKernel) => TurnStatus::Scored,
        Some(RolloutStatus::Failed | RolloutStatus::Cancelled | RolloutStatus::Expired) => {
            TurnStatus::Failed
        }
    }
}

/// Whether the episode ends with scored turn `turn`: the last turn allowed, or (with early
/// stop) a correct kernel, at least `speedup_threshold` fast when one is set.
pub fn ends_episode(episode: &EpisodeRecord, turn: u32, rollout: &RolloutResult) -> bool {
    let last = turn + 1 >= episode.max_turns;
    let stop = episode.early_stop_on_correct
        && rollout
            .result
            .as_ref()
            .is_some_and(|r| stops_early(r, episode.speedup_threshold));
    last || stop
}

/// The discounted returns of an episode's turns from their rewards (a turn without one, a
/// service failure, never ends an episode, so a done episode has every reward).
pub fn episode_returns(episode: &EpisodeRecord, rewards: &[f64]) -> Vec<f64> {
    discounted_returns(rewards, episode.gamma)
}

/// The prompt of the turn after `turn`: the first prompt, then the previous kernel and its
/// feedback, each capped ([`MAX_PROMPT_KERNEL_BYTES`], [`MAX_PROMPT_FEEDBACK_BYTES`]). Only
/// the feedback text the turn's result already carries: nothing else of the evaluation.
pub fn next_prompt(first: &Prompt, turn: u32, kernel: Option<&str>, feedback: &str) -> Prompt {
    let mut text = first.text.trim_end().to_owned();
    text.push_str(&format!("\n\nYour answer to attempt {}:\n", turn + 1));
    match kernel {
        Some(k) => text.push_str(&format!(
            "```python\n{}\n```\n",
            crucible_shared::activity::clip(k.trim_end(), MAX_PROMPT_KERNEL_BYTES)
        )),
        None => text.push_str("(no kernel could be read from it)\n"),
    }
    text.push_str(&format!(
        "\nFeedback on it:\n{}\n\nWrite an improved version: fix what failed, or make it faster \
         if it was correct. Answer in the same format as before.\n",
        crucible_shared::activity::clip(feedback.trim_end(), MAX_PROMPT_FEEDBACK_BYTES)
    ));
    Prompt {
        text,
        settings: first.settings,
        examples: first.examples.clone(),
        response_format: first.response_format.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::{PromptSettings, first_turn};

    fn request() -> EpisodeRequest {
        serde_json::from_str(r#"{"problem":{"level":1,"id":19}}"#).unwrap()
    }

    #[test]
    fn thinking_is_asked_for_when_sent_or_else_when_it_is_rewarded() {
        let mut r = request();
        assert!(r.asks_for_thinking(), "kernel_rl weighs thinking 0.1");
        r.profile = RewardProfile::Kevin;
        assert!(!r.asks_for_thinking(), "kevin does not reward it");
        r.weights = Some(WeightsOverride {
            thinking: Some(0.2),
            ..WeightsOverride::default()
        });
        assert!(r.asks_for_thinking(), "an override that rewards it");
        r.thinking = Some(false);
        assert!(!r.asks_for_thinking(), "as sent");
    }

    #[test]
    fn defaults_are_kernel_rl_s_and_bounds_are_checked() {
        let r = request();
        assert_eq!(
            (r.max_turns, r.gamma, r.early_stop_on_correct),
            (4, 0.4, true)
        );
        assert!(r.validate().is_ok());
        let field = |r: EpisodeRequest| r.validate().unwrap_err().field;
        assert_eq!(
            field(EpisodeRequest {
                max_turns: 0,
                ..request()
            })
            .as_deref(),
            Some("max_turns")
        );
        assert_eq!(
            field(EpisodeRequest {
                gamma: 1.5,
                ..request()
            })
            .as_deref(),
            Some("gamma")
        );
        assert_eq!(
            field(EpisodeRequest {
                group_size: Some(65),
                ..request()
            })
            .as_deref(),
            Some("group_size")
        );
        assert_eq!(
            field(EpisodeRequest {
                reference_code: Some("x".into()),
                ..request()
            })
            .as_deref(),
            Some("problem")
        );
        assert!(
            serde_json::from_str::<EpisodeRequest>(r#"{"problem":{"level":1,"id":1},"turns":3}"#)
                .is_err()
        );
    }

    #[test]
    fn the_next_prompt_quotes_the_kernel_and_feedback_capped() {
        let first = first_turn("class Model: pass", &PromptSettings::default(), &[]);
        let long = "x".repeat(MAX_PROMPT_KERNEL_BYTES * 2);
        let p = next_prompt(&first, 0, Some(&long), "Status: compilation error");
        assert!(p.text.starts_with(first.text.trim_end()));
        assert!(p.text.contains("attempt 1") && p.text.contains("Status: compilation error"));
        assert!(p.text.len() < first.text.len() + MAX_PROMPT_KERNEL_BYTES + 1024);
        let feedback = "y".repeat(MAX_PROMPT_FEEDBACK_BYTES * 3);
        let q = next_prompt(&first, 1, None, &feedback);
        assert!(q.text.contains("no kernel could be read"));
        assert!(q.text.len() < first.text.len() + MAX_PROMPT_FEEDBACK_BYTES + 1024);
        assert_eq!(q.settings, first.settings);
    }

    #[test]
    fn digests_tell_completions_apart() {
        assert_eq!(completion_digest("a"), completion_digest("a"));
        assert_ne!(completion_digest("a"), completion_digest("b"));
        assert_eq!(completion_digest("").len(), 64);
    }
}
