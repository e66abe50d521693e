//! The OpenAPI document: the contract clients are written against. Authentication is added to
//! it in one place ([`doc`]), from the same list of public paths the middleware uses, so no
//! protected path can go undocumented.

use crate::auth::{PAGE_PATHS, PUBLIC_PATHS, is_public};
use crate::routes;
use utoipa::OpenApi;
use utoipa::openapi::path::ParameterIn;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};

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
        // psets (issue 17): problem sets and batch reports.
        crate::problem_sets::get_problem_set,
        crate::problem_sets::post_problem_batch,
        crate::report::batch_report,
        // episodes (issue 17)
        crate::episodes::start_episodes,
        crate::episodes::post_turn,
        crate::episodes::get_episode,
        crate::episodes::get_turn,
        // prompts branch (issue 17): first-turn prompts.
        crate::prompts::problem_prompt,
        crate::prompts::prompt,
        // OpenEnv sessions over episodes.
        crate::openenv::http_reset,
        crate::openenv::http_step,
        crate::openenv::http_state,
        crate::openenv::health,
        crate::openenv::metadata,
        crate::openenv::schema,
        crate::openenv::ws::websocket,
        // KernelGYM's evaluation API.
        crate::kernelgym::evaluate,
        crate::kernelgym::status,
        crate::kernelgym::results,
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
        crucible_shared::TimingCheck,
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
        // psets (issue 17): problem sets and batch reports.
        crucible_shared::problem_set::ProblemSetSelection,
        crucible_shared::problem_set::ProblemSet,
        crucible_shared::problem_set::Split,
        crucible_shared::problem_set::ProblemBatchRequest,
        crucible_shared::problem_set::BatchProblem,
        crucible_shared::problem_set::ProblemBatch,
        crucible_shared::report::BatchReport,
        crucible_shared::report::GroupReport,
        crucible_shared::report::FastP,
        crucible_shared::report::ReportSource,
        // episodes (issue 17)
        crucible_shared::episode::EpisodeRequest,
        crucible_shared::episode::EpisodesStarted,
        crucible_shared::episode::TurnRequest,
        crucible_shared::episode::TurnStatus,
        crucible_shared::episode::TurnView,
        crucible_shared::episode::EpisodeView,
        // prompts branch (issue 17): first-turn prompts.
        crucible_shared::prompt::PromptOption,
        crucible_shared::prompt::PromptSettings,
        crucible_shared::prompt::PromptRequest,
        crucible_shared::prompt::Prompt,
        // OpenEnv sessions over episodes.
        crucible_shared::openenv::OpenEnvReset,
        crucible_shared::openenv::OpenEnvAction,
        crucible_shared::openenv::OpenEnvStepRequest,
        crucible_shared::openenv::OpenEnvObservation,
        crucible_shared::openenv::OpenEnvResult,
        crucible_shared::openenv::OpenEnvState,
        crucible_shared::openenv::OpenEnvMetadata,
        crucible_shared::openenv::OpenEnvHealth,
        // KernelGYM's evaluation API.
        crucible_shared::kernelgym::KernelGymRequest,
        crucible_shared::kernelgym::KernelGymResult,
        crucible_shared::kernelgym::KernelGymStatus,
    )),
    tags((name = "tasks", description = "Submit, follow and cancel evaluations"), (name = "rollouts", description = "Model completions in, rewards and next-turn feedback out"), (name = "episodes", description = "Multi-turn episodes: a first prompt, turns scored as rollouts, next prompts with feedback, discounted returns"), (name = "openenv", description = "OpenEnv's reset/step/state over episodes, over HTTP and a WebSocket session (docs/TRAINERS.md)"), (name = "kernelgym", description = "KernelGYM's /evaluate, /status and /results, for its reward clients (docs/MIGRATION-KERNELGYM.md)"), (name = "problems", description = "The problem registry requests may name by level and id"), (name = "status", description = "Workers, queue, recent activity, the status page, health, metrics"), (name = "admin", description = "Tenants and their tokens, worker drains (admin token only)"))
)]
/// The OpenAPI document of every route and schema, derived from the handlers' annotations
/// and the wire types' doc comments.
pub struct ApiDoc;

/// Which operations a status of [`COMMON_STATUSES`] is added to.
#[derive(Debug, Clone, Copy)]
enum Scope {
    /// Every operation.
    Every,
    /// Every operation behind the bearer token (all but [`PUBLIC_PATHS`] and [`PAGE_PATHS`]).
    Protected,
    /// The `/admin/` operations.
    Admin,
    /// Operations with a JSON request body (read by `ApiJson`).
    WithBody,
    /// Operations with query parameters (read by `ApiQuery`).
    WithQuery,
}

