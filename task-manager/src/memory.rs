//! [`MemoryBroker`]: the whole queue in one process, behind one mutex. Claimers and waiters are
//! woken by [`Notify`], never by polling. Submission is in `memory/submit.rs`, claims, the
//! queue view and the worker registry's reads in `memory/claims.rs`, renewing, completing,
//! releasing and reaping leases in `memory/leases.rs`, cancelling in `memory/cancel.rs`,
//! tenants in `memory/tenants.rs`, recent activity in `memory/activity.rs`, the status
//! transition itself in `memory/state.rs`.
//! Also home of the pure helpers both brokers share.

mod activity;
mod cancel;
mod claims;
mod drain;
mod kv_if_absent;
mod leases;
mod reaper_lease;
mod state;
mod submit;
mod tenants;

use crate::activity::ActivityReport;
use crate::broker::{
    AckOutcome, Broker, BrokerError, CancelOutcome, FinishedPage, HeartbeatAnswer, Lease,
    LeaseState, ReapReport, Submitted,
};
use crate::fair::{FairQueues, Place};
use crate::kv::{KvCounts, KvNamespace};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crucible_shared::{
    BatchCancelCounts, BatchId, BatchStatus, BrokerConfig, DeviceClass, EvalResult, LeaseToken,
    Priority, QueueStatus, StatusCounts, TaskId, TaskSpec, TaskStatus, TaskView, TenantId,
    WorkerId, WorkerInfo,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// In-process broker for a single API process (and for tests). Nothing survives a restart.
pub struct MemoryBroker {
    cfg: BrokerConfig,
    state: Mutex<State>,
    /// Signalled whenever a task enters a queue.
    task_queued: Notify,
    /// Signalled whenever a task reaches a terminal status.
    task_finished: Notify,
    reaper_lease: reaper_lease::ReaperLease,
}

struct TaskRec {
    spec: TaskSpec,
    status: TaskStatus,
    attempts: u32,
    priority: Priority,
    worker_id: Option<WorkerId>,
    token: Option<LeaseToken>,
    submitted_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    result: Option<EvalResult>,
    error: Option<String>,
    batch_id: Option<BatchId>,
    /// Every batch whose counters this task moves: its own, plus batches that reused it through
    /// an idempotency key (a batch may appear more than once).
    counted_in: Vec<BatchId>,
    idempotency_key: Option<String>,
    /// Who submitted it.
    tenant: TenantId,
    /// `policy::scoped_cache_key` of the request.
    cache_key: String,
    /// Its tenant's result cache namespace when it was submitted.
    cache_ns: String,
    /// Answered from the result cache without running.
    cached: bool,
    /// Its order in the queues (`FairQueues::push_back`), kept for a requeue.
    queue_order: u64,
    /// Length of its spec's JSON: what it counts against `queue_cap_bytes` while open.
    spec_bytes: u64,
}

impl TaskRec {
    fn view(&self, id: &TaskId) -> TaskView {
        TaskView {
            task_id: id.clone(),
            status: self.status,
            result: self.result.clone(),
            error: self.error.clone(),
            attempts: self.attempts,
            worker_id: self.worker_id.clone(),
            priority: self.priority,
            device_class: self.spec.request.device_class.clone(),
            batch_id: self.batch_id.clone(),
            submitted_at: self.submitted_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            cached: self.cached,
        }
    }

    /// Where it waits while queued.
    fn place(&self) -> Place {
        Place {
            tenant: self.tenant.clone(),
            class: self.spec.request.device_class.clone(),
            priority: self.priority,
        }
    }

    /// Its entry in the result cache.
    fn result_key(&self) -> CacheKey {
        (self.cache_ns.clone(), self.cache_key.clone())
    }

    /// Its entry in the in-flight map (coalescing never crosses tenants).
    fn flight_key(&self) -> TenantKey {
        (self.tenant.clone(), self.cache_key.clone())
    }
}

/// A result cache entry: (cache namespace, scoped cache key).
type CacheKey = (String, String);
/// Idempotency keys and in-flight entries are a tenant's own: (tenant, key).
type TenantKey = (TenantId, String);

struct BatchRec {
    tenant: TenantId,
    task_ids: Vec<TaskId>,
    counts: StatusCounts,
    /// Distinct tasks in the order they finished (see [`FinishedPage`]).
    finished: Vec<TaskId>,
    distinct: u64,
}

enum Expiring {
    Task(TaskId),
    Batch(BatchId),
    /// A result cache entry; a newer result for the same key outlives this expiry.
    Cached(CacheKey),
    /// An idempotency key that joined another task through coalescing, while it maps to it.
    Idempotency(TenantKey, TaskId),
}

#[derive(Default)]
struct Lifetime {
    submitted: u64,
    done: u64,
    failed: u64,
    cancelled: u64,
    requeued: u64,
    cache_hits: u64,
    cache_misses: u64,
    coalesced: u64,
    /// Key-value cache lookups per namespace, by [`KvNamespace::index`].
    kv: [KvCounts; KvNamespace::ALL.len()],
}

#[derive(Default)]
struct State {
    tasks: HashMap<TaskId, TaskRec>,
    /// Queued tasks by tenant and priority, in the fair share's order.
    queues: FairQueues,
    /// Expiry of every lease held.
    leases: HashMap<TaskId, Instant>,
    batches: HashMap<BatchId, BatchRec>,
    idempotency: HashMap<TenantKey, TaskId>,
    /// Result cache key → last verdict for it and when that entry expires.
    result_cache: HashMap<CacheKey, (EvalResult, Instant)>,
    /// (tenant, scoped cache key) → the open task evaluating it; removed when it finishes.
    in_flight: HashMap<TenantKey, TaskId>,
    workers: HashMap<WorkerId, (WorkerInfo, Instant)>,
    /// Workers asked to drain (`memory/drain.rs`).
    drains: HashSet<WorkerId>,
    /// Terminal records in the order they expire: result_ttl is one constant, so expiry order
    /// is the order in which they finished.
    expiries: VecDeque<(Instant, Expiring)>,
    stats: Lifetime,
    /// Tasks finished in the last hour and the latest failures.
    activity: activity::ActivityLog,
    tenants: tenants::Table,
    /// The key-value cache: (namespace, key) → value and when it expires. Entries expire on
    /// read; expired ones are swept when the map has doubled since the last sweep.
    kv: HashMap<(KvNamespace, String), (String, Instant)>,
    kv_sweep_at: usize,
    /// Spec bytes of open (queued or running) tasks: the queue byte budget's count, kept by
    /// submission and `transition`, as `open_bytes` in Redis.
    open_bytes: u64,
}

/// Size of the key-value cache below which expired entries are never swept.
const KV_SWEEP_MIN: usize = 1024;

fn count_mut(c: &mut StatusCounts, s: TaskStatus) -> &mut u64 {
    match s {
        TaskStatus::Queued => &mut c.queued,
        TaskStatus::Running => &mut c.running,
        TaskStatus::Done => &mut c.done,
        TaskStatus::Failed => &mut c.failed,
        TaskStatus::Cancelled => &mut c.cancelled,
    }
}

impl MemoryBroker {
    /// An empty broker with these limits and TTLs.
    pub fn new(cfg: BrokerConfig) -> Self {
        Self {
            cfg,
            state: Mutex::new(State::default()),
            task_queued: Notify::new(),
            task_finished: Notify::new(),
            reaper_lease: Default::default(),
        }
    }

    /// Locks the state and drops expired records first, so nothing stale is ever observed.
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every transition completes under the lock before anything that could panic runs, so
        // a poisoned state is still consistent.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.sweep(Instant::now());
        state
    }

    fn view(&self, id: &TaskId) -> Option<TaskView> {
        self.lock().tasks.get(id).map(|rec| rec.view(id))
    }
}

