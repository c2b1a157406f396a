//! The metrics' tests: every family registered and encoded, labels bounded, the histogram's buckets, and the HTTP endpoint over a real socket.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The value of the sample line `name{labels} value` (labels in encoding order).
fn sample(text: &str, series: &str) -> Option<String> {
    text.lines().find_map(|line| {
        line.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .map(|v| v.to_string())
    })
}

fn assert_sample(text: &str, series: &str, want: &str) {
    assert_eq!(
        sample(text, series).as_deref(),
        Some(want),
        "series {series} in:\n{text}"
    );
}

#[test]
fn fresh_registry_has_help_type_and_eof() {
    let text = HubMetrics::new().encode();
    for (name, ty) in [
        ("agentwire_hub_open_connections", "gauge"),
        ("agentwire_hub_connections", "counter"),
        ("agentwire_hub_handshakes", "counter"),
        ("agentwire_hub_agents", "gauge"),
        ("agentwire_hub_agent_removals", "counter"),
        ("agentwire_hub_messages", "counter"),
        ("agentwire_hub_message_bytes", "counter"),
        ("agentwire_hub_errors", "counter"),
        ("agentwire_hub_dropped_messages", "counter"),
        ("agentwire_hub_queued_messages", "gauge"),
        ("agentwire_hub_request_duration_seconds", "histogram"),
        ("agentwire_hub_zero_rtt", "counter"),
        ("agentwire_hub_build", "info"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {ty}\n")),
            "missing {name} {ty} in:\n{text}"
        );
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no help for {name}"
        );
    }
    assert!(text.ends_with("# EOF\n"));
    assert_sample(&text, "agentwire_hub_queued_messages", "0");
    assert_sample(
        &text,
        &format!(
            "agentwire_hub_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        ),
        "1",
    );
}

#[test]
fn metric_family_names_are_unique() {
    let text = HubMetrics::new().encode();
    let mut names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let before = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(before, names.len(), "duplicate families in:\n{text}");
}

#[test]
fn connections_gauge_and_counter() {
    let m = HubMetrics::new();
    m.connection_opened(transport::QUIC);
    m.connection_opened(transport::QUIC);
    m.connection_opened(transport::WEBSOCKET);
    m.connection_closed(transport::QUIC);
    let text = m.encode();
    assert_sample(
        &text,
        "agentwire_hub_open_connections{transport=\"quic\"}",
        "1",
    );
    assert_sample(
        &text,
        "agentwire_hub_open_connections{transport=\"websocket\"}",
        "1",
    );
    assert_sample(
        &text,
        "agentwire_hub_connections_total{transport=\"quic\"}",
        "2",
    );
    assert_sample(
        &text,
        "agentwire_hub_connections_total{transport=\"websocket\"}",
        "1",
    );
}

#[test]
fn connection_guard_closes_on_drop() {
    let m = HubMetrics::new();
    let guard = m.connection_guard(transport::UNIX);
    assert_sample(
        &m.encode(),
        "agentwire_hub_open_connections{transport=\"unix\"}",
        "1",
    );
    drop(guard);
    let text = m.encode();
    assert_sample(
        &text,
        "agentwire_hub_open_connections{transport=\"unix\"}",
        "0",
    );
    assert_sample(
        &text,
        "agentwire_hub_connections_total{transport=\"unix\"}",
        "1",
    );
}

#[test]
fn handshakes_by_transport_and_outcome() {
    let m = HubMetrics::new();
    m.handshake(transport::QUIC, outcome::ACCEPTED);
    m.handshake(transport::QUIC, outcome::ACCEPTED);
    m.handshake(transport::QUIC, outcome::REJECTED);
    m.handshake(transport::HTTP2, outcome::FAILED);
    let text = m.encode();
    assert_sample(
        &text,
        "agentwire_hub_handshakes_total{transport=\"quic\",outcome=\"accepted\"}",
        "2",
    );
    assert_sample(
        &text,
        "agentwire_hub_handshakes_total{transport=\"quic\",outcome=\"rejected\"}",
        "1",
    );
    assert_sample(
        &text,
        "agentwire_hub_handshakes_total{transport=\"http2\",outcome=\"failed\"}",
        "1",
    );
}

#[test]
fn agents_gauge_and_removals() {
    let m = HubMetrics::new();
    m.agent_registered(transport::QUIC);
    m.agent_registered(transport::QUIC);
    m.agent_registered(transport::UNIX);
    m.agent_removed(transport::QUIC, "timeout");
    m.agent_removed(transport::UNIX, "disconnect");
    let text = m.encode();
    assert_sample(&text, "agentwire_hub_agents{transport=\"quic\"}", "1");
    assert_sample(&text, "agentwire_hub_agents{transport=\"unix\"}", "0");
    assert_sample(
        &text,
        "agentwire_hub_agent_removals_total{reason=\"timeout\"}",
        "1",
    );
    assert_sample(
        &text,
        "agentwire_hub_agent_removals_total{reason=\"disconnect\"}",
        "1",
    );
}

