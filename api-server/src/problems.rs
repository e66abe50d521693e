//! The problem registry: problems a request may name by `{level, id}` instead of sending their
//! source. Loaded once at start from a KernelBench checkout (`level1/19_ReLU.py`, ...) or a
//! JSONL file; every replica loads the same files, so the API stays stateless.

use crucible_shared::problem::{parse_level_dir_name, parse_problem_file_name};
use crucible_shared::{ApiError, MAX_CODE_BYTES, Problem, ProblemInfo, ProblemRef};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why the problem registry could not be loaded; the server does not start with a registry
/// it cannot read whole.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A file or directory could not be read (or a problem file is too large).
    #[error("reading {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What reading it failed with.
        source: std::io::Error,
    },
    /// A JSONL line that is not a valid problem.
    #[error("{path} line {line}: {message}")]
    Line {
        /// The JSONL file.
        path: PathBuf,
        /// Its line number, from 1.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
    /// Two sources claim the same `{level, id}`.
    #[error("{first} and {second} are both level {level} problem {id}")]
    Duplicate {
        /// The level both claim.
        level: u32,
        /// The id both claim.
        id: u32,
        /// Where the problem was first found (file, or file and line).
        first: String,
        /// Where it was found again.
        second: String,
    },
    /// The path holds no problem at all: most likely the wrong directory.
    #[error("{0}: no problems found (a KernelBench checkout has level1/19_ReLU.py and so on)")]
    Empty(PathBuf),
}

/// The registered problems, by level and id.
#[derive(Debug, Default)]
pub struct ProblemRegistry {
    problems: BTreeMap<ProblemRef, (Problem, String)>,
}

/// One line of a JSONL registry: the source inline or in a file (relative to the JSONL file).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonlProblem {
    level: u32,
    id: u32,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    reference_code: Option<String>,
    #[serde(default)]
    path: Option<PathBuf>,
}

impl ProblemRegistry {
    /// A directory is read as a KernelBench checkout, a file as JSONL.
    pub fn load(path: &Path) -> Result<Self, RegistryError> {
        let io = |source| RegistryError::Io {
            path: path.to_owned(),
            source,
        };
        let registry = if std::fs::metadata(path).map_err(io)?.is_dir() {
            Self::from_kernelbench(path)?
        } else {
            Self::from_jsonl(path)?
        };
        if registry.problems.is_empty() {
            return Err(RegistryError::Empty(path.to_owned()));
        }
        Ok(registry)
    }

    fn from_kernelbench(root: &Path) -> Result<Self, RegistryError> {
        let mut registry = Self::default();
        for (level, dir) in read_dir_sorted(root)?
            .into_iter()
            .filter_map(|p| Some((parse_level_dir_name(p.file_name()?.to_str()?)?, p)))
        {
            if !dir.is_dir() {
                continue;
            }
            for file in read_dir_sorted(&dir)? {
                let Some((id, name)) = file
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(parse_problem_file_name)
                else {
                    continue;
                };
                let code = read_source(&file)?;
                registry.insert(
                    Problem::new(level, id, name, code),
                    file.display().to_string(),
                )?;
            }
        }
        Ok(registry)
    }

    fn from_jsonl(path: &Path) -> Result<Self, RegistryError> {
        let text = std::fs::read_to_string(path).map_err(|source| RegistryError::Io {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut registry = Self::default();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let bad = |message: String| RegistryError::Line {
                path: path.to_owned(),
                line: n + 1,
                message,
            };
            let entry: JsonlProblem = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
            let code = match (entry.reference_code, &entry.path) {
                (Some(code), None) => code,
                (None, Some(file)) => read_source(&base.join(file))?,
                _ => return Err(bad("give exactly one of reference_code and path".into())),
            };
            let name = entry
                .name
                .unwrap_or_else(|| format!("problem_{}", entry.id));
            let origin = format!("{} line {}", path.display(), n + 1);
            registry.insert(Problem::new(entry.level, entry.id, name, code), origin)?;
        }
        Ok(registry)
    }

    fn insert(&mut self, problem: Problem, origin: String) -> Result<(), RegistryError> {
        let key = problem.reference();
        if let Some((_, first)) = self.problems.get(&key) {
            return Err(RegistryError::Duplicate {
                level: key.level,
                id: key.id,
                first: first.clone(),
                second: origin,
            });
        }
        self.problems.insert(key, (problem, origin));
        Ok(())
    }

    /// How many problems are registered.
    pub fn len(&self) -> usize {
        self.problems.len()
    }

    /// True when none was configured: requests must then send `reference_code`.
    pub fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }

    /// The problem a request names, if registered.
    pub fn get(&self, key: ProblemRef) -> Option<&Problem> {
        self.problems.get(&key).map(|(p, _)| p)
    }

    /// Every problem, by level then id.
    pub fn list(&self) -> Vec<ProblemInfo> {
        self.problems
            .values()
            .map(|(p, _)| p.info.clone())
            .collect()
    }

