//! Prometheus plumbing the binaries share: `crucible_build_info`, which every process exports
//! once (docs/METRICS.md), and the endpoint a standalone worker serves its registry on. The
//! API serves its metrics on its own router; `crucible up` adds its workers' to the API's
//! registry, so it opens no second port.

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::{Encoder, IntGauge, Opts, Registry, TextEncoder};
use tokio_util::sync::CancellationToken;

/// Which binary a process is: the `component` label of `crucible_build_info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// `crucible-api`, one API replica.
    Api,
    /// `crucible-worker`, one worker process.
    Worker,
    /// `crucible up`: the API and its workers in one process.
    Up,
}

impl Component {
    /// The label value (`api`, `worker`, `up`).
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Api => "api",
            Component::Worker => "worker",
            Component::Up => "up",
        }
    }
}

/// The content type of Prometheus' text format.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// `crucible_build_info{version,component}`, always 1: which build a process runs, to join on
/// or count by version during a rolling upgrade.
pub fn build_info(component: Component) -> IntGauge {
    let gauge = IntGauge::with_opts(
        Opts::new(
            "crucible_build_info",
            "Always 1: the version and component of this process",
        )
        .const_label("version", env!("CARGO_PKG_VERSION"))
        .const_label("component", component.as_str()),
    )
    .expect("valid metric");
    gauge.set(1);
    gauge
}

/// `registry` in Prometheus' text format.
pub fn encode(registry: &Registry) -> String {
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .expect("text encoding of gathered metrics never fails");
    String::from_utf8(buf).unwrap_or_default()
}

/// Serves `registry` at `GET /metrics` on `listener` until `shutdown` is cancelled: a worker's
/// metrics port (nothing else is served there).
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    registry: Registry,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(render))
        .with_state(registry);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

async fn render(State(registry): State<Registry>) -> impl IntoResponse {
    ([(CONTENT_TYPE, TEXT_CONTENT_TYPE)], encode(&registry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_names_the_version_and_component() {
        let registry = Registry::new();
        registry
            .register(Box::new(build_info(Component::Worker)))
            .unwrap();
        let text = encode(&registry);
        assert!(text.contains("# TYPE crucible_build_info gauge"), "{text}");
        assert!(
            text.contains(&format!(
                r#"crucible_build_info{{component="worker",version="{}"}} 1"#,
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
    }

    #[tokio::test]
    async fn serves_the_registry_at_metrics_until_shutdown() {
        let registry = Registry::new();
        registry
            .register(Box::new(build_info(Component::Api)))
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve_metrics(listener, registry, shutdown.clone()));
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap();
        let resp = client
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()[CONTENT_TYPE], TEXT_CONTENT_TYPE);
        assert!(resp.text().await.unwrap().contains(r#"component="api""#));
        let other = client.get(format!("http://{addr}/")).send().await.unwrap();
        assert_eq!(other.status(), 404, "one route only");
        shutdown.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(10), server)
            .await
            .expect("the server stops on shutdown")
            .unwrap()
            .unwrap();
    }
}
