//! `crucible-bench`: the CPU-side queue benchmark (docs/BENCHMARKS.md, scripts/bench-cpu.sh).
//!
//! Starts its own `redis-server` on a free loopback port and measures
//! - submit throughput of the real `crucible-api` binary: concurrent `POST /evaluate`, and
//!   `POST /evaluate/batch` with 100 and 1000 tasks per request (no worker runs, so every task
//!   stays queued);
//! - Redis memory per queued task (`INFO memory` `used_memory` before and after);
//! - claim-to-start latency: claimers blocked in `Broker::claim` while one submitter submits
//!   at a steady rate, on the `RedisBroker` and, for comparison, on the `MemoryBroker`.
//!
//! Every loop is bounded in count and in time; every process it starts is killed at the end.

use anyhow::bail;
use clap::Parser;
use crucible_shared::{BrokerConfig, EvaluateRequest, TaskSpec, TenantId};
use crucible_task_manager::{Broker, MemoryBroker, RedisBroker};
use crucible_tests::{Api, Proc, Redis, api_command, eval_body, free_port, service_env};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod claims;
mod http;
mod measure;

use claims::claim_run;
use http::{bytes_body, http_phase};
use measure::{
    command_output, cpu_seconds, latency_cells, loadavg, ms_signed, pct, redis_pid, task_key_usage,
    used_memory,
};

#[derive(Parser, Debug)]
#[command(
    name = "crucible-bench",
    about = "CPU-side queue benchmark: API submit throughput, Redis memory per queued task, claim-to-start latency"
)]
struct Args {
    /// Tasks submitted through `POST /evaluate` (and again through each batch size).
    #[arg(long, default_value_t = 20_000)]
    tasks: usize,
    /// Concurrent HTTP clients for `POST /evaluate`.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Concurrent HTTP clients for `POST /evaluate/batch`.
    #[arg(long, default_value_t = 4)]
    batch_clients: usize,
    /// Requests sent (and not counted) before each measured API phase.
    #[arg(long, default_value_t = 500)]
    warmup: usize,
    /// Tasks per claim-to-start run.
    #[arg(long, default_value_t = 2_000)]
    claim_tasks: usize,
    /// Submissions per second in the claim-to-start runs.
    #[arg(long, default_value_t = 200)]
    claim_rate: u32,
    /// Tasks submitted directly to Redis for the memory figure of the larger code pair.
    #[arg(long, default_value_t = 5_000)]
    memory_tasks: usize,
    /// RUST_LOG of the API process (the deployment default is `info`: one line per task).
    #[arg(long, default_value = "info")]
    api_log: String,
    /// Give up on any one phase after this many seconds.
    #[arg(long, default_value_t = 300)]
    phase_timeout_s: u64,
}

/// One line of the final table.
struct Row {
    bench: String,
    n: usize,
    conc: String,
    value: String,
    p50: String,
    p95: String,
    p99: String,
    note: String,
}

fn broker_config(prefix: &str) -> BrokerConfig {
    BrokerConfig {
        key_prefix: prefix.to_owned(),
        queue_cap: 10_000_000,
        ..BrokerConfig::default()
    }
}

