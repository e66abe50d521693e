//! `crucible corpus index|import|search`: build the RA-ICL kernel corpus index the API opens
//! (`CRUCIBLE_CORPUS`) from a JSONL file or from KernelBook's and the Sakana archive's
//! published files, and search it the way `option=raicl` does.

use anyhow::{Context, bail};
use clap::Subcommand;
use crucible_corpus::{
    Corpus, CorpusError, Dataset, FileReport, ImportOptions, ProblemQuery, build_index,
    import_files, parse_jsonl,
};
use crucible_shared::{Backend, problem_hash};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Subcommand)]
pub enum CorpusCommand {
    /// Index a JSONL corpus (`{id, backend, description, code, problem_hash?}` per line) into
    /// the directory OUT. A bad line stops it with its line number; nothing is left at OUT
    /// unless the whole index was written.
    Index {
        /// The corpus: a JSONL file, one entry a line.
        corpus: PathBuf,
        /// The index directory to write.
        #[arg(long)]
        out: PathBuf,
        /// Replace OUT if it exists (once the new index is whole).
        #[arg(long)]
        force: bool,
    },
    /// Import KernelBook's and the Sakana AI CUDA Engineer archive's published files, in their
    /// own schemas (parquet, a JSON array of records, or JSON lines), into the index directory
    /// OUT. Rows without code, and Sakana rows not marked Correct, are left out and counted; a
    /// bad file or row stops it naming the file, row and column, and nothing is left at OUT.
    Import {
        /// KernelBook files (`dataset_permissive.parquet` or `.json`): Triton entries.
        #[arg(long, num_args = 1.., value_name = "FILE", required_unless_present = "sakana")]
        kernelbook: Vec<PathBuf>,
        /// Sakana archive files (`level_1.parquet`, `level_2.parquet`, ...): CUDA entries.
        #[arg(long, num_args = 1.., value_name = "FILE")]
        sakana: Vec<PathBuf>,
        /// The index directory to write.
        #[arg(long)]
        out: PathBuf,
        /// Replace OUT if it exists (once the new index is whole).
        #[arg(long)]
        force: bool,
        /// Also import the Sakana rows whose Correct is false or null.
        #[arg(long)]
        include_incorrect: bool,
        /// Only the Sakana rows whose CUDA_Speedup_Native is at least X.
        #[arg(long, value_name = "X")]
        min_speedup: Option<f64>,
    },
    /// Search an index: QUERY is words or Python source (a KernelBench problem's `Model` is
    /// searched by the torch operators it calls); --reference reads it from a file.
    Search {
        /// An index directory, as `crucible corpus index` wrote it.
        index: PathBuf,
        /// Words or Python source to search by.
        query: Option<String>,
        /// A problem file to search by, instead of QUERY.
        #[arg(long, conflicts_with = "query")]
        reference: Option<PathBuf>,
        /// Search the entries of this backend only, as a prompt for it does.
        #[arg(long, value_enum, default_value = "triton")]
        backend: crate::BackendArg,
        /// How many entries to show.
        #[arg(short, long, default_value_t = 5)]
        k: usize,
        /// Leave out the entries that solve the --reference problem, as prompts do.
        #[arg(long, requires = "reference")]
        exclude_own: bool,
    },
}

pub fn run(command: CorpusCommand) -> anyhow::Result<()> {
    match command {
        CorpusCommand::Index { corpus, out, force } => {
            let text = std::fs::read_to_string(&corpus)
                .with_context(|| format!("reading {}", corpus.display()))?;
            let entries = parse_jsonl(&text, &corpus)?;
            let s = build_index(&entries, &out, force)?;
            println!(
                "indexed {} entries ({} triton, {} cuda) into {}",
                s.entries,
                s.triton,
                s.cuda,
                out.display()
            );
            Ok(())
        }
        CorpusCommand::Import {
            kernelbook,
            sakana,
            out,
            force,
            include_incorrect,
            min_speedup,
        } => {
            if out.exists() && !force {
                return Err(CorpusError::Exists(out).into());
            }
            let files: Vec<(Dataset, PathBuf)> = kernelbook
                .into_iter()
                .map(|f| (Dataset::KernelBook, f))
                .chain(sakana.into_iter().map(|f| (Dataset::Sakana, f)))
                .collect();
            let options = ImportOptions {
                include_incorrect,
                min_speedup,
            };
            let read = Instant::now();
            let (entries, reports) = import_files(&files, &options)?;
            let read = read.elapsed();
            for report in &reports {
                println!("{}", report_line(report));
            }
            if entries.is_empty() {
                bail!(
                    "no row could be imported: nothing written to {}",
                    out.display()
                );
            }
            let built = Instant::now();
            let s = build_index(&entries, &out, force)?;
            println!(
                "indexed {} entries ({} triton, {} cuda) into {} (read {:.1} s, index built {:.1} s)",
                s.entries,
                s.triton,
                s.cuda,
                out.display(),
                read.as_secs_f64(),
                built.elapsed().as_secs_f64()
            );
            Ok(())
        }
        CorpusCommand::Search {
            index,
            query,
            reference,
            backend,
            k,
            exclude_own,
        } => {
            let text = match (query, &reference) {
                (Some(q), None) => q,
                (None, Some(file)) => std::fs::read_to_string(file)
                    .with_context(|| format!("reading {}", file.display()))?,
                _ => bail!("give QUERY or --reference FILE"),
            };
            let corpus = Corpus::open(&index)?;
            let query = ProblemQuery::from_reference(&text);
            println!("operators: {}", query.ops.join(" "));
            let own = exclude_own.then(|| problem_hash(&text));
            let backend = Backend::from(backend);
            for (n, hit) in corpus
                .search(&query, backend, k, own.as_deref())?
                .iter()
                .enumerate()
            {
                println!("{:>2}. {:>8.3}  {}", n + 1, hit.score, hit.entry.id);
            }
            Ok(())
        }
    }
}

/// What one file gave, on one line: `level_1.parquet (sakana): 12157 rows, 9000 imported, 3157
/// left out (incorrect (Correct is not true) 3157)`.
fn report_line(r: &FileReport) -> String {
    let skipped: usize = r.skipped.values().sum();
    let mut line = format!(
        "{} ({}): {} rows, {} imported, {} left out",
        r.path.display(),
        r.dataset.as_str(),
        r.rows,
        r.imported,
        skipped
    );
    if skipped > 0 {
        let why: Vec<String> = r
            .skipped
            .iter()
            .map(|(why, n)| format!("{} {n}", why.as_str()))
            .collect();
        line.push_str(&format!(" ({})", why.join(", ")));
    }
    if r.renamed > 0 {
        line.push_str(&format!(
            ", {} ids taken already numbered #2, #3, ...",
            r.renamed
        ));
    }
    line
}

#[cfg(test)]
mod tests;
