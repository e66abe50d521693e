//! [`MemoryBroker`]: the whole queue in one process, behind one mutex. Claimers and waiters are
//! woken by [`Notify`], never by polling. Also home of the pure helpers both brokers share.

use crate::broker::{
    AckOutcome, Broker, BrokerError, CancelOutcome, FinishedPage, Lease, LeaseState,
    REF_CACHE_NAMESPACE, ReapReport, Submitted,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crucible_shared::{
    BatchId, BatchStatus, BrokerConfig, EvalResult, LeaseToken, Priority, QueueStatus,
    StatusCounts, TaskId, TaskSpec, TaskStatus, TaskView, WorkerId, WorkerInfo, WorkerState,
};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The preferred queue of each claim in one turn of the weighted round robin: in every 7
/// claims 4 prefer high, 2 normal and 1 low, so low gets a guaranteed share and never starves.
pub const CLAIM_CYCLE: [Priority; 7] = [
    Priority::High,
    Priority::Normal,
    Priority::High,
    Priority::Low,
    Priority::High,
    Priority::Normal,
    Priority::High,
];

/// A worker silent for this many liveness windows is dropped from the registry.
pub const WORKER_RETENTION_FACTOR: u32 = 5;

/// The order in which claim number `seq` (counting successful claims from 0) tries the
/// queues: its preferred queue first, then the others from high to low.
pub fn claim_order(seq: u64) -> [Priority; 3] {
    let preferred = CLAIM_CYCLE[(seq % CLAIM_CYCLE.len() as u64) as usize];
    let mut order = [preferred; 3];
    let rest = Priority::ALL.into_iter().filter(|p| *p != preferred);
    for (slot, prio) in order[1..].iter_mut().zip(rest) {
        *slot = prio;
    }
    order
}

/// How long a worker may stay silent before the registry forgets it.
pub fn worker_retention(liveness: Duration) -> Duration {
    liveness * WORKER_RETENTION_FACTOR
}

const CANCELLED_ERROR: &str = "cancelled by request";

/// In-process broker for a single API process (and for tests). Nothing survives a restart.
pub struct MemoryBroker {
    cfg: BrokerConfig,
    state: Mutex<State>,
    /// Signalled whenever a task enters a queue.
    task_queued: Notify,
    /// Signalled whenever a task reaches a terminal status.
    task_finished: Notify,
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
    /// [`scoped_cache_key`] of the request.
    cache_key: String,
    /// Answered from the result cache without running.
    cached: bool,
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
            batch_id: self.batch_id.clone(),
            submitted_at: self.submitted_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            cached: self.cached,
        }
    }
}

struct BatchRec {
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
    Cached(String),
    /// An idempotency key that joined another task through coalescing, while it maps to it.
    Idempotency(String, TaskId),
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
    /// Key-value cache lookups per namespace: (hits, misses).
    kv: HashMap<String, (u64, u64)>,
}

#[derive(Default)]
struct State {
    tasks: HashMap<TaskId, TaskRec>,
    /// Indexed by [`queue_index`].
    queues: [VecDeque<TaskId>; 3],
    /// Expiry of every lease held.
    leases: HashMap<TaskId, Instant>,
    batches: HashMap<BatchId, BatchRec>,
    idempotency: HashMap<String, TaskId>,
    /// Scoped cache key → last verdict for it and when that entry expires.
    result_cache: HashMap<String, (EvalResult, Instant)>,
    /// Scoped cache key → the open task evaluating it; removed when that task finishes.
    in_flight: HashMap<String, TaskId>,
    workers: HashMap<WorkerId, (WorkerInfo, Instant)>,
    /// Terminal records in the order they expire: result_ttl is one constant, so expiry order
    /// is the order in which they finished.
    expiries: VecDeque<(Instant, Expiring)>,
    stats: Lifetime,
    claim_seq: u64,
    /// The key-value cache: (namespace, key) → value and when it expires. Entries expire on
    /// read; expired ones are swept when the map has doubled since the last sweep.
    kv: HashMap<(String, String), (String, Instant)>,
    kv_sweep_at: usize,
}

