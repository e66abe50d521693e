//! The index directory: built all or nothing (into a hidden sibling, renamed into place once
//! whole), opened read-only, searched with BM25 over code and description, filtered to one
//! backend and never returning the entries of an excluded problem.

use crate::query::{ProblemQuery, is_boilerplate};
use crate::{CorpusEntry, CorpusError};
use crucible_shared::Backend;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, ConstScoreQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, STORED, STRING, Schema, TEXT, Value};
use tantivy::{Index, IndexReader, TantivyDocument, Term, doc};

/// The file beside tantivy's that marks the directory as ours and says what it holds.
const MANIFEST: &str = "crucible-corpus.json";
/// Bumped when the schema changes: an index of another format is refused, not misread.
const FORMAT: u32 = 1;
/// How much an operator the problem calls weighs against the operators an entry's problem
/// calls (its `ops` field), a class shared with them (GELU and Tanh: elementwise), and a word
/// of the problem's source (not boilerplate) in an entry's code or description.
const OP_BOOST: f32 = 3.0;
const CLASS_BOOST: f32 = 2.0;
/// The score an entry of the problem's kind (the class of highest precedence:
/// `query::ProblemQuery::kind`) gets on top of its BM25 score: more than any BM25 score here
/// reaches, so every entry of the kind ranks above every entry of another (an L1 norm's `abs`
/// does not make it the nearest example for Softsign), and BM25 orders within each.
const KIND_SCORE: f32 = 1000.0;
const WORD_BOOST: f32 = 1.0;
/// The indexing writer's memory (tantivy's minimum is 15 MB per thread; one thread).
const WRITER_BUDGET_BYTES: usize = 32 << 20;

/// What `crucible-corpus.json` records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildSummary {
    /// The index format.
    pub format: u32,
    /// Entries indexed.
    pub entries: usize,
    /// Of which Triton.
    pub triton: usize,
    /// Of which CUDA.
    pub cuda: usize,
}

struct Fields {
    id: Field,
    backend: Field,
    description: Field,
    code: Field,
    problem_hash: Field,
    /// The operators the entry's problem calls and their classes (from its description, or
    /// its code when the description names none): indexed, not stored.
    ops: Field,
    /// The kind of the entry's problem (`matmul`, `elementwise`, ...), when it has one.
    kind: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let fields = Fields {
        id: b.add_text_field("id", STRING | STORED),
        backend: b.add_text_field("backend", STRING | STORED),
        description: b.add_text_field("description", TEXT | STORED),
        code: b.add_text_field("code", TEXT | STORED),
        problem_hash: b.add_text_field("problem_hash", STRING | STORED),
        ops: b.add_text_field("ops", TEXT),
        kind: b.add_text_field("kind", STRING),
    };
    (b.build(), fields)
}

/// Indexes `entries` into the directory `out`, which must not exist unless `replace`. Nothing
/// is left at `out` unless the whole index was written.
pub fn build_index(
    entries: &[CorpusEntry],
    out: &Path,
    replace: bool,
) -> Result<BuildSummary, CorpusError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| CorpusError::Io { path, source }
    };
    if out.exists() && !replace {
        return Err(CorpusError::Exists(out.to_owned()));
    }
    let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("corpus");
    let partial = out.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(io(&partial))?;
    }
    std::fs::create_dir_all(&partial).map_err(io(&partial))?;
    let written = write_index(entries, &partial);
    let summary = match written {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(e);
        }
    };
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(io(out))?;
    }
    std::fs::rename(&partial, out).map_err(io(out))?;
    Ok(summary)
}

fn write_index(entries: &[CorpusEntry], dir: &Path) -> Result<BuildSummary, CorpusError> {
    let (schema, f) = schema();
    let index = Index::create_in_dir(dir, schema)?;
    let mut writer = index.writer_with_num_threads(1, WRITER_BUDGET_BYTES)?;
    for e in entries {
        let problem = entry_query(e);
        let mut ops = problem.op_words();
        ops.extend(problem.class_words().into_iter().map(str::to_string));
        let mut document = doc!(
            f.ops => ops.join(" "),
            f.id => e.id.as_str(),
            f.backend => e.backend.as_str(),
            f.description => e.description.as_str(),
            f.code => e.code.as_str(),
        );
        if let Some(hash) = &e.problem_hash {
            document.add_text(f.problem_hash, hash);
        }
        if let Some(kind) = problem.kind() {
            document.add_text(f.kind, kind);
        }
        writer.add_document(document)?;
    }
    writer.commit()?;
    writer.wait_merging_threads()?;
    let count = |b: Backend| entries.iter().filter(|e| e.backend == b).count();
    let summary = BuildSummary {
        format: FORMAT,
        entries: entries.len(),
        triton: count(Backend::Triton),
        cuda: count(Backend::Cuda),
    };
    let manifest = dir.join(MANIFEST);
    let json = serde_json::to_vec_pretty(&summary).expect("a summary serializes");
    std::fs::write(&manifest, json).map_err(|source| CorpusError::Io {
        path: manifest,
        source,
    })?;
    Ok(summary)
}

/// The problem an entry solves, as a query: from its description, or its code when the
/// description names no operator.
fn entry_query(e: &CorpusEntry) -> ProblemQuery {
    let q = ProblemQuery::from_reference(&e.description);
    if q.ops.is_empty() {
        ProblemQuery::from_reference(&e.code)
    } else {
        q
    }
}

