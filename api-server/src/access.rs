//! Per-request access checks: the middleware that turns a bearer token into the request's
//! [`Caller`], and the ownership checks handlers run before touching a task or batch. Kept
//! apart from `auth` (what a token means) because these need the [`AppState`], which itself
//! holds the `Auth`.

use crate::auth::{Caller, is_public};
use crate::error::HttpError;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use crucible_shared::{ApiError, BatchId, TaskId};

/// Checks the bearer token of every non-public request and hands the handlers its caller.
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    if is_public(request.uri().path()) {
        return next.run(request).await;
    }
    match state
        .auth
        .caller(state.broker.as_ref(), request.headers())
        .await
    {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

/// 404, as for an unknown task, unless the caller owns the task (or is the admin).
pub async fn authorize_task(
    state: &AppState,
    caller: &Caller,
    id: &TaskId,
) -> Result<(), HttpError> {
    if caller.admin || caller.owns(state.broker.task_tenant(id).await?.as_ref()) {
        return Ok(());
    }
    Err(ApiError::not_found(format!("task {id}")).into())
}

/// 404, as for an unknown batch, unless the caller owns the batch (or is the admin); `what`
/// names it in the message (`batch`, `rollout batch`).
pub async fn authorize_batch(
    state: &AppState,
    caller: &Caller,
    id: &BatchId,
    what: &str,
) -> Result<(), HttpError> {
    if caller.admin || caller.owns(state.broker.batch_tenant(id).await?.as_ref()) {
        return Ok(());
    }
    Err(ApiError::not_found(format!("{what} {id}")).into())
}
