//! The prompt a problem gets: the task stated in our own words, the problem's source, optional
//! worked examples (one-shot, few-shot, or retrieved: RA-ICL) and the format the response must
//! follow (`<think>` when asked for, then `<KERNEL>` and one fenced block: what
//! [`crate::reward::parse_completion`] reads). Pure: the API picks the examples and calls
//! [`first_turn_with`]; the text comes from [`template::Templates`] (built in, or files a
//! deployment names).

pub mod template;

use crucible_shared::ApiError;
use crucible_shared::bounds::Bounds;
use crucible_shared::problem::ProblemRef;
use crucible_shared::request::Backend;
use serde::{Deserialize, Serialize};
use template::Templates;
use utoipa::{IntoParams, ToSchema};

/// `k` of a `few_shot` prompt: how many built-in worked examples of the backend it carries.
pub const FEW_SHOT_K: Bounds<u32> = Bounds {
    default: 3,
    min: 1,
    max: 3,
};
/// `k` of a `raicl` prompt: how many examples are retrieved (kernel_rl's `raicl_k`).
pub const RAICL_K: Bounds<u32> = Bounds {
    default: 3,
    min: 1,
    max: 8,
};

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

impl PromptOption {
    /// The wire name (`zero_shot`, ...), as a query parameter takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            PromptOption::ZeroShot => "zero_shot",
            PromptOption::OneShot => "one_shot",
            PromptOption::FewShot => "few_shot",
            PromptOption::Raicl => "raicl",
        }
    }
}

/// How a prompt is asked for (as `GET /problems/{level}/{id}/prompt`'s query, or a body's
/// `settings`); every field may be left out.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams,
)]
#[serde(default, deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PromptSettings {
    /// Which examples the prompt carries.
    pub option: PromptOption,
    /// What the kernel is to be written in.
    pub backend: Backend,
    /// Ask for reasoning in a `<think>` section first (kernel_rl asks only when its thinking
    /// weight is above 0).
    pub thinking: bool,
    /// How many examples a `few_shot` (1-3, default 3) or `raicl` (1-8, default 3) prompt
    /// carries; only those options take it. In a prompt's settings: the number used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k: Option<u32>,
}

impl PromptSettings {
    /// The settings with `k` resolved: its default filled in where the option takes one, a
    /// `k` out of bounds or given to an option that takes none refused.
    pub fn resolved(self) -> Result<Self, ApiError> {
        let bounds = match self.option {
            PromptOption::FewShot => FEW_SHOT_K,
            PromptOption::Raicl => RAICL_K,
            PromptOption::ZeroShot | PromptOption::OneShot => {
                return match self.k {
                    None => Ok(self),
                    Some(_) => Err(ApiError::invalid(
                        "k",
                        "k applies to the few_shot and raicl options only",
                    )),
                };
            }
        };
        let k = self.k.unwrap_or(bounds.default);
        if !(bounds.min..=bounds.max).contains(&k) {
            return Err(ApiError::invalid(
                "k",
                format!(
                    "k must be between {} and {} for this option",
                    bounds.min, bounds.max
                ),
            ));
        }
        Ok(Self { k: Some(k), ..self })
    }

    /// How many examples the prompt carries (after [`PromptSettings::resolved`]).
    pub fn example_count(&self) -> usize {
        match self.option {
            PromptOption::ZeroShot => 0,
            PromptOption::OneShot => 1,
            PromptOption::FewShot | PromptOption::Raicl => self.k.unwrap_or(0) as usize,
        }
    }
}

/// `POST /prompts`: the first-turn prompt of a registered problem or of a source sent whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptRequest {
    /// A registered problem (`GET /problems`); exclusive with `reference_code`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemRef>,
    /// The problem's KernelBench source; exclusive with `problem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_code: Option<String>,
    /// How the prompt is asked for.
    #[serde(default)]
    pub settings: PromptSettings,
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
    /// What the response must look like (also inside `text`): what the reward parser reads.
    pub response_format: String,
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
/// `examples` (already chosen for `settings.option`), in the built-in words.
pub fn first_turn(
    reference_code: &str,
    settings: &PromptSettings,
    examples: &[WorkedExample],
) -> Prompt {
    first_turn_with(&Templates::default(), reference_code, settings, examples)
}

