//! The memory broker's recent activity (`activity.rs` says what is kept and why): the buckets
//! of the last hour, oldest first, and the latest failures, newest first. Written by
//! `State::transition` under the broker's lock.

use crate::activity::{
    ActivityReport, BUCKETS_KEPT, Bucket, FAILURES_KEPT, FailureRecord, MESSAGE_BYTES, Outcome,
    bucket_of, is_failure, windows,
};
use crate::broker::BrokerError;
use chrono::{DateTime, Utc};
use crucible_shared::{RecentFailure, TaskId, TaskStatus, TenantId, clip};
use std::collections::VecDeque;

/// Buckets and failures, each bounded.
#[derive(Default)]
pub(super) struct ActivityLog {
    /// (bucket, its counts), oldest first, none older than [`BUCKETS_KEPT`] buckets.
    buckets: VecDeque<(i64, Bucket)>,
    /// Newest first, at most [`FAILURES_KEPT`].
    failures: VecDeque<FailureRecord>,
}

/// A task that has just become terminal.
pub(super) struct Finished<'a> {
    pub(super) id: &'a TaskId,
    pub(super) tenant: &'a TenantId,
    pub(super) status: TaskStatus,
    /// The result's outcome, for a `done` task.
    pub(super) outcome: Option<Outcome>,
    /// The task's `error` (why it failed, or was cancelled).
    pub(super) error: Option<&'a str>,
}

impl ActivityLog {
    /// Counts `task`, finished at `now`, and lists it if it is a failure.
    pub(super) fn record(&mut self, now: DateTime<Utc>, task: Finished<'_>) {
        let at = bucket_of(now.timestamp_millis());
        while self
            .buckets
            .front()
            .is_some_and(|(b, _)| *b <= at - BUCKETS_KEPT)
        {
            self.buckets.pop_front();
        }
        if self.buckets.back().is_none_or(|(b, _)| *b < at) {
            self.buckets.push_back((at, Bucket::default()));
        }
        // The clock only moves on, so `now` falls in the newest bucket.
        if let Some((_, bucket)) = self.buckets.back_mut() {
            bucket.record(task.status, task.outcome.as_ref());
        }
        let verdict = task.outcome.as_ref().map(|o| o.verdict);
        if !is_failure(task.status, verdict) {
            return;
        }
        let message = match &task.outcome {
            Some(o) => o.message.as_deref(),
            None => task.error,
        };
        self.failures.push_front(FailureRecord {
            tenant: task.tenant.clone(),
            failure: RecentFailure {
                task_id: task.id.clone(),
                // Milliseconds, as the Redis broker keeps them.
                finished_at: DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now),
                status: task.status,
                verdict,
                error_code: task.outcome.as_ref().and_then(|o| o.error_code),
                message: message.map(|m| clip(m, MESSAGE_BYTES)),
                tenant: None,
            },
        });
        self.failures.truncate(FAILURES_KEPT);
    }

    /// The windows and failures as of `now`.
    pub(super) fn report(&self, now: DateTime<Utc>) -> Result<ActivityReport, BrokerError> {
        let buckets: Vec<(i64, Bucket)> = self.buckets.iter().cloned().collect();
        Ok(ActivityReport {
            windows: windows(now.timestamp_millis(), &buckets)?,
            failures: self.failures.iter().cloned().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activity::BUCKET_MS;
    use crucible_shared::Verdict;

    fn at(minute: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(minute * BUCKET_MS + 1).unwrap()
    }

    fn failed<'a>(id: &'a TaskId, tenant: &'a TenantId) -> Finished<'a> {
        Finished {
            id,
            tenant,
            status: TaskStatus::Failed,
            outcome: None,
            error: Some("lease expired"),
        }
    }

    #[test]
    fn only_the_last_hour_and_the_last_failures_are_kept() {
        let (id, tenant) = (TaskId::from("t_1"), TenantId::builtin());
        let mut log = ActivityLog::default();
        for minute in 0..100 {
            log.record(at(minute), failed(&id, &tenant));
        }
        assert_eq!(log.buckets.len() as i64, BUCKETS_KEPT);
        assert_eq!(log.buckets.front().unwrap().0, 100 - BUCKETS_KEPT);
        assert_eq!(log.failures.len(), FAILURES_KEPT);
        let report = log.report(at(99)).unwrap();
        assert_eq!(
            (report.windows[0].failed, report.windows[1].failed),
            (5, 60)
        );
        // An hour later nothing is in either window.
        let later = log.report(at(99 + BUCKETS_KEPT)).unwrap();
        assert_eq!(later.windows[1].finished, 0);
    }

    #[test]
    fn a_failing_verdict_is_listed_with_its_clipped_message() {
        let (id, tenant) = (TaskId::from("t_2"), TenantId::builtin());
        let mut log = ActivityLog::default();
        let outcome = |verdict| Outcome {
            verdict,
            error_code: None,
            message: Some("x".repeat(MESSAGE_BYTES + 10)),
        };
        for verdict in [Verdict::Ok, Verdict::Incorrect] {
            log.record(
                at(5),
                Finished {
                    outcome: Some(outcome(verdict)),
                    status: TaskStatus::Done,
                    ..failed(&id, &tenant)
                },
            );
        }
        assert_eq!(log.failures.len(), 1);
        let f = &log.failures[0].failure;
        assert_eq!(f.verdict, Some(Verdict::Incorrect));
        assert_eq!(
            f.message.as_deref().unwrap().len(),
            MESSAGE_BYTES + '…'.len_utf8()
        );
    }
}