/// Size of the key-value cache below which expired entries are never swept.
const KV_SWEEP_MIN: usize = 1024;

fn queue_index(p: Priority) -> usize {
    match p {
        Priority::High => 0,
        Priority::Normal => 1,
        Priority::Low => 2,
    }
}

fn count_mut(c: &mut StatusCounts, s: TaskStatus) -> &mut u64 {
    match s {
        TaskStatus::Queued => &mut c.queued,
        TaskStatus::Running => &mut c.running,
        TaskStatus::Done => &mut c.done,
        TaskStatus::Failed => &mut c.failed,
        TaskStatus::Cancelled => &mut c.cancelled,
    }
}

/// The result cache key qualified by the device class of this deployment; shared by both
/// brokers so their keys agree.
pub fn scoped_cache_key(cfg: &BrokerConfig, spec: &TaskSpec) -> String {
    format!("{}:{}", cfg.cache_scope, spec.request.result_cache_key())
}

/// How `submit` answers one spec.
enum Plan {
    /// An earlier task named by the idempotency key.
    Deduplicated(TaskId),
    /// An identical open task.
    Coalesced(TaskId),
    /// A new task, done at once with the cached result.
    Cached(TaskId, Box<EvalResult>),
    /// A new queued task; `looked_up` is false under `force_refresh`.
    Fresh { id: TaskId, looked_up: bool },
}

impl Plan {
    fn id(&self) -> &TaskId {
        match self {
            Plan::Deduplicated(id) | Plan::Coalesced(id) | Plan::Cached(id, _) => id,
            Plan::Fresh { id, .. } => id,
        }
    }
}

/// What happened to a running task that ended without a verdict.
enum Retry {
    Requeued,
    Failed,
}

impl State {
    /// Drops terminal records whose result_ttl has passed.
    fn sweep(&mut self, now: Instant) {
        while self.expiries.front().is_some_and(|(at, _)| *at <= now) {
            let Some((_, what)) = self.expiries.pop_front() else {
                break;
            };
            match what {
                Expiring::Task(id) => {
                    if let Some(rec) = self.tasks.remove(&id)
                        && let Some(key) = rec.idempotency_key
                        && self.idempotency.get(&key) == Some(&id)
                    {
                        self.idempotency.remove(&key);
                    }
                }
                Expiring::Batch(id) => {
                    self.batches.remove(&id);
                }
                Expiring::Cached(key) => {
                    if self
                        .result_cache
                        .get(&key)
                        .is_some_and(|(_, until)| *until <= now)
                    {
                        self.result_cache.remove(&key);
                    }
                }
                Expiring::Idempotency(key, id) => {
                    if self.idempotency.get(&key) == Some(&id) {
                        self.idempotency.remove(&key);
                    }
                }
            }
        }
    }

    /// Moves a task to `to`, keeping batch counters, lifetime stats and expiries in step.
    fn transition(&mut self, id: &TaskId, to: TaskStatus, ttl: Duration) {
        let now = Instant::now();
        let Some(rec) = self.tasks.get_mut(id) else {
            return;
        };
        let from = rec.status;
        rec.status = to;
        let finished = to.is_terminal();
        if finished {
            rec.finished_at = Some(Utc::now());
            self.expiries
                .push_back((now + ttl, Expiring::Task(id.clone())));
            match to {
                TaskStatus::Done => self.stats.done += 1,
                TaskStatus::Failed => self.stats.failed += 1,
                TaskStatus::Cancelled => self.stats.cancelled += 1,
                TaskStatus::Queued | TaskStatus::Running => {}
            }
            if self.in_flight.get(&rec.cache_key) == Some(id) {
                self.in_flight.remove(&rec.cache_key);
            }
        }
        for (i, batch_id) in rec.counted_in.iter().enumerate() {
            let Some(batch) = self.batches.get_mut(batch_id) else {
                continue;
            };
            let from_count = count_mut(&mut batch.counts, from);
            *from_count = from_count.saturating_sub(1);
            *count_mut(&mut batch.counts, to) += 1;
            // A batch that counts the task more than once logs it once.
            if finished && !rec.counted_in[..i].contains(batch_id) {
                batch.finished.push(id.clone());
            }
            if finished && batch.counts.queued + batch.counts.running == 0 {
                self.expiries
                    .push_back((now + ttl, Expiring::Batch(batch_id.clone())));
            }
        }
    }

