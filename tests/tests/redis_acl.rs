//! The broker's least-privilege ACL (the users of `deploy/redis.conf`, over TLS): each role does
//! its whole job through `RedisBroker` with nothing refused, and is refused everything else —
//! FLUSHALL, CONFIG, KEYS, keys outside the prefix or of the other role, the same through Lua.
//! No Python here: `redis_tls.rs` runs the real processes.

use chrono::Utc;
use crucible_api_server::rollouts::{BATCH_KEYS_NAMESPACE, RECORDS_NAMESPACE};
use crucible_gpu_worker::build_cache::BUILD_CACHE_NAMESPACE;
use crucible_shared::{
    BrokerConfig, DeviceInfo, DeviceKind, EvalResult, EvaluateRequest, Priority, TaskSpec,
    TaskStatus, TenantId, VerdictCode, WorkerId, WorkerInfo, WorkerState,
};
use crucible_task_manager::{
    AckOutcome, Broker, CancelOutcome, LeaseState, REF_CACHE_NAMESPACE, RedisBroker,
};
use crucible_tests::secure_redis::{Role, SecureRedis};
use crucible_tests::*;
use std::time::Duration;

/// The prefix `deploy/redis.conf` binds the roles to (CRUCIBLE_KEY_PREFIX's default).
const PREFIX: &str = "crucible";

fn config() -> BrokerConfig {
    BrokerConfig {
        // Short enough for the reaper's path to run within the test.
        lease_ttl: Duration::from_millis(300),
        max_attempts: 3,
        result_ttl: Duration::from_secs(600),
        key_prefix: PREFIX.to_owned(),
        ..BrokerConfig::default()
    }
}

fn spec(tag: &str) -> TaskSpec {
    let mut request = EvaluateRequest::new(
        format!("class Model: pass  # {tag}"),
        "class ModelNew: pass",
    );
    request.priority = Priority::Normal;
    TaskSpec { request, seed: 7 }
}

fn verdict() -> EvalResult {
    let device = DeviceInfo {
        kind: DeviceKind::Cpu,
        name: "test cpu".to_owned(),
    };
    EvalResult::failed_before_trials(VerdictCode::Correctness, "wrong", true, 2, device)
}

fn worker_info(id: &WorkerId) -> WorkerInfo {
    WorkerInfo {
        worker_id: id.clone(),
        node: "node-a".to_owned(),
        device: DeviceInfo {
            kind: DeviceKind::Cpu,
            name: "test cpu".to_owned(),
        },
        device_index: None,
        state: WorkerState::Idle,
        current_task: None,
        tasks_done: 0,
        started_at: Utc::now(),
        last_heartbeat: Utc::now(),
        sandbox: None,
    }
}

async fn open(server: &SecureRedis, role: Role) -> RedisBroker {
    RedisBroker::open(&server.target(role), config())
        .await
        .unwrap_or_else(|e| panic!("{role:?} cannot connect: {e}"))
}

