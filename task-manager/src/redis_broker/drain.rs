//! Drains asked of workers ([`crate::Broker::drain_worker`]): `lua/drain_worker.lua` marks
//! a registered worker (`drain:{id}`), its heartbeat (`lua/heartbeat.lua`) answers the mark.

use super::{RedisBroker, ms, redis_err};
use crate::broker::BrokerError;
use crate::policy::worker_retention;
use crucible_shared::WorkerId;

impl RedisBroker {
    /// [`crate::Broker::drain_worker`]: `false` when no worker `id` is registered.
    pub(super) async fn ask_drain(&self, id: &WorkerId) -> Result<bool, BrokerError> {
        let mut c = self.conn().await?;
        let marked: i64 = self
            .scripts
            .drain_worker
            .arg(self.prefix())
            .arg(id.as_str())
            .arg(ms(worker_retention(self.cfg.worker_liveness)))
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        Ok(marked == 1)
    }
}
