//! Recent activity, as both brokers keep it: every task that reaches a terminal status is
//! counted in the bucket of the minute it finished in (by status, a `done` task also by
//! verdict and error code), and a failure (`done` with a verdict other than `ok`, or
//! `failed`) is also put at the head of a short list. Only the last hour of buckets and the
//! last few failures are kept, so it stays small whatever the rate.
//!
//! The figures of this module are the one place their values are written: the memory broker
//! and [`windows`] read them as constants, the Redis scripts as locals of the header made with
//! the key table (`redis_broker/keys/lua.rs`, which puts every constant the scripts share with
//! Rust in front of every script). They stay here, not with the key layout, because they are
//! what activity means (both brokers keep it); only their Lua spelling is the Redis broker's. Counting happens where a task becomes terminal (`transition` in
//! `lua/prelude.lua` and in `memory/state.rs`), so no path to a terminal status can miss it.
//! Answers from the result cache never ran and are not counted.

use crate::error::BrokerError;
use crucible_shared::{
    ActivityWindow, EvalResult, RecentFailure, TaskStatus, TenantId, Verdict, VerdictCode,
    VerdictCounts,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Length of one bucket: activity is counted per minute of the broker's clock.
pub const BUCKET_MS: i64 = 60_000;
/// The windows reported, in minutes, shortest first; the last is the longest.
pub const WINDOWS_MIN: [u32; 2] = [5, 60];
/// Buckets kept: the longest window's.
pub const BUCKETS_KEPT: i64 = WINDOWS_MIN[WINDOWS_MIN.len() - 1] as i64;
/// Failures kept, newest first.
pub const FAILURES_KEPT: usize = 20;
/// A failure's message is clipped to this many bytes (at a character boundary) plus an
/// ellipsis: enough to recognise an error, little enough for a table cell.
pub const MESSAGE_BYTES: usize = 300;

/// The bucket of an instant in milliseconds since the epoch.
pub fn bucket_of(ms: i64) -> i64 {
    ms.div_euclid(BUCKET_MS)
}

/// How a `done` task ended, as activity records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Its verdict.
    pub verdict: Verdict,
    /// Its result's error code.
    pub error_code: Option<VerdictCode>,
    /// Its result's error message, whole (clipped when recorded).
    pub message: Option<String>,
}

impl Outcome {
    /// What a result records (an empty message is none).
    pub fn of(result: &EvalResult) -> Self {
        Self {
            verdict: result.verdict,
            error_code: result.error_code,
            message: result.error_message.clone().filter(|m| !m.is_empty()),
        }
    }
}

/// Whether a task that ended so goes on the list of failures: `failed`, or `done` with a
/// verdict other than `ok` (`lua/prelude.lua`'s `record_activity` applies the same rule).
pub fn is_failure(status: TaskStatus, verdict: Option<Verdict>) -> bool {
    match status {
        TaskStatus::Failed => true,
        TaskStatus::Done => verdict.is_some_and(|v| v != Verdict::Ok),
        TaskStatus::Queued | TaskStatus::Running | TaskStatus::Cancelled => false,
    }
}

/// The tasks that finished within one bucket. Stored as JSON by the Redis broker (field
/// `activity:{bucket}` of `stats`, written by the Lua scripts), kept as is by the memory
/// broker; verdicts and error codes by their wire names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Tasks that ended `done`.
    #[serde(default)]
    pub done: u64,
    /// Tasks that ended `failed`.
    #[serde(default)]
    pub failed: u64,
    /// Tasks that ended `cancelled`.
    #[serde(default)]
    pub cancelled: u64,
    /// `done` tasks by verdict.
    #[serde(default)]
    pub verdicts: BTreeMap<String, u64>,
    /// `done` tasks by error code.
    #[serde(default)]
    pub errors: BTreeMap<String, u64>,
}

impl Bucket {
    /// Counts one task that ended `status` (`outcome` for a `done` one).
    pub fn record(&mut self, status: TaskStatus, outcome: Option<&Outcome>) {
        match status {
            TaskStatus::Done => self.done += 1,
            TaskStatus::Failed => self.failed += 1,
            TaskStatus::Cancelled => self.cancelled += 1,
            TaskStatus::Queued | TaskStatus::Running => return,
        }
        if let Some(o) = outcome {
            *self
                .verdicts
                .entry(crucible_shared::wire_name(&o.verdict))
                .or_default() += 1;
            if let Some(code) = o.error_code {
                *self
                    .errors
                    .entry(crucible_shared::wire_name(&code))
                    .or_default() += 1;
            }
        }
    }
}

/// A failure with the tenant it belongs to (the API decides who may see which, and names).
#[derive(Debug, Clone, PartialEq)]
pub struct FailureRecord {
    /// The tenant that submitted the task.
    pub tenant: TenantId,
    /// The failure, its `tenant` unset.
    pub failure: RecentFailure,
}

/// What `Broker::activity` answers.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivityReport {
    /// One per [`WINDOWS_MIN`], shortest first.
    pub windows: Vec<ActivityWindow>,
    /// Up to [`FAILURES_KEPT`] failures, newest first.
    pub failures: Vec<FailureRecord>,
}

