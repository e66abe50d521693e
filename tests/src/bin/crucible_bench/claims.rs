//! Claim-to-start latency: claimers blocked in `Broker::claim` while one submitter submits
//! at a steady rate.

use crucible_shared::{TaskId, TaskSpec, TenantId, WorkerId};
use crucible_task_manager::Broker;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Claim-to-start latencies of one run, in microseconds.
pub(crate) struct ClaimRun {
    /// Claim returned − submit call returned (negative when the claim beat the submit's reply).
    pub(crate) from_return_us: Vec<i64>,
    /// Claim returned − submit call started.
    pub(crate) from_start_us: Vec<i64>,
    pub(crate) claimed: usize,
    pub(crate) submitted: usize,
    pub(crate) submit_rate: f64,
    pub(crate) errors: usize,
}

pub(crate) async fn claim_run(
    broker: Arc<dyn Broker>,
    spec: TaskSpec,
    tasks: usize,
    claimers: usize,
    rate: u32,
    timeout: Duration,
) -> ClaimRun {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(TaskId, Instant)>();
    let errors = Arc::new(AtomicUsize::new(0));
    let mut claim_handles = Vec::new();
    for i in 0..claimers {
        let broker = broker.clone();
        let tx = tx.clone();
        let errors = errors.clone();
        let worker = WorkerId(format!("bench-claimer-{i}"));
        claim_handles.push(tokio::spawn(async move {
            // Ended by abort once every task is claimed (or the run timed out).
            loop {
                match broker
                    .claim(
                        &worker,
                        &crucible_shared::DeviceClass::cpu(),
                        Duration::from_secs(5),
                    )
                    .await
                {
                    Ok(Some(lease)) => {
                        let at = Instant::now();
                        if tx.send((lease.task_id, at)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    drop(tx);
    // Let the claimers reach their blocking wait before the first task arrives.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let deadline = Instant::now() + timeout;
    let submit_broker = broker.clone();
    let submit_errors = errors.clone();
    let submitter = tokio::spawn(async move {
        let mut times: HashMap<TaskId, (Instant, Instant)> = HashMap::with_capacity(tasks);
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let start = Instant::now();
        for _ in 0..tasks {
            if Instant::now() >= deadline {
                break;
            }
            tick.tick().await;
            let t0 = Instant::now();
            match submit_broker
                .submit(&TenantId::builtin(), spec.clone())
                .await
            {
                Ok(s) => {
                    times.insert(s.task_id, (t0, Instant::now()));
                }
                Err(_) => {
                    submit_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        (times, start.elapsed())
    });

    let mut claimed: HashMap<TaskId, Instant> = HashMap::with_capacity(tasks);
    while claimed.len() < tasks {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some((id, at))) => {
                claimed.insert(id, at);
            }
            _ => break,
        }
    }
    let (submitted, submit_elapsed) = submitter.await.expect("submitter");
    for h in &claim_handles {
        h.abort();
    }
    for h in claim_handles {
        let _ = h.await;
    }
    let signed_us = |later: Instant, earlier: Instant| -> i64 {
        if later >= earlier {
            (later - earlier).as_micros() as i64
        } else {
            -((earlier - later).as_micros() as i64)
        }
    };
    let mut from_return_us = Vec::new();
    let mut from_start_us = Vec::new();
    for (id, (t0, t1)) in &submitted {
        if let Some(&at) = claimed.get(id) {
            from_return_us.push(signed_us(at, *t1));
            from_start_us.push(signed_us(at, *t0));
        }
    }
    from_return_us.sort_unstable();
    from_start_us.sort_unstable();
    ClaimRun {
        claimed: from_return_us.len(),
        from_return_us,
        from_start_us,
        submit_rate: submitted.len() as f64 / submit_elapsed.as_secs_f64().max(1e-9),
        submitted: submitted.len(),
        errors: errors.load(Ordering::Relaxed),
    }
}
