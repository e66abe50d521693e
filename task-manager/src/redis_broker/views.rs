//! Reading from Redis: the task hash fields that make a [`TaskView`], the pipelined reads of
//! many tasks and of a batch's finished log, the queue status and the worker registry.

use super::{RedisBroker, corrupt, ms, parse_status, redis_err, time_from_ms};
use crate::broker::BrokerError;
use crate::kv::KvNamespace;
use crate::policy::worker_retention;
use crucible_shared::{
    BatchId, DeviceClass, LiveClasses, Priority, QueueStatus, QueuedByClass, TaskId, TaskView,
    WorkerId, WorkerInfo, WorkerState,
};
use std::collections::HashMap;

/// Fields of the task hash that make up a [`TaskView`], in [`decode_view`]'s order.
pub(super) const VIEW_FIELDS: [&str; 12] = [
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
    "class",
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
        class,
    ]: [Option<String>; 12] = fields
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
        device_class: class
            .as_deref()
            .map(DeviceClass::parse)
            .transpose()
            .map_err(|e| corrupt(format!("class of task {id}: {e}")))?,
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

/// The one round trip of `queue_status`: queued per priority, per queue class, leases, stats.
type QueueRead = (
    Vec<Option<u64>>,
    HashMap<String, i64>,
    u64,
    Vec<Option<u64>>,
);

impl RedisBroker {
    /// `queue_status`: the queue depths, leases and lifetime counters in one round trip.
    pub(super) async fn read_queue_status(&self) -> Result<QueueStatus, BrokerError> {
        let mut c = self.conn().await?;
        let (queued, by_class, running, stats): QueueRead = redis::pipe()
            .atomic()
            .cmd("HMGET")
            .arg(self.keys().queued())
            .arg(&["high", "normal", "low"][..])
            .cmd("HGETALL")
            .arg(self.keys().queued_class())
            .cmd("ZCARD")
            .arg(self.keys().leases())
            .cmd("HMGET")
            .arg(self.keys().stats())
            .arg(
                &[
                    "submitted",
                    "done",
                    "failed",
                    "cancelled",
                    "requeued",
                    "cache_hits",
                    "cache_misses",
                    "coalesced",
                    &KvNamespace::Ref.hits_field(),
                    &KvNamespace::Ref.misses_field(),
                ][..],
            )
            .query_async(&mut c)
            .await
            .map_err(redis_err)?;
        drop(c);
        let queued_by_class = queued_by_class(by_class)?;
        let workers = self.read_workers().await?;
        let stat = |i: usize| stats.get(i).copied().flatten().unwrap_or(0);
        let queued = |i: usize| queued.get(i).copied().flatten().unwrap_or(0);
        Ok(QueueStatus {
            queued_high: queued(0),
            queued_normal: queued(1),
            queued_low: queued(2),
            running,
            queue_cap: self.cfg.queue_cap,
            submitted_total: stat(0),
            done_total: stat(1),
            failed_total: stat(2),
            cancelled_total: stat(3),
            requeued_total: stat(4),
            cache_hits_total: stat(5),
            cache_misses_total: stat(6),
            coalesced_total: stat(7),
            ref_cache_hits_total: stat(8),
            ref_cache_misses_total: stat(9),
            classes: Some(LiveClasses::of(&workers).queues(&queued_by_class)),
            tenants: None,
        })
    }

    /// `list_workers`: the registry's entries, their liveness judged by the registry's clock.
    pub(super) async fn read_workers(&self) -> Result<Vec<WorkerInfo>, BrokerError> {
        let mut c = self.conn().await?;
        let reply: Vec<String> = self
            .scripts
            .list_workers
            .arg(self.prefix())
            .arg(ms(worker_retention(self.cfg.worker_liveness)))
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        let (now, entries) = reply
            .split_first()
            .ok_or_else(|| corrupt("empty worker list reply"))?;
        let now = time_from_ms(now)?;
        let liveness = chrono::Duration::from_std(self.cfg.worker_liveness)
            .map_err(|e| corrupt(format!("worker_liveness: {e}")))?;
        let mut out = Vec::with_capacity(entries.len() / 3);
        for entry in entries.chunks_exact(3) {
            let mut info: WorkerInfo = serde_json::from_str(&entry[2])
                .map_err(|e| corrupt(format!("worker {}: {e}", entry[0])))?;
            // The registry's clock, not the worker's, decides liveness.
            info.last_heartbeat = time_from_ms(&entry[1])?;
            if now - info.last_heartbeat > liveness {
                info.state = WorkerState::Lost;
            }
            out.push(info);
        }
        out.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        Ok(out)
    }
}

/// `queued_class` as the views count it: the queue class `any` is the row of no class.
fn queued_by_class(fields: HashMap<String, i64>) -> Result<QueuedByClass, BrokerError> {
    fields
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(class, n)| {
            let class = match class.as_str() {
                crucible_shared::device::UNCLASSED => None,
                name => Some(
                    DeviceClass::parse(name).map_err(|e| corrupt(format!("queued_class: {e}")))?,
                ),
            };
            Ok((class, n.unsigned_abs()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_status_means_unknown_task() {
        let id = TaskId::from("t_x");
        assert_eq!(decode_view(&id, vec![None; 12]).unwrap(), None);
        assert!(decode_view(&id, vec![None; 3]).is_err());
    }
}
