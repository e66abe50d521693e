//! Who is calling. `CRUCIBLE_AUTH` and the admin token are read once at start ([`Auth`]); every
//! request but the public ones ([`is_public`]) passes `access::authenticate` before any handler runs
//! (so an unauthenticated body is never read), which puts the [`Caller`] in its extensions.
//!
//! - `CRUCIBLE_AUTH=off`: every request acts as the built-in tenant with admin rights
//!   (single-user mode, the default on a loopback address). Tokens are ignored.
//! - `CRUCIBLE_AUTH=required` (the default on any other address): `Authorization: Bearer
//!   <token>`, either `CRUCIBLE_ADMIN_TOKEN` (the built-in tenant with admin rights) or a
//!   tenant's token from `POST /admin/tenants`; 401 without one or with a bad one.
//!
//! Tenant tokens are 256 bits from the OS RNG, shown once and stored only as their SHA-256,
//! which is also how they are looked up, at every request (a deleted tenant's token stops
//! working at once). The admin token is kept only as its SHA-256 too, compared in constant
//! time. No token is ever logged: request traces carry no headers.

use crate::error::HttpError;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use crucible_shared::{ApiError, ApiErrorCode, TenantId};
use crucible_task_manager::{Broker, Tenant};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use subtle::ConstantTimeEq;

/// Paths every caller may read without a token: health checks (the service's and OpenEnv's)
/// and scrapes, and the contract.
pub const PUBLIC_PATHS: [&str; 4] = ["/health", "/metrics", "/openapi.json", "/openenv/health"];
/// Swagger UI's pages (which only render the public `/openapi.json`); public so a browser,
/// which sends no bearer token, can open them.
pub const DOCS_PATH: &str = "/docs";
/// The status page (also served at `/`).
pub const PAGE_PATH: &str = "/status";
/// The status page's script.
pub const SCRIPT_PATH: &str = "/status.js";
/// The status page's stylesheet.
pub const STYLE_PATH: &str = "/status.css";
/// The status page and its assets: served to anyone, so a browser (which sends no bearer
/// token) can load them; the page holds data only for a request whose token it checks itself,
/// and its data comes from `/status.json`, which is not public (`status_page.rs`).
pub const PAGE_PATHS: [&str; 4] = ["/", PAGE_PATH, SCRIPT_PATH, STYLE_PATH];
/// Shortest admin token accepted at start.
pub const MIN_ADMIN_TOKEN_BYTES: usize = 32;
/// Tenant tokens start with this, so secret scanners and people recognise them.
pub const TOKEN_PREFIX: &str = "crt_";

