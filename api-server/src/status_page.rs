//! The status page: `GET /` and `/status` (HTML rendered on the server, readable with
//! JavaScript off), `GET /status.json` (the same view as JSON, [`StatusPage`]) and the page's
//! two assets, `status.js` (refreshes the sections from `/status.json` every few seconds)
//! and `status.css`, compiled into the binary: no CDN, no build step.
//!
//! Who sees what. With authentication off (single-user mode) everyone is the admin and the page
//! shows everything. With it on, the HTML and its assets are served to anyone, but the page
//! holds data only for a request that carries a valid bearer token (`curl -H
//! 'Authorization: Bearer ...'`); a browser gets the empty page, whose script asks for a token,
//! keeps it in the tab's `sessionStorage` and sends it to `/status.json`, which, like every
//! endpoint, needs one. A tenant's token shows what `/workers/status` and `/queue/status`
//! show a tenant (no current tasks, its own queue counts) and only its own failures; tenant
//! names only the admin sees. Every value is HTML-escaped where it is rendered (`html.rs`;
//! the script sets text, never markup), and the pages carry a Content-Security-Policy that
//! allows only this server's own script, style and `fetch`.

mod html;

/// The page's data as JSON (not public: it needs a token when authentication is on).
pub const JSON_PATH: &str = "/status.json";

use crate::admin::{tenant_names, visible_counts, visible_workers};
use crate::auth::{AuthMode, Caller};
use crate::error::HttpError;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use crucible_shared::{Activity, CacheRate, StatusPage, StatusWorker, WorkerHealth};
use crucible_task_manager::KvNamespace;

/// Seconds between the script's refreshes (rendered into the page for it to read).
pub const REFRESH_S: u32 = 5;

/// Only this server's script, style and `fetch`; no inline script or style, no frames, no
/// form posts (the token form is handled by the script).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

const SCRIPT: &str = include_str!("status_page/status.js");
const STYLE: &str = include_str!("status_page/status.css");

/// Everything the page shows, as `caller` may see it.
pub async fn gather(state: &AppState, caller: &Caller) -> Result<StatusPage, HttpError> {
    let mut workers = visible_workers(state, caller).await?;
    workers.sort_by(|a, b| {
        (&a.node, a.device_index, &a.worker_id).cmp(&(&b.node, b.device_index, &b.worker_id))
    });
    let mut queue = state.broker.queue_status().await?;
    queue.tenants = Some(visible_counts(state, caller).await?);
    let report = state.broker.activity().await?;
    let names = if caller.admin {
        tenant_names(state).await?
    } else {
        Default::default()
    };
    let recent_failures = report
        .failures
        .into_iter()
        .filter(|f| caller.owns(Some(&f.tenant)))
        .map(|f| {
            let mut failure = f.failure;
            if caller.admin {
                failure.tenant = Some(names.get(&f.tenant).cloned().unwrap_or(f.tenant.0));
            }
            failure
        })
        .collect();
    let build = state.broker.kv_counts(KvNamespace::Build).await?;
    let caches = vec![
        CacheRate::new("result", queue.cache_hits_total, queue.cache_misses_total),
        CacheRate::new(
            "reference",
            queue.ref_cache_hits_total,
            queue.ref_cache_misses_total,
        ),
        CacheRate::new("build", build.hits, build.misses),
    ];
    Ok(StatusPage {
        generated_at: chrono::Utc::now(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        broker: state.broker.kind().to_owned(),
        admin: caller.admin,
        workers: workers
            .into_iter()
            .map(|info| StatusWorker {
                health: WorkerHealth::of(info.state),
                info,
            })
            .collect(),
        queue,
        activity: Activity {
            windows: report.windows,
            recent_failures,
        },
        caches,
    })
}

/// The status page as JSON: workers by node and device, queue depth by priority and tenant,
/// tasks finished over the last 5 and 60 minutes by status, verdict and error code, the latest
/// failures and the caches' hit rates. What `GET /` renders, and what its script refreshes
/// from. A tenant sees no worker's current task, its own queue counts and failures only, and
/// no tenant names.
#[utoipa::path(
    get, path = "/status.json", tag = "status",
    responses(
        (status = 200, description = "The status page's view", body = StatusPage),
        (status = 503, description = "Broker unavailable", body = crucible_shared::ApiError),
    )
)]
pub async fn status_json(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<StatusPage>, HttpError> {
    Ok(Json(gather(&state, &caller).await?))
}

/// The status page (also at `/`): plain HTML, readable without JavaScript; its script
/// refreshes it every few seconds. Served to anyone; with authentication on it holds data only
/// when the request carries a valid bearer token (the script sends the one it is given).
#[utoipa::path(
    get, path = "/status", tag = "status",
    responses(
        (status = 200, description = "The page", body = String, content_type = "text/html"),
        (status = 401, description = "The bearer token sent names no tenant (the page, without data)", body = String, content_type = "text/html"),
        (status = 503, description = "Broker unavailable (the page, without data)", body = String, content_type = "text/html"),
    )
)]
pub async fn page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let auth = state.auth.mode();
    let signed_out = auth == AuthMode::Required && !headers.contains_key(header::AUTHORIZATION);
    let (status, body) = if signed_out {
        let notice = "Authentication is on: enter the admin token (or a tenant's) to see the \
                      service's status.";
        (StatusCode::OK, html::render(None, auth, Some(notice)))
    } else {
        let shown = match state.auth.caller(state.broker.as_ref(), &headers).await {
            Ok(caller) => gather(&state, &caller).await,
            Err(e) => Err(e),
        };
        match shown {
            Ok(page) => (StatusCode::OK, html::render(Some(&page), auth, None)),
            Err(HttpError(e)) => (
                StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                html::render(None, auth, Some(&e.message)),
            ),
        }
    };
    asset(status, "text/html; charset=utf-8", body)
}

/// `status.js`.
pub async fn script() -> Response {
    asset(
        StatusCode::OK,
        "text/javascript; charset=utf-8",
        SCRIPT.to_owned(),
    )
}

/// `status.css`.
pub async fn stylesheet() -> Response {
    asset(StatusCode::OK, "text/css; charset=utf-8", STYLE.to_owned())
}

/// A page or asset with the headers every one of them carries: the policy, no sniffing, no
/// referrer, no framing, and no caching (the page holds live data; the assets are small and
/// change with the binary).
fn asset(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
