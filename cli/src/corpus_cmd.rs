//! `crucible corpus index|search`: build the RA-ICL kernel corpus index the API opens
//! (`CRUCIBLE_CORPUS`) from a JSONL file, and search it the way `option=raicl` does.

use anyhow::{Context, bail};
use clap::Subcommand;
use crucible_corpus::{Corpus, ProblemQuery, build_index, parse_jsonl};
use crucible_shared::{Backend, problem_hash};
use std::path::PathBuf;

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
