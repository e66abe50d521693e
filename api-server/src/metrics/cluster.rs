//! The cluster-wide figures of `/metrics`, read from the broker at scrape time. Every replica
//! reads the same broker and so exports the same values: each sample carries this replica's
//! id in a `replica` label, and dashboards and alerts take `max without (instance, replica)`
//! of them, never a sum (docs/METRICS.md). Lifetime counts are counters (their `_total`
//! names): Prometheus reads a drop, e.g. after Redis lost data, as a counter reset.
//!
//! Pure: built from one broker read as metric families, so the scrape handler holds no state
//! between scrapes and a broker that does not answer leaves no stale figure behind.

use crucible_shared::{QueueStatus, WorkerInfo, WorkerState, wire_name};
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};

/// How the HELP text of every cluster-wide figure tells readers to aggregate it.
const AGGREGATE: &str = "cluster-wide, from the broker; every API replica exports it: aggregate with max without (instance, replica)";

/// Every state a worker can be reported in, each exported even at 0.
const WORKER_STATES: [WorkerState; 7] = [
    WorkerState::Starting,
    WorkerState::Idle,
    WorkerState::Busy,
    WorkerState::Unhealthy,
    WorkerState::Draining,
    WorkerState::Stopping,
    WorkerState::Lost,
];

/// The broker's answer to one scrape: the queue and the worker registry.
pub type BrokerView<'a> = (&'a QueueStatus, &'a [WorkerInfo]);

/// The cluster-wide families for one scrape: `crucible_broker_up` (0 when `view` is `None`,
/// the broker did not answer; the other figures are then left out rather than shown stale),
/// queue depth, running tasks, workers by state, and the broker's lifetime counters.
pub fn families(view: Option<BrokerView<'_>>, replica: &str) -> Vec<MetricFamily> {
    let family = Family { replica };
    let mut out = vec![family.one(
        "crucible_broker_up",
        "1 when the broker answered this scrape, 0 when it did not",
        MetricType::GAUGE,
        u64::from(view.is_some()),
    )];
    let Some((queue, workers)) = view else {
        return out;
    };
    out.extend([
        family.by(
            "crucible_queue_depth",
            "Queued tasks by priority",
            MetricType::GAUGE,
            "priority",
            [
                ("high", queue.queued_high),
                ("normal", queue.queued_normal),
                ("low", queue.queued_low),
            ],
        ),
        family.one(
            "crucible_tasks_running",
            "Tasks holding a lease",
            MetricType::GAUGE,
            queue.running,
        ),
        family.by(
            "crucible_workers",
            "Registered workers by state",
            MetricType::GAUGE,
            "state",
            WORKER_STATES.map(|state| {
                let n = workers.iter().filter(|w| w.state == state).count();
                (wire_name(&state), n as u64)
            }),
        ),
        family.by(
            "crucible_tasks_finished_total",
            "Tasks that reached a terminal status, by status, over the broker's lifetime",
            MetricType::COUNTER,
            "status",
            [
                ("done", queue.done_total),
                ("failed", queue.failed_total),
                ("cancelled", queue.cancelled_total),
            ],
        ),
        family.one(
            "crucible_tasks_requeued_total",
            "Tasks put back in the queue after a lost lease or a service fault",
            MetricType::COUNTER,
            queue.requeued_total,
        ),
        family.by(
            "crucible_result_cache_total",
            "Result cache lookups at submission by outcome (coalesced: joined an identical open task)",
            MetricType::COUNTER,
            "outcome",
            [
                ("hit", queue.cache_hits_total),
                ("miss", queue.cache_misses_total),
                ("coalesced", queue.coalesced_total),
            ],
        ),
        family.by(
            "crucible_reference_cache_total",
            "Reference timing lookups by workers by outcome",
            MetricType::COUNTER,
            "outcome",
            [
                ("hit", queue.ref_cache_hits_total),
                ("miss", queue.ref_cache_misses_total),
            ],
        ),
    ]);
    out
}

/// Builds families whose every sample is labelled with the replica.
struct Family<'a> {
    replica: &'a str,
}

