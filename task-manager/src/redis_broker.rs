//! [`RedisBroker`]: the queue shared by every API replica and worker. Every state transition
//! is one Lua script (`src/lua/`), so it is atomic, and every timestamp comes from Redis `TIME`,
//! so all nodes share one clock. Submission is in `redis_broker/submit.rs`, claiming in
//! `redis_broker/claim.rs`, renewing, completing, releasing and reaping leases in
//! `redis_broker/leases.rs`, cancelling in `redis_broker/cancel.rs`, reads of tasks and batch
//! logs in `redis_broker/views.rs`, the worker registry's writes in `redis_broker/workers.rs`,
//! tenants in `redis_broker/tenants.rs`, recent activity in `redis_broker/activity.rs`, the
//! scripts in `redis_broker/scripts.rs`, the optional `WAIT` for replicas in
//! `redis_broker/replicas.rs`; the key table (every key's name, what it holds, which role
//! reaches it) in `redis_broker/keys.rs`.

mod activity;
mod cancel;
mod claim;
mod drain;
mod keys;
mod kv_if_absent;
mod leases;
mod reaper_lease;
mod replicas;
mod scripts;
mod submit;
mod tenants;
#[cfg(test)]
mod tests;
mod views;
mod workers;

use keys::Keys;
use scripts::Scripts;
use views::{VIEW_FIELDS, decode_view};

use crate::activity::ActivityReport;
use crate::broker::{
    AckOutcome, Broker, BrokerError, CancelOutcome, FinishedPage, HeartbeatAnswer, Lease,
    LeaseState, ReapReport, Submitted,
};
use crate::kv::{KvCounts, KvNamespace};
use crate::policy::CLAIM_CYCLE;
use crate::redis_conn::{
    CONNECT_TIMEOUT, ConnectError, Connection, Manager, Nodes, Pool, RedisTarget, check,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crucible_shared::{
    BatchCancelCounts, BatchId, BatchStatus, BrokerConfig, DeviceClass, EvalResult, QueueStatus,
    StatusCounts, TaskId, TaskSpec, TaskStatus, TaskView, TenantId, WorkerId, WorkerInfo,
};
use deadpool::Runtime;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Bound on every ordinary command, so a hung Redis surfaces as `Unavailable`. Generous
/// because a batch submission may carry hundreds of megabytes of source.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
const POOL_SIZE: usize = 32;
/// Expired leases handled per reap script call, so that one call never stalls Redis.
const REAP_CHUNK: u64 = 500;
/// First and longest pause of `wait_terminal`'s polling.
const POLL_START: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(200);

/// The broker of deployments: every state change is one Lua script, atomic on the Redis
/// server, so any number of API servers and workers share one queue.
pub struct RedisBroker {
    cfg: BrokerConfig,
    pool: Pool,
    /// Where connections go: the URL's server, or the primary the Sentinels name. Blocking
    /// waits (BLPOP) get connections of their own from it: on a pooled connection a waiter
    /// dropped mid-wait would hand back a connection still blocked on the server.
    pub(crate) nodes: Arc<Nodes>,
    /// Kept blocking connections, each with the primary's epoch it was made in.
    idle_blocking: Mutex<Vec<(MultiplexedConnection, u64)>>,
    scripts: Scripts,
    /// [`CLAIM_CYCLE`] as the claim script reads it, e.g. `hnhlhnh`.
    claim_cycle: String,
}

/// Connection and pool failures mean Redis cannot be reached; replies of the wrong shape mean
/// the data is not what this code wrote.
fn redis_err(e: RedisError) -> BrokerError {
    // `maxmemory` with `noeviction`: Redis refuses the write (a script before it runs).
    if e.code() == Some("OOM") || e.to_string().contains("OOM command not allowed") {
        return BrokerError::OutOfMemory(e.to_string());
    }
    match e.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => BrokerError::Corrupt(e.to_string()),
        _ => BrokerError::Unavailable(e.to_string()),
    }
}

