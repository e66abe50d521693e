//! Tenants in Redis: one Lua script per transition (`lua/tenant_*.lua`), and the purge that
//! cancels a deleted tenant's queued tasks in chunks (run by the deleting request, and by every
//! pass of an API replica's reaper in case that request's replica stopped half way).

use super::scripts::script;
use super::{RedisBroker, corrupt, ms, redis_err, time_from_ms};
use crate::broker::BrokerError;
use crate::tenants::{Tenant, TenantLoad, TenantRegistry, deleted_reason};
use async_trait::async_trait;
use chrono::Utc;
use crucible_shared::{BatchId, CreateTenantRequest, DeletedTenant, TaskId, TenantId};
use redis::Script;
use std::sync::LazyLock;

/// Values in a `tenant_row` (`lua/prelude.lua`).
const TENANT_ROW: usize = 6;

/// Queued tasks of deleted tenants cancelled per purge script call, so that one call never
/// stalls Redis.
const PURGE_CHUNK: u64 = 500;

struct Scripts {
    create: Script,
    auth: Script,
    list: Script,
    delete: Script,
    purge: Script,
    loads: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    create: script("tenant_create"),
    auth: script("tenant_auth"),
    list: script("tenant_list"),
    delete: script("tenant_delete"),
    purge: script("tenant_purge"),
    loads: script("tenant_loads"),
});

/// A tenant from the row `tenant_row` in `lua/prelude.lua` returns: id, name, max_queued,
/// weight, share_cache, created_at.
fn decode_tenant(row: &[Option<String>]) -> Result<Tenant, BrokerError> {
    let [
        Some(id),
        Some(name),
        max_queued,
        weight,
        share_cache,
        created_at,
    ] = row
    else {
        return Err(corrupt(format!(
            "tenant record of the wrong shape: {row:?}"
        )));
    };
    let bad = |field: &str| corrupt(format!("tenant {name}: bad {field}"));
    Ok(Tenant {
        id: TenantId(id.clone()),
        name: name.clone(),
        max_queued: max_queued
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|_| bad("max_queued"))?,
        weight: weight
            .as_deref()
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| bad("weight"))?,
        share_cache: share_cache.as_deref() == Some("1"),
        created_at: time_from_ms(created_at.as_deref().ok_or_else(|| bad("created_at"))?)?,
    })
}

impl RedisBroker {
    /// Cancels the queued tasks of deleted tenants, a chunk per script call, until none is
    /// left; returns how many it cancelled.
    pub(super) async fn purge_deleted_tenants(&self) -> Result<u64, BrokerError> {
        let mut cancelled = 0;
        let mut c = self.conn().await?;
        loop {
            let (n, examined): (u64, u64) = SCRIPTS
                .purge
                .arg(self.prefix())
                .arg(ms(self.cfg.result_ttl))
                .arg(PURGE_CHUNK)
                .invoke_async(&mut c)
                .await
                .map_err(redis_err)?;
            cancelled += n;
            if examined < PURGE_CHUNK {
                break;
            }
        }
        if cancelled > 0 {
            tracing::info!(cancelled, "queued tasks of deleted tenants cancelled");
        }
        Ok(cancelled)
    }

    async fn hget(&self, key: String, field: &str) -> Result<Option<String>, BrokerError> {
        let mut c = self.conn().await?;
        redis::cmd("HGET")
            .arg(key)
            .arg(field)
            .query_async(&mut c)
            .await
            .map_err(redis_err)
    }
}

