use super::*;
use crate::doctor::report::Level;

fn levels(checks: &[Check]) -> Vec<(&str, Level)> {
    checks.iter().map(|c| (c.name.as_str(), c.level)).collect()
}

#[test]
fn redis_is_required_for_a_role_of_several_nodes_only() {
    assert_eq!(
        redis_checks(Role::All, &RedisFacts::Unset)[0].level,
        Level::Ok
    );
    for role in [Role::Worker, Role::Api] {
        let checks = redis_checks(role, &RedisFacts::Unset);
        assert_eq!(levels(&checks), [("redis", Level::Fail)]);
        assert!(checks[0].fix.as_ref().unwrap().contains("--env-file"));
    }
    let refused = RedisFacts::Failed {
        url: "rediss://crucible-worker:***@q:6379".into(),
        error: "redis refused the credentials".into(),
        unreachable: false,
    };
    let checks = redis_checks(Role::Worker, &refused);
    assert_eq!(checks[0].level, Level::Fail);
    assert!(
        checks[0].detail.contains("***") && checks[0].fix.as_ref().unwrap().contains("password")
    );
    let down = RedisFacts::Failed {
        url: "rediss://crucible-worker:***@q:6379".into(),
        error: "cannot be reached: connection refused".into(),
        unreachable: true,
    };
    assert!(
        redis_checks(Role::All, &down)[0]
            .fix
            .as_ref()
            .unwrap()
            .contains("--redis-bind")
    );
}

#[test]
fn the_broker_must_keep_its_tasks_or_say_it_cannot_tell() {
    let reached = |settings| RedisFacts::Reached {
        url: "rediss://crucible-admin:***@q:6379".into(),
        settings,
    };
    let good = redis_checks(
        Role::Api,
        &reached(BrokerSettings::Read {
            maxmemory_policy: Some("noeviction".into()),
            appendonly: Some("yes".into()),
        }),
    );
    assert_eq!(
        levels(&good),
        [("redis", Level::Ok), ("redis config", Level::Ok)]
    );
    let bad = redis_checks(
        Role::Api,
        &reached(BrokerSettings::Read {
            maxmemory_policy: Some("allkeys-lru".into()),
            appendonly: Some("no".into()),
        }),
    );
    assert_eq!(bad[1].level, Level::Fail);
    assert!(bad[1].detail.contains("allkeys-lru") && bad[1].detail.contains("appendonly is no"));
    let denied = redis_checks(
        Role::Worker,
        &reached(BrokerSettings::Denied("NOPERM".into())),
    );
    assert_eq!(denied[1].level, Level::Warn);
    assert!(denied[1].fix.as_ref().unwrap().contains("crucible-admin"));
}

#[test]
fn an_api_that_would_refuse_to_start_fails() {
    assert_eq!(auth_check(None, None).level, Level::Ok);
    assert_eq!(
        auth_check(Some("api.example:10907"), None).level,
        Level::Warn
    );
    assert_eq!(
        auth_check(Some("0.0.0.0:10907"), Some(Ok(AuthMode::Required))).level,
        Level::Ok
    );
    let refused = auth_check(
        Some("0.0.0.0:10907"),
        Some(Err("no CRUCIBLE_ADMIN_TOKEN".into())),
    );
    assert_eq!(refused.level, Level::Fail);
    assert!(refused.fix.unwrap().contains("openssl rand -hex 32"));
}

#[test]
fn the_api_health_answer_decides_its_line() {
    let body = |status: &str, alive: u64| {
        serde_json::to_string(&HealthStatus {
            status: status.into(),
            broker: "redis".into(),
            broker_ok: true,
            workers_alive: alive,
            workers_unhealthy: 0,
            version: "0.1.0".into(),
        })
        .unwrap()
    };
    let url = "http://10.0.0.10:10907/";
    let ok = api_check(url, &Ok((200, body("ok", 3))));
    assert_eq!(ok.level, Level::Ok);
    assert!(
        ok.detail.starts_with("http://10.0.0.10:10907/health: ok"),
        "{ok}"
    );
    assert_eq!(
        api_check(url, &Ok((200, body("degraded", 0)))).level,
        Level::Warn
    );
    assert_eq!(
        api_check(url, &Ok((503, body("unavailable", 0)))).level,
        Level::Fail
    );
    assert_eq!(
        api_check(url, &Ok((404, "not found".into()))).level,
        Level::Fail
    );
    assert_eq!(
        api_check(url, &Err("connection refused".into())).level,
        Level::Fail
    );
}
