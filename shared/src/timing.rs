//! How a request's timed calls are counted (`EvaluateRequest::timing`): the fixed KernelBench
//! protocol by default, or adaptive stopping once the median is known well enough. Defaults
//! and bounds are in `bounds`; the stopping rule itself is the harness's
//! (`adaptive_should_stop` in `gpu-worker/harness/tensors.py`).

use crate::bounds::{
    Bounds, MAX_TIME_MS, MIN_ADAPTIVE_TRIALS, TARGET_REL_ERROR, default_max_time_ms,
    default_target_rel_error, max_time_ms_schema, target_rel_error_schema,
};
use crate::error::ApiError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How many timed calls each model gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TimingMode {
    /// KernelBench's protocol: `num_warmup` + `num_perf_trials` calls, always.
    #[default]
    Fixed,
    /// At least 3 and at most `num_perf_trials` timed calls: stops once the relative standard
    /// error of the median is at most `target_rel_error`, or the timed calls have taken
    /// `max_time_ms`.
    Adaptive,
}

impl TimingMode {
    /// The wire name (`fixed`, `adaptive`), also what the cache keys hash.
    pub fn as_str(self) -> &'static str {
        match self {
            TimingMode::Fixed => "fixed",
            TimingMode::Adaptive => "adaptive",
        }
    }
}

/// The request's `timing`: how many timed calls the reference and the candidate get. Left
/// out, it is `{"mode": "fixed"}`, the KernelBench protocol.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TimingRequest {
    /// `fixed` (every `num_perf_trials` call) or `adaptive` (stop early once the median is
    /// known well enough).
    #[serde(default)]
    pub mode: TimingMode,
    /// Adaptive only: stop once the relative standard error of the median is at most this
    /// ([`TARGET_REL_ERROR`]).
    #[serde(default = "default_target_rel_error")]
    #[schema(schema_with = target_rel_error_schema)]
    pub target_rel_error: f64,
    /// Adaptive only: stop once one model's timed calls have taken this much wall time, in ms
    /// ([`MAX_TIME_MS`]).
    #[serde(default = "default_max_time_ms")]
    #[schema(schema_with = max_time_ms_schema)]
    pub max_time_ms: u32,
}

/// `spec.json`'s `timing`: the request's, with the least number of timed calls of adaptive
/// timing, written only in `bounds.rs` (the harness takes it from here rather than write it
/// again).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HarnessTiming {
    /// `fixed` or `adaptive`.
    pub mode: TimingMode,
    /// Adaptive: stop once the relative standard error of the median is at most this.
    pub target_rel_error: f64,
    /// Adaptive: stop once one model's timed calls have taken this much wall time, in ms.
    pub max_time_ms: u32,
    /// Adaptive: fewest timed calls before it may stop ([`MIN_ADAPTIVE_TRIALS`]).
    pub min_trials: u32,
}

impl From<TimingRequest> for HarnessTiming {
    fn from(t: TimingRequest) -> Self {
        Self {
            mode: t.mode,
            target_rel_error: t.target_rel_error,
            max_time_ms: t.max_time_ms,
            min_trials: MIN_ADAPTIVE_TRIALS,
        }
    }
}

impl Default for TimingRequest {
    fn default() -> Self {
        Self {
            mode: TimingMode::default(),
            target_rel_error: default_target_rel_error(),
            max_time_ms: default_max_time_ms(),
        }
    }
}

impl TimingRequest {
    /// Adaptive timing with the default target and budget.
    pub fn adaptive() -> Self {
        Self {
            mode: TimingMode::Adaptive,
            ..Self::default()
        }
    }

    /// Whether this is the fixed protocol: then the cache keys stay what they were before
    /// `timing` existed (the target and budget are unused).
    pub fn is_fixed(&self) -> bool {
        self.mode == TimingMode::Fixed
    }

