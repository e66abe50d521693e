//! Where tasks may run, given the workers the registry lists: which device classes have live
//! workers (the submit-time check of a request's `device_class`), which queued classes have none
//! (`unservable` in `/queue/status`), and on which class each group of a batch without a class
//! is placed, so that no group's timings come from two kinds of device. Pure functions over the
//! registry's view; the API and the brokers do the I/O.

use crate::device::DeviceClass;
use crate::device::DeviceKind;
use crate::error::{ApiError, ApiErrorCode};
use crate::worker::WorkerInfo;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// Queued tasks by the class they must run on (`None`: any worker may run them).
pub type QueuedByClass = BTreeMap<Option<DeviceClass>, u64>;

/// One row of `/queue/status`'s `classes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClassQueue {
    /// The class; absent (null) for the tasks any worker may run.
    pub device_class: Option<DeviceClass>,
    /// Tasks queued for it.
    pub queued: u64,
    /// Live workers of the class (for the row of unclassed tasks: every live worker).
    pub workers: u64,
    /// Tasks are queued and no live worker can run them: they wait (they are never dropped)
    /// until a worker of the class registers, or are cancelled.
    pub unservable: bool,
}

/// Live workers of one class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Capacity {
    workers: u64,
    gpu: bool,
}

/// The classes that have live workers: registered, and starting, ready, busy or unhealthy
/// (one that is stopping or lost will not take another task). A worker from before classes
/// existed names none and counts for no class.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveClasses {
    classes: BTreeMap<DeviceClass, Capacity>,
    /// Live workers of every class, unnamed ones included.
    workers: u64,
}

impl LiveClasses {
    /// The live classes among `workers`.
    pub fn of(workers: &[WorkerInfo]) -> Self {
        let mut out = Self::default();
        for w in workers.iter().filter(|w| w.state.takes_tasks()) {
            out.workers += 1;
            if let Some(class) = &w.device.class {
                let c = out.classes.entry(class.clone()).or_insert(Capacity {
                    workers: 0,
                    gpu: false,
                });
                c.workers += 1;
                c.gpu |= w.device.kind == DeviceKind::Cuda;
            }
        }
        out
    }

    /// Whether some live worker has `class`.
    pub fn has(&self, class: &DeviceClass) -> bool {
        self.classes.contains_key(class)
    }

    /// The submit-time check of a request's class: `DEVICE_CLASS_UNAVAILABLE` (422) naming
    /// `field` and the classes that do have workers. Only a convenience: a task queued for a
    /// class whose workers all stop afterwards stays queued (shown `unservable`).
    pub fn require(&self, class: &DeviceClass, field: &str) -> Result<(), ApiError> {
        if self.has(class) {
            return Ok(());
        }
        let there = if self.classes.is_empty() {
            "no worker is up at all".to_owned()
        } else {
            let listed: Vec<String> = self
                .classes
                .iter()
                .map(|(c, cap)| format!("{c} ({})", cap.workers))
                .collect();
            format!("classes with workers: {}", listed.join(", "))
        };
        Err(ApiError {
            code: ApiErrorCode::DeviceClassUnavailable,
            message: format!("{field}: no live worker has device class {class}; {there}"),
            field: Some(field.to_owned()),
        })
    }

