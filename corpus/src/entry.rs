//! One corpus line: a solved kernel and, optionally, the problem it solves (by the problem's
//! content hash, the same hash the registry shows), so retrieval can leave out a problem's own
//! solutions. Read whole and checked before anything is written.

use crate::CorpusError;
use crucible_shared::{Backend, CodeError, MAX_CODE_BYTES, check_code};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// One solved kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorpusEntry {
    /// Unique within the corpus; what a prompt lists as its example ids.
    pub id: String,
    /// What the code is written in; a prompt only carries examples of its own backend.
    pub backend: Backend,
    /// What it computes, in words or as the reference source.
    pub description: String,
    /// The solution's source (`class ModelNew`).
    pub code: String,
    /// `sha256:<hex>` of the reference source it solves (`GET /problems` shows it as `hash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem_hash: Option<String>,
}

impl CorpusEntry {
    fn check(&self) -> Result<(), String> {
        if self.id.trim().is_empty() {
            return Err("id is empty".into());
        }
        match check_code(&self.code) {
            Ok(()) => {}
            Err(CodeError::Empty) => return Err("code is empty".into()),
            Err(CodeError::TooLarge(_)) => return Err(too_large("code")),
            Err(e @ CodeError::Nul) => return Err(format!("code {e}")),
        }
        // A description is text, not code: only its size is bounded (by the code's bound).
        if self.description.len() > MAX_CODE_BYTES {
            return Err(too_large("description"));
        }
        if let Some(hash) = &self.problem_hash {
            let hex = hash.strip_prefix("sha256:").unwrap_or("");
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "problem_hash {hash:?} is not sha256:<64 hex digits>"
                ));
            }
        }
        Ok(())
    }
}

fn too_large(field: &str) -> String {
    format!("{field} is larger than {MAX_CODE_BYTES} bytes")
}

/// Every entry of a JSONL corpus (`path` names it in errors); blank lines are skipped. The
/// first bad line (not JSON, an unknown field, an empty id or code, a duplicate id) is an
/// error naming its line.
pub fn parse_jsonl(text: &str, path: &Path) -> Result<Vec<CorpusEntry>, CorpusError> {
    let mut entries = Vec::new();
    let mut first_line: HashMap<String, usize> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| CorpusError::Line {
            path: path.to_owned(),
            line: n + 1,
            message,
        };
        let entry: CorpusEntry = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        entry.check().map_err(bad)?;
        if let Some(first) = first_line.insert(entry.id.clone(), n + 1) {
            return Err(bad(format!("id {:?} is also on line {first}", entry.id)));
        }
        entries.push(entry);
    }
    if entries.is_empty() {
        return Err(CorpusError::Empty(path.to_owned()));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn line_error(text: &str) -> (usize, String) {
        match parse_jsonl(text, Path::new("c.jsonl")).unwrap_err() {
            CorpusError::Line { line, message, .. } => (line, message),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn good_lines_parse_and_bad_ones_name_their_line() {
        let good = format!(
            "{{\"id\":\"a\",\"backend\":\"triton\",\"description\":\"d\",\"code\":\"c\",\"problem_hash\":\"{HASH}\"}}\n\n\
             {{\"id\":\"b\",\"backend\":\"cuda\",\"description\":\"\",\"code\":\"c\"}}\n"
        );
        let entries = parse_jsonl(&good, Path::new("c.jsonl")).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].backend, Backend::Cuda);

        let (line, msg) = line_error(&format!(
            "{}\n{{\"id\":\"a\"}}",
            good.lines().next().unwrap()
        ));
        assert_eq!(line, 2);
        assert!(msg.contains("missing field"), "{msg}");
        let (line, msg) = line_error(&format!("{good}{}", good.lines().next().unwrap()));
        assert_eq!(line, 4);
        assert!(msg.contains("also on line 1"), "{msg}");
        let (_, msg) = line_error(
            "{\"id\":\"a\",\"backend\":\"triton\",\"description\":\"\",\"code\":\"c\",\"problem\":1}",
        );
        assert!(msg.contains("unknown field"), "{msg}");
        let (_, msg) = line_error(
            "{\"id\":\"a\",\"backend\":\"triton\",\"description\":\"\",\"code\":\"c\",\"problem_hash\":\"md5:1\"}",
        );
        assert!(msg.contains("sha256"), "{msg}");
        let (_, msg) =
            line_error("{\"id\":\" \",\"backend\":\"triton\",\"description\":\"\",\"code\":\"c\"}");
        assert!(msg.contains("id is empty"), "{msg}");
        assert!(matches!(
            parse_jsonl("\n\n", Path::new("c.jsonl")),
            Err(CorpusError::Empty(_))
        ));
    }

    /// Code is checked as a request's is (`crucible_shared::check_code`): a NUL byte too.
    #[test]
    fn code_is_checked_as_a_requests_is() {
        let (_, msg) =
            line_error("{\"id\":\"a\",\"backend\":\"triton\",\"description\":\"\",\"code\":\" \"}");
        assert_eq!(msg, "code is empty");
        let (_, msg) = line_error(
            "{\"id\":\"a\",\"backend\":\"triton\",\"description\":\"\",\"code\":\"a\\u0000b\"}",
        );
        assert_eq!(msg, "code must not contain NUL bytes");
        let big = "x".repeat(MAX_CODE_BYTES + 1);
        let (_, msg) = line_error(&format!(
            "{{\"id\":\"a\",\"backend\":\"triton\",\"description\":\"{big}\",\"code\":\"c\"}}"
        ));
        assert_eq!(
            msg,
            format!("description is larger than {MAX_CODE_BYTES} bytes")
        );
    }
}