#[test]
fn messages_and_bytes_by_direction_kind_priority() {
    let m = HubMetrics::new();
    m.message_in("request", "high", 100);
    m.message_in("request", "high", 50);
    m.message_out("response", "normal", 7);
    let text = m.encode();
    let in_labels = "{direction=\"in\",kind=\"request\",priority=\"high\"}";
    let out_labels = "{direction=\"out\",kind=\"response\",priority=\"normal\"}";
    assert_sample(
        &text,
        &format!("agentwire_hub_messages_total{in_labels}"),
        "2",
    );
    assert_sample(
        &text,
        &format!("agentwire_hub_message_bytes_total{in_labels}"),
        "150",
    );
    assert_sample(
        &text,
        &format!("agentwire_hub_messages_total{out_labels}"),
        "1",
    );
    assert_sample(
        &text,
        &format!("agentwire_hub_message_bytes_total{out_labels}"),
        "7",
    );
    assert_eq!(
        sample(
            &text,
            "agentwire_hub_messages_total{direction=\"out\",kind=\"request\",priority=\"high\"}"
        ),
        None
    );
}

#[test]
fn errors_and_drops() {
    let m = HubMetrics::new();
    m.error("unknown_agent");
    m.error("unknown_agent");
    m.error("bad_frame");
    m.dropped("queue_full");
    let text = m.encode();
    assert_sample(
        &text,
        "agentwire_hub_errors_total{code=\"unknown_agent\"}",
        "2",
    );
    assert_sample(&text, "agentwire_hub_errors_total{code=\"bad_frame\"}", "1");
    assert_sample(
        &text,
        "agentwire_hub_dropped_messages_total{reason=\"queue_full\"}",
        "1",
    );
}

#[test]
fn queue_depth_moves_both_ways() {
    let m = HubMetrics::new();
    m.queue_depth_add(5);
    m.queue_depth_add(-2);
    assert_sample(&m.encode(), "agentwire_hub_queued_messages", "3");
}

#[test]
fn request_latency_histogram_buckets() {
    let m = HubMetrics::new();
    m.request_latency(0.000_04); // below the first bucket (50 µs)
    m.request_latency(0.000_3); // 400 µs bucket
    m.request_latency(100.0); // +Inf only
    m.request_latency(f64::NAN); // ignored
    m.request_latency(-1.0); // ignored
    let text = m.encode();
    let name = "agentwire_hub_request_duration_seconds";
    assert_sample(&text, &format!("{name}_count"), "3");
    assert_sample(&text, &format!("{name}_bucket{{le=\"0.00005\"}}"), "1");
    assert_sample(&text, &format!("{name}_bucket{{le=\"0.0002\"}}"), "1");
    assert_sample(&text, &format!("{name}_bucket{{le=\"0.0004\"}}"), "2");
    assert_sample(&text, &format!("{name}_bucket{{le=\"+Inf\"}}"), "3");
    let buckets = text
        .lines()
        .filter(|l| l.starts_with(&format!("{name}_bucket")))
        .count();
    assert_eq!(buckets, usize::from(LATENCY_BUCKET_COUNT) + 1, "{text}");
    let sum: f64 = sample(&text, &format!("{name}_sum"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    assert!((sum - 100.000_34).abs() < 1e-9, "sum {sum}");
}

#[test]
fn zero_rtt_results() {
    let m = HubMetrics::new();
    m.zero_rtt(true);
    m.zero_rtt(true);
    m.zero_rtt(false);
    let text = m.encode();
    assert_sample(
        &text,
        "agentwire_hub_zero_rtt_total{result=\"accepted\"}",
        "2",
    );
    assert_sample(
        &text,
        "agentwire_hub_zero_rtt_total{result=\"rejected\"}",
        "1",
    );
}

#[test]
fn clones_share_state_and_instances_do_not() {
    let a = HubMetrics::default();
    let b = a.clone();
    b.error("x");
    assert_sample(&a.encode(), "agentwire_hub_errors_total{code=\"x\"}", "1");
    assert_eq!(
        sample(
            &HubMetrics::new().encode(),
            "agentwire_hub_errors_total{code=\"x\"}"
        ),
        None
    );
}

#[test]
fn register_with_adds_prefixed_metrics() {
    let m = HubMetrics::new();
    let extra = Counter::<u64>::default();
    m.register_with(|r| r.register("extra", "An extra counter", extra.clone()));
    extra.inc_by(4);
    assert_sample(&m.encode(), "agentwire_hub_extra_total", "4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_recording_is_consistent() {
    let m = HubMetrics::new();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let m = m.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..1000 {
                m.message_in("event", "low", 3);
            }
        }));
    }
    for t in tasks {
        assert!(t.await.is_ok());
    }
    let text = m.encode();
    let labels = "{direction=\"in\",kind=\"event\",priority=\"low\"}";
    assert_sample(
        &text,
        &format!("agentwire_hub_messages_total{labels}"),
        "8000",
    );
    assert_sample(
        &text,
        &format!("agentwire_hub_message_bytes_total{labels}"),
        "24000",
    );
}

