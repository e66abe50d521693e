//! The OpenAPI document: the contract clients are written against. Authentication is added to
//! it in one place ([`doc`]), from the same list of public paths the middleware uses, so no
//! protected path can go undocumented.

use crate::auth::{PAGE_PATHS, PUBLIC_PATHS, is_public};
use crate::routes;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};

/// The name of the bearer scheme in `components.securitySchemes`.
pub const BEARER_SCHEME: &str = "bearer";

#[derive(OpenApi)]
#[openapi(
    info(title = "Crucible", description = "GPU kernel evaluation for RL trainers: KernelBench semantics, isolated children, leases and retries."),
    paths(
        routes::evaluate,
        routes::evaluate_batch,
        routes::get_task,
        routes::cancel_task,
        routes::get_batch,
        routes::cancel_batch,
        crate::rollouts::submit_rollouts,
        crate::rollouts::batch_results,
        routes::list_problems,
        routes::get_problem,
        routes::workers_status,
        routes::queue_status,
        crate::status_page::status_json,
        crate::status_page::page,
        crate::admin::create_tenant,
        crate::admin::list_tenants,
        crate::admin::delete_tenant,
        crate::admin::drain_worker,
        routes::health,
        routes::metrics,
    ),
    components(schemas(
        crucible_shared::DrainRequested,
        crucible_shared::EvaluateRequest,
        crucible_shared::BatchRequest,
        crucible_shared::TaskView,
        crucible_shared::EvalResult,
        crucible_shared::BuildSource,
        crucible_shared::ApiError,
        crucible_shared::ApiErrorCode,
        crucible_shared::VerdictCode,
        crucible_shared::Verdict,
        crucible_shared::Flag,
        crucible_shared::ScreeningAction,
        crucible_shared::TimingRequest,
        crucible_shared::TimingMode,
        crucible_shared::Precision,
        crucible_shared::TimingMethod,
        crucible_shared::ReferenceBackend,
        crucible_shared::RuntimeStats,
        crucible_shared::WorkerInfo,
        crucible_shared::QueueStatus,
        crucible_shared::ClassQueue,
        crucible_shared::DeviceClass,
        crucible_shared::DeviceInfo,
        crucible_shared::DeviceKind,
        crucible_shared::BatchStatus,
        crucible_shared::HealthStatus,
        crucible_shared::ProblemRef,
        crucible_shared::ProblemInfo,
        crucible_shared::Problem,
        crucible_shared::ProblemList,
        crucible_shared::rollout::Rollout,
        crucible_shared::rollout::RolloutEvalSettings,
        crucible_shared::rollout::RolloutBatchRequest,
        crucible_shared::rollout::RolloutBatchResponse,
        crucible_shared::rollout::RolloutResult,
        crucible_shared::rollout::RolloutStatus,
        crucible_shared::rollout::RolloutResultsPage,
        crucible_shared::reward::RewardProfile,
        crucible_shared::reward::DecoyReward,
        crucible_shared::reward::WeightsOverride,
        crucible_shared::reward::RewardComponents,
        crucible_shared::CreateTenantRequest,
        crucible_shared::CreatedTenant,
        crucible_shared::TenantInfo,
        crucible_shared::TenantList,
        crucible_shared::DeletedTenant,
        crucible_shared::TenantCounts,
        routes::BatchSubmitResponse,
        crucible_shared::CancelResponse,
        crucible_shared::BatchCancelResponse,
        routes::WorkersResponse,
        crucible_shared::StatusPage,
        crucible_shared::StatusWorker,
        crucible_shared::WorkerHealth,
        crucible_shared::Activity,
        crucible_shared::ActivityWindow,
        crucible_shared::VerdictCounts,
        crucible_shared::RecentFailure,
        crucible_shared::CacheRate,
    )),
    tags((name = "tasks", description = "Submit, follow and cancel evaluations"), (name = "rollouts", description = "Model completions in, rewards and next-turn feedback out"), (name = "problems", description = "The problem registry requests may name by level and id"), (name = "status", description = "Workers, queue, recent activity, the status page, health, metrics"), (name = "admin", description = "Tenants and their tokens, worker drains (admin token only)"))
)]
/// The OpenAPI document of every route and schema, derived from the handlers' annotations
/// and the wire types' doc comments.
pub struct ApiDoc;

