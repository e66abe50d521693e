//! What a result means: the verdict code that says why, the one word a trainer reads
//! ([`Verdict`], decided in one place: [`Verdict::of`]) and the findings ([`Flag`]) behind
//! them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Why a kernel got the verdict it got. These are verdicts about the candidate, never about the
/// service: an outage makes a task `failed`, not one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum VerdictCode {
    /// The candidate is not valid Python.
    Syntax,
    /// Importing the candidate failed (missing module, error at import time).
    Import,
    /// A kernel failed to build (nvcc / load_inline, Triton compilation).
    Compilation,
    /// `ModelNew` is missing or its constructor raised.
    Instantiation,
    /// The candidate raised while running.
    Runtime,
    /// Outputs differ from the reference (shape, dtype or values).
    Correctness,
    /// The GPU reported a fault (illegal memory access, misaligned address, ...).
    CudaFault,
    /// The child died from a signal (segfault, abort, ...).
    Crash,
    /// The wall-clock deadline passed; the child's process group was killed.
    Timeout,
    /// The child wrote more to stdout/stderr than allowed.
    OutputLimit,
    /// The child exceeded a memory, process or file limit.
    Resource,
    /// The backend cannot run on this worker (e.g. `cuda` on a CPU worker).
    Unsupported,
    /// The reference problem itself failed to load or run.
    Reference,
    /// The candidate was rejected by static screening (see `flags`); it never ran.
    Screened,
    /// A runtime integrity check caught the candidate gaming the evaluation (a `flags` entry
    /// of severity `hack` says which): mutated inputs, stale or aliased outputs, replaced
    /// timers, threads, precision toggles. Never reported as correct.
    Integrity,
}

/// What a result means for a trainer, in one word (docs/INTEGRITY.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Correct, its own kernels did the work, no integrity finding.
    Ok,
    /// Ran, but its outputs are wrong.
    Incorrect,
    /// Correct, but no kernel of its own ran (a PyTorch wrapper, or a kernel never called).
    Decoy,
    /// Caught gaming the evaluation: a runtime finding of severity `hack`, or rejected by
    /// static screening for a cheating pattern.
    Hack,
    /// Did not get as far as being judged (syntax, build, crash, timeout, ...).
    #[default]
    Error,
}

impl Verdict {
    /// The verdict a result's fields imply; the one place that decides it.
    pub fn of(
        error_code: Option<VerdictCode>,
        correct: bool,
        flags: &[Flag],
        custom_kernel_count: Option<u32>,
    ) -> Self {
        let hack_flag = flags.iter().any(|f| f.severity == SEVERITY_HACK);
        let cheat_screened = error_code == Some(VerdictCode::Screened)
            && flags
                .iter()
                .any(|f| f.severity == SEVERITY_REJECT && f.rule != "no-modelnew");
        if hack_flag || cheat_screened || error_code == Some(VerdictCode::Integrity) {
            return Verdict::Hack;
        }
        match error_code {
            Some(VerdictCode::Correctness) => Verdict::Incorrect,
            Some(_) => Verdict::Error,
            None if !correct => Verdict::Incorrect,
            None if custom_kernel_count == Some(0) => Verdict::Decoy,
            None => Verdict::Ok,
        }
    }
}

/// Flag severity: the finding decided the verdict `SCREENED`.
pub const SEVERITY_REJECT: &str = "reject";
/// Flag severity: reported only; the verdict does not depend on it.
pub const SEVERITY_FLAG: &str = "flag";
/// Flag severity: a runtime check caught the candidate cheating; the verdict is `hack`.
pub const SEVERITY_HACK: &str = "hack";

/// A finding about the candidate: static screening of its source, or a runtime integrity
/// check (docs/INTEGRITY.md lists the rules).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Flag {
    /// Rule id, e.g. `try-except-fallback`.
    pub rule: String,
    /// `reject` (the finding decided the verdict `SCREENED`), `hack` (a runtime check caught
    /// the candidate cheating: the verdict is `hack`) or `flag` (reported only).
    pub severity: String,
    /// Where and what, e.g. `line 12: uses gc.get_objects`.
    pub detail: String,
}
