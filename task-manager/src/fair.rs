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
mod tests;
