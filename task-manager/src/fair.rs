//! Who is served next: the rules both brokers follow when a worker claims a task.
//!
//! A worker claims for its device class: it may take the tasks of its class and those of no
//! class (`queue:{class}:...` and `queue:any:...` in Redis). Each class's workers share their
//! claims among tenants by stride scheduling (a weighted round robin), each class keeping its
//! own passes: every tenant with work for the class (tasks of the class, or of no class) has a
//! *pass*; a claim serves the tenant with the lowest pass (equal passes: the smaller tenant id)
//! and advances its pass by `policy::stride(weight)`, so a tenant of weight 2 is served twice
//! as often as one of weight 1, however many tasks each has queued. A tenant that becomes
//! active (its first task the class may take, after none) starts at the lowest pass of the
//! class's active tenants, so time spent idle is never banked as credit; one whose queues ran
//! empty for the class leaves. A tenant with tasks of no class joins a class's share at that
//! class's next claim: passes only move at claims, so that is as if it had joined at
//! submission. Per-class passes keep one pool's fairness from depending on another's: a
//! tenant's heavy use of the h100s costs it nothing on the a100s.
//!
//! Within a tenant, a class's claims walk `policy::CLAIM_CYCLE`: high before normal before
//! low, but low gets a guaranteed share so it never starves; each (class, tenant) keeps its own
//! place in the cycle. Within one priority the tenant's task of the class and its task of no
//! class that was queued first is served first, as if they were one FIFO.
//!
//! [`FairQueues`] is the memory broker's implementation; `lua/claim.lua` is the Redis one (it
//! gets `policy::CLAIM_CYCLE` and `policy::PASS_SCALE` from Rust, so the numbers live in
//! `policy` only).

use crate::policy::{claim_order, queue_index, stride};
use crucible_shared::{DeviceClass, Priority, QueuedByClass, TaskId, TenantId};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

/// Where a queued task waits: its tenant's lane, the class it must run on (`None`: any
/// worker) and its priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Who submitted it.
    pub tenant: TenantId,
    /// The device class it must run on; `None` for any.
    pub class: Option<DeviceClass>,
    /// Its queue priority.
    pub priority: Priority,
}

/// One priority's queue: (queue order, task), the order telling which of two queues' heads was
/// queued first.
type Fifo = VecDeque<(u64, TaskId)>;

/// One tenant's queued tasks, by the class they must run on and [`queue_index`].
#[derive(Default)]
struct Lane {
    queues: BTreeMap<Option<DeviceClass>, [Fifo; 3]>,
}

impl Lane {
    fn len(&self) -> usize {
        self.queues.values().flatten().map(VecDeque::len).sum()
    }

    /// Tasks a worker of `class` may take.
    fn len_for(&self, class: &DeviceClass) -> usize {
        [Some(class.clone()), None]
            .iter()
            .filter_map(|c| self.queues.get(c))
            .flatten()
            .map(VecDeque::len)
            .sum()
    }

    fn has_unclassed(&self) -> bool {
        self.queues
            .get(&None)
            .is_some_and(|q| q.iter().any(|f| !f.is_empty()))
    }

    fn fifo(&mut self, class: Option<&DeviceClass>, priority: Priority) -> &mut Fifo {
        let queues = self.queues.entry(class.cloned()).or_default();
        &mut queues[queue_index(priority)]
    }

    /// The task of `class` or of no class at `priority` that was queued first, taken out.
    fn pop_for(&mut self, class: &DeviceClass, priority: Priority) -> Option<TaskId> {
        let head = |q: &BTreeMap<Option<DeviceClass>, [Fifo; 3]>, c: Option<DeviceClass>| {
            q.get(&c)
                .and_then(|f| f[queue_index(priority)].front())
                .map(|(order, _)| (*order, c))
        };
        let own = head(&self.queues, Some(class.clone()));
        let any = head(&self.queues, None);
        let (_, from) = match (own, any) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return None,
        };
        let fifo = self.fifo(from.as_ref(), priority);
        fifo.pop_front().map(|(_, id)| id)
    }
}

/// One class's fair share: the pass of every tenant it serves.
#[derive(Default)]
struct Share {
    /// (pass, tenant) of every active tenant; the first is served next.
    order: BTreeSet<(u64, TenantId)>,
    pass: HashMap<TenantId, u64>,
}