fn corrupt(what: impl std::fmt::Display) -> BrokerError {
    BrokerError::Corrupt(what.to_string())
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn time_from_ms(ms: &str) -> Result<DateTime<Utc>, BrokerError> {
    // Scores come back as doubles ("1712345678901" or "1.712345678901e12").
    let value: f64 = ms
        .parse()
        .map_err(|_| corrupt(format!("bad timestamp {ms:?}")))?;
    DateTime::from_timestamp_millis(value as i64)
        .ok_or_else(|| corrupt(format!("timestamp out of range {ms:?}")))
}

/// The pause after `prev` in a polling loop: doubling from [`POLL_START`] up to [`POLL_MAX`].
fn next_poll(prev: Option<Duration>) -> Duration {
    prev.map_or(POLL_START, |d| (d * 2).min(POLL_MAX))
}

fn parse_status(s: &str) -> Result<TaskStatus, BrokerError> {
    TaskStatus::parse(s).ok_or_else(|| corrupt(format!("unknown task status {s:?}")))
}

impl RedisBroker {
    /// [`RedisBroker::connect_to`] a bare URL (`rediss://` checked against the system roots).
    pub fn connect(url: &str, cfg: BrokerConfig) -> Result<Self, BrokerError> {
        Self::connect_to(&RedisTarget::new(url), cfg)
            .map_err(|e| BrokerError::Unavailable(e.to_string()))
    }

    /// Builds the connection pool; nothing is sent to Redis until the first call (see
    /// `RedisBroker::open` in `redis_conn`), so a process can start while Redis is still down. Fails only on
    /// settings that can never work: a bad URL, unreadable or malformed TLS files.
    pub fn connect_to(target: &RedisTarget, cfg: BrokerConfig) -> Result<Self, ConnectError> {
        let nodes = Arc::new(target.nodes()?);
        let conn_cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let pool_error = |e: String| ConnectError::InvalidUrl {
            url: target.redacted(),
            reason: e,
        };
        let manager = Manager::new(Arc::clone(&nodes), conn_cfg, CONNECT_TIMEOUT);
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(RESPONSE_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| pool_error(format!("redis pool: {e}")))?;
        let claim_cycle = CLAIM_CYCLE
            .iter()
            .map(|p| &p.as_str()[..1])
            .collect::<String>();
        Ok(Self {
            cfg,
            pool,
            nodes,
            idle_blocking: Mutex::new(Vec::new()),
            scripts: Scripts::load(),
            claim_cycle,
        })
    }

    fn prefix(&self) -> &str {
        &self.cfg.key_prefix
    }

    fn keys(&self) -> Keys<'_> {
        Keys(self.prefix())
    }

    async fn conn(&self) -> Result<Connection, BrokerError> {
        self.pool
            .get()
            .await
            .map(Connection::from)
            .map_err(|e| BrokerError::Unavailable(format!("redis pool: {e}")))
    }
}

impl RedisBroker {
    /// [`RedisBroker::connect_to`], then one `PING` on a fresh connection: a wrong password, a
    /// failed TLS handshake or an ACL that refuses the user are errors; a Redis that is not
    /// reachable (yet) is logged and tolerated, as every request retries it.
    pub async fn open(target: &RedisTarget, cfg: BrokerConfig) -> Result<Self, ConnectError> {
        let broker = Self::connect_to(target, cfg)?;
        let url = target.redacted();
        match check(&broker.nodes, &url, CONNECT_TIMEOUT).await {
            Ok(()) => tracing::info!(redis = %url, "redis connected"),
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, "redis is not reachable yet; requests fail until it is");
            }
            Err(e) => return Err(e),
        }
        Ok(broker)
    }
}

