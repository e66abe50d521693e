//! The request-body budget: a semaphore counted in bytes, shared by every request of the replica.
//! A body is read here, before any handler sees it, under its permits: all of its
//! `Content-Length` up front, or chunk by chunk as a chunked body arrives; the permits are
//! held until the handler has answered, which covers the body and what is parsed from it.
//! A body that does not fit gets 503 with `Retry-After` instead of growing the heap, and one
//! that arrives slower than the body read timeout gets 408.
//!
//! A refused body is still read to its end and thrown away, chunk by chunk, within the read
//! timeout, before the 503 is sent. Most clients (reqwest, requests, httpx) write the whole body
//! before they read an answer; a server that answers early and closes with the body unread
//! makes the kernel reset the connection, and the client sees a broken pipe instead of the 503
//! and its `Retry-After`. Discarding costs bandwidth, never heap.

use crate::error::HttpError;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::CONTENT_LENGTH;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use crucible_shared::{ApiError, ApiErrorCode};
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The replica's body bytes, how long one body may take to arrive, and the largest body any
/// route takes.
#[derive(Debug)]
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
    read_timeout: Duration,
    largest_body: usize,
}

impl BodyBudget {
    /// A budget of `bytes` request-body bytes at once, each body read within `read_timeout`;
    /// a body over `largest_body` is never read here (the route's own limit answers 413).
    pub fn new(bytes: usize, read_timeout: Duration, largest_body: usize) -> Self {
        Self {
            bytes: Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS))),
            read_timeout,
            largest_body,
        }
    }

    /// Permits for `n` more bytes, or the 503 that says the budget is spent.
    fn take(&self, n: usize) -> Result<Option<OwnedSemaphorePermit>, HttpError> {
        if n == 0 {
            return Ok(None);
        }
        u32::try_from(n)
            .ok()
            .and_then(|n| self.bytes.clone().try_acquire_many_owned(n).ok())
            .map(Some)
            .ok_or_else(|| {
                HttpError(ApiError::new(
                    ApiErrorCode::Overloaded,
                    format!(
                        "the server is reading as many request bodies as it may at once; \
                         retry this {n}-byte body later"
                    ),
                ))
            })
    }
}

/// Middleware: reads the request body under the budget (see the module docs), then runs the
/// rest of the stack with the body in memory and the permits held.
pub async fn admit_body(
    State(budget): State<Arc<BodyBudget>>,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let empty = axum::body::HttpBody::is_end_stream(request.body()) || declared == Some(0);
    // A body larger than any route takes is left to the route's limit, which answers 413
    // without reading it.
    if empty || declared.is_some_and(|n| n > budget.largest_body) {
        return next.run(request).await;
    }
    let (parts, mut body) = request.into_parts();
    let deadline = tokio::time::Instant::now() + budget.read_timeout;
    let read = read_body(&budget, declared, &mut body);
    let (bytes, _permits) = match tokio::time::timeout_at(deadline, read).await {
        Ok(Ok(read)) => read,
        Ok(Err(e)) if e.0.code == ApiErrorCode::Overloaded => {
            discard_rest(&mut body, deadline, budget.largest_body).await;
            return e.into_response();
        }
        Ok(Err(e)) => return e.into_response(),
        Err(_) => {
            return HttpError(ApiError::new(
                ApiErrorCode::RequestTimeout,
                format!(
                    "the request body did not arrive within {} ms",
                    budget.read_timeout.as_millis()
                ),
            ))
            .into_response();
        }
    };
    let large = bytes.len() >= crate::heap::TRIM_AFTER_BODY_BYTES;
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    if large {
        // The body and what was parsed from it are freed by now.
        tokio::task::spawn_blocking(crate::heap::give_back_free_pages);
    }
    response
}

/// The whole body and the permits it holds.
async fn read_body(
    budget: &BodyBudget,
    declared: Option<usize>,
    body: &mut Body,
) -> Result<(Bytes, Vec<OwnedSemaphorePermit>), HttpError> {
    let mut permits: Vec<OwnedSemaphorePermit> = Vec::new();
    let mut granted = 0usize;
    if let Some(n) = declared {
        permits.extend(budget.take(n)?);
        granted = n;
    }
    let mut buf = Vec::with_capacity(declared.unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            HttpError(ApiError::new(
                ApiErrorCode::MalformedJson,
                format!("could not read the request body: {e}"),
            ))
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if buf.len() + data.len() > budget.largest_body {
            return Err(HttpError(ApiError::new(
                ApiErrorCode::PayloadTooLarge,
                "request body is larger than this endpoint accepts",
            )));
        }
        // Chunked, or longer than declared (hyper refuses that, but the budget must hold):
        // the bytes beyond what was granted are taken as they arrive.
        let beyond = (buf.len() + data.len()).saturating_sub(granted);
        permits.extend(budget.take(beyond)?);
        granted += beyond;
        buf.extend_from_slice(&data);
    }
    Ok((Bytes::from(buf), permits))
}

/// Reads what is left of a refused body and drops it, until its end, `deadline`, a read error
/// or `limit` bytes, whichever comes first (see the module docs for why).
async fn discard_rest(body: &mut Body, deadline: tokio::time::Instant, limit: usize) {
    let drain = async {
        let mut discarded = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            discarded += frame.data_ref().map_or(0, Bytes::len);
            if discarded > limit {
                return;
            }
        }
    };
    let _ = tokio::time::timeout_at(deadline, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_taken_until_the_budget_is_spent_and_come_back_on_drop() {
        let budget = BodyBudget::new(100, Duration::from_secs(1), 1000);
        let first = budget.take(60).unwrap();
        let refused = budget.take(50).unwrap_err();
        assert_eq!(refused.0.code, ApiErrorCode::Overloaded);
        assert_eq!(refused.0.http_status(), 503);
        drop(first);
        assert!(budget.take(100).unwrap().is_some());
        assert!(budget.take(0).unwrap().is_none());
    }
}
