//! The statuses every operation in a scope answers besides its own: documented once here, added
//! to each operation by [`super::doc`].

use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};

/// Which operations a status of [`COMMON_STATUSES`] is added to.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scope {
    /// Every operation.
    Every,
    /// Every operation behind the bearer token (all but [`PUBLIC_PATHS`] and [`PAGE_PATHS`]).
    ///
    /// [`PUBLIC_PATHS`]: crate::auth::PUBLIC_PATHS
    /// [`PAGE_PATHS`]: crate::auth::PAGE_PATHS
    Protected,
    /// The `/admin/` operations.
    Admin,
    /// Operations with a JSON request body (read by `ApiJson`).
    WithBody,
    /// Operations with query parameters (read by `ApiQuery`).
    WithQuery,
}

/// The statuses answered around the handlers rather than by them (the middleware, the
/// extractors, the timeout layer), so documented here once for every operation in their scope.
/// A handler that documents the same status keeps its own, more precise description. Every one
/// has an `ApiError` body except the timeout layer's 408 (empty).
pub(super) const COMMON_STATUSES: &[(Scope, u16, &str)] = &[
    (
        Scope::Protected,
        401,
        "No bearer token, or one that names no tenant (`UNAUTHORIZED`)",
    ),
    (
        Scope::Admin,
        403,
        "A tenant's token: admin endpoints need the admin token (`FORBIDDEN`)",
    ),
    // Before the row for every protected route: the first row of a status wins.
    (
        Scope::WithBody,
        503,
        "Retry after `Retry-After`: the server is reading as many request bodies as it buffers \
         at once (`OVERLOADED`), the broker is unreachable (`BROKER_UNAVAILABLE`) or at its \
         memory limit (`BROKER_OUT_OF_MEMORY`)",
    ),
    // The token's tenant is looked up in the broker.
    (
        Scope::Protected,
        503,
        "Broker unavailable (`BROKER_UNAVAILABLE`); retry after `Retry-After` seconds",
    ),
    (Scope::WithBody, 400, "Malformed JSON (`MALFORMED_JSON`)"),
    (
        Scope::WithBody,
        413,
        "Body larger than this endpoint accepts (`PAYLOAD_TOO_LARGE`)",
    ),
    (
        Scope::WithBody,
        415,
        "The body's content type is not `application/json` (`UNSUPPORTED_MEDIA_TYPE`)",
    ),
    (
        Scope::WithBody,
        422,
        "A field is missing, of the wrong type or out of range (`VALIDATION`)",
    ),
    (
        Scope::WithQuery,
        422,
        "A query parameter is out of range or not of its type (`VALIDATION`)",
    ),
    // Before the row for every route: the body read timeout answers with an `ApiError`.
    (
        Scope::WithBody,
        408,
        "The body did not arrive within the body read timeout (`REQUEST_TIMEOUT`); a request \
         that took longer than the server allows in all is cut with an empty 408",
    ),
    (
        Scope::Every,
        408,
        "The request took longer than the server allows (no body)",
    ),
];

/// A response of [`COMMON_STATUSES`]: the `ApiError` body, or none for the timeout layer's 408.
pub(super) fn common_response(
    scope: Scope,
    status: u16,
    description: &str,
) -> utoipa::openapi::Response {
    let response = ResponseBuilder::new().description(description);
    if status == 408 && matches!(scope, Scope::Every) {
        return response.build();
    }
    response
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ApiError")))
                .build(),
        )
        .build()
}

/// The headers `HttpError` sets on an `ApiError` answer of `status`: `Retry-After` on 429 and
/// 503, `WWW-Authenticate` on 401 (error.rs), so a client may rely on them.
pub(super) fn add_error_headers(status: &str, response: &mut utoipa::openapi::Response) {
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    let is_api_error = response.content.values().any(|c| {
        matches!(c, RefOr::T(c) if matches!(&c.schema,
            Some(RefOr::Ref(r)) if r.ref_location.ends_with("/ApiError")))
    });
    let (name, ty, description) = match status {
        "429" | "503" => (
            "Retry-After",
            Type::Integer,
            "Seconds to wait before retrying",
        ),
        "401" => (
            "WWW-Authenticate",
            Type::String,
            "`Bearer`: the scheme the token goes in",
        ),
        _ => return,
    };
    if !is_api_error {
        return;
    }
    let header = HeaderBuilder::new()
        .schema(Some(ObjectBuilder::new().schema_type(SchemaType::Type(ty))))
        .description(Some(description))
        .build();
    response.headers.insert(name.to_owned(), header.into());
}
