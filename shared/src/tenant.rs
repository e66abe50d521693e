//! Tenants on the wire: the admin's requests and answers (`/admin/tenants`) and the per-tenant
//! counts of the status endpoints. The bounds of a tenant's settings are checked here, by pure
//! functions, so each is tested without a server.

use crate::bounds::Bounds;
use crate::error::ApiError;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Name of the built-in tenant (the admin, and every caller when authentication is off);
/// reserved, so no created tenant can take it.
pub const BUILTIN_TENANT_NAME: &str = "admin";
/// Longest tenant name.
pub const MAX_TENANT_NAME_BYTES: usize = 64;
/// `weight`: its default and bounds (the fair share's arithmetic stays exact far beyond the
/// largest).
pub const TENANT_WEIGHT: Bounds<u32> = Bounds {
    default: 1,
    min: 1,
    max: 1000,
};
/// Largest `weight`.
pub const MAX_TENANT_WEIGHT: u32 = TENANT_WEIGHT.max;
/// `weight` when none is given.
pub const DEFAULT_TENANT_WEIGHT: u32 = TENANT_WEIGHT.default;

/// The schema of a tenant name: the pattern [`validate_tenant_name`] checks (`admin`, reserved,
/// matches it and is refused by validation alone).
fn name_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .pattern(Some(name_pattern()))
        .description(Some(format!(
            "1-{MAX_TENANT_NAME_BYTES} bytes of lowercase letters, digits, `-` and `_`, starting \
             with a letter or a digit; `{BUILTIN_TENANT_NAME}` is reserved."
        )))
        .build()
}

fn name_pattern() -> String {
    format!("^[a-z0-9][a-z0-9_-]{{0,{}}}$", MAX_TENANT_NAME_BYTES - 1)
}

fn weight_schema() -> utoipa::openapi::Object {
    TENANT_WEIGHT.schema(
        true,
        "The tenant's share of claims while several tenants have queued work: a tenant of \
         weight 2 is served twice as often as one of weight 1.",
    )
}

/// `POST /admin/tenants`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantRequest {
    /// 1-64 bytes of lowercase letters, digits, `-` and `_`, starting with a letter or a
    /// digit; `admin` is reserved.
    #[schema(schema_with = name_schema)]
    pub name: String,
    /// Most tasks the tenant may have queued at once; a submission beyond it is refused with
    /// 429 `QUOTA_EXCEEDED`. Absent: only the global queue cap applies.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_queued: Option<u64>,
    /// The tenant's share of claims while several tenants have queued work: a tenant of
    /// weight 2 is served twice as often as one of weight 1 ([`TENANT_WEIGHT`]).
    #[serde(default)]
    #[schema(schema_with = weight_schema)]
    pub weight: Option<u32>,
    /// Read and fill the one result cache shared by every tenant created with this flag,
    /// instead of a cache of its own. Tasks stay the tenant's own: identical requests of two
    /// sharing tenants never join each other's open task.
    #[serde(default)]
    #[schema(default = false)]
    pub share_cache: bool,
}

impl CreateTenantRequest {
    /// A tenant named `name` with every setting at its default: no quota, weight 1, a cache
    /// of its own.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            max_queued: None,
            weight: None,
            share_cache: false,
        }
    }

    /// The weight, with its default.
    pub fn weight(&self) -> u32 {
        self.weight.unwrap_or(DEFAULT_TENANT_WEIGHT)
    }

    /// Checks every bound; the error names the offending field.
    pub fn validate(&self) -> Result<(), ApiError> {
        validate_tenant_name(&self.name)?;
        if self.max_queued == Some(0) {
            return Err(ApiError::invalid(
                "max_queued",
                "must be at least 1 (leave it out for no quota)",
            ));
        }
        let weight = self.weight();
        if !(TENANT_WEIGHT.min..=TENANT_WEIGHT.max).contains(&weight) {
            return Err(ApiError::invalid(
                "weight",
                format!(
                    "{weight} is out of range {}-{}",
                    TENANT_WEIGHT.min, TENANT_WEIGHT.max
                ),
            ));
        }
        Ok(())
    }
}

