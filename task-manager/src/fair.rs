//! Who is served next: the rules both brokers follow when a worker claims a task.
//!
//! Across tenants, stride scheduling (a weighted round robin): every tenant with queued work
//! has a *pass*; a claim serves the tenant with the lowest pass (equal passes: the smaller
//! tenant id) and advances its pass by `policy::stride(weight)`, so a tenant of weight 2 is served
//! twice as often as one of weight 1, however many tasks each has queued. A tenant that
//! becomes active (its first queued task after none) starts at the lowest pass of the active
//! tenants, so time spent idle is never banked as credit; one whose queues ran empty leaves.
//!
//! Within a tenant, its claims walk `policy::CLAIM_CYCLE`: high before normal before low, but low
//! gets a guaranteed share so it never starves. Each tenant keeps its own place in the cycle.
//!
//! [`FairQueues`] is the memory broker's implementation; `lua/claim.lua` is the Redis one (it
//! gets `policy::CLAIM_CYCLE` and `policy::PASS_SCALE` from Rust, so the numbers live in
//! `policy` only).

use crate::policy::{claim_order, queue_index, stride};
use crucible_shared::{Priority, TaskId, TenantId};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

/// One tenant's queued tasks, by [`queue_index`].
#[derive(Default)]
struct Lane {
    queues: [VecDeque<TaskId>; 3],
    pass: u64,
}

impl Lane {
    fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }
}

/// Every queued task, by tenant and priority, and the order tenants are served in.
#[derive(Default)]
pub struct FairQueues {
    /// Tenants with a lane: every tenant with queued tasks, and tenants whose last tasks were
    /// cancelled until a claim finds their lane empty (as Redis keeps them in its active set).
    lanes: HashMap<TenantId, Lane>,
    /// (pass, tenant) of every lane; the first is served next.
    order: BTreeSet<(u64, TenantId)>,
    /// Claims served per tenant: its place in `policy::CLAIM_CYCLE`, kept while it is idle.
    served: HashMap<TenantId, u64>,
}

impl FairQueues {
    /// The tenant's lane, made (at the lowest pass of the active tenants) when it has none.
    fn lane(&mut self, tenant: &TenantId) -> &mut Lane {
        if !self.lanes.contains_key(tenant) {
            let pass = self.order.first().map_or(0, |(pass, _)| *pass);
            self.order.insert((pass, tenant.clone()));
            self.lanes.insert(
                tenant.clone(),
                Lane {
                    pass,
                    ..Lane::default()
                },
            );
        }
        self.lanes.get_mut(tenant).expect("inserted above")
    }

    /// A new task: at the back of its tenant's queue for `priority`.
    pub fn push_back(&mut self, tenant: &TenantId, priority: Priority, id: TaskId) {
        self.lane(tenant).queues[queue_index(priority)].push_back(id);
    }

    /// A task given back after a failed attempt: at the front (it has waited longest).
    pub fn push_front(&mut self, tenant: &TenantId, priority: Priority, id: TaskId) {
        self.lane(tenant).queues[queue_index(priority)].push_front(id);
    }

    /// Takes a cancelled task out of its queue.
    pub fn remove(&mut self, tenant: &TenantId, priority: Priority, id: &TaskId) {
        if let Some(lane) = self.lanes.get_mut(tenant) {
            lane.queues[queue_index(priority)].retain(|t| t != id);
        }
    }

    /// Takes every task of `ids` out of `tenant`'s queues in one pass over them (a batch
    /// cancel: one `remove` per task would walk the queues once per task).
    pub fn remove_all(&mut self, tenant: &TenantId, ids: &HashSet<TaskId>) {
        if let Some(lane) = self.lanes.get_mut(tenant) {
            for queue in &mut lane.queues {
                queue.retain(|t| !ids.contains(t));
            }
        }
    }

    /// The next task to claim and its tenant; `weight` gives each tenant's weight.
    pub fn pop(&mut self, weight: impl Fn(&TenantId) -> u32) -> Option<(TenantId, TaskId)> {
        while let Some((pass, tenant)) = self.order.pop_first() {
            let Some(lane) = self.lanes.get_mut(&tenant) else {
                continue;
            };
            let served = self.served.get(&tenant).copied().unwrap_or(0);
            let next = claim_order(served)
                .iter()
                .find_map(|p| lane.queues[queue_index(*p)].pop_front());
            let Some(id) = next else {
                // Emptied by cancellations: the tenant leaves until it queues again.
                self.lanes.remove(&tenant);
                continue;
            };
            *self.served.entry(tenant.clone()).or_default() += 1;
            if lane.len() == 0 {
                self.lanes.remove(&tenant);
            } else {
                lane.pass = pass + stride(weight(&tenant));
                self.order.insert((lane.pass, tenant.clone()));
            }
            return Some((tenant, id));
        }
        None
    }

    /// Takes every queued task of `tenant` out and forgets the tenant (it was deleted).
    pub fn drain(&mut self, tenant: &TenantId) -> Vec<TaskId> {
        self.served.remove(tenant);
        let Some(lane) = self.lanes.remove(tenant) else {
            return Vec::new();
        };
        self.order.remove(&(lane.pass, tenant.clone()));
        lane.queues.into_iter().flatten().collect()
    }

    /// Tasks `tenant` has queued.
    pub fn queued(&self, tenant: &TenantId) -> u64 {
        self.lanes.get(tenant).map_or(0, |l| l.len() as u64)
    }