/// [`first_turn`] in the words of `templates`.
pub fn first_turn_with(
    templates: &Templates,
    reference_code: &str,
    settings: &PromptSettings,
    examples: &[WorkedExample],
) -> Prompt {
    let format = response_format(settings.backend, settings.thinking);
    let rendered_examples: String = examples
        .iter()
        .enumerate()
        .map(|(n, example)| {
            templates.example.render(|name| match name {
                "number" => (n + 1).to_string(),
                "id" => example.id.clone(),
                "description" => example.description.trim_end().to_string(),
                _ => example.code.trim_end().to_string(),
            })
        })
        .collect();
    let text = templates.first_turn.render(|name| match name {
        "backend" => backend_words(settings.backend).to_string(),
        "examples" => rendered_examples.clone(),
        "reference_code" => reference_code.trim_end().to_string(),
        _ => format.clone(),
    });
    Prompt {
        text,
        settings: *settings,
        examples: examples.iter().map(|e| e.id.clone()).collect(),
        response_format: format,
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
            k: None,
        };
        let example = WorkedExample {
            id: "add".into(),
            backend: Backend::Triton,
            description: "adds two tensors".into(),
            code: "class ModelNew: pass".into(),
        };
        let p = first_turn("class Model: pass", &settings, &[example]);
        assert!(p.text.contains("class Model: pass"));
        assert!(
            p.text
                .contains("Example 1, a problem:\n```python\nadds two tensors\n```")
        );
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

    #[test]
    fn option_names_are_the_wire_names() {
        use PromptOption::*;
        for o in [ZeroShot, OneShot, FewShot, Raicl] {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
    }

    #[test]
    fn k_defaults_per_option_and_is_refused_where_it_means_nothing() {
        let with = |option, k| PromptSettings {
            option,
            k,
            ..PromptSettings::default()
        };
        let raicl = with(PromptOption::Raicl, None).resolved().unwrap();
        assert_eq!((raicl.k, raicl.example_count()), (Some(RAICL_K.default), 3));
        assert_eq!(
            with(PromptOption::FewShot, Some(2))
                .resolved()
                .unwrap()
                .example_count(),
            2
        );
        assert_eq!(
            with(PromptOption::OneShot, None)
                .resolved()
                .unwrap()
                .example_count(),
            1
        );
        for bad in [
            with(PromptOption::ZeroShot, Some(1)),
            with(PromptOption::Raicl, Some(0)),
            with(PromptOption::Raicl, Some(RAICL_K.max + 1)),
            with(PromptOption::FewShot, Some(FEW_SHOT_K.max + 1)),
        ] {
            let err = bad.resolved().unwrap_err();
            assert_eq!(err.field.as_deref(), Some("k"), "{bad:?}");
        }
    }

    #[test]
    fn a_response_written_to_the_prompts_format_parses() {
        for thinking in [false, true] {
            let settings = PromptSettings {
                thinking,
                ..PromptSettings::default()
            };
            let p = first_turn("class Model: pass", &settings, &[]);
            assert!(p.text.contains(&p.response_format));
            let kernel = "import torch\nclass ModelNew(torch.nn.Module):\n    pass";
            let think = if thinking {
                "<think>fuse the loads</think>\n"
            } else {
                ""
            };
            let answer = format!("{think}<KERNEL>\n```python\n{kernel}\n```\n");
            let parsed = parse_completion(&answer);
            assert!(parsed.format_ok, "{answer}");
            assert_eq!(parsed.kernel.as_deref().map(str::trim), Some(kernel));
            assert_eq!(parsed.thinking.is_some(), thinking);
        }
    }
}
