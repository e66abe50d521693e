//! Episodes (Kevin-style multi-turn refinement, docs/REWARDS.md): start one or a group, post
//! each turn's completion, read the turn's reward, feedback, next prompt and, once done, the
//! returns. A turn whose evaluation is still running comes back `pending`;
//! [`Client::wait_turn`] long-polls it to the end.

use crate::{Client, ClientError};
use crucible_rl::episode::{
    EpisodeRequest, EpisodeView, EpisodesStarted, TurnRequest, TurnStatus, TurnView,
};
use crucible_shared::EpisodeId;
use crucible_shared::bounds::WAIT_S;
use std::time::Duration;

/// `?wait=` in seconds as the server takes it (it refuses a longer one).
fn wait_s(wait: Duration) -> f64 {
    wait.as_secs_f64().min(WAIT_S.max)
}

impl Client {
    /// Starts an episode (or `group_size` of them) and returns the first prompt.
    pub async fn start_episode(
        &self,
        request: &EpisodeRequest,
    ) -> Result<EpisodesStarted, ClientError> {
        self.send(reqwest::Method::POST, "/episodes", Some(request))
            .await
    }

    /// Posts a turn's completion, waiting up to `wait` for its evaluation; the turn comes back
    /// `pending` when it is still running. Posting the same completion again is safe: the
    /// server answers the same turn (and evaluates a `failed` one again).
    pub async fn post_turn(
        &self,
        episode: &EpisodeId,
        turn: &TurnRequest,
        wait: Duration,
    ) -> Result<TurnView, ClientError> {
        let path = format!("/episodes/{episode}/turns?wait={:.1}", wait_s(wait));
        self.send(reqwest::Method::POST, &path, Some(turn)).await
    }

    /// The episode with every turn so far, long-polling up to `wait` for its last turn.
    pub async fn episode(
        &self,
        episode: &EpisodeId,
        wait: Duration,
    ) -> Result<EpisodeView, ClientError> {
        let path = format!("/episodes/{episode}?wait={:.1}", wait_s(wait));
        self.send::<(), _>(reqwest::Method::GET, &path, None).await
    }

    /// One turn, long-polling up to `wait` while it is evaluated.
    pub async fn turn(
        &self,
        episode: &EpisodeId,
        turn: u32,
        wait: Duration,
    ) -> Result<TurnView, ClientError> {
        let path = format!("/episodes/{episode}/turns/{turn}?wait={:.1}", wait_s(wait));
        self.send::<(), _>(reqwest::Method::GET, &path, None).await
    }

    /// Reads a turn until it is scored or failed, or `timeout` passes.
    pub async fn wait_turn(
        &self,
        episode: &EpisodeId,
        turn: u32,
        timeout: Duration,
    ) -> Result<TurnView, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let view = self
                .turn(episode, turn, left.min(Duration::from_secs(30)))
                .await?;
            if view.status != TurnStatus::Pending {
                return Ok(view);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClientError::TimedOut(format!(
                    "turn {turn} of episode {episode} not scored after {timeout:?}"
                )));
            }
        }
    }
}
