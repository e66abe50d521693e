//! The harness's stages as its `stage` lines name them: a fixed list, so that an unknown name is
//! the service's fault, not the candidate's.

/// A stage of the harness, as its `{"event": "stage"}` lines name it (docs/harness-protocol.md).
/// The judge, trusted code, names its stages from a fixed list; a name outside it means the
/// harness and this worker disagree: a fault of the service, not of the candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The judge reads the spec and sets up the runner on the device.
    Setup,
    /// The reference model is imported.
    LoadReference,
    /// At the gate after the reference's import, waiting to be let go.
    Standby,
    /// The candidate is screened and imported in the runner (its extensions built).
    LoadCandidate,
    /// The runner builds `ModelNew` from the init inputs, as the judge built `Model`.
    Instantiate,
    /// The CPU stage's dry run: the candidate's Triton kernels compiled for the device.
    Precompile,
    /// The correctness trials.
    Correctness,
    /// The counted forward after the correctness trials.
    Profile,
    /// `reference_backend: compile`: the reference compiled with `torch.compile` (and run
    /// once), before the gate, so the compilation never holds the device's timing turn.
    CompileReference,
    /// At the gate before timing, waiting to time alone.
    TimingGate,
    /// Timing of the candidate (and of the reference, unless cached), once past the gate.
    Performance,
    /// The last checks, after `performance`.
    Integrity,
}

impl Stage {
    /// Every stage with its name on the wire.
    pub(super) const NAMES: [(Stage, &'static str); 12] = [
        (Stage::Setup, "setup"),
        (Stage::LoadReference, "load_reference"),
        (Stage::Standby, "standby"),
        (Stage::LoadCandidate, "load_candidate"),
        (Stage::Instantiate, "instantiate"),
        (Stage::Precompile, "precompile"),
        (Stage::Correctness, "correctness"),
        (Stage::Profile, "profile"),
        (Stage::CompileReference, "compile_reference"),
        (Stage::TimingGate, "timing_gate"),
        (Stage::Performance, "performance"),
        (Stage::Integrity, "integrity"),
    ];

    /// The stage a wire name stands for; `None` for a name the harness should never send.
    pub fn parse(name: &str) -> Option<Stage> {
        Self::NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(stage, _)| *stage)
    }

    /// The stage's name on the wire (and in verdict messages).
    pub fn as_str(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(stage, _)| *stage == self)
            .map_or("unknown", |(_, n)| n)
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
