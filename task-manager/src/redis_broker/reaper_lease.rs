//! The reaper lease in Redis: the key `reaper` holds the leading reaper's name and expires
//! with its lease (`lua/reaper_lease.lua`, `lua/reaper_release.lua`). Both roles' ACL users
//! reach it, since workers and API replicas alike run the reaper.

use super::scripts::script;
use super::{RedisBroker, ms, redis_err};
use crate::broker::BrokerError;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

struct Scripts {
    take: Script,
    release: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    take: script("reaper_lease"),
    release: script("reaper_release"),
});

impl RedisBroker {
    pub(super) async fn take_reaper_lease(
        &self,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, BrokerError> {
        let mut c = self.conn().await?;
        let leads: i64 = SCRIPTS
            .take
            .arg(self.prefix())
            .arg(holder)
            .arg(ms(ttl))
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        Ok(leads == 1)
    }

    pub(super) async fn give_up_reaper_lease(&self, holder: &str) -> Result<(), BrokerError> {
        let mut c = self.conn().await?;
        let _: i64 = SCRIPTS
            .release
            .arg(self.prefix())
            .arg(holder)
            .invoke_async(&mut c)
            .await
            .map_err(redis_err)?;
        Ok(())
    }
}
