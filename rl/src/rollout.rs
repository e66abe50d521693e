//! Rollouts: a trainer's batch of model completions in, one reward, its components, the
//! evaluation result and the next turn's feedback out per rollout. The wire types of
//! `POST /rollouts` and `GET /batches/{id}/results`, what the API keeps per rollout while its
//! evaluation runs, and the pure step from finished tasks to rollout results.

use crucible_shared::error::ApiError;
use crucible_shared::ids::{BatchId, TaskId};
use crucible_shared::problem::ProblemRef;
use crucible_shared::request::Backend;
// Made from the one list of settings (`settings.rs`), with the request.
use crate::reward::{CompletionFacts, DecoyReward, RewardProfile, RewardWeights, WeightsOverride};
pub use crucible_shared::request::RolloutEvalSettings;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use utoipa::ToSchema;

mod results;
pub use results::{RolloutResult, RolloutResultsPage, RolloutStatus, page_start, rollout_results};

// The bounds of the rollout wire types live with the others (`bounds`).
pub use crucible_shared::bounds::{
    MAX_COMPLETION_BYTES, MAX_RESULTS_PAGE, MAX_ROLLOUT_ID_BYTES, MAX_ROLLOUTS,
};

/// One model completion to score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollout {
    /// The client's id of this rollout (unique within the batch); results carry it back.
    #[schema(schema_with = crucible_shared::bounds::rollout_id_schema)]
    pub id: String,
    /// The problem, by reference (`GET /problems`) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemRef>,
    /// ... or its source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crucible_shared::bounds::rollout_reference_code_schema)]
    pub reference_code: Option<String>,
    /// The raw completion: the kernel is extracted from it (docs/REWARDS.md).
    pub completion: String,
    /// What the extracted kernel is written for.
    #[serde(default)]
    pub backend: Backend,
    /// Turn index of a multi-turn episode (0 for the first); carried through to the result.
    #[serde(default)]
    pub turn: u32,
    /// How the rollout is scored.
    #[serde(default)]
    pub profile: RewardProfile,
    /// Weights that replace the profile's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<WeightsOverride>,
    /// What a decoy (correct, but no kernel of its own ran) scores: `zero` (default, like a
    /// hack) or `profile` (the profile's formula, the behaviour before this field).
    #[serde(default)]
    pub decoy_reward: DecoyReward,
}

/// `POST /rollouts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutBatchRequest {
    /// The completions to score (1 to [`MAX_ROLLOUTS`]); ids unique within the batch.
    #[schema(schema_with = crucible_shared::bounds::rollouts_schema)]
    pub rollouts: Vec<Rollout>,
    /// How every rollout's kernel is evaluated.
    #[serde(default)]
    pub eval: RolloutEvalSettings,
    /// Resubmitting a batch under the same key (a retry after a lost answer) returns the first
    /// batch instead of making another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crucible_shared::bounds::idempotency_key_schema)]
    pub idempotency_key: Option<String>,
}

/// `202` answer of `POST /rollouts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RolloutBatchResponse {
    /// Read the results with `GET /batches/{batch_id}/results`.
    pub batch_id: BatchId,
    /// Rollouts in the batch, with or without a kernel.
    pub rollouts: usize,
    /// Rollouts that are being evaluated (the others had no kernel to extract).
    pub evaluated: usize,
    /// True when `idempotency_key` named an earlier batch, which is returned.
    #[serde(default)]
    pub deduplicated: bool,
}

impl RolloutBatchRequest {
    /// Bounds that do not need the problem registry; the error names the rollout.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.rollouts.is_empty() || self.rollouts.len() > MAX_ROLLOUTS {
            return Err(ApiError::invalid(
                "rollouts",
                format!(
                    "has {} rollouts; a batch holds 1-{MAX_ROLLOUTS}",
                    self.rollouts.len()
                ),
            ));
        }
        if let Some(key) = &self.idempotency_key {
            crucible_shared::request::validate_idempotency_key("idempotency_key", key)?;
        }
        let mut ids = HashSet::new();
        for (i, r) in self.rollouts.iter().enumerate() {
            let field = |name: &str| format!("rollouts[{i}].{name}");
            if r.id.is_empty() || r.id.len() > MAX_ROLLOUT_ID_BYTES {
                return Err(ApiError::invalid(
                    &field("id"),
                    format!("must be 1-{MAX_ROLLOUT_ID_BYTES} bytes"),
                ));
            }
            if !ids.insert(r.id.as_str()) {
                return Err(ApiError::invalid(
                    &field("id"),
                    format!("{:?} is used twice in this batch", r.id),
                ));
            }
            if r.completion.len() > MAX_COMPLETION_BYTES {
                return Err(ApiError::invalid(
                    &field("completion"),
                    format!(
                        "is {} bytes; the limit is {MAX_COMPLETION_BYTES}",
                        r.completion.len()
                    ),
                ));
            }
            if r.problem.is_some() == r.reference_code.is_some() {
                return Err(ApiError::invalid(
                    &field("problem"),
                    "give exactly one of problem and reference_code",
                ));
            }
            if let Some(name) = r.weights.as_ref().and_then(WeightsOverride::invalid_field) {
                return Err(ApiError::invalid(
                    &field(&format!("weights.{name}")),
                    "is out of range",
                ));
            }
        }
        Ok(())
    }
}

/// What the API keeps of one rollout while it is evaluated: enough to score it, none of the
/// text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutRecord {
    /// The client's rollout id.
    pub id: String,
    /// None when no kernel was found: nothing was evaluated.
    pub task_id: Option<TaskId>,
    /// The problem, when the rollout named it by reference.
    pub problem: Option<ProblemRef>,
    /// Version of the problem, whether named or sent as source.
    pub problem_hash: String,
    /// Carried through to the result.
    pub turn: u32,
    /// How the rollout is scored.
    pub profile: RewardProfile,
    /// The profile's weights with the rollout's overrides applied.
    pub weights: RewardWeights,
    /// What the reward needs of the completion.
    pub facts: CompletionFacts,
    /// What a decoy scores; a record stored before the field existed keeps the formula it
    /// was submitted under.
    #[serde(default = "DecoyReward::before_the_switch")]
    pub decoy_reward: DecoyReward,
}

#[cfg(test)]
mod tests;
