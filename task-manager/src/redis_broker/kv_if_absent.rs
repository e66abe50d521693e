//! The key-value cache's "put if absent" in Redis: one `SET key value NX GET PX ttl` (Redis
//! 7.0+), atomic on its own, so of two API replicas racing to store an episode's turn one
//! stores it and the other reads back what was stored. Only the API's role uses it, in its own
//! namespaces (deploy/redis.conf).

use super::{RedisBroker, ms, redis_err};
use crate::broker::BrokerError;
use crate::kv::KvNamespace;
use std::time::Duration;

impl RedisBroker {
    pub(super) async fn put_kv_if_absent(
        &self,
        namespace: KvNamespace,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<Option<String>, BrokerError> {
        let mut c = self.conn().await?;
        // NX with GET answers the value already there (nothing set), or nil (set).
        redis::cmd("SET")
            .arg(self.keys().kv(namespace, key))
            .arg(value)
            .arg("NX")
            .arg("GET")
            .arg("PX")
            .arg(ms(ttl))
            .query_async(&mut c)
            .await
            .map_err(redis_err)
    }
}
