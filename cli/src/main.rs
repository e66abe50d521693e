//! `crucible`: run the whole service on one machine (`crucible up`), evaluate one pair locally
//! (`crucible eval`), talk to a running service (`crucible submit`, `crucible status`,
//! `crucible cancel`, `crucible rollouts`, `crucible episodes`, `crucible report`,
//! `crucible tenants`) with a bearer token (`--token` / `CRUCIBLE_TOKEN`) when it requires one,
//! build the RA-ICL corpus index (`crucible corpus`), or check a node (`crucible doctor`).

mod cancel_cmd;
mod corpus_cmd;
mod doctor;
mod episodes_cmd;
mod report_cmd;
mod rollouts_cmd;
mod tenants_cmd;
#[cfg(test)]
mod tests;
mod timing_arg;
mod workers_cmd;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use crucible_api_server::Auth;
use crucible_client::Client;
use crucible_gpu_worker::task::verdict::Classified;
use crucible_gpu_worker::{
    DeviceSlot, Worker, WorkerConfig, WorkerMetrics, discover_devices, evaluate_local, probe,
};
use crucible_runtime::metrics::{Component, build_info};
use crucible_runtime::{LogTo, Shutdown, shutdown_signal};
use crucible_shared::bounds::{CORRECT_TRIALS, PERF_TRIALS, TIMEOUT_S};
use crucible_shared::{Backend, BrokerConfig, DeviceClass, EvaluateRequest, TaskId, TaskSpec};
use crucible_task_manager::reaper::DEFAULT_REAPER_INTERVAL_MS;
use crucible_task_manager::{
    Broker, MemoryBroker, ReaperSettings, RedisBroker, RedisTarget, run_reaper,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use timing_arg::TimingArgs;

#[derive(Parser)]
#[command(
    name = "crucible",
    version,
    about = "Crucible: GPU kernel evaluation for RL trainers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API, the lease reaper and one worker per visible GPU (or one CPU worker).
    /// SIGTERM or Ctrl-C drains it: the workers finish the evaluations they run (up to
    /// CRUCIBLE_DRAIN_TIMEOUT_S) while the API keeps serving, and the API serves on until
    /// clients have read the verdicts the drain stored (up to CRUCIBLE_DRAIN_READ_S), then it
    /// exits 0; a second signal stops at once.
    Up(UpArgs),
    /// Evaluate one candidate against one reference on this machine, without a server.
    Eval {
        #[command(flatten)]
        pair: PairArgs,
        /// Use this GPU (default: GPU 0 if one is visible, else the CPU).
        #[arg(long)]
        gpu: Option<u32>,
        /// Use the CPU (Triton through its interpreter) even if a GPU is visible.
        #[arg(long)]
        cpu: bool,
        /// Correctness trials, each on fresh seeded inputs.
        #[arg(long, default_value_t = CORRECT_TRIALS.default)]
        trials: u32,
        /// Timed calls of the reference and of the candidate.
        #[arg(long, default_value_t = PERF_TRIALS.default)]
        perf_trials: u32,
        /// Seconds the evaluation may take before its verdict is `TIMEOUT`.
        #[arg(long, default_value_t = TIMEOUT_S.default)]
        timeout_s: u32,
        #[command(flatten)]
        timing: TimingArgs,
    },
    /// Submit one pair to a running service and wait for the verdict (the task id is printed
    /// on stderr, the task's JSON on stdout).
    Submit {
        #[command(flatten)]
        remote: Remote,
        #[command(flatten)]
        pair: PairArgs,
        /// Run only on a worker of this device class (`h100`, `cpu`, ...; `crucible status`
        /// lists the workers' classes). Default: any worker.
        #[arg(long)]
        device_class: Option<DeviceClass>,
        /// Give up waiting for the verdict after this many seconds (the task goes on).
        #[arg(long, default_value_t = 600)]
        wait_s: u64,
    },
    /// Score model completions on a running service.
    Rollouts {
        #[command(subcommand)]
        command: rollouts_cmd::RolloutsCommand,
    },
    /// Cancel a task (`t_...`) or every open task of a batch (`b_...`) on a running service:
    /// queued tasks never run, running ones have their children killed. A task that already
    /// finished is said so on stderr and exits 0; an unknown id fails (`NOT_FOUND`).
    Cancel {
        /// A task id (`t_...`) or a batch id (`b_...`, from `POST /evaluate/batch` or
        /// `crucible rollouts submit`).
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Queue and workers of a running service, as one JSON document: `{"queue": ...,
    /// "workers": ...}` (the answers of `GET /queue/status` and `GET /workers/status`).
    Status {
        #[command(flatten)]
        remote: Remote,
    },
    /// Create, list and delete tenants (with the admin token).
    Tenants {
        #[command(subcommand)]
        command: tenants_cmd::TenantsCommand,
    },
    /// Drain a worker of a running service (with the admin token).
    Workers {
        #[command(subcommand)]
        command: workers_cmd::WorkersCommand,
    },
    /// Check that this node can serve its role (Python, GPU, compilers, broker, disks, API):
    /// one line per check; exits 1 when a required one fails.
    Doctor(doctor::DoctorArgs),
    /// Check the CUDA device in this process (used by workers).
    #[command(hide = true)]
    ProbeGpu,
    /// A batch's report: correct rate, fast_p, speedups, hacks and decoys per level; prints a
    /// table and writes the JSON with `--json`.
    Report(report_cmd::ReportArgs),
    /// Print the API's OpenAPI document (what a server serves at `/openapi.json`), without a
    /// server: the Python client's wire types are generated from it.
    Openapi,
    /// Multi-turn episodes on a running service: start, post a turn, show.
    Episodes {
        #[command(subcommand)]
        command: episodes_cmd::EpisodesCommand,
    },
    /// Build and search the RA-ICL kernel corpus index (`CRUCIBLE_CORPUS`).
    Corpus {
        #[command(subcommand)]
        command: corpus_cmd::CorpusCommand,
    },
}

/// `crucible up`'s options.
#[derive(clap::Args)]
struct UpArgs {
    /// Where the API listens. On a loopback address it needs no token (CRUCIBLE_AUTH
    /// overrides); elsewhere it requires CRUCIBLE_ADMIN_TOKEN.
    #[arg(long, env = "CRUCIBLE_BIND", default_value = "127.0.0.1:10907")]
    bind: String,
    /// Shared broker, `redis[s]://[user:password@]host:port` (TLS files:
    /// CRUCIBLE_REDIS_CA_FILE, CRUCIBLE_REDIS_CLIENT_CERT, CRUCIBLE_REDIS_CLIENT_KEY); without
    /// it the embedded in-process broker is used. Its value is never printed.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    redis_url: Option<String>,
    /// The workers' own URL (another ACL user: the `crucible-worker` role of
    /// deploy/redis.conf), when REDIS_URL is the API's. Default: REDIS_URL.
    #[arg(
        long,
        env = "CRUCIBLE_WORKER_REDIS_URL",
        hide_env_values = true,
        requires = "redis_url"
    )]
    worker_redis_url: Option<String>,
    /// Comma-separated GPU indices to use (default: all visible).
    #[arg(long, env = "CRUCIBLE_GPUS", value_delimiter = ',')]
    gpus: Option<Vec<u32>>,
    /// Use one CPU worker even if GPUs are present.
    #[arg(long)]
    cpu: bool,
    /// Add N more CPU workers beside the devices found (for development).
    #[arg(long, default_value_t = 0)]
    extra_cpu_workers: u32,
    /// After a drain, how long the API keeps serving for clients that have not yet read
    /// the verdicts the drain stored (with the in-process broker they end with the
    /// process); it stops as soon as all were read.
    #[arg(long, env = "CRUCIBLE_DRAIN_READ_S", default_value_t = 30)]
    drain_read_s: u64,
}