impl Share {
    /// `tenant` joins at the lowest pass of the active tenants, unless it is active already.
    fn activate(&mut self, tenant: &TenantId) {
        if self.pass.contains_key(tenant) {
            return;
        }
        let pass = self.order.first().map_or(0, |(pass, _)| *pass);
        self.order.insert((pass, tenant.clone()));
        self.pass.insert(tenant.clone(), pass);
    }

    fn leave(&mut self, tenant: &TenantId) {
        if let Some(pass) = self.pass.remove(tenant) {
            self.order.remove(&(pass, tenant.clone()));
        }
    }

    fn advance(&mut self, tenant: &TenantId, to: u64) {
        self.leave(tenant);
        self.order.insert((to, tenant.clone()));
        self.pass.insert(tenant.clone(), to);
    }
}

/// Every queued task, by tenant, class and priority, and the order each class's workers serve
/// tenants in.
#[derive(Default)]
pub struct FairQueues {
    /// Queued tasks per tenant; a lane is dropped when its last task leaves.
    lanes: HashMap<TenantId, Lane>,
    /// Each claiming class's share. A tenant stays in it until a claim of the class finds no
    /// task of it left (as Redis keeps it in `active:{class}`).
    shares: HashMap<DeviceClass, Share>,
    /// Claims served per (class, tenant): its place in `policy::CLAIM_CYCLE`, kept while idle.
    served: HashMap<(DeviceClass, TenantId), u64>,
    /// The queue order of the next new task.
    next_order: u64,
}

impl FairQueues {
    /// A new task: at the back of its queue. Returns its queue order, which a requeue gives
    /// back to [`FairQueues::push_front`].
    pub fn push_back(&mut self, place: &Place, id: TaskId) -> u64 {
        let order = self.next_order;
        self.next_order += 1;
        self.enter(place).push_back((order, id));
        order
    }

    /// A task given back after a failed attempt: at the front (it has waited longest), with
    /// the queue order it was first given.
    pub fn push_front(&mut self, place: &Place, order: u64, id: TaskId) {
        self.enter(place).push_front((order, id));
    }

    /// The queue of `place`; a task of a class makes its tenant active in that class's share
    /// at once (tasks of no class, at each class's next claim).
    fn enter(&mut self, place: &Place) -> &mut Fifo {
        if let Some(class) = &place.class {
            self.shares
                .entry(class.clone())
                .or_default()
                .activate(&place.tenant);
        }
        let lane = self.lanes.entry(place.tenant.clone()).or_default();
        lane.fifo(place.class.as_ref(), place.priority)
    }

    /// Takes a cancelled task out of its queue.
    pub fn remove(&mut self, place: &Place, id: &TaskId) {
        if let Some(lane) = self.lanes.get_mut(&place.tenant) {
            lane.fifo(place.class.as_ref(), place.priority)
                .retain(|(_, t)| t != id);
            if lane.len() == 0 {
                self.lanes.remove(&place.tenant);
            }
        }
    }

    /// Takes every task of `ids` out of `tenant`'s queues in one pass over them (a batch
    /// cancel: one `remove` per task would walk the queues once per task).
    pub fn remove_all(&mut self, tenant: &TenantId, ids: &HashSet<TaskId>) {
        if let Some(lane) = self.lanes.get_mut(tenant) {
            for queue in lane.queues.values_mut().flatten() {
                queue.retain(|(_, t)| !ids.contains(t));
            }
            if lane.len() == 0 {
                self.lanes.remove(tenant);
            }
        }
    }