/// The document with its bearer scheme: every path but [`PUBLIC_PATHS`] and [`PAGE_PATHS`]
/// requires it and documents 401, and the admin paths document 403. Every operation with a
/// request body documents what the body budget answers (`body_budget`): 408 and 503.
pub fn doc() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    let scheme = HttpBuilder::new()
        .scheme(HttpAuthScheme::Bearer)
        .bearer_format("opaque")
        .description(Some(
            "A tenant's token from `POST /admin/tenants`, or the admin token \
             (`CRUCIBLE_ADMIN_TOKEN`). Not needed when the server runs with `CRUCIBLE_AUTH=off` \
             (the default on a loopback address).",
        ))
        .build();
    doc.components
        .get_or_insert_with(Default::default)
        .add_security_scheme(BEARER_SCHEME, SecurityScheme::Http(scheme));
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ApiError")))
                    .build(),
            )
            .build()
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        if is_public(path) {
            debug_assert!(
                PUBLIC_PATHS.contains(&path.as_str()) || PAGE_PATHS.contains(&path.as_str())
            );
            continue;
        }
        let admin = path.starts_with("/admin/");
        for op in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            op.security = Some(vec![SecurityRequirement::new(
                BEARER_SCHEME,
                Vec::<String>::new(),
            )]);
            let responses = &mut op.responses.responses;
            responses.insert(
                "401".to_owned(),
                error("No bearer token, or one that names no tenant (`UNAUTHORIZED`)").into(),
            );
            if op.request_body.is_some() {
                responses.insert(
                    "408".to_owned(),
                    error(
                        "The body did not arrive within the body read timeout \
                         (`REQUEST_TIMEOUT`)",
                    )
                    .into(),
                );
                responses.insert(
                    "503".to_owned(),
                    error(
                        "Retry after `Retry-After`: the server is reading as many request \
                         bodies as it buffers at once (`OVERLOADED`), the broker is unreachable \
                         (`BROKER_UNAVAILABLE`) or at its memory limit (`BROKER_OUT_OF_MEMORY`)",
                    )
                    .into(),
                );
            }
            if admin {
                responses.insert(
                    "403".to_owned(),
                    error("A tenant's token: admin endpoints need the admin token (`FORBIDDEN`)")
                        .into(),
                );
            }
        }
    }
    doc
}

#[cfg(test)]
mod tests {
    use crate::auth::PAGE_PATH;
    use crate::status_page::JSON_PATH;

    /// The measurement options, with their names, on `/evaluate` and on rollouts.
    #[test]
    fn the_document_describes_the_measurement_options() {
        let doc = serde_json::to_value(super::doc()).unwrap();
        let schemas = &doc["components"]["schemas"];
        for (field, schema, names) in [
            ("precision", "Precision", vec!["fp32", "fp16", "bf16"]),
            (
                "timing_method",
                "TimingMethod",
                vec!["cuda_event", "do_bench", "host_time"],
            ),
            (
                "reference_backend",
                "ReferenceBackend",
                vec!["eager", "compile"],
            ),
        ] {
            for request in ["EvaluateRequest", "RolloutEvalSettings"] {
                let property = &schemas[request]["properties"][field];
                assert!(property.to_string().contains(schema), "{request}.{field}");
            }
            assert_eq!(schemas[schema]["enum"], serde_json::json!(names));
        }
    }

