//! Extractors whose rejections use our error body instead of axum's plain text.

use crate::error::HttpError;
use axum::extract::{FromRequest, FromRequestParts};

/// `Json<T>` whose rejections are `{code, message}`.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(HttpError))]
pub struct ApiJson<T>(pub T);

/// `Query<T>` whose rejections are `{code, message}`.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(HttpError))]
pub struct ApiQuery<T>(pub T);