    /// The next task a worker of `class` claims, and its tenant; `weight` gives each tenant's
    /// weight.
    pub fn pop(
        &mut self,
        class: &DeviceClass,
        weight: impl Fn(&TenantId) -> u32,
    ) -> Option<(TenantId, TaskId)> {
        let share = self.shares.entry(class.clone()).or_default();
        for (tenant, lane) in &self.lanes {
            if lane.has_unclassed() {
                share.activate(tenant);
            }
        }
        while let Some((pass, tenant)) = share.order.first().cloned() {
            let Some(lane) = self.lanes.get_mut(&tenant) else {
                share.leave(&tenant);
                continue;
            };
            let served = self
                .served
                .entry((class.clone(), tenant.clone()))
                .or_default();
            let next = claim_order(*served)
                .iter()
                .find_map(|p| lane.pop_for(class, *p));
            let Some(id) = next else {
                // Emptied by cancellations or by other classes: it leaves until it has work
                // for this class again.
                share.leave(&tenant);
                continue;
            };
            *served += 1;
            if lane.len_for(class) == 0 {
                share.leave(&tenant);
            } else {
                share.advance(&tenant, pass + stride(weight(&tenant)));
            }
            if lane.len() == 0 {
                self.lanes.remove(&tenant);
            }
            return Some((tenant, id));
        }
        None
    }

    /// Takes every queued task of `tenant` out and forgets the tenant (it was deleted).
    pub fn drain(&mut self, tenant: &TenantId) -> Vec<TaskId> {
        self.served.retain(|(_, t), _| t != tenant);
        for share in self.shares.values_mut() {
            share.leave(tenant);
        }
        let Some(lane) = self.lanes.remove(tenant) else {
            return Vec::new();
        };
        lane.queues
            .into_values()
            .flatten()
            .flatten()
            .map(|(_, id)| id)
            .collect()
    }

    /// Tasks `tenant` has queued.
    pub fn queued(&self, tenant: &TenantId) -> u64 {
        self.lanes.get(tenant).map_or(0, |l| l.len() as u64)
    }

    /// Queued tasks of every tenant by [`queue_index`].
    pub fn queued_by_priority(&self) -> [u64; 3] {
        let mut out = [0; 3];
        for queues in self.lanes.values().flat_map(|l| l.queues.values()) {
            for (n, q) in out.iter_mut().zip(queues) {
                *n += q.len() as u64;
            }
        }
        out
    }

