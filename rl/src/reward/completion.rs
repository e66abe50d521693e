//! A model's raw completion, parsed: the kernel extracted from it (`<KERNEL>` + fenced block,
//! `<think>`/`<thinking>` sections, falling back to the first fenced block) and the facts the
//! reward needs of it (docs/REWARDS.md).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a completion holds, as far as the reward cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCompletion {
    /// The candidate source, when one was found.
    pub kernel: Option<String>,
    /// A `<KERNEL>` tag followed by a fenced code block: the format the prompts ask for.
    pub format_ok: bool,
    /// The text of the first `<think>` or `<thinking>` section, trimmed, when not empty.
    pub thinking: Option<String>,
}

/// What the reward and the feedback need of a completion, without the text: small enough to
/// keep per rollout until its evaluation finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CompletionFacts {
    /// A `<KERNEL>` tag followed by a fenced code block.
    pub format_ok: bool,
    /// A non-blank `<think>`/`<thinking>` section.
    pub thinking: bool,
    /// Length of the extracted kernel in bytes; None when no kernel was found.
    pub kernel_bytes: Option<usize>,
}

impl ParsedCompletion {
    /// What the reward needs of this completion, dropping the text.
    pub fn facts(&self) -> CompletionFacts {
        CompletionFacts {
            format_ok: self.format_ok,
            thinking: self.thinking.is_some(),
            kernel_bytes: self.kernel.as_ref().map(String::len),
        }
    }
}

/// Splits a completion into kernel, format and thinking. A completion without `<KERNEL>`
/// still gives the first fenced block as its kernel (the recipes evaluate it) but not the
/// format score.
pub fn parse_completion(text: &str) -> ParsedCompletion {
    let thinking = ["think", "thinking"]
        .iter()
        .filter_map(|tag| section(text, tag))
        .map(str::trim)
        .find(|t| !t.is_empty())
        .map(str::to_owned);
    // Code inside the thinking is a draft, not the answer.
    let answer = strip_sections(text);
    let tagged = answer
        .find("<KERNEL>")
        .and_then(|at| first_fenced_block(&answer[at + "<KERNEL>".len()..]));
    let kernel = tagged.or_else(|| first_fenced_block(&answer));
    ParsedCompletion {
        format_ok: tagged.is_some(),
        kernel: kernel.map(str::to_owned),
        thinking,
    }
}

fn section<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = text.find(&open)? + open.len();
    let end = text[start..].find(&close)? + start;
    Some(&text[start..end])
}

fn strip_sections(text: &str) -> String {
    let mut out = text.to_owned();
    for tag in ["think", "thinking"] {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        while let Some(start) = out.find(&open) {
            match out[start..].find(&close) {
                Some(len) => out.replace_range(start..start + len + close.len(), ""),
                None => break,
            }
        }
    }
    out
}

/// The body of the first ``` fenced block (its info string, e.g. `python`, dropped).
fn first_fenced_block(text: &str) -> Option<&str> {
    let start = text.find("```")?;
    let after_fence = &text[start + 3..];
    let body_start = after_fence.find('\n')? + 1;
    let body = &after_fence[body_start..];
    let end = body.find("```")?;
    let code = body[..end].trim_end_matches([' ', '\t']);
    (!code.trim().is_empty()).then_some(code)
}
