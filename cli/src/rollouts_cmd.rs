//! `crucible rollouts submit|results`: a JSONL file of rollouts in, a JSONL file of scored
//! results out (in completion order), with a progress bar and a summary.

use crate::Remote;
use crate::timing_arg::TimingArgs;
use anyhow::Context;
use clap::Subcommand;
use crucible_client::Client;
use crucible_client::summary::RolloutSummary;
use crucible_rl::rollout::{Rollout, RolloutEvalSettings, RolloutResult};
use crucible_shared::{BatchId, DeviceClass};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `--out` of both commands.
const OUT_HELP: &str = "Write the results here, one JSON object per line, in completion order.";
/// `--wait-timeout-s` of both commands.
const WAIT_TIMEOUT_HELP: &str = "Give up waiting for the results after this many seconds.";

#[derive(Subcommand)]
pub enum RolloutsCommand {
    /// Submit a JSONL file of rollouts (one rollout per line: an element of `POST /rollouts`'s
    /// `rollouts` array) in batches of at most 1,000. Prints each batch id on stderr
    /// (`batch b_...`), and on stdout too without `--wait`.
    Submit {
        /// The rollouts, one JSON object a line: `id`, `problem` (`{level, id}`) or
        /// `reference_code`, `completion`, and optionally `backend`, `turn`, `profile`,
        /// `weights`, `decoy_reward` (clients/python/examples/relu_rollouts.jsonl).
        file: PathBuf,
        #[command(flatten)]
        remote: Remote,
        /// Wait for every result and print a summary (else print the batch ids and exit).
        #[arg(long)]
        wait: bool,
        #[arg(long, requires = "wait", help = OUT_HELP)]
        out: Option<PathBuf>,
        #[arg(long, default_value_t = 3600, help = WAIT_TIMEOUT_HELP)]
        wait_timeout_s: u64,
        /// Rollouts per `POST /rollouts` (1-1000).
        #[arg(long, default_value_t = 1000)]
        batch_size: usize,
        #[command(flatten)]
        eval: EvalArgs,
    },
    /// Collect the results of batches submitted earlier, and print their summary.
    Results {
        /// The batches (`b_...`), as `crucible rollouts submit` printed them.
        batch_ids: Vec<String>,
        #[command(flatten)]
        remote: Remote,
        #[arg(long, help = OUT_HELP)]
        out: Option<PathBuf>,
        #[arg(long, default_value_t = 3600, help = WAIT_TIMEOUT_HELP)]
        wait_timeout_s: u64,
    },
}

/// Evaluation settings for every rollout (absent: the server's defaults, as `POST /evaluate`'s).
#[derive(clap::Args)]
pub struct EvalArgs {
    /// Correctness trials, each on fresh seeded inputs.
    #[arg(long)]
    num_correct_trials: Option<u32>,
    /// Timed calls of the reference and of the candidate.
    #[arg(long)]
    num_perf_trials: Option<u32>,
    /// Seconds an evaluation may take before its verdict is `TIMEOUT`.
    #[arg(long)]
    timeout_s: Option<u32>,
    /// A speedup above this is flagged as implausible.
    #[arg(long)]
    max_speedup: Option<f64>,
    /// Evaluate every rollout on workers of this device class (`h100`, `cpu`, ...). Default:
    /// the server places each problem's rollouts together on one class.
    #[arg(long)]
    device_class: Option<DeviceClass>,
    #[command(flatten)]
    timing: TimingArgs,
}

impl From<EvalArgs> for RolloutEvalSettings {
    fn from(a: EvalArgs) -> Self {
        RolloutEvalSettings {
            num_correct_trials: a.num_correct_trials,
            num_perf_trials: a.num_perf_trials,
            timeout_s: a.timeout_s,
            max_speedup: a.max_speedup,
            timing: a.timing.setting(),
            precision: a.timing.precision,
            timing_method: a.timing.timing_method,
            reference_backend: a.timing.reference_backend,
            device_class: a.device_class,
            ..RolloutEvalSettings::default()
        }
    }
}

pub async fn run(command: RolloutsCommand) -> anyhow::Result<()> {
    match command {
        RolloutsCommand::Submit {
            file,
            remote,
            wait,
            out,
            wait_timeout_s,
            batch_size,
            eval,
        } => {
            let client = remote.client();
            let wait = wait.then(|| (Duration::from_secs(wait_timeout_s), out.as_deref()));
            submit(&client, &file, &eval.into(), batch_size, wait).await
        }
        RolloutsCommand::Results {
            batch_ids,
            remote,
            out,
            wait_timeout_s,
        } => {
            let ids: Vec<BatchId> = batch_ids.into_iter().map(BatchId).collect();
            let timeout = Duration::from_secs(wait_timeout_s);
            collect(&remote.client(), &ids, 0, timeout, out.as_deref()).await
        }
    }
}

/// Reads one rollout per non-blank line; the error names the line.
pub fn read_rollouts(path: &Path) -> anyhow::Result<Vec<Rollout>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{} line {}: not a rollout", path.display(), n + 1))
        })
        .collect()
}

