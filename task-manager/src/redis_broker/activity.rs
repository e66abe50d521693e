//! Reading the recent activity the scripts record (`record_activity` in `lua/prelude.lua`;
//! what is kept and why: `activity.rs`): one script call reads Redis's clock, the buckets of
//! the last hour and the failures, so the windows are cut by the same clock that filled them.

use super::{RedisBroker, corrupt, redis_err};
use crate::activity::{ActivityReport, Bucket, FailureRecord, windows};
use crate::broker::BrokerError;
use chrono::DateTime;
use crucible_shared::{RecentFailure, TaskId, TaskStatus, TenantId, Verdict, VerdictCode};
use serde::Deserialize;

/// A failure as the scripts store it in `activity:failures` (cjson's encoding: absent fields
/// for nil, numbers that may come back as doubles).
#[derive(Deserialize)]
struct StoredFailure {
    task_id: TaskId,
    tenant: TenantId,
    /// Milliseconds of Redis time.
    at: f64,
    status: TaskStatus,
    verdict: Option<Verdict>,
    error_code: Option<VerdictCode>,
    message: Option<String>,
}

impl StoredFailure {
    fn record(self) -> Result<FailureRecord, BrokerError> {
        let finished_at = DateTime::from_timestamp_millis(self.at as i64)
            .ok_or_else(|| corrupt(format!("activity failure time {}", self.at)))?;
        Ok(FailureRecord {
            tenant: self.tenant,
            failure: RecentFailure {
                task_id: self.task_id,
                finished_at,
                status: self.status,
                verdict: self.verdict,
                error_code: self.error_code,
                message: self.message,
                tenant: None,
            },
        })
    }
}

/// The report from the reply of `lua/activity.lua`: now, the failures' JSON, then (minute,
/// counts JSON) pairs, `''` where there is none.
fn decode(reply: &[String]) -> Result<ActivityReport, BrokerError> {
    let [now, failures, buckets @ ..] = reply else {
        return Err(corrupt("activity reply too short"));
    };
    let now: i64 = now
        .parse()
        .map_err(|_| corrupt(format!("activity time {now:?}")))?;
    let mut kept = Vec::new();
    for pair in buckets.chunks_exact(2) {
        if pair[1].is_empty() {
            continue;
        }
        let minute: i64 = pair[0]
            .parse()
            .map_err(|_| corrupt(format!("activity minute {:?}", pair[0])))?;
        let counts: Bucket = serde_json::from_str(&pair[1])
            .map_err(|e| corrupt(format!("activity of minute {minute}: {e}")))?;
        kept.push((minute, counts));
    }
    let failures = if failures.is_empty() {
        Vec::new()
    } else {
        serde_json::from_str::<Vec<StoredFailure>>(failures)
            .map_err(|e| corrupt(format!("activity failures: {e}")))?
            .into_iter()
            .map(StoredFailure::record)
            .collect::<Result<_, _>>()?
    };
    Ok(ActivityReport {
        windows: windows(now, &kept)?,
        failures,
    })
}

impl RedisBroker {
    /// `activity`: one call of `lua/activity.lua`.
    pub(super) async fn read_activity(&self) -> Result<ActivityReport, BrokerError> {
        let mut c = self.conn().await?;
        let reply: Vec<String> = self
            .scripts
            .activity
            .arg(self.prefix())
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        decode(&reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activity::BUCKET_MS;

    #[test]
    fn replies_decode_into_windows_and_failures() {
        let now = 1000 * BUCKET_MS + 5;
        let failure = r#"[{"task_id":"t_1","tenant":"tn_admin","at":1.712345678901e12,
            "status":"done","verdict":"incorrect","error_code":"CORRECTNESS","message":"off"}]"#;
        let reply: Vec<String> = [
            now.to_string(),
            failure.to_owned(),
            "1000".into(),
            r#"{"done":1,"failed":0,"cancelled":0,"verdicts":{"incorrect":1},"errors":{}}"#.into(),
            "999".into(),
            String::new(),
        ]
        .into();
        let report = decode(&reply).unwrap();
        assert_eq!(report.windows[0].verdicts.incorrect, 1);
        let f = &report.failures[0];
        assert_eq!(f.tenant, TenantId::builtin());
        assert_eq!(f.failure.finished_at.timestamp_millis(), 1_712_345_678_901);
        assert_eq!(f.failure.error_code, Some(VerdictCode::Correctness));
        assert!(decode(&["1".to_owned()]).is_err());
        // A bucket that is not JSON is corrupt data, not an empty minute.
        let mut bad = reply.clone();
        bad[3] = "{".into();
        assert!(decode(&bad).is_err());
    }
}
