//! What `settings.rs`'s one field list is made into: the request's fields with their defaults
//! ([`EvaluateRequest`](crate::request::EvaluateRequest)), the rollout batch's
//! [`RolloutEvalSettings`](crate::request::RolloutEvalSettings) (each setting optional, left
//! out: the request's default) and the harness's `spec.json` part,
//! [`HarnessSettings`](crate::settings::HarnessSettings). A macro, not a generic or
//! `#[serde(flatten)]`: flattening does not combine with `deny_unknown_fields`, and the forms'
//! wire shapes (and OpenAPI schemas) stay exactly the hand-written ones they replace.
//!
//! Each entry of the list is a field of the request (its doc, serde and schema attributes and
//! its default), then its rollout form (`{ attributes => type }`, or `{}`: not a batch setting)
//! and its harness form (`{ type }`, made with `From` of the request's value, or `{}`: not
//! handed to the harness).

/// Makes the three forms of the settings from the one list (see the module's doc).
macro_rules! eval_settings {
    (
        $(
            $(#[$attr:meta])*
            pub $name:ident: $ty:ty = $default:expr,
            rollout: $rollout:tt,
            harness: $harness:tt;
        )*
    ) => {
        // The doc's line breaks are the OpenAPI description's.
        /// `POST /evaluate`: one KernelBench-style evaluation. Unknown fields are refused, so a typo
        /// (`num_perf_trial`) is an error instead of a silent default.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
        #[serde(deny_unknown_fields)]
        pub struct EvaluateRequest {
            /// KernelBench problem source: `class Model`, `get_inputs()`, `get_init_inputs()`.
            /// Leave it out when naming a registered `problem` instead.
            #[serde(default)]
            #[schema(schema_with = reference_code_schema)]
            pub reference_code: String,
            /// A problem of the server's registry (`GET /problems`), instead of `reference_code`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub problem: Option<crate::problem::ProblemRef>,
            /// Candidate source defining `class ModelNew`.
            #[schema(schema_with = kernel_code_schema)]
            pub kernel_code: String,
            /// How the candidate implements its kernels.
            #[serde(default)]
            pub backend: Backend,
            $( $(#[$attr])* pub $name: $ty, )*
        }

        impl EvaluateRequest {
            /// A request with every default, for tests and clients.
            pub fn new(reference_code: impl Into<String>, kernel_code: impl Into<String>) -> Self {
                Self {
                    reference_code: reference_code.into(),
                    problem: None,
                    kernel_code: kernel_code.into(),
                    backend: Backend::default(),
                    $( $name: $default, )*
                }
            }
        }

        eval_settings!(@rollout [] [] $( ($name, $rollout) )*);
        eval_settings!(@harness [] [] $( ($name, $harness) )*);
    };

    // The rollout form: the entries with one, each optional.
    (@rollout [$($field:tt)*] [$($set:ident)*]) => {
        /// Evaluation settings for every rollout of a batch; absent ones keep the `/evaluate`
        /// defaults.
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
        #[serde(deny_unknown_fields)]
        pub struct RolloutEvalSettings {
            $($field)*
        }

        impl RolloutEvalSettings {
            /// The evaluation of `kernel_code` against `reference_code` under these settings.
            pub fn request(
                &self,
                reference_code: String,
                kernel_code: String,
                backend: Backend,
            ) -> EvaluateRequest {
                let mut r = EvaluateRequest::new(reference_code, kernel_code);
                r.backend = backend;
                // `into`: a setting the request holds as an `Option` is the same `Option` here.
                $( if let Some(v) = &self.$set { r.$set = v.clone().into(); } )*
                r
            }
        }
    };
    (@rollout [$($field:tt)*] [$($set:ident)*] ($name:ident, {}) $($rest:tt)*) => {
        eval_settings!(@rollout [$($field)*] [$($set)*] $($rest)*);
    };
    (@rollout [$($field:tt)*] [$($set:ident)*]
        ($name:ident, { $(#[$attr:meta])* => $ty:ty }) $($rest:tt)*) => {
        eval_settings!(@rollout [$($field)* $(#[$attr])* pub $name: $ty,] [$($set)* $name]
            $($rest)*);
    };

    // The harness form: the entries the harness reads, as `spec.json` spells them.
    (@harness [$($field:tt)*] [$($set:ident)*]) => {
        /// What `spec.json` carries of the request's settings (flattened into the worker's
        /// `HarnessSpec`; docs/harness-protocol.md).
        #[derive(Debug, Clone, PartialEq, Serialize)]
        pub struct HarnessSettings {
            $($field)*
        }

        impl HarnessSettings {
            /// The settings of `r` the harness reads.
            pub fn of(r: &EvaluateRequest) -> Self {
                Self { $( $set: From::from(Clone::clone(&r.$set)), )* }
            }
        }
    };
    (@harness [$($field:tt)*] [$($set:ident)*] ($name:ident, {}) $($rest:tt)*) => {
        eval_settings!(@harness [$($field)*] [$($set)*] $($rest)*);
    };
    (@harness [$($field:tt)*] [$($set:ident)*] ($name:ident, { $ty:ty }) $($rest:tt)*) => {
        eval_settings!(@harness [$($field)*
            #[doc = concat!("The request's `", stringify!($name), "`.")] pub $name: $ty,]
            [$($set)* $name] $($rest)*);
    };
}
