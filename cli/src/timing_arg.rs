//! `--timing`, `--timing-target` and `--timing-max-ms`: the request's `timing` from the
//! command line, for `crucible eval` and the rollout commands' evaluation settings. The
//! defaults are the request's (`bounds.rs`), not written again.

use crucible_shared::bounds::{MAX_TIME_MS, TARGET_REL_ERROR};
use crucible_shared::{TimingMode, TimingRequest};

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
}