#[async_trait]
impl Broker for RedisBroker {
    fn config(&self) -> &BrokerConfig {
        &self.cfg
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    async fn ping(&self) -> Result<(), BrokerError> {
        let mut c = self.conn().await?;
        let _: String = redis::cmd("PING")
            .query_async(&mut c)
            .await
            .map_err(redis_err)?;
        Ok(())
    }

    async fn submit(&self, tenant: &TenantId, spec: TaskSpec) -> Result<Submitted, BrokerError> {
        self.submit_specs(tenant, std::slice::from_ref(&spec), None)
            .await?
            .pop()
            .ok_or_else(|| corrupt("submit produced no task"))
    }

    async fn submit_batch(
        &self,
        tenant: &TenantId,
        specs: Vec<TaskSpec>,
    ) -> Result<(BatchId, Vec<Submitted>), BrokerError> {
        let batch_id = BatchId::random();
        let out = self.submit_specs(tenant, &specs, Some(&batch_id)).await?;
        Ok((batch_id, out))
    }

    async fn get_task(&self, id: &TaskId) -> Result<Option<TaskView>, BrokerError> {
        let mut c = self.conn().await?;
        let row: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.keys().task(id))
            .arg(&VIEW_FIELDS[..])
            .query_async(&mut c)
            .await
            .map_err(redis_err)?;
        decode_view(id, row)
    }

