//! The evaluation settings, written once: every field of a request after its code, in one
//! list, each with its doc, its default and bounds (read from `bounds`), its rollout form and
//! whether the harness reads it. `forms.rs` makes the list into [`EvaluateRequest`]'s fields,
//! the rollout batch's [`RolloutEvalSettings`] and the harness's [`HarnessSettings`] (expanded
//! in `request.rs`, where the names the list uses are in scope); validation and the result
//! cache key (below) and [`MeasurementOptions`] (the reference timing's key) name a setting
//! once more where it counts there. ARCHITECTURE.md, "Where to change", is the recipe
//! for a new one.
//!
//! [`EvaluateRequest`]: crate::request::EvaluateRequest
//! [`RolloutEvalSettings`]: crate::request::RolloutEvalSettings
//! [`HarnessSettings`]: crate::request::HarnessSettings
//! [`MeasurementOptions`]: crate::request::MeasurementOptions

#[macro_use]
mod forms;

use crate::bounds::{
    Bounds, CORRECT_TRIALS, MAX_SCREENING_RULES, MAX_SPEEDUP, PERF_TRIALS, TIMEOUT_S,
};
use crate::error::ApiError;
use crate::parity::TimingMethod;
use crate::request::{
    EvaluateRequest, MeasurementOptions, ScreeningAction, validate_code, validate_idempotency_key,
    validate_range, validate_tolerance,
};
use sha2::{Digest, Sha256};

