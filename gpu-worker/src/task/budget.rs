//! A task's `timeout_s` is one wall-clock budget for the whole task, its CPU stage and its
//! device stage together: the CPU stage's child gets all of it, the device stage's child only
//! what the CPU stage left. What a task waits for on the worker's side (the broker's queue, a
//! template warming up, a compile slot, its turn on the device) is not charged to it: the
//! budget counts the time its own children run. Pure arithmetic, so the rule is tested here.

use crucible_shared::TaskSpec;
use std::time::Duration;

/// The task's whole budget, `timeout_s`.
pub fn task_budget(spec: &TaskSpec) -> Duration {
    Duration::from_secs(u64::from(spec.request.timeout_s))
}

/// What remains of `budget` after a stage that used `used`; `None` when nothing does (the task
/// then ends as a child killed at its deadline would).
pub fn remaining(budget: Duration, used: Duration) -> Option<Duration> {
    budget.checked_sub(used).filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_stage_gets_only_what_the_cpu_stage_left() {
        let budget = Duration::from_secs(300);
        assert_eq!(
            remaining(budget, Duration::from_secs(280)),
            Some(Duration::from_secs(20))
        );
        assert_eq!(
            remaining(budget, Duration::from_millis(299_999)),
            Some(Duration::from_millis(1))
        );
        assert_eq!(remaining(budget, Duration::ZERO), Some(budget));
    }

    #[test]
    fn a_spent_budget_leaves_nothing() {
        let budget = Duration::from_secs(10);
        assert_eq!(remaining(budget, budget), None);
        // A child is killed a little after its deadline: overshoot is nothing left, not a
        // panic.
        assert_eq!(remaining(budget, Duration::from_secs(11)), None);
    }

    #[test]
    fn the_budget_is_timeout_s() {
        let mut request = crucible_shared::EvaluateRequest::new("r", "c");
        request.timeout_s = 42;
        let spec = TaskSpec::new(request, 1);
        assert_eq!(task_budget(&spec), Duration::from_secs(42));
    }
}