    /// `/queue/status`'s `classes`: every class with queued tasks or live workers, the
    /// unclassed row first, then by name.
    pub fn queues(&self, queued: &QueuedByClass) -> Vec<ClassQueue> {
        let workers = |class: &Option<DeviceClass>| match class {
            None => self.workers,
            Some(c) => self.classes.get(c).map_or(0, |cap| cap.workers),
        };
        let mut rows: BTreeMap<Option<DeviceClass>, ClassQueue> = queued
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(class, n)| {
                let workers = workers(class);
                let row = ClassQueue {
                    device_class: class.clone(),
                    queued: *n,
                    workers,
                    unservable: workers == 0,
                };
                (class.clone(), row)
            })
            .collect();
        for class in self.classes.keys().cloned().map(Some) {
            rows.entry(class.clone()).or_insert_with(|| ClassQueue {
                workers: workers(&class),
                device_class: class,
                queued: 0,
                unservable: false,
            });
        }
        rows.into_values().collect()
    }

    /// The class each group of a batch runs on, for groups that named none: every task of a
    /// group on one class, so a GRPO group's speedups are never measured on two kinds of
    /// device. GPU classes are preferred whenever one is live (CPU timings would mean nothing
    /// beside them). Largest groups first, each goes to the class where it adds least to the
    /// queue per worker (`(queued + placed + size) / workers`; ties by name), so a batch
    /// spreads over the classes by their capacity. Empty when no class is live: the groups
    /// then stay unclassed.
    pub fn place<K: Ord + Clone>(
        &self,
        groups: &BTreeMap<K, u64>,
        queued: &QueuedByClass,
    ) -> BTreeMap<K, DeviceClass> {
        let any_gpu = self.classes.values().any(|c| c.gpu);
        let mut load: Vec<(&DeviceClass, u64, u64)> = self
            .classes
            .iter()
            .filter(|(_, cap)| cap.gpu || !any_gpu)
            .map(|(class, cap)| {
                let queued = queued.get(&Some(class.clone())).copied().unwrap_or(0);
                (class, queued, cap.workers.max(1))
            })
            .collect();
        let mut order: Vec<(&K, u64)> = groups.iter().map(|(k, n)| (k, *n)).collect();
        order.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut out = BTreeMap::new();
        for (key, size) in order {
            let per_worker = |(_, l, w): &(&DeviceClass, u64, u64),
                              other: &(&DeviceClass, u64, u64)| {
                // (l + size) / w against the other's, without rounding.
                let mine = u128::from(l + size) * u128::from(other.2);
                let theirs = u128::from(other.1 + size) * u128::from(*w);
                mine.cmp(&theirs)
            };
            let best = load.iter_mut().min_by(|a, b| match per_worker(a, b) {
                Ordering::Equal => a.0.cmp(b.0),
                o => o,
            });
            let Some(best) = best else {
                break;
            };
            best.1 += size;
            out.insert(key.clone(), best.0.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceInfo;
    use crate::ids::WorkerId;
    use crate::worker::WorkerState;

    fn class(name: &str) -> DeviceClass {
        DeviceClass::parse(name).unwrap()
    }

    fn worker(name: &str, state: WorkerState) -> WorkerInfo {
        let kind = if name == "cpu" {
            DeviceKind::Cpu
        } else {
            DeviceKind::Cuda
        };
        WorkerInfo {
            worker_id: WorkerId::random(),
            node: "n".to_owned(),
            device: DeviceInfo {
                kind,
                name: name.to_owned(),
                class: Some(class(name)),
            },
            device_index: None,
            state,
            current_task: None,
            tasks_done: 0,
            started_at: chrono::Utc::now(),
            last_heartbeat: chrono::Utc::now(),
            sandbox: None,
        }
    }

    fn live(spec: &[(&str, usize)]) -> LiveClasses {
        let workers: Vec<WorkerInfo> = spec
            .iter()
            .flat_map(|(name, n)| (0..*n).map(|_| worker(name, WorkerState::Idle)))
            .collect();
        LiveClasses::of(&workers)
    }

    #[test]
    fn only_workers_that_take_tasks_make_a_class_live() {
        let workers = [
            worker("h100", WorkerState::Busy),
            worker("a100", WorkerState::Lost),
            worker("l4", WorkerState::Stopping),
            worker("t4", WorkerState::Starting),
            worker("cpu", WorkerState::Unhealthy),
        ];
        let live = LiveClasses::of(&workers);
        assert!(live.has(&class("h100")) && live.has(&class("t4")) && live.has(&class("cpu")));
        assert!(!live.has(&class("a100")) && !live.has(&class("l4")));
    }

    #[test]
    fn an_unknown_class_is_refused_naming_the_live_ones() {
        let live = live(&[("cpu", 1), ("h100", 2)]);
        assert!(live.require(&class("h100"), "device_class").is_ok());
        let err = live
            .require(&class("a100"), "tasks[2].device_class")
            .unwrap_err();
        assert_eq!(err.code, ApiErrorCode::DeviceClassUnavailable);
        assert_eq!(err.http_status(), 422);
        assert_eq!(err.field.as_deref(), Some("tasks[2].device_class"));
        assert_eq!(
            err.message,
            "tasks[2].device_class: no live worker has device class a100; \
             classes with workers: cpu (1), h100 (2)"
        );
        let none = LiveClasses::default().require(&class("h100"), "device_class");
        assert!(
            none.unwrap_err()
                .message
                .ends_with("no worker is up at all")
        );
    }

    #[test]
    fn queued_classes_without_workers_are_unservable() {
        let live = live(&[("cpu", 1)]);
        let queued: QueuedByClass = [
            (None, 3),
            (Some(class("cpu")), 2),
            (Some(class("h100")), 5),
            (Some(class("a100")), 0),
        ]
        .into();
        let rows = live.queues(&queued);
        let summary: Vec<(Option<&str>, u64, u64, bool)> = rows
            .iter()
            .map(|r| {
                let name = r.device_class.as_ref().map(DeviceClass::as_str);
                (name, r.queued, r.workers, r.unservable)
            })
            .collect();
        assert_eq!(
            summary,
            [
                (None, 3, 1, false),
                (Some("cpu"), 2, 1, false),
                (Some("h100"), 5, 0, true)
            ]
        );
        // With no worker at all, even tasks of no class wait for one.
        let rows = LiveClasses::default().queues(&[(None, 1)].into());
        assert!(rows[0].unservable);
    }

    #[test]
    fn groups_go_whole_to_one_class_by_capacity_and_gpus_first() {
        let groups: BTreeMap<&str, u64> = [("p1", 16), ("p2", 16), ("p3", 16), ("p4", 8)].into();
        // Two h100s take twice the work of one a100; the cpu worker takes none of it.
        let live = live(&[("h100", 2), ("a100", 1), ("cpu", 4)]);
        let placed = live.place(&groups, &QueuedByClass::new());
        assert_eq!(placed.len(), 4);
        let on = |name: &str| placed.values().filter(|c| c.as_str() == name).count();
        assert_eq!((on("h100"), on("a100"), on("cpu")), (3, 1, 0), "{placed:?}");
        // Work already queued counts: a busy class gets less.
        let queued: QueuedByClass = [(Some(class("h100")), 1000)].into();
        let placed = live.place(&groups, &queued);
        assert!(placed.values().all(|c| c.as_str() == "a100"), "{placed:?}");
        // A CPU-only cluster places on the CPU; no live class places nothing.
        let placed = self::live(&[("cpu", 1)]).place(&groups, &QueuedByClass::new());
        assert!(placed.values().all(|c| *c == DeviceClass::cpu()));
        assert!(LiveClasses::default().place(&groups, &queued).is_empty());
        // Deterministic: the same inputs, the same placement.
        assert_eq!(
            live.place(&groups, &QueuedByClass::new()),
            live.place(&groups, &QueuedByClass::new())
        );
    }
}
