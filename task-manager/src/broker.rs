//! The queue contract both brokers implement; `tests/contract/` runs one suite against both
//! (`tests/tenants.rs` the tenant part of it).

use crate::activity::ActivityReport;
pub use crate::error::BrokerError;
use crate::kv::{KvCounts, KvNamespace};
use crate::tenants::TenantRegistry;
use async_trait::async_trait;
use crucible_shared::{
    BatchCancelCounts, BatchId, BatchStatus, BrokerConfig, DeviceClass, EvalResult, LeaseToken,
    QueueStatus, TaskId, TaskSpec, TaskStatus, TaskView, TenantId, WorkerId, WorkerInfo,
};
use std::time::Duration;

/// What the registry answers a worker's heartbeat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    /// An operator asked this worker to drain ([`Broker::drain_worker`]): it stops claiming,
    /// gives back what it claimed ahead, finishes what is on its device, deregisters and
    /// exits.
    pub drain: bool,
}

/// What `submit` did.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// The task that answers the submission: new, or the earlier one it was matched to.
    pub task_id: TaskId,
    /// That task's status now (`done` at once when a cached result answered).
    pub status: TaskStatus,
    /// True when the idempotency key matched an earlier task, which is returned instead.
    pub deduplicated: bool,
    /// True when an identical request was queued or running: `task_id` is that task.
    pub coalesced: bool,
    /// True when a cached result answered the request: `task_id` is a new task, already done.
    pub cached: bool,
}

/// A page of a batch's log of finished tasks: every distinct task of the batch enters it
/// once, when it reaches a terminal status (or at submission, when it was already terminal),
/// so a reader that remembers its position sees each exactly once, in finishing order.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedPage {
    /// The tasks from the requested position on, each with its view (None once its record
    /// expired).
    pub tasks: Vec<(TaskId, Option<TaskView>)>,
    /// Length of the log: tasks of the batch finished so far.
    pub finished: u64,
    /// Distinct tasks in the batch: the log's final length.
    pub distinct: u64,
}

/// A claimed task. Only the holder of `token` may renew, complete or release it.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// The claimed task.
    pub task_id: TaskId,
    /// Fencing token of this attempt: a newer claim of the task makes it stale.
    pub token: LeaseToken,
    /// The worker that claimed it.
    pub worker_id: WorkerId,
    /// What to evaluate, with the seed every attempt shares.
    pub spec: TaskSpec,
    /// 1 on the first claim of the task, 2 after one requeue, ...
    pub attempt: u32,
    /// From the task's submission to this claim, both by the broker's clock (zero if that
    /// clock stepped back): the worker's `crucible_queue_wait_seconds` without a second read.
    pub queued_for: Duration,
}

/// Answer to a lease renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Still ours; expiry pushed out by `lease_ttl`.
    Held,
    /// The task was cancelled: stop work now.
    Cancelled,
    /// Another attempt owns the task (or it finished): our work will not be accepted.
    Lost,
}

/// Answer to `complete` or `release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// The token was current; the verdict (or the release) is recorded.
    Accepted,
    /// The token is no longer current; nothing was written.
    Stale,
}

/// Answer to `cancel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The task was queued or running and is now `cancelled`.
    Cancelled {
        /// `queued` or `running`: whether a worker may still be busy with it until its next
        /// renewal.
        was: TaskStatus,
    },
    /// The task had already finished with this status; nothing changed.
    AlreadyFinished(TaskStatus),
    /// No such task, or its record expired.
    NotFound,
}

/// What one pass of `reap_expired` did, for the reaper's log and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Expired leases returned to the queue.
    pub requeued: u64,
    /// Expired leases whose task had used all its attempts, now `failed`.
    pub failed: u64,
}