/// Tenant names become part of broker keys and log lines, so they are kept to a small
/// alphabet without separators.
pub fn validate_tenant_name(name: &str) -> Result<(), ApiError> {
    let well_formed = !name.is_empty()
        && name.len() <= MAX_TENANT_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if !well_formed {
        return Err(ApiError::invalid(
            "name",
            format!(
                "must be 1-{MAX_TENANT_NAME_BYTES} bytes of lowercase letters, digits, '-' and \
                 '_', starting with a letter or a digit"
            ),
        ));
    }
    if name == BUILTIN_TENANT_NAME {
        return Err(ApiError::invalid(
            "name",
            format!("{BUILTIN_TENANT_NAME:?} is reserved for the built-in tenant"),
        ));
    }
    Ok(())
}

/// A tenant as the admin sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TenantInfo {
    /// The name it was created with; the API names tenants by it.
    pub name: String,
    /// Most tasks it may have queued; absent: only the global queue cap.
    pub max_queued: Option<u64>,
    /// Its share of claims while several tenants have queued work.
    pub weight: u32,
    /// Whether it reads and fills the shared result cache instead of a cache of its own.
    pub share_cache: bool,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// Its tasks queued right now.
    pub queued: u64,
    /// Its tasks holding a lease right now.
    pub running: u64,
}

/// Answer of `POST /admin/tenants`. The token is shown this once: only its SHA-256 is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CreatedTenant {
    /// The tenant as created.
    pub tenant: TenantInfo,
    /// The tenant's bearer token (`Authorization: Bearer <token>`).
    pub token: String,
}

/// Answer of `GET /admin/tenants`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TenantList {
    /// Every created tenant, by name; the built-in one is not listed.
    pub tenants: Vec<TenantInfo>,
    /// How many `tenants` holds.
    pub total: usize,
}

/// Answer of `DELETE /admin/tenants/{name}`: its token stopped working, and every task it had
/// queued or running was cancelled (error `tenant <name> was deleted`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeletedTenant {
    /// The deleted tenant; the name is free to be created again.
    pub name: String,
    /// Its tasks that were queued and are now cancelled.
    pub cancelled_queued: u64,
    /// Its tasks that were running and are now cancelled.
    pub cancelled_running: u64,
}

/// One tenant's open tasks, in `/queue/status` and `/workers/status`: every tenant for the
/// admin, only the caller's own for a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TenantCounts {
    /// The tenant's name (`admin` for the built-in tenant).
    pub tenant: String,
    /// Its tasks queued right now.
    pub queued: u64,
    /// Its tasks holding a lease right now.
    pub running: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_a_small_alphabet_and_admin_is_reserved() {
        for good in ["a", "team-7", "rl_run_3", "0day", &"x".repeat(64)] {
            assert!(validate_tenant_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-lead",
            "_lead",
            "Upper",
            "a:b",
            "a b",
            "a/b",
            "é",
            &"x".repeat(65),
            "admin",
        ] {
            let err = validate_tenant_name(bad).unwrap_err();
            assert_eq!(err.field.as_deref(), Some("name"), "{bad}: {err}");
        }
        // The schema's pattern bounds the name as validation does.
        let pattern = super::name_pattern();
        assert!(pattern.ends_with(&format!("{{0,{}}}$", MAX_TENANT_NAME_BYTES - 1)));
        let schema = serde_json::to_value(super::name_schema()).unwrap();
        assert_eq!(schema["pattern"], pattern);
    }

    #[test]
    fn settings_are_bounded() {
        let mut req = CreateTenantRequest::new("alice");
        assert!(req.validate().is_ok());
        assert_eq!(req.weight(), DEFAULT_TENANT_WEIGHT);
        req.max_queued = Some(0);
        assert_eq!(
            req.validate().unwrap_err().field.as_deref(),
            Some("max_queued")
        );
        req.max_queued = Some(1);
        for (weight, ok) in [(0, false), (1, true), (1000, true), (1001, false)] {
            req.weight = Some(weight);
            assert_eq!(req.validate().is_ok(), ok, "weight {weight}");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_str::<CreateTenantRequest>(r#"{"name":"a","admin":true}"#)
            .unwrap_err();
        assert!(err.to_string().contains("admin"), "{err}");
    }
}