/// Parsed raw HTTP/1.1 response.
struct RawResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one raw HTTP/1.1 request with `Connection: close` and reads the
/// whole response (bounded by a timeout so a broken server cannot hang CI).
async fn raw_request(addr: SocketAddr, method: &str, path: &str) -> RawResponse {
    let fut = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(req.as_bytes()).await.expect("write");
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await.expect("read");
        buf
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("request timed out");
    let text = String::from_utf8(buf).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("header/body separator");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"), "{status_line}");
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    RawResponse {
        status,
        headers,
        body: body.to_string(),
    }
}

async fn start() -> (HubMetrics, SocketAddr, JoinHandle<std::io::Result<()>>) {
    let metrics = HubMetrics::new();
    let (addr, handle) =
        spawn_metrics_server(SocketAddr::from(([127, 0, 0, 1], 0)), metrics.clone())
            .await
            .expect("bind metrics server");
    assert_ne!(addr.port(), 0);
    (metrics, addr, handle)
}

#[tokio::test]
async fn http_get_metrics_returns_openmetrics() {
    let (metrics, addr, handle) = start().await;
    metrics.connection_opened(transport::QUIC);
    metrics.message_out("response", "normal", 42);
    metrics.zero_rtt(false);

    let resp = raw_request(addr, "GET", "/metrics").await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-type"), Some(OPENMETRICS_CONTENT_TYPE));
    for name in [
        "agentwire_hub_open_connections",
        "agentwire_hub_connections_total",
        "agentwire_hub_handshakes",
        "agentwire_hub_agents",
        "agentwire_hub_messages_total",
        "agentwire_hub_message_bytes_total",
        "agentwire_hub_errors",
        "agentwire_hub_dropped_messages",
        "agentwire_hub_queued_messages",
        "agentwire_hub_request_duration_seconds",
        "agentwire_hub_zero_rtt_total",
    ] {
        assert!(
            resp.body.contains(name),
            "missing {name} in:\n{}",
            resp.body
        );
    }
    assert_sample(
        &resp.body,
        "agentwire_hub_message_bytes_total{direction=\"out\",kind=\"response\",priority=\"normal\"}",
        "42",
    );
    assert!(resp.body.ends_with("# EOF\n"));

    // Query strings are ignored.
    let resp = raw_request(addr, "GET", "/metrics?x=1").await;
    assert_eq!(resp.status, 200);
    handle.abort();
}

#[tokio::test]
async fn http_root_not_found_and_method_not_allowed() {
    let (_metrics, addr, handle) = start().await;

    let root = raw_request(addr, "GET", "/").await;
    assert_eq!(root.status, 200);
    assert!(root.body.contains("/metrics"), "{}", root.body);
    assert_eq!(root.body.lines().count(), 1);

    let nope = raw_request(addr, "GET", "/nope").await;
    assert_eq!(nope.status, 404);

    let post = raw_request(addr, "POST", "/metrics").await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET"));

    let delete = raw_request(addr, "DELETE", "/nope").await;
    assert_eq!(delete.status, 405);
    handle.abort();
}

#[tokio::test]
async fn http_garbage_does_not_kill_server() {
    let (_metrics, addr, handle) = start().await;
    let fut = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(b"\x00\x01 not http at all\r\n\r\n")
            .await
            .expect("write");
        let mut buf = Vec::new();
        // The server answers 400 or just closes; either way it must not hang.
        let _ = stream.read_to_end(&mut buf).await;
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("garbage request timed out");
    let resp = raw_request(addr, "GET", "/metrics").await;
    assert_eq!(resp.status, 200);
    assert!(!handle.is_finished());
    handle.abort();
}

#[tokio::test]
async fn serve_metrics_on_own_listener() {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let handle = tokio::spawn(serve_metrics(listener, HubMetrics::new()));
    let resp = raw_request(addr, "GET", "/metrics").await;
    assert_eq!(resp.status, 200);
    handle.abort();
}
