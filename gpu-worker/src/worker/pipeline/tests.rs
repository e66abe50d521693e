use super::*;
use crate::child::supervisor::{self, GateChild};

/// Lines the worker sent through a child's gate since the last call (read from the child's
/// end without blocking): each opening is one line.
fn opened(child: &GateChild) -> usize {
    let fd = child.read_end();
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).unwrap();
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
    let mut buf = [0u8; 4096];
    let n = nix::unistd::read(fd, &mut buf).unwrap_or(0);
    buf[..n].iter().filter(|b| **b == b'\n').count()
}

fn id(name: &str) -> TaskId {
    TaskId(format!("t_{name}"))
}

fn child(device: &mut DevicePipeline, id: &TaskId) -> GateChild {
    let (gate, child) = supervisor::gate(|_| {}).unwrap();
    let spec = TaskSpec::new(crucible_shared::EvaluateRequest::new("ref", "cand"), 1);
    device.add(id.clone(), gate, CancellationToken::new(), spec, false);
    child
}

/// What the run loop does after every event: let go whoever may go, then open what may open.
fn settle(device: &mut DevicePipeline) {
    while let Some((id, _)) = device.next_to_go() {
        device.go(&id, None);
    }
    device.advance();
}

fn stage(device: &mut DevicePipeline, id: &TaskId, s: &str) {
    let s = Stage::parse(s).expect("a stage the harness sends");
    device.on_event(id, ChildEvent::Stage(s));
    settle(device);
}

fn park(device: &mut DevicePipeline, id: &TaskId) {
    device.on_event(id, ChildEvent::Park);
    settle(device);
}

/// A child forked, set up, let go and at work.
fn working(device: &mut DevicePipeline, name: &str) -> (TaskId, GateChild) {
    let t = id(name);
    let gate = child(device, &t);
    settle(device);
    stage(device, &t, "standby");
    stage(device, &t, "load_candidate");
    assert_eq!(opened(&gate), 1, "{name} was let go");
    (t, gate)
}

#[test]
fn one_slot_runs_one_child_and_sets_the_next_up_while_the_last_exits() {
    let mut device = DevicePipeline::new(1, None);
    assert!(device.has_room(false), "an empty device always has room");
    let (a, a_gate) = working(&mut device, "a");
    assert_eq!(device.active(), Some(&a));
    assert!(!device.has_room(true), "one slot: no second child at work");
    stage(&mut device, &a, "correctness");
    park(&mut device, &a);
    assert_eq!(
        opened(&a_gate),
        1,
        "nobody times: a parked child goes on at once"
    );

    // Alone, `a` times at once.
    stage(&mut device, &a, "timing_gate");
    assert_eq!(opened(&a_gate), 1);

    // `a` reported: the next child sets up while `a` exits, and goes once `a` is gone.
    device.on_event(&a, ChildEvent::Result);
    assert!(device.has_room(true) && !device.has_room(false));
    let b = id("b");
    let b_gate = child(&mut device, &b);
    stage(&mut device, &b, "standby");
    assert_eq!(opened(&b_gate), 0, "a is still exiting");
    let timing = device.ended(&a);
    assert!(timing.forked.is_some() && timing.go.is_some() && timing.result.is_some());
    settle(&mut device);
    assert_eq!(device.active(), Some(&b));
    assert_eq!(opened(&b_gate), 1);
}

