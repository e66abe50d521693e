//! Reading tasks and batch logs from Redis: the task hash fields that make a [`TaskView`] and
//! the pipelined reads of many tasks and of a batch's finished log (plain reads, no scripts).

use super::{RedisBroker, corrupt, parse_status, redis_err, time_from_ms};
use crate::broker::BrokerError;
use crucible_shared::{BatchId, Priority, TaskId, TaskView, WorkerId};

/// Fields of the task hash that make up a [`TaskView`], in [`decode_view`]'s order.
pub(super) const VIEW_FIELDS: [&str; 11] = [
    "status",
    "attempts",
    "priority",
    "worker_id",
    "submitted_at",
    "started_at",
    "finished_at",
    "result",
    "error",
    "batch_id",
    "cached",
];

/// Builds a view from the [`VIEW_FIELDS`] of a task hash; `None` when the task is unknown.
pub(super) fn decode_view(
    id: &TaskId,
    fields: Vec<Option<String>>,
) -> Result<Option<TaskView>, BrokerError> {
    let [
        status,
        attempts,
        priority,
        worker_id,
        submitted_at,
        started_at,
        finished_at,
        result,
        error,
        batch_id,
        cached,
    ]: [Option<String>; 11] = fields
        .try_into()
        .map_err(|_| corrupt("task hash reply of the wrong length"))?;
    let Some(status) = status else {
        return Ok(None);
    };
    let time = |t: Option<String>| t.as_deref().map(time_from_ms).transpose();
    Ok(Some(TaskView {
        task_id: id.clone(),
        status: parse_status(&status)?,
        result: result
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| corrupt(format!("result of task {id}: {e}")))?,
        error,
        attempts: attempts
            .as_deref()
            .unwrap_or("0")
            .parse()
            .map_err(|_| corrupt(format!("attempts of task {id}")))?,
        worker_id: worker_id.map(WorkerId),
        priority: priority
            .as_deref()
            .and_then(Priority::parse)
            .ok_or_else(|| corrupt(format!("priority of task {id}")))?,
        batch_id: batch_id.map(BatchId),
        submitted_at: time(submitted_at)?
            .ok_or_else(|| corrupt(format!("task {id} has no submitted_at")))?,
        started_at: time(started_at)?,
        finished_at: time(finished_at)?,
        cached: cached.as_deref() == Some("1"),
    }))
}

impl RedisBroker {
    pub(super) async fn views(&self, ids: &[TaskId]) -> Result<Vec<TaskView>, BrokerError> {
        // A finished task may have expired before its batch; it is simply left out.
        Ok(self.views_by_id(ids).await?.into_iter().flatten().collect())
    }

    /// The view of each task, None where its record is gone.
    pub(super) async fn views_by_id(
        &self,
        ids: &[TaskId],
    ) -> Result<Vec<Option<TaskView>>, BrokerError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET")
                .arg(self.keys().task(id))
                .arg(&VIEW_FIELDS[..]);
        }
        let mut c = self.conn().await?;
        let rows: Vec<Vec<Option<String>>> = pipe.query_async(&mut c).await.map_err(redis_err)?;
        ids.iter()
            .zip(rows)
            .map(|(id, row)| decode_view(id, row))
            .collect()
    }

    /// One read of a batch's finished log: (distinct, log length, the ids from `after` on).
    pub(super) async fn finished_log(
        &self,
        id: &BatchId,
        after: u64,
        limit: usize,
    ) -> Result<Option<(u64, u64, Vec<TaskId>)>, BrokerError> {
        let log = self.keys().batch_finished(id);
        let start = i64::try_from(after).unwrap_or(i64::MAX);
        let stop = start.saturating_add(i64::try_from(limit).unwrap_or(i64::MAX) - 1);
        let mut c = self.conn().await?;
        let (distinct, len, ids): (Option<u64>, u64, Vec<String>) = redis::pipe()
            .atomic()
            .cmd("HGET")
            .arg(self.keys().batch(id))
            .arg("distinct")
            .cmd("LLEN")
            .arg(&log)
            .cmd("LRANGE")
            .arg(&log)
            .arg(start)
            .arg(stop)
            .query_async(&mut c)
            .await
            .map_err(redis_err)?;
        Ok(distinct.map(|d| (d, len, ids.into_iter().map(TaskId).collect())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_status_means_unknown_task() {
        let id = TaskId::from("t_x");
        assert_eq!(decode_view(&id, vec![None; 11]).unwrap(), None);
        assert!(decode_view(&id, vec![None; 3]).is_err());
    }
}
