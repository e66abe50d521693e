//! Reading an episode's turns: each turn scored from its finished task by the rollouts' own
//! step (`rollout_results`), then the pure step to turn views (done, next prompt, returns).

use crate::error::HttpError;
use crate::state::AppState;
use crucible_rl::episode::{
    EpisodeRecord, TurnRecord, TurnStatus, TurnView, ends_episode, episode_returns, next_prompt,
    turn_status,
};
use crucible_rl::rollout::{RolloutResult, rollout_results};
use crucible_shared::EpisodeId;
use std::time::Duration;

/// Each turn scored as its rollout (None while its task is open); the last one waits up to
/// `wait` for its task to finish, the others are read as they are.
pub(super) async fn score_turns(
    state: &AppState,
    turns: &[TurnRecord],
    wait: Duration,
) -> Result<Vec<Option<RolloutResult>>, HttpError> {
    let mut out = Vec::with_capacity(turns.len());
    for (i, turn) in turns.iter().enumerate() {
        let record = std::slice::from_ref(&turn.record);
        let Some(task_id) = &turn.record.task_id else {
            // No kernel: scored on its text alone, at once.
            out.push(rollout_results(record, true, &[]).pop());
            continue;
        };
        let view = if i + 1 == turns.len() && !wait.is_zero() {
            state.broker.wait_terminal(task_id, wait).await?
        } else {
            state.broker.get_task(task_id).await?
        };
        if view.as_ref().is_some_and(|v| !v.status.is_terminal()) {
            out.push(None);
            continue;
        }
        out.push(rollout_results(record, false, &[(task_id.clone(), view)]).pop());
    }
    Ok(out)
}

/// The views of `turns` (the episode's turns from the first, in order) from their scores.
pub(super) fn turn_views(
    episode: &EpisodeRecord,
    episode_id: &EpisodeId,
    turns: &[TurnRecord],
    scores: Vec<Option<RolloutResult>>,
) -> Vec<TurnView> {
    let rewards: Vec<Option<f64>> = scores
        .iter()
        .map(|s| s.as_ref().and_then(|r| r.reward))
        .collect();
    turns
        .iter()
        .zip(scores)
        .enumerate()
        .map(|(i, (turn, rollout))| {
            let t = i as u32;
            let status = turn_status(rollout.as_ref());
            let scored = status == TurnStatus::Scored;
            let done = scored
                && rollout
                    .as_ref()
                    .is_some_and(|r| ends_episode(episode, t, r));
            let feedback = rollout
                .as_ref()
                .map(|r| r.feedback.clone())
                .unwrap_or_default();
            let next = (scored && !done)
                .then(|| next_prompt(&episode.prompt, t, turn.kernel.as_deref(), &feedback));
            // Every turn before a done one was scored (a turn follows only a scored one).
            let returns = done
                .then(|| rewards[..=i].iter().copied().collect::<Option<Vec<f64>>>())
                .flatten()
                .map(|r| episode_returns(episode, &r));
            TurnView {
                episode_id: episode_id.clone(),
                turn: t,
                status,
                batch_id: turn.batch_id.clone(),
                reward: rollout.as_ref().and_then(|r| r.reward),
                feedback,
                rollout,
                done,
                next_prompt: next,
                returns,
            }
        })
        .collect()
}
