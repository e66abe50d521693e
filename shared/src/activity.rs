//! Recent activity and the status page's view: tasks finished over the last minutes by how
//! they ended, the latest failures, cache hit rates, and `GET /status.json`, which the status
//! page (`GET /`) is rendered from.

use crate::ids::TaskId;
use crate::status::QueueStatus;
use crate::task::{TaskStatus, Verdict, VerdictCode};
use crate::worker::{WorkerInfo, WorkerState};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `s` cut to at most `max` bytes at a character boundary, with `…` added when cut: a message
/// shown in a table cell (the Lua `clip` of task-manager's `lua/prelude.lua` cuts alike).
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// `done` tasks by verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct VerdictCounts {
    /// Correct, own kernels ran, no integrity finding.
    pub ok: u64,
    /// Ran, but wrong.
    pub incorrect: u64,
    /// Correct, but no kernel of its own ran.
    pub decoy: u64,
    /// Caught gaming the evaluation.
    pub hack: u64,
    /// Never got as far as being judged (syntax, build, crash, timeout, ...).
    pub error: u64,
}

impl VerdictCounts {
    /// Counts `n` more of `verdict`.
    pub fn add(&mut self, verdict: Verdict, n: u64) {
        let slot = match verdict {
            Verdict::Ok => &mut self.ok,
            Verdict::Incorrect => &mut self.incorrect,
            Verdict::Decoy => &mut self.decoy,
            Verdict::Hack => &mut self.hack,
            Verdict::Error => &mut self.error,
        };
        *slot += n;
    }

    /// Every verdict with its count, in the order the page shows them.
    pub fn entries(&self) -> [(Verdict, u64); 5] {
        [
            (Verdict::Ok, self.ok),
            (Verdict::Incorrect, self.incorrect),
            (Verdict::Decoy, self.decoy),
            (Verdict::Hack, self.hack),
            (Verdict::Error, self.error),
        ]
    }
}

/// Tasks that reached a terminal status within one window of recent time. Answers from the
/// result cache never ran and are not counted here (see the cache hit rates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ActivityWindow {
    /// The window's length in minutes (5 or 60).
    pub minutes: u32,
    /// Start of the oldest whole minute counted: the window is the current minute and the
    /// `minutes - 1` before it, so it spans a little less than `minutes`.
    pub since: DateTime<Utc>,
    /// Tasks that finished, whatever their status: `done + failed + cancelled`.
    pub finished: u64,
    /// `finished` per minute over the time the window actually spans (`since` until now).
    pub per_minute: f64,
    /// Tasks that ended with a verdict.
    pub done: u64,
    /// Tasks given up on without a verdict (an outage, not a kernel).
    pub failed: u64,
    /// Tasks cancelled by request or with their tenant.
    pub cancelled: u64,
    /// The `done` tasks by verdict.
    pub verdicts: VerdictCounts,
    /// The `done` tasks that carry an `error_code`, by code.
    pub error_codes: BTreeMap<String, u64>,
}

/// A task that finished badly: `done` with a verdict other than `ok`, or `failed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RecentFailure {
    /// The task (readable with `GET /tasks/{id}` while it is kept).
    pub task_id: TaskId,
    /// When it finished.
    pub finished_at: DateTime<Utc>,
    /// `done` (a failing verdict) or `failed` (no verdict).
    pub status: TaskStatus,
    /// The verdict of a `done` task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// The `error_code` of a `done` task's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<VerdictCode>,
    /// The start of the result's `error_message` (`done`) or of the task's `error`
    /// (`failed`), clipped to a few hundred bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The tenant that submitted it (admin only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// What the service finished lately: the windows (5 and 60 minutes) and the latest failures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Activity {
    /// One entry per window, shortest first.
    pub windows: Vec<ActivityWindow>,
    /// The latest failures, newest first (a tenant sees only its own).
    pub recent_failures: Vec<RecentFailure>,
}

