//! `crucible-worker`: one worker process for one device, against a shared Redis.

use anyhow::Context;
use clap::{Parser, Subcommand};
use crucible_gpu_worker::{DeviceSlot, Worker, WorkerConfig, probe};
use crucible_runtime::{LogTo, Shutdown, shutdown_signal};
use crucible_shared::BrokerConfig;
use crucible_task_manager::{Broker, RedisBroker, RedisTarget};
use std::sync::Arc;

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
    crucible_runtime::init_tracing(LogTo::Stdout);
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
    let cfg = WorkerConfig::from_env(device).map_err(anyhow::Error::msg)?;
    let worker = Arc::new(Worker::new(broker, cfg));
    let shutdown = Shutdown::new();
    let mut run = tokio::spawn(worker.run(shutdown.token()));
    tokio::select! {
        signal = shutdown_signal() => {
            signal?;
            tracing::info!("shutdown requested");
        }
        // The worker stopped by itself: it refused to serve.
        ended = &mut run => return Ok(ended??),
    }
    shutdown.cancel();
    run.await??;
    Ok(())
}