/// The statuses answered around the handlers rather than by them (the middleware, the
/// extractors, the timeout layer), so documented here once for every operation in their scope.
/// A handler that documents the same status keeps its own, more precise description. Every one
/// has an `ApiError` body except the timeout layer's 408 (empty).
const COMMON_STATUSES: &[(Scope, u16, &str)] = &[
    (
        Scope::Protected,
        401,
        "No bearer token, or one that names no tenant (`UNAUTHORIZED`)",
    ),
    (
        Scope::Admin,
        403,
        "A tenant's token: admin endpoints need the admin token (`FORBIDDEN`)",
    ),
    // Before the row for every protected route: the first row of a status wins.
    (
        Scope::WithBody,
        503,
        "Retry after `Retry-After`: the server is reading as many request bodies as it buffers \
         at once (`OVERLOADED`), the broker is unreachable (`BROKER_UNAVAILABLE`) or at its \
         memory limit (`BROKER_OUT_OF_MEMORY`)",
    ),
    // The token's tenant is looked up in the broker.
    (
        Scope::Protected,
        503,
        "Broker unavailable (`BROKER_UNAVAILABLE`); retry after `Retry-After` seconds",
    ),
    (Scope::WithBody, 400, "Malformed JSON (`MALFORMED_JSON`)"),
    (
        Scope::WithBody,
        413,
        "Body larger than this endpoint accepts (`PAYLOAD_TOO_LARGE`)",
    ),
    (
        Scope::WithBody,
        415,
        "The body's content type is not `application/json` (`UNSUPPORTED_MEDIA_TYPE`)",
    ),
    (
        Scope::WithBody,
        422,
        "A field is missing, of the wrong type or out of range (`VALIDATION`)",
    ),
    (
        Scope::WithQuery,
        422,
        "A query parameter is out of range or not of its type (`VALIDATION`)",
    ),
    // Before the row for every route: the body read timeout answers with an `ApiError`.
    (
        Scope::WithBody,
        408,
        "The body did not arrive within the body read timeout (`REQUEST_TIMEOUT`); a request \
         that took longer than the server allows in all is cut with an empty 408",
    ),
    (
        Scope::Every,
        408,
        "The request took longer than the server allows (no body)",
    ),
];

/// A response of [`COMMON_STATUSES`]: the `ApiError` body, or none for the timeout layer's 408.
fn common_response(scope: Scope, status: u16, description: &str) -> utoipa::openapi::Response {
    let response = ResponseBuilder::new().description(description);
    if status == 408 && matches!(scope, Scope::Every) {
        return response.build();
    }
    response
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ApiError")))
                .build(),
        )
        .build()
}

/// The headers `HttpError` sets on an `ApiError` answer of `status`: `Retry-After` on 429 and
/// 503, `WWW-Authenticate` on 401 (error.rs), so a client may rely on them.
fn add_error_headers(status: &str, response: &mut utoipa::openapi::Response) {
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    let is_api_error = response.content.values().any(|c| {
        matches!(c, RefOr::T(c) if matches!(&c.schema,
            Some(RefOr::Ref(r)) if r.ref_location.ends_with("/ApiError")))
    });
    let (name, ty, description) = match status {
        "429" | "503" => (
            "Retry-After",
            Type::Integer,
            "Seconds to wait before retrying",
        ),
        "401" => (
            "WWW-Authenticate",
            Type::String,
            "`Bearer`: the scheme the token goes in",
        ),
        _ => return,
    };
    if !is_api_error {
        return;
    }
    let header = HeaderBuilder::new()
        .schema(Some(ObjectBuilder::new().schema_type(SchemaType::Type(ty))))
        .description(Some(description))
        .build();
    response.headers.insert(name.to_owned(), header.into());
}