    fn queued(&self) -> u64 {
        self.queues.iter().map(|q| q.len() as u64).sum()
    }

    /// Another submission reuses task `id`: an open one moves `batch_id`'s counters from now
    /// on as well. Returns its status.
    fn join(&mut self, id: &TaskId, batch_id: Option<&BatchId>) -> Result<TaskStatus, BrokerError> {
        let rec = self
            .tasks
            .get_mut(id)
            .ok_or_else(|| BrokerError::Corrupt(format!("task {id} vanished")))?;
        if let Some(b) = batch_id
            && !rec.status.is_terminal()
        {
            rec.counted_in.push(b.clone());
        }
        Ok(rec.status)
    }

    /// The open task evaluating `key`, if any.
    fn in_flight(&self, key: &str) -> Option<&TaskId> {
        self.in_flight
            .get(key)
            .filter(|id| self.tasks.get(*id).is_some_and(|t| !t.status.is_terminal()))
    }

    /// Ends a running attempt without a verdict: back to the head of its queue (it has waited
    /// longest), or failed with `reason` once every attempt is used.
    fn requeue_or_fail(
        &mut self,
        id: &TaskId,
        reason: impl FnOnce(&TaskRec) -> String,
        cfg: &BrokerConfig,
    ) -> Retry {
        self.leases.remove(id);
        let Some(rec) = self.tasks.get_mut(id) else {
            return Retry::Failed;
        };
        if rec.attempts >= cfg.max_attempts {
            rec.error = Some(reason(rec));
            self.transition(id, TaskStatus::Failed, cfg.result_ttl);
            return Retry::Failed;
        }
        rec.worker_id = None;
        rec.token = None;
        rec.started_at = None;
        let q = queue_index(rec.priority);
        self.transition(id, TaskStatus::Queued, cfg.result_ttl);
        self.queues[q].push_front(id.clone());
        self.stats.requeued += 1;
        Retry::Requeued
    }

    /// The task running under `lease`, if the lease is still current.
    fn current_mut(&mut self, lease: &Lease) -> Option<&mut TaskRec> {
        self.tasks.get_mut(&lease.task_id).filter(|rec| {
            rec.status == TaskStatus::Running && rec.token.as_ref() == Some(&lease.token)
        })
    }
}