/// Where a running service is and how to authenticate to it.
#[derive(clap::Args)]
pub struct Remote {
    /// The service's address.
    #[arg(long, env = "CRUCIBLE_URL", default_value = "http://127.0.0.1:10907")]
    url: String,
    /// Bearer token: a tenant's, or the admin token for `crucible tenants`. Not needed by a
    /// server with authentication off (`crucible up` on a loopback address). Prefer the
    /// environment variable: an argument shows in the process list.
    #[arg(long, env = "CRUCIBLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl Remote {
    /// A client of that service, carrying the token when one is given.
    pub fn client(self) -> Client {
        Client::new(self.url).with_token(self.token)
    }
}

/// `--backend` wherever a command takes it.
const BACKEND_HELP: &str = "What the kernel is written in.";

#[derive(Clone, Copy, clap::ValueEnum)]
enum BackendArg {
    /// Triton (`@triton.jit` kernels).
    Triton,
    /// CUDA C++ built with `torch.utils.cpp_extension.load_inline`.
    Cuda,
}

impl From<BackendArg> for Backend {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Triton => Backend::Triton,
            BackendArg::Cuda => Backend::Cuda,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::ProbeGpu = cli.command {
        println!("{}", serde_json::to_string(&probe::run_probe(0))?);
        return Ok(());
    }
    // Logs on stderr: stdout carries the commands' JSON.
    crucible_runtime::init_tracing(LogTo::Stderr)?;
    match cli.command {
        Command::Up(args) => up(args).await,
        Command::Eval {
            pair,
            gpu,
            cpu,
            trials,
            perf_trials,
            timeout_s,
            timing,
        } => {
            let mut request = pair.request()?;
            request.num_correct_trials = trials;
            request.num_perf_trials = perf_trials;
            request.timeout_s = timeout_s;
            request.timing = timing.request();
            timing.apply_options(&mut request);
            request.validate()?;
            let device = match (gpu, cpu) {
                (_, true) => DeviceSlot::cpu(),
                (Some(i), false) => DeviceSlot::gpu(i),
                (None, false) => discover_devices(None).remove(0),
            };
            let cfg = WorkerConfig::from_env(device).map_err(anyhow::Error::msg)?;
            let spec = TaskSpec::new(request, 42);
            match evaluate_local(&cfg, &spec).await? {
                Classified::Verdict(result) => {
                    println!("{}", serde_json::to_string_pretty(&result)?);
                    Ok(())
                }
                Classified::ServiceFault(reason) => bail!("the evaluation could not run: {reason}"),
                Classified::Cancelled => bail!("cancelled"),
            }
        }
        Command::Submit {
            remote,
            pair,
            device_class,
            wait_s,
        } => {
            let client = remote.client();
            let mut request = pair.request()?;
            request.device_class = device_class;
            let submitted = client.evaluate(&request).await?;
            eprintln!("submitted {}", submitted.task_id);
            let view = client
                .wait(&submitted.task_id, Duration::from_secs(wait_s))
                .await?;
            println!("{}", serde_json::to_string_pretty(&view)?);
            Ok(())
        }
        Command::Rollouts { command } => rollouts_cmd::run(command).await,
        Command::Tenants { command } => tenants_cmd::run(command).await,
        Command::Corpus { command } => corpus_cmd::run(command),
        Command::Workers { command } => workers_cmd::run(command).await,
        Command::Cancel { id, remote } => cancel_cmd::run(&id, remote).await,
        Command::Report(args) => report_cmd::run(args).await,
        Command::Openapi => {
            let doc = crucible_api_server::openapi::doc();
            println!("{}", serde_json::to_string_pretty(&doc)?);
            Ok(())
        }
        Command::Doctor(args) => {
            if !doctor::run(args).await? {
                use std::io::Write;
                std::io::stdout().flush()?;
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Status { remote } => {
            let client = remote.client();
            // One document, so that `crucible status | jq` (or `python3 -m json.tool`) reads it.
            let status = serde_json::json!({
                "queue": serde_json::to_value(client.queue().await?)?,
                "workers": client.workers().await?,
            });
            println!("{}", serde_json::to_string_pretty(&status)?);
            Ok(())
        }
        Command::ProbeGpu => unreachable!("handled before logging starts"),
        Command::Episodes { command } => episodes_cmd::run(command).await,
    }
}

/// The pair `crucible eval` and `crucible submit` evaluate.
#[derive(clap::Args)]
struct PairArgs {
    /// The reference: a KernelBench problem file (`Model`, `get_inputs`, `get_init_inputs`).
    #[arg(long)]
    reference: PathBuf,
    /// The candidate: a file defining `ModelNew`, to be checked and timed against `Model`.
    #[arg(long)]
    kernel: PathBuf,
    #[arg(long, value_enum, default_value = "triton", help = BACKEND_HELP)]
    backend: BackendArg,
}

impl PairArgs {
    /// A request for the pair, with every other field at its default.
    fn request(&self) -> anyhow::Result<EvaluateRequest> {
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
        };
        let mut request = EvaluateRequest::new(read(&self.reference)?, read(&self.kernel)?);
        request.backend = self.backend.into();
        Ok(request)
    }
}

/// A broker on the shared Redis at `url`, with the TLS files of the environment.
async fn redis_broker(url: String, cfg: BrokerConfig) -> anyhow::Result<Arc<dyn Broker>> {
    let broker = RedisBroker::open(&RedisTarget::from_env(url)?, cfg).await?;
    Ok(Arc::new(broker))
}

async fn up(args: UpArgs) -> anyhow::Result<()> {
    crucible_runtime::shield_from_oom_killer();
    let UpArgs {
        bind,
        redis_url,
        worker_redis_url,
        gpus,
        cpu,
        extra_cpu_workers,
        drain_read_s,
    } = args;
    let cfg = BrokerConfig::from_env()?;
    let problems = crucible_api_server::problems::load_from_env().context("problem registry")?;
    let prompts = crucible_api_server::prompts::config::load_from_env().context("prompts")?;
    // Bound first: authentication is decided from the address actually bound, and a public one
    // without an admin token is refused before any worker starts.
    let listener = tokio::net::TcpListener::bind(&bind)
        .await
        .with_context(|| format!("binding {bind}"))?;
    let addr = listener.local_addr()?;
    let auth = Auth::from_env(addr)?;
    let broker: Arc<dyn Broker> = match redis_url {
        Some(url) => redis_broker(url, cfg.clone()).await?,
        None => Arc::new(MemoryBroker::new(cfg.clone())),
    };
    let worker_broker = match worker_redis_url {
        Some(url) => redis_broker(url, cfg).await?,
        None => broker.clone(),
    };
    let mut devices = if cpu {
        vec![DeviceSlot::cpu()]
    } else {
        discover_devices(gpus.as_deref())
    };
    devices.extend((0..extra_cpu_workers).map(|_| DeviceSlot::cpu()));

    // One registry for the whole process: the API's `/metrics` serves its workers' too, and
    // no other port is opened.
    let state = crucible_api_server::AppState::new(broker.clone(), auth)
        .with_problems(problems)
        .with_prompts(prompts)
        .with_limits(crucible_api_server::ServeLimits::from_env()?);
    let registry = state.metrics.registry();
    let deliveries = state.deliveries.clone();
    registry.register(Box::new(build_info(Component::Up)))?;
    let worker_metrics = Arc::new(WorkerMetrics::register(registry)?);
    let shutdown = Shutdown::new();
    // The API's role: the reaper also finishes tenant deletions; its workers run none of
    // their own (one process, one reaper).
    let reaper = tokio::spawn(run_reaper(
        broker.clone(),
        ReaperSettings::new("up", Duration::from_millis(DEFAULT_REAPER_INTERVAL_MS))
            .finishing_tenant_deletions(),
        shutdown.token(),
    ));
    // A worker that refuses to serve (its sandbox is not in place) stops `up` with its reason.
    let (refused_tx, mut refused) = tokio::sync::mpsc::channel::<String>(1);
    let mut workers = Vec::with_capacity(devices.len());
    let mut running = tokio::task::JoinSet::new();
    // The GPU workers of this process cut the device cores among them (crucible_gpu_worker::process::cores).
    let gpu_workers = devices.iter().filter(|d| d.index().is_some()).count();
    for (gpu_worker, device) in devices.into_iter().enumerate() {
        let wcfg = WorkerConfig::from_env(device)
            .and_then(|c| c.with_cores(gpu_worker, gpu_workers, |k| std::env::var(k).ok()))
            .map_err(anyhow::Error::msg)?;
        let worker = Arc::new(Worker::new(
            worker_broker.clone(),
            wcfg,
            worker_metrics.clone(),
        ));
        workers.push(worker.clone());
        let (stop, refused_tx) = (shutdown.token(), refused_tx.clone());
        running.spawn(async move {
            if let Err(e) = worker.run(stop).await {
                let _ = refused_tx.send(e.to_string()).await;
            }
        });
    }
    crucible_api_server::auth::log_mode(&state.auth, addr);
    tracing::info!(
        broker = broker.kind(),
        workers = workers.len(),
        "crucible up"
    );
    let server = tokio::spawn(crucible_api_server::serve(
        listener,
        state,
        shutdown.token().cancelled_owned(),
    ));
    let refusal = tokio::select! {
        signal = shutdown_signal() => {
            signal?;
            None
        }
        why = refused.recv() => why,
    };
    if refusal.is_none() {
        // As `crucible-worker` does: the workers finish what runs on their devices (up to
        // CRUCIBLE_DRAIN_TIMEOUT_S) and store the verdicts, while the API keeps serving so
        // that clients waiting on those tasks get them; a second signal stops at once.
        tracing::info!(
            workers = workers.len(),
            "stop signal: draining the workers, the api serves until they are done"
        );
        deliveries.start_recording();
        for worker in &workers {
            worker.drain("a stop signal (a second one stops at once)");
        }
        tokio::select! {
            signal = shutdown_signal() => {
                signal?;
                tracing::info!("second stop signal, giving back what is still running");
            }
            () = async {
                while running.join_next().await.is_some() {}
                // The drain is over: no new verdict comes. The API answers until the
                // verdicts it stored were read, since they end with this process.
                let stored: Vec<TaskId> = workers
                    .iter()
                    .flat_map(|w| w.verdicts_stored_while_draining())
                    .collect();
                let until = tokio::time::Instant::now() + Duration::from_secs(drain_read_s);
                tracing::info!(verdicts = stored.len(), "drained, serving until the verdicts are read");
                let unread = deliveries.wait_read(&stored, until).await;
                if !unread.is_empty() {
                    tracing::warn!(unread = unread.len(), bound_s = drain_read_s, "stopping with verdicts no client read");
                }
            } => {}
        }
    }
    tracing::info!("shutdown requested");
    shutdown.cancel();
    server.await??;
    reaper.await?;
    while let Some(worker) = running.join_next().await {
        worker?;
    }
    match refusal {
        Some(why) => Err(anyhow::anyhow!("a worker {why}")),
        None => Ok(()),
    }
}