    /// Whether every field is the default: then the request is encoded as it was before
    /// `timing` existed (the field left out).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the bounds (also in fixed mode, where the numbers are unused: a wrong number is
    /// a client's mistake either way). `prefix` is the request's (`tasks[3].`); the error names
    /// `timing.<field>`. `num_perf_trials` is the request's cap of the timed calls.
    pub fn validate(&self, prefix: &str, num_perf_trials: u32) -> Result<(), ApiError> {
        let field = |name: &str| format!("{prefix}timing.{name}");
        let Bounds { min, max, .. } = TARGET_REL_ERROR;
        if !(self.target_rel_error.is_finite() && (min..=max).contains(&self.target_rel_error)) {
            return Err(ApiError::invalid(
                &field("target_rel_error"),
                format!(
                    "{} must be a finite number from {min:e} to {max}",
                    self.target_rel_error
                ),
            ));
        }
        let Bounds { min, max, .. } = MAX_TIME_MS;
        if !(min..=max).contains(&self.max_time_ms) {
            return Err(ApiError::invalid(
                &field("max_time_ms"),
                format!("{} is out of range {min}-{max}", self.max_time_ms),
            ));
        }
        if self.mode == TimingMode::Adaptive && num_perf_trials < MIN_ADAPTIVE_TRIALS {
            return Err(ApiError::invalid(
                &format!("{prefix}num_perf_trials"),
                format!(
                    "{num_perf_trials} is too few for adaptive timing, which makes at least \
                     {MIN_ADAPTIVE_TRIALS} timed calls"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::EvaluateRequest;

    fn request(timing: &str) -> Result<EvaluateRequest, serde_json::Error> {
        serde_json::from_str(&format!(
            r#"{{"reference_code":"a","kernel_code":"b","timing":{timing}}}"#
        ))
    }

    #[test]
    fn left_out_it_is_the_fixed_protocol() {
        let req: EvaluateRequest =
            serde_json::from_str(r#"{"reference_code":"a","kernel_code":"b"}"#).unwrap();
        assert_eq!(req.timing, TimingRequest::default());
        assert!(req.timing.is_fixed());
        // The default is not written back: old encodings keep their bytes.
        let json = serde_json::to_value(&req).unwrap();
        assert!(json.get("timing").is_none(), "{json}");
    }

    #[test]
    fn defaults_fill_what_adaptive_leaves_out() {
        let req = request(r#"{"mode":"adaptive"}"#).unwrap();
        assert_eq!(req.timing, TimingRequest::adaptive());
        assert_eq!(req.timing.target_rel_error, 1e-3);
        assert_eq!(req.timing.max_time_ms, 2000);
        assert!(req.validate().is_ok());
        let req =
            request(r#"{"mode":"adaptive","target_rel_error":0.01,"max_time_ms":50}"#).unwrap();
        assert_eq!(req.timing.target_rel_error, 0.01);
        assert_eq!(req.timing.max_time_ms, 50);
    }

    #[test]
    fn serde_round_trips() {
        let mut req = EvaluateRequest::new("a", "b");
        req.timing = TimingRequest {
            mode: TimingMode::Adaptive,
            target_rel_error: 0.005,
            max_time_ms: 123,
        };
        let json = serde_json::to_string(&req).unwrap();
        assert!(json.contains(r#""timing":{"mode":"adaptive""#), "{json}");
        assert_eq!(serde_json::from_str::<EvaluateRequest>(&json).unwrap(), req);
    }

    #[test]
    fn unknown_modes_and_fields_are_refused() {
        let err = request(r#"{"mode":"auto"}"#).unwrap_err();
        assert!(err.to_string().contains("auto"), "{err}");
        let err = request(r#"{"mode":"adaptive","target":0.01}"#).unwrap_err();
        assert!(err.to_string().contains("target"), "{err}");
    }

    #[test]
    fn each_bound_names_its_field() {
        type Mutation = Box<dyn Fn(&mut EvaluateRequest)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (
                Box::new(|r| r.timing.target_rel_error = 0.0),
                "timing.target_rel_error",
            ),
            (
                Box::new(|r| r.timing.target_rel_error = 0.6),
                "timing.target_rel_error",
            ),
            (
                Box::new(|r| r.timing.target_rel_error = f64::NAN),
                "timing.target_rel_error",
            ),
            (Box::new(|r| r.timing.max_time_ms = 0), "timing.max_time_ms"),
            (
                Box::new(|r| r.timing.max_time_ms = 600_001),
                "timing.max_time_ms",
            ),
            (
                Box::new(|r| {
                    r.timing.mode = TimingMode::Adaptive;
                    r.num_perf_trials = MIN_ADAPTIVE_TRIALS - 1;
                }),
                "num_perf_trials",
            ),
        ];
        for (mutate, field) in cases {
            let mut req = EvaluateRequest::new("class Model: pass", "class ModelNew: pass");
            mutate(&mut req);
            let err = req.validate().unwrap_err();
            assert_eq!(err.field.as_deref(), Some(field), "{err}");
            assert_eq!(err.http_status(), 422);
            let err = req.validate_with_prefix("tasks[2].").unwrap_err();
            assert_eq!(
                err.field.as_deref(),
                Some(format!("tasks[2].{field}").as_str())
            );
        }
        // The bounds themselves are accepted; fixed mode takes any trial count.
        let mut req = EvaluateRequest::new("class Model: pass", "class ModelNew: pass");
        req.timing = TimingRequest {
            mode: TimingMode::Adaptive,
            target_rel_error: TARGET_REL_ERROR.min,
            max_time_ms: MAX_TIME_MS.max,
        };
        req.num_perf_trials = MIN_ADAPTIVE_TRIALS;
        assert!(req.validate().is_ok());
        req.timing = TimingRequest::default();
        req.num_perf_trials = 1;
        assert!(req.validate().is_ok());
    }

    #[test]
    fn the_schema_shows_the_bounds() {
        let schema =
            serde_json::to_value(<TimingRequest as utoipa::PartialSchema>::schema()).unwrap();
        let target = &schema["properties"]["target_rel_error"];
        assert_eq!(target["minimum"], TARGET_REL_ERROR.min);
        assert_eq!(target["maximum"], TARGET_REL_ERROR.max);
        assert_eq!(target["default"], TARGET_REL_ERROR.default);
        let budget = &schema["properties"]["max_time_ms"];
        assert_eq!(budget["minimum"], 1.0);
        assert_eq!(budget["maximum"], 600_000.0);
        assert_eq!(budget["default"], 2000);
    }
}
