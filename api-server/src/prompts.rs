//! Prompts for problems: the examples each option carries, chosen here, and the text from
//! `crucible_shared::prompt`. [`first_prompt`] is the one entry point every route that hands
//! out a first-turn prompt uses (`GET /problems/{level}/{id}/prompt`, `POST /episodes`).

use crate::state::AppState;
use crucible_shared::prompt::{Prompt, PromptOption, PromptSettings, first_turn};
use crucible_shared::{ApiError, ProblemRef};

/// The first-turn prompt of a problem given by its reference source (and its registry entry,
/// when it has one: retrieval leaves out the problem's own solution by it).
pub fn first_prompt(
    _state: &AppState,
    reference_code: &str,
    _problem: Option<ProblemRef>,
    settings: &PromptSettings,
) -> Result<Prompt, ApiError> {
    match settings.option {
        PromptOption::ZeroShot => Ok(first_turn(reference_code, settings, &[])),
        other => Err(ApiError::invalid(
            "option",
            format!("{other:?} prompts are not served yet"),
        )),
    }
}