/// Hands the one list of settings to `$make` (`eval_settings`, forms.rs). A macro so that each
/// form is made from the same tokens; the names in it resolve where it is expanded.
macro_rules! for_eval_settings {
    ($make:ident) => {
        $make! {
            /// Correctness trials, each on fresh seeded inputs ([`CORRECT_TRIALS`](crate::bounds::CORRECT_TRIALS)).
            #[serde(default = "default_correct_trials")]
            #[schema(schema_with = correct_trials_schema)]
            pub num_correct_trials: u32 = default_correct_trials(),
            rollout: {
                /// Correctness trials, each on fresh seeded inputs ([`CORRECT_TRIALS`](crate::bounds::CORRECT_TRIALS)).
                #[schema(schema_with = crate::bounds::rollout_correct_trials_schema)]
                => Option<u32>
            },
            harness: { u32 };

            /// Timed trials for reference and candidate ([`PERF_TRIALS`](crate::bounds::PERF_TRIALS)).
            #[serde(default = "default_perf_trials")]
            #[schema(schema_with = perf_trials_schema)]
            pub num_perf_trials: u32 = default_perf_trials(),
            rollout: {
                /// Timed trials for reference and candidate ([`PERF_TRIALS`](crate::bounds::PERF_TRIALS)).
                #[schema(schema_with = crate::bounds::rollout_perf_trials_schema)]
                => Option<u32>
            },
            harness: { u32 };

            /// Time the candidate (only when it is correct).
            #[serde(default = "default_true")]
            #[schema(default = default_true)]
            pub measure_performance: bool = default_true(),
            rollout: {
                /// Time the candidate (only when it is correct); without timings `speed` scores 0.
                => Option<bool>
            },
            harness: { bool };

            /// Absolute tolerance of the correctness check ([`TOLERANCE`](crate::bounds::TOLERANCE)).
            #[serde(default = "default_tolerance")]
            #[schema(schema_with = atol_schema)]
            pub atol: f64 = default_tolerance(),
            rollout: {
                /// Absolute tolerance of the output comparison.
                => Option<f64>
            },
            harness: { f64 };

            /// Relative tolerance of the correctness check ([`TOLERANCE`](crate::bounds::TOLERANCE)).
            #[serde(default = "default_tolerance")]
            #[schema(schema_with = rtol_schema)]
            pub rtol: f64 = default_tolerance(),
            rollout: {
                /// Relative tolerance of the output comparison.
                => Option<f64>
            },
            harness: { f64 };

            /// Wall-clock budget of the evaluation child, in seconds ([`TIMEOUT_S`](crate::bounds::TIMEOUT_S)).
            #[serde(default = "default_timeout_s")]
            #[schema(schema_with = timeout_s_schema)]
            pub timeout_s: u32 = default_timeout_s(),
            rollout: {
                /// Wall-clock budget of each evaluation, in seconds ([`TIMEOUT_S`](crate::bounds::TIMEOUT_S)).
                #[schema(schema_with = crate::bounds::rollout_timeout_s_schema)]
                => Option<u32>
            },
            harness: {};

            /// Queue priority; it steers scheduling only, never the verdict.
            #[serde(default)]
            pub priority: Priority = Priority::default(),
            rollout: {
                /// Queue priority of the batch's tasks.
                => Option<Priority>
            },
            harness: {};

            /// Resubmitting with the same key returns the same task.
            #[serde(default)]
            #[schema(schema_with = idempotency_key_schema)]
            pub idempotency_key: Option<String> = None,
            rollout: {},
            harness: {};

            /// Seed of the models' parameters (set before `get_init_inputs()` and before building
            /// each model, as KernelBench does); a random one is chosen when absent. The seeds of the
            /// inputs are secret: the evaluation draws them itself, out of the candidate's reach.
            #[serde(default)]
            pub seed: Option<u64> = None,
            rollout: {},
            harness: {};

            /// A speedup above this is flagged `implausible-speedup` (not trusted silently;
            /// [`MAX_SPEEDUP`](crate::bounds::MAX_SPEEDUP)).
            #[serde(default = "default_max_speedup")]
            #[schema(schema_with = max_speedup_schema)]
            pub max_speedup: f64 = default_max_speedup(),
            rollout: {
                /// A speedup above this is flagged `implausible-speedup`.
                => Option<f64>
            },
            harness: { f64 };

            /// Evaluate anew even when an identical request has a cached result or is in flight (the
            /// new result still replaces the cached one).
            #[serde(default)]
            #[schema(default = default_false)]
            pub force_refresh: bool = default_false(),
            rollout: {},
            harness: {};

            /// Static screening policy overrides, rule id → `reject` | `flag` | `off` (rules not named
            /// keep their defaults; see docs/harness-protocol.md, "Screening").
            #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
            pub screening: BTreeMap<String, ScreeningAction> = BTreeMap::new(),
            rollout: {},
            harness: { BTreeMap<String, ScreeningAction> };

            /// How many timed calls each model gets: left out, the fixed KernelBench protocol
            /// (`num_perf_trials` calls); `{"mode": "adaptive"}` stops early once the median is known
            /// well enough (docs/harness-protocol.md, "Adaptive timing").
            #[serde(default, skip_serializing_if = "TimingRequest::is_default")]
            pub timing: TimingRequest = TimingRequest::default(),
            rollout: {
                /// How many timed calls each model gets (`fixed` or `adaptive`; as `/evaluate`'s
                /// `timing`).
                #[serde(default, skip_serializing_if = "Option::is_none")]
                => Option<TimingRequest>
            },
            harness: { HarnessTiming };

            /// The precision both models run in: `fp32` (as written), `fp16` or `bf16` (floating
            /// inputs, parameters and buffers cast, as KernelBench's `precision`).
            #[serde(default, skip_serializing_if = "Precision::is_default")]
            pub precision: Precision = Precision::default(),
            rollout: {
                /// `fp32`, `fp16` or `bf16`, as `/evaluate`'s `precision`.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                => Option<Precision>
            },
            harness: { Precision };

            /// How each call is timed: `cuda_event` (events, `num_perf_trials` calls), `do_bench`
            /// (events, calls until 100 ms as triton's `do_bench` budgets them) or `host_time` (the
            /// host's clock, launch overhead included).
            #[serde(default, skip_serializing_if = "TimingMethod::is_default")]
            pub timing_method: TimingMethod = TimingMethod::default(),
            rollout: {
                /// `cuda_event`, `do_bench` or `host_time`, as `/evaluate`'s `timing_method`.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                => Option<TimingMethod>
            },
            harness: { TimingMethod };

            /// What the speedup is measured against: `eager` (the reference as written) or `compile`
            /// (`torch.compile`d; correctness is still checked against eager).
            #[serde(default, skip_serializing_if = "ReferenceBackend::is_default")]
            pub reference_backend: ReferenceBackend = ReferenceBackend::default(),
            rollout: {
                /// `eager` or `compile`, as `/evaluate`'s `reference_backend`.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                => Option<ReferenceBackend>
            },
            harness: { ReferenceBackend };

            /// Run only on a worker of this device class (`h100`, `a100`, `cpu`, ...); left out, any
            /// worker may run it. A class no live worker has is refused (422
            /// `DEVICE_CLASS_UNAVAILABLE`, naming the classes there are). It changes the timings, not
            /// the verdict, and is part of the result cache key.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub device_class: Option<DeviceClass> = None,
            rollout: {
                /// Run every evaluation of the batch on workers of this device class (as `/evaluate`'s
                /// `device_class`). Left out, each group of rollouts of one problem is placed on one class
                /// at submission, so no group's speedups come from two kinds of device.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                => Option<DeviceClass>
            },
            harness: {};
        }
    };
}