#[test]
fn a_child_times_only_when_every_other_child_is_parked_and_the_others_wait_for_it() {
    let mut device = DevicePipeline::new(3, None);
    let (a, a_gate) = working(&mut device, "a");
    assert!(device.has_room(true));
    let (b, b_gate) = working(&mut device, "b");
    let c = id("c");
    let c_gate = child(&mut device, &c);
    settle(&mut device);
    assert!(!device.has_room(true), "three slots taken");

    // A free slot: `c` is let go before it has even set up.
    assert_eq!(opened(&c_gate), 1);

    // `a` asks to time while `b` works and `c` sets up: it waits, and nothing new starts.
    stage(&mut device, &a, "timing_gate");
    assert_eq!(opened(&a_gate), 0, "b and c are at work");
    assert!(
        !device.has_room(true),
        "nobody is forked while a timing is pending"
    );
    stage(&mut device, &c, "standby");
    stage(&mut device, &c, "load_candidate");
    park(&mut device, &b);
    assert_eq!(opened(&a_gate), 0, "c is still at work");
    // `c` parks at its next device step: now `a` is alone.
    park(&mut device, &c);
    assert_eq!(opened(&a_gate), 1, "every other child is blocked: a times");
    assert_eq!(
        opened(&b_gate) + opened(&c_gate),
        0,
        "b and c stay parked while a times"
    );
    assert!(device.timing_now());

    // The judge names its `performance` stage as soon as it is let through: the timing goes
    // on, the others stay parked (before, this line ended the timing at once and a neighbour
    // worked beside every timing).
    stage(&mut device, &a, "performance");
    assert!(device.timing_now(), "a still times");
    assert_eq!(opened(&b_gate), 0, "b stays parked while a times");
    assert_eq!(opened(&c_gate), 0, "c stays parked while a times");

    // `a`'s timing ends with its next stage: the others go on.
    stage(&mut device, &a, "integrity");
    assert!(!device.timing_now());
    assert_eq!(opened(&b_gate), 1, "b goes on");
    assert_eq!(opened(&c_gate), 1, "c goes on");

    // `a`'s timing window is kept for the log; `b` never timed.
    device.on_event(&a, ChildEvent::Result);
    let timing = device.ended(&a);
    let (from, until) = (timing.timed_from.unwrap(), timing.timed_until.unwrap());
    assert!(from <= until);
    let timing = device.ended(&b);
    assert!(timing.timed_from.is_none() && timing.timed_until.is_none());
}

#[test]
fn a_timing_ended_by_the_childs_result_closes_its_window() {
    let mut device = DevicePipeline::new(1, None);
    let (a, _gate) = working(&mut device, "a");
    stage(&mut device, &a, "timing_gate");
    assert!(device.timing_now());
    device.on_event(&a, ChildEvent::Result);
    let timing = device.ended(&a);
    assert!(timing.timed_from.is_some() && timing.timed_until.is_some());
}

/// The judge parks right after timing, before `integrity`: the window closes there (it used
/// to stay open, so no `timing window` line was logged and scale.py's overlap check saw none).
#[test]
fn a_timing_ended_by_a_park_closes_its_window() {
    let mut device = DevicePipeline::new(1, None);
    let (a, _gate) = working(&mut device, "a");
    stage(&mut device, &a, "timing_gate");
    stage(&mut device, &a, "performance");
    assert!(device.timing_now());
    park(&mut device, &a);
    assert!(!device.timing_now());
    stage(&mut device, &a, "integrity");
    device.on_event(&a, ChildEvent::Result);
    let timing = device.ended(&a);
    let (from, until) = (timing.timed_from.unwrap(), timing.timed_until.unwrap());
    assert!(from <= until);
}

#[test]
fn a_child_on_standby_is_not_let_go_while_a_timing_is_pending() {
    let mut device = DevicePipeline::new(2, None);
    let (a, a_gate) = working(&mut device, "a");
    stage(&mut device, &a, "timing_gate");
    assert_eq!(opened(&a_gate), 1, "alone: a times at once");
    // Forked before: a slot was free and nothing was timing (the run loop forks only then).
    let b = id("b");
    let b_gate = child(&mut device, &b);
    device.on_event(&b, ChildEvent::Stage(Stage::Standby));
    device.advance();
    assert_eq!(opened(&b_gate), 0, "a is timing");
    stage(&mut device, &a, "integrity");
    assert_eq!(opened(&b_gate), 1, "let go once a has timed");
}

