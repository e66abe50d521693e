//! The API protects itself, against a real `crucible-api` and redis-server: slow-header and
//! idle clients are closed after the header timeout, slow bodies are cut after the body
//! timeout, a connection flood beyond the cap leaves `/health` answering and never cuts a
//! request in flight, concurrent bodies
//! beyond the byte budget get 503 with `Retry-After`, the queue's byte budget gives 429, and
//! Redis at `maxmemory` gives 503 `BROKER_OUT_OF_MEMORY`. Each test probes `/health` on fresh
//! connections meanwhile and writes the latencies it measured to its log.

use crucible_tests::*;
use serde_json::{Value, json};
use std::io::Write as _;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Margin on every bound, for CI's two loaded cores.
const SLACK: Duration = Duration::from_secs(15);

struct Served {
    port: u16,
    api: Proc,
    redis: Redis,
    logs: std::path::PathBuf,
}

async fn serve(name: &str, env: &[(&str, &str)]) -> Served {
    let logs = log_dir(name);
    let redis = Redis::start(&logs).await;
    let mut vars = service_env(&redis.url, name);
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let port = free_port();
    let api = Proc::spawn("api", api_command(port, &vars), &logs);
    Api::new(port).wait_ready().await;
    Served {
        port,
        api,
        redis,
        logs,
    }
}

impl Served {
    /// `/health` on a fresh connection: its latency, or why it failed.
    async fn health(&self) -> Result<Duration, String> {
        let start = Instant::now();
        let exchange = async {
            let mut s = TcpStream::connect(("127.0.0.1", self.port)).await?;
            s.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .await?;
            let mut out = Vec::new();
            s.read_to_end(&mut out).await?;
            Ok::<_, std::io::Error>(out)
        };
        match tokio::time::timeout(Duration::from_secs(5), exchange).await {
            Ok(Ok(out)) if out.starts_with(b"HTTP/1.1 ") => Ok(start.elapsed()),
            Ok(Ok(out)) => Err(format!("answer {:?}", String::from_utf8_lossy(&out))),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer within 5 s".to_owned()),
        }
    }

    /// Probes `/health` `n` times, asserts every probe answered, and logs the latencies.
    async fn health_answers(&self, n: usize, during: &str) {
        let mut latencies = Vec::with_capacity(n);
        for _ in 0..n {
            match self.health().await {
                Ok(t) => latencies.push(t),
                Err(e) => panic!("/health failed during {during}: {e}"),
            }
        }
        latencies.sort();
        self.log(&format!(
            "/health during {during}: {n} probes, median {:?}, max {:?}",
            latencies[n / 2],
            latencies[n - 1]
        ));
    }

    fn log(&self, line: &str) {
        eprintln!("{line}");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.logs.join("measured.log"))
            .expect("measured.log");
        writeln!(f, "{line}").expect("write measured.log");
    }

    fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.api.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// The API's descriptors that are connections accepted on its port: what the cap bounds.
    /// Counted this way, not as all descriptors, because the Redis pool opens connections of
    /// its own as requests arrive.
    fn accepted_connections(&self) -> usize {
        let pid = self.api.pid();
        let port = format!(":{:04X}", self.port);
        let inodes: std::collections::HashSet<String> = ["tcp", "tcp6"]
            .iter()
            .filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok())
            .flat_map(|table| {
                table
                    .lines()
                    .skip(1)
                    .filter_map(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        // local address, state (0A: listening), inode
                        (f.len() > 9 && f[1].ends_with(&port) && f[3] != "0A")
                            .then(|| f[9].to_owned())
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .filter_map(|t| {
                        let t = t.to_string_lossy().into_owned();
                        Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                    })
                    .filter(|inode| inodes.contains(inode))
                    .count()
            })
            .unwrap_or(0)
    }

    fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.api.pid()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

/// Opens `n` connections to `port`, each having sent `prefix`.
async fn open_connections(port: u16, n: usize, prefix: &[u8]) -> Vec<TcpStream> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        if !prefix.is_empty() {
            s.write_all(prefix).await.expect("send prefix");
        }
        out.push(s);
    }
    out
}

