//! `crucible report BATCH_ID [--json FILE]`: a batch's report (`GET /batches/{id}/report`) as a
//! short table per level, and the whole report as JSON: the checkpoint evaluation of a
//! trainer's batch, or of a whole level submitted as one batch.

use crate::Remote;
use anyhow::{Context, bail};
use crucible_shared::BatchId;
use crucible_shared::report::{BatchReport, GroupReport};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `crucible report`.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// The batch (`b_...`) of `POST /rollouts` or `POST /evaluate/batch`.
    batch_id: String,
    #[command(flatten)]
    remote: Remote,
    /// Write the whole report here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Wait up to this many seconds for the batch to finish (no sample pending) first.
    #[arg(long, default_value_t = 0)]
    wait_s: u64,
}

pub async fn run(args: ReportArgs) -> anyhow::Result<()> {
    let client = args.remote.client();
    let id = BatchId::from(args.batch_id.as_str());
    let deadline = Instant::now() + Duration::from_secs(args.wait_s);
    let report = loop {
        let report = client.report(&id).await?;
        if report.done || Instant::now() >= deadline {
            break report;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    print!("{}", table(&report));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if !report.done && args.wait_s > 0 {
        bail!(
            "the batch still has pending samples after {} s",
            args.wait_s
        );
    }
    Ok(())
}

/// Pure: the table `crucible report` prints, a row per level and one for all.
pub fn table(report: &BatchReport) -> String {
    let mut out = format!(
        "batch {} ({:?}){}\n{:<8} {:>7} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8} {:>5} {:>6}\n",
        report.batch_id,
        report.source,
        if report.done { "" } else { ", still running" },
        "level",
        "samples",
        "correct",
        "fast_0",
        "fast_1",
        "fast_1.2",
        "fast_1.5",
        "fast_2",
        "mean_x",
        "geomean",
        "hacks",
        "decoys",
    );
    let row = |name: String, g: &GroupReport| {
        let speed = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{v:.3}"));
        let fast: Vec<String> = g.fast_p.iter().map(|f| format!("{:.3}", f.rate)).collect();
        format!(
            "{name:<8} {:>7} {:>8.3} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8} {:>5} {:>6}\n",
            g.samples,
            g.correct_rate,
            fast[0],
            fast[1],
            fast[2],
            fast[3],
            fast[4],
            speed(g.mean_speedup),
            speed(g.geomean_speedup),
            g.hacks,
            g.decoys,
        )
    };
    for g in &report.levels {
        out += &row(g.level.map_or("none".to_owned(), |l| l.to_string()), g);
    }
    out += &row("all".to_owned(), &report.overall);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_shared::Verdict;
    use crucible_shared::report::{ReportSource, Sample, SampleOutcome};

    #[test]
    fn the_table_has_a_row_per_level_and_one_for_all() {
        let ok = |level, speedup| Sample {
            level,
            outcome: SampleOutcome::Judged {
                verdict: Verdict::Ok,
                speedup: Some(speedup),
            },
        };
        let report = BatchReport::of(
            BatchId::from("b_x"),
            ReportSource::Evaluations,
            &[ok(Some(1), 2.0), ok(None, 0.5)],
        );
        let text = table(&report);
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 5, "{text}");
        assert!(
            rows[2].starts_with("1 ") && rows[2].contains("2.000"),
            "{text}"
        );
        assert!(rows[3].starts_with("none "), "{text}");
        assert!(
            rows[4].starts_with("all ") && rows[4].contains("0.500"),
            "{text}"
        );
    }
}
