//! `/admin/tenants`: the admin creates, lists and deletes tenants; `/admin/workers/{id}/drain`:
//! the admin drains a worker (a rolling restart, docs/OPERATIONS.md); and what the status
//! endpoints and the status page show of tenants and workers (every tenant to the admin, only
//! its own to a tenant; workers' current tasks to the admin only).

use crate::auth::{Caller, new_token, token_sha256};
use crate::error::HttpError;
use crate::extract::ApiJson;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use crucible_shared::{
    ApiError, BUILTIN_TENANT_NAME, CreateTenantRequest, CreatedTenant, DeletedTenant,
    DrainRequested, TenantCounts, TenantId, TenantInfo, TenantList, WorkerId, WorkerInfo,
};
use crucible_task_manager::{Tenant, TenantLoad};
use std::collections::HashMap;

fn info(tenant: &Tenant, load: Option<&TenantLoad>) -> TenantInfo {
    TenantInfo {
        name: tenant.name.clone(),
        max_queued: tenant.max_queued,
        weight: tenant.weight,
        share_cache: tenant.share_cache,
        created_at: tenant.created_at,
        queued: load.map_or(0, |l| l.queued),
        running: load.map_or(0, |l| l.running),
    }
}

/// Create a tenant and its bearer token (admin only). The token is in this answer only: the
/// broker keeps its SHA-256.
#[utoipa::path(
    post, path = "/admin/tenants", tag = "admin",
    request_body = CreateTenantRequest,
    responses(
        (status = 201, description = "Created; `token` is shown this once", body = CreatedTenant),
        (status = 400, description = "Malformed JSON", body = ApiError),
        (status = 409, description = "A tenant of this name exists", body = ApiError),
        (status = 422, description = "A field is out of range", body = ApiError),
    )
)]
pub async fn create_tenant(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(request): ApiJson<CreateTenantRequest>,
) -> Result<(StatusCode, Json<CreatedTenant>), HttpError> {
    caller.require_admin()?;
    request.validate()?;
    let token = new_token()?;
    let tenant = state
        .broker
        .create_tenant(&request, &token_sha256(&token))
        .await?;
    tracing::info!(
        tenant = %tenant.name,
        weight = tenant.weight,
        max_queued = tenant.max_queued,
        share_cache = tenant.share_cache,
        "tenant created"
    );
    Ok((
        StatusCode::CREATED,
        Json(CreatedTenant {
            tenant: info(&tenant, None),
            token,
        }),
    ))
}

/// Every tenant with its settings and open tasks (admin only).
#[utoipa::path(
    get, path = "/admin/tenants", tag = "admin",
    responses(
        (status = 200, description = "Tenants by name", body = TenantList),
        (status = 503, description = "Broker unavailable", body = ApiError),
    )
)]
pub async fn list_tenants(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<TenantList>, HttpError> {
    caller.require_admin()?;
    let tenants = state.broker.list_tenants().await?;
    let loads = state.broker.tenant_loads().await?;
    let tenants: Vec<TenantInfo> = tenants
        .iter()
        .map(|t| info(t, loads.iter().find(|l| l.id == t.id)))
        .collect();
    Ok(Json(TenantList {
        total: tenants.len(),
        tenants,
    }))
}

/// Delete a tenant (admin only): its token stops working at once and every task it has
/// queued or running is cancelled (error `cancelled: tenant <name> was deleted`; a running
/// task's child is killed). Its finished tasks stay readable by the admin until they expire.
#[utoipa::path(
    delete, path = "/admin/tenants/{name}", tag = "admin",
    params(("name" = String, Path, description = "Tenant name")),
    responses(
        (status = 200, description = "Deleted", body = DeletedTenant),
        (status = 404, description = "No such tenant", body = ApiError),
        (status = 503, description = "Broker unavailable", body = ApiError),
    )
)]
pub async fn delete_tenant(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<DeletedTenant>, HttpError> {
    caller.require_admin()?;
    state
        .broker
        .delete_tenant(&name)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("tenant {name}")).into())
}

/// Drain a worker (admin only): at its next heartbeat it stops claiming, gives back the tasks
/// it claimed ahead, finishes the evaluations on its device (up to its drain bound), stores
/// their verdicts, deregisters and exits, for its supervisor to start a fresh one. Its
/// registry entry shows `draining` meanwhile.
#[utoipa::path(
    post, path = "/admin/workers/{id}/drain", tag = "admin",
    params(("id" = String, Path, description = "Worker id, as `GET /workers/status` lists it")),
    responses(
        (status = 202, description = "Asked; the worker drains from its next heartbeat", body = DrainRequested),
        (status = 404, description = "No such worker in the registry", body = ApiError),
        (status = 503, description = "Broker unavailable", body = ApiError),
    )
)]
pub async fn drain_worker(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<DrainRequested>), HttpError> {
    caller.require_admin()?;
    let worker_id = WorkerId(id);
    if !state.broker.drain_worker(&worker_id).await? {
        return Err(ApiError::not_found(format!("worker {worker_id}")).into());
    }
    tracing::info!(worker_id = %worker_id, "drain asked of a worker");
    Ok((StatusCode::ACCEPTED, Json(DrainRequested { worker_id })))
}

/// The per-tenant counts `caller` may see: every tenant with open tasks for the admin, its
/// own (zeros included) for a tenant.
pub async fn visible_counts(
    state: &AppState,
    caller: &Caller,
) -> Result<Vec<TenantCounts>, HttpError> {
    let loads = state.broker.tenant_loads().await?;
    let counts = |l: &TenantLoad| TenantCounts {
        // A deleted tenant whose last tasks are being cancelled has no name any more.
        tenant: l.name.clone().unwrap_or_else(|| l.id.to_string()),
        queued: l.queued,
        running: l.running,
    };
    if caller.admin {
        return Ok(loads.iter().map(counts).collect());
    }
    Ok(vec![
        loads
            .iter()
            .find(|l| l.id == caller.tenant.id)
            .map(counts)
            .unwrap_or_else(|| TenantCounts {
                tenant: caller.tenant.name.clone(),
                queued: 0,
                running: 0,
            }),
    ])
}

/// Every registered worker as `caller` may see it: a tenant sees no worker's `current_task`
/// (it may be another tenant's).
pub async fn visible_workers(
    state: &AppState,
    caller: &Caller,
) -> Result<Vec<WorkerInfo>, HttpError> {
    let mut workers = state.broker.list_workers().await?;
    if !caller.admin {
        for w in &mut workers {
            w.current_task = None;
        }
    }
    Ok(workers)
}

/// Tenant ids to names (admin only: names are not shown to tenants), the built-in tenant's
/// included; a deleted tenant has none.
pub async fn tenant_names(state: &AppState) -> Result<HashMap<TenantId, String>, HttpError> {
    let mut names: HashMap<TenantId, String> = state
        .broker
        .list_tenants()
        .await?
        .into_iter()
        .map(|t| (t.id, t.name))
        .collect();
    names.insert(TenantId::builtin(), BUILTIN_TENANT_NAME.to_owned());
    Ok(names)
}
