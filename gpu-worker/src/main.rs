//! `crucible-worker`: one worker process for one device, against a shared Redis.
//!
//! SIGTERM (or SIGINT) drains it: it stops claiming, gives back what it claimed ahead,
//! finishes the evaluations on its device (up to `CRUCIBLE_DRAIN_TIMEOUT_S`), deregisters and
//! exits 0; a second signal gives back what is still running and exits at once. An operator's
//! drain (`POST /admin/workers/{id}/drain`) ends it the same way, so that its supervisor
//! (systemd) starts a fresh one.

use anyhow::Context;
use clap::{Parser, Subcommand};
use crucible_gpu_worker::config::{MetricsBind, metrics_addr};
use crucible_gpu_worker::{DeviceSlot, Worker, WorkerConfig, WorkerMetrics, probe};
use crucible_runtime::metrics::{Component, build_info, serve_metrics};
use crucible_runtime::{LogTo, Shutdown, shutdown_signal};
use crucible_shared::BrokerConfig;
use crucible_task_manager::reaper::DEFAULT_REAPER_INTERVAL_MS;
use crucible_task_manager::{Broker, ReaperSettings, RedisBroker, RedisTarget, run_reaper};
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "crucible-worker",
    version,
    about = "Crucible evaluation worker (one per device)"
)]
struct Args {
    /// GPU index on this node (as NVML numbers it). Without it the worker uses the CPU.
    #[arg(long, conflicts_with = "cpu")]
    gpu: Option<u32>,
    /// Run a CPU worker (PyTorch on CPU, Triton through its interpreter).
    #[arg(long)]
    cpu: bool,
    /// The shared broker: `redis[s]://[user:password@]host:port` (TLS files:
    /// CRUCIBLE_REDIS_CA_FILE, CRUCIBLE_REDIS_CLIENT_CERT, CRUCIBLE_REDIS_CLIENT_KEY).
    /// Its value is never printed, not even by --help.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    redis_url: Option<String>,
    /// Where to serve this worker's Prometheus metrics (`GET /metrics`): `host:port`, or `off`.
    /// Default: 127.0.0.1, port 10910 + the GPU's index (a CPU worker: 10909, or a free port
    /// when another CPU worker of the host has it; the worker logs the one it serves on).
    #[arg(long, env = "CRUCIBLE_WORKER_METRICS_ADDR")]
    metrics_addr: Option<String>,
    /// Milliseconds between reaper passes (0: this worker runs no reaper). Workers run it by
    /// default, so that a cluster with no API replica up still requeues a dead worker's task;
    /// of all the processes running it (workers, API replicas) a lease in Redis elects one.
    #[arg(long, env = "CRUCIBLE_REAPER_INTERVAL_MS", default_value_t = DEFAULT_REAPER_INTERVAL_MS)]
    reaper_interval_ms: u64,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Check the CUDA device in this process and print a JSON report (used by workers).
    ProbeGpu,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::ProbeGpu) = args.command {
        println!("{}", serde_json::to_string(&probe::run_probe(0))?);
        return Ok(());
    }
    crucible_runtime::init_tracing(LogTo::Stdout)?;
    crucible_runtime::shield_from_oom_killer();
    let redis_url = args.redis_url.context(
        "REDIS_URL (or --redis-url) is required: a standalone worker needs the shared broker",
    )?;
    let broker_cfg = BrokerConfig::from_env()?;
    let target = RedisTarget::from_env(redis_url)?;
    let broker: Arc<dyn Broker> = Arc::new(RedisBroker::open(&target, broker_cfg).await?);
    let device = match args.gpu {
        Some(index) => DeviceSlot::gpu(index),
        None => DeviceSlot::cpu(),
    };
    let metrics_at =
        metrics_addr(args.metrics_addr.as_deref(), &device).map_err(anyhow::Error::msg)?;
    let cfg = WorkerConfig::from_env(device)
        .and_then(|cfg| match args.gpu {
            // One worker per GPU of the node (crucible-worker@N): each takes slice N of the
            // device cores, so that no two time on one core (crucible_gpu_worker::process::cores).
            Some(index) => {
                let node_gpus = crucible_gpu_worker::discover_devices(None)
                    .iter()
                    .filter(|d| d.index().is_some())
                    .count()
                    .max(index as usize + 1);
                cfg.with_cores(index as usize, node_gpus, |k| std::env::var(k).ok())
            }
            None => Ok(cfg),
        })
        .map_err(anyhow::Error::msg)?;
    let registry = prometheus::Registry::new();
    registry.register(Box::new(build_info(Component::Worker)))?;
    let metrics = Arc::new(WorkerMetrics::register(&registry)?);
    let shutdown = Shutdown::new();
    // Bound before the worker starts: a port taken (by another worker on the same device?)
    // stops it here, with the address, rather than leaving it unseen; only a CPU worker's
    // default moves to a free port (several CPU workers may share a host).
    let metrics_server = match metrics_at {
        Some(MetricsBind { addr, if_taken }) => {
            let listener = match (tokio::net::TcpListener::bind(addr).await, if_taken) {
                (Err(e), Some(free)) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    tracing::info!(taken = %addr, "default metrics address taken (another cpu worker?), taking a free port");
                    tokio::net::TcpListener::bind(free).await
                }
                (bound, _) => bound,
            }
            .with_context(|| {
                format!("binding the metrics address {addr} (--metrics-addr, CRUCIBLE_WORKER_METRICS_ADDR; `off` serves none)")
            })?;
            tracing::info!(addr = %listener.local_addr()?, "serving metrics");
            Some(tokio::spawn(serve_metrics(
                listener,
                registry,
                shutdown.token(),
            )))
        }
        None => None,
    };
    // The expired-lease part of reaping only: finishing tenant deletions needs the tenant
    // registry, which is the API's alone.
    let reaper = (args.reaper_interval_ms > 0).then(|| {
        tokio::spawn(run_reaper(
            broker.clone(),
            ReaperSettings::new("worker", Duration::from_millis(args.reaper_interval_ms)),
            shutdown.token(),
        ))
    });
    let worker = Arc::new(Worker::new(broker, cfg, metrics));
    let mut run = tokio::spawn(worker.clone().run(shutdown.token()));
    tokio::select! {
        signal = shutdown_signal() => {
            signal?;
            worker.drain("a stop signal (a second one stops at once)");
            tokio::select! {
                signal = shutdown_signal() => {
                    signal?;
                    tracing::info!("second stop signal, giving back what is still running");
                    shutdown.cancel();
                    run.await??;
                }
                ended = &mut run => ended??,
            }
        }
        // The worker stopped by itself: it refused to serve, or an operator drained it.
        ended = &mut run => ended??,
    }
    shutdown.cancel();
    if let Some(server) = metrics_server {
        server.await??;
    }
    if let Some(reaper) = reaper {
        reaper.await?;
    }
    Ok(())
}