/// Every `Broker` call, each through the role that makes it in a deployment (API replicas and
/// their reaper; workers), on every path of the Lua scripts: not one command is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_does_its_whole_job_with_nothing_refused() {
    let logs = log_dir("redis-acl-allowed");
    // Mutual TLS here (client certificates required); the process tests use the shipped policy.
    let server = SecureRedis::start(&logs, true).await;
    let api = open(&server, Role::Api).await;
    let worker = open(&server, Role::Worker).await;
    let w = WorkerId("w_acl".to_owned());

    worker.worker_heartbeat(&worker_info(&w)).await.unwrap();
    assert_eq!(api.list_workers().await.unwrap().len(), 1);
    // An empty queue: the claim blocks in BLPOP until its wait ends.
    assert!(
        worker
            .claim(&w, Duration::from_millis(300))
            .await
            .unwrap()
            .is_none()
    );

    // Submit, claim, renew, complete; the same request again is answered from the cache.
    let first = api.submit(&TenantId::builtin(), spec("a")).await.unwrap();
    let lease = worker
        .claim(&w, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.task_id, first.task_id);
    assert_eq!(worker.renew(&lease).await.unwrap(), LeaseState::Held);
    assert_eq!(
        worker.complete(&lease, verdict()).await.unwrap(),
        AckOutcome::Accepted
    );
    let done = api
        .wait_terminal(&first.task_id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(done.map(|v| v.status), Some(TaskStatus::Done));
    assert!(
        api.submit(&TenantId::builtin(), spec("a"))
            .await
            .unwrap()
            .cached
    );

    // A batch with an idempotency key reused and an identical request coalesced; its counters,
    // task list and finished log; a worker releases one task, which is requeued.
    let mut keyed = spec("b");
    keyed.request.idempotency_key = Some("acl-key".to_owned());
    let (batch, subs) = api
        .submit_batch(
            &TenantId::builtin(),
            vec![keyed.clone(), keyed, spec("c"), spec("c")],
        )
        .await
        .unwrap();
    assert!(subs[1].deduplicated && subs[3].coalesced, "{subs:?}");
    let lease = worker
        .claim(&w, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        worker.release(&lease, "test release").await.unwrap(),
        AckOutcome::Accepted
    );
    let status = api.batch_status(&batch, true).await.unwrap().unwrap();
    assert_eq!(status.counts.queued, 4, "{status:?}");

    // A lease left to expire is reaped by the API; a running task cancelled by the API tells
    // its worker at the next renewal; a queued one is cancelled too.
    let lease = worker
        .claim(&w, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    let reaped = eventually(
        "the lease to expire and be reaped",
        Duration::from_secs(10),
        || async {
            let r = api.reap_expired().await.unwrap();
            (r.requeued + r.failed > 0).then_some(r)
        },
    )
    .await;
    assert_eq!(reaped.requeued, 1, "{reaped:?}");
    let lease2 = worker
        .claim(&w, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease2.task_id, lease.task_id);
    assert!(matches!(
        api.cancel(&lease2.task_id).await.unwrap(),
        CancelOutcome::Cancelled { .. }
    ));
    assert_eq!(worker.renew(&lease2).await.unwrap(), LeaseState::Cancelled);
    // The batch's other task, finished by a worker, joins the batch's log of finished tasks.
    let lease = worker
        .claim(&w, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        worker.complete(&lease, verdict()).await.unwrap(),
        AckOutcome::Accepted
    );
    let page = api
        .batch_finished(&batch, 0, 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((page.finished, page.distinct), (2, 2), "{page:?}");
    let queued = api.submit(&TenantId::builtin(), spec("d")).await.unwrap();
    assert!(matches!(
        api.cancel(&queued.task_id).await.unwrap(),
        CancelOutcome::Cancelled { .. }
    ));
    api.get_task(&queued.task_id).await.unwrap().unwrap();
    api.get_spec(&queued.task_id).await.unwrap().unwrap();
    api.queue_status().await.unwrap();

    // Each role's own key-value namespaces.
    let ttl = Duration::from_secs(60);
    for ns in [RECORDS_NAMESPACE, BATCH_KEYS_NAMESPACE] {
        api.kv_put(ns, "k", "v", ttl).await.unwrap();
        assert_eq!(api.kv_get(ns, "k").await.unwrap().as_deref(), Some("v"));
    }
    for ns in [REF_CACHE_NAMESPACE, BUILD_CACHE_NAMESPACE] {
        worker.kv_put(ns, "k", "v", ttl).await.unwrap();
        assert_eq!(worker.kv_get(ns, "k").await.unwrap().as_deref(), Some("v"));
    }
    api.ping().await.unwrap();
    worker.ping().await.unwrap();
    worker.deregister_worker(&w).await.unwrap();

    assert_eq!(server.acl_denials().await, Vec::<String>::new());
}

/// What a leaked credential of either role cannot do, directly or from a Lua script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_is_refused_everything_else() {
    let logs = log_dir("redis-acl-refused");
    let server = SecureRedis::start(&logs, false).await;
    let mut admin = server.connection(Role::Admin).await.unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("{PREFIX}:stats"))
        .arg("kept")
        .query_async(&mut admin)
        .await
        .unwrap();

    for role in [Role::Api, Role::Worker] {
        let mut c = server.connection(role).await.unwrap();
        let other_kv = match role {
            Role::Api => format!("{PREFIX}:kv:3:ref:problem"),
            _ => format!("{PREFIX}:kv:8:rollouts:b_1"),
        };
        let refused: Vec<Vec<String>> = vec![
            vec!["FLUSHALL".into()],
            vec!["FLUSHDB".into()],
            vec!["CONFIG".into(), "GET".into(), "*".into()],
            vec![
                "CONFIG".into(),
                "SET".into(),
                "appendonly".into(),
                "no".into(),
            ],
            vec!["KEYS".into(), "*".into()],
            vec!["KEYS".into(), format!("{PREFIX}:*")],
            vec!["SCAN".into(), "0".into()],
            vec!["ACL".into(), "LIST".into()],
            vec!["SCRIPT".into(), "FLUSH".into()],
            vec!["EVAL".into(), "return 1".into(), "0".into()],
            vec!["SELECT".into(), "1".into()],
            vec!["CLIENT".into(), "LIST".into()],
            vec!["SHUTDOWN".into(), "NOSAVE".into()],
            vec!["SUBSCRIBE".into(), "x".into()],
            // Outside the prefix (a prefix that merely starts alike included).
            vec!["SET".into(), "other:key".into(), "x".into()],
            vec!["SET".into(), format!("{PREFIX}2:task:t_1"), "x".into()],
            vec!["GET".into(), "other:key".into()],
            vec!["DEL".into(), "other:key".into()],
            // The other role's key-value namespaces.
            vec!["SET".into(), other_kv.clone(), "forged".into()],
            vec!["GET".into(), other_kv.clone()],
        ];
        for args in refused {
            let mut cmd = redis::cmd(&args[0]);
            for a in &args[1..] {
                cmd.arg(a);
            }
            let reply: redis::RedisResult<redis::Value> = cmd.query_async(&mut c).await;
            let err = reply.expect_err(&format!("{role:?} was allowed {args:?}"));
            assert_eq!(err.code(), Some("NOPERM"), "{role:?} {args:?}: {err}");
        }
        if role == Role::Worker {
            // A worker cannot list queues, batches or workers.
            for (cmd, key) in [("LRANGE", "queue:normal"), ("ZRANGE", "workers")] {
                let reply: redis::RedisResult<redis::Value> = redis::cmd(cmd)
                    .arg(format!("{PREFIX}:{key}"))
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut c)
                    .await;
                assert_eq!(reply.unwrap_err().code(), Some("NOPERM"), "worker {cmd}");
            }
        }
        // Loading a script is allowed (the brokers' scripts are loaded on NOSCRIPT), but a
        // script runs with the user's rights: none of these may take effect.
        let escapes = [
            "return redis.call('FLUSHALL')".to_owned(),
            "return redis.call('CONFIG', 'SET', 'appendonly', 'no')".to_owned(),
            "return redis.call('KEYS', '*')".to_owned(),
            "return redis.call('SET', 'other:key', 'x')".to_owned(),
            format!("return redis.call('SET', '{other_kv}', 'forged')"),
        ];
        for body in escapes {
            let script = redis::Script::new(&body);
            let reply: redis::RedisResult<redis::Value> = script.invoke_async(&mut c).await;
            assert!(reply.is_err(), "{role:?} ran {body}: {reply:?}");
        }
    }

    // Nothing above touched the data.
    let (kept, others): (Option<String>, u64) = redis::pipe()
        .cmd("GET")
        .arg(format!("{PREFIX}:stats"))
        .cmd("EXISTS")
        .arg("other:key")
        .arg(format!("{PREFIX}:kv:3:ref:problem"))
        .arg(format!("{PREFIX}:kv:8:rollouts:b_1"))
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!((kept.as_deref(), others), (Some("kept"), 0));
    let denials = server.acl_denials().await;
    assert!(
        denials.iter().any(|d| d.starts_with("crucible-worker"))
            && denials.iter().any(|d| d.starts_with("crucible-api")),
        "{denials:?}"
    );
}