/// The task queue as the API server and the workers see it. Every state change goes through
/// here, so both implementations obey one contract and the server and workers never touch
/// Redis keys themselves.
#[async_trait]
pub trait Broker: TenantRegistry + Send + Sync + 'static {
    /// The limits and TTLs this broker was built with.
    fn config(&self) -> &BrokerConfig;

    /// `"redis"` or `"memory"`.
    fn kind(&self) -> &'static str;

    /// Whether the backing store answers (`/health`, readiness at startup).
    async fn ping(&self) -> Result<(), BrokerError>;

    /// Queues one task of `tenant`, in this order of precedence: the task the tenant's
    /// idempotency key already names is returned; unless `force_refresh`, a fresh cached result
    /// for its [`result_cache_key`](crucible_shared::EvaluateRequest::result_cache_key) (within
    /// [`BrokerConfig::cache_scope`] and the tenant's cache namespace) becomes a new task that
    /// is `done` at once, and an identical queued or running task of the same tenant is
    /// returned (`coalesced`); otherwise a new task is queued, within the global queue cap and
    /// the tenant's `max_queued`. A task that ends `done` leaves its result in its tenant's
    /// cache namespace for `result_ttl`. [`BrokerError::UnknownTenant`] when the tenant is gone.
    async fn submit(&self, tenant: &TenantId, spec: TaskSpec) -> Result<Submitted, BrokerError>;

    /// Submits all tasks of a batch of `tenant` as `submit` would, one after the other,
    /// atomically with respect to the queue cap and the tenant's quota: either every task is
    /// accepted or none is.
    async fn submit_batch(
        &self,
        tenant: &TenantId,
        specs: Vec<TaskSpec>,
    ) -> Result<(BatchId, Vec<Submitted>), BrokerError>;

    /// A task's status and, once finished, its result; None when unknown or expired.
    async fn get_task(&self, id: &TaskId) -> Result<Option<TaskView>, BrokerError>;

    /// The spec (request and seed) of a task, while it is kept.
    async fn get_spec(&self, id: &TaskId) -> Result<Option<TaskSpec>, BrokerError>;

    /// A queued task never runs; a running one is marked `cancelled` at once and its worker
    /// learns it at its next renewal.
    async fn cancel(&self, id: &TaskId) -> Result<CancelOutcome, BrokerError>;

    /// Cancels every open task of a batch as `cancel` does one (the error names the batch):
    /// queued ones never run, running ones are `cancelled` at once and their workers learn it
    /// at their next renewal, finished ones are left as they are. Each distinct task is counted
    /// once. A task the batch shares with another submission of its tenant (coalesced) is
    /// cancelled for both. Each task's transition is atomic, the batch's as a whole is not: a
    /// task that finishes meanwhile is counted as finished. None for an unknown (or expired)
    /// batch.
    async fn cancel_batch(&self, id: &BatchId) -> Result<Option<BatchCancelCounts>, BrokerError>;

    /// A batch's counts per status, with every task's view when `include_tasks`; None for an
    /// unknown (or expired) batch.
    async fn batch_status(
        &self,
        id: &BatchId,
        include_tasks: bool,
    ) -> Result<Option<BatchStatus>, BrokerError>;

    /// The entries of `id`'s finished log from position `after` on, at most `limit`; waits up
    /// to `wait` for the log to grow past `after`. None for an unknown (or expired) batch.
    async fn batch_finished(
        &self,
        id: &BatchId,
        after: u64,
        limit: usize,
        wait: Duration,
    ) -> Result<Option<FinishedPage>, BrokerError>;

    /// Queue depths and counts for `/queue/status` and the metrics, with the depth of each
    /// device class and whether any live worker can serve it (`classes`).
    async fn queue_status(&self) -> Result<QueueStatus, BrokerError>;

    /// Tasks finished over the last minutes (one window per
    /// [`WINDOWS_MIN`](crate::activity::WINDOWS_MIN)) and the latest failures, by the broker's
    /// clock (`activity.rs`).
    async fn activity(&self) -> Result<ActivityReport, BrokerError>;

    /// Takes the next task for `worker`, a worker of device class `class`, waiting up to
    /// `wait` for one to arrive: a task of that class or of no class, never one of another
    /// class. Each class's workers serve tenants in a weighted fair share of their own; within
    /// a tenant, high before normal before low, but low is guaranteed a share of claims so it
    /// never starves, and within a priority the task queued first (`fair.rs`).
    async fn claim(
        &self,
        worker: &WorkerId,
        class: &DeviceClass,
        wait: Duration,
    ) -> Result<Option<Lease>, BrokerError>;

    /// Heartbeat of a lease: extends its expiry by `lease_ttl` if the token is current.
    async fn renew(&self, lease: &Lease) -> Result<LeaseState, BrokerError>;

    /// Stores the verdict and marks the task `done`, if the token is current.
    async fn complete(&self, lease: &Lease, result: EvalResult) -> Result<AckOutcome, BrokerError>;

    /// Gives the task back after a failure of the service (not of the kernel): it is requeued
    /// (into the queue of its class) for another attempt, or marked `failed` with `reason` once `max_attempts` are used.
    async fn release(&self, lease: &Lease, reason: &str) -> Result<AckOutcome, BrokerError>;

    /// Requeues (or fails) every task whose lease expired, each into the queue of its own
    /// class.
    async fn reap_expired(&self) -> Result<ReapReport, BrokerError>;

    /// Registers or refreshes a worker in the shared registry; the answer carries what the
    /// registry asks of the worker (a drain).
    async fn worker_heartbeat(&self, info: &WorkerInfo) -> Result<HeartbeatAnswer, BrokerError>;

    /// Removes a worker from the registry when it shuts down cleanly, instead of waiting
    /// for it to be reported `lost` (with any drain asked of it).
    async fn deregister_worker(&self, id: &WorkerId) -> Result<(), BrokerError>;

    /// Every registered worker; one whose heartbeat is older than `worker_liveness` is
    /// reported with state `lost`, and one silent for much longer is dropped.
    async fn list_workers(&self) -> Result<Vec<WorkerInfo>, BrokerError>;

    /// The value stored under `key` in `namespace` of the small key-value cache, unless it
    /// expired. Every lookup counts as a hit or a miss of its namespace in the lifetime stats
    /// ([`Broker::kv_counts`]; namespace `ref` also in [`QueueStatus::ref_cache_hits_total`] /
    /// `ref_cache_misses_total`).
    async fn kv_get(
        &self,
        namespace: KvNamespace,
        key: &str,
    ) -> Result<Option<String>, BrokerError>;

    /// The lifetime hits and misses of `namespace`'s lookups.
    async fn kv_counts(&self, namespace: KvNamespace) -> Result<KvCounts, BrokerError>;

    /// Stores `value` under `key` in `namespace`, replacing any earlier value; it expires
    /// after `ttl`.
    async fn kv_put(
        &self,
        namespace: KvNamespace,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), BrokerError>;

    /// Waits until the task is terminal or `timeout` passes; returns its latest view.
    async fn wait_terminal(
        &self,
        id: &TaskId,
        timeout: Duration,
    ) -> Result<Option<TaskView>, BrokerError>;

    /// Asks registered worker `id` to drain: its next heartbeat's answer says so
    /// ([`HeartbeatAnswer::drain`]); the request lasts as long as the worker's registry entry
    /// would. `false` when no worker `id` is registered.
    async fn drain_worker(&self, id: &WorkerId) -> Result<bool, BrokerError>;

    /// Takes the cluster's reaper lease for `holder`, or renews it when `holder` has it
    /// already, for `ttl` from now (broker time); `false` while another holder's lease lasts.
    /// One atomic step, so of any number of processes running the reaper one reaps at a time.
    async fn reaper_lease(&self, holder: &str, ttl: Duration) -> Result<bool, BrokerError>;

    /// Gives the reaper lease up if `holder` has it (a stopping leader), so that a standby
    /// takes over at its next tick instead of after the lease's TTL.
    async fn release_reaper_lease(&self, holder: &str) -> Result<(), BrokerError>;

    /// Cancels the queued tasks of deleted tenants whose deleting request stopped half way;
    /// returns how many. Reaches the tenant registry, so only the API's role runs it.
    async fn finish_tenant_deletions(&self) -> Result<u64, BrokerError>;

    /// Stores `value` under `key` in `namespace` with `ttl` only when no live value is there,
    /// in one atomic step: None when it stored it, else the value already there (untouched).
    /// Of any number of callers racing for one key, exactly one stores (an episode's turn is
    /// taken once, `api-server/src/episodes.rs`).
    async fn kv_put_if_absent(
        &self,
        namespace: KvNamespace,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<Option<String>, BrokerError>;
}
