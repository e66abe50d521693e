//! Which finished tasks clients have been answered with, recorded only while the process is
//! draining: `crucible up` keeps its API serving after its workers drained until the verdicts
//! the drain produced have been read (or a bound passes), because with the in-process broker
//! those verdicts die with the process. Without a drain nothing is recorded.

use crucible_shared::{TaskId, TaskStatus};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use tokio::sync::Notify;

/// The tasks whose finished view was served since [`Deliveries::start_recording`].
#[derive(Default)]
pub struct Deliveries {
    recording: AtomicBool,
    /// Bounded by the tasks finished while the process drains.
    delivered: Mutex<HashSet<TaskId>>,
    changed: Notify,
}

impl Deliveries {
    /// From now on, every finished task a client is answered with is recorded.
    pub fn start_recording(&self) {
        self.recording.store(true, Ordering::Release);
    }

    /// Notes that a client was answered with task `id` in `status` (a task view, a results
    /// page's entry).
    pub fn served(&self, id: &TaskId, status: TaskStatus) {
        if !self.recording.load(Ordering::Acquire) || !status.is_terminal() {
            return;
        }
        self.delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone());
        self.changed.notify_waiters();
    }

    /// Those of `ids` no client has been answered with yet.
    pub fn unread(&self, ids: &[TaskId]) -> Vec<TaskId> {
        let delivered = self
            .delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        ids.iter()
            .filter(|id| !delivered.contains(*id))
            .cloned()
            .collect()
    }

    /// Waits until every one of `ids` has been served, or `until`; returns those that were
    /// not.
    pub async fn wait_read(&self, ids: &[TaskId], until: tokio::time::Instant) -> Vec<TaskId> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let unread = self.unread(ids);
            if unread.is_empty() {
                return unread;
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                return self.unread(ids);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_finished_tasks_served_while_recording_count_as_read() {
        let d = Deliveries::default();
        let ids = [TaskId("t_1".into()), TaskId("t_2".into())];
        d.served(&ids[0], TaskStatus::Done);
        assert_eq!(
            d.unread(&ids).len(),
            2,
            "nothing is recorded before a drain"
        );
        d.start_recording();
        d.served(&ids[0], TaskStatus::Running);
        assert_eq!(d.unread(&ids).len(), 2, "a running task is not a verdict");
        d.served(&ids[0], TaskStatus::Done);
        assert_eq!(d.unread(&ids), vec![ids[1].clone()]);
        let until = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        let (unread, ()) = tokio::join!(d.wait_read(&ids, until), async {
            tokio::task::yield_now().await;
            d.served(&ids[1], TaskStatus::Failed);
        });
        assert!(unread.is_empty());
        let gone = tokio::time::Instant::now();
        assert_eq!(
            d.wait_read(&[TaskId("t_3".into())], gone).await.len(),
            1,
            "the bound ends the wait"
        );
    }
}
