//! Prometheus metrics. Request counters are per replica; queue, task and worker figures are
//! read from the broker at scrape time, so every replica reports the same cluster-wide view.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use crucible_shared::{QueueStatus, WorkerInfo, WorkerState};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::time::Instant;

/// This replica's Prometheus registry and the metrics in it, rendered at `GET /metrics`.
pub struct Metrics {
    registry: Registry,
    http_requests: IntCounterVec,
    http_duration: HistogramVec,
    /// Tasks accepted by this replica, by backend and priority; the submit handlers count them.
    pub submitted: IntCounterVec,
    /// Rollouts accepted by this replica (`POST /rollouts`).
    pub rollouts_submitted: IntCounter,
    queue_depth: IntGaugeVec,
    running: IntGauge,
    finished: IntGaugeVec,
    result_cache: IntGaugeVec,
    reference_cache: IntGaugeVec,
    workers: IntGaugeVec,
    broker_up: IntGauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric registered, at zero.
    pub fn new() -> Self {
        let registry = Registry::new();
        let http_requests = IntCounterVec::new(
            Opts::new(
                "crucible_http_requests_total",
                "HTTP requests by route and status",
            ),
            &["route", "method", "status"],
        )
        .expect("valid metric");
        let http_duration = HistogramVec::new(
            HistogramOpts::new("crucible_http_request_duration_seconds", "HTTP latency").buckets(
                vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0],
            ),
            &["route"],
        )
        .expect("valid metric");
        let submitted = IntCounterVec::new(
            Opts::new(
                "crucible_tasks_submitted_total",
                "Tasks accepted by this replica",
            ),
            &["backend", "priority"],
        )
        .expect("valid metric");
        let rollouts_submitted = IntCounter::new(
            "crucible_rollouts_submitted_total",
            "Rollouts accepted by this replica (POST /rollouts)",
        )
        .expect("valid metric");
        let queue_depth = IntGaugeVec::new(
            Opts::new("crucible_queue_depth", "Queued tasks by priority"),
            &["priority"],
        )
        .expect("valid metric");
        let running =
            IntGauge::new("crucible_tasks_running", "Tasks holding a lease").expect("valid metric");
        let finished = IntGaugeVec::new(
            Opts::new(
                "crucible_tasks_finished",
                "Lifetime count of tasks by terminal status (from the broker)",
            ),
            &["status"],
        )
        .expect("valid metric");
        let result_cache = IntGaugeVec::new(
            Opts::new(
                "crucible_result_cache_lookups",
                "Lifetime count of cache lookups at submission by outcome (from the broker)",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let reference_cache = IntGaugeVec::new(
            Opts::new(
                "crucible_reference_cache_lookups",
                "Lifetime count of reference timing lookups by workers by outcome (from the broker)",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let workers = IntGaugeVec::new(
            Opts::new("crucible_workers", "Registered workers by state"),
            &["state"],
        )
        .expect("valid metric");
        let broker_up = IntGauge::new(
            "crucible_broker_up",
            "1 when the broker answered the scrape",
        )
        .expect("valid metric");
        for c in [
            Box::new(http_requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(http_duration.clone()),
            Box::new(submitted.clone()),
            Box::new(rollouts_submitted.clone()),
            Box::new(queue_depth.clone()),
            Box::new(running.clone()),
            Box::new(finished.clone()),
            Box::new(result_cache.clone()),
            Box::new(reference_cache.clone()),
            Box::new(workers.clone()),
            Box::new(broker_up.clone()),
        ] {
            registry.register(c).expect("metric registered once");
        }
        Self {
            registry,
            http_requests,
            http_duration,
            submitted,
            rollouts_submitted,
            queue_depth,
            running,
            finished,
            result_cache,
            reference_cache,
            workers,
            broker_up,
        }
    }

    /// Updates the broker-derived gauges; `None` when the broker did not answer.
    pub fn observe_broker(&self, view: Option<(&QueueStatus, &[WorkerInfo])>) {
        let Some((queue, workers)) = view else {
            self.broker_up.set(0);
            return;
        };
        self.broker_up.set(1);
        for (priority, n) in [
            ("high", queue.queued_high),
            ("normal", queue.queued_normal),
            ("low", queue.queued_low),
        ] {
            self.queue_depth
                .with_label_values(&[priority])
                .set(n as i64);
        }
        self.running.set(queue.running as i64);
        for (status, n) in [
            ("done", queue.done_total),
            ("failed", queue.failed_total),
            ("cancelled", queue.cancelled_total),
            ("requeued", queue.requeued_total),
        ] {
            self.finished.with_label_values(&[status]).set(n as i64);
        }
        for (outcome, n) in [
            ("hit", queue.cache_hits_total),
            ("miss", queue.cache_misses_total),
            ("coalesced", queue.coalesced_total),
        ] {
            self.result_cache
                .with_label_values(&[outcome])
                .set(n as i64);
        }
        for (outcome, n) in [
            ("hit", queue.ref_cache_hits_total),
            ("miss", queue.ref_cache_misses_total),
        ] {
            self.reference_cache
                .with_label_values(&[outcome])
                .set(n as i64);
        }
        for state in [
            WorkerState::Starting,
            WorkerState::Idle,
            WorkerState::Busy,
            WorkerState::Unhealthy,
            WorkerState::Stopping,
            WorkerState::Lost,
        ] {
            let n = workers.iter().filter(|w| w.state == state).count();
            let label = serde_json::to_value(state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            self.workers
                .with_label_values(&[label.as_str()])
                .set(n as i64);
        }
    }

    /// The registry in Prometheus' text format; call [`Metrics::observe_broker`] first, or the
    /// broker-derived gauges show the previous scrape's figures.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding never fails");
        String::from_utf8(buf).unwrap_or_default()
    }

    fn record(&self, route: &str, method: &str, status: u16, seconds: f64) {
        self.http_requests
            .with_label_values(&[route, method, &status.to_string()])
            .inc();
        self.http_duration
            .with_label_values(&[route])
            .observe(seconds);
    }
}

/// Middleware counting requests by matched route (never by raw path: ids would explode the
/// label set). Its state is the metrics alone, so this module needs nothing of the app's.
pub async fn track(
    axum::extract::State(metrics): axum::extract::State<std::sync::Arc<Metrics>>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = request.method().as_str().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    metrics.record(
        &route,
        &method,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}
