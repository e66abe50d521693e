//! KernelBook's and the Sakana AI CUDA Engineer archive's published files, read in their own
//! schemas and mapped onto corpus entries (docs/ENVIRONMENT.md, "Retrieval-augmented prompts",
//! has the column table and where each schema was established).
//!
//! - `table`: a parquet or JSON file read row by row, only the columns asked for.
//! - `rows`: one row onto one entry (pure): ids, backend, description, code, problem hash, and
//!   why a row is left out.
//! - `fixtures` (tests and the `fixtures` feature): files written in exactly those schemas.

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
mod rows;
mod table;

use crate::{CorpusEntry, CorpusError};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Which published dataset a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dataset {
    /// `GPUMODE/KernelBook`: `dataset_permissive.parquet` or `dataset_permissive.json`.
    KernelBook,
    /// `SakanaAI/AI-CUDA-Engineer-Archive`: `level_1.parquet`, `level_2.parquet`, ...
    Sakana,
}

impl Dataset {
    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Dataset::KernelBook => "kernelbook",
            Dataset::Sakana => "sakana",
        }
    }
}

/// Which rows are imported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportOptions {
    /// Also the Sakana rows whose `Correct` is false or null (left out by default).
    pub include_incorrect: bool,
    /// Only the Sakana rows whose `CUDA_Speedup_Native` is at least this.
    pub min_speedup: Option<f64>,
}

/// Why a row was left out; each is counted once, under the first that applies in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Skip {
    /// A Sakana row whose `Correct` is not true.
    Incorrect,
    /// A Sakana row below `--min-speedup` (or without a speedup).
    BelowSpeedup,
    /// No kernel code (`triton_code` / `CUDA_Code` null or blank).
    NoCode,
    /// A CUDA source holding both `"""` and `'''`, which no Python raw string can quote.
    Unquotable,
    /// Code or description larger than a request's code may be.
    TooLarge,
}

impl Skip {
    /// Its words in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::Incorrect => "incorrect (Correct is not true)",
            Skip::BelowSpeedup => "below --min-speedup",
            Skip::NoCode => "no code",
            Skip::Unquotable => "CUDA source not quotable",
            Skip::TooLarge => "larger than 256 KiB",
        }
    }
}

/// What one file gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// Read as.
    pub dataset: Dataset,
    /// Rows read.
    pub rows: usize,
    /// Entries made of them.
    pub imported: usize,
    /// Rows left out, by why.
    pub skipped: BTreeMap<Skip, usize>,
    /// Entries whose id was already taken, given `#2`, `#3`, ... in file order.
    pub renamed: usize,
}

/// Every entry of `files` (each read as its dataset says, in order) and what each file gave.
/// Ids are unique: one already taken (by an earlier row of any file) gets `#2`, `#3`, ...
/// The first bad file or row stops it with an error naming the file, row and column.
pub fn import_files(
    files: &[(Dataset, PathBuf)],
    options: &ImportOptions,
) -> Result<(Vec<CorpusEntry>, Vec<FileReport>), CorpusError> {
    let mut entries = Vec::new();
    let mut taken: HashMap<String, usize> = HashMap::new();
    let mut reports = Vec::new();
    for (dataset, path) in files {
        let report = import_file(*dataset, path, options, &mut entries, &mut taken)?;
        tracing::info!(
            file = %path.display(),
            dataset = dataset.as_str(),
            rows = report.rows,
            imported = report.imported,
            skipped = report.skipped.values().sum::<usize>(),
            "dataset file read"
        );
        reports.push(report);
    }
    Ok((entries, reports))
}

fn import_file(
    dataset: Dataset,
    path: &Path,
    options: &ImportOptions,
    entries: &mut Vec<CorpusEntry>,
    taken: &mut HashMap<String, usize>,
) -> Result<FileReport, CorpusError> {
    let mut report = FileReport {
        path: path.to_owned(),
        dataset,
        rows: 0,
        imported: 0,
        skipped: BTreeMap::new(),
        renamed: 0,
    };
    let columns = match dataset {
        Dataset::KernelBook => rows::KERNELBOOK,
        Dataset::Sakana => rows::SAKANA,
    };
    table::read_rows(path, columns, &mut |row| {
        report.rows += 1;
        let mapped = match dataset {
            Dataset::KernelBook => rows::kernelbook(row.cells),
            Dataset::Sakana => rows::sakana(row.cells, options),
        }
        .map_err(|(column, message)| CorpusError::Import {
            path: path.to_owned(),
            row: Some(row.at),
            column: Some(column.to_string()),
            message,
        })?;
        match mapped {
            rows::Mapped::Skipped(why) => *report.skipped.entry(why).or_default() += 1,
            rows::Mapped::Entry(mut entry) => {
                if unique_id(&mut entry.id, taken) {
                    report.renamed += 1;
                }
                report.imported += 1;
                entries.push(entry);
            }
        }
        Ok(())
    })?;
    Ok(report)
}

/// Makes `id` one not in `taken` (adding `#n`) and takes it; true when it had to change.
fn unique_id(id: &mut String, taken: &mut HashMap<String, usize>) -> bool {
    let seen = taken.entry(id.clone()).or_insert(0);
    *seen += 1;
    if *seen == 1 {
        return false;
    }
    let mut n = *seen;
    loop {
        let candidate = format!("{id}#{n}");
        if !taken.contains_key(&candidate) {
            taken.insert(candidate.clone(), 1);
            *id = candidate;
            return true;
        }
        n += 1;
    }
}

#[cfg(test)]
mod tests;
