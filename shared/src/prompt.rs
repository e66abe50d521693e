//! The prompt a problem gets: the task stated in our own words, the problem's source, optional
//! worked examples (one-shot, few-shot, or retrieved: RA-ICL) and the format the response must
//! follow (`<think>` when asked for, then `<KERNEL>` and one fenced block: what
//! [`crate::reward::parse_completion`] reads). Pure: the API picks the examples and calls
//! [`first_turn`].

use crate::request::Backend;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Which examples a first-turn prompt carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PromptOption {
    /// The problem alone.
    #[default]
    ZeroShot,
    /// One built-in worked example.
    OneShot,
    /// A few built-in worked examples.
    FewShot,
    /// Examples retrieved from the server's kernel corpus for this problem (RA-ICL).
    Raicl,
}

/// How a prompt is asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PromptSettings {
    /// Which examples the prompt carries.
    pub option: PromptOption,
    /// What the kernel is to be written in.
    pub backend: Backend,
    /// Ask for reasoning in a `<think>` section first (kernel_rl asks only when its thinking
    /// weight is above 0).
    pub thinking: bool,
}

/// A worked example: a problem described and a kernel that solves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkedExample {
    /// Its id (built-in, or the corpus entry's).
    pub id: String,
    /// What its code is written in.
    pub backend: Backend,
    /// What it computes, in words or as the reference source.
    pub description: String,
    /// The solution's source (`class ModelNew`).
    pub code: String,
}

/// A prompt, ready to send to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Prompt {
    /// The whole text.
    pub text: String,
    /// How it was asked for.
    pub settings: PromptSettings,
    /// The ids of the worked examples it carries, in order.
    pub examples: Vec<String>,
}

/// What the response must look like: the same words in every prompt of every turn.
pub fn response_format(backend: Backend, thinking: bool) -> String {
    let think = if thinking {
        "First reason about the problem inside <think> ... </think>. Then "
    } else {
        ""
    };
    format!(
        "{think}write the line <KERNEL> followed by one fenced code block (```python ... ```) \
         holding the complete Python module: imports, the {} kernel(s) and a class ModelNew \
         with the same constructor and forward signature as Model. Nothing after the block \
         is read.",
        backend_words(backend)
    )
}

fn backend_words(backend: Backend) -> &'static str {
    match backend {
        Backend::Triton => "Triton (`@triton.jit`)",
        Backend::Cuda => "CUDA C++ (built with torch.utils.cpp_extension.load_inline)",
    }
}

/// The first turn's prompt for a problem whose reference source is `reference_code`, carrying
/// `examples` (already chosen for `settings.option`).
pub fn first_turn(
    reference_code: &str,
    settings: &PromptSettings,
    examples: &[WorkedExample],
) -> Prompt {
    let mut text = format!(
        "You write fast GPU kernels. Below is a PyTorch module, Model, with get_inputs() and \
         get_init_inputs(). Replace its computation with custom {} kernels in a new module, \
         ModelNew, that returns the same outputs (within tolerance) faster. Calling PyTorch \
         operators for the work itself, falling back to them, or reusing Model does not count.\n\n",
        backend_words(settings.backend)
    );
    for (n, example) in examples.iter().enumerate() {
        text.push_str(&format!(
            "Example {}:\n{}\n\nA solution:\n```python\n{}\n```\n\n",
            n + 1,
            example.description.trim_end(),
            example.code.trim_end()
        ));
    }
    text.push_str(&format!(
        "The problem:\n```python\n{}\n```\n\n{}\n",
        reference_code.trim_end(),
        response_format(settings.backend, settings.thinking)
    ));
    Prompt {
        text,
        settings: *settings,
        examples: examples.iter().map(|e| e.id.clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reward::parse_completion;

    #[test]
    fn the_prompt_carries_the_problem_the_examples_and_the_format() {
        let settings = PromptSettings {
            option: PromptOption::OneShot,
            backend: Backend::Triton,
            thinking: true,
        };
        let example = WorkedExample {
            id: "add".into(),
            backend: Backend::Triton,
            description: "adds two tensors".into(),
            code: "class ModelNew: pass".into(),
        };
        let p = first_turn("class Model: pass", &settings, &[example]);
        assert!(p.text.contains("class Model: pass"));
        assert!(p.text.contains("Example 1:\nadds two tensors"));
        assert!(p.text.contains("<think>") && p.text.contains("<KERNEL>"));
        assert_eq!(p.examples, ["add"]);
        let zero = first_turn("class Model: pass", &PromptSettings::default(), &[]);
        assert!(!zero.text.contains("<think>") && !zero.text.contains("Example"));
    }

    #[test]
    fn a_response_in_the_asked_format_parses_with_its_kernel() {
        let answer = "<think>tile it</think>\n<KERNEL>\n```python\nclass ModelNew: pass\n```";
        let parsed = parse_completion(answer);
        assert!(parsed.format_ok && parsed.thinking.is_some());
        assert!(response_format(Backend::Cuda, false).contains("load_inline"));
    }
}