fn spec_from(body: &Value) -> anyhow::Result<TaskSpec> {
    let request: EvaluateRequest = serde_json::from_value(body.clone())?;
    Ok(TaskSpec::new(request, 42))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let phase_timeout = Duration::from_secs(args.phase_timeout_s);
    let logs = crucible_tests::log_dir("bench");

    let body = eval_body("softmax", "softmax__correct.py", 300);
    let ref_len = body["reference_code"].as_str().map_or(0, str::len);
    let ker_len = body["kernel_code"].as_str().map_or(0, str::len);
    let single = bytes_body::Body::new(serde_json::to_vec(&body)?);
    let spec = spec_from(&body)?;
    let spec_json_len = serde_json::to_string(&spec)?.len();

    let redis_version = command_output("redis-server", &["--version"]);
    println!("crucible-bench");
    println!(
        "  machine: nproc {}, {}",
        command_output("nproc", &[]),
        crucible_gpu_worker::device::cpu_model_name()
    );
    println!("  redis: {redis_version}");
    println!(
        "  date: {}",
        command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
    );
    println!("  loadavg at start: {}", loadavg());
    println!(
        "  codes: tests/problems/softmax.py {ref_len} B + tests/candidates/softmax__correct.py {ker_len} B; \
         /evaluate body {} B; stored spec JSON {spec_json_len} B",
        single.len()
    );
    println!("  logs: {}", logs.display());

    let clk_tck: f64 = command_output("getconf", &["CLK_TCK"])
        .parse()
        .unwrap_or(100.0);
    let redis = Redis::start(&logs).await;
    let client = redis::Client::open(redis.url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut rows: Vec<Row> = Vec::new();

    // ---- a + b: API submit throughput and memory per queued task ----
    let api_prefix = "bench-api";
    let port = free_port();
    let mut env = service_env(&redis.url, api_prefix);
    env.retain(|(k, _)| k != "RUST_LOG");
    env.push(("RUST_LOG".into(), args.api_log.clone()));
    env.push(("CRUCIBLE_QUEUE_CAP".into(), "10000000".into()));
    let mut api_cmd = api_command(port, &env);
    // One reaper pass a second, as deployed; there are no leases to reap here.
    api_cmd.env("CRUCIBLE_REAPER_INTERVAL_MS", "1000");
    let mut api_proc = Proc::spawn("api", api_cmd, &logs);
    let api_pid = api_proc.child.id();
    let redis_pid = redis_pid(&mut conn).await?;
    let api = Api::new(port);
    api.wait_ready().await;

    let phases: [(&str, usize); 3] = [
        ("/evaluate", 1),
        ("/evaluate/batch", 100),
        ("/evaluate/batch", 1000),
    ];
    for (path, per) in phases {
        let (req_body, clients) = if per == 1 {
            (single.clone(), args.clients)
        } else {
            let tasks: Vec<&Value> = std::iter::repeat_n(&body, per).collect();
            (
                bytes_body::Body::new(serde_json::to_vec(&json!({ "tasks": tasks }))?),
                args.batch_clients,
            )
        };
        let requests = args.tasks.div_ceil(per);
        let warmup = if per == 1 {
            args.warmup
        } else {
            (args.warmup / per).max(2)
        };
        let label = if per == 1 {
            "API POST /evaluate".to_owned()
        } else {
            format!("API POST /evaluate/batch ({per}/req)")
        };
        eprintln!("[bench] {label}: warm-up {warmup} requests");
        let w = http_phase(
            &api,
            path,
            req_body.clone(),
            warmup,
            per,
            clients,
            phase_timeout,
        )
        .await;
        if w.errors > 0 {
            bail!("warm-up of {label} failed: {:?}", w.first_error);
        }
        let mem_before = used_memory(&mut conn).await?;
        eprintln!(
            "[bench] {label}: {requests} requests x {per} tasks ({} B body), {clients} clients",
            req_body.len()
        );
        let cpu = |pid: u32| cpu_seconds(pid, clk_tck).unwrap_or(f64::NAN);
        let cpu_before = [cpu(api_pid), cpu(redis_pid), cpu(std::process::id())];
        let p = http_phase(&api, path, req_body, requests, per, clients, phase_timeout).await;
        let cpu_after = [cpu(api_pid), cpu(redis_pid), cpu(std::process::id())];
        let mem_after = used_memory(&mut conn).await?;
        let tps = p.tasks as f64 / p.elapsed.as_secs_f64();
        let [p50, p95, p99] = latency_cells(p.latencies);
        let wall = p.elapsed.as_secs_f64();
        let share = |i: usize| (cpu_after[i] - cpu_before[i]) / wall;
        let mut note = format!(
            "{wall:.1} s, {} req; CPU cores busy: api {:.2}, redis {:.2}, bench client {:.2}",
            p.requests,
            share(0),
            share(1),
            share(2)
        );
        if p.errors > 0 {
            note.push_str(&format!(
                ", {} errors (first: {})",
                p.errors,
                p.first_error.unwrap_or_default()
            ));
        }
        if p.requests < requests {
            note.push_str(&format!(
                ", STOPPED at the phase timeout ({requests} planned)"
            ));
        }
        rows.push(Row {
            bench: label.clone(),
            n: p.tasks,
            conc: clients.to_string(),
            value: format!("{tps:.0} tasks/s"),
            p50,
            p95,
            p99,
            note: format!("request latency; {note}"),
        });
        let per_task = (mem_after - mem_before) as f64 / p.tasks.max(1) as f64;
        let key_usage = match &p.last_task_id {
            Some(id) => task_key_usage(&mut conn, api_prefix, id)
                .await
                .map(|b| format!("; MEMORY USAGE of one task hash {b} B"))
                .unwrap_or_default(),
            None => String::new(),
        };
        rows.push(Row {
            bench: format!(
                "Redis memory, queued via {}",
                label.trim_start_matches("API ")
            ),
            n: p.tasks,
            conc: "-".into(),
            value: format!("{per_task:.0} B/task"),
            p50: "-".into(),
            p95: "-".into(),
            p99: "-".into(),
            note: format!(
                "used_memory {:.1} -> {:.1} MiB{key_usage}",
                mem_before as f64 / 1048576.0,
                mem_after as f64 / 1048576.0
            ),
        });
    }
    let queued: Value = api.get("/queue/status").await.1;
    eprintln!("[bench] queue status after the API phases: {queued}");
    let api_clean = api_proc.terminate(Duration::from_secs(10));
    if !api_clean {
        eprintln!("[bench] the API did not stop on SIGTERM within 10 s; killed");
    }

    // ---- b': memory per queued task with a larger code pair, submitted to the broker ----
    {
        let big = eval_body("small_mlp", "small_mlp__correct.py", 300);
        let big_spec = spec_from(&big)?;
        let big_len = serde_json::to_string(&big_spec)?.len();
        let prefix = "bench-mem";
        let broker = RedisBroker::connect(&redis.url, broker_config(prefix))?;
        broker.ping().await?;
        let before = used_memory(&mut conn).await?;
        let mut last = None;
        let started = Instant::now();
        for _ in 0..args.memory_tasks {
            if started.elapsed() > phase_timeout {
                break;
            }
            last = Some(
                broker
                    .submit(&TenantId::builtin(), big_spec.clone())
                    .await?
                    .task_id,
            );
        }
        let after = used_memory(&mut conn).await?;
        let n = args.memory_tasks;
        let usage = match &last {
            Some(id) => task_key_usage(&mut conn, prefix, id.as_str())
                .await
                .map(|b| format!("; MEMORY USAGE of one task hash {b} B"))
                .unwrap_or_default(),
            None => String::new(),
        };
        rows.push(Row {
            bench: "Redis memory, small_mlp pair (broker)".into(),
            n,
            conc: "-".into(),
            value: format!("{:.0} B/task", (after - before) as f64 / n.max(1) as f64),
            p50: "-".into(),
            p95: "-".into(),
            p99: "-".into(),
            note: format!(
                "codes {} + {} B, spec JSON {big_len} B{usage}",
                big["reference_code"].as_str().map_or(0, str::len),
                big["kernel_code"].as_str().map_or(0, str::len)
            ),
        });
    }

    // ---- c: claim-to-start latency ----
    for kind in ["redis", "memory"] {
        for claimers in [1usize, 4] {
            let prefix = format!("bench-claim-{claimers}");
            let broker: Arc<dyn Broker> = if kind == "redis" {
                let b = RedisBroker::connect(&redis.url, broker_config(&prefix))?;
                b.ping().await?;
                Arc::new(b)
            } else {
                Arc::new(MemoryBroker::new(broker_config(&prefix)))
            };
            // Warm-up: connections, script cache, allocator.
            let _ = claim_run(
                broker.clone(),
                spec.clone(),
                50,
                claimers,
                args.claim_rate,
                Duration::from_secs(30),
            )
            .await;
            eprintln!(
                "[bench] claim-to-start, {kind} broker, {claimers} claimer(s): {} tasks at {}/s",
                args.claim_tasks, args.claim_rate
            );
            let r = claim_run(
                broker,
                spec.clone(),
                args.claim_tasks,
                claimers,
                args.claim_rate,
                phase_timeout,
            )
            .await;
            let cells =
                [50.0, 95.0, 99.0].map(|p| pct(&r.from_return_us, p).map_or("-".into(), ms_signed));
            let negative = r.from_return_us.iter().filter(|&&us| us < 0).count();
            let [s50, s99] =
                [50.0, 99.0].map(|p| pct(&r.from_start_us, p).map_or("-".into(), ms_signed));
            let max = r
                .from_return_us
                .last()
                .map_or("-".into(), |&us| ms_signed(us));
            let mut note = format!(
                "max {max}; from submit start p50 {s50} p99 {s99}; {negative} claims before the submit reply; submit {:.0}/s",
                r.submit_rate
            );
            if r.claimed < r.submitted || r.submitted < args.claim_tasks || r.errors > 0 {
                note.push_str(&format!(
                    "; {} submitted, {} claimed, {} errors",
                    r.submitted, r.claimed, r.errors
                ));
            }
            let (p50, p95, p99) = (cells[0].clone(), cells[1].clone(), cells[2].clone());
            rows.push(Row {
                bench: format!("claim-to-start, {kind} broker"),
                n: r.claimed,
                conc: format!("{claimers} claim."),
                value: format!("{:.0}/s steady", f64::from(args.claim_rate)),
                p50,
                p95,
                p99,
                note,
            });
        }
    }
    let end_load = loadavg();
    drop(redis);

    // ---- the table ----
    let header = Row {
        bench: "benchmark".into(),
        n: 0,
        conc: "conc".into(),
        value: "result".into(),
        p50: "p50 ms".into(),
        p95: "p95 ms".into(),
        p99: "p99 ms".into(),
        note: "notes".into(),
    };
    let n_cell = |r: &Row, is_header: bool| {
        if is_header {
            "tasks".to_owned()
        } else {
            r.n.to_string()
        }
    };
    let all: Vec<(&Row, bool)> = std::iter::once((&header, true))
        .chain(rows.iter().map(|r| (r, false)))
        .collect();
    let w = |f: &dyn Fn(&Row, bool) -> String| {
        all.iter().map(|(r, h)| f(r, *h).len()).max().unwrap_or(0)
    };
    let wb = w(&|r, _| r.bench.clone());
    let wn = w(&|r, h| n_cell(r, h));
    let wc = w(&|r, _| r.conc.clone());
    let wv = w(&|r, _| r.value.clone());
    let w5 = w(&|r, _| r.p50.clone());
    let w95 = w(&|r, _| r.p95.clone());
    let w99 = w(&|r, _| r.p99.clone());
    println!();
    for (i, (r, h)) in all.iter().enumerate() {
        println!(
            "{:<wb$}  {:>wn$}  {:>wc$}  {:>wv$}  {:>w5$}  {:>w95$}  {:>w99$}  {}",
            r.bench,
            n_cell(r, *h),
            r.conc,
            r.value,
            r.p50,
            r.p95,
            r.p99,
            r.note
        );
        if i == 0 {
            println!(
                "{}",
                "-".repeat(wb + wn + wc + wv + w5 + w95 + w99 + 14 + 5)
            );
        }
    }
    println!();
    println!("loadavg at end: {end_load}");
    Ok(())
}
