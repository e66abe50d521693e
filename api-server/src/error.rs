//! The one place where failures become HTTP responses: `{code, message}` bodies with the
//! status that `ApiErrorCode::http_status` assigns.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use crucible_shared::{ApiError, ApiErrorCode};
use crucible_task_manager::BrokerError;

/// An error on its way to the client.
#[derive(Debug)]
pub struct HttpError(pub ApiError);

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(self.0)).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> Self {
        HttpError(e)
    }
}

impl From<BrokerError> for HttpError {
    fn from(e: BrokerError) -> Self {
        let (code, message) = match &e {
            BrokerError::QueueFull { .. } => (ApiErrorCode::QueueFull, e.to_string()),
            BrokerError::QuotaExceeded { .. } => (
                ApiErrorCode::QuotaExceeded,
                format!("{e}; retry when some of your tasks have started"),
            ),
            // The tenant was deleted between authentication and this request's write.
            BrokerError::UnknownTenant(_) => (
                ApiErrorCode::Unauthorized,
                "the bearer token's tenant was deleted".to_owned(),
            ),
            BrokerError::TenantExists(_) => (ApiErrorCode::Conflict, e.to_string()),
            BrokerError::Unavailable(_) => (ApiErrorCode::BrokerUnavailable, e.to_string()),
            BrokerError::Corrupt(_) => (ApiErrorCode::Internal, e.to_string()),
            BrokerError::QueueBytesFull { .. } => (ApiErrorCode::QueueFull, e.to_string()),
            BrokerError::OutOfMemory(_) => (
                ApiErrorCode::BrokerOutOfMemory,
                format!("{e}; retry when tasks have finished or expired"),
            ),
        };
        if code == ApiErrorCode::Internal {
            tracing::error!(error = %e, "broker data error");
        }
        HttpError(ApiError::new(code, message))
    }
}

impl From<JsonRejection> for HttpError {
    fn from(rejection: JsonRejection) -> Self {
        let text = rejection.body_text();
        let error = match rejection {
            JsonRejection::JsonDataError(_) => {
                // serde_path_to_error puts the field path before the first ": ".
                let detail = text
                    .strip_prefix("Failed to deserialize the JSON body into the target type: ")
                    .unwrap_or(&text)
                    .to_owned();
                let field = detail
                    .split_once(": ")
                    .map(|(path, _)| path)
                    .filter(|p| !p.contains(' '))
                    .map(str::to_owned);
                ApiError {
                    code: ApiErrorCode::Validation,
                    message: detail,
                    field,
                }
            }
            JsonRejection::JsonSyntaxError(_) => ApiError::new(
                ApiErrorCode::MalformedJson,
                format!("malformed JSON: {text}"),
            ),
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                ApiErrorCode::UnsupportedMediaType,
                "expected a body with content-type application/json",
            ),
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                ApiErrorCode::PayloadTooLarge,
                "request body is larger than this endpoint accepts",
            ),
            _ => ApiError::new(ApiErrorCode::MalformedJson, text),
        };
        HttpError(error)
    }
}

impl From<QueryRejection> for HttpError {
    fn from(rejection: QueryRejection) -> Self {
        HttpError(ApiError::new(
            ApiErrorCode::Validation,
            format!("query string: {}", rejection.body_text()),
        ))
    }
}

/// Fallback for unknown routes, in the same error shape.
pub async fn not_found() -> HttpError {
    HttpError(ApiError::not_found("route"))
}
