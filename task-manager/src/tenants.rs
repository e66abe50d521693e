//! Tenants in the broker: the record the API authenticates against and the registry contract
//! both brokers implement (`tests/tenants.rs` runs it against both).
//!
//! A tenant owns the tasks and batches it submits (they record its [`TenantId`]), its
//! idempotency keys and, unless it shares the cache, a result cache of its own; its queued
//! tasks are served in a fair share with the other tenants' (`fair.rs`). Tokens are stored only
//! as their SHA-256 (hex), which is also how they are looked up: the broker never sees a token.

use crate::error::BrokerError;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crucible_shared::tenant::DEFAULT_TENANT_WEIGHT;
use crucible_shared::{
    BUILTIN_TENANT_NAME, BatchId, CreateTenantRequest, DeletedTenant, TaskId, TenantId,
};

/// The result cache namespace of every tenant created with `share_cache`. Tenant ids start
/// with `tn_`, so no tenant's own namespace can equal it.
pub const SHARED_CACHE_NAMESPACE: &str = "shared";

/// A tenant as the broker keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    /// The id its tasks, batches and cache namespace are recorded under.
    pub id: TenantId,
    /// Unique among tenants; what the admin names it by.
    pub name: String,
    /// Most tasks it may have queued at once; None: only the global queue cap.
    pub max_queued: Option<u64>,
    /// Its share of claims (see `fair.rs`).
    pub weight: u32,
    /// Whether its results go to (and are looked up in) [`SHARED_CACHE_NAMESPACE`] instead of
    /// a namespace of its own.
    pub share_cache: bool,
    /// When the admin created it (the Unix epoch for the built-in tenant).
    pub created_at: DateTime<Utc>,
}

impl Tenant {
    /// The built-in tenant: never stored, never deleted, no quota, weight 1, a cache of its own.
    pub fn builtin() -> Self {
        Self {
            id: TenantId::builtin(),
            name: BUILTIN_TENANT_NAME.to_owned(),
            max_queued: None,
            weight: DEFAULT_TENANT_WEIGHT,
            share_cache: false,
            created_at: DateTime::UNIX_EPOCH,
        }
    }

    /// A new tenant with a fresh id, as `request` (already validated) describes it.
    pub fn from_request(request: &CreateTenantRequest, created_at: DateTime<Utc>) -> Self {
        Self {
            id: TenantId::random(),
            name: request.name.clone(),
            max_queued: request.max_queued,
            weight: request.weight(),
            share_cache: request.share_cache,
            created_at,
        }
    }

    /// Where the tenant's results are cached and looked up: its own namespace, or the one
    /// shared by every tenant that shares the cache.
    pub fn cache_namespace(&self) -> &str {
        if self.share_cache {
            SHARED_CACHE_NAMESPACE
        } else {
            self.id.as_str()
        }
    }
}

/// A tenant's open tasks right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantLoad {
    /// The tenant the tasks belong to.
    pub id: TenantId,
    /// None for a deleted tenant whose tasks are still being cancelled.
    pub name: Option<String>,
    /// Its tasks waiting in the queue.
    pub queued: u64,
    /// Its tasks leased to a worker.
    pub running: u64,
}

/// Why a task of a deleted tenant was cancelled (its `error`).
pub fn deleted_reason(name: &str) -> String {
    format!("cancelled: tenant {name} was deleted")
}

/// Where tenants are stored and found by token: the part of the broker contract the API's
/// authentication and `/admin/tenants` use.
#[async_trait]
pub trait TenantRegistry: Send + Sync {
    /// Stores a new tenant (the request already validated) under the SHA-256 of its token.
    /// [`BrokerError::TenantExists`] when the name is taken.
    async fn create_tenant(
        &self,
        request: &CreateTenantRequest,
        token_sha256: &str,
    ) -> Result<Tenant, BrokerError>;

    /// The tenant whose token has this SHA-256; None once it is deleted.
    async fn tenant_by_token(&self, token_sha256: &str) -> Result<Option<Tenant>, BrokerError>;

    /// Every created tenant (not the built-in one), by name.
    async fn list_tenants(&self) -> Result<Vec<Tenant>, BrokerError>;

    /// Deletes a tenant: its token stops working at once, it leaves the fair share, and every
    /// task it has queued or running is cancelled with [`deleted_reason`] (a running one's
    /// worker learns it at its next renewal). None for an unknown name.
    async fn delete_tenant(&self, name: &str) -> Result<Option<DeletedTenant>, BrokerError>;

    /// Queued and running tasks of every tenant that has any, the built-in one included.
    async fn tenant_loads(&self) -> Result<Vec<TenantLoad>, BrokerError>;

    /// The tenant that submitted a task, while the task is kept.
    async fn task_tenant(&self, id: &TaskId) -> Result<Option<TenantId>, BrokerError>;

    /// The tenant that submitted a batch, while the batch is kept.
    async fn batch_tenant(&self, id: &BatchId) -> Result<Option<TenantId>, BrokerError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharing_tenants_share_one_namespace_and_others_keep_their_own() {
        let mut request = CreateTenantRequest::new("a");
        let own = Tenant::from_request(&request, Utc::now());
        assert_eq!(own.cache_namespace(), own.id.as_str());
        request.share_cache = true;
        let (x, y) = (
            Tenant::from_request(&request, Utc::now()),
            Tenant::from_request(&request, Utc::now()),
        );
        assert_ne!(x.id, y.id);
        assert_eq!(x.cache_namespace(), y.cache_namespace());
        assert_ne!(x.cache_namespace(), own.cache_namespace());
        assert_eq!(
            Tenant::builtin().cache_namespace(),
            TenantId::builtin().as_str()
        );
    }
}