    /// The problem a request names, or the 422 that tells the client it is not registered.
    pub fn resolve(&self, key: ProblemRef, field: &str) -> Result<&Problem, ApiError> {
        self.get(key).ok_or_else(|| {
            let hint = if self.is_empty() {
                "this server has no problem registry (start it with CRUCIBLE_PROBLEMS or \
                 KERNELBENCH_ROOT)"
            } else {
                "GET /problems lists the registered ones"
            };
            ApiError::invalid(field, format!("unknown problem: {key}; {hint}"))
        })
    }
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, RegistryError> {
    let io = |source| RegistryError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut paths = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io)?;
    paths.sort();
    Ok(paths)
}

fn read_source(path: &Path) -> Result<String, RegistryError> {
    let code = std::fs::read_to_string(path).map_err(|source| RegistryError::Io {
        path: path.to_owned(),
        source,
    })?;
    if code.len() > MAX_CODE_BYTES {
        return Err(RegistryError::Io {
            path: path.to_owned(),
            source: std::io::Error::other(format!("larger than {MAX_CODE_BYTES} bytes")),
        });
    }
    Ok(code)
}

/// The registry the environment configures ([`configured_path`]); empty when none is.
pub fn load_from_env() -> Result<ProblemRegistry, RegistryError> {
    let Some(path) = configured_path(|k| std::env::var(k).ok()) else {
        return Ok(ProblemRegistry::default());
    };
    let registry = ProblemRegistry::load(&path)?;
    tracing::info!(path = %path.display(), problems = registry.len(), "problem registry loaded");
    Ok(registry)
}

/// The registry path a deployment configures: `CRUCIBLE_PROBLEMS` (a checkout or a JSONL
/// file), else `KERNELBENCH_ROOT`.
pub fn configured_path(lookup: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    ["CRUCIBLE_PROBLEMS", "KERNELBENCH_ROOT"]
        .iter()
        .find_map(|k| lookup(k).filter(|v| !v.is_empty()))
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "crucible-registry-{name}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_kernelbench_checkout_loads_by_level_and_id() {
        let root = scratch("kb");
        std::fs::create_dir_all(root.join("level1")).unwrap();
        std::fs::create_dir_all(root.join("level2")).unwrap();
        std::fs::create_dir_all(root.join("baseline_times")).unwrap();
        std::fs::write(root.join("level1/19_ReLU.py"), "relu").unwrap();
        std::fs::write(root.join("level1/notes.txt"), "skip").unwrap();
        std::fs::write(root.join("level2/3_Conv_Add.py"), "conv").unwrap();
        std::fs::write(root.join("baseline_times/1_x.py"), "skip").unwrap();
        let r = ProblemRegistry::load(&root).unwrap();
        assert_eq!(r.len(), 2);
        let relu = r.get(ProblemRef { level: 1, id: 19 }).unwrap();
        assert_eq!(relu.info.name, "ReLU");
        assert_eq!(relu.reference_code, "relu");
        assert_eq!(relu.info.hash, crucible_shared::problem_hash("relu"));
        let listed: Vec<(u32, u32)> = r.list().iter().map(|p| (p.level, p.id)).collect();
        assert_eq!(listed, [(1, 19), (2, 3)]);
        let err = r
            .resolve(ProblemRef { level: 1, id: 7 }, "problem")
            .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("problem"));
        assert!(err.message.contains("GET /problems"), "{}", err.message);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_jsonl_registry_takes_inline_sources_and_relative_paths() {
        let dir = scratch("jsonl");
        std::fs::write(dir.join("relu.py"), "relu from file").unwrap();
        let file = dir.join("problems.jsonl");
        std::fs::write(
            &file,
            "{\"level\":1,\"id\":19,\"name\":\"ReLU\",\"path\":\"relu.py\"}\n\n\
             {\"level\":1,\"id\":23,\"reference_code\":\"softmax\"}\n",
        )
        .unwrap();
        let r = ProblemRegistry::load(&file).unwrap();
        assert_eq!(
            r.get(ProblemRef { level: 1, id: 19 })
                .unwrap()
                .reference_code,
            "relu from file"
        );
        assert_eq!(
            r.get(ProblemRef { level: 1, id: 23 }).unwrap().info.name,
            "problem_23"
        );

        std::fs::write(
            &file,
            "{\"level\":1,\"id\":1,\"reference_code\":\"a\"}\n{\"level\":1,\"id\":1,\"reference_code\":\"b\"}\n",
        )
        .unwrap();
        let err = ProblemRegistry::load(&file).unwrap_err().to_string();
        assert!(err.contains("both level 1 problem 1"), "{err}");
        std::fs::write(&file, "{\"level\":1,\"id\":1}\n").unwrap();
        let err = ProblemRegistry::load(&file).unwrap_err().to_string();
        assert!(
            err.contains("line 1") && err.contains("exactly one"),
            "{err}"
        );
        std::fs::write(&file, "").unwrap();
        assert!(matches!(
            ProblemRegistry::load(&file),
            Err(RegistryError::Empty(_))
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_path_comes_from_crucible_problems_then_kernelbench_root() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            configured_path(env(&[
                ("KERNELBENCH_ROOT", "/kb"),
                ("CRUCIBLE_PROBLEMS", "/p.jsonl")
            ])),
            Some(PathBuf::from("/p.jsonl"))
        );
        assert_eq!(
            configured_path(env(&[("KERNELBENCH_ROOT", "/kb")])),
            Some(PathBuf::from("/kb"))
        );
        assert_eq!(configured_path(env(&[])), None);
    }
}
