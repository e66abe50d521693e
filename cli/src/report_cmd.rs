//! `crucible report BATCH_ID [--json FILE]`: a batch's report (`GET /batches/{id}/report`) as a
//! short table per level, and the whole report as JSON: the checkpoint evaluation of a
//! trainer's batch, or of a whole level submitted as one batch.

use crate::Remote;
use anyhow::{Context, bail};
use crucible_rl::report::{BatchReport, FAST_P_THRESHOLDS, GroupReport};
use crucible_shared::BatchId;
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

/// The table's column names: the fast_p columns named after the thresholds the report has.
fn header() -> Vec<String> {
    let fast = FAST_P_THRESHOLDS.iter().map(|p| format!("fast_{p}"));
    let speed = ["mean_x", "geomean", "hacks", "decoys"].map(String::from);
    ["level", "samples", "correct"]
        .map(String::from)
        .into_iter()
        .chain(fast)
        .chain(speed)
        .collect()
}

/// Pure: the table `crucible report` prints, a row per level and one for all: the level's
/// name left-aligned, the figures right-aligned, one space between columns.
pub fn table(report: &BatchReport) -> String {
    let mut table = comfy_table::Table::new();
    table
        .load_style(comfy_table::presets::NOTHING)
        .set_header(header());
    let row = |name: String, g: &GroupReport| {
        let speed = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{v:.3}"));
        let mut cells = vec![
            name,
            g.samples.to_string(),
            format!("{:.3}", g.correct_rate),
        ];
        cells.extend(g.fast_p.iter().map(|f| format!("{:.3}", f.rate)));
        cells.extend([
            speed(g.mean_speedup),
            speed(g.geomean_speedup),
            g.hacks.to_string(),
            g.decoys.to_string(),
        ]);
        cells
    };
    for g in &report.levels {
        table.add_row(row(g.level.map_or("none".to_owned(), |l| l.to_string()), g));
    }
    table.add_row(row("all".to_owned(), &report.overall));
    for (n, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, 1));
        if n > 0 {
            column.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    format!(
        "batch {} ({:?}){}\n{}\n",
        report.batch_id,
        report.source,
        if report.done { "" } else { ", still running" },
        table.trim_fmt(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_rl::report::{ReportSource, Sample, SampleOutcome};
    use crucible_shared::Verdict;

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
            rows[1].starts_with("level ")
                && rows[1].contains(" fast_1.2 ")
                && rows[1].ends_with(" decoys"),
            "{text}"
        );
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