pub async fn submit(
    client: &Client,
    file: &Path,
    eval: &RolloutEvalSettings,
    batch_size: usize,
    wait: Option<(Duration, Option<&Path>)>,
) -> anyhow::Result<()> {
    let rollouts = read_rollouts(file)?;
    let started = std::time::Instant::now();
    let batches = client
        .submit_all_rollouts(&rollouts, eval, batch_size)
        .await?;
    let evaluated: usize = batches.iter().map(|b| b.evaluated).sum();
    eprintln!(
        "submitted {} rollouts ({evaluated} to evaluate) in {} batches in {:.2} s",
        rollouts.len(),
        batches.len(),
        started.elapsed().as_secs_f64()
    );
    let ids: Vec<BatchId> = batches.into_iter().map(|b| b.batch_id).collect();
    // On stderr in every mode, as `crucible submit` names its task: `crucible rollouts
    // results`, `crucible report` and `crucible cancel` take these ids, and with `--wait` stdout
    // holds the summary.
    for id in &ids {
        eprintln!("batch {id}");
    }
    let Some((timeout, out)) = wait else {
        // Without `--wait` the ids are the whole answer: stdout, one a line, for scripts.
        for id in &ids {
            println!("{id}");
        }
        return Ok(());
    };
    collect(client, &ids, rollouts.len(), timeout, out).await
}

/// Streams every result of `ids` into `out` (when given) and prints the summary.
pub async fn collect(
    client: &Client,
    ids: &[BatchId],
    expected: usize,
    timeout: Duration,
    out: Option<&Path>,
) -> anyhow::Result<()> {
    let mut writer = out
        .map(|p| {
            std::fs::File::create(p)
                .map(BufWriter::new)
                .with_context(|| format!("creating {}", p.display()))
        })
        .transpose()?;
    let bar = progress_bar(expected as u64);
    let tty = std::io::stderr().is_terminal();
    let mut results: Vec<RolloutResult> = Vec::with_capacity(expected);
    let mut write_error = None;
    let mut next_report = expected.div_ceil(10).max(1);
    client
        .stream_results(ids, timeout, |r| {
            if let Some(w) = writer.as_mut()
                && write_error.is_none()
                && let Err(e) = serde_json::to_writer(&mut *w, &r)
                    .map_err(std::io::Error::from)
                    .and_then(|()| w.write_all(b"\n"))
            {
                write_error = Some(e);
            }
            results.push(r);
            let s = RolloutSummary::of(&results);
            bar.set_length(bar.length().unwrap_or(0).max(results.len() as u64));
            bar.set_position(results.len() as u64);
            bar.set_message(format!(
                "ok {:.0}%  hacks {}",
                s.correct_rate * 100.0,
                s.hacks
            ));
            if !tty && expected > 0 && (results.len() >= next_report || results.len() == expected) {
                eprintln!("{}/{expected} results", results.len());
                next_report += expected.div_ceil(10).max(1);
            }
        })
        .await?;
    bar.finish_and_clear();
    if let Some(e) = write_error {
        return Err(e).context("writing the results");
    }
    if let Some(mut w) = writer {
        w.flush().context("writing the results")?;
    }
    print_summary(&RolloutSummary::of(&results));
    Ok(())
}

fn progress_bar(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

fn print_summary(s: &RolloutSummary) {
    let pct = |x: f64| format!("{:.1}%", x * 100.0);
    println!(
        "rollouts {}  evaluated {}  no kernel {}  unscored {}",
        s.rollouts, s.evaluated, s.no_kernel, s.unscored
    );
    println!(
        "correct {}  fast_1 {}  mean speedup {}  hacks {}  decoys {}  mean reward {}",
        pct(s.correct_rate),
        pct(s.fast_1),
        s.mean_speedup
            .map_or("-".to_owned(), |x| format!("{x:.2}x")),
        s.hacks,
        s.decoys,
        s.mean_reward.map_or("-".to_owned(), |x| format!("{x:.3}")),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_rl::rollout::RolloutBatchRequest;

    /// What `submit` sends first: the file read, then one batch the server would accept.
    fn submittable(repo_path: &str) -> usize {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(repo_path);
        let rollouts = read_rollouts(&path).unwrap_or_else(|e| panic!("{e:#}"));
        let batch = RolloutBatchRequest {
            rollouts,
            eval: RolloutEvalSettings::default(),
            idempotency_key: None,
        };
        batch
            .validate()
            .unwrap_or_else(|e| panic!("{repo_path}: {e}"));
        batch.rollouts.len()
    }

    /// The files the READMEs hand to `crucible rollouts submit` (and the Python examples) are
    /// rollouts of `POST /rollouts` as they are: one format, with ids.
    #[test]
    fn the_shipped_rollout_files_are_submittable() {
        assert_eq!(
            submittable("clients/python/examples/relu_rollouts.jsonl"),
            5
        );
        assert!(submittable("tests/rollouts/rollouts.jsonl") >= 40);
    }

    #[test]
    fn a_line_that_is_not_a_rollout_is_named() {
        let dir = std::env::temp_dir().join(format!("crucible-rollouts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("bad.jsonl");
        std::fs::write(
            &file,
            "{\"id\": \"a\", \"reference_code\": \"x\", \"completion\": \"y\"}\n\n\
             {\"name\": \"relu\", \"reference_code\": \"x\", \"completion\": \"y\"}\n",
        )
        .unwrap();
        let err = format!("{:#}", read_rollouts(&file).unwrap_err());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(err.contains("line 3: not a rollout"), "{err}");
        assert!(err.contains("unknown field `name`"), "{err}");
    }
}
