//! Extractors whose rejections use our error body instead of axum's plain text, and the
//! query parameters several handlers share.

use crate::error::HttpError;
use axum::extract::{FromRequest, FromRequestParts, Path};
use axum::http::request::Parts;
use crucible_shared::bounds::WAIT_S;
use crucible_shared::{ApiError, ProblemRef};
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

/// `/problems/{level}/{id}...`: the problem the path names. A segment that is not a number
/// names no problem, so it is the same 404 as an unregistered one (not axum's plain-text 400):
/// whether the problem exists is the handler's to say, with the same message.
pub struct ProblemPath(pub ProblemRef);

impl<S: Send + Sync> FromRequestParts<S> for ProblemPath {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, HttpError> {
        let Path((level, id)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::not_found(format!("problem: {e}")))?;
        match (level.parse(), id.parse()) {
            (Ok(level), Ok(id)) => Ok(Self(ProblemRef { level, id })),
            _ => Err(problem_not_found(&level, &id).into()),
        }
    }
}

/// The 404 of a problem path that names no registered problem.
pub fn problem_not_found(level: impl std::fmt::Display, id: impl std::fmt::Display) -> ApiError {
    ApiError::not_found(format!("problem {level}/{id}"))
}

/// `?wait=` of the endpoints that can long-poll a task.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Seconds to wait for the task to finish ([`WAIT_S`]).
    #[param(schema_with = crucible_shared::bounds::wait_schema)]
    pub wait: Option<f64>,
}

/// A `?wait=` in seconds, checked against [`WAIT_S`].
pub fn wait_duration(wait: Option<f64>) -> Result<Option<Duration>, HttpError> {
    let (min, max) = (WAIT_S.min, WAIT_S.max);
    match wait {
        None => Ok(None),
        Some(s) if s.is_finite() && (min..=max).contains(&s) => {
            Ok(Some(Duration::from_secs_f64(s)))
        }
        Some(s) => {
            Err(ApiError::invalid("wait", format!("{s} is out of range {min}-{max}")).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{WAIT_S, wait_duration};
    use std::time::Duration;

    /// `?wait=` takes what its schema says ([`WAIT_S`], both ends included) and refuses the
    /// rest with a 422 naming `wait`.
    #[test]
    fn wait_is_bounded_as_documented() {
        assert_eq!(wait_duration(None).unwrap(), None);
        assert_eq!(
            wait_duration(Some(WAIT_S.min)).unwrap(),
            Some(Duration::ZERO)
        );
        assert_eq!(
            wait_duration(Some(WAIT_S.max)).unwrap(),
            Some(Duration::from_secs_f64(WAIT_S.max))
        );
        for bad in [-0.5, WAIT_S.max + 0.1, f64::NAN, f64::INFINITY] {
            let err = wait_duration(Some(bad)).unwrap_err().0;
            assert_eq!(err.field.as_deref(), Some("wait"), "{bad}");
            assert_eq!(err.http_status(), 422);
        }
    }
}