// What each setting is checked against and how it enters the result cache key: beside the
// list, so that a new setting is added in this file (and its bounds in `bounds`).
impl EvaluateRequest {
    /// Hex SHA-256 of everything that decides the verdict, so identical requests share one
    /// result. Priority, idempotency key and `force_refresh` only steer scheduling; the seed
    /// counts only when the client chose it (a random one carries no meaning to match on). The
    /// device is not known here: brokers qualify this key with their cache scope.
    pub fn result_cache_key(&self) -> String {
        let mut h = Sha256::new();
        // Every field is named and length-prefixed, so no two requests encode alike; the
        // version tag retires old keys when the encoding or the verdict semantics change.
        let mut field = |name: &str, value: &[u8]| {
            h.update(name.as_bytes());
            h.update((value.len() as u64).to_le_bytes());
            h.update(value);
        };
        // 2: static screening (and its policy) decide verdicts; 3: runtime integrity checks,
        // secret input seeds, verdict field.
        field("v", b"3");
        field("reference_code", self.reference_code.as_bytes());
        field("kernel_code", self.kernel_code.as_bytes());
        field("backend", self.backend.as_str().as_bytes());
        field("num_correct_trials", &self.num_correct_trials.to_le_bytes());
        field("num_perf_trials", &self.num_perf_trials.to_le_bytes());
        field("measure_performance", &[u8::from(self.measure_performance)]);
        field("atol", &self.atol.to_bits().to_le_bytes());
        field("rtol", &self.rtol.to_bits().to_le_bytes());
        field("timeout_s", &self.timeout_s.to_le_bytes());
        field("max_speedup", &self.max_speedup.to_bits().to_le_bytes());
        match self.seed {
            Some(seed) => field("seed", &seed.to_le_bytes()),
            None => field("seed", b""),
        }
        for (rule, action) in &self.screening {
            let action: &[u8] = match action {
                ScreeningAction::Reject => b"reject",
                ScreeningAction::Flag => b"flag",
                ScreeningAction::Off => b"off",
            };
            field("screening", rule.as_bytes());
            field("screening_action", action);
        }
        // Only adaptive timing changes what is measured: fixed requests keep the keys they had
        // before `timing` existed, whatever unused numbers they carry.
        if !self.timing.is_fixed() {
            field("timing_mode", self.timing.mode.as_str().as_bytes());
            field(
                "timing_target_rel_error",
                &self.timing.target_rel_error.to_bits().to_le_bytes(),
            );
            field("timing_max_time_ms", &self.timing.max_time_ms.to_le_bytes());
        }
        // The same for the measurement options: named only when not the default.
        MeasurementOptions::of(self).write_key(&mut field);
        // The class decides where the timings come from: a speedup measured on an h100 must
        // not answer a request for an a100, nor a result of whichever worker ran an unclassed
        // request answer one that asked for a class. Requests without one keep their old keys.
        if let Some(class) = &self.device_class {
            field("device_class", class.as_str().as_bytes());
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Checks every bound; the error names the first offending field. `prefix` is prepended to
    /// field names (e.g. `tasks[3].`) so batch errors point at the task.
    pub fn validate_with_prefix(&self, prefix: &str) -> Result<(), ApiError> {
        let field = |name: &str| format!("{prefix}{name}");
        validate_code(&field("reference_code"), &self.reference_code)?;
        validate_code(&field("kernel_code"), &self.kernel_code)?;
        validate_range(
            &field("num_correct_trials"),
            self.num_correct_trials,
            CORRECT_TRIALS,
        )?;
        validate_range(&field("num_perf_trials"), self.num_perf_trials, PERF_TRIALS)?;
        validate_range(&field("timeout_s"), self.timeout_s, TIMEOUT_S)?;
        self.timing.validate(prefix, self.num_perf_trials)?;
        if self.timing_method == TimingMethod::DoBench && !self.timing.is_fixed() {
            return Err(ApiError::invalid(
                &field("timing_method"),
                "do_bench budgets its own timed calls: use it with fixed `timing`",
            ));
        }
        validate_tolerance(&field("atol"), self.atol)?;
        validate_tolerance(&field("rtol"), self.rtol)?;
        let Bounds { min, max, .. } = MAX_SPEEDUP;
        if !(self.max_speedup.is_finite() && (min..=max).contains(&self.max_speedup)) {
            return Err(ApiError::invalid(
                &field("max_speedup"),
                format!("must be a finite number from {min} to {max:e}"),
            ));
        }
        if let Some(key) = &self.idempotency_key {
            validate_idempotency_key(&field("idempotency_key"), key)?;
        }
        if self.screening.len() > MAX_SCREENING_RULES
            || self.screening.keys().any(|k| {
                k.is_empty()
                    || k.len() > 64
                    || !k.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
            })
        {
            return Err(ApiError::invalid(
                &field("screening"),
                format!("at most {MAX_SCREENING_RULES} rule ids of lowercase letters and '-'"),
            ));
        }
        Ok(())
    }

    /// Checks every bound of a single request; the error names the first offending field.
    pub fn validate(&self) -> Result<(), ApiError> {
        self.validate_with_prefix("")
    }
}
