//! The API's error body and the single place where error codes map to HTTP statuses.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Machine-readable error codes of the HTTP API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ApiErrorCode {
    /// The body is not valid JSON or does not have the expected shape.
    MalformedJson,
    /// A field is present but its value is not allowed.
    Validation,
    /// The body is larger than the server accepts.
    PayloadTooLarge,
    /// The content type is not `application/json`.
    UnsupportedMediaType,
    /// No bearer token, or one that names no tenant (`Authorization: Bearer <token>`).
    Unauthorized,
    /// The token is valid but may not do this (an admin endpoint with a tenant's token).
    Forbidden,
    /// No such task, batch, tenant or route, or one that belongs to another tenant.
    NotFound,
    /// The request conflicts with the current state (e.g. cancelling a finished task).
    Conflict,
    /// The queue is at its cap; retry later.
    QueueFull,
    /// The tenant has `max_queued` tasks queued already; retry when some have started.
    QuotaExceeded,
    /// The request names a device class that no live worker has (the message lists the
    /// classes that have workers); retrying helps only once a worker of the class is up.
    DeviceClassUnavailable,
    /// The broker cannot be reached; retry later.
    BrokerUnavailable,
    /// A bug on our side.
    Internal,
    /// The server is reading as many request bodies as it buffers at once
    /// (`CRUCIBLE_BODY_BYTES_IN_FLIGHT`); retry after `Retry-After`.
    Overloaded,
    /// The request body did not arrive within the body read timeout
    /// (`CRUCIBLE_BODY_TIMEOUT_MS`).
    RequestTimeout,
    /// The broker's store is at its memory limit (Redis `maxmemory`) and refuses writes until
    /// tasks finish or expire; retry later.
    BrokerOutOfMemory,
    /// A WebSocket route (`GET /openenv/ws`) asked without a WebSocket handshake.
    UpgradeRequired,
}

impl ApiErrorCode {
    /// The one mapping from error code to HTTP status.
    pub fn http_status(self) -> u16 {
        match self {
            ApiErrorCode::MalformedJson => 400,
            ApiErrorCode::Validation | ApiErrorCode::DeviceClassUnavailable => 422,
            ApiErrorCode::PayloadTooLarge => 413,
            ApiErrorCode::UnsupportedMediaType => 415,
            ApiErrorCode::Unauthorized => 401,
            ApiErrorCode::Forbidden => 403,
            ApiErrorCode::NotFound => 404,
            ApiErrorCode::Conflict => 409,
            ApiErrorCode::QueueFull | ApiErrorCode::QuotaExceeded => 429,
            ApiErrorCode::BrokerUnavailable
            | ApiErrorCode::Overloaded
            | ApiErrorCode::BrokerOutOfMemory => 503,
            ApiErrorCode::Internal => 500,
            ApiErrorCode::RequestTimeout => 408,
            ApiErrorCode::UpgradeRequired => 426,
        }
    }
}

/// The code as the body spells it (`NOT_FOUND`), so that what a program prints is what the
/// API documents and a script can match on.
impl std::fmt::Display for ApiErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::wire::wire_name(self))
    }
}

/// Every 4xx/5xx body: `{code, message}`; `field` names the offending field where there is one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// What went wrong, for programs; it alone decides the HTTP status.
    pub code: ApiErrorCode,
    /// What went wrong, for people: free text, not to be matched on.
    pub message: String,
    /// The request field at fault; absent when the error is not about one field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ApiError {
    /// An error about no particular field.
    pub fn new(code: ApiErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
        }
    }

    /// A validation error naming `field`; the message starts with the field name too, so a
    /// client that only prints `message` still learns which field was wrong.
    pub fn invalid(field: &str, message: impl AsRef<str>) -> Self {
        Self {
            code: ApiErrorCode::Validation,
            message: format!("{field}: {}", message.as_ref()),
            field: Some(field.to_owned()),
        }
    }

    /// `NotFound`, with the message "`what` not found".
    pub fn not_found(what: impl AsRef<str>) -> Self {
        Self::new(
            ApiErrorCode::NotFound,
            format!("{} not found", what.as_ref()),
        )
    }

    /// The HTTP status of this error's code.
    pub fn http_status(&self) -> u16 {
        self.code.http_status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_prints_its_code_as_the_body_spells_it() {
        assert_eq!(
            ApiError::not_found("task t_1").to_string(),
            "NOT_FOUND: task t_1 not found"
        );
        let code = ApiErrorCode::DeviceClassUnavailable;
        assert_eq!(
            code.to_string(),
            serde_json::to_value(code).unwrap().as_str().unwrap()
        );
    }
}
