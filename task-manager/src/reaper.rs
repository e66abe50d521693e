//! The reaper: returns expired leases to the queue at a fixed interval. Any process may run it
//! (API replicas, and workers by default, so a cluster with no API up still requeues a dead
//! worker's task); a lease in the broker ([`Broker::reaper_lease`]) elects one of them to reap
//! at a time, the others stand by and take over once the leader's lease expires. Every reap is
//! one atomic broker operation, so even two leaders (a paused one whose lease ran out) would
//! only repeat each other's work.

use crate::broker::Broker;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

/// Milliseconds between reaper passes unless configured (`CRUCIBLE_REAPER_INTERVAL_MS` of the
/// API and the worker; `crucible up`), the one default every process shares.
pub const DEFAULT_REAPER_INTERVAL_MS: u64 = 1000;

/// The reaper lease lasts this many intervals: a few slow ticks (a busy Redis) do not change
/// the leader, and a dead leader is replaced this long after its last renewal.
pub const LEASE_INTERVALS: u32 = 5;

/// How one process runs the reaper.
#[derive(Debug, Clone)]
pub struct ReaperSettings {
    /// Time between passes (and lease renewals).
    pub interval: Duration,
    /// This process's name in the election; unique per process ([`ReaperSettings::new`]).
    pub holder: String,
    /// Whether each pass also finishes tenant deletions left half done
    /// ([`Broker::finish_tenant_deletions`]): only the API's role reaches the tenant registry,
    /// so every API replica does it at every tick, leader or not.
    pub finish_tenant_deletions: bool,
}

impl ReaperSettings {
    /// Settings for a process of `role` (`api`, `worker`, `up`), named `{role}-{pid}-{random}`
    /// so that no two processes, on one node or several, share a name.
    pub fn new(role: &str, interval: Duration) -> Self {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        Self {
            interval: interval.max(Duration::from_millis(1)),
            holder: format!("{role}-{}-{}", std::process::id(), &nonce[..12]),
            finish_tenant_deletions: false,
        }
    }

    /// The same, also finishing tenant deletions (the API's role).
    pub fn finishing_tenant_deletions(mut self) -> Self {
        self.finish_tenant_deletions = true;
        self
    }

    /// How long one take or renewal of the lease lasts.
    pub fn lease_ttl(&self) -> Duration {
        self.interval * LEASE_INTERVALS
    }
}

/// Every `interval` until `shutdown` is cancelled: takes or renews the reaper lease and, while
/// this process leads, calls [`Broker::reap_expired`]. Errors are logged and the next tick
/// tries again. A leader that stops gives the lease up, so a standby takes over at once.
pub async fn run_reaper(
    broker: Arc<dyn Broker>,
    settings: ReaperSettings,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(settings.interval);
    // After a stall one reap catches up with everything; a burst of reaps would add nothing.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let ttl = settings.lease_ttl();
    let holder = settings.holder.as_str();
    tracing::info!(
        broker = broker.kind(),
        holder,
        interval_ms = settings.interval.as_millis() as u64,
        lease_ms = ttl.as_millis() as u64,
        "reaper started"
    );
    // Whether this process led at its last answered tick; `None` before the first.
    let mut leading: Option<bool> = None;
    loop {
        tokio::select! {
            // Checked first: a reaper stopped while a tick is due does not reap once more.
            biased;
            () = shutdown.cancelled() => break,
            _ = ticks.tick() => {}
        }
        if settings.finish_tenant_deletions
            && let Err(e) = broker.finish_tenant_deletions().await
        {
            tracing::warn!(error = %e, "finishing tenant deletions failed");
        }
        let leads = match broker.reaper_lease(holder, ttl).await {
            Ok(leads) => leads,
            Err(e) => {
                tracing::warn!(error = %e, "taking the reaper lease failed");
                continue;
            }
        };
        if leading != Some(leads) {
            if leads {
                tracing::info!(holder, "reaper leads");
            } else {
                tracing::info!(holder, "reaper stands by (another process leads)");
            }
            leading = Some(leads);
        }
        if leads {
            reap_once(broker.as_ref()).await;
        }
    }
    if leading == Some(true)
        && let Err(e) = broker.release_reaper_lease(holder).await
    {
        tracing::warn!(error = %e, "giving up the reaper lease failed");
    }
    tracing::info!(holder, "reaper stopped");
}

