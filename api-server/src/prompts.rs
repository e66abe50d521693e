//! Prompts for problems: the examples each option carries, chosen here, and the text from
//! `crucible_rl::prompt` in the words of the configured templates. [`first_prompt`] is the
//! one entry point every route that hands out a first-turn prompt uses
//! (`GET /problems/{level}/{id}/prompt`, `POST /prompts`, `POST /episodes`).
//!
//! - `config`: the templates and the RA-ICL corpus, loaded at start.
//! - `worked`: the built-in worked examples of one-shot and few-shot prompts.

pub mod config;
pub mod worked;

use crate::error::HttpError;
use crate::extract::{ApiJson, ApiQuery, ProblemPath, problem_not_found};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use crucible_corpus::ProblemQuery;
use crucible_rl::prompt::{
    Prompt, PromptOption, PromptRequest, PromptSettings, WorkedExample, first_turn_with,
};
use crucible_shared::{
    ApiError, ApiErrorCode, CodeError, MAX_CODE_BYTES, ProblemRef, check_code, problem_hash,
};

/// The first-turn prompt of a problem given by its reference source (and its registry entry,
/// when it has one). Retrieval leaves out the corpus entries of the problem itself: those
/// whose `problem_hash` is the hash of `reference_code` (a registered problem's hash is
/// the hash of its source, so both ways of naming it agree).
pub fn first_prompt(
    state: &AppState,
    reference_code: &str,
    _problem: Option<ProblemRef>,
    settings: &PromptSettings,
) -> Result<Prompt, ApiError> {
    let settings = settings.resolved()?;
    let count = settings.example_count();
    let examples = match settings.option {
        PromptOption::ZeroShot => Vec::new(),
        PromptOption::OneShot | PromptOption::FewShot => worked::examples(settings.backend, count),
        PromptOption::Raicl => retrieve(state, reference_code, &settings, count)?,
    };
    Ok(first_turn_with(
        &state.prompts.templates,
        reference_code,
        &settings,
        &examples,
    ))
}

fn retrieve(
    state: &AppState,
    reference_code: &str,
    settings: &PromptSettings,
    k: usize,
) -> Result<Vec<WorkedExample>, ApiError> {
    let Some(corpus) = &state.prompts.corpus else {
        let mut err = ApiError::new(
            ApiErrorCode::Conflict,
            "option raicl needs a kernel corpus and this server has none (build one with \
             `crucible corpus index` and start the server with CRUCIBLE_CORPUS=<dir>)",
        );
        err.field = Some("option".into());
        return Err(err);
    };
    let query = ProblemQuery::from_reference(reference_code);
    let own = problem_hash(reference_code);
    let hits = corpus
        .search(&query, settings.backend, k, Some(&own))
        .map_err(|e| {
            tracing::error!(error = %e, "corpus search failed");
            ApiError::new(
                ApiErrorCode::Internal,
                "the kernel corpus could not be searched",
            )
        })?;
    Ok(hits
        .into_iter()
        .map(|h| WorkedExample {
            id: h.entry.id,
            backend: h.entry.backend,
            description: h.entry.description,
            code: h.entry.code,
        })
        .collect())
}

/// A registered problem's first-turn prompt.
#[utoipa::path(
    get, path = "/problems/{level}/{id}/prompt", tag = "problems",
    params(
        ("level" = u32, Path, description = "KernelBench level"),
        ("id" = u32, Path, description = "Problem id within the level"),
        PromptSettings,
    ),
    responses(
        (status = 200, description = "The prompt, its settings (k resolved), the ids of the examples it carries and the response format", body = Prompt),
        (status = 404, description = "Not registered", body = ApiError),
        (status = 409, description = "option=raicl on a server without a corpus (CRUCIBLE_CORPUS)", body = ApiError),
    )
)]
pub async fn problem_prompt(
    State(state): State<AppState>,
    ProblemPath(key): ProblemPath,
    ApiQuery(settings): ApiQuery<PromptSettings>,
) -> Result<Json<Prompt>, HttpError> {
    let problem = state
        .problems
        .get(key)
        .ok_or_else(|| problem_not_found(key.level, key.id))?;
    Ok(Json(first_prompt(
        &state,
        &problem.reference_code,
        Some(key),
        &settings,
    )?))
}

/// The first-turn prompt of a registered problem or of a source sent whole.
#[utoipa::path(
    post, path = "/prompts", tag = "problems",
    request_body = PromptRequest,
    responses(
        (status = 200, description = "The prompt, its settings (k resolved), the ids of the examples it carries and the response format", body = Prompt),
        (status = 409, description = "option=raicl on a server without a corpus (CRUCIBLE_CORPUS)", body = ApiError),
    )
)]
pub async fn prompt(
    State(state): State<AppState>,
    ApiJson(request): ApiJson<PromptRequest>,
) -> Result<Json<Prompt>, HttpError> {
    if let Some(code) = &request.reference_code
        && let Err(e) = check_code(code)
    {
        let message = match e {
            // As `/evaluate` words it (this check is new: the prompt path did not have it).
            CodeError::Nul => e.to_string(),
            CodeError::Empty | CodeError::TooLarge(_) => {
                format!("reference_code must be 1-{MAX_CODE_BYTES} bytes")
            }
        };
        return Err(ApiError::invalid("reference_code", message).into());
    }
    let code = crate::submission::resolve_reference(
        request.problem,
        request.reference_code,
        &state.problems,
        "",
    )?;
    Ok(Json(first_prompt(
        &state,
        &code,
        request.problem,
        &request.settings,
    )?))
}