    /// The page's JSON is documented with its schema and needs a token; the page itself is
    /// documented as public HTML.
    #[test]
    fn the_document_describes_the_status_page() {
        let doc = serde_json::to_value(super::doc()).unwrap();
        let json = &doc["paths"][JSON_PATH]["get"];
        assert!(
            json["responses"]["200"].to_string().contains("StatusPage"),
            "{json}"
        );
        assert!(json["security"].is_array(), "{json}");
        assert!(json["responses"].get("401").is_some());
        let page = &doc["paths"][PAGE_PATH]["get"];
        assert!(
            page["responses"]["200"]["content"]
                .get("text/html")
                .is_some(),
            "{page}"
        );
        assert!(page.get("security").is_none(), "{page}");
        let schemas = &doc["components"]["schemas"];
        for name in [
            "StatusPage",
            "ActivityWindow",
            "RecentFailure",
            "CacheRate",
            "WorkerHealth",
        ] {
            assert!(schemas.get(name).is_some(), "{name}");
        }
    }

    /// The contract shows `device_class` where a client sets it and where it reads it, with
    /// the pattern validation applies, and the new error code.
    #[test]
    fn the_document_describes_device_classes() {
        let doc = serde_json::to_value(super::doc()).unwrap();
        let schemas = &doc["components"]["schemas"];
        assert_eq!(
            schemas["DeviceClass"]["pattern"],
            "^[a-z0-9][a-z0-9_-]{0,31}$"
        );
        for (schema, field) in [
            ("EvaluateRequest", "device_class"),
            ("RolloutEvalSettings", "device_class"),
            ("TaskView", "device_class"),
            ("DeviceInfo", "class"),
            ("ClassQueue", "device_class"),
        ] {
            let property = &schemas[schema]["properties"][field];
            assert!(
                property.to_string().contains("DeviceClass"),
                "{schema}.{field}: {property}"
            );
        }
        assert!(
            schemas["QueueStatus"]["properties"]["classes"]
                .to_string()
                .contains("ClassQueue")
        );
        let codes = schemas["ApiErrorCode"].to_string();
        assert!(codes.contains("DEVICE_CLASS_UNAVAILABLE"), "{codes}");
        for path in [
            "/evaluate",
            "/evaluate/batch",
            "/rollouts",
            "/admin/tenants",
        ] {
            let responses = &doc["paths"][path]["post"]["responses"];
            assert!(
                responses["503"].to_string().contains("OVERLOADED")
                    && responses["408"].to_string().contains("REQUEST_TIMEOUT"),
                "{path}: {responses}"
            );
        }
        let evaluate = doc["paths"]["/evaluate"]["post"]["responses"]["422"].to_string();
        assert!(evaluate.contains("DEVICE_CLASS_UNAVAILABLE"), "{evaluate}");
    }

    /// The contract shows `timing` with the bounds validation applies (`bounds.rs`) and the
    /// statistics' new, optional fields.
    #[test]
    fn the_document_describes_timing() {
        let doc = serde_json::to_value(super::doc()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let timing = &schemas["EvaluateRequest"]["properties"]["timing"];
        assert!(timing.to_string().contains("TimingRequest"), "{timing}");
        let t = &schemas["TimingRequest"]["properties"];
        assert_eq!(t["target_rel_error"]["minimum"], 1e-5);
        assert_eq!(t["target_rel_error"]["maximum"], 0.5);
        assert_eq!(t["target_rel_error"]["default"], 1e-3);
        assert_eq!(t["max_time_ms"]["maximum"], 600_000.0);
        assert_eq!(t["max_time_ms"]["default"], 2000);
        assert!(t["mode"].to_string().contains("TimingMode"), "{t}");
        assert_eq!(
            schemas["TimingMode"]["enum"],
            serde_json::json!(["fixed", "adaptive"])
        );
        let stats = &schemas["RuntimeStats"];
        for field in ["trials", "median_ci"] {
            assert!(stats["properties"].get(field).is_some(), "{stats}");
        }
        // Optional: results from before they were reported still validate.
        let required = stats["required"].as_array().unwrap();
        assert!(!required.iter().any(|f| f == "trials" || f == "median_ci"));
        assert!(
            schemas["RolloutEvalSettings"]["properties"]
                .get("timing")
                .is_some()
        );
    }
}
