//! `--timing`, `--timing-target` and `--timing-max-ms`: the request's `timing` from the
//! command line, and `--precision`, `--timing-method`, `--reference-backend`, its measurement
//! options, for `crucible eval` and the rollout commands' evaluation settings. The defaults
//! and the options' names are the request's (`bounds.rs`, `parity.rs`), not written again.

use crucible_shared::bounds::{MAX_TIME_MS, TARGET_REL_ERROR};
use crucible_shared::{Precision, ReferenceBackend, TimingMethod, TimingMode, TimingRequest};
use serde::de::DeserializeOwned;

/// How many timed calls each model gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TimingArg {
    /// KernelBench's protocol: every `--perf-trials` call.
    #[default]
    Fixed,
    /// Stop once the median is known to `--timing-target` (relative standard error), or
    /// after `--timing-max-ms` of timed calls; at least 3 and at most `--perf-trials` calls.
    Adaptive,
}

/// The timing flags, flattened into a command.
#[derive(Debug, Clone, clap::Args)]
pub struct TimingArgs {
    /// `fixed` (every timed trial) or `adaptive` (stop early once the median is known well
    /// enough).
    #[arg(long, value_enum, default_value_t = TimingArg::Fixed)]
    pub timing: TimingArg,
    /// Adaptive timing: stop once the median's relative standard error is at most this.
    #[arg(long, default_value_t = TARGET_REL_ERROR.default)]
    pub timing_target: f64,
    /// Adaptive timing: stop once one model's timed calls have taken this many ms.
    #[arg(long, default_value_t = MAX_TIME_MS.default)]
    pub timing_max_ms: u32,
    /// `fp32` (as written, the default), `fp16` or `bf16`.
    #[arg(long, value_parser = wire_name::<Precision>)]
    pub precision: Option<Precision>,
    /// `cuda_event` (the default), `do_bench` or `host_time`.
    #[arg(long, value_parser = wire_name::<TimingMethod>)]
    pub timing_method: Option<TimingMethod>,
    /// `eager` (the default) or `compile` (the speedup against `torch.compile(reference)`).
    #[arg(long, value_parser = wire_name::<ReferenceBackend>)]
    pub reference_backend: Option<ReferenceBackend>,
}

/// One of a wire enum's names, as the API reads it (so the command line takes exactly the
/// request's names).
fn wire_name<T: DeserializeOwned>(name: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(name.to_owned()))
        .map_err(|e| format!("{name:?}: {e}"))
}

impl TimingArgs {
    /// The request's `timing`.
    pub fn request(&self) -> TimingRequest {
        TimingRequest {
            mode: match self.timing {
                TimingArg::Fixed => TimingMode::Fixed,
                TimingArg::Adaptive => TimingMode::Adaptive,
            },
            target_rel_error: self.timing_target,
            max_time_ms: self.timing_max_ms,
        }
    }

    /// Sets the measurement options given on the command line (the others keep the
    /// request's defaults).
    pub fn apply_options(&self, request: &mut crucible_shared::EvaluateRequest) {
        request.precision = self.precision.unwrap_or_default();
        request.timing_method = self.timing_method.unwrap_or_default();
        request.reference_backend = self.reference_backend.unwrap_or_default();
    }

    /// The rollout settings' `timing`: left out (the server's default) unless a flag changed it.
    pub fn setting(&self) -> Option<TimingRequest> {
        let request = self.request();
        (!request.is_default()).then_some(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        timing: TimingArgs,
    }

    fn parse(args: &[&str]) -> TimingArgs {
        Cmd::try_parse_from(std::iter::once("crucible").chain(args.iter().copied()))
            .unwrap()
            .timing
    }

    #[test]
    fn no_flag_is_the_fixed_default() {
        let t = parse(&[]);
        assert_eq!(t.request(), TimingRequest::default());
        assert_eq!(t.setting(), None);
    }

    #[test]
    fn adaptive_takes_the_request_defaults_and_the_given_numbers() {
        assert_eq!(
            parse(&["--timing", "adaptive"]).request(),
            TimingRequest::adaptive()
        );
        let t = parse(&[
            "--timing",
            "adaptive",
            "--timing-target",
            "0.01",
            "--timing-max-ms",
            "500",
        ]);
        assert_eq!(
            t.setting(),
            Some(TimingRequest {
                mode: TimingMode::Adaptive,
                target_rel_error: 0.01,
                max_time_ms: 500,
            })
        );
        assert!(Cmd::try_parse_from(["crucible", "--timing", "auto"]).is_err());
    }

    #[test]
    fn measurement_options_take_the_wire_names() {
        let t = parse(&[
            "--precision",
            "bf16",
            "--timing-method",
            "do_bench",
            "--reference-backend",
            "compile",
        ]);
        let mut request = crucible_shared::EvaluateRequest::new("r", "k");
        t.apply_options(&mut request);
        assert_eq!(request.precision, Precision::Bf16);
        assert_eq!(request.timing_method, TimingMethod::DoBench);
        assert_eq!(request.reference_backend, ReferenceBackend::Compile);
        assert_eq!(parse(&[]).precision, None);
        assert!(Cmd::try_parse_from(["crucible", "--precision", "fp8"]).is_err());
    }
}