#[test]
fn the_longest_waiting_timer_goes_first() {
    let mut device = DevicePipeline::new(3, None);
    let (a, a_gate) = working(&mut device, "a");
    let (b, b_gate) = working(&mut device, "b");
    let (c, c_gate) = working(&mut device, "c");
    stage(&mut device, &b, "timing_gate");
    stage(&mut device, &a, "timing_gate");
    assert_eq!(opened(&b_gate) + opened(&a_gate), 0, "c is at work");
    park(&mut device, &c);
    assert_eq!(opened(&b_gate), 1, "b asked first");
    assert_eq!(opened(&a_gate), 0);
    device.on_event(&b, ChildEvent::Result);
    settle(&mut device);
    assert_eq!(opened(&a_gate), 0, "b is still exiting");
    device.ended(&b);
    settle(&mut device);
    assert_eq!(opened(&a_gate), 1, "then a");
    assert_eq!(opened(&c_gate), 0, "c waits for a");
}

#[test]
fn a_dead_child_releases_the_gate() {
    let mut device = DevicePipeline::new(2, None);
    let (a, a_gate) = working(&mut device, "a");
    let (b, _b_gate) = working(&mut device, "b");
    stage(&mut device, &a, "timing_gate");
    assert_eq!(opened(&a_gate), 0, "b is at work");
    // `b` dies in the middle of a device step (no result line): its task's end forgets it.
    device.ended(&b);
    settle(&mut device);
    assert_eq!(opened(&a_gate), 1, "a times once b is gone");
}

#[test]
fn a_held_device_opens_nothing_until_released() {
    let mut device = DevicePipeline::new(2, None);
    let (a, a_gate) = working(&mut device, "a");
    device.hold(true);
    assert!(!device.has_room(true));
    park(&mut device, &a);
    assert_eq!(opened(&a_gate), 0, "held: the parked child waits");
    device.hold(false);
    settle(&mut device);
    assert_eq!(opened(&a_gate), 1);
}

#[test]
fn a_retried_task_runs_alone() {
    let mut device = DevicePipeline::new(4, None);
    let (a, _a_gate) = working(&mut device, "a");
    let r = id("r");
    let (gate, r_gate) = supervisor::gate(|_| {}).unwrap();
    let spec = TaskSpec::new(crucible_shared::EvaluateRequest::new("ref", "cand"), 1);
    device.add(r.clone(), gate, CancellationToken::new(), spec, true);
    stage(&mut device, &r, "standby");
    assert_eq!(opened(&r_gate), 0, "a is on the device");
    assert!(
        !device.has_room(true),
        "nobody joins a child that runs alone"
    );
    device.on_event(&a, ChildEvent::Result);
    settle(&mut device);
    assert_eq!(opened(&r_gate), 0, "a is still exiting");
    let timing = device.ended(&a);
    assert!(timing.crowded, "a shared the device with r");
    settle(&mut device);
    assert_eq!(opened(&r_gate), 1, "alone now");
    assert!(!device.has_room(true));
    assert!(!device.ended(&r).crowded);
}

/// A child forked that reports `footprint` GiB and reaches standby.
fn sized(device: &mut DevicePipeline, name: &str, footprint_gib: u64) -> (TaskId, GateChild) {
    let t = id(name);
    let gate = child(device, &t);
    settle(device);
    device.on_event(&t, ChildEvent::Footprint(footprint_gib << 30));
    stage(device, &t, "standby");
    (t, gate)
}

#[test]
fn children_go_while_their_footprints_fit_the_device_in_the_order_they_came() {
    // 80 GiB: a budget of 72 GiB, each child 2 GiB of contexts beside its tensors.
    let mut device = DevicePipeline::new(4, Some(80 << 30));
    assert_eq!(memory_budget(80 << 30), 72 << 30);
    let (a, a_gate) = sized(&mut device, "a", 36);
    assert_eq!(opened(&a_gate), 1, "the first child goes whatever its size");
    // b (36 GiB) does not fit beside a (38 + 2 + 36 = 76 > 72): it waits, and c (small,
    // forked after it) waits behind it rather than passing it.
    let (_b, b_gate) = sized(&mut device, "b", 36);
    let (_c, c_gate) = sized(&mut device, "c", 1);
    assert_eq!((opened(&b_gate), opened(&c_gate)), (0, 0));
    // Once a is gone, b goes, and c fits beside it (38 + 2 + 2 + 1 = 43).
    device.on_event(&a, ChildEvent::Result);
    settle(&mut device);
    assert_eq!(
        opened(&b_gate),
        0,
        "a still holds its memory while it exits"
    );
    device.ended(&a);
    settle(&mut device);
    assert_eq!((opened(&b_gate), opened(&c_gate)), (1, 1));
    // A fourth child larger than the device goes only alone.
    let (_d, d_gate) = sized(&mut device, "d", 100);
    assert_eq!(opened(&d_gate), 0);
}

