//! The fair queues' rules, checked in process (the contract suite checks both brokers).

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