    /// Queued tasks of every tenant by [`queue_index`].
    pub fn queued_by_priority(&self) -> [u64; 3] {
        let mut out = [0; 3];
        for lane in self.lanes.values() {
            for (n, q) in out.iter_mut().zip(&lane.queues) {
                *n += q.len() as u64;
            }
        }
        out
    }

    /// Every tenant's queued tasks.
    pub fn queued_by_tenant(&self) -> impl Iterator<Item = (&TenantId, u64)> {
        self.lanes.iter().map(|(t, lane)| (t, lane.len() as u64))
    }

    /// Queued tasks of every tenant, all priorities: what the queue cap is checked against.
    pub fn total(&self) -> u64 {
        self.queued_by_priority().iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_order_follows_the_cycle_with_fallback_by_priority() {
        use Priority::{High, Low, Normal};
        assert_eq!(claim_order(0), [High, Normal, Low]);
        assert_eq!(claim_order(1), [Normal, High, Low]);
        assert_eq!(claim_order(3), [Low, High, Normal]);
        assert_eq!(claim_order(7), claim_order(0));
    }

    #[test]
    fn every_window_of_seven_claims_prefers_each_priority_its_share() {
        for start in 0..14u64 {
            let firsts: Vec<Priority> = (start..start + 7).map(|s| claim_order(s)[0]).collect();
            let count = |p| firsts.iter().filter(|f| **f == p).count();
            assert_eq!(count(Priority::High), 4);
            assert_eq!(count(Priority::Normal), 2);
            assert_eq!(count(Priority::Low), 1);
        }
    }

    fn tenant(name: &str) -> TenantId {
        TenantId(format!("tn_{name}"))
    }

    fn fill(q: &mut FairQueues, t: &TenantId, n: usize) {
        for i in 0..n {
            q.push_back(t, Priority::Normal, TaskId(format!("{t}-{i}")));
        }
    }

    /// The tenants of the first `n` claims.
    fn served(q: &mut FairQueues, n: usize, weight: impl Fn(&TenantId) -> u32) -> Vec<TenantId> {
        (0..n)
            .map_while(|_| q.pop(&weight).map(|(t, _)| t))
            .collect()
    }

    #[test]
    fn a_small_tenant_is_not_starved_by_a_big_one() {
        let (a, b) = (tenant("a"), tenant("b"));
        let mut q = FairQueues::default();
        fill(&mut q, &a, 200);
        fill(&mut q, &b, 10);
        let order = served(&mut q, 210, |_| 1);
        let last_b = order.iter().rposition(|t| *t == b).unwrap();
        assert!(last_b < 20, "b's last task was claim {last_b}");
        assert_eq!(order.iter().filter(|t| **t == a).count(), 200);
        assert_eq!(q.total(), 0);
    }

    #[test]
    fn weights_divide_the_claims() {
        let (a, b) = (tenant("a"), tenant("b"));
        let mut q = FairQueues::default();
        fill(&mut q, &a, 100);
        fill(&mut q, &b, 100);
        let order = served(&mut q, 40, |t| if *t == a { 3 } else { 1 });
        assert_eq!(order.iter().filter(|t| **t == a).count(), 30);
    }

    #[test]
    fn an_idle_tenant_banks_no_credit() {
        let (a, b) = (tenant("a"), tenant("b"));
        let mut q = FairQueues::default();
        fill(&mut q, &a, 50);
        served(&mut q, 30, |_| 1);
        // b arrives after a was served 30 times: it starts level with a, not 30 claims ahead.
        fill(&mut q, &b, 50);
        let order = served(&mut q, 10, |_| 1);
        assert_eq!(order.iter().filter(|t| **t == b).count(), 5, "{order:?}");
    }

    #[test]
    fn priorities_apply_within_each_tenant() {
        let a = tenant("a");
        let mut q = FairQueues::default();
        q.push_back(&a, Priority::Low, TaskId::from("low"));
        q.push_back(&a, Priority::High, TaskId::from("high"));
        q.push_back(&a, Priority::Normal, TaskId::from("normal"));
        let ids: Vec<String> = (0..3).map(|_| q.pop(|_| 1).unwrap().1.0).collect();
        assert_eq!(ids, ["high", "normal", "low"]);
    }

    #[test]
    fn cancelled_and_drained_tasks_leave_the_queues() {
        let (a, b) = (tenant("a"), tenant("b"));
        let mut q = FairQueues::default();
        q.push_back(&a, Priority::Normal, TaskId::from("a1"));
        q.push_back(&b, Priority::Normal, TaskId::from("b1"));
        q.push_back(&b, Priority::Low, TaskId::from("b2"));
        q.push_back(&a, Priority::High, TaskId::from("a2"));
        q.push_back(&a, Priority::Low, TaskId::from("a3"));
        q.push_back(&a, Priority::Low, TaskId::from("a4"));
        q.remove(&a, Priority::Normal, &TaskId::from("a1"));
        let batch: HashSet<TaskId> = ["a2", "a4", "b1"].map(TaskId::from).into();
        q.remove_all(&a, &batch);
        assert_eq!((q.queued(&a), q.queued(&b)), (1, 2));
        assert_eq!(q.pop(|_| 1).map(|(_, id)| id.0), Some("a3".to_owned()));
        let drained = q.drain(&b);
        assert_eq!(drained.len(), 2);
        assert_eq!(q.pop(|_| 1), None);
        assert_eq!(q.queued_by_priority(), [0, 0, 0]);
    }
}
