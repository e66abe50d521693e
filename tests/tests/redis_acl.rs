//! The broker's least-privilege ACL (the users of `deploy/redis.conf`, over TLS): each role does
//! its whole job through `RedisBroker` with nothing refused, tenants' calls included, and is
//! refused everything else — FLUSHALL, CONFIG, KEYS, keys outside the prefix or of the other
//! role, the same through Lua; a worker cannot read the tenant registry (names, token hashes,
//! settings). No Python here: `redis_tls.rs` runs the real processes.

use chrono::Utc;
use crucible_shared::{
    BatchCancelCounts, BrokerConfig, CreateTenantRequest, DeviceClass, DeviceInfo, DeviceKind,
    EvalResult, EvaluateRequest, Priority, TaskSpec, TaskStatus, TenantId, WorkerId, WorkerInfo,
    WorkerState,
};
use crucible_task_manager::{
    AckOutcome, Broker, BrokerError, CancelOutcome, KvNamespace, Lease, LeaseState, RedisBroker,
    Tenant, TenantRegistry,
};
use crucible_tests::secure_redis::{Role, SecureRedis};
use crucible_tests::*;
use redis::aio::MultiplexedConnection;
use sha2::{Digest, Sha256};
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
        // Each submission and verdict is followed by WAIT (no replica answers within 5 ms,
        // which is only logged), so that grant is checked too.
        redis_wait_replicas: 1,
        redis_wait_timeout: Duration::from_millis(5),
        ..BrokerConfig::default()
    }
}

fn spec(tag: &str) -> TaskSpec {
    let mut request = EvaluateRequest::new(
        format!("class Model: pass  # {tag}"),
        "class ModelNew: pass",
    );
    request.priority = Priority::Normal;
    TaskSpec::new(request, 7)
}

fn verdict() -> EvalResult {
    cpu_verdict()
}

