//! The pure policy both brokers share, so the memory broker and the Redis one (with its Lua
//! scripts, which get these numbers from Rust) cannot drift apart: the order of claims, how
//! long silent workers are kept, how result cache keys are scoped, and what a cancelled task's
//! error says. No I/O, no state.

use crucible_shared::{BatchId, BrokerConfig, Priority, TaskId, TaskSpec};
use std::collections::HashSet;
use std::time::Duration;

/// The preferred queue of each claim in one turn of a tenant's weighted round robin over
/// priorities: in every 7 claims 4 prefer high, 2 normal and 1 low.
pub const CLAIM_CYCLE: [Priority; 7] = [
    Priority::High,
    Priority::Normal,
    Priority::High,
    Priority::Low,
    Priority::High,
    Priority::Normal,
    Priority::High,
];

/// How far one claim advances the pass of a tenant of weight 1. Passes are integers (exact in
/// Redis's double scores up to 2^53: billions of claims) and weights are at most 1000, so
/// every stride is at least 1048.
pub const PASS_SCALE: u64 = 1 << 20;

/// The pass advance of one claim by a tenant of `weight`.
pub fn stride(weight: u32) -> u64 {
    PASS_SCALE / u64::from(weight.max(1))
}

/// The order in which a tenant's claim number `seq` (counting its claims from 0) tries the
/// priorities: its preferred queue first, then the others from high to low.
pub fn claim_order(seq: u64) -> [Priority; 3] {
    let preferred = CLAIM_CYCLE[(seq % CLAIM_CYCLE.len() as u64) as usize];
    let mut order = [preferred; 3];
    let rest = Priority::ALL.into_iter().filter(|p| *p != preferred);
    for (slot, prio) in order[1..].iter_mut().zip(rest) {
        *slot = prio;
    }
    order
}

/// A priority's slot in per-priority arrays, highest first (the order of [`Priority::ALL`]).
pub fn queue_index(p: Priority) -> usize {
    match p {
        Priority::High => 0,
        Priority::Normal => 1,
        Priority::Low => 2,
    }
}

/// A worker silent for this many liveness windows is dropped from the registry.
pub const WORKER_RETENTION_FACTOR: u32 = 5;

/// How long a worker may stay silent before the registry forgets it.
pub fn worker_retention(liveness: Duration) -> Duration {
    liveness * WORKER_RETENTION_FACTOR
}

/// The result cache key qualified by the device class of this deployment; shared by both
/// brokers so their keys agree.
pub fn scoped_cache_key(cfg: &BrokerConfig, spec: &TaskSpec) -> String {
    format!("{}:{}", cfg.cache_scope, spec.request.result_cache_key())
}

/// The `error` of a task cancelled by `DELETE /tasks/{id}`.
pub const CANCELLED_BY_REQUEST: &str = "cancelled by request";

/// The `error` of a task cancelled with its batch (`DELETE /batches/{id}`).
pub fn batch_cancel_reason(batch: &BatchId) -> String {
    format!("{CANCELLED_BY_REQUEST} (batch {batch})")
}

/// A batch's tasks, each once, in submission order: identical requests in one batch share a
/// task, which a batch cancel counts (and cancels) once.
pub fn distinct_tasks(ids: impl IntoIterator<Item = TaskId>) -> Vec<TaskId> {
    let mut seen = HashSet::new();
    ids.into_iter()
        .filter(|id| seen.insert(id.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_counts_each_task_once_in_order() {
        let ids = ["t_b", "t_a", "t_b", "t_c", "t_a"].map(TaskId::from);
        assert_eq!(
            distinct_tasks(ids),
            ["t_b", "t_a", "t_c"].map(TaskId::from).to_vec()
        );
        assert_eq!(
            batch_cancel_reason(&BatchId::from("b_1")),
            "cancelled by request (batch b_1)"
        );
    }
}