/// Whether `path` is served without a token: [`PUBLIC_PATHS`], [`PAGE_PATHS`] and everything
/// under [`DOCS_PATH`].
pub fn is_public(path: &str) -> bool {
    PUBLIC_PATHS.contains(&path)
        || PAGE_PATHS.contains(&path)
        || path
            .strip_prefix(DOCS_PATH)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Whether requests must carry a token (`CRUCIBLE_AUTH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Every caller is the admin: a single user on a loopback address.
    Off,
    /// Every path but the public ones needs a tenant's or the admin's token.
    Required,
}

/// A configuration the server refuses to start with, rather than serve open or with a
/// guessable admin token.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum AuthConfigError {
    /// `CRUCIBLE_AUTH` is neither `off` nor `required`.
    #[error("CRUCIBLE_AUTH={0:?}: expected `off` or `required`")]
    BadMode(String),
    /// Authentication required on a non-loopback address, but no admin token to create
    /// tenants with: nobody could use the server.
    #[error(
        "refusing to serve {addr} with CRUCIBLE_AUTH=required and no CRUCIBLE_ADMIN_TOKEN: set \
         CRUCIBLE_ADMIN_TOKEN to a secret of at least {MIN_ADMIN_TOKEN_BYTES} characters (e.g. \
         `openssl rand -hex 32`) to create tenants with, bind a loopback address, or set \
         CRUCIBLE_AUTH=off to serve without authentication"
    )]
    NoAdminToken {
        /// The address bound.
        addr: SocketAddr,
    },
    /// An admin token shorter than [`MIN_ADMIN_TOKEN_BYTES`] (its length is given).
    #[error(
        "CRUCIBLE_ADMIN_TOKEN has {0} characters; it needs at least {MIN_ADMIN_TOKEN_BYTES} \
         (e.g. `openssl rand -hex 32`)"
    )]
    WeakAdminToken(usize),
}

/// The authentication settings of one API process.
pub struct Auth {
    mode: AuthMode,
    /// SHA-256 of `CRUCIBLE_ADMIN_TOKEN`; the token itself is not kept.
    admin_sha256: Option<[u8; 32]>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("mode", &self.mode)
            .field("admin_token", &self.admin_sha256.map(|_| "<set>"))
            .finish()
    }
}

impl Auth {
    /// Single-user mode: every request is the admin.
    pub fn off() -> Self {
        Self {
            mode: AuthMode::Off,
            admin_sha256: None,
        }
    }

    /// Reads `CRUCIBLE_AUTH` (default: `off` when `addr`, the address actually bound, is a
    /// loopback address, else `required`) and `CRUCIBLE_ADMIN_TOKEN`.
    pub fn from_lookup(
        addr: SocketAddr,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, AuthConfigError> {
        let mode = match lookup("CRUCIBLE_AUTH").as_deref().map(str::trim) {
            None | Some("") if addr.ip().is_loopback() => AuthMode::Off,
            None | Some("") | Some("required") => AuthMode::Required,
            Some("off") => AuthMode::Off,
            Some(other) => return Err(AuthConfigError::BadMode(other.to_owned())),
        };
        let admin = lookup("CRUCIBLE_ADMIN_TOKEN").filter(|t| !t.is_empty());
        if let Some(token) = &admin
            && token.chars().count() < MIN_ADMIN_TOKEN_BYTES
        {
            return Err(AuthConfigError::WeakAdminToken(token.chars().count()));
        }
        if mode == AuthMode::Required && admin.is_none() && !addr.ip().is_loopback() {
            return Err(AuthConfigError::NoAdminToken { addr });
        }
        Ok(Self {
            mode,
            admin_sha256: admin.map(|t| Sha256::digest(t.as_bytes()).into()),
        })
    }

    /// [`Auth::from_lookup`] on this process's environment.
    pub fn from_env(addr: SocketAddr) -> Result<Self, AuthConfigError> {
        Self::from_lookup(addr, |k| std::env::var(k).ok())
    }

    /// Whether requests need a token.
    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// Whether an admin token is configured (without one, admin endpoints answer 403).
    pub fn has_admin_token(&self) -> bool {
        self.admin_sha256.is_some()
    }

    /// The caller a request's headers name.
    pub(crate) async fn caller(
        &self,
        broker: &dyn Broker,
        headers: &HeaderMap,
    ) -> Result<Caller, HttpError> {
        if self.mode == AuthMode::Off {
            return Ok(Caller::admin());
        }
        let token = bearer(headers)?.ok_or_else(|| {
            unauthorized("a bearer token is required: send `Authorization: Bearer <token>`")
        })?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(admin) = &self.admin_sha256
            && bool::from(admin.ct_eq(&digest))
        {
            return Ok(Caller::admin());
        }
        match broker.tenant_by_token(&hex(&digest)).await? {
            Some(tenant) => Ok(Caller {
                tenant,
                admin: false,
            }),
            None => Err(unauthorized("the bearer token names no tenant").into()),
        }
    }
}

/// Says where the API listens and how it authenticates, warning about the settings that are
/// allowed but unusual.
pub fn log_mode(auth: &Auth, addr: SocketAddr) {
    let mode = match auth.mode {
        AuthMode::Off => "off",
        AuthMode::Required => "required",
    };
    tracing::info!(addr = %addr, auth = mode, "api listening");
    if auth.mode == AuthMode::Off && !addr.ip().is_loopback() {
        tracing::warn!(addr = %addr, "CRUCIBLE_AUTH=off on a non-loopback address: anyone who can reach it acts as the admin");
    }
    if auth.mode == AuthMode::Required && auth.admin_sha256.is_none() {
        tracing::warn!("no CRUCIBLE_ADMIN_TOKEN: admin endpoints answer 403 on this replica");
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case); an
/// Authorization header of another shape is refused rather than ignored.
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(AUTHORIZATION) else {
        return Ok(None);
    };
    let malformed = || unauthorized("the Authorization header must be `Bearer <token>`");
    let value = value.to_str().map_err(|_| malformed())?;
    let (scheme, token) = value.split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(malformed());
    }
    Ok(Some(token))
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(ApiErrorCode::Unauthorized, message)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new tenant token: [`TOKEN_PREFIX`] and 256 bits from the OS RNG in hex.
pub fn new_token() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApiError::new(ApiErrorCode::Internal, format!("OS random generator: {e}")))?;
    Ok(format!("{TOKEN_PREFIX}{}", hex(&bytes)))
}

/// What the broker stores and looks a token up by: its SHA-256 in hex.
pub fn token_sha256(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Who a request acts for.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The tenant its submissions belong to (the built-in one for the admin).
    pub tenant: Tenant,
    /// The admin token (or authentication off): admin endpoints, every tenant's tasks and
    /// counts. Its own submissions belong to the built-in tenant.
    pub admin: bool,
}

impl Caller {
    /// The admin: the admin token, or any request when authentication is off.
    pub fn admin() -> Self {
        Self {
            tenant: Tenant::builtin(),
            admin: true,
        }
    }

    /// The tenant its submissions are recorded under.
    pub fn tenant_id(&self) -> &TenantId {
        &self.tenant.id
    }

    /// Whether the caller may see and cancel what `owner` submitted.
    pub fn owns(&self, owner: Option<&TenantId>) -> bool {
        self.admin || owner == Some(&self.tenant.id)
    }

    /// 403 unless the caller is the admin: the guard of every admin endpoint.
    pub fn require_admin(&self) -> Result<(), HttpError> {
        if self.admin {
            return Ok(());
        }
        Err(ApiError::new(
            ApiErrorCode::Forbidden,
            "admin endpoints need the admin token (CRUCIBLE_ADMIN_TOKEN)",
        )
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use std::collections::HashMap;

    fn auth(addr: &str, env: &[(&str, &str)]) -> Result<Auth, AuthConfigError> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Auth::from_lookup(addr.parse().unwrap(), |k| env.get(k).cloned())
    }

    const ADMIN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn loopback_defaults_to_off_and_other_addresses_to_required() {
        assert_eq!(auth("127.0.0.1:1", &[]).unwrap().mode(), AuthMode::Off);
        assert_eq!(auth("[::1]:1", &[]).unwrap().mode(), AuthMode::Off);
        let open = auth("0.0.0.0:1", &[("CRUCIBLE_ADMIN_TOKEN", ADMIN)]).unwrap();
        assert_eq!(open.mode(), AuthMode::Required);
        assert!(open.has_admin_token());
        let local = auth("127.0.0.1:1", &[("CRUCIBLE_AUTH", "required")]).unwrap();
        assert_eq!(local.mode(), AuthMode::Required);
        assert!(!local.has_admin_token());
        let off = auth("10.0.0.7:1", &[("CRUCIBLE_AUTH", "off")]).unwrap();
        assert_eq!(off.mode(), AuthMode::Off);
    }

    #[test]
    fn a_public_address_without_an_admin_token_is_refused() {
        let err = auth("0.0.0.0:10907", &[]).unwrap_err();
        assert!(matches!(err, AuthConfigError::NoAdminToken { .. }));
        assert!(err.to_string().contains("CRUCIBLE_ADMIN_TOKEN"), "{err}");
        let err = auth("0.0.0.0:1", &[("CRUCIBLE_AUTH", "required")]).unwrap_err();
        assert!(matches!(err, AuthConfigError::NoAdminToken { .. }));
        assert_eq!(
            auth("0.0.0.0:1", &[("CRUCIBLE_AUTH", "maybe")]).unwrap_err(),
            AuthConfigError::BadMode("maybe".into())
        );
        assert_eq!(
            auth("127.0.0.1:1", &[("CRUCIBLE_ADMIN_TOKEN", "short")]).unwrap_err(),
            AuthConfigError::WeakAdminToken(5)
        );
    }

    #[test]
    fn the_admin_token_is_not_kept_or_printed() {
        let a = auth("0.0.0.0:1", &[("CRUCIBLE_ADMIN_TOKEN", ADMIN)]).unwrap();
        let shown = format!("{a:?}");
        assert!(!shown.contains(ADMIN) && shown.contains("<set>"), "{shown}");
    }

    #[test]
    fn tokens_are_fresh_256_bit_secrets_looked_up_by_hash() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 64);
        assert_eq!(token_sha256(&a), token_sha256(&a));
        assert_eq!(token_sha256(&a).len(), 64);
        assert!(!token_sha256(&a).contains(&a[TOKEN_PREFIX.len()..]));
        assert_eq!(
            token_sha256("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn bearer_headers_are_parsed_strictly() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            h
        };
        assert_eq!(bearer(&HeaderMap::new()).unwrap(), None);
        assert_eq!(bearer(&with("Bearer abc")).unwrap(), Some("abc"));
        assert_eq!(bearer(&with("bearer  abc ")).unwrap(), Some("abc"));
        for bad in ["Basic abc", "Bearer", "Bearer ", "abc"] {
            let err = bearer(&with(bad)).unwrap_err();
            assert_eq!(err.code, ApiErrorCode::Unauthorized, "{bad}");
        }
    }

    #[test]
    fn only_health_metrics_the_contract_and_the_page_are_public() {
        for path in [
            "/health",
            "/metrics",
            "/openapi.json",
            "/docs",
            "/docs/",
            "/docs/index.css",
            "/",
            "/status",
            "/status.js",
            "/status.css",
        ] {
            assert!(is_public(path), "{path}");
        }
        for path in [
            "/evaluate",
            "/tasks/t_1",
            "/admin/tenants",
            "/docsx",
            "/health/x",
            "/status.json",
            "/status/x",
            "/workers/status",
        ] {
            assert!(!is_public(path), "{path}");
        }
    }

    #[test]
    fn a_tenant_owns_only_its_own_and_the_admin_everything() {
        let mut tenant = Caller {
            tenant: Tenant::builtin(),
            admin: false,
        };
        tenant.tenant.id = TenantId::from("tn_a");
        assert!(tenant.owns(Some(&TenantId::from("tn_a"))));
        assert!(!tenant.owns(Some(&TenantId::from("tn_b"))));
        assert!(!tenant.owns(None));
        assert!(tenant.require_admin().is_err());
        assert!(Caller::admin().owns(Some(&TenantId::from("tn_b"))));
        assert!(Caller::admin().require_admin().is_ok());
    }
}
