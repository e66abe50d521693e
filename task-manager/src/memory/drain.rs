//! Drains asked of workers ([`crate::Broker::drain_worker`]): the registered workers an
//! operator asked to drain, answered in their heartbeats, forgotten when they deregister or
//! the registry drops them.

use super::State;
use crate::broker::HeartbeatAnswer;
use crucible_shared::WorkerId;
use std::time::Duration;

impl State {
    /// Marks `id` as asked to drain; `false` when no such worker is registered (none, or
    /// silent for longer than `retention`).
    pub(super) fn ask_drain(&mut self, id: &WorkerId, retention: Duration) -> bool {
        let workers = &self.workers;
        self.drains.retain(|w| workers.contains_key(w));
        let registered = workers
            .get(id)
            .is_some_and(|(_, seen)| seen.elapsed() <= retention);
        if registered {
            self.drains.insert(id.clone());
        }
        registered
    }

    /// What worker `id`'s heartbeat is answered.
    pub(super) fn heartbeat_answer(&self, id: &WorkerId) -> HeartbeatAnswer {
        HeartbeatAnswer {
            drain: self.drains.contains(id),
        }
    }

    /// Removes `id` from the registry, with any drain asked of it.
    pub(super) fn forget_worker(&mut self, id: &WorkerId) {
        self.workers.remove(id);
        self.drains.remove(id);
    }
}
