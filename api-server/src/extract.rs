//! Extractors whose rejections use our error body instead of axum's plain text, and the
//! query parameters several handlers share.

use crate::error::HttpError;
use axum::extract::{FromRequest, FromRequestParts};
use crucible_shared::ApiError;
use serde::Deserialize;
use std::time::Duration;
use utoipa::IntoParams;

/// `Json<T>` whose rejections are `{code, message}`.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(HttpError))]
pub struct ApiJson<T>(pub T);

/// `Query<T>` whose rejections are `{code, message}`.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(HttpError))]
pub struct ApiQuery<T>(pub T);

/// Longest `?wait=` in seconds.
pub const MAX_WAIT_S: f64 = 60.0;

/// `?wait=` of the endpoints that can long-poll a task.
#[derive(Debug, Deserialize, IntoParams)]
pub struct WaitQuery {
    /// Seconds to wait for the task to finish (0-60). When it finishes in time the answer is
    /// 200 with the whole task, else 202 with its id.
    pub wait: Option<f64>,
}

/// A `?wait=` in seconds, checked against [`MAX_WAIT_S`].
pub fn wait_duration(wait: Option<f64>) -> Result<Option<Duration>, HttpError> {
    match wait {
        None => Ok(None),
        Some(s) if s.is_finite() && (0.0..=MAX_WAIT_S).contains(&s) => {
            Ok(Some(Duration::from_secs_f64(s)))
        }
        Some(s) => {
            Err(ApiError::invalid("wait", format!("{s} is out of range 0-{MAX_WAIT_S}")).into())
        }
    }
}