/// What the server sent before it closed `s`, or None if it kept it open past `deadline`.
async fn closed_by_server(s: &mut TcpStream, deadline: Instant) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let read = tokio::time::timeout_at(deadline.into(), async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok().map(|()| got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_and_idle_clients_are_closed_after_the_header_timeout() {
    let s = serve("shed-headers", &[("CRUCIBLE_HEADER_TIMEOUT_MS", "1000")]).await;
    let start = Instant::now();
    let mut slow = open_connections(s.port, 200, b"GET /health HT").await;
    // A keep-alive connection that had its answer and then says nothing.
    let mut idle = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    s.health_answers(10, "200 slow-header connections").await;

    let deadline = start + Duration::from_secs(1) + SLACK;
    for (i, conn) in slow.iter_mut().enumerate() {
        assert!(
            closed_by_server(conn, deadline).await.is_some(),
            "slow-header connection {i} still open {:?} after it opened",
            start.elapsed()
        );
    }
    s.log(&format!(
        "200 slow-header connections all closed by the server {:?} after they opened (bound 1 s)",
        start.elapsed()
    ));
    let answered = closed_by_server(&mut idle, deadline)
        .await
        .expect("the idle keep-alive connection is closed after the header timeout");
    assert!(
        answered.starts_with(b"HTTP/1.1 "),
        "its request was answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_get_408_after_the_body_timeout() {
    let s = serve("shed-bodies", &[("CRUCIBLE_BODY_TIMEOUT_MS", "1000")]).await;
    let start = Instant::now();
    let head = b"POST /evaluate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
                 Content-Length: 1000\r\n\r\n{\"reference_code\": \"";
    let mut slow = open_connections(s.port, 50, head).await;
    s.health_answers(10, "50 slow-body connections").await;
    let deadline = start + Duration::from_secs(1) + SLACK;
    for (i, conn) in slow.iter_mut().enumerate() {
        let answer = closed_by_server(conn, deadline)
            .await
            .unwrap_or_else(|| panic!("slow-body connection {i} still open"));
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(text.contains("REQUEST_TIMEOUT"), "{text}");
    }
    s.log(&format!(
        "50 slow-body connections answered 408 and closed {:?} after they opened (bound 1 s)",
        start.elapsed()
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_beyond_the_cap_leaves_health_answering() {
    let s = serve(
        "shed-flood",
        &[
            ("CRUCIBLE_MAX_CONNECTIONS", "100"),
            ("CRUCIBLE_HEADER_TIMEOUT_MS", "120000"),
        ],
    )
    .await;
    let before = s.open_fds();
    let flood = open_connections(s.port, 400, b"").await;
    s.health_answers(20, "a flood of 400 idle connections, cap 100")
        .await;
    let (during, accepted) = (s.open_fds(), s.accepted_connections());
    s.log(&format!(
        "open descriptors of the API: {before} before, {during} with 400 idle connections, \
         {accepted} of them accepted connections"
    ));
    assert!(accepted > 0, "the count sees the flood's connections");
    // The cap plus its shed margin.
    assert!(accepted <= 113, "{accepted} accepted connections held open");
    // What the replica says it shed, as an operator's Prometheus sees it.
    let api = Api::new(s.port);
    let text = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .unwrap();
    let sample = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} missing from /metrics"))
    };
    let closed = sample(r#"crucible_http_connections_shed_total{how="closed_oldest"}"#);
    let refused = sample(r#"crucible_http_connections_shed_total{how="refused"}"#);
    let open = sample("crucible_http_connections ");
    s.log(&format!(
        "/metrics: {closed} closed oldest, {refused} refused, {open} connections open"
    ));
    assert!(closed > 0.0, "the flood closed the oldest connections");
    // Idle connections make room as fast as they come: none is refused. Before, the closed
    // ones still held their places when the next arrived, and new sockets (a probe among
    // them) were closed unread.
    assert_eq!(refused, 0.0, "connections refused during an idle flood");
    assert!(open <= 113.0, "{open} connections counted open");
    drop(flood);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_on_the_oldest_connection_survives_a_flood_past_the_cap() {
    let s = serve(
        "shed-in-flight",
        &[
            ("CRUCIBLE_MAX_CONNECTIONS", "100"),
            ("CRUCIBLE_HEADER_TIMEOUT_MS", "120000"),
        ],
    )
    .await;
    // The oldest connection, kept alive after a first answer: its second request has begun
    // (half its headers are in) when the flood comes. Before, hyper took it for idle between
    // requests and the cap closed it at once, mid-request.
    let mut arriving = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    arriving
        .write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    arriving.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    arriving.write_all(b"GET /health HT").await.unwrap();
    let flood = open_connections(s.port, 400, b"").await;
    s.health_answers(20, "a flood of 400 idle connections past a cap of 100")
        .await;
    arriving
        .write_all(b"TP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .expect("the rest of the request is taken");
    let answer = closed_by_server(&mut arriving, Instant::now() + SLACK)
        .await
        .expect("answered and closed");
    // The rest of the first answer, then the second.
    let text = String::from_utf8_lossy(&answer);
    assert_eq!(
        text.matches("HTTP/1.1 200").count(),
        1,
        "the second request was answered: {text:?}"
    );
    s.log("a request arriving on the oldest connection was answered through a flood of 400");
    drop(flood);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_bodies_beyond_the_byte_budget_get_503_with_retry_after() {
    let budget = 8 << 20;
    let s = serve(
        "shed-body-bytes",
        &[("CRUCIBLE_BODY_BYTES_IN_FLIGHT", &budget.to_string())],
    )
    .await;
    let three_mib = 3 << 20;
    let head = format!(
        "POST /evaluate/batch HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Content-Length: {three_mib}\r\n\r\n{{\"tasks\": ["
    );
    // Two bodies of 3 MiB arriving slowly hold 6 of the 8 MiB.
    let held = open_connections(s.port, 2, head.as_bytes()).await;
    let api = Api::new(s.port);
    let big = format!(
        "{{\"tasks\": [], \"padding\": \"{}\"}}",
        "x".repeat(three_mib - 32)
    );
    let post = |body: String| {
        let api = api.clone();
        async move {
            api.http
                .post(format!("{}/evaluate/batch", api.base))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .expect("send")
        }
    };
    let refused = eventually("a third 3 MiB body to be refused", SLACK, || {
        let big = big.clone();
        async move {
            let r = post(big).await;
            (r.status() == 503).then_some(r)
        }
    })
    .await;
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "OVERLOADED", "{body}");
    s.health_answers(10, "the body budget spent").await;

    drop(held);
    let status = eventually("the budget to come back", SLACK, || {
        let big = big.clone();
        async move {
            let r = post(big).await;
            (r.status() != 503).then_some(r.status().as_u16())
        }
    })
    .await;
    assert_eq!(status, 422, "the body is read and judged once admitted");

    // Memory after big bodies: measured, not asserted (the allocator decides what it returns).
    let rss_before = s.rss_kib();
    for _ in 0..10 {
        let rounds: Vec<_> = (0..2).map(|_| post(big.clone())).collect();
        for r in rounds {
            r.await;
        }
    }
    s.log(&format!(
        "API RSS: {rss_before} KiB before, {} KiB after 20 bodies of 3 MiB (budget 8 MiB)",
        s.rss_kib()
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_byte_budget_gives_429() {
    let s = serve("shed-queue-bytes", &[("CRUCIBLE_QUEUE_CAP_BYTES", "20000")]).await;
    let api = Api::new(s.port);
    let mut refused = None;
    for i in 0..20 {
        let padding = "#".repeat(4000);
        let (status, body) = api
            .post(
                "/evaluate",
                json!({
                    "reference_code": problem("elementwise_relu"),
                    "kernel_code": format!("class ModelNew: pass  # {i} {padding}"),
                }),
            )
            .await;
        if status == 429 {
            refused = Some((i, body));
            break;
        }
        assert!(status < 300, "{status} {body}");
    }
    let (i, body) = refused.expect("a 429 within 20 submissions of ~5 KB under 20 KB");
    assert_eq!(body["code"], "QUEUE_FULL", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("bytes"),
        "{body}"
    );
    s.log(&format!("queue byte budget 20000: submission {i} refused"));
    s.health_answers(5, "a queue at its byte budget").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_at_maxmemory_gives_503_not_500() {
    let s = serve("shed-redis-oom", &[]).await;
    let api = Api::new(s.port);
    let client = redis::Client::open(s.redis.url.as_str()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let set = |bytes: &'static str| {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET").arg("maxmemory").arg(bytes);
        cmd
    };
    let () = set("1").query_async(&mut c).await.unwrap();
    let request = json!({
        "reference_code": problem("elementwise_relu"),
        "kernel_code": "class ModelNew: pass  # oom",
    });
    let response = api
        .http
        .post(format!("{}/evaluate", api.base))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "BROKER_OUT_OF_MEMORY", "{body}");
    s.health_answers(5, "Redis at maxmemory").await;

    let () = set("0").query_async(&mut c).await.unwrap();
    let (status, body) = api.post("/evaluate", request).await;
    assert!(
        status < 300,
        "accepted once Redis has room: {status} {body}"
    );
}
