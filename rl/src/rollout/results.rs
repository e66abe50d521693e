//! The pure step from a batch's finished tasks to its scored rollouts, and the wire types of
//! `GET /batches/{id}/results` it fills.

use super::RolloutRecord;
use crate::reward::{RewardComponents, RewardProfile, feedback, reward};
use crucible_shared::ids::{BatchId, TaskId};
use crucible_shared::problem::ProblemRef;
use crucible_shared::task::{EvalResult, TaskStatus, TaskView};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use utoipa::ToSchema;

/// What becomes of one rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RolloutStatus {
    /// Evaluated: `result` holds the verdict and `reward` the score.
    Done,
    /// No kernel could be extracted from the completion; scored on its text alone.
    NoKernel,
    /// The service could not evaluate it (lost workers, a sick GPU): no verdict on the
    /// model, so no reward. Resubmit it or drop it from the update.
    Failed,
    /// Its task was cancelled.
    Cancelled,
    /// The task's record expired before it was read.
    Expired,
}

/// One scored rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RolloutResult {
    /// The client's rollout id.
    pub id: String,
    /// The evaluation task; None for `no_kernel`. Rollouts with identical kernels for the
    /// same problem share one.
    pub task_id: Option<TaskId>,
    /// Whether it was scored, and if not, why.
    pub status: RolloutStatus,
    /// The rollout's `turn`, carried through.
    pub turn: u32,
    /// The problem, when the rollout named it by reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemRef>,
    /// Version of the problem evaluated (`sha256:` and the hex SHA-256 of its reference source).
    pub problem_hash: String,
    /// The profile `reward` was computed with.
    pub profile: RewardProfile,
    /// None when the service produced no verdict (`failed`, `cancelled`, `expired`).
    pub reward: Option<f64>,
    /// The component scores `reward` was weighted from; None when `reward` is.
    pub components: Option<RewardComponents>,
    /// The completion had a `<KERNEL>` tag followed by a fenced code block.
    pub format_ok: bool,
    /// The evaluation's result, for `done`.
    pub result: Option<EvalResult>,
    /// Text for the next turn's prompt (docs/REWARDS.md).
    pub feedback: String,
    /// Why there is no verdict, for `failed` and `cancelled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /batches/{id}/results`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RolloutResultsPage {
    /// The batch read.
    pub batch_id: BatchId,
    /// Results in the order their evaluations finished, after the `after` cursor.
    pub results: Vec<RolloutResult>,
    /// Pass as `after` to get the results that follow.
    pub cursor: u64,
    /// True when every rollout's result has been returned up to `cursor`.
    pub done: bool,
    /// Rollouts in the batch.
    pub total: usize,
}

/// Where a page that starts at cursor `after` reads: whether it includes the rollouts without
/// a kernel (cursor position 0 when there are any), and from which entry of the batch's log
/// of finished tasks it goes on.
pub fn page_start(has_no_kernel: bool, after: u64) -> (bool, u64) {
    match (has_no_kernel, after) {
        (true, 0) => (true, 0),
        (true, a) => (false, a - 1),
        (false, a) => (false, a),
    }
}

/// The rollout results of the tasks that finished, in their order. Position 0 of the cursor
/// is taken by the rollouts without a kernel (they finish at submission), when there are any;
/// `finished` holds the tasks from the next position on, each with its view (None once it
/// expired). A task shared by several rollouts yields each of them.
pub fn rollout_results(
    records: &[RolloutRecord],
    include_no_kernel: bool,
    finished: &[(TaskId, Option<TaskView>)],
) -> Vec<RolloutResult> {
    let mut by_task: HashMap<&TaskId, Vec<&RolloutRecord>> = HashMap::new();
    for r in records {
        if let Some(t) = &r.task_id {
            by_task.entry(t).or_default().push(r);
        }
    }
    let mut out = Vec::new();
    if include_no_kernel {
        out.extend(
            records
                .iter()
                .filter(|r| r.task_id.is_none())
                .map(|r| score(r, None)),
        );
    }
    for (task_id, view) in finished {
        for r in by_task.get(task_id).into_iter().flatten() {
            out.push(score(r, Some(view.as_ref())));
        }
    }
    out
}

/// `task`: None for a rollout that had no kernel; Some(None) for a task whose record expired.
fn score(r: &RolloutRecord, task: Option<Option<&TaskView>>) -> RolloutResult {
    let base = RolloutResult {
        id: r.id.clone(),
        task_id: r.task_id.clone(),
        status: RolloutStatus::NoKernel,
        turn: r.turn,
        problem: r.problem,
        problem_hash: r.problem_hash.clone(),
        profile: r.profile,
        reward: None,
        components: None,
        format_ok: r.facts.format_ok,
        result: None,
        feedback: String::new(),
        error: None,
    };
    let scored = |result: Option<&EvalResult>, status| {
        let (total, components) = reward(r.profile, &r.weights, &r.facts, result, r.decoy_reward);
        RolloutResult {
            status,
            reward: Some(total),
            components: Some(components),
            feedback: feedback(&r.facts, result),
            result: result.cloned(),
            ..base.clone()
        }
    };
    match task {
        None => scored(None, RolloutStatus::NoKernel),
        Some(None) => RolloutResult {
            status: RolloutStatus::Expired,
            feedback: "Status: not evaluated (the result expired before it was read).".into(),
            ..base.clone()
        },
        Some(Some(view)) => match (view.status, view.result.as_ref()) {
            (TaskStatus::Done, Some(result)) => scored(Some(result), RolloutStatus::Done),
            (TaskStatus::Cancelled, _) => RolloutResult {
                status: RolloutStatus::Cancelled,
                feedback: "Status: not evaluated (cancelled).".into(),
                error: view.error.clone(),
                ..base.clone()
            },
            _ => RolloutResult {
                status: RolloutStatus::Failed,
                feedback: "Status: not evaluated (the service could not run it).".into(),
                error: view
                    .error
                    .clone()
                    .or_else(|| Some("finished without a result".into())),
                ..base.clone()
            },
        },
    }
}
