//! `GET /openenv/ws`: an OpenEnv WebSocket session (openenv-core's `EnvClient` protocol). Each
//! text message is one of `reset`, `step`, `state`, `close`; each is answered with one
//! `observation`, `state` or `error` message, in order. The session plays one episode at a
//! time: a `reset` starts (or attaches to) one, and every `step` is its next turn.
//!
//! The connection is the session's only state here (the episode itself is in the broker), so
//! a client that loses it resets with the `episode_id` it was playing and goes on. Sessions are
//! bounded per replica (`OPENENV_SESSIONS`) and closed after `OPENENV_SESSION_IDLE_S` of
//! silence; a step waits for its score up to `OPENENV_WS_STEP_WAIT_S`.

use super::{read_episode, reset, step};
use crate::auth::Caller;
use crate::error::HttpError;
use crate::state::AppState;
use axum::Extension;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use crucible_rl::episode::TurnStatus;
use crucible_rl::openenv::{
    OpenEnvAction, OpenEnvError, OpenEnvMessage, OpenEnvReply, OpenEnvReset, OpenEnvState,
    episode_state, turn_observation,
};
use crucible_shared::bounds::{
    OPENENV_MESSAGE_BYTES, OPENENV_SESSION_IDLE_S, OPENENV_SESSIONS, OPENENV_STEP_RETRIES,
    OPENENV_WS_STEP_WAIT_S,
};
use crucible_shared::{ApiError, ApiErrorCode, EpisodeId};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;

/// The message types a client may send; any other `type` is `UNKNOWN_TYPE`, as OpenEnv's
/// servers answer it.
const MESSAGE_TYPES: [&str; 4] = ["reset", "step", "state", "close"];

/// Opens a WebSocket session: OpenEnv's `EnvClient` connects here (`base_url` ending in
/// `/openenv`). A request without the WebSocket handshake is 426.
#[utoipa::path(
    get, path = "/openenv/ws", tag = "openenv",
    responses(
        (status = 101, description = "The WebSocket session: text messages `{type: reset|step|state|close, data}`, each answered by `{type: observation|state|error, data}` (docs/TRAINERS.md, OpenEnv)"),
        (status = 426, description = "Not a WebSocket handshake (`UPGRADE_REQUIRED`)", body = ApiError),
    )
)]
pub async fn websocket(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, HttpError> {
    let upgrade = upgrade.map_err(|rejection| {
        ApiError::new(
            ApiErrorCode::UpgradeRequired,
            format!(
                "open a WebSocket here (OpenEnv's EnvClient does): {}",
                rejection.body_text()
            ),
        )
    })?;
    let permit = state
        .openenv_sessions
        .clone()
        .try_acquire_owned()
        .map_err(|_| {
            ApiError::new(
                ApiErrorCode::Overloaded,
                format!(
                    "{OPENENV_SESSIONS} OpenEnv sessions are open on this replica, its most; \
                     retry later"
                ),
            )
        })?;
    Ok(upgrade
        .max_message_size(OPENENV_MESSAGE_BYTES)
        .on_upgrade(move |socket| session(socket, state, caller, permit))
        .into_response())
}

/// The episode a session plays and the turn its next step is.
struct Playing {
    episode_id: EpisodeId,
    next_turn: u32,
}

/// What one message comes to.
enum Handled {
    Reply(OpenEnvReply),
    Close,
}

/// Serves one session until the client closes it, goes silent, or the connection breaks.
async fn session(
    mut socket: WebSocket,
    state: AppState,
    caller: Caller,
    _permit: OwnedSemaphorePermit,
) {
    let mut playing: Option<Playing> = None;
    // Messages that arrived while a step was waiting for its score, answered after it in order.
    let mut queued: VecDeque<Message> = VecDeque::new();
    let idle = Duration::from_secs(OPENENV_SESSION_IDLE_S);
    tracing::debug!(tenant = %caller.tenant.name, "openenv session opened");
    loop {
        let message = match queued.pop_front() {
            Some(m) => m,
            None => match tokio::time::timeout(idle, socket.recv()).await {
                Err(_) => {
                    tracing::info!(tenant = %caller.tenant.name, "openenv session idle: closed");
                    break;
                }
                Ok(None) | Ok(Some(Err(_))) => break,
                Ok(Some(Ok(m))) => m,
            },
        };
        let text = match message {
            Message::Text(text) => text.to_string(),
            Message::Binary(bytes) => match String::from_utf8(bytes.to_vec()) {
                Ok(text) => text,
                Err(_) => {
                    let reply = error("INVALID_JSON", "a binary message that is not UTF-8");
                    if send(&mut socket, &reply).await.is_err() {
                        break;
                    }
                    continue;
                }
            },
            // Pings are answered by the library; a close ends the session.
            Message::Ping(_) | Message::Pong(_) => continue,
            Message::Close(_) => break,
        };
        let handled = {
            let work = handle(&state, &caller, &mut playing, &text);
            tokio::pin!(work);
            // A step waits for its score; meanwhile the socket is still read, so a client that
            // goes away ends the wait (the turn stays posted and is evaluated all the same).
            let mut closed = false;
            let handled = loop {
                tokio::select! {
                    handled = &mut work => break Some(handled),
                    incoming = socket.recv(), if !closed => match incoming {
                        Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break None,
                        Some(Ok(m)) => {
                            queued.push_back(m);
                            // Bounded: a client that floods a waiting session is cut off.
                            closed = queued.len() >= MESSAGE_TYPES.len() * 4;
                        }
                    },
                }
            };
            match handled {
                Some(h) if !closed => h,
                _ => break,
            }
        };
        match handled {
            Handled::Close => break,
            Handled::Reply(reply) => {
                if send(&mut socket, &reply).await.is_err() {
                    break;
                }
            }
        }
    }
    tracing::debug!(tenant = %caller.tenant.name, "openenv session closed");
}

async fn send(socket: &mut WebSocket, reply: &OpenEnvReply) -> Result<(), axum::Error> {
    let text = serde_json::to_string(reply).expect("replies serialize");
    socket.send(Message::Text(text.into())).await
}

fn error(code: &str, message: impl Into<String>) -> OpenEnvReply {
    OpenEnvReply::Error(OpenEnvError::new(code, message))
}

fn api_error(e: HttpError) -> OpenEnvReply {
    OpenEnvReply::Error(OpenEnvError::from_api(&e.0))
}

/// Parses `data` as `T`, a `VALIDATION_ERROR` naming `what` otherwise.
fn parse<T: serde::de::DeserializeOwned>(
    what: &str,
    data: serde_json::Value,
) -> Result<T, OpenEnvReply> {
    serde_json::from_value(data).map_err(|e| {
        OpenEnvReply::Error(OpenEnvError {
            message: format!("{what}: {e}"),
            code: "VALIDATION_ERROR".into(),
            api_code: Some(ApiErrorCode::Validation.to_string()),
            field: None,
        })
    })
}

/// One message's answer (or the session's end).
async fn handle(
    state: &AppState,
    caller: &Caller,
    playing: &mut Option<Playing>,
    text: &str,
) -> Handled {
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Handled::Reply(error("INVALID_JSON", format!("invalid JSON: {e}"))),
    };
    let kind = value.get("type").and_then(|t| t.as_str()).unwrap_or("");
    if !MESSAGE_TYPES.contains(&kind) {
        return Handled::Reply(error(
            "UNKNOWN_TYPE",
            format!(
                "unknown message type {kind:?}: send one of {}",
                MESSAGE_TYPES.join(", ")
            ),
        ));
    }
    let message: OpenEnvMessage = match parse("message", value) {
        Ok(m) => m,
        Err(reply) => return Handled::Reply(reply),
    };
    let reply = match message {
        OpenEnvMessage::Close => return Handled::Close,
        OpenEnvMessage::Reset { data } => on_reset(state, caller, playing, data).await,
        OpenEnvMessage::Step { data } => on_step(state, caller, playing, data).await,
        OpenEnvMessage::State => on_state(state, caller, playing).await,
    };
    Handled::Reply(reply.unwrap_or_else(|r| r))
}

