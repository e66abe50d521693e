//! What prompts are made from, read once at start: the templates (built in, or files in
//! `CRUCIBLE_PROMPT_TEMPLATES`) and the RA-ICL corpus (`CRUCIBLE_CORPUS`). A bad template file
//! or a directory that is not an index stops the server with the reason, before it serves.

use crucible_corpus::{Corpus, CorpusError};
use crucible_rl::prompt::template::{TemplateError, TemplateName, Templates};
use std::path::{Path, PathBuf};

/// The directory of template overrides.
pub const TEMPLATES_ENV: &str = "CRUCIBLE_PROMPT_TEMPLATES";
/// The corpus index directory (`crucible corpus index`).
pub const CORPUS_ENV: &str = "CRUCIBLE_CORPUS";

/// Why the prompt configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PromptConfigError {
    /// The templates directory, or a file in it, could not be read.
    #[error("{TEMPLATES_ENV}: reading {path}: {source}")]
    Read {
        /// The directory or file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file in the templates directory that is no template's.
    #[error("{TEMPLATES_ENV}: {path} is not a template (known: {known})")]
    UnknownFile {
        /// The file.
        path: PathBuf,
        /// The file names it may hold.
        known: String,
    },
    /// A template that does not parse.
    #[error("{TEMPLATES_ENV}={dir}: {source}")]
    Template {
        /// The directory.
        dir: PathBuf,
        /// The fault, with its file and line.
        source: TemplateError,
    },
    /// The corpus could not be opened.
    #[error("{CORPUS_ENV}: {0}")]
    Corpus(#[from] CorpusError),
}

/// The templates and the corpus every prompt route uses.
#[derive(Debug, Default)]
pub struct PromptConfig {
    /// The words of every prompt.
    pub templates: Templates,
    /// The RA-ICL index; `option=raicl` is refused without one.
    pub corpus: Option<Corpus>,
}

impl PromptConfig {
    /// Templates from `templates_dir` (each file replaces the built-in template of its name;
    /// any other file is refused) and the corpus at `corpus_dir`.
    pub fn load(
        templates_dir: Option<&Path>,
        corpus_dir: Option<&Path>,
    ) -> Result<Self, PromptConfigError> {
        let templates = match templates_dir {
            None => Templates::default(),
            Some(dir) => load_templates(dir)?,
        };
        let corpus = corpus_dir.map(Corpus::open).transpose()?;
        Ok(Self { templates, corpus })
    }
}

fn load_templates(dir: &Path) -> Result<Templates, PromptConfigError> {
    let read = |path: &Path| {
        let path = path.to_owned();
        move |source| PromptConfigError::Read { path, source }
    };
    let known = || {
        TemplateName::ALL
            .iter()
            .map(|n| n.file_name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut texts = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read(dir))? {
        let path = entry.map_err(read(dir))?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let Some(template) = TemplateName::ALL
            .into_iter()
            .find(|t| t.file_name() == name)
        else {
            return Err(PromptConfigError::UnknownFile {
                path,
                known: known(),
            });
        };
        texts.push((
            template,
            std::fs::read_to_string(&path).map_err(read(&path))?,
        ));
    }
    Templates::with_overrides(|name| {
        texts
            .iter()
            .find(|(t, _)| *t == name)
            .map(|(_, text)| text.clone())
    })
    .map_err(|source| PromptConfigError::Template {
        dir: dir.to_owned(),
        source,
    })
}

/// [`PromptConfig::load`] from the environment ([`TEMPLATES_ENV`], [`CORPUS_ENV`]; empty
/// values are unset).
pub fn load_from_env() -> Result<PromptConfig, PromptConfigError> {
    let path = |key| {
        std::env::var(key)
            .ok()
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let (templates, corpus) = (path(TEMPLATES_ENV), path(CORPUS_ENV));
    let config = PromptConfig::load(templates.as_deref(), corpus.as_deref())?;
    if let (Some(dir), Some(c)) = (&corpus, &config.corpus) {
        tracing::info!(path = %dir.display(), entries = c.summary().entries, "kernel corpus opened");
    }
    if let Some(dir) = &templates {
        tracing::info!(path = %dir.display(), "prompt templates loaded");
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_files_replace_the_builtins_and_faults_stop_the_load() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            PromptConfig::load(Some(dir.path()), None)
                .unwrap()
                .templates,
            Templates::default()
        );
        std::fs::write(dir.path().join("example.txt"), "E{number}: {code}\n").unwrap();
        let loaded = PromptConfig::load(Some(dir.path()), None).unwrap();
        assert_ne!(loaded.templates.example, Templates::default().example);

        std::fs::write(dir.path().join("example.txt"), "{code} {solution}").unwrap();
        let err = PromptConfig::load(Some(dir.path()), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("example.txt line 1: unknown placeholder {solution}"),
            "{err}"
        );
        std::fs::remove_file(dir.path().join("example.txt")).unwrap();
        std::fs::write(dir.path().join("frist_turn.txt"), "x").unwrap();
        let err = PromptConfig::load(Some(dir.path()), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("frist_turn.txt is not a template"), "{err}");

        let missing = dir.path().join("nowhere");
        let err = PromptConfig::load(Some(&missing), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("reading") && err.contains("nowhere"), "{err}");
        let err = PromptConfig::load(None, Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("CRUCIBLE_CORPUS") && err.contains("not a kernel corpus"),
            "{err}"
        );
    }
}
