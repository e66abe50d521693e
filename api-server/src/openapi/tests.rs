//! The OpenAPI document against what the server does: its schemas, parameters, statuses and
//! bounds.

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