fn worker_info(id: &WorkerId) -> WorkerInfo {
    WorkerInfo {
        worker_id: id.clone(),
        node: "node-a".to_owned(),
        device: DeviceInfo {
            kind: DeviceKind::Cpu,
            name: "test cpu".to_owned(),
            class: Some(DeviceClass::cpu()),
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

/// The SHA-256 (hex) the API stores for `name`'s token; the token itself never reaches Redis.
fn token_hash(name: &str) -> String {
    Sha256::digest(format!("crt_token_of_{name}").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn create_tenant(
    api: &RedisBroker,
    name: &str,
    edit: impl FnOnce(&mut CreateTenantRequest),
) -> Tenant {
    let mut request = CreateTenantRequest::new(name);
    edit(&mut request);
    api.create_tenant(&request, &token_hash(name))
        .await
        .unwrap_or_else(|e| panic!("create tenant {name}: {e}"))
}

/// Sends `args` as `role`'s connection and expects Redis to refuse it for want of permission.
async fn assert_refused(c: &mut MultiplexedConnection, who: &str, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let reply: redis::RedisResult<redis::Value> = cmd.query_async(c).await;
    let err = reply.expect_err(&format!("{who} was allowed {args:?}"));
    assert_eq!(err.code(), Some("NOPERM"), "{who} {args:?}: {err}");
}

/// Runs a Lua script as `c`'s user and expects Redis to refuse the command in it.
async fn assert_refused_in_lua(c: &mut MultiplexedConnection, who: &str, body: &str) {
    let reply: redis::RedisResult<redis::Value> = redis::Script::new(body).invoke_async(c).await;
    let err = reply.expect_err(&format!("{who} ran {body}"));
    assert!(
        err.to_string().contains("can't access") || err.to_string().contains("can't run"),
        "{who} {body}: {err}"
    );
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

    assert!(
        !worker
            .worker_heartbeat(&worker_info(&w))
            .await
            .unwrap()
            .drain
    );
    assert_eq!(api.list_workers().await.unwrap().len(), 1);
    // An operator's drain: the API writes it, the worker's heartbeat reads it.
    assert!(api.drain_worker(&w).await.unwrap());
    assert!(
        worker
            .worker_heartbeat(&worker_info(&w))
            .await
            .unwrap()
            .drain
    );
    // An empty queue: the claim blocks in BLPOP until its wait ends.
    assert!(
        worker
            .claim(&w, &DeviceClass::cpu(), Duration::from_millis(300))
            .await
            .unwrap()
            .is_none()
    );

    // Submit, claim, renew, complete; the same request again is answered from the cache.
    let first = api.submit(&TenantId::builtin(), spec("a")).await.unwrap();
    let lease = worker
        .claim(&w, &DeviceClass::cpu(), Duration::from_secs(2))
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
        .claim(&w, &DeviceClass::cpu(), Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        worker.release(&lease, "test release").await.unwrap(),
        AckOutcome::Accepted
    );
    let status = api.batch_status(&batch, true).await.unwrap().unwrap();
    assert_eq!(status.counts.queued, 4, "{status:?}");

    // A lease left to expire is reaped by a worker's reaper (workers run it by default),
    // elected by the reaper lease, which the API's reaper then cannot take until the worker
    // gives it up; a running task cancelled by the API tells its worker at the next renewal;
    // a queued one is cancelled too.
    let lease = worker
        .claim(&w, &DeviceClass::cpu(), Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    let reaper_ttl = Duration::from_secs(30);
    assert!(worker.reaper_lease("worker-1", reaper_ttl).await.unwrap());
    assert!(!api.reaper_lease("api-1", reaper_ttl).await.unwrap());
    let reaped = eventually(
        "the lease to expire and be reaped",
        Duration::from_secs(10),
        || async {
            let r = worker.reap_expired().await.unwrap();
            (r.requeued + r.failed > 0).then_some(r)
        },
    )
    .await;
    assert_eq!(reaped.requeued, 1, "{reaped:?}");
    worker.release_reaper_lease("worker-1").await.unwrap();
    assert!(api.reaper_lease("api-1", reaper_ttl).await.unwrap());
    api.release_reaper_lease("api-1").await.unwrap();
    let lease2 = worker
        .claim(&w, &DeviceClass::cpu(), Duration::from_secs(2))
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
        .claim(&w, &DeviceClass::cpu(), Duration::from_secs(2))
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
    // What those transitions recorded, the worker's and the API's alike, read by the API.
    let activity = api.activity().await.unwrap();
    let hour = &activity.windows[1];
    assert_eq!((hour.done, hour.cancelled), (2, 2), "{hour:?}");
    assert_eq!(activity.failures.len(), 2, "{activity:?}");

    // A batch cancelled by the API: its running task's worker learns it at its renewal, and
    // the next claim drops the queued one's id that the cancel left in the queue.
    let (cancelled_batch, _) = api
        .submit_batch(&TenantId::builtin(), vec![spec("e"), spec("f")])
        .await
        .unwrap();
    let running = worker
        .claim(
            &w,
            &crucible_shared::DeviceClass::cpu(),
            Duration::from_secs(2),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        api.cancel_batch(&cancelled_batch).await.unwrap(),
        Some(BatchCancelCounts {
            cancelled_queued: 1,
            cancelled_running: 1,
            already_finished: 0,
        })
    );
    assert_eq!(worker.renew(&running).await.unwrap(), LeaseState::Cancelled);
    assert_eq!(
        worker
            .claim(&w, &crucible_shared::DeviceClass::cpu(), Duration::ZERO)
            .await
            .unwrap(),
        None
    );

    // A task of the worker's class and one of no class: the claim weighs both queues' heads,
    // and a released task of the class goes back to its class's queue and fair share.
    let mut classed = spec("e");
    classed.request.device_class = Some(DeviceClass::cpu());
    let classed = api.submit(&TenantId::builtin(), classed).await.unwrap();
    let unclassed = api.submit(&TenantId::builtin(), spec("f")).await.unwrap();
    let cpu = DeviceClass::cpu();
    let lease = worker
        .claim(&w, &cpu, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.task_id, classed.task_id);
    assert_eq!(
        worker.release(&lease, "test release").await.unwrap(),
        AckOutcome::Accepted
    );
    for expected in [&classed.task_id, &unclassed.task_id] {
        let lease = worker
            .claim(&w, &cpu, Duration::from_secs(2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&lease.task_id, expected);
        assert_eq!(
            worker.complete(&lease, verdict()).await.unwrap(),
            AckOutcome::Accepted
        );
    }
    let classes = api.queue_status().await.unwrap().classes.unwrap();
    assert!(classes.iter().all(|r| r.queued == 0), "{classes:?}");

    // Each role's own key-value namespaces.
    let ttl = Duration::from_secs(60);
    for ns in [
        KvNamespace::Rollouts,
        KvNamespace::RolloutBatchKeys,
        KvNamespace::Episodes,
        KvNamespace::KernelGym,
    ] {
        api.kv_put(ns, "k", "v", ttl).await.unwrap();
        assert_eq!(api.kv_get(ns, "k").await.unwrap().as_deref(), Some("v"));
    }
    // An episode's turn is taken with a put-if-absent (`SET NX GET`).
    assert_eq!(
        api.kv_put_if_absent(KvNamespace::Episodes, "e:0", "a", ttl)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        api.kv_put_if_absent(KvNamespace::Episodes, "e:0", "b", ttl)
            .await
            .unwrap()
            .as_deref(),
        Some("a")
    );
    for ns in [KvNamespace::Ref, KvNamespace::Build] {
        worker.kv_put(ns, "k", "v", ttl).await.unwrap();
        assert_eq!(worker.kv_get(ns, "k").await.unwrap().as_deref(), Some("v"));
    }
    api.ping().await.unwrap();
    worker.ping().await.unwrap();
    worker.deregister_worker(&w).await.unwrap();

    assert_eq!(server.acl_denials().await, Vec::<String>::new());
}

/// Every `TenantRegistry` call and every tenant path of the scripts, each through the role that
/// takes it in a deployment: the API creates, finds by token hash, lists and counts tenants,
/// submits per tenant (quota, own and shared caches, coalescing), names the owners of tasks and
/// batches, deletes a tenant with work running and queued, and its reaper finishes deletions;
/// the worker claims across tenants by weight, renews, completes into a shared cache, and
/// releases a task back into the fair share. Nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_run_through_their_roles_with_nothing_refused() {
    let logs = log_dir("redis-acl-tenants");
    let server = SecureRedis::start(&logs, false).await;
    let api = open(&server, Role::Api).await;
    let worker = open(&server, Role::Worker).await;
    let w = WorkerId("w_acl_tenants".to_owned());

    let alice = create_tenant(&api, "alice", |r| {
        r.weight = Some(3);
        r.max_queued = Some(4);
    })
    .await;
    let bob = create_tenant(&api, "bob", |r| r.share_cache = true).await;
    let carol = create_tenant(&api, "carol", |r| r.share_cache = true).await;
    let again = api
        .create_tenant(&CreateTenantRequest::new("alice"), &token_hash("alice2"))
        .await;
    assert!(
        matches!(again, Err(BrokerError::TenantExists(_))),
        "{again:?}"
    );
    assert_eq!(
        api.tenant_by_token(&token_hash("alice")).await.unwrap(),
        Some(alice.clone())
    );
    assert_eq!(
        api.tenant_by_token(&token_hash("nobody")).await.unwrap(),
        None
    );
    assert_eq!(api.list_tenants().await.unwrap().len(), 3);

    // Work of three tenants and the built-in one; alice's quota refuses what would pass it,
    // bob's identical request joins his open task.
    let (alice_batch, alice_tasks) = api
        .submit_batch(&alice.id, vec![spec("a1"), spec("a2"), spec("a3")])
        .await
        .unwrap();
    let over = api
        .submit_batch(&alice.id, vec![spec("a4"), spec("a5")])
        .await;
    assert!(
        matches!(over, Err(BrokerError::QuotaExceeded { .. })),
        "{over:?}"
    );
    // Keyed: the worker that finishes it keeps the tenant's idempotency key for result_ttl.
    let mut keyed = spec("shared");
    keyed.request.idempotency_key = Some("bob-key".to_owned());
    let bobs = api.submit(&bob.id, keyed).await.unwrap();
    assert!(api.submit(&bob.id, spec("shared")).await.unwrap().coalesced);
    let builtin = api
        .submit(&TenantId::builtin(), spec("builtin"))
        .await
        .unwrap();
    assert_eq!(
        api.task_tenant(&alice_tasks[0].task_id).await.unwrap(),
        Some(alice.id.clone())
    );
    assert_eq!(
        api.batch_tenant(&alice_batch).await.unwrap(),
        Some(alice.id.clone())
    );
    let loads = api.tenant_loads().await.unwrap();
    assert_eq!(
        loads
            .iter()
            .map(|l| (l.queued, l.running))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)),
        (5, 0),
        "{loads:?}"
    );

    // The worker claims all five across the tenants: a tenant with more queued work moves on
    // by its weight, one whose queues ran empty leaves the fair share.
    let mut leases: Vec<Lease> = Vec::new();
    for _ in 0..5 {
        leases.push(
            worker
                .claim(&w, &DeviceClass::cpu(), Duration::from_secs(2))
                .await
                .unwrap()
                .expect("queued work"),
        );
    }
    let lease_of = |id: &crucible_shared::TaskId| {
        leases
            .iter()
            .find(|l| &l.task_id == id)
            .unwrap_or_else(|| panic!("{id} was not claimed"))
            .clone()
    };
    // The built-in tenant's task goes back into the fair share (it had left it) and is claimed
    // again; bob's verdict fills the shared cache, which carol, sharing it, is answered from.
    assert_eq!(
        worker
            .release(&lease_of(&builtin.task_id), "test release")
            .await
            .unwrap(),
        AckOutcome::Accepted
    );
    let again = worker
        .claim(&w, &DeviceClass::cpu(), Duration::from_secs(2))
        .await
        .unwrap()
        .expect("the released task");
    assert_eq!(again.task_id, builtin.task_id);
    assert_eq!(
        worker.complete(&again, verdict()).await.unwrap(),
        AckOutcome::Accepted
    );
    let bob_lease = lease_of(&bobs.task_id);
    assert_eq!(worker.renew(&bob_lease).await.unwrap(), LeaseState::Held);
    assert_eq!(
        worker.complete(&bob_lease, verdict()).await.unwrap(),
        AckOutcome::Accepted
    );
    assert!(api.submit(&carol.id, spec("shared")).await.unwrap().cached);

    // Alice is deleted with one task done, two running and one queued: the running ones are
    // cancelled (their worker learns it at its next renewal), the queued one purged.
    let alice_leases: Vec<Lease> = alice_tasks.iter().map(|t| lease_of(&t.task_id)).collect();
    assert_eq!(
        worker.complete(&alice_leases[0], verdict()).await.unwrap(),
        AckOutcome::Accepted
    );
    let queued = api.submit(&alice.id, spec("a6")).await.unwrap();
    let deleted = api.delete_tenant("alice").await.unwrap().expect("alice");
    assert_eq!(
        (deleted.cancelled_running, deleted.cancelled_queued),
        (2, 1)
    );
    assert_eq!(
        worker.renew(&alice_leases[1]).await.unwrap(),
        LeaseState::Cancelled
    );
    assert_eq!(
        worker.complete(&alice_leases[2], verdict()).await.unwrap(),
        AckOutcome::Stale
    );
    let view = api.get_task(&queued.task_id).await.unwrap().unwrap();
    assert_eq!(view.status, TaskStatus::Cancelled, "{view:?}");
    assert_eq!(api.delete_tenant("alice").await.unwrap(), None);
    assert_eq!(
        api.tenant_by_token(&token_hash("alice")).await.unwrap(),
        None
    );
    // The API's reaper pass: expired leases and the deletions a replica left half done.
    api.reap_expired().await.unwrap();
    api.finish_tenant_deletions().await.unwrap();

    // Bob's queued task is cancelled; the next claim finds his queues empty and drops him from
    // the fair share, then waits for work.
    let cancelled = api.submit(&bob.id, spec("bob-2")).await.unwrap();
    assert!(matches!(
        api.cancel(&cancelled.task_id).await.unwrap(),
        CancelOutcome::Cancelled { .. }
    ));
    assert!(
        worker
            .claim(&w, &DeviceClass::cpu(), Duration::from_millis(300))
            .await
            .unwrap()
            .is_none()
    );
    assert!(api.tenant_loads().await.unwrap().is_empty());
    assert_eq!(api.list_tenants().await.unwrap().len(), 2);

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
            // A worker cannot list queues, batches, leases or workers, nor count a batch.
            for (cmd, key) in [
                ("LRANGE", "queue:tn_admin:normal"),
                ("ZRANGE", "workers"),
                ("ZRANGE", "leases"),
                ("LRANGE", "batch:b_1:tasks"),
            ] {
                let reply: redis::RedisResult<redis::Value> = redis::cmd(cmd)
                    .arg(format!("{PREFIX}:{key}"))
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut c)
                    .await;
                assert_eq!(reply.unwrap_err().code(), Some("NOPERM"), "worker {cmd}");
            }
            let batch_tasks = format!("{PREFIX}:batch:b_1:tasks");
            assert_refused(&mut c, "worker", &["LLEN", &batch_tasks]).await;
        } else {
            // The API enters tenants in the fair share; it cannot write leases or workers.
            for key in ["leases", "workers"] {
                let key = format!("{PREFIX}:{key}");
                assert_refused(&mut c, "api", &["ZADD", &key, "1", "t_1"]).await;
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

    // A worker's reaper never finishes tenant deletions: the tenant registry is the API's.
    let worker = open(&server, Role::Worker).await;
    let refused = worker.finish_tenant_deletions().await;
    assert!(refused.is_err(), "{refused:?}");

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

/// What a tenant's record holds, as the admin reads it: the key's name and every value in it.
async fn dump(admin: &mut MultiplexedConnection, key: &str) -> String {
    let kind: String = redis::cmd("TYPE")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap();
    let values: Vec<String> = match kind.as_str() {
        "string" => vec![redis::cmd("GET").arg(key).query_async(admin).await.unwrap()],
        "hash" => redis::cmd("HGETALL")
            .arg(key)
            .query_async(admin)
            .await
            .unwrap(),
        "list" => redis::cmd("LRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query_async(admin)
            .await
            .unwrap(),
        "zset" => redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(admin)
            .await
            .unwrap(),
        other => panic!("{key}: unexpected type {other}"),
    };
    format!("{key} {}", values.join(" "))
}

/// A leaked worker credential reveals neither who the tenants are nor a way to look a token
/// up: every key that holds a tenant's name or token hash (found by content, whatever the
/// layout) is refused to the worker, read or written, directly and from Lua, while the API
/// reaches it. The worker may read a tenant's weight (its claims need it) but not change it,
/// and it writes cached results without reading them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_cannot_read_tenant_records_or_token_hashes() {
    let logs = log_dir("redis-acl-registry");
    let server = SecureRedis::start(&logs, false).await;
    let api = open(&server, Role::Api).await;
    let name = "secret-team";
    let hash = token_hash(name);
    let tenant = create_tenant(&api, name, |r| {
        r.weight = Some(7);
        r.max_queued = Some(9);
    })
    .await;
    // Queued work: the tenant is in the fair share and its counters exist.
    api.submit(&tenant.id, spec("x")).await.unwrap();

    let mut admin = server.connection(Role::Admin).await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{PREFIX}:*"))
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut secret = Vec::new();
    for key in &keys {
        let text = dump(&mut admin, key).await;
        if text.contains(name) || text.contains(&hash) {
            secret.push(key.clone());
        }
    }
    secret.sort();
    // The record, the name index and the token index, all in the registry.
    assert!(secret.len() >= 3, "{secret:?} of {keys:?}");
    let registry = format!("{PREFIX}:tenants:");
    assert!(
        secret.iter().all(|k| k.starts_with(&registry)),
        "tenant names or token hashes outside {registry}: {secret:?}"
    );

    let mut api_conn = server.connection(Role::Api).await.unwrap();
    let mut c = server.connection(Role::Worker).await.unwrap();
    for key in &secret {
        let found: bool = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut api_conn)
            .await
            .unwrap();
        assert!(found, "the API reaches {key}");
        for args in [
            vec!["EXISTS", key],
            vec!["HGET", key, &hash],
            vec!["HMGET", key, "name", "token"],
            vec!["GET", key],
            vec!["HSET", key, &hash, "tn_forged"],
            vec!["DEL", key],
        ] {
            assert_refused(&mut c, "worker", &args).await;
        }
        for body in [
            format!("return redis.call('HGET', '{key}', '{hash}')"),
            format!("return redis.call('HMGET', '{key}', 'name', 'token', 'max_queued')"),
            format!("return redis.call('EXISTS', '{key}')"),
            format!("return redis.call('HSET', '{key}', '{hash}', 'tn_forged')"),
        ] {
            assert_refused_in_lua(&mut c, "worker", &body).await;
        }
    }

    // The weight a claim reads: readable, not writable.
    let weights = format!("{PREFIX}:tenant_weights");
    let weight: Option<String> = redis::cmd("HGET")
        .arg(&weights)
        .arg(tenant.id.as_str())
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(weight.as_deref(), Some("7"));
    let id = tenant.id.as_str();
    assert_refused(&mut c, "worker", &["HSET", &weights, id, "1000"]).await;
    assert_refused_in_lua(
        &mut c,
        "worker",
        &format!("return redis.call('HSET', '{weights}', '{id}', '1000')"),
    )
    .await;
    // Cached results: written by complete, never read by a worker.
    let cached = format!("{PREFIX}:rcache:{id}:scope:0123");
    assert_refused(&mut c, "worker", &["GET", &cached]).await;
    assert_refused_in_lua(
        &mut c,
        "worker",
        &format!("return redis.call('GET', '{cached}')"),
    )
    .await;

    // Nothing changed: the tenant is still found by its token, with its weight.
    assert_eq!(api.tenant_by_token(&hash).await.unwrap(), Some(tenant));
}

/// A restart of the broker on the shipped file keeps everything the scripts wrote. Redis 7.0
/// writes a script's effects to the AOF as a MULTI/EXEC block and, loading it, re-checks EXEC
/// against the ACL of the default user (redis/redis#14541): with no rights there, every block is
/// dropped without an error and the restarted broker has lost its tasks, tenants and results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_what_the_scripts_wrote() {
    let logs = log_dir("redis-acl-restart");
    let mut server = SecureRedis::start(&logs, false).await;
    let w = WorkerId("w_acl_restart".to_owned());
    let (bob, tasks, done) = {
        let api = open(&server, Role::Api).await;
        let worker = open(&server, Role::Worker).await;
        let bob = create_tenant(&api, "bob", |_| {}).await;
        let (_, tasks) = api
            .submit_batch(&bob.id, vec![spec("r1"), spec("r2")])
            .await
            .unwrap();
        let lease = worker
            .claim(&w, &DeviceClass::cpu(), Duration::from_secs(2))
            .await
            .unwrap()
            .expect("queued work");
        assert_eq!(
            worker.complete(&lease, verdict()).await.unwrap(),
            AckOutcome::Accepted
        );
        (bob, tasks, lease.task_id)
    };

    server.restart().await;
    let api = open(&server, Role::Api).await;
    let worker = open(&server, Role::Worker).await;
    assert_eq!(
        api.tenant_by_token(&token_hash("bob")).await.unwrap(),
        Some(bob)
    );
    let status = |id| {
        let api = &api;
        async move { api.get_task(id).await.unwrap().map(|v| v.status) }
    };
    assert_eq!(status(&done).await, Some(TaskStatus::Done));
    let queued = tasks
        .iter()
        .map(|t| t.task_id.clone())
        .find(|id| id != &done)
        .expect("a second task");
    assert_eq!(status(&queued).await, Some(TaskStatus::Queued));
    let lease = worker
        .claim(&w, &DeviceClass::cpu(), Duration::from_secs(2))
        .await
        .unwrap()
        .expect("the task queued before the restart");
    assert_eq!(lease.task_id, queued);
    assert_eq!(server.acl_denials().await, Vec::<String>::new());

    // The default user's rights serve the AOF replay alone: no connection is or becomes it.
    let mut anonymous = server.anonymous_connection().await.unwrap();
    for args in [
        vec!["PING"],
        vec!["GET", "crucible:stats"],
        vec!["AUTH", "default", "anything"],
        vec!["HELLO", "3", "AUTH", "default", "anything"],
    ] {
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        let answer: redis::RedisResult<redis::Value> = cmd.query_async(&mut anonymous).await;
        assert!(answer.is_err(), "{args:?} without a role: {answer:?}");
    }
}