#[async_trait]
impl Broker for MemoryBroker {
    fn config(&self) -> &BrokerConfig {
        &self.cfg
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn ping(&self) -> Result<(), BrokerError> {
        Ok(())
    }

    async fn submit(&self, tenant: &TenantId, spec: TaskSpec) -> Result<Submitted, BrokerError> {
        let mut out = self.submit_all(tenant, vec![spec], None)?;
        out.pop()
            .ok_or_else(|| BrokerError::Corrupt("submit produced no task".to_owned()))
    }

    async fn submit_batch(
        &self,
        tenant: &TenantId,
        specs: Vec<TaskSpec>,
    ) -> Result<(BatchId, Vec<Submitted>), BrokerError> {
        let batch_id = BatchId::random();
        let out = self.submit_all(tenant, specs, Some(&batch_id))?;
        Ok((batch_id, out))
    }

    async fn get_task(&self, id: &TaskId) -> Result<Option<TaskView>, BrokerError> {
        Ok(self.view(id))
    }

    async fn get_spec(&self, id: &TaskId) -> Result<Option<TaskSpec>, BrokerError> {
        Ok(self.lock().tasks.get(id).map(|rec| rec.spec.clone()))
    }

    async fn cancel(&self, id: &TaskId) -> Result<CancelOutcome, BrokerError> {
        Ok(self.cancel_task(id))
    }

    async fn cancel_batch(&self, id: &BatchId) -> Result<Option<BatchCancelCounts>, BrokerError> {
        Ok(self.cancel_batch_tasks(id))
    }

    async fn batch_status(
        &self,
        id: &BatchId,
        include_tasks: bool,
    ) -> Result<Option<BatchStatus>, BrokerError> {
        let st = self.lock();
        Ok(st.batches.get(id).map(|batch| BatchStatus {
            batch_id: id.clone(),
            total: batch.task_ids.len() as u64,
            counts: batch.counts,
            task_ids: batch.task_ids.clone(),
            // A finished task may have expired before its batch; it is simply left out.
            tasks: include_tasks.then(|| {
                batch
                    .task_ids
                    .iter()
                    .filter_map(|t| st.tasks.get(t).map(|rec| rec.view(t)))
                    .collect()
            }),
        }))
    }

    async fn batch_finished(
        &self,
        id: &BatchId,
        after: u64,
        limit: usize,
        wait: Duration,
    ) -> Result<Option<FinishedPage>, BrokerError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let finished = self.task_finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            {
                let st = self.lock();
                let Some(batch) = st.batches.get(id) else {
                    return Ok(None);
                };
                let len = batch.finished.len() as u64;
                if len > after || len >= batch.distinct || tokio::time::Instant::now() >= deadline {
                    let start = usize::try_from(after)
                        .unwrap_or(usize::MAX)
                        .min(batch.finished.len());
                    let tasks = batch.finished[start..]
                        .iter()
                        .take(limit)
                        .map(|t| (t.clone(), st.tasks.get(t).map(|rec| rec.view(t))))
                        .collect();
                    return Ok(Some(FinishedPage {
                        tasks,
                        finished: len,
                        distinct: batch.distinct,
                    }));
                }
            }
            // Woken by any task finishing; the deadline bounds the wait either way.
            let _ = tokio::time::timeout_at(deadline, finished).await;
        }
    }

    async fn queue_status(&self) -> Result<QueueStatus, BrokerError> {
        Ok(self.queue_view())
    }

    async fn activity(&self) -> Result<ActivityReport, BrokerError> {
        self.lock().activity.report(Utc::now())
    }

    async fn claim(
        &self,
        worker: &WorkerId,
        class: &DeviceClass,
        wait: Duration,
    ) -> Result<Option<Lease>, BrokerError> {
        Ok(self.claim_within(worker, class, wait).await)
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
        let mut info = info.clone();
        // The registry's clock, not the worker's, decides liveness.
        info.last_heartbeat = Utc::now();
        let mut st = self.lock();
        let answer = st.heartbeat_answer(&info.worker_id);
        st.workers
            .insert(info.worker_id.clone(), (info, Instant::now()));
        Ok(answer)
    }

    async fn deregister_worker(&self, id: &WorkerId) -> Result<(), BrokerError> {
        self.lock().forget_worker(id);
        Ok(())
    }

    async fn list_workers(&self) -> Result<Vec<WorkerInfo>, BrokerError> {
        Ok(self.lock().workers_now(&self.cfg))
    }

    async fn kv_get(
        &self,
        namespace: KvNamespace,
        key: &str,
    ) -> Result<Option<String>, BrokerError> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let entry = (namespace, key.to_owned());
        let now = Instant::now();
        let value = match st.kv.get(&entry) {
            Some((value, until)) if *until > now => Some(value.clone()),
            Some(_) => {
                st.kv.remove(&entry);
                None
            }
            None => None,
        };
        let counts = &mut st.stats.kv[namespace.index()];
        if value.is_some() {
            counts.hits += 1;
        } else {
            counts.misses += 1;
        }
        Ok(value)
    }

    async fn kv_counts(&self, namespace: KvNamespace) -> Result<KvCounts, BrokerError> {
        Ok(self.lock().stats.kv[namespace.index()])
    }

    async fn kv_put(
        &self,
        namespace: KvNamespace,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), BrokerError> {
        let now = Instant::now();
        self.lock()
            .store_kv((namespace, key.to_owned()), value, now + ttl, now);
        Ok(())
    }

    async fn wait_terminal(
        &self,
        id: &TaskId,
        timeout: Duration,
    ) -> Result<Option<TaskView>, BrokerError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let finished = self.task_finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            match self.view(id) {
                Some(view) if !view.status.is_terminal() => {}
                other => return Ok(other),
            }
            if tokio::time::timeout_at(deadline, finished).await.is_err() {
                return Ok(self.view(id));
            }
        }
    }

    async fn drain_worker(&self, id: &WorkerId) -> Result<bool, BrokerError> {
        let retention = crate::policy::worker_retention(self.cfg.worker_liveness);
        Ok(self.lock().ask_drain(id, retention))
    }

    async fn reaper_lease(&self, holder: &str, ttl: Duration) -> Result<bool, BrokerError> {
        Ok(self.reaper_lease.take(holder, ttl))
    }

    async fn release_reaper_lease(&self, holder: &str) -> Result<(), BrokerError> {
        self.reaper_lease.release(holder);
        Ok(())
    }

    async fn finish_tenant_deletions(&self) -> Result<u64, BrokerError> {
        // A deletion here cancels its tenant's tasks under the lock, in one step: none is
        // ever left half done.
        Ok(0)
    }

    async fn kv_put_if_absent(
        &self,
        namespace: KvNamespace,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<Option<String>, BrokerError> {
        Ok(self.put_kv_if_absent(namespace, key, value, ttl))
    }
}