    /// Queued tasks of every tenant by the class they must run on.
    pub fn queued_by_class(&self) -> QueuedByClass {
        let mut out = QueuedByClass::new();
        for (class, queues) in self.lanes.values().flat_map(|l| &l.queues) {
            *out.entry(class.clone()).or_default() +=
                queues.iter().map(|q| q.len() as u64).sum::<u64>();
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

    fn class(name: &str) -> DeviceClass {
        DeviceClass::parse(name).unwrap()
    }

    fn place(t: &TenantId, class: Option<&str>, priority: Priority) -> Place {
        Place {
            tenant: t.clone(),
            class: class.map(self::class),
            priority,
        }
    }

    fn fill(q: &mut FairQueues, t: &TenantId, n: usize) {
        fill_class(q, t, None, n);
    }

    fn fill_class(q: &mut FairQueues, t: &TenantId, class: Option<&str>, n: usize) {
        for i in 0..n {
            let id = TaskId(format!("{t}-{}-{i}", class.unwrap_or("any")));
            q.push_back(&place(t, class, Priority::Normal), id);
        }
    }

    /// The tenants of the first `n` claims of an h100 worker.
    fn served(q: &mut FairQueues, n: usize, weight: impl Fn(&TenantId) -> u32) -> Vec<TenantId> {
        served_on(q, "h100", n, weight)
    }

    /// The tenants of the first `n` claims of a worker of `class`.
    fn served_on(
        q: &mut FairQueues,
        class: &str,
        n: usize,
        weight: impl Fn(&TenantId) -> u32,
    ) -> Vec<TenantId> {
        (0..n)
            .map_while(|_| q.pop(&self::class(class), &weight).map(|(t, _)| t))
            .collect()
    }

    fn pop(q: &mut FairQueues, class: &str) -> Option<String> {
        q.pop(&self::class(class), |_| 1).map(|(_, id)| id.0)
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
        q.push_back(&place(&a, None, Priority::Low), TaskId::from("low"));
        q.push_back(&place(&a, None, Priority::High), TaskId::from("high"));
        q.push_back(&place(&a, None, Priority::Normal), TaskId::from("normal"));
        let ids: Vec<String> = (0..3).map(|_| pop(&mut q, "cpu").unwrap()).collect();
        assert_eq!(ids, ["high", "normal", "low"]);
    }

    #[test]
    fn cancelled_and_drained_tasks_leave_the_queues() {
        let (a, b) = (tenant("a"), tenant("b"));
        let mut q = FairQueues::default();
        q.push_back(&place(&a, None, Priority::Normal), TaskId::from("a1"));
        q.push_back(&place(&b, None, Priority::Normal), TaskId::from("b1"));
        q.push_back(&place(&b, Some("h100"), Priority::Low), TaskId::from("b2"));
        q.remove(&place(&a, None, Priority::Normal), &TaskId::from("a1"));
        assert_eq!((q.queued(&a), q.queued(&b)), (0, 2));
        q.push_back(&place(&a, None, Priority::High), TaskId::from("a2"));
        q.push_back(&place(&a, Some("h100"), Priority::Low), TaskId::from("a3"));
        q.push_back(&place(&a, None, Priority::Low), TaskId::from("a4"));
        let batch: HashSet<TaskId> = ["a2", "a4", "b1"].map(TaskId::from).into();
        q.remove_all(&a, &batch);
        assert_eq!(
            (q.queued(&a), q.queued(&b)),
            (1, 2),
            "b1 is not a's to remove"
        );
        assert_eq!(pop(&mut q, "h100"), Some("a3".to_owned()));
        let drained = q.drain(&b);
        assert_eq!(drained.len(), 2);
        assert_eq!(pop(&mut q, "h100"), None);
        assert_eq!(q.queued_by_priority(), [0, 0, 0]);
        assert!(q.queued_by_class().values().all(|n| *n == 0));
    }

    #[test]
    fn a_worker_takes_its_class_and_no_class_only() {
        let a = tenant("a");
        let mut q = FairQueues::default();
        q.push_back(
            &place(&a, Some("h100"), Priority::Normal),
            TaskId::from("h"),
        );
        q.push_back(&place(&a, Some("a100"), Priority::High), TaskId::from("x"));
        q.push_back(&place(&a, None, Priority::Normal), TaskId::from("any"));
        assert_eq!(
            q.queued_by_class(),
            [
                (None, 1),
                (Some(class("a100")), 1),
                (Some(class("h100")), 1)
            ]
            .into()
        );
        // Within a priority, the one queued first, whichever queue it is in.
        assert_eq!(pop(&mut q, "h100").as_deref(), Some("h"));
        assert_eq!(pop(&mut q, "h100").as_deref(), Some("any"));
        assert_eq!(pop(&mut q, "h100"), None);
        assert_eq!(pop(&mut q, "cpu"), None);
        assert_eq!(pop(&mut q, "a100").as_deref(), Some("x"));
    }

    #[test]
    fn a_requeued_task_keeps_its_place_before_later_ones() {
        let a = tenant("a");
        let mut q = FairQueues::default();
        let first = q.push_back(&place(&a, None, Priority::Normal), TaskId::from("first"));
        q.push_back(
            &place(&a, Some("h100"), Priority::Normal),
            TaskId::from("later"),
        );
        assert_eq!(pop(&mut q, "h100").as_deref(), Some("first"));
        q.push_front(
            &place(&a, None, Priority::Normal),
            first,
            TaskId::from("first"),
        );
        assert_eq!(pop(&mut q, "h100").as_deref(), Some("first"));
    }

    #[test]
    fn each_class_shares_its_claims_fairly() {
        let (a, b) = (tenant("a"), tenant("b"));
        let mut q = FairQueues::default();
        // a keeps the h100s busy; that costs it nothing on the cpu workers.
        fill_class(&mut q, &a, Some("h100"), 100);
        served_on(&mut q, "h100", 50, |_| 1);
        fill_class(&mut q, &a, Some("cpu"), 10);
        fill_class(&mut q, &b, Some("cpu"), 10);
        let order = served_on(&mut q, "cpu", 10, |_| 1);
        assert_eq!(order.iter().filter(|t| **t == a).count(), 5, "{order:?}");
        // Tasks of no class share a class's claims with the class's own.
        fill(&mut q, &b, 20);
        let order = served_on(&mut q, "h100", 20, |_| 1);
        assert_eq!(order.iter().filter(|t| **t == b).count(), 10, "{order:?}");
    }
}