/// Lifetime lookups of one cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CacheRate {
    /// `result` (whole evaluations, per tenant), `reference` (reference timings) or `build`
    /// (built extensions' records).
    pub cache: String,
    /// Lookups that found an entry.
    pub hits: u64,
    /// Lookups that found none.
    pub misses: u64,
    /// `hits / (hits + misses)`; absent before the first lookup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hit_rate: Option<f64>,
}

impl CacheRate {
    /// The rate of `cache` from its counts.
    pub fn new(cache: &str, hits: u64, misses: u64) -> Self {
        let total = hits + misses;
        Self {
            cache: cache.to_owned(),
            hits,
            misses,
            hit_rate: (total > 0).then(|| hits as f64 / total as f64),
        }
    }
}

/// How a worker's device is, as far as the registry knows: after a CUDA fault a GPU worker
/// probes its device and reports `unhealthy` until a probe passes again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum WorkerHealth {
    /// Its last device check passed (or it is a CPU worker).
    Ok,
    /// Its device failed a health check; it takes no tasks until one passes.
    Unhealthy,
    /// No heartbeat for longer than the liveness window: nothing is known.
    Unknown,
}

impl WorkerHealth {
    /// The health a worker's state implies.
    pub fn of(state: WorkerState) -> Self {
        match state {
            WorkerState::Unhealthy => WorkerHealth::Unhealthy,
            WorkerState::Lost => WorkerHealth::Unknown,
            WorkerState::Starting
            | WorkerState::Idle
            | WorkerState::Busy
            | WorkerState::Draining
            | WorkerState::Stopping => WorkerHealth::Ok,
        }
    }
}

/// One worker on the status page: its registry entry and the health it implies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StatusWorker {
    /// The registry entry (`current_task` only for the admin).
    #[serde(flatten)]
    pub info: WorkerInfo,
    /// Its device's health after its last check.
    pub health: WorkerHealth,
}

/// `GET /status.json`: everything the status page shows, as the caller may see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StatusPage {
    /// When this view was put together (the API's clock).
    pub generated_at: DateTime<Utc>,
    /// The API server's version.
    pub version: String,
    /// `redis` or `memory`.
    pub broker: String,
    /// Whether the caller is the admin (tenant names, workers' current tasks, every
    /// tenant's failures).
    pub admin: bool,
    /// Every registered worker, by node, then device index, then id.
    pub workers: Vec<StatusWorker>,
    /// Queue depth by priority, and by tenant in `tenants` (every tenant for the admin, the
    /// caller's own for a tenant).
    pub queue: QueueStatus,
    /// Finished tasks over the last 5 and 60 minutes and the latest failures.
    pub activity: Activity,
    /// Lifetime hit rates of the result, reference and build caches.
    pub caches: Vec<CacheRate>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_clipped_at_a_character_boundary() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("abcdef", 3), "abc…");
        // 'é' is two bytes: a cut inside it backs off before it.
        assert_eq!(clip("aé", 2), "a…");
        assert_eq!(clip("ééé", 3), "é…");
    }

    #[test]
    fn rates_and_counts() {
        assert_eq!(CacheRate::new("result", 0, 0).hit_rate, None);
        assert_eq!(CacheRate::new("result", 3, 1).hit_rate, Some(0.75));
        let mut v = VerdictCounts::default();
        v.add(Verdict::Hack, 2);
        v.add(Verdict::Ok, 1);
        assert_eq!((v.ok, v.hack, v.error), (1, 2, 0));
        assert_eq!(v.entries()[3], (Verdict::Hack, 2));
        assert_eq!(
            WorkerHealth::of(WorkerState::Unhealthy),
            WorkerHealth::Unhealthy
        );
        assert_eq!(WorkerHealth::of(WorkerState::Busy), WorkerHealth::Ok);
        assert_eq!(WorkerHealth::of(WorkerState::Lost), WorkerHealth::Unknown);
    }
}