    async fn get_spec(&self, id: &TaskId) -> Result<Option<TaskSpec>, BrokerError> {
        let mut c = self.conn().await?;
        let spec: Option<String> = redis::cmd("HGET")
            .arg(self.keys().task(id))
            .arg("spec")
            .query_async(&mut c)
            .await
            .map_err(redis_err)?;
        spec.map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| corrupt(format!("spec of task {id}: {e}")))
    }

    async fn cancel(&self, id: &TaskId) -> Result<CancelOutcome, BrokerError> {
        self.cancel_task(id).await
    }

    async fn cancel_batch(&self, id: &BatchId) -> Result<Option<BatchCancelCounts>, BrokerError> {
        self.cancel_batch_tasks(id).await
    }

    async fn batch_finished(
        &self,
        id: &BatchId,
        after: u64,
        limit: usize,
        wait: Duration,
    ) -> Result<Option<FinishedPage>, BrokerError> {
        let deadline = Instant::now() + wait;
        let mut pause = None;
        loop {
            let Some((distinct, finished, ids)) = self.finished_log(id, after, limit).await? else {
                return Ok(None);
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            if ids.is_empty() && finished < distinct && !remaining.is_zero() {
                let p = next_poll(pause);
                pause = Some(p);
                tokio::time::sleep(p.min(remaining)).await;
                continue;
            }
            let views = self.views_by_id(&ids).await?;
            return Ok(Some(FinishedPage {
                tasks: ids.into_iter().zip(views).collect(),
                finished,
                distinct,
            }));
        }
    }

    async fn batch_status(
        &self,
        id: &BatchId,
        include_tasks: bool,
    ) -> Result<Option<BatchStatus>, BrokerError> {
        let mut c = self.conn().await?;
        let (counts, task_ids): (Vec<Option<u64>>, Vec<String>) = redis::pipe()
            .atomic()
            .cmd("HMGET")
            .arg(self.keys().batch(id))
            .arg(&["total", "queued", "running", "done", "failed", "cancelled"][..])
            .cmd("LRANGE")
            .arg(self.keys().batch_tasks(id))
            .arg(0)
            .arg(-1)
            .query_async(&mut c)
            .await
            .map_err(redis_err)?;
        drop(c);
        let [total, queued, running, done, failed, cancelled]: [Option<u64>; 6] = counts
            .try_into()
            .map_err(|_| corrupt("batch hash reply of the wrong length"))?;
        let Some(total) = total else {
            return Ok(None);
        };
        let task_ids: Vec<TaskId> = task_ids.into_iter().map(TaskId).collect();
        let tasks = if include_tasks {
            Some(self.views(&task_ids).await?)
        } else {
            None
        };
        Ok(Some(BatchStatus {
            batch_id: id.clone(),
            total,
            counts: StatusCounts {
                queued: queued.unwrap_or(0),
                running: running.unwrap_or(0),
                done: done.unwrap_or(0),
                failed: failed.unwrap_or(0),
                cancelled: cancelled.unwrap_or(0),
            },
            task_ids,
            tasks,
        }))
    }

    async fn queue_status(&self) -> Result<QueueStatus, BrokerError> {
        self.read_queue_status().await
    }

    async fn activity(&self) -> Result<ActivityReport, BrokerError> {
        self.read_activity().await
    }

    async fn claim(
        &self,
        worker: &WorkerId,
        class: &DeviceClass,
        wait: Duration,
    ) -> Result<Option<Lease>, BrokerError> {
        self.claim_within(worker, class, wait).await
    }

    async fn renew(&self, lease: &Lease) -> Result<LeaseState, BrokerError> {
        self.renew_lease(lease).await
    }

    async fn complete(&self, lease: &Lease, result: EvalResult) -> Result<AckOutcome, BrokerError> {
        self.complete_lease(lease, result).await
    }

    async fn release(&self, lease: &Lease, reason: &str) -> Result<AckOutcome, BrokerError> {
        self.release_lease(lease, reason).await
    }

    async fn reap_expired(&self) -> Result<ReapReport, BrokerError> {
        self.reap_leases().await
    }

    async fn worker_heartbeat(&self, info: &WorkerInfo) -> Result<HeartbeatAnswer, BrokerError> {
        self.heartbeat(info).await
    }

    async fn deregister_worker(&self, id: &WorkerId) -> Result<(), BrokerError> {
        self.deregister(id).await
    }

    async fn list_workers(&self) -> Result<Vec<WorkerInfo>, BrokerError> {
        self.read_workers().await
    }

    async fn kv_get(
        &self,
        namespace: KvNamespace,
        key: &str,
    ) -> Result<Option<String>, BrokerError> {
        let mut c = self.conn().await?;
        self.scripts
            .kv_get
            .arg(self.prefix())
            .arg(namespace.as_str())
            .arg(key)
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)
    }

    async fn kv_counts(&self, namespace: KvNamespace) -> Result<KvCounts, BrokerError> {
        let mut c = self.conn().await?;
        let (hits, misses): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
            .arg(self.keys().stats())
            .arg(namespace.hits_field())
            .arg(namespace.misses_field())
            .query_async(&mut c)
            .await
            .map_err(redis_err)?;
        Ok(KvCounts {
            hits: hits.unwrap_or(0),
            misses: misses.unwrap_or(0),
        })
    }

    async fn kv_put(
        &self,
        namespace: KvNamespace,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), BrokerError> {
        let mut c = self.conn().await?;
        let _: () = redis::cmd("SET")
            .arg(self.keys().kv(namespace, key))
            .arg(value)
            .arg("PX")
            .arg(ms(ttl))
            .query_async(&mut c)
            .await
            .map_err(redis_err)?;
        Ok(())
    }

    async fn wait_terminal(
        &self,
        id: &TaskId,
        timeout: Duration,
    ) -> Result<Option<TaskView>, BrokerError> {
        let deadline = Instant::now() + timeout;
        let mut pause = None;
        loop {
            let view = self.get_task(id).await?;
            let remaining = deadline.saturating_duration_since(Instant::now());
            match view {
                Some(v) if !v.status.is_terminal() && !remaining.is_zero() => {
                    let p = next_poll(pause);
                    pause = Some(p);
                    tokio::time::sleep(p.min(remaining)).await;
                }
                other => return Ok(other),
            }
        }
    }

    async fn drain_worker(&self, id: &WorkerId) -> Result<bool, BrokerError> {
        self.ask_drain(id).await
    }

    async fn reaper_lease(&self, holder: &str, ttl: Duration) -> Result<bool, BrokerError> {
        self.take_reaper_lease(holder, ttl).await
    }

    async fn release_reaper_lease(&self, holder: &str) -> Result<(), BrokerError> {
        self.give_up_reaper_lease(holder).await
    }

    async fn finish_tenant_deletions(&self) -> Result<u64, BrokerError> {
        self.purge_deleted_tenants().await
    }

    async fn kv_put_if_absent(
        &self,
        namespace: KvNamespace,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<Option<String>, BrokerError> {
        self.put_kv_if_absent(namespace, key, value, ttl).await
    }
}