/// One retrieved entry and its BM25 score.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The entry.
    pub entry: CorpusEntry,
    /// Its score for the query (higher is nearer).
    pub score: f32,
}

/// An opened index, searched by any number of requests at once.
pub struct Corpus {
    path: PathBuf,
    index: Index,
    reader: IndexReader,
    fields: Fields,
    summary: BuildSummary,
}

impl std::fmt::Debug for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Corpus")
            .field("path", &self.path)
            .field("summary", &self.summary)
            .finish()
    }
}

impl Corpus {
    /// Opens the index at `dir`, refusing anything `build_index` did not write.
    pub fn open(dir: &Path) -> Result<Self, CorpusError> {
        let not_index = |reason: String| CorpusError::NotAnIndex {
            path: dir.to_owned(),
            reason,
        };
        let manifest =
            std::fs::read(dir.join(MANIFEST)).map_err(|e| not_index(format!("{MANIFEST}: {e}")))?;
        let summary: BuildSummary =
            serde_json::from_slice(&manifest).map_err(|e| not_index(format!("{MANIFEST}: {e}")))?;
        if summary.format != FORMAT {
            return Err(not_index(format!(
                "format {} (this build reads {FORMAT}): build it again",
                summary.format
            )));
        }
        let index = Index::open_in_dir(dir).map_err(|e| not_index(e.to_string()))?;
        let (expected, fields) = schema();
        if index.schema() != expected {
            return Err(not_index("its fields are not a corpus's".into()));
        }
        let reader = index.reader()?;
        Ok(Self {
            path: dir.to_owned(),
            index,
            reader,
            fields,
            summary,
        })
    }

    /// What the index holds.
    pub fn summary(&self) -> &BuildSummary {
        &self.summary
    }

    /// The `k` entries of `backend` nearest to `query`, best first, none of the problem whose
    /// hash is `exclude_problem`. Fewer when fewer match any word.
    pub fn search(
        &self,
        query: &ProblemQuery,
        backend: Backend,
        k: usize,
        exclude_problem: Option<&str>,
    ) -> Result<Vec<Hit>, CorpusError> {
        let f = &self.fields;
        let mut words: Vec<(Box<dyn Query>, Occur)> = Vec::new();
        if let Some(kind) = query.kind() {
            let term = TermQuery::new(
                Term::from_field_text(f.kind, kind),
                IndexRecordOption::Basic,
            );
            words.push((
                Box::new(ConstScoreQuery::new(Box::new(term), KIND_SCORE)),
                Occur::Should,
            ));
        }
        let mut add = |field, token: &str, boost| {
            let term = TermQuery::new(
                Term::from_field_text(field, token),
                IndexRecordOption::WithFreqs,
            );
            words.push((
                Box::new(BoostQuery::new(Box::new(term), boost)),
                Occur::Should,
            ));
        };
        let op_words = self.tokens(&query.op_words().join(" "))?;
        for token in &op_words {
            add(f.ops, token, OP_BOOST);
            add(f.code, token, WORD_BOOST);
            add(f.description, token, WORD_BOOST);
        }
        for class in query.class_words() {
            add(f.ops, class, CLASS_BOOST);
        }
        let mut seen: std::collections::HashSet<String> = op_words.into_iter().collect();
        for token in self.tokens(&query.text)? {
            if is_boilerplate(&token) || !seen.insert(token.clone()) {
                continue;
            }
            add(f.code, &token, WORD_BOOST);
            add(f.description, &token, WORD_BOOST);
        }
        if words.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let exact = |field, text: &str| -> Box<dyn Query> {
            Box::new(TermQuery::new(
                Term::from_field_text(field, text),
                IndexRecordOption::Basic,
            ))
        };
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![
            (
                Occur::Must,
                Box::new(ConstScoreQuery::new(
                    exact(f.backend, backend.as_str()),
                    0.0,
                )),
            ),
            (
                Occur::Must,
                Box::new(BooleanQuery::new(
                    words.into_iter().map(|(q, o)| (o, q)).collect(),
                )),
            ),
        ];
        if let Some(hash) = exclude_problem {
            clauses.push((Occur::MustNot, exact(f.problem_hash, hash)));
        }
        let searcher = self.reader.searcher();
        let top = searcher.search(&BooleanQuery::new(clauses), &TopDocs::with_limit(k))?;
        top.into_iter()
            .map(|(score, address)| {
                let d: TantivyDocument = searcher.doc(address)?;
                Ok(Hit {
                    entry: self.entry(&d),
                    score,
                })
            })
            .collect()
    }

    fn tokens(&self, text: &str) -> Result<Vec<String>, CorpusError> {
        let mut analyzer = self.index.tokenizer_for_field(self.fields.code)?;
        let mut stream = analyzer.token_stream(text);
        let mut out = Vec::new();
        while stream.advance() {
            out.push(stream.token().text.clone());
        }
        Ok(out)
    }

    fn entry(&self, d: &TantivyDocument) -> CorpusEntry {
        let text = |field| {
            d.get_first(field)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        let f = &self.fields;
        CorpusEntry {
            id: text(f.id),
            backend: if text(f.backend) == Backend::Cuda.as_str() {
                Backend::Cuda
            } else {
                Backend::Triton
            },
            description: text(f.description),
            code: text(f.code),
            problem_hash: d
                .get_first(f.problem_hash)
                .and_then(|v| v.as_str())
                .map(str::to_string),
        }
    }
}

#[cfg(test)]
mod tests;
