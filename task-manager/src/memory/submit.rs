//! Submission to the memory broker: every spec of a call is planned under the lock before
//! anything is written, so a refused submission (unknown tenant, quota, queue cap) leaves no
//! trace, as `lua/submit.lua` does for Redis.

use super::{BatchRec, Expiring, MemoryBroker, TaskRec, TenantKey, count_mut};
use crate::broker::{BrokerError, Submitted};
use crate::policy::scoped_cache_key;
use chrono::{DateTime, Utc};
use crucible_shared::{BatchId, EvalResult, StatusCounts, TaskId, TaskSpec, TaskStatus, TenantId};
use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// How `submit` answers one spec.
enum Plan {
    /// An earlier task named by the tenant's idempotency key.
    Deduplicated(TaskId),
    /// An identical open task of the same tenant.
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

impl MemoryBroker {
    pub(super) fn submit_all(
        &self,
        tenant_id: &TenantId,
        specs: Vec<TaskSpec>,
        batch_id: Option<&BatchId>,
    ) -> Result<Vec<Submitted>, BrokerError> {
        let ttl = self.cfg.result_ttl;
        // Hashing up to half a megabyte of source per spec is done before taking the lock.
        let cache_keys: Vec<String> = specs
            .iter()
            .map(|spec| scoped_cache_key(&self.cfg, spec))
            .collect();
        // What Redis counts: the length of the spec's JSON.
        let spec_bytes: Vec<u64> = specs
            .iter()
            .map(|spec| serde_json::to_string(spec).map_or(0, |json| json.len() as u64))
            .collect();
        let mut st = self.lock();
        let tenant = st
            .tenants
            .get(tenant_id)
            .ok_or_else(|| BrokerError::UnknownTenant(tenant_id.clone()))?;
        let cache_ns = tenant.cache_namespace().to_owned();
        let own = |key: &str| (tenant_id.clone(), key.to_owned());
        // Specs are planned as if submitted one after the other: a key repeated within this
        // call names the first task that carries it, and an identical request joins the task
        // an earlier spec of this call queued.
        let mut seen_keys: HashMap<&str, TaskId> = HashMap::new();
        let mut queued_here: HashMap<&str, TaskId> = HashMap::new();
        let mut plan: Vec<Plan> = Vec::with_capacity(specs.len());
        for (spec, cache_key) in specs.iter().zip(&cache_keys) {
            let key = spec.request.idempotency_key.as_deref();
            let existing = key.and_then(|k| {
                seen_keys
                    .get(k)
                    .or_else(|| {
                        st.idempotency
                            .get(&own(k))
                            .filter(|id| st.tasks.contains_key(id))
                    })
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
            } else if let Some((result, _)) =
                st.result_cache.get(&(cache_ns.clone(), cache_key.clone()))
            {
                Plan::Cached(TaskId::random(), Box::new(result.clone()))
            } else if let Some(id) = queued_here
                .get(cache_key.as_str())
                .or_else(|| st.in_flight(&own(cache_key)))
            {
                Plan::Coalesced(id.clone())
            } else {
                Plan::Fresh {
                    id: TaskId::random(),
                    looked_up: true,
                }
            };
            if let Plan::Fresh { id, .. } = &step {
                queued_here.insert(cache_key, id.clone());
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
        let fresh_bytes: u64 = plan
            .iter()
            .zip(&spec_bytes)
            .filter(|(p, _)| matches!(p, Plan::Fresh { .. }))
            .map(|(_, bytes)| bytes)
            .sum();
        if fresh > 0 {
            let queued = st.queues.queued(tenant_id);
            if let Some(max_queued) = tenant.max_queued
                && queued + fresh > max_queued
            {
                return Err(BrokerError::QuotaExceeded { queued, max_queued });
            }
            let queued = st.queues.total();
            if queued + fresh > self.cfg.queue_cap {
                return Err(BrokerError::QueueFull {
                    queued,
                    cap: self.cfg.queue_cap,
                });
            }
            if st.open_bytes + fresh_bytes > self.cfg.queue_cap_bytes {
                return Err(BrokerError::QueueBytesFull {
                    bytes: st.open_bytes,
                    cap_bytes: self.cfg.queue_cap_bytes,
                });
            }
        }

        if let Some(b) = batch_id {
            st.batches.insert(
                b.clone(),
                BatchRec {
                    tenant: tenant_id.clone(),
                    task_ids: plan.iter().map(|p| p.id().clone()).collect(),
                    counts: StatusCounts::default(),
                    finished: Vec::new(),
                    distinct: plan.iter().map(Plan::id).collect::<HashSet<_>>().len() as u64,
                },
            );
        }
        let now = Utc::now();
        let expires = Instant::now() + ttl;
        let mut created = 0;
        let mut out = Vec::with_capacity(plan.len());
        let mut logged = HashSet::new();
        for (((step, spec), cache_key), bytes) in
            plan.into_iter().zip(specs).zip(cache_keys).zip(spec_bytes)
        {
            let key: Option<TenantKey> = spec.request.idempotency_key.as_deref().map(own);
            let (id, status, deduplicated, coalesced, cached) = match step {
                Plan::Deduplicated(id) => {
                    let status = st.join(&id, batch_id)?;
                    (id, status, true, false, false)
                }
                Plan::Coalesced(id) => {
                    let status = st.join(&id, batch_id)?;
                    st.stats.coalesced += 1;
                    // A retry under this key finds the task it joined.
                    if let Some(k) = key {
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
                    if let Some(k) = key {
                        st.idempotency.insert(k, id.clone());
                    }
                    let mut rec =
                        TaskRec::new(spec, tenant_id, (cache_key, &cache_ns), batch_id, now);
                    rec.status = TaskStatus::Done;
                    rec.started_at = Some(now);
                    rec.finished_at = Some(now);
                    rec.result = Some(*result);
                    rec.cached = true;
                    st.tasks.insert(id.clone(), rec);
                    st.expiries.push_back((expires, Expiring::Task(id.clone())));
                    (id, TaskStatus::Done, false, false, true)
                }
                Plan::Fresh { id, looked_up } => {
                    if looked_up {
                        st.stats.cache_misses += 1;
                    }
                    created += 1;
                    if let Some(k) = key {
                        st.idempotency.insert(k, id.clone());
                    }
                    let mut rec =
                        TaskRec::new(spec, tenant_id, (cache_key, &cache_ns), batch_id, now);
                    rec.spec_bytes = bytes;
                    st.open_bytes += bytes;
                    // Under force_refresh too: later identical requests join this evaluation.
                    st.in_flight.insert(rec.flight_key(), id.clone());
                    rec.queue_order = st.queues.push_back(&rec.place(), id.clone());
                    st.tasks.insert(id.clone(), rec);
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

impl TaskRec {
    /// A queued task of `tenant` submitted at `now`, with its scoped cache key and its
    /// tenant's cache namespace.
    fn new(
        spec: TaskSpec,
        tenant: &TenantId,
        (cache_key, cache_ns): (String, &str),
        batch_id: Option<&BatchId>,
        now: DateTime<Utc>,
    ) -> Self {
        TaskRec {
            priority: spec.request.priority,
            idempotency_key: spec.request.idempotency_key.clone(),
            spec,
            status: TaskStatus::Queued,
            attempts: 0,
            worker_id: None,
            token: None,
            submitted_at: now,
            started_at: None,
            finished_at: None,
            result: None,
            error: None,
            batch_id: batch_id.cloned(),
            counted_in: batch_id.into_iter().cloned().collect(),
            tenant: tenant.clone(),
            cache_key,
            cache_ns: cache_ns.to_owned(),
            cached: false,
            queue_order: 0,
            spec_bytes: 0,
        }
    }
}
