//! Problems named by reference: what a registry entry is, how a KernelBench file name maps to
//! one, and the content hash that versions it. The registry itself (reading a checkout or a
//! JSONL file) lives in the API server; this module is pure.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

/// A problem named by KernelBench level and problem id, e.g. `{level: 1, id: 19}` for
/// `level1/19_ReLU.py`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(deny_unknown_fields)]
pub struct ProblemRef {
    /// The KernelBench level (`levelN/` directory).
    pub level: u32,
    /// The number before the name in the file name (`19` in `19_ReLU.py`); unique within
    /// its level only.
    pub id: u32,
}

impl std::fmt::Display for ProblemRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "level {} problem {}", self.level, self.id)
    }
}

/// One problem of the registry, without its source (`GET /problems`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProblemInfo {
    /// The KernelBench level (`levelN/` directory).
    pub level: u32,
    /// The number before the name in the file name; unique within its level only.
    pub id: u32,
    /// The name after the id in the file name (`ReLU`), or the JSONL entry's `name`.
    pub name: String,
    /// [`problem_hash`] of `reference_code`: results carry it, so a changed problem never
    /// passes for the old one.
    pub hash: String,
}

/// One problem with its source (`GET /problems/{level}/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// Level, id, name and hash, flattened into this object.
    #[serde(flatten)]
    pub info: ProblemInfo,
    /// KernelBench problem source (`class Model`, `get_inputs()`, `get_init_inputs()`): what
    /// a candidate must match and is timed against.
    pub reference_code: String,
}

impl Problem {
    /// A problem with its hash computed from `reference_code`, so the two cannot disagree.
    pub fn new(level: u32, id: u32, name: impl Into<String>, reference_code: String) -> Self {
        Self {
            info: ProblemInfo {
                level,
                id,
                name: name.into(),
                hash: problem_hash(&reference_code),
            },
            reference_code,
        }
    }

    /// The `{level, id}` that names this problem in requests.
    pub fn reference(&self) -> ProblemRef {
        ProblemRef {
            level: self.info.level,
            id: self.info.id,
        }
    }
}

/// `GET /problems`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProblemList {
    /// Every problem of the registry.
    pub problems: Vec<ProblemInfo>,
    /// How many `problems` holds.
    pub total: usize,
}

/// The version of a problem: `sha256:` and the hex SHA-256 of its reference source.
pub fn problem_hash(reference_code: &str) -> String {
    let digest = Sha256::digest(reference_code.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `(id, name)` of a KernelBench problem file name such as `19_ReLU.py`; None for any other
/// file.
pub fn parse_problem_file_name(file_name: &str) -> Option<(u32, String)> {
    let stem = file_name.strip_suffix(".py")?;
    let (id, name) = stem.split_once('_')?;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || name.is_empty() {
        return None;
    }
    Some((id.parse().ok()?, name.to_owned()))
}

/// The level of a KernelBench level directory name such as `level1`.
pub fn parse_level_dir_name(dir_name: &str) -> Option<u32> {
    let n = dir_name.strip_prefix("level")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernelbench_file_names_parse_to_id_and_name() {
        assert_eq!(
            parse_problem_file_name("19_ReLU.py"),
            Some((19, "ReLU".to_owned()))
        );
        assert_eq!(
            parse_problem_file_name("1_Conv2D_ReLU_BiasAdd.py"),
            Some((1, "Conv2D_ReLU_BiasAdd".to_owned()))
        );
        for other in [
            "ReLU.py",
            "19_ReLU.txt",
            "_ReLU.py",
            "19_.py",
            "x9_ReLU.py",
            "__init__.py",
        ] {
            assert_eq!(parse_problem_file_name(other), None, "{other}");
        }
    }

    #[test]
    fn level_dirs_parse() {
        assert_eq!(parse_level_dir_name("level1"), Some(1));
        assert_eq!(parse_level_dir_name("level12"), Some(12));
        assert_eq!(parse_level_dir_name("level"), None);
        assert_eq!(parse_level_dir_name("levelx"), None);
        assert_eq!(parse_level_dir_name("baseline_times"), None);
    }

    #[test]
    fn the_hash_follows_the_content() {
        let a = problem_hash("class Model: pass\n");
        assert!(a.starts_with("sha256:") && a.len() == 7 + 64);
        assert_eq!(a, problem_hash("class Model: pass\n"));
        assert_ne!(a, problem_hash("class Model: pass \n"));
    }
}
