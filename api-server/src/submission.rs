//! What every submission path (`POST /evaluate`, `/evaluate/batch`, `/rollouts`) shares: the
//! one resolver of "a registered problem or its source", and the queued spec with its seed.

use crate::auth::Caller;
use crate::problems::ProblemRegistry;
use crucible_shared::{ApiError, EvaluateRequest, ProblemRef, TaskSpec};

/// The message of a request that names a problem and sends a source as well, or neither.
pub const PROBLEM_OR_REFERENCE: &str = "give exactly one of problem and reference_code";

/// The reference source a request evaluates against: the registered `problem`'s, or the
/// `reference_code` it sent. Exactly one must be given, so a result never judges code other
/// than the one named. Both given is blamed on `{prefix}problem`, neither on
/// `{prefix}reference_code` (the field most clients send); an unknown problem is blamed on
/// `{prefix}problem` by the registry.
pub fn resolve_reference(
    problem: Option<ProblemRef>,
    reference_code: Option<String>,
    problems: &ProblemRegistry,
    prefix: &str,
) -> Result<String, ApiError> {
    match (problem, reference_code) {
        (Some(key), None) => Ok(problems
            .resolve(key, &format!("{prefix}problem"))?
            .reference_code
            .clone()),
        (None, Some(code)) => Ok(code),
        (Some(_), Some(_)) => Err(ApiError::invalid(
            &format!("{prefix}problem"),
            PROBLEM_OR_REFERENCE,
        )),
        (None, None) => Err(ApiError::invalid(
            &format!("{prefix}reference_code"),
            PROBLEM_OR_REFERENCE,
        )),
    }
}

/// [`resolve_reference`] for an `EvaluateRequest`, whose absent `reference_code` is empty:
/// the request gets the source it will be evaluated against.
pub fn resolve_request(
    request: &mut EvaluateRequest,
    problems: &ProblemRegistry,
    prefix: &str,
) -> Result<(), ApiError> {
    let sent = Some(std::mem::take(&mut request.reference_code)).filter(|c| !c.is_empty());
    request.reference_code = resolve_reference(request.problem, sent, problems, prefix)?;
    Ok(())
}

/// The seed is fixed at submission so a retried attempt evaluates the same inputs; the spec
/// carries the submitter's cache namespace (`cache_scope`, the reference timing cache's scope).
pub fn spec_of(request: EvaluateRequest, caller: &Caller) -> TaskSpec {
    let seed = request.seed.unwrap_or_else(|| {
        u64::from_le_bytes(
            uuid::Uuid::new_v4().as_bytes()[..8]
                .try_into()
                .expect("8 bytes"),
        ) >> 1
    });
    TaskSpec {
        cache_scope: Some(caller.tenant.cache_namespace().to_owned()),
        ..TaskSpec::new(request, seed)
    }
}