/// The windows of [`WINDOWS_MIN`] at `now_ms`, from the buckets kept (any order; buckets
/// outside a window are left out of it). A verdict this version does not know is corrupt
/// data.
pub fn windows(now_ms: i64, buckets: &[(i64, Bucket)]) -> Result<Vec<ActivityWindow>, BrokerError> {
    let now_bucket = bucket_of(now_ms);
    WINDOWS_MIN
        .iter()
        .map(|&minutes| {
            let first = now_bucket - i64::from(minutes) + 1;
            let since_ms = first * BUCKET_MS;
            let mut w = ActivityWindow {
                minutes,
                since: chrono::DateTime::from_timestamp_millis(since_ms).unwrap_or_default(),
                finished: 0,
                per_minute: 0.0,
                done: 0,
                failed: 0,
                cancelled: 0,
                verdicts: VerdictCounts::default(),
                error_codes: BTreeMap::new(),
            };
            for (_, b) in buckets
                .iter()
                .filter(|(at, _)| (first..=now_bucket).contains(at))
            {
                w.done += b.done;
                w.failed += b.failed;
                w.cancelled += b.cancelled;
                for (name, n) in &b.verdicts {
                    let verdict: Verdict = serde_json::from_value(serde_json::Value::String(
                        name.clone(),
                    ))
                    .map_err(|_| {
                        BrokerError::Corrupt(format!("unknown verdict {name:?} in activity"))
                    })?;
                    w.verdicts.add(verdict, *n);
                }
                for (code, n) in &b.errors {
                    *w.error_codes.entry(code.clone()).or_default() += n;
                }
            }
            w.finished = w.done + w.failed + w.cancelled;
            // At least a second, so a window that has just begun does not divide by zero.
            let spanned_min = ((now_ms - since_ms).max(1000)) as f64 / BUCKET_MS as f64;
            w.per_minute = w.finished as f64 / spanned_min;
            Ok(w)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(done: u64, verdict: &str) -> Bucket {
        Bucket {
            done,
            verdicts: BTreeMap::from([(verdict.to_owned(), done)]),
            ..Bucket::default()
        }
    }

    #[test]
    fn the_longest_window_is_what_is_kept() {
        assert!(WINDOWS_MIN.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(BUCKETS_KEPT, 60);
    }

    #[test]
    fn windows_count_the_buckets_within_them() {
        // 30 s into minute 1000.
        let now = 1000 * BUCKET_MS + 30_000;
        let buckets = vec![
            (1000, bucket(2, "ok")),
            (996, bucket(1, "incorrect")),
            // Outside the 5-minute window, inside the hour.
            (995, bucket(4, "hack")),
            // Outside both.
            (940, bucket(8, "ok")),
        ];
        let w = windows(now, &buckets).unwrap();
        assert_eq!((w[0].minutes, w[1].minutes), (5, 60));
        assert_eq!(w[0].since.timestamp_millis(), 996 * BUCKET_MS);
        assert_eq!(
            (w[0].done, w[0].verdicts.ok, w[0].verdicts.incorrect),
            (3, 2, 1)
        );
        assert_eq!((w[1].done, w[1].verdicts.hack), (7, 4));
        assert_eq!(w[1].since.timestamp_millis(), 941 * BUCKET_MS);
        // 3 tasks over 4.5 minutes.
        assert!(
            (w[0].per_minute - 3.0 / 4.5).abs() < 1e-9,
            "{}",
            w[0].per_minute
        );
        let bad = vec![(1000, bucket(1, "great"))];
        let err = windows(now, &bad).unwrap_err();
        assert!(err.to_string().contains("great"), "{err}");
    }

    #[test]
    fn buckets_count_statuses_verdicts_and_codes() {
        let mut b = Bucket::default();
        let wrong = Outcome {
            verdict: Verdict::Incorrect,
            error_code: Some(VerdictCode::Correctness),
            message: None,
        };
        b.record(TaskStatus::Done, Some(&wrong));
        b.record(TaskStatus::Done, Some(&wrong));
        b.record(TaskStatus::Failed, None);
        b.record(TaskStatus::Cancelled, None);
        b.record(TaskStatus::Queued, None);
        assert_eq!((b.done, b.failed, b.cancelled), (2, 1, 1));
        assert_eq!(b.verdicts["incorrect"], 2);
        assert_eq!(b.errors["CORRECTNESS"], 2);
        // The shape the Lua scripts write.
        let json = r#"{"done":1,"failed":0,"cancelled":0,"verdicts":{"ok":1},"errors":{}}"#;
        let read: Bucket = serde_json::from_str(json).unwrap();
        assert_eq!(read.verdicts["ok"], 1);
    }

    #[test]
    fn failures_are_failed_tasks_and_failing_verdicts() {
        assert!(is_failure(TaskStatus::Failed, None));
        assert!(is_failure(TaskStatus::Done, Some(Verdict::Decoy)));
        assert!(!is_failure(TaskStatus::Done, Some(Verdict::Ok)));
        assert!(!is_failure(TaskStatus::Cancelled, None));
    }
}
