//! Tenants in the memory broker: a table by id, name and token hash, under the broker's lock.

use super::MemoryBroker;
use crate::broker::BrokerError;
use crate::tenants::{Tenant, TenantLoad, TenantRegistry, deleted_reason};
use async_trait::async_trait;
use chrono::Utc;
use crucible_shared::{BatchId, CreateTenantRequest, DeletedTenant, TaskId, TaskStatus, TenantId};
use std::collections::{BTreeMap, HashMap};

#[derive(Default)]
pub(super) struct Table {
    by_id: HashMap<TenantId, Tenant>,
    by_name: HashMap<String, TenantId>,
    /// SHA-256 of the token → tenant.
    by_token: HashMap<String, TenantId>,
}

impl Table {
    /// The tenant `id` names, the built-in one included.
    pub(super) fn get(&self, id: &TenantId) -> Option<Tenant> {
        if id.is_builtin() {
            return Some(Tenant::builtin());
        }
        self.by_id.get(id).cloned()
    }

    /// The fair share's weight of `id` (1 for one that is gone).
    pub(super) fn weight(&self, id: &TenantId) -> u32 {
        self.by_id.get(id).map_or(1, |t| t.weight)
    }

    fn name(&self, id: &TenantId) -> Option<String> {
        self.get(id).map(|t| t.name)
    }
}

#[async_trait]
impl TenantRegistry for MemoryBroker {
    async fn create_tenant(
        &self,
        request: &CreateTenantRequest,
        token_sha256: &str,
    ) -> Result<Tenant, BrokerError> {
        let mut st = self.lock();
        let table = &mut st.tenants;
        if table.by_name.contains_key(&request.name) {
            return Err(BrokerError::TenantExists(request.name.clone()));
        }
        if table.by_token.contains_key(token_sha256) {
            return Err(BrokerError::Corrupt("token hash already in use".to_owned()));
        }
        let tenant = Tenant::from_request(request, Utc::now());
        table.by_name.insert(tenant.name.clone(), tenant.id.clone());
        table
            .by_token
            .insert(token_sha256.to_owned(), tenant.id.clone());
        table.by_id.insert(tenant.id.clone(), tenant.clone());
        Ok(tenant)
    }

    async fn tenant_by_token(&self, token_sha256: &str) -> Result<Option<Tenant>, BrokerError> {
        let st = self.lock();
        Ok(st
            .tenants
            .by_token
            .get(token_sha256)
            .and_then(|id| st.tenants.by_id.get(id))
            .cloned())
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>, BrokerError> {
        let mut out: Vec<Tenant> = self.lock().tenants.by_id.values().cloned().collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn delete_tenant(&self, name: &str) -> Result<Option<DeletedTenant>, BrokerError> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(id) = st.tenants.by_name.remove(name) else {
            return Ok(None);
        };
        st.tenants.by_id.remove(&id);
        st.tenants.by_token.retain(|_, t| *t != id);
        let queued = st.queues.drain(&id);
        let running: Vec<TaskId> = st
            .leases
            .keys()
            .filter(|t| st.tasks.get(*t).is_some_and(|rec| rec.tenant == id))
            .cloned()
            .collect();
        let reason = deleted_reason(name);
        let mut cancel = |task: &TaskId, from: TaskStatus| {
            if !st.tasks.get(task).is_some_and(|r| r.status == from) {
                return 0;
            }
            st.cancel_open(task, reason.clone(), self.cfg.result_ttl);
            1
        };
        let cancelled_queued = queued.iter().map(|t| cancel(t, TaskStatus::Queued)).sum();
        let cancelled_running = running.iter().map(|t| cancel(t, TaskStatus::Running)).sum();
        drop(guard);
        self.task_finished.notify_waiters();
        tracing::info!(
            tenant = name,
            cancelled_queued,
            cancelled_running,
            "tenant deleted"
        );
        Ok(Some(DeletedTenant {
            name: name.to_owned(),
            cancelled_queued,
            cancelled_running,
        }))
    }

    async fn tenant_loads(&self) -> Result<Vec<TenantLoad>, BrokerError> {
        let st = self.lock();
        let mut loads: BTreeMap<TenantId, (u64, u64)> = st
            .queues
            .queued_by_tenant()
            .filter(|(_, n)| *n > 0)
            .map(|(t, n)| (t.clone(), (n, 0)))
            .collect();
        for task in st.leases.keys() {
            if let Some(rec) = st.tasks.get(task) {
                loads.entry(rec.tenant.clone()).or_default().1 += 1;
            }
        }
        Ok(loads
            .into_iter()
            .map(|(id, (queued, running))| TenantLoad {
                name: st.tenants.name(&id),
                id,
                queued,
                running,
            })
            .collect())
    }

    async fn task_tenant(&self, id: &TaskId) -> Result<Option<TenantId>, BrokerError> {
        Ok(self.lock().tasks.get(id).map(|rec| rec.tenant.clone()))
    }

    async fn batch_tenant(&self, id: &BatchId) -> Result<Option<TenantId>, BrokerError> {
        Ok(self.lock().batches.get(id).map(|b| b.tenant.clone()))
    }
}
