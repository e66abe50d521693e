//! The harness both suites share (`contract/`, `tenants.rs`): a throwaway `redis-server` on
//! a free port, a broker of either kind on a fresh key prefix, the fixtures, bounded polls and
//! the [`contract!`] macro that runs each test against both brokers.
//!
//! Every wait is bounded: each test runs under [`TEST_DEADLINE`] and every poll has its own
//! deadline. Sleeps appear only where the passage of time is the thing under test.

// Each test crate uses its own part of the harness.
#![allow(dead_code)]

use chrono::Utc;
use crucible_shared::{
    BrokerConfig, DeviceClass, DeviceInfo, DeviceKind, EvalResult, EvaluateRequest, LeaseToken,
    Priority, TaskId, TaskSpec, TaskStatus, TaskView, TenantId, VerdictCode, WorkerId, WorkerInfo,
    WorkerState,
};
use crucible_task_manager::{AckOutcome, Broker, Lease, MemoryBroker, RedisBroker};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;

pub const TEST_DEADLINE: Duration = Duration::from_secs(60);
/// Bound on any single "eventually" poll.
pub const POLL_DEADLINE: Duration = Duration::from_secs(10);
pub const POLL_EVERY: Duration = Duration::from_millis(20);

// ---------------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Backend {
    Memory,
    Redis,
}

/// A throwaway `redis-server` on a free port, killed on drop; [`RedisServer::start_acl`]
/// takes only an ACL user with a password (the default user is off), so every Redis test also
/// runs authenticated.
pub use crucible_test_support::RedisServer;

pub struct Env {
    pub backend: Backend,
    pub cfg: BrokerConfig,
    pub broker: Arc<dyn Broker>,
    pub redis: Option<RedisServer>,
}

impl Env {
    pub async fn start(backend: Backend, mut cfg: BrokerConfig) -> Self {
        cfg.key_prefix = format!("ct{}", uuid::Uuid::new_v4().simple());
        match backend {
            Backend::Memory => Env {
                backend,
                broker: Arc::new(MemoryBroker::new(cfg.clone())),
                cfg,
                redis: None,
            },
            Backend::Redis => {
                let server = RedisServer::start_acl().await;
                let broker = RedisBroker::connect(&server.url, cfg.clone()).expect("connect");
                broker.ping().await.expect("ping the fresh redis");
                Env {
                    backend,
                    broker: Arc::new(broker),
                    cfg,
                    redis: Some(server),
                }
            }
        }
    }

    /// Another node on the same queue: a second `RedisBroker` on the same Redis (as a second
    /// API replica would be), or the same in-process broker.
    pub fn peer(&self) -> Arc<dyn Broker> {
        match &self.redis {
            Some(server) => {
                Arc::new(RedisBroker::connect(&server.url, self.cfg.clone()).expect("connect peer"))
            }
            None => self.broker.clone(),
        }
    }

    pub async fn raw(&self) -> Option<::redis::aio::MultiplexedConnection> {
        let server = self.redis.as_ref()?;
        let client = ::redis::Client::open(server.url.as_str()).expect("valid url");
        Some(
            client
                .get_multiplexed_async_connection()
                .await
                .expect("raw redis connection"),
        )
    }

    pub async fn view(&self, id: &TaskId) -> TaskView {
        self.broker
            .get_task(id)
            .await
            .expect("get_task")
            .unwrap_or_else(|| panic!("task {id} not found"))
    }

