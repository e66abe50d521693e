//! The reaper: returns expired leases to the queue at a fixed interval. Any number of replicas
//! may run it at once; every reap is one atomic broker operation.

use crate::broker::Broker;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

/// Calls [`Broker::reap_expired`] every `interval` until `shutdown` is cancelled. Errors are
/// logged and the next tick tries again.
pub async fn run_reaper(broker: Arc<dyn Broker>, interval: Duration, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(1)));
    // After a stall one reap catches up with everything; a burst of reaps would add nothing.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tracing::info!(
        broker = broker.kind(),
        interval_ms = interval.as_millis() as u64,
        "reaper started"
    );
    loop {
        tokio::select! {
            // Checked first: a reaper stopped while a tick is due does not reap once more.
            biased;
            () = shutdown.cancelled() => break,
            _ = ticks.tick() => {}
        }
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
    tracing::info!("reaper stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBroker;
    use crucible_shared::{BrokerConfig, EvaluateRequest, TaskSpec, TaskStatus, WorkerId};
    use tokio::time::Instant;

    #[tokio::test]
    async fn requeues_expired_leases_and_stops_on_shutdown() {
        let cfg = BrokerConfig {
            lease_ttl: Duration::from_millis(100),
            ..BrokerConfig::default()
        };
        let broker: Arc<dyn Broker> = Arc::new(MemoryBroker::new(cfg));
        let spec = TaskSpec {
            request: EvaluateRequest::new("class Model: pass", "class ModelNew: pass"),
            seed: 1,
        };
        let id = broker
            .submit(&crucible_shared::TenantId::builtin(), spec)
            .await
            .unwrap()
            .task_id;
        let worker = WorkerId::from("w_reaper");
        broker
            .claim(
                &worker,
                &crucible_shared::DeviceClass::cpu(),
                Duration::ZERO,
            )
            .await
            .unwrap()
            .expect("task is queued");

        let stop = CancellationToken::new();
        let reaper = tokio::spawn(run_reaper(
            broker.clone(),
            Duration::from_millis(20),
            stop.clone(),
        ));

        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let view = broker.get_task(&id).await.unwrap().unwrap();
            if view.status == TaskStatus::Queued {
                break;
            }
            assert!(Instant::now() < deadline, "lease was never reaped");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), reaper)
            .await
            .expect("reaper stops on shutdown")
            .unwrap();
    }
}