/// The document with its bearer scheme (every path but [`PUBLIC_PATHS`] and [`PAGE_PATHS`]
/// requires it) and the [`COMMON_STATUSES`] of each operation.
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
    for (path, item) in doc.paths.paths.iter_mut() {
        let public = is_public(path);
        debug_assert!(
            !public || PUBLIC_PATHS.contains(&path.as_str()) || PAGE_PATHS.contains(&path.as_str())
        );
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
            if !public {
                op.security = Some(vec![SecurityRequirement::new(
                    BEARER_SCHEME,
                    Vec::<String>::new(),
                )]);
            }
            let has_body = op.request_body.is_some();
            let has_query = op
                .parameters
                .iter()
                .flatten()
                .any(|p| matches!(p, RefOr::T(p) if p.parameter_in == ParameterIn::Query));
            for &(scope, status, description) in COMMON_STATUSES {
                let applies = match scope {
                    Scope::Every => true,
                    Scope::Protected => !public,
                    Scope::Admin => admin,
                    Scope::WithBody => has_body,
                    Scope::WithQuery => has_query,
                };
                if !applies {
                    continue;
                }
                // A handler's own description of the status (more precise) is kept.
                op.responses
                    .responses
                    .entry(status.to_string())
                    .or_insert_with(|| common_response(scope, status, description).into());
            }
            for (status, response) in op.responses.responses.iter_mut() {
                if let RefOr::T(response) = response {
                    add_error_headers(status, response);
                }
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

    /// The parameters are where the server reads them, with its bounds: query parameters
    /// `in: query` and optional (not path parameters a generated client must fill in), every
    /// path parameter in its path; `limit` 1-1000; and every operation lists the statuses the
    /// layers around its handler answer (a body's 400/413/415/422, a query's 422, 401/503
    /// behind the token, 408).
    #[test]
    fn the_document_matches_the_servers_parameters_and_statuses() {
        use crucible_shared::bounds::{RESULTS_PAGE, WAIT_S};
        let doc = serde_json::to_value(super::doc()).unwrap();
        let mut query = std::collections::BTreeMap::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let at = format!("{method} {path}");
                for p in op["parameters"].as_array().into_iter().flatten() {
                    let name = p["name"].as_str().unwrap();
                    match p["in"].as_str().unwrap() {
                        "path" => assert!(path.contains(&format!("{{{name}}}")), "{at}: {p}"),
                        "query" => {
                            assert_ne!(p["required"], true, "{at}: {p}");
                            query.insert((at.clone(), name.to_owned()), p["schema"].clone());
                        }
                        other => panic!("{at}: {name} in {other}"),
                    }
                }
                let responses = op["responses"].as_object().unwrap();
                let has = |status: &str| responses.contains_key(status);
                assert!(has("408"), "{at}");
                if op.get("requestBody").is_some() {
                    for status in ["400", "413", "415", "422"] {
                        assert!(has(status), "{at} lacks {status}");
                    }
                }
                if op.get("security").is_some() {
                    assert!(has("401") && has("503"), "{at}");
                    let unauthorized = &responses["401"]["headers"];
                    assert!(unauthorized.get("WWW-Authenticate").is_some(), "{at}");
                    assert!(
                        responses["503"]["headers"].get("Retry-After").is_some(),
                        "{at}"
                    );
                }
            }
        }
        for at in [
            "post /evaluate",
            "get /tasks/{id}",
            "get /batches/{id}/results",
        ] {
            let wait = &query[&(at.to_owned(), "wait".to_owned())];
            assert_eq!(wait["minimum"], WAIT_S.min, "{at}");
            assert_eq!(wait["maximum"], WAIT_S.max, "{at}");
            let (method, path) = at.split_once(' ').unwrap();
            let responses = &doc["paths"][path][method]["responses"];
            assert!(responses.get("422").is_some(), "{at}");
        }
        let limit = &query[&("get /batches/{id}/results".to_owned(), "limit".to_owned())];
        assert_eq!(limit["minimum"], f64::from(RESULTS_PAGE.min));
        assert_eq!(limit["maximum"], f64::from(RESULTS_PAGE.max));
        let include = &query[&("get /batches/{id}".to_owned(), "include".to_owned())];
        assert!(include.to_string().contains("tasks"), "{include}");
        assert!(query.contains_key(&("get /batches/{id}/results".to_owned(), "after".to_owned())));
    }

    /// What the server refuses empty, the schema does too: a batch's `tasks`, a rollout batch's
    /// `rollouts`, the codes and the idempotency key; and the caps are shown.
    #[test]
    fn the_document_refuses_what_the_server_refuses() {
        use crucible_shared::bounds::{MAX_BATCH_TASKS, MAX_CODE_BYTES, MAX_ROLLOUTS};
        let doc = serde_json::to_value(super::doc()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let tasks = &schemas["BatchRequest"]["properties"]["tasks"];
        assert_eq!(tasks["minItems"], 1);
        assert_eq!(tasks["maxItems"], MAX_BATCH_TASKS);
        let rollouts = &schemas["RolloutBatchRequest"]["properties"]["rollouts"];
        assert_eq!(rollouts["minItems"], 1);
        assert_eq!(rollouts["maxItems"], MAX_ROLLOUTS);
        for (schema, field) in [
            ("EvaluateRequest", "reference_code"),
            ("EvaluateRequest", "kernel_code"),
            ("Rollout", "reference_code"),
        ] {
            let property = &schemas[schema]["properties"][field];
            assert_eq!(property["minLength"], 1, "{schema}.{field}");
            assert_eq!(property["maxLength"], MAX_CODE_BYTES, "{schema}.{field}");
        }
        for schema in ["EvaluateRequest", "RolloutBatchRequest"] {
            let key = &schemas[schema]["properties"]["idempotency_key"];
            assert_eq!(key["minLength"], 1, "{schema}");
            assert!(key["pattern"].is_string(), "{schema}: {key}");
        }
    }
}
