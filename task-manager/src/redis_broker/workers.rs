//! The worker registry's writes: a heartbeat (`lua/heartbeat.lua`, which also answers a drain
//! asked of the worker) and deregistration; its reads are in `views.rs`.

use super::{RedisBroker, corrupt, ms, redis_err};
use crate::broker::{BrokerError, HeartbeatAnswer};
use crate::policy::worker_retention;
use crucible_shared::{WorkerId, WorkerInfo};

impl RedisBroker {
    pub(super) async fn heartbeat(
        &self,
        info: &WorkerInfo,
    ) -> Result<HeartbeatAnswer, BrokerError> {
        let json = serde_json::to_string(info).map_err(|e| corrupt(format!("worker: {e}")))?;
        let mut c = self.conn().await?;
        let drain: i64 = self
            .scripts
            .heartbeat
            .arg(self.prefix())
            .arg(info.worker_id.as_str())
            .arg(json)
            .arg(ms(worker_retention(self.cfg.worker_liveness)))
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        Ok(HeartbeatAnswer { drain: drain == 1 })
    }

    pub(super) async fn deregister(&self, id: &WorkerId) -> Result<(), BrokerError> {
        let mut c = self.conn().await?;
        let _: (u64, u64) = redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg(self.keys().worker(id))
            .arg(self.keys().drain(id))
            .cmd("ZREM")
            .arg(self.keys().workers())
            .arg(id.as_str())
            .query_async(&mut c)
            .await
            .map_err(redis_err)?;
        Ok(())
    }
}