async fn on_reset(
    state: &AppState,
    caller: &Caller,
    playing: &mut Option<Playing>,
    data: serde_json::Value,
) -> Result<OpenEnvReply, OpenEnvReply> {
    // `reset()` with no arguments sends `data: {}`; a null is the same.
    let data = if data.is_null() {
        serde_json::json!({})
    } else {
        data
    };
    let request: OpenEnvReset = parse("reset", data)?;
    let result = reset(state, caller, request).await.map_err(api_error)?;
    *playing = Some(Playing {
        episode_id: result.observation.episode_id.clone(),
        next_turn: result.observation.turns,
    });
    Ok(OpenEnvReply::Observation(Box::new(result)))
}

async fn on_step(
    state: &AppState,
    caller: &Caller,
    playing: &mut Option<Playing>,
    data: serde_json::Value,
) -> Result<OpenEnvReply, OpenEnvReply> {
    let Some(current) = playing.as_mut() else {
        return Err(error("SESSION_ERROR", "no episode yet: send a reset first"));
    };
    let action: OpenEnvAction = parse("step", data)?;
    let episode = read_episode(state, caller, &current.episode_id)
        .await
        .map_err(api_error)?;
    let wait = Duration::from_secs(OPENENV_WS_STEP_WAIT_S);
    let view = step(
        state,
        caller,
        &episode,
        Some(current.next_turn),
        action,
        wait,
    )
    .await
    .map_err(api_error)?;
    match view.status {
        TurnStatus::Failed => Err(error(
            "EXECUTION_ERROR",
            format!(
                "turn {} had no verdict after {} evaluations (service failures, not the \
                 model's): step again with the same completion to evaluate it again",
                view.turn,
                OPENENV_STEP_RETRIES + 1
            ),
        )),
        TurnStatus::Pending => Ok(OpenEnvReply::Observation(Box::new(turn_observation(
            &episode, &view,
        )))),
        TurnStatus::Scored => {
            current.next_turn = view.turn + 1;
            Ok(OpenEnvReply::Observation(Box::new(turn_observation(
                &episode, &view,
            ))))
        }
    }
}

async fn on_state(
    state: &AppState,
    caller: &Caller,
    playing: &Option<Playing>,
) -> Result<OpenEnvReply, OpenEnvReply> {
    let Some(current) = playing else {
        return Ok(OpenEnvReply::State(OpenEnvState::default()));
    };
    let episode = read_episode(state, caller, &current.episode_id)
        .await
        .map_err(api_error)?;
    Ok(OpenEnvReply::State(episode_state(&episode)))
}