#[test]
fn a_child_that_has_not_reported_its_footprint_waits_for_it_and_one_without_counts_a_share() {
    let mut device = DevicePipeline::new(4, Some(80 << 30));
    let (_a, a_gate) = sized(&mut device, "a", 40);
    assert_eq!(opened(&a_gate), 1);
    // b is still setting up: unknown, it is not let go early beside a.
    let b = id("b");
    let b_gate = child(&mut device, &b);
    settle(&mut device);
    assert_eq!(opened(&b_gate), 0);
    // At standby with no report (its reference could not be sized): a slot's share, 18 GiB,
    // fits beside a (42 + 2 + 18 = 62).
    stage(&mut device, &b, "standby");
    assert_eq!(opened(&b_gate), 1);
    // A report after it was let go changes nothing; c's 10 GiB would fit beside a and b
    // (42 + 20 + 12 = 74 > 72): it does not.
    device.on_event(&b, ChildEvent::Footprint(0));
    let (_c, c_gate) = sized(&mut device, "c", 10);
    assert_eq!(opened(&c_gate), 0);
}

#[test]
fn nobody_joins_a_child_let_go_before_it_reported_until_it_does() {
    let mut device = DevicePipeline::new(4, Some(80 << 30));
    // a is let go at once, while it is still setting up, and goes on through its stages
    // before standby.
    let a = id("a");
    let a_gate = child(&mut device, &a);
    settle(&mut device);
    assert_eq!(opened(&a_gate), 1);
    stage(&mut device, &a, "setup");
    stage(&mut device, &a, "load_reference");
    let (_b, b_gate) = sized(&mut device, "b", 1);
    assert_eq!(opened(&b_gate), 0, "a's size is unknown");
    device.on_event(&a, ChildEvent::Footprint(70 << 30));
    settle(&mut device);
    assert_eq!(opened(&b_gate), 0, "72 + 2 + 1 > 72");
    let (_c, _) = sized(&mut device, "c", 1);
    let a_end = device.ended(&a);
    assert!(a_end.go.is_some());
    settle(&mut device);
    assert_eq!(opened(&b_gate), 1, "a gone: b goes, its size known");
}

#[test]
fn without_a_known_memory_children_go_by_slots_alone() {
    let mut device = DevicePipeline::new(2, None);
    let (_a, a_gate) = sized(&mut device, "a", 500);
    let (_b, b_gate) = sized(&mut device, "b", 500);
    assert_eq!((opened(&a_gate), opened(&b_gate)), (1, 1));
}

/// The worker takes its lent cores back (`before_timing`) only when a timing's gate is about
/// to open: once per timing, before the opening, and not for any other gate.
#[test]
fn before_timing_runs_once_a_timing_just_before_its_gate_opens() {
    let mut device = DevicePipeline::new(2, None);
    let (a, a_gate) = working(&mut device, "a");
    let (b, b_gate) = working(&mut device, "b");
    let mut calls = 0;
    stage(&mut device, &a, "timing_gate");
    device.advance_with(|| calls += 1);
    assert_eq!(calls, 0, "b is at work: a does not time yet");
    device.on_event(&b, ChildEvent::Park);
    let mut opened_before = None;
    device.advance_with(|| {
        calls += 1;
        opened_before = Some(opened(&a_gate));
    });
    assert_eq!(
        (calls, opened_before),
        (1, Some(0)),
        "called before a's gate opened"
    );
    assert_eq!(opened(&a_gate), 1, "then a times");
    device.advance_with(|| calls += 1);
    assert_eq!(calls, 1, "a is timing: no second call");
    stage(&mut device, &a, "integrity");
    assert!(!device.timing_now());
    assert_eq!(opened(&b_gate), 1, "b's park opened without a call");
    assert_eq!(calls, 1);
}
