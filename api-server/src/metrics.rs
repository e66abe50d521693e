//! Prometheus metrics of one API replica (`GET /metrics`; the names are docs/METRICS.md's).
//! Request and submission counters are this replica's; the cluster-wide figures (queue,
//! workers, the broker's lifetime counters) are read from the broker at scrape time and
//! labelled with the replica's id ([`cluster`]). Other parts of the process add their own
//! metrics to [`Metrics::registry`]: the binaries their `crucible_build_info`, `crucible up`
//! its workers' metrics, so one `/metrics` serves the whole process.

pub mod cluster;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Instant;

/// The replica label before the replica serves (never seen through `/metrics`).
const UNNAMED_REPLICA: &str = "unnamed";

/// `how` of `crucible_http_connections_shed_total`: the oldest idle connection was asked to
/// close to make room for a new one.
pub const SHED_CLOSED_OLDEST: &str = "closed_oldest";
/// `how` of `crucible_http_connections_shed_total`: a new connection was closed unread, past
/// the hard limit with every connection busy.
pub const SHED_REFUSED: &str = "refused";

/// This replica's Prometheus registry and the metrics in it, rendered at `GET /metrics`.
pub struct Metrics {
    registry: Registry,
    http_requests: IntCounterVec,
    http_duration: HistogramVec,
    /// Tasks accepted by this replica, by backend and priority; the submit handlers count them.
    pub submitted: IntCounterVec,
    /// Rollouts accepted by this replica (`POST /rollouts`).
    pub rollouts_submitted: IntCounter,
    /// Connections holding a descriptor now, closing ones included ([`crate::serving`]).
    pub connections_open: IntGauge,
    /// Connections shed by the connection cap, by `how`: [`SHED_CLOSED_OLDEST`] or
    /// [`SHED_REFUSED`]. An operator sees a flood here before clients see errors.
    pub connections_shed: IntCounterVec,
    /// The `replica` label of the cluster-wide figures: [`replica_id`], set when the replica
    /// starts serving ([`crate::serve`]).
    replica: OnceLock<String>,
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
        let connections_open = IntGauge::new(
            "crucible_http_connections",
            "HTTP connections holding a descriptor, closing ones included",
        )
        .expect("valid metric");
        let connections_shed = IntCounterVec::new(
            Opts::new(
                "crucible_http_connections_shed_total",
                "HTTP connections shed by the connection cap",
            ),
            &["how"],
        )
        .expect("valid metric");
        for how in [SHED_CLOSED_OLDEST, SHED_REFUSED] {
            connections_shed.with_label_values(&[how]);
        }
        for c in [
            Box::new(http_requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(http_duration.clone()),
            Box::new(submitted.clone()),
            Box::new(rollouts_submitted.clone()),
            Box::new(connections_open.clone()),
            Box::new(connections_shed.clone()),
        ] {
            registry.register(c).expect("metric registered once");
        }
        Self {
            registry,
            http_requests,
            http_duration,
            submitted,
            rollouts_submitted,
            connections_open,
            connections_shed,
            replica: OnceLock::new(),
        }
    }

    /// The registry `/metrics` renders, for the rest of the process to register into.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Names the replica (once; later calls are ignored: the first address served on is its
    /// id).
    pub fn name_replica(&self, id: String) {
        let _ = self.replica.set(id);
    }

    /// The replica's id, as the `replica` label shows it.
    pub fn replica(&self) -> &str {
        self.replica.get().map_or(UNNAMED_REPLICA, String::as_str)
    }

    /// The registry and the cluster-wide figures of `broker` (`None`: the broker did not
    /// answer) in Prometheus' text format.
    pub fn render(&self, broker: Option<cluster::BrokerView<'_>>) -> String {
        let mut families = self.registry.gather();
        families.extend(cluster::families(broker, self.replica()));
        families.sort_by(|a, b| a.name().cmp(b.name()));
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut buf)
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

/// A replica's id: `<host name>:<port>` of the address it serves on, stable across its
/// restarts and distinct between replicas on different hosts (or ports). `host` is the
/// `HOSTNAME` the process was given, else the kernel's.
pub fn replica_id(bound: SocketAddr, host: Option<String>) -> String {
    let host = host
        .filter(|h| !h.trim().is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| bound.ip().to_string());
    format!("{}:{}", host.trim(), bound.port())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_is_named_by_host_and_port_once() {
        let addr: SocketAddr = "0.0.0.0:10907".parse().unwrap();
        assert_eq!(replica_id(addr, Some("api-3".into())), "api-3:10907");
        assert!(replica_id(addr, None).ends_with(":10907"));
        let metrics = Metrics::new();
        assert_eq!(metrics.replica(), UNNAMED_REPLICA);
        metrics.name_replica("a:1".into());
        metrics.name_replica("b:2".into());
        assert_eq!(metrics.replica(), "a:1");
    }

    #[test]
    fn render_merges_the_registry_and_the_cluster_figures_in_name_order() {
        let metrics = Metrics::new();
        metrics.name_replica("api:1".into());
        metrics.rollouts_submitted.inc();
        let text = metrics.render(None);
        assert!(
            text.contains(r#"crucible_broker_up{replica="api:1"} 0"#),
            "{text}"
        );
        assert!(
            text.contains("crucible_rollouts_submitted_total 1"),
            "{text}"
        );
        let types: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        let mut sorted = types.clone();
        sorted.sort();
        assert_eq!(types, sorted, "families in name order");
        for t in types {
            if let Some((name, kind)) = t.split_once(' ') {
                assert!(
                    !name.ends_with("_total") || kind == "counter",
                    "{name} is a {kind}"
                );
            }
        }
    }
}
