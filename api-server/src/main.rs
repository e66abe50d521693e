//! `crucible-api`: one stateless API replica (plus a lease reaper) against a shared Redis.

use anyhow::Context;
use clap::Parser;
use crucible_api_server::{AppState, Auth, serve};
use crucible_runtime::metrics::{Component, build_info};
use crucible_runtime::{LogTo, Shutdown, shutdown_signal};
use crucible_shared::BrokerConfig;
use crucible_task_manager::reaper::DEFAULT_REAPER_INTERVAL_MS;
use crucible_task_manager::{Broker, ReaperSettings, RedisBroker, RedisTarget, run_reaper};
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "crucible-api", version, about = "Crucible HTTP API replica")]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "CRUCIBLE_BIND", default_value = "127.0.0.1:10907")]
    bind: String,
    /// The shared broker: `redis[s]://[user:password@]host:port` (TLS files:
    /// CRUCIBLE_REDIS_CA_FILE, CRUCIBLE_REDIS_CLIENT_CERT, CRUCIBLE_REDIS_CLIENT_KEY).
    /// Its value is never printed, not even by --help.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    redis_url: String,
    /// Milliseconds between reaper passes (0 disables this replica's reaper). Every process
    /// running the reaper (API replicas, workers) takes part in one election: one reaps.
    #[arg(long, env = "CRUCIBLE_REAPER_INTERVAL_MS", default_value_t = DEFAULT_REAPER_INTERVAL_MS)]
    reaper_interval_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    crucible_runtime::init_tracing(LogTo::Stdout)?;
    crucible_runtime::shield_from_oom_killer();
    let args = Args::parse();
    let cfg = BrokerConfig::from_env()?;
    let listener = tokio::net::TcpListener::bind(&args.bind)
        .await
        .with_context(|| format!("binding {}", args.bind))?;
    let addr = listener.local_addr()?;
    // Decided from the address actually bound; a public one without an admin token is refused
    // before anything else starts.
    let auth = Auth::from_env(addr)?;
    let target = RedisTarget::from_env(args.redis_url)?;
    let broker: Arc<dyn Broker> = Arc::new(RedisBroker::open(&target, cfg).await?);
    let shutdown = Shutdown::new();
    let reaper = (args.reaper_interval_ms > 0).then(|| {
        tokio::spawn(run_reaper(
            broker.clone(),
            ReaperSettings::new("api", Duration::from_millis(args.reaper_interval_ms))
                .finishing_tenant_deletions(),
            shutdown.token(),
        ))
    });
    crucible_api_server::auth::log_mode(&auth, addr);
    let problems = crucible_api_server::problems::load_from_env().context("problem registry")?;
    let state = AppState::new(broker, auth)
        .with_problems(problems)
        .with_prompts(crucible_api_server::prompts::config::load_from_env().context("prompts")?)
        .with_limits(crucible_api_server::ServeLimits::from_env()?);
    state
        .metrics
        .registry()
        .register(Box::new(build_info(Component::Api)))?;
    let server = tokio::spawn(serve(listener, state, shutdown.token().cancelled_owned()));
    shutdown_signal().await?;
    tracing::info!("shutdown requested");
    shutdown.cancel();
    server.await??;
    if let Some(r) = reaper {
        r.await?;
    }
    Ok(())
}
