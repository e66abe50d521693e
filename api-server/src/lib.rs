//! The HTTP API: routes, request validation, the OpenAPI document and Swagger UI, Prometheus
//! metrics, the health check, the problem registry and the rollout endpoints that turn
//! model completions into rewards, authentication of tenants (`auth`) and their admin
//! endpoints (`admin`), the status page (`status_page`), and where a submission's tasks may
//! run (`placement`: device classes), OpenEnv's reset/step/state over episodes (`openenv`), and KernelGYM's evaluation API
//! (`kernelgym`). Stateless: everything another replica would need lives in the broker,
//! so any number of replicas can serve the same queue.

pub mod access;
pub mod admin;
pub mod auth;
pub mod body_budget;
pub mod deliveries;
pub mod episodes;
pub mod error;
pub mod extract;
pub mod heap;
pub mod kernelgym;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod openenv;
pub mod placement;
pub mod problem_sets;
pub mod problems;
pub mod prompts;
pub mod report;
pub mod rollouts;
pub mod router;
pub mod routes;
pub mod serving;
pub mod state;
pub mod status_page;
pub mod submission;

pub use auth::{Auth, AuthMode};
pub use limits::ServeLimits;
pub use router::router;
pub use state::AppState;

/// Serves `router` on `listener` until `shutdown` resolves, under the state's
/// [`limits::ServeLimits`] (`serving`: timeouts and the connection cap). The address it serves
/// on names the replica in its metrics ([`metrics::replica_id`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    state.metrics.name_replica(metrics::replica_id(
        listener.local_addr()?,
        std::env::var("HOSTNAME").ok(),
    ));
    let limits = (*state.limits).clone();
    let metrics = state.metrics.clone();
    let stop = tokio_util::sync::CancellationToken::new();
    let on_shutdown = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        on_shutdown.cancel();
    });
    serving::serve_connections(listener, router(state), limits, metrics, stop).await
}
