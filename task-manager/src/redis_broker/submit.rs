//! Submission to Redis: one `lua/submit.lua` call per submission, all or nothing.

use super::{RedisBroker, corrupt, ms, parse_status, redis_err};
use crate::broker::{BrokerError, Submitted};
use crate::policy::scoped_cache_key;
use crucible_shared::{BatchId, TaskId, TaskSpec, TenantId};

impl RedisBroker {
    pub(super) async fn submit_specs(
        &self,
        tenant: &TenantId,
        specs: &[TaskSpec],
        batch: Option<&BatchId>,
    ) -> Result<Vec<Submitted>, BrokerError> {
        let mut inv = self.scripts.submit.prepare_invoke();
        inv.arg(self.prefix())
            .arg(self.cfg.queue_cap)
            .arg(batch.map_or("", |b| b.as_str()))
            .arg(ms(self.cfg.result_ttl))
            .arg(tenant.as_str())
            .arg(if tenant.is_builtin() { "1" } else { "0" })
            .arg(specs.len())
            .arg(self.cfg.queue_cap_bytes);
        for spec in specs {
            let json = serde_json::to_string(spec).map_err(|e| corrupt(format!("spec: {e}")))?;
            inv.arg(TaskId::random().as_str())
                .arg(spec.request.priority.as_str())
                .arg(spec.request.idempotency_key.as_deref().unwrap_or(""))
                .arg(json)
                .arg(scoped_cache_key(&self.cfg, spec))
                .arg(if spec.request.force_refresh { "1" } else { "0" })
                .arg(
                    spec.request
                        .device_class
                        .as_ref()
                        .map_or("", |c| c.as_str()),
                );
        }
        let mut c = self.conn().await?;
        let reply: Vec<String> = inv.invoke_async(&mut c).await.map_err(redis_err)?;
        if reply.first().map(String::as_str) == Some("ok") {
            self.await_replicas(&mut c, "submit").await?;
        }
        let number = |i: usize| -> Result<u64, BrokerError> {
            reply
                .get(i)
                .and_then(|q| q.parse().ok())
                .ok_or_else(|| corrupt(format!("submit reply without a count: {reply:?}")))
        };
        match reply.first().map(String::as_str) {
            Some("no_tenant") => Err(BrokerError::UnknownTenant(tenant.clone())),
            Some("quota") => Err(BrokerError::QuotaExceeded {
                queued: number(1)?,
                max_queued: number(2)?,
            }),
            Some("full") => Err(BrokerError::QueueFull {
                queued: number(1)?,
                cap: self.cfg.queue_cap,
            }),
            Some("full_bytes") => Err(BrokerError::QueueBytesFull {
                bytes: number(1)?,
                cap_bytes: self.cfg.queue_cap_bytes,
            }),
            Some("ok") if reply.len() == 1 + 3 * specs.len() => reply[1..]
                .chunks_exact(3)
                .map(|t| {
                    let (deduplicated, coalesced, cached) = match t[2].as_str() {
                        "new" => (false, false, false),
                        "dedup" => (true, false, false),
                        "coalesced" => (false, true, false),
                        "cached" => (false, false, true),
                        other => {
                            return Err(corrupt(format!("unexpected submit outcome {other:?}")));
                        }
                    };
                    Ok(Submitted {
                        task_id: TaskId(t[0].clone()),
                        status: parse_status(&t[1])?,
                        deduplicated,
                        coalesced,
                        cached,
                    })
                })
                .collect(),
            _ => Err(corrupt(format!("unexpected submit reply {reply:?}"))),
        }
    }
}