impl Family<'_> {
    /// A family of one sample.
    fn one(&self, name: &str, help: &str, kind: MetricType, value: u64) -> MetricFamily {
        self.family(name, help, kind, vec![self.sample(kind, None, value)])
    }

    /// A family of one sample per value of `label`.
    fn by<V: AsRef<str>>(
        &self,
        name: &str,
        help: &str,
        kind: MetricType,
        label: &str,
        values: impl IntoIterator<Item = (V, u64)>,
    ) -> MetricFamily {
        let samples = values
            .into_iter()
            .map(|(v, n)| self.sample(kind, Some((label, v.as_ref())), n))
            .collect();
        self.family(name, help, kind, samples)
    }

    fn family(
        &self,
        name: &str,
        help: &str,
        kind: MetricType,
        samples: Vec<Metric>,
    ) -> MetricFamily {
        let mut family = MetricFamily::default();
        family.set_name(name.to_owned());
        family.set_help(format!("{help} ({AGGREGATE})"));
        family.set_field_type(kind);
        family.set_metric(samples);
        family
    }

    fn sample(&self, kind: MetricType, label: Option<(&str, &str)>, value: u64) -> Metric {
        let pair = |name: &str, value: &str| {
            let mut p = LabelPair::default();
            p.set_name(name.to_owned());
            p.set_value(value.to_owned());
            p
        };
        let mut labels: Vec<LabelPair> = label.map(|(k, v)| pair(k, v)).into_iter().collect();
        labels.push(pair("replica", self.replica));
        let mut metric = Metric::default();
        metric.set_label(labels);
        if kind == MetricType::COUNTER {
            let mut counter = Counter::default();
            counter.set_value(value as f64);
            metric.set_counter(counter);
        } else {
            let mut gauge = Gauge::default();
            gauge.set_value(value as f64);
            metric.set_gauge(gauge);
        }
        metric
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, TextEncoder};

    fn text(families: &[MetricFamily]) -> String {
        let mut buf = Vec::new();
        TextEncoder::new().encode(families, &mut buf).unwrap();
        String::from_utf8(buf).unwrap()
    }

    fn queue() -> QueueStatus {
        serde_json::from_value(serde_json::json!({
            "queued_high": 1, "queued_normal": 2, "queued_low": 3, "running": 4, "queue_cap": 100,
            "submitted_total": 50, "done_total": 40, "failed_total": 2, "cancelled_total": 1,
            "requeued_total": 5, "cache_hits_total": 6, "cache_misses_total": 7,
            "coalesced_total": 8, "ref_cache_hits_total": 9, "ref_cache_misses_total": 10
        }))
        .expect("a queue status")
    }

    #[test]
    fn lifetime_counts_are_counters_named_total_and_levels_are_gauges() {
        let q = queue();
        let families = families(Some((&q, &[])), "api-1:10907");
        for f in &families {
            let counter = f.get_field_type() == MetricType::COUNTER;
            assert_eq!(
                f.name().ends_with("_total"),
                counter,
                "{} is a {:?}",
                f.name(),
                f.get_field_type()
            );
            assert!(
                f.help().contains("max without (instance, replica)"),
                "{}",
                f.help()
            );
        }
        let t = text(&families);
        for line in [
            "# TYPE crucible_tasks_finished_total counter",
            "# TYPE crucible_tasks_requeued_total counter",
            "# TYPE crucible_result_cache_total counter",
            "# TYPE crucible_reference_cache_total counter",
            "# TYPE crucible_queue_depth gauge",
            "# TYPE crucible_workers gauge",
            r#"crucible_broker_up{replica="api-1:10907"} 1"#,
            r#"crucible_tasks_finished_total{status="done",replica="api-1:10907"} 40"#,
            r#"crucible_tasks_finished_total{status="failed",replica="api-1:10907"} 2"#,
            r#"crucible_tasks_requeued_total{replica="api-1:10907"} 5"#,
            r#"crucible_result_cache_total{outcome="coalesced",replica="api-1:10907"} 8"#,
            r#"crucible_reference_cache_total{outcome="miss",replica="api-1:10907"} 10"#,
            r#"crucible_queue_depth{priority="low",replica="api-1:10907"} 3"#,
            r#"crucible_tasks_running{replica="api-1:10907"} 4"#,
        ] {
            assert!(t.contains(line), "missing {line:?} in\n{t}");
        }
    }

    #[test]
    fn workers_are_counted_by_state_with_every_state_present() {
        let q = queue();
        let worker = |state: &str| -> WorkerInfo {
            serde_json::from_value(serde_json::json!({
                "worker_id": "w", "node": "n", "device": {"kind": "cpu", "name": "x"},
                "device_index": null, "state": state, "current_task": null, "tasks_done": 0,
                "started_at": "2026-01-01T00:00:00Z", "last_heartbeat": "2026-01-01T00:00:00Z"
            }))
            .expect("a worker")
        };
        let workers = [worker("idle"), worker("idle"), worker("busy")];
        let t = text(&families(Some((&q, &workers)), "r"));
        assert!(
            t.contains(r#"crucible_workers{state="idle",replica="r"} 2"#),
            "{t}"
        );
        assert!(
            t.contains(r#"crucible_workers{state="busy",replica="r"} 1"#),
            "{t}"
        );
        assert!(
            t.contains(r#"crucible_workers{state="lost",replica="r"} 0"#),
            "{t}"
        );
        assert_eq!(t.matches("crucible_workers{").count(), WORKER_STATES.len());
    }

    #[test]
    fn a_broker_that_does_not_answer_leaves_only_broker_up_at_zero() {
        let families = families(None, "r");
        assert_eq!(families.len(), 1);
        assert_eq!(
            text(&families),
            "# HELP crucible_broker_up 1 when the broker answered this scrape, 0 when it did not \
             (cluster-wide, from the broker; every API replica exports it: aggregate with max \
             without (instance, replica))\n# TYPE crucible_broker_up gauge\n\
             crucible_broker_up{replica=\"r\"} 0\n"
        );
    }
}
