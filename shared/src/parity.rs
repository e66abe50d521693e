//! The measurement options KernelBench and KernelGYM requests carry, on `EvaluateRequest`:
//! the numeric precision both models run in, how a call is timed, and what the candidate is
//! timed against. Each has the anchors' default, and a request that leaves all three at
//! their defaults keeps the cache keys it had before they existed. What each option does is
//! the harness's (`gpu-worker/harness/`, docs/harness-protocol.md, "Precision, timing method
//! and reference backend").

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One option's wire names, its default and `is_default`, written once for the three enums.
macro_rules! wire_names {
    ($name:ident { $($variant:ident => $wire:literal),+ $(,)? }) => {
        impl $name {
            /// The wire name, also what the cache keys and `spec.json` carry.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }

            /// Whether this is the default (then the cache keys leave it out).
            pub fn is_default(&self) -> bool {
                *self == Self::default()
            }
        }
    };
}

/// The floating-point precision both models run in. `fp32` leaves the problem as written;
/// `fp16`/`bf16` cast every floating-point input and both models' parameters and buffers,
/// as KernelBench's `precision` does. Tolerances stay the request's `atol`/`rtol` (default
/// 1e-2: KernelBench's tolerance for fp16 and bf16, and the one KernelGYM and the RL recipes
/// use for fp32).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// As the problem is written (its tensors are float32 unless it says otherwise).
    #[default]
    Fp32,
    /// IEEE half precision.
    Fp16,
    /// bfloat16.
    Bf16,
}
wire_names!(Precision { Fp32 => "fp32", Fp16 => "fp16", Bf16 => "bf16" });

/// How one call of a model is timed. Every method flushes the L2 cache (256 MB) before the
/// call and ends its window with a device-wide synchronize, so work left on side streams is
/// timed; they differ in the clock and in how many calls are made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimingMethod {
    /// CUDA events around each call; `num_perf_trials` timed calls (KernelBench's default).
    #[default]
    CudaEvent,
    /// CUDA events around each call; timed calls until they add up to 100 ms, as
    /// `triton.testing.do_bench` budgets them (at most `num_perf_trials`, at least 3). Not
    /// combined with adaptive `timing`.
    DoBench,
    /// The host's clock around each call and its device-wide synchronize: launch overhead
    /// included.
    HostTime,
}
wire_names!(TimingMethod { CudaEvent => "cuda_event", DoBench => "do_bench", HostTime => "host_time" });

/// What the candidate's speedup is measured against. Correctness is always checked against
/// the eager reference; `compile` times `torch.compile(reference)` instead (its compilation
/// happens in the warm-up calls, outside the timed window), cached like the eager timing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReferenceBackend {
    /// The reference `Model` as written.
    #[default]
    Eager,
    /// `torch.compile(Model)` with the default inductor backend.
    Compile,
}
wire_names!(ReferenceBackend { Eager => "eager", Compile => "compile" });

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_match_serde() {
        for (value, wire) in [
            (
                serde_json::to_value(Precision::Bf16),
                Precision::Bf16.as_str(),
            ),
            (
                serde_json::to_value(TimingMethod::DoBench),
                TimingMethod::DoBench.as_str(),
            ),
            (
                serde_json::to_value(TimingMethod::HostTime),
                TimingMethod::HostTime.as_str(),
            ),
            (
                serde_json::to_value(ReferenceBackend::Compile),
                ReferenceBackend::Compile.as_str(),
            ),
        ] {
            assert_eq!(value.unwrap(), serde_json::Value::String(wire.into()));
        }
    }

    #[test]
    fn defaults_are_the_anchors() {
        assert_eq!(Precision::default().as_str(), "fp32");
        assert_eq!(TimingMethod::default().as_str(), "cuda_event");
        assert_eq!(ReferenceBackend::default().as_str(), "eager");
        assert!(Precision::Fp32.is_default() && !Precision::Fp16.is_default());
    }

    #[test]
    fn unknown_names_are_refused() {
        assert!(serde_json::from_str::<Precision>("\"fp8\"").is_err());
        assert!(serde_json::from_str::<TimingMethod>("\"wall\"").is_err());
        assert!(serde_json::from_str::<ReferenceBackend>("\"inductor\"").is_err());
    }
}