impl MemoryBroker {
    pub fn new(cfg: BrokerConfig) -> Self {
        Self {
            cfg,
            state: Mutex::new(State::default()),
            task_queued: Notify::new(),
            task_finished: Notify::new(),
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

    fn try_claim(&self, worker: &WorkerId) -> Option<Lease> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let order = claim_order(st.claim_seq);
        let id = order
            .iter()
            .find_map(|p| st.queues[queue_index(*p)].pop_front())?;
        let rec = st.tasks.get_mut(&id)?;
        st.claim_seq += 1;
        let token = LeaseToken::random();
        rec.attempts += 1;
        rec.worker_id = Some(worker.clone());
        rec.token = Some(token.clone());
        rec.started_at = Some(Utc::now());
        let lease = Lease {
            task_id: id.clone(),
            token,
            worker_id: worker.clone(),
            spec: rec.spec.clone(),
            attempt: rec.attempts,
        };
        st.leases
            .insert(id.clone(), Instant::now() + self.cfg.lease_ttl);
        st.transition(&id, TaskStatus::Running, self.cfg.result_ttl);
        tracing::debug!(task_id = %id, worker_id = %worker, attempt = lease.attempt, "task claimed");
        Some(lease)
    }

    fn view(&self, id: &TaskId) -> Option<TaskView> {
        self.lock().tasks.get(id).map(|rec| rec.view(id))
    }

    fn submit_all(
        &self,
        specs: Vec<TaskSpec>,
        batch_id: Option<&BatchId>,
    ) -> Result<Vec<Submitted>, BrokerError> {
        let ttl = self.cfg.result_ttl;
        // Hashing up to half a megabyte of source per spec is done before taking the lock.
        let cache_keys: Vec<String> = specs
            .iter()
            .map(|spec| scoped_cache_key(&self.cfg, spec))
            .collect();
        let mut st = self.lock();
        // Plan every spec before writing anything, so a refused submission leaves no trace.
        // Specs are planned as if submitted one after the other: a key repeated within this
        // call names the first task that carries it, and an identical request joins the task
        // an earlier spec of this call queued.
        let mut seen_keys: HashMap<&str, TaskId> = HashMap::new();
        let mut queued_here: HashMap<String, TaskId> = HashMap::new();
        let mut plan: Vec<Plan> = Vec::with_capacity(specs.len());
        for (spec, cache_key) in specs.iter().zip(&cache_keys) {
            let key = spec.request.idempotency_key.as_deref();
            let existing = key.and_then(|k| {
                seen_keys
                    .get(k)
                    .or_else(|| st.idempotency.get(k).filter(|id| st.tasks.contains_key(id)))
                    .cloned()
            });
            if let Some(id) = existing {
                plan.push(Plan::Deduplicated(id));
                continue;
            }
            let step = if spec.request.force_refresh {
                Plan::Fresh {
                    id: TaskId::random(),
                    looked_up: false,
                }
            } else if let Some((result, _)) = st.result_cache.get(cache_key) {
                Plan::Cached(TaskId::random(), Box::new(result.clone()))
            } else if let Some(id) = queued_here
                .get(cache_key)
                .or_else(|| st.in_flight(cache_key))
            {
                Plan::Coalesced(id.clone())
            } else {
                Plan::Fresh {
                    id: TaskId::random(),
                    looked_up: true,
                }
            };
            if let Plan::Fresh { id, .. } = &step {
                queued_here.insert(cache_key.clone(), id.clone());
            }
            if let Some(k) = key {
                seen_keys.insert(k, step.id().clone());
            }
            plan.push(step);
        }
        let fresh = plan
            .iter()
            .filter(|p| matches!(p, Plan::Fresh { .. }))
            .count() as u64;
        let queued = st.queued();
        if fresh > 0 && queued + fresh > self.cfg.queue_cap {
            return Err(BrokerError::QueueFull {
                queued,
                cap: self.cfg.queue_cap,
            });
        }

        if let Some(b) = batch_id {
            st.batches.insert(
                b.clone(),
                BatchRec {
                    task_ids: plan.iter().map(|p| p.id().clone()).collect(),
                    counts: StatusCounts::default(),
                    finished: Vec::new(),
                    distinct: plan
                        .iter()
                        .map(Plan::id)
                        .collect::<std::collections::HashSet<_>>()
                        .len() as u64,
                },
            );
        }
        let now = Utc::now();
        let expires = Instant::now() + ttl;
        let mut created = 0;
        let mut out = Vec::with_capacity(plan.len());
        let mut logged = std::collections::HashSet::new();
        for ((step, spec), cache_key) in plan.into_iter().zip(specs).zip(cache_keys) {
            let (id, status, deduplicated, coalesced, cached) = match step {
                Plan::Deduplicated(id) => {
                    let status = st.join(&id, batch_id)?;
                    (id, status, true, false, false)
                }
                Plan::Coalesced(id) => {
                    let status = st.join(&id, batch_id)?;
                    st.stats.coalesced += 1;
                    // A retry under this key finds the task it joined.
                    if let Some(k) = spec.request.idempotency_key {
                        st.idempotency.insert(k.clone(), id.clone());
                        st.expiries
                            .push_back((expires, Expiring::Idempotency(k, id.clone())));
                    }
                    (id, status, false, true, false)
                }
                Plan::Cached(id, result) => {
                    st.stats.cache_hits += 1;
                    st.stats.done += 1;
                    created += 1;
                    let key = spec.request.idempotency_key.clone();
                    if let Some(k) = &key {
                        st.idempotency.insert(k.clone(), id.clone());
                    }
                    st.tasks.insert(
                        id.clone(),
                        TaskRec {
                            cache_key,
                            priority: spec.request.priority,
                            spec,
                            status: TaskStatus::Done,
                            attempts: 0,
                            worker_id: None,
                            token: None,
                            submitted_at: now,
                            started_at: Some(now),
                            finished_at: Some(now),
                            result: Some(*result),
                            error: None,
                            batch_id: batch_id.cloned(),
                            counted_in: batch_id.into_iter().cloned().collect(),
                            idempotency_key: key,
                            cached: true,
                        },
                    );
                    st.expiries.push_back((expires, Expiring::Task(id.clone())));
                    (id, TaskStatus::Done, false, false, true)
                }
                Plan::Fresh { id, looked_up } => {
                    if looked_up {
                        st.stats.cache_misses += 1;
                    }
                    created += 1;
                    let priority = spec.request.priority;
                    let key = spec.request.idempotency_key.clone();
                    if let Some(k) = &key {
                        st.idempotency.insert(k.clone(), id.clone());
                    }
                    // Under force_refresh too: later identical requests join this evaluation.
                    st.in_flight.insert(cache_key.clone(), id.clone());
                    st.tasks.insert(
                        id.clone(),
                        TaskRec {
                            spec,
                            status: TaskStatus::Queued,
                            attempts: 0,
                            priority,
                            worker_id: None,
                            token: None,
                            submitted_at: now,
                            started_at: None,
                            finished_at: None,
                            result: None,
                            error: None,
                            batch_id: batch_id.cloned(),
                            counted_in: batch_id.into_iter().cloned().collect(),
                            idempotency_key: key,
                            cache_key,
                            cached: false,
                        },
                    );
                    st.queues[queue_index(priority)].push_back(id.clone());
                    (id, TaskStatus::Queued, false, false, false)
                }
            };
            if let Some(b) = batch_id
                && let Some(batch) = st.batches.get_mut(b)
            {
                *count_mut(&mut batch.counts, status) += 1;
                // Finished already: it enters the log now; an open one when it finishes.
                if status.is_terminal() && logged.insert(id.clone()) {
                    batch.finished.push(id.clone());
                }
            }
            out.push(Submitted {
                task_id: id,
                status,
                deduplicated,
                coalesced,
                cached,
            });
        }
        // A batch made only of finished tasks is finished already.
        if let Some(b) = batch_id
            && st
                .batches
                .get(b)
                .is_some_and(|batch| batch.counts.queued + batch.counts.running == 0)
        {
            st.expiries.push_back((expires, Expiring::Batch(b.clone())));
        }
        st.stats.submitted += created;
        drop(st);
        if fresh > 0 {
            self.task_queued.notify_waiters();
        }
        if out.iter().any(|s| s.cached) {
            self.task_finished.notify_waiters();
        }
        Ok(out)
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

    async fn submit(&self, spec: TaskSpec) -> Result<Submitted, BrokerError> {
        let mut out = self.submit_all(vec![spec], None)?;
        out.pop()
            .ok_or_else(|| BrokerError::Corrupt("submit produced no task".to_owned()))
    }

    async fn submit_batch(
        &self,
        specs: Vec<TaskSpec>,
    ) -> Result<(BatchId, Vec<Submitted>), BrokerError> {
        let batch_id = BatchId::random();
        let out = self.submit_all(specs, Some(&batch_id))?;
        Ok((batch_id, out))
    }

    async fn get_task(&self, id: &TaskId) -> Result<Option<TaskView>, BrokerError> {
        Ok(self.view(id))
    }

    async fn get_spec(&self, id: &TaskId) -> Result<Option<TaskSpec>, BrokerError> {
        Ok(self.lock().tasks.get(id).map(|rec| rec.spec.clone()))
    }

    async fn cancel(&self, id: &TaskId) -> Result<CancelOutcome, BrokerError> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(rec) = st.tasks.get_mut(id) else {
            return Ok(CancelOutcome::NotFound);
        };
        let was = rec.status;
        match was {
            TaskStatus::Done | TaskStatus::Failed | TaskStatus::Cancelled => {
                return Ok(CancelOutcome::AlreadyFinished(was));
            }
            TaskStatus::Queued => {
                st.queues[queue_index(rec.priority)].retain(|t| t != id);
            }
            TaskStatus::Running => {
                // The token stays so that its holder learns of the cancellation at renewal.
                st.leases.remove(id);
            }
        }
        rec.error = Some(CANCELLED_ERROR.to_owned());
        st.transition(id, TaskStatus::Cancelled, self.cfg.result_ttl);
        drop(guard);
        self.task_finished.notify_waiters();
        tracing::info!(task_id = %id, was = was.as_str(), "task cancelled");
        Ok(CancelOutcome::Cancelled { was })
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
        let st = self.lock();
        let len = |p| st.queues[queue_index(p)].len() as u64;
        let (ref_hits, ref_misses) = st
            .stats
            .kv
            .get(REF_CACHE_NAMESPACE)
            .copied()
            .unwrap_or_default();
        Ok(QueueStatus {
            queued_high: len(Priority::High),
            queued_normal: len(Priority::Normal),
            queued_low: len(Priority::Low),
            running: st.leases.len() as u64,
            queue_cap: self.cfg.queue_cap,
            submitted_total: st.stats.submitted,
            done_total: st.stats.done,
            failed_total: st.stats.failed,
            cancelled_total: st.stats.cancelled,
            requeued_total: st.stats.requeued,
            cache_hits_total: st.stats.cache_hits,
            cache_misses_total: st.stats.cache_misses,
            coalesced_total: st.stats.coalesced,
            ref_cache_hits_total: ref_hits,
            ref_cache_misses_total: ref_misses,
        })
    }

    async fn claim(&self, worker: &WorkerId, wait: Duration) -> Result<Option<Lease>, BrokerError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before looking at the queues, so a submit in between still wakes us.
            let queued = self.task_queued.notified();
            tokio::pin!(queued);
            queued.as_mut().enable();
            if let Some(lease) = self.try_claim(worker) {
                return Ok(Some(lease));
            }
            if tokio::time::timeout_at(deadline, queued).await.is_err() {
                return Ok(self.try_claim(worker));
            }
        }
    }

    async fn renew(&self, lease: &Lease) -> Result<LeaseState, BrokerError> {
        let mut st = self.lock();
        let Some(rec) = st.tasks.get(&lease.task_id) else {
            return Ok(LeaseState::Lost);
        };
        if rec.status == TaskStatus::Cancelled {
            return Ok(LeaseState::Cancelled);
        }
        if st.current_mut(lease).is_none() {
            return Ok(LeaseState::Lost);
        }
        st.leases
            .insert(lease.task_id.clone(), Instant::now() + self.cfg.lease_ttl);
        Ok(LeaseState::Held)
    }

    async fn complete(&self, lease: &Lease, result: EvalResult) -> Result<AckOutcome, BrokerError> {
        let mut st = self.lock();
        let Some(rec) = st.current_mut(lease) else {
            tracing::info!(task_id = %lease.task_id, worker_id = %lease.worker_id, "stale result ignored");
            return Ok(AckOutcome::Stale);
        };
        let cache_key = rec.cache_key.clone();
        rec.result = Some(result.clone());
        st.leases.remove(&lease.task_id);
        st.transition(&lease.task_id, TaskStatus::Done, self.cfg.result_ttl);
        let until = Instant::now() + self.cfg.result_ttl;
        st.result_cache.insert(cache_key.clone(), (result, until));
        st.expiries.push_back((until, Expiring::Cached(cache_key)));
        drop(st);
        self.task_finished.notify_waiters();
        Ok(AckOutcome::Accepted)
    }

    async fn release(&self, lease: &Lease, reason: &str) -> Result<AckOutcome, BrokerError> {
        let mut st = self.lock();
        if st.current_mut(lease).is_none() {
            return Ok(AckOutcome::Stale);
        }
        let outcome = st.requeue_or_fail(&lease.task_id, |_| reason.to_owned(), &self.cfg);
        drop(st);
        let outcome = match outcome {
            Retry::Requeued => {
                self.task_queued.notify_waiters();
                "requeued"
            }
            Retry::Failed => {
                self.task_finished.notify_waiters();
                "failed"
            }
        };
        tracing::info!(task_id = %lease.task_id, worker_id = %lease.worker_id, outcome, reason, "task released");
        Ok(AckOutcome::Accepted)
    }

    async fn reap_expired(&self) -> Result<ReapReport, BrokerError> {
        let mut st = self.lock();
        let now = Instant::now();
        let expired: Vec<TaskId> = st
            .leases
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let mut report = ReapReport::default();
        let max = self.cfg.max_attempts;
        for id in expired {
            let outcome = st.requeue_or_fail(
                &id,
                |rec| {
                    let worker = rec.worker_id.as_ref().map_or("?", |w| w.as_str());
                    format!(
                        "lease expired on attempt {} of {max} (worker {worker} stopped renewing)",
                        rec.attempts
                    )
                },
                &self.cfg,
            );
            match outcome {
                Retry::Requeued => report.requeued += 1,
                Retry::Failed => report.failed += 1,
            }
        }
        drop(st);
        if report.requeued > 0 {
            self.task_queued.notify_waiters();
        }
        if report.failed > 0 {
            self.task_finished.notify_waiters();
        }
        Ok(report)
    }

    async fn worker_heartbeat(&self, info: &WorkerInfo) -> Result<(), BrokerError> {
        let mut info = info.clone();
        // The registry's clock, not the worker's, decides liveness.
        info.last_heartbeat = Utc::now();
        self.lock()
            .workers
            .insert(info.worker_id.clone(), (info, Instant::now()));
        Ok(())
    }

    async fn deregister_worker(&self, id: &WorkerId) -> Result<(), BrokerError> {
        self.lock().workers.remove(id);
        Ok(())
    }

    async fn list_workers(&self) -> Result<Vec<WorkerInfo>, BrokerError> {
        let mut st = self.lock();
        let liveness = self.cfg.worker_liveness;
        let retention = worker_retention(liveness);
        st.workers
            .retain(|_, (_, seen)| seen.elapsed() <= retention);
        let mut out: Vec<WorkerInfo> = st
            .workers
            .values()
            .map(|(info, seen)| {
                let mut info = info.clone();
                if seen.elapsed() > liveness {
                    info.state = WorkerState::Lost;
                }
                info
            })
            .collect();
        out.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        Ok(out)
    }

    async fn kv_get(&self, namespace: &str, key: &str) -> Result<Option<String>, BrokerError> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let entry = (namespace.to_owned(), key.to_owned());
        let now = Instant::now();
        let value = match st.kv.get(&entry) {
            Some((value, until)) if *until > now => Some(value.clone()),
            Some(_) => {
                st.kv.remove(&entry);
                None
            }
            None => None,
        };
        let counts = st.stats.kv.entry(entry.0).or_default();
        if value.is_some() {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
        Ok(value)
    }

    async fn kv_put(
        &self,
        namespace: &str,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), BrokerError> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let now = Instant::now();
        st.kv.insert(
            (namespace.to_owned(), key.to_owned()),
            (value.to_owned(), now + ttl),
        );
        if st.kv.len() >= st.kv_sweep_at.max(KV_SWEEP_MIN) {
            st.kv.retain(|_, (_, until)| *until > now);
            st.kv_sweep_at = st.kv.len() * 2;
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_order_follows_the_cycle_with_fallback_by_priority() {
        use Priority::{High, Low, Normal};
        assert_eq!(claim_order(0), [High, Normal, Low]);
        assert_eq!(claim_order(1), [Normal, High, Low]);
        assert_eq!(claim_order(3), [Low, High, Normal]);
        assert_eq!(claim_order(7), claim_order(0));
    }

    #[test]
    fn every_window_of_seven_claims_prefers_each_priority_its_share() {
        for start in 0..14u64 {
            let firsts: Vec<Priority> = (start..start + 7).map(|s| claim_order(s)[0]).collect();
            let count = |p| firsts.iter().filter(|f| **f == p).count();
            assert_eq!(count(Priority::High), 4);
            assert_eq!(count(Priority::Normal), 2);
            assert_eq!(count(Priority::Low), 1);
        }
    }
}