async fn reap_once(broker: &dyn Broker) {
    match broker.reap_expired().await {
        Ok(r) if r.requeued + r.failed > 0 => {
            tracing::info!(
                requeued = r.requeued,
                failed = r.failed,
                "reaped expired leases"
            );
        }
        Ok(_) => tracing::trace!("no expired leases"),
        Err(e) => tracing::warn!(error = %e, "reaping expired leases failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBroker;
    use crucible_shared::{
        BrokerConfig, DeviceClass, EvaluateRequest, TaskId, TaskSpec, TaskStatus, TenantId,
        WorkerId,
    };
    use tokio::time::Instant;

    fn broker() -> Arc<dyn Broker> {
        let cfg = BrokerConfig {
            lease_ttl: Duration::from_millis(100),
            ..BrokerConfig::default()
        };
        Arc::new(MemoryBroker::new(cfg))
    }

    /// A task claimed by a worker that will never renew it.
    async fn abandoned_task(broker: &dyn Broker) -> TaskId {
        let spec = TaskSpec::new(
            EvaluateRequest::new("class Model: pass", "class ModelNew: pass"),
            1,
        );
        let id = broker
            .submit(&TenantId::builtin(), spec)
            .await
            .unwrap()
            .task_id;
        broker
            .claim(
                &WorkerId::from("w_reaper"),
                &DeviceClass::cpu(),
                Duration::ZERO,
            )
            .await
            .unwrap()
            .expect("task is queued");
        id
    }

    async fn wait_requeued(broker: &dyn Broker, id: &TaskId) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let view = broker.get_task(id).await.unwrap().unwrap();
            if view.status == TaskStatus::Queued {
                return;
            }
            assert!(Instant::now() < deadline, "lease was never reaped");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(reaper: tokio::task::JoinHandle<()>, token: CancellationToken) {
        token.cancel();
        tokio::time::timeout(Duration::from_secs(5), reaper)
            .await
            .expect("reaper stops on shutdown")
            .unwrap();
    }

    #[tokio::test]
    async fn requeues_expired_leases_and_stops_on_shutdown() {
        let broker = broker();
        let id = abandoned_task(broker.as_ref()).await;
        let token = CancellationToken::new();
        let reaper = tokio::spawn(run_reaper(
            broker.clone(),
            ReaperSettings::new("test", Duration::from_millis(20)),
            token.clone(),
        ));
        wait_requeued(broker.as_ref(), &id).await;
        stop(reaper, token).await;
    }

    #[tokio::test]
    async fn one_reaper_leads_and_a_standby_takes_over_when_it_stops() {
        let broker = broker();
        // Long enough that the standby could not take over by expiry within the test's waits.
        let interval = Duration::from_secs(2);
        let first = ReaperSettings::new("first", Duration::from_millis(20));
        let second = ReaperSettings {
            interval: Duration::from_millis(20),
            ..ReaperSettings::new("second", Duration::from_millis(20))
        };
        assert_ne!(first.holder, second.holder);
        let first_stop = CancellationToken::new();
        let first_run = tokio::spawn(run_reaper(
            broker.clone(),
            ReaperSettings {
                interval,
                ..first.clone()
            },
            first_stop.clone(),
        ));
        // The first leads once it took the lease: nobody else may take it.
        let deadline = Instant::now() + Duration::from_secs(5);
        while broker
            .reaper_lease("probe", Duration::from_millis(1))
            .await
            .unwrap()
        {
            broker.release_reaper_lease("probe").await.unwrap();
            assert!(Instant::now() < deadline, "the first reaper never led");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let second_stop = CancellationToken::new();
        let second_run = tokio::spawn(run_reaper(
            broker.clone(),
            second.clone(),
            second_stop.clone(),
        ));
        // The standby ticks every 20 ms and never reaps while the first holds the lease.
        assert!(
            !broker
                .reaper_lease(&second.holder, Duration::from_secs(10))
                .await
                .unwrap()
        );
        stop(first_run, first_stop).await;
        // The first gave the lease up: the standby takes it at its next tick and reaps.
        let id = abandoned_task(broker.as_ref()).await;
        wait_requeued(broker.as_ref(), &id).await;
        assert!(
            !broker
                .reaper_lease(&first.holder, Duration::from_secs(10))
                .await
                .unwrap(),
            "the second reaper leads now"
        );
        stop(second_run, second_stop).await;
    }
}
