//! The RA-ICL kernel corpus: solved kernels (`{id, backend, description, code}` per JSONL line)
//! indexed with BM25 (tantivy) over their code and description, so a prompt can carry the
//! examples nearest to its problem. Built once by `crucible corpus index` into a directory
//! that the API opens read-only at start (`CRUCIBLE_CORPUS`).
//!
//! - `entry`: one corpus line, read and checked (pure).
//! - `query`: what a problem is searched by: the torch operators its `Model` calls and the
//!   words of its source (pure).
//! - `index`: building the directory (all or nothing) and searching it.
//! - `import`: KernelBook's and the Sakana AI CUDA Engineer archive's published files, in
//!   their own schemas (parquet or JSON), mapped onto corpus entries.

pub mod entry;
pub mod import;
pub mod index;
pub mod query;

pub use entry::{CorpusEntry, parse_jsonl};
pub use import::{Dataset, FileReport, ImportOptions, Skip, import_files};
pub use index::{BuildSummary, Corpus, Hit, build_index};
pub use query::{ProblemQuery, torch_ops};

use std::path::PathBuf;

/// Why a corpus could not be built or opened.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A JSONL line that is not a valid corpus entry.
    #[error("{path} line {line}: {message}")]
    Line {
        /// The JSONL file.
        path: PathBuf,
        /// Its line number, from 1.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// The corpus file holds no entry.
    #[error("{0}: no corpus entries")]
    Empty(PathBuf),
    /// A dataset file that cannot be read as its format says, or a row of it that cannot be
    /// an entry: the file, and where known the row (or line) and the column.
    #[error("{path}{}{}: {message}", .row.as_ref().map(|r| format!(" {r}")).unwrap_or_default(), .column.as_ref().map(|c| format!(" column {c}")).unwrap_or_default())]
    Import {
        /// The dataset file.
        path: PathBuf,
        /// `row N` (parquet, a JSON array; from 1) or `line N` (JSON lines).
        row: Option<String>,
        /// The column.
        column: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// The output directory exists already (nothing was written).
    #[error("{0} exists already (remove it, or pass --force to replace it)")]
    Exists(PathBuf),
    /// The directory is not an index this crate built.
    #[error("{path} is not a kernel corpus index built by `crucible corpus index`: {reason}")]
    NotAnIndex {
        /// The directory.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// The search engine failed.
    #[error("index: {0}")]
    Index(#[from] tantivy::TantivyError),
}