#[async_trait]
impl TenantRegistry for RedisBroker {
    async fn create_tenant(
        &self,
        request: &CreateTenantRequest,
        token_sha256: &str,
    ) -> Result<Tenant, BrokerError> {
        let mut tenant = Tenant::from_request(request, Utc::now());
        let mut c = self.conn().await?;
        let reply: Vec<String> = SCRIPTS
            .create
            .arg(self.prefix())
            .arg(tenant.id.as_str())
            .arg(&tenant.name)
            .arg(token_sha256)
            .arg(tenant.max_queued.map(|n| n.to_string()).unwrap_or_default())
            .arg(tenant.weight)
            .arg(if tenant.share_cache { "1" } else { "0" })
            .arg(tenant.cache_namespace())
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        match reply.as_slice() {
            [what, at] if what == "created" => {
                tenant.created_at = time_from_ms(at)?;
                Ok(tenant)
            }
            [what] if what == "exists" => Err(BrokerError::TenantExists(tenant.name)),
            [what] if what == "token_taken" => Err(corrupt("token hash already in use")),
            _ => Err(corrupt(format!("unexpected tenant_create reply {reply:?}"))),
        }
    }

    async fn tenant_by_token(&self, token_sha256: &str) -> Result<Option<Tenant>, BrokerError> {
        let mut c = self.conn().await?;
        let row: Option<Vec<Option<String>>> = SCRIPTS
            .auth
            .arg(self.prefix())
            .arg(token_sha256)
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        row.as_deref().map(decode_tenant).transpose()
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>, BrokerError> {
        let mut c = self.conn().await?;
        let flat: Vec<Option<String>> = SCRIPTS
            .list
            .arg(self.prefix())
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        let mut out = flat
            .chunks(TENANT_ROW)
            .map(decode_tenant)
            .collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn delete_tenant(&self, name: &str) -> Result<Option<DeletedTenant>, BrokerError> {
        let mut c = self.conn().await?;
        let reply: Vec<String> = SCRIPTS
            .delete
            .arg(self.prefix())
            .arg(name)
            .arg(ms(self.cfg.result_ttl))
            .arg(deleted_reason(name))
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        drop(c);
        let (queued, running) = match reply.as_slice() {
            [what] if what == "not_found" => return Ok(None),
            [what, _id, queued, running] if what == "deleted" => (
                queued
                    .parse()
                    .map_err(|_| corrupt("tenant_delete queued"))?,
                running
                    .parse()
                    .map_err(|_| corrupt("tenant_delete running"))?,
            ),
            _ => return Err(corrupt(format!("unexpected tenant_delete reply {reply:?}"))),
        };
        // The tenant is gone already; its queued tasks are cancelled now (or, should this
        // replica stop first, by the next reaper pass of any replica).
        self.purge_deleted_tenants().await?;
        tracing::info!(
            tenant = name,
            cancelled_queued = queued,
            cancelled_running = running,
            "tenant deleted"
        );
        Ok(Some(DeletedTenant {
            name: name.to_owned(),
            cancelled_queued: queued,
            cancelled_running: running,
        }))
    }

    async fn tenant_loads(&self) -> Result<Vec<TenantLoad>, BrokerError> {
        let mut c = self.conn().await?;
        let flat: Vec<Option<String>> = SCRIPTS
            .loads
            .arg(self.prefix())
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        let count = |v: &Option<String>| -> Result<u64, BrokerError> {
            v.as_deref()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| corrupt("tenant counter"))
        };
        let mut out = Vec::new();
        for row in flat.chunks(4) {
            let [Some(id), queued, running, name] = row else {
                return Err(corrupt(format!("tenant_loads row {row:?}")));
            };
            let id = TenantId(id.clone());
            let (queued, running) = (count(queued)?, count(running)?);
            if queued + running == 0 {
                continue;
            }
            out.push(TenantLoad {
                name: name
                    .clone()
                    .or_else(|| id.is_builtin().then(|| Tenant::builtin().name)),
                id,
                queued,
                running,
            });
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    async fn task_tenant(&self, id: &TaskId) -> Result<Option<TenantId>, BrokerError> {
        let owner = self.hget(self.keys().task(id), "tenant").await?;
        Ok(owner.map(TenantId))
    }

    async fn batch_tenant(&self, id: &BatchId) -> Result<Option<TenantId>, BrokerError> {
        let owner = self.hget(self.keys().batch(id), "tenant").await?;
        Ok(owner.map(TenantId))
    }
}