    /// Drives `claim` until it is blocked waiting for work: one poll for the memory broker
    /// (it registers its waker before returning Pending); for Redis, until the server lists a
    /// client inside BLPOP.
    pub async fn block<F: Future>(&self, claim: &mut Pin<Box<F>>) {
        match self.backend {
            Backend::Memory => {
                let polled = std::future::poll_fn(|cx| Poll::Ready(claim.as_mut().poll(cx))).await;
                assert!(polled.is_pending(), "claim returned with nothing queued");
            }
            Backend::Redis => {
                let mut raw = self.raw().await.expect("redis env");
                let blocked = async {
                    let deadline = Instant::now() + POLL_DEADLINE;
                    loop {
                        let clients: String = ::redis::cmd("CLIENT")
                            .arg("LIST")
                            .query_async(&mut raw)
                            .await
                            .expect("client list");
                        if clients.contains("cmd=blpop") {
                            return;
                        }
                        assert!(Instant::now() < deadline, "claim never blocked in BLPOP");
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                };
                tokio::select! {
                    _ = claim.as_mut() => panic!("claim returned with nothing queued"),
                    () = blocked => {}
                }
            }
        }
    }
}

pub fn config() -> BrokerConfig {
    BrokerConfig {
        lease_ttl: Duration::from_secs(30),
        max_attempts: 3,
        result_ttl: Duration::from_secs(600),
        queue_cap: 10_000,
        worker_liveness: Duration::from_secs(15),
        key_prefix: String::new(),
        cache_scope: "test-device".to_owned(),
        ..BrokerConfig::default()
    }
}

pub fn spec(tag: &str) -> TaskSpec {
    spec_with(tag, Priority::Normal, None)
}

pub fn spec_with(tag: &str, priority: Priority, idempotency_key: Option<&str>) -> TaskSpec {
    let mut request = EvaluateRequest::new(
        format!("class Model: pass  # {tag}"),
        "class ModelNew: pass",
    );
    request.priority = priority;
    request.idempotency_key = idempotency_key.map(str::to_owned);
    TaskSpec::new(request, 42)
}

pub fn verdict(tag: &str) -> EvalResult {
    EvalResult::failed_before_trials(
        VerdictCode::Correctness,
        tag,
        true,
        5,
        DeviceInfo {
            kind: DeviceKind::Cpu,
            name: "test cpu".to_owned(),
            class: None,
        },
    )
}

/// The class the contract's workers claim for unless a test says otherwise.
pub fn h100() -> DeviceClass {
    class("h100")
}

pub fn class(name: &str) -> DeviceClass {
    DeviceClass::parse(name).expect("a valid class")
}

pub fn worker(n: u32) -> WorkerId {
    WorkerId(format!("w_test{n}"))
}

pub fn worker_info(id: &WorkerId, state: WorkerState) -> WorkerInfo {
    WorkerInfo {
        worker_id: id.clone(),
        node: "node-a".to_owned(),
        device: DeviceInfo {
            kind: DeviceKind::Cuda,
            name: "NVIDIA H100".to_owned(),
            class: Some(h100()),
        },
        device_index: Some(0),
        state,
        current_task: None,
        tasks_done: 3,
        started_at: Utc::now(),
        last_heartbeat: Utc::now(),
        sandbox: None,
    }
}

pub fn stale(lease: &Lease) -> Lease {
    Lease {
        token: LeaseToken::random(),
        ..lease.clone()
    }
}

pub async fn claim_now(broker: &Arc<dyn Broker>, w: &WorkerId) -> Lease {
    broker
        .claim(w, &h100(), Duration::ZERO)
        .await
        .expect("claim")
        .expect("a task is queued")
}

/// Polls `check` until it yields a value, for at most [`POLL_DEADLINE`].
pub async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + POLL_DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Calls `reap_expired` until it reports something, returning what it reported.
pub async fn reap_until(broker: &Arc<dyn Broker>, what: &str) -> crucible_task_manager::ReapReport {
    eventually(what, async || {
        let r = broker.reap_expired().await.expect("reap");
        (r.requeued + r.failed > 0).then_some(r)
    })
    .await
}

/// Submits `s`, claims it and completes it with `result`; returns its id.
pub async fn evaluate(env: &Env, s: TaskSpec, result: EvalResult) -> TaskId {
    let sub = env.broker.submit(&admin(), s).await.expect("submit");
    assert_eq!(sub.status, TaskStatus::Queued, "{sub:?}");
    let lease = claim_now(&env.broker, &worker(1)).await;
    assert_eq!(lease.task_id, sub.task_id);
    assert_eq!(
        env.broker.complete(&lease, result).await.unwrap(),
        AckOutcome::Accepted
    );
    sub.task_id
}

/// Lifetime result cache hits, misses and coalesced submissions.
pub async fn cache_counters(env: &Env) -> (u64, u64, u64) {
    let q = env.broker.queue_status().await.unwrap();
    (q.cache_hits_total, q.cache_misses_total, q.coalesced_total)
}

/// Runs each named test (an `async fn(Backend)` of the invoking file) against `MemoryBroker`
/// (module `memory`) and against `RedisBroker` on a real redis-server (module `redis`).
macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::run(super::Backend::Memory, super::$name).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::run(super::Backend::Redis, super::$name).await;
                }
            )*
        }
    };
}

pub async fn run<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(Backend) -> Fut,
    Fut: Future<Output = ()>,
{
    tokio::time::timeout(TEST_DEADLINE, test(backend))
        .await
        .unwrap_or_else(|_| panic!("test exceeded {TEST_DEADLINE:?} on {backend:?}"));
}

pub(crate) use contract;

/// The built-in tenant: what single-user callers (and most of the contract) submit as.
pub fn admin() -> TenantId {
    TenantId::builtin()
}

/// The SHA-256 the API would store for `name`'s token (any unique string does here).
pub fn token_hash(name: &str) -> String {
    format!("{:0>64}", name.len().to_string() + name)
}

/// Creates tenant `name` with the settings `edit` makes.
pub async fn create(
    env: &Env,
    name: &str,
    edit: impl FnOnce(&mut crucible_shared::CreateTenantRequest),
) -> crucible_task_manager::Tenant {
    let mut request = crucible_shared::CreateTenantRequest::new(name);
    edit(&mut request);
    env.broker
        .create_tenant(&request, &token_hash(name))
        .await
        .expect("create tenant")
}
