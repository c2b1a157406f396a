//! Hub observability: Prometheus/OpenMetrics metrics and the `/metrics` HTTP endpoint.
//!
//! # What this module owns
//!
//! * [`HubMetrics`], a cheaply clonable handle holding one
//!   [`prometheus_client`] [`Registry`] (prefix `agentwire_hub`) and the handles of
//!   every hub metric: connections, handshakes, agents, messages and bytes,
//!   errors, drops, queue depth, request latency and QUIC 0-RTT outcomes.
//! * [`serve_metrics`] / [`spawn_metrics_server`], a tiny HTTP/1.1 server
//!   (hyper 1) that exposes the registry as OpenMetrics text on `GET /metrics`.
//!
//! # What it must not do
//!
//! * No routing, no agent bookkeeping and no I/O other than the `/metrics`
//!   endpoint: the hub calls the recording methods, this module only counts.
//! * No dependency on the protocol crate: message kinds, priorities and error
//!   codes arrive as `&'static str` names (`kind.name()`, `priority.name()`,
//!   `code.name()`).
//! * No per-agent (or other unbounded) labels: a hub may serve thousands of
//!   agents and every label combination is a time series that lives forever.
//!   Label values are `&'static str`, so they come from a small, fixed set.
//! * No lock, blocking or allocation on the hot path: the hub records messages
//!   through [`MessageTable`]s resolved once (two atomic adds), and request
//!   latency in a histogram of atomic buckets. Other recording methods are an
//!   atomic add after a read-locked hash lookup inside [`Family`]. The registry
//!   mutex is taken only by [`HubMetrics::encode`] and
//!   [`HubMetrics::register_with`], never by a recording method.
//! * No panics on network input: the HTTP server answers every request with a
//!   status and logs connection errors through `tracing`.

use agentwire_sync::LockExt;
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Prefix of every metric registered by [`HubMetrics::new`].
pub const METRIC_PREFIX: &str = "agentwire_hub";

/// Content type of the `/metrics` response (OpenMetrics text format 1.0.0).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Lower bound of the first `request_duration_seconds` bucket: 50 µs.
pub const LATENCY_BUCKET_START_SECONDS: f64 = 50e-6;
/// Growth factor between consecutive `request_duration_seconds` buckets.
pub const LATENCY_BUCKET_FACTOR: f64 = 2.0;
/// Number of finite `request_duration_seconds` buckets (50 µs .. ~26 s, plus `+Inf`).
pub const LATENCY_BUCKET_COUNT: u16 = 20;

/// How long the metrics server waits for a client's request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Canonical `transport` label values; pass these to the connection, handshake
/// and agent methods so every call site spells a transport the same way.
pub mod transport {
    /// QUIC (the primary transport).
    pub const QUIC: &str = "quic";
    /// HTTP/2.
    pub const HTTP2: &str = "http2";
    /// WebSocket.
    pub const WEBSOCKET: &str = "websocket";
    /// Unix domain socket.
    pub const UNIX: &str = "unix";
}

/// Canonical `outcome` label values for [`HubMetrics::handshake`].
pub mod outcome {
    /// The peer completed the handshake and was admitted.
    pub const ACCEPTED: &str = "accepted";
    /// The hub refused the peer (authentication, policy, version, capacity).
    pub const REJECTED: &str = "rejected";
    /// The handshake did not complete (I/O error, timeout, malformed frame).
    pub const FAILED: &str = "failed";
}

/// Message direction label values used in `messages_total` / `message_bytes_total`.
pub mod direction {
    /// Received by the hub from an agent.
    pub const IN: &str = "in";
    /// Sent by the hub to an agent.
    pub const OUT: &str = "out";
}

/// Label set `{transport}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransportLabels {
    transport: &'static str,
}

/// Label set `{transport, outcome}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandshakeLabels {
    transport: &'static str,
    outcome: &'static str,
}

/// Label set `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Label set `{direction, kind, priority}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MessageLabels {
    direction: &'static str,
    kind: &'static str,
    priority: &'static str,
}

/// Label set `{code}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: &'static str,
}

/// Label set `{result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// A histogram recorded with atomic adds only. prometheus-client's `Histogram` takes a write
/// lock per observation, which every answered request would contend on (the hub's message
/// path has no hub-wide lock). Buckets hold non-cumulative counts, as prometheus-client's do;
/// the encoder accumulates them.
#[derive(Clone, Debug)]
struct AtomicHistogram {
    inner: Arc<AtomicHistogramInner>,
}

#[derive(Debug)]
struct AtomicHistogramInner {
    /// Upper bounds, ending with `f64::MAX` (`+Inf` when encoded).
    bounds: Vec<f64>,
    counts: Vec<AtomicU64>,
    count: AtomicU64,
    /// The sum's `f64` bits.
    sum: AtomicU64,
}

impl AtomicHistogram {
    /// The `request_duration_seconds` buckets: 50 µs × 2ⁿ, n = 0..19, then `+Inf`.
    fn latency() -> Self {
        let bounds: Vec<f64> = exponential_buckets(
            LATENCY_BUCKET_START_SECONDS,
            LATENCY_BUCKET_FACTOR,
            LATENCY_BUCKET_COUNT,
        )
        .chain(std::iter::once(f64::MAX))
        .collect();
        AtomicHistogram {
            inner: Arc::new(AtomicHistogramInner {
                counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
                bounds,
                count: AtomicU64::new(0),
                sum: AtomicU64::new(0f64.to_bits()),
            }),
        }
    }

    fn observe(&self, v: f64) {
        let h = &self.inner;
        let i = h.bounds.partition_point(|b| *b < v);
        if let Some(c) = h.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        let _ = h
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }
}

impl TypedMetric for AtomicHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for AtomicHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        let h = &self.inner;
        let buckets: Vec<(f64, u64)> = h
            .bounds
            .iter()
            .zip(&h.counts)
            .map(|(b, c)| (*b, c.load(Ordering::Relaxed)))
            .collect();
        let sum = f64::from_bits(h.sum.load(Ordering::Relaxed));
        encoder.encode_histogram::<NoLabelSet>(sum, h.count.load(Ordering::Relaxed), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Message counters resolved once for every kind × priority of one direction (see
/// [`HubMetrics::message_table`]): recording is two atomic adds.
#[derive(Clone, Debug)]
pub struct MessageTable {
    cells: Vec<(Counter, Counter)>,
    priorities: usize,
}

impl MessageTable {
    /// Counts one message of kind number `kind` and priority number `priority` (indices into
    /// the lists the table was made from) carrying `bytes` bytes. Out-of-range indices count
    /// nothing.
    pub fn record(&self, kind: usize, priority: usize, bytes: u64) {
        if priority >= self.priorities {
            return;
        }
        if let Some((messages, total)) = self.cells.get(kind * self.priorities + priority) {
            messages.inc();
            total.inc_by(bytes);
        }
    }
}

/// Shared state behind [`HubMetrics`].
struct Inner {
    registry: Mutex<Registry>,
    connections: Family<TransportLabels, Gauge>,
    connections_total: Family<TransportLabels, Counter>,
    handshakes: Family<HandshakeLabels, Counter>,
    agents: Family<TransportLabels, Gauge>,
    agent_removals: Family<ReasonLabels, Counter>,
    messages: Family<MessageLabels, Counter>,
    message_bytes: Family<MessageLabels, Counter>,
    errors: Family<CodeLabels, Counter>,
    dropped: Family<ReasonLabels, Counter>,
    queued_messages: Gauge,
    queued_bytes: Gauge,
    request_duration: AtomicHistogram,
    zero_rtt: Family<ResultLabels, Counter>,
}

/// Handle to the hub's metrics. Cloning is cheap (one `Arc`); every clone
/// records into the same registry.
///
/// Exposed metric families (all prefixed `agentwire_hub_`):
///
/// | name | type | labels |
/// | --- | --- | --- |
/// | `open_connections` | gauge | `transport` |
/// | `connections_total` | counter | `transport` |
/// | `handshakes_total` | counter | `transport`, `outcome` |
/// | `agents` | gauge | `transport` |
/// | `agent_removals_total` | counter | `reason` |
/// | `messages_total` | counter | `direction`, `kind`, `priority` |
/// | `message_bytes_total` | counter | `direction`, `kind`, `priority` |
/// | `errors_total` | counter | `code` |
/// | `dropped_messages_total` | counter | `reason` |
/// | `queued_messages` | gauge | — |
/// | `queued_bytes` | gauge | — |
/// | `request_duration_seconds` | histogram | — |
/// | `zero_rtt_total` | counter | `result` |
/// | `build_info` | info | `version` |
///
/// The open-connections gauge is named `open_connections` rather than
/// `connections` because OpenMetrics names a counter family without its
/// `_total` suffix: a gauge `connections` and the counter `connections_total`
/// would both be the family `agentwire_hub_connections`, which is invalid.
#[derive(Clone)]
pub struct HubMetrics {
    inner: Arc<Inner>,
}

impl fmt::Debug for HubMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubMetrics")
            .field("prefix", &METRIC_PREFIX)
            .finish_non_exhaustive()
    }
}

impl Default for HubMetrics {
    /// Same as [`HubMetrics::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl HubMetrics {
    /// Creates a fresh registry with prefix `agentwire_hub` and registers every
    /// hub metric in it. Each call yields an independent set of metrics.
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(METRIC_PREFIX);

        let connections = Family::<TransportLabels, Gauge>::default();
        registry.register(
            "open_connections",
            "Currently open client connections, by transport",
            connections.clone(),
        );
        let connections_total = Family::<TransportLabels, Counter>::default();
        registry.register(
            // prometheus-client appends `_total` to counters.
            "connections",
            "Client connections opened since start, by transport",
            connections_total.clone(),
        );
        let handshakes = Family::<HandshakeLabels, Counter>::default();
        registry.register(
            "handshakes",
            "Agent handshakes by transport and outcome (accepted, rejected, failed)",
            handshakes.clone(),
        );
        let agents = Family::<TransportLabels, Gauge>::default();
        registry.register(
            "agents",
            "Currently registered agents, by transport",
            agents.clone(),
        );
        let agent_removals = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "agent_removals",
            "Agents removed from the hub, by reason",
            agent_removals.clone(),
        );
        let messages = Family::<MessageLabels, Counter>::default();
        registry.register(
            "messages",
            "Messages handled by the hub, by direction, kind and priority",
            messages.clone(),
        );
        let message_bytes = Family::<MessageLabels, Counter>::default();
        registry.register(
            "message_bytes",
            "Message payload bytes handled by the hub, by direction, kind and priority",
            message_bytes.clone(),
        );
        let errors = Family::<CodeLabels, Counter>::default();
        registry.register(
            "errors",
            "Protocol errors reported by the hub, by error code",
            errors.clone(),
        );
        let dropped = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "dropped_messages",
            "Messages dropped by the hub, by reason",
            dropped.clone(),
        );
        let queued_messages = Gauge::default();
        registry.register(
            "queued_messages",
            "Messages waiting in agents' send queues (sum over all agents)",
            queued_messages.clone(),
        );
        let queued_bytes = Gauge::default();
        registry.register(
            "queued_bytes",
            "Bytes of frames waiting in agents' send queues (sum over all agents; the hub's \
             queue budget is spent when it reaches --hub-queue-bytes)",
            queued_bytes.clone(),
        );
        let request_duration = AtomicHistogram::latency();
        registry.register(
            "request_duration_seconds",
            "Time from receiving a request to routing its response, in seconds",
            request_duration.clone(),
        );
        let zero_rtt = Family::<ResultLabels, Counter>::default();
        registry.register(
            "zero_rtt",
            "QUIC 0-RTT attempts, by result (accepted, rejected)",
            zero_rtt.clone(),
        );
        registry.register(
            "build",
            "Build information of the hub",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );

        Self {
            inner: Arc::new(Inner {
                registry: Mutex::new(registry),
                connections,
                connections_total,
                handshakes,
                agents,
                agent_removals,
                messages,
                message_bytes,
                errors,
                dropped,
                queued_messages,
                queued_bytes,
                request_duration,
                zero_rtt,
            }),
        }
    }

    /// Records a newly opened client connection on `transport`: increments the
    /// `open_connections{transport}` gauge and `connections_total{transport}`.
    pub fn connection_opened(&self, transport: &'static str) {
        let labels = TransportLabels { transport };
        self.inner.connections.get_or_create(&labels).inc();
        self.inner.connections_total.get_or_create(&labels).inc();
    }

    /// Records that a connection on `transport` closed: decrements the
    /// `open_connections{transport}` gauge. Call exactly once per
    /// [`connection_opened`](Self::connection_opened), or use
    /// [`connection_guard`](Self::connection_guard).
    pub fn connection_closed(&self, transport: &'static str) {
        self.inner
            .connections
            .get_or_create(&TransportLabels { transport })
            .dec();
    }

    /// Calls [`connection_opened`](Self::connection_opened) and returns a guard
    /// that calls [`connection_closed`](Self::connection_closed) when dropped,
    /// so early returns and panics in a connection task cannot leak the gauge.
    #[must_use = "the connection is counted as closed as soon as the guard is dropped"]
    pub fn connection_guard(&self, transport: &'static str) -> ConnectionGuard {
        self.connection_opened(transport);
        ConnectionGuard {
            metrics: self.clone(),
            transport,
        }
    }

    /// Counts one handshake on `transport` with `outcome`
    /// (`accepted`, `rejected` or `failed`, see [`outcome`]) in `handshakes_total`.
    pub fn handshake(&self, transport: &'static str, outcome: &'static str) {
        self.inner
            .handshakes
            .get_or_create(&HandshakeLabels { transport, outcome })
            .inc();
    }

    /// Records an agent that registered over `transport`: increments the
    /// `agents{transport}` gauge.
    pub fn agent_registered(&self, transport: &'static str) {
        self.inner
            .agents
            .get_or_create(&TransportLabels { transport })
            .inc();
    }

    /// Records an agent on `transport` leaving the hub for `reason` (e.g.
    /// `"disconnect"`, `"timeout"`, `"kicked"`): decrements `agents{transport}`
    /// and counts `agent_removals_total{reason}`.
    pub fn agent_removed(&self, transport: &'static str, reason: &'static str) {
        self.inner
            .agents
            .get_or_create(&TransportLabels { transport })
            .dec();
        self.inner
            .agent_removals
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Records a message received by the hub: `messages_total` +1 and
    /// `message_bytes_total` +`bytes`, labelled `direction="in"`, `kind`, `priority`.
    pub fn message_in(&self, kind: &'static str, priority: &'static str, bytes: u64) {
        self.message(direction::IN, kind, priority, bytes);
    }

    /// Records a message sent by the hub: `messages_total` +1 and
    /// `message_bytes_total` +`bytes`, labelled `direction="out"`, `kind`, `priority`.
    pub fn message_out(&self, kind: &'static str, priority: &'static str, bytes: u64) {
        self.message(direction::OUT, kind, priority, bytes);
    }

    fn message(
        &self,
        direction: &'static str,
        kind: &'static str,
        priority: &'static str,
        bytes: u64,
    ) {
        let labels = MessageLabels {
            direction,
            kind,
            priority,
        };
        self.inner.messages.get_or_create(&labels).inc();
        self.inner
            .message_bytes
            .get_or_create(&labels)
            .inc_by(bytes);
    }

    /// Pre-resolved `messages_total` and `message_bytes_total` handles for every
    /// `kind` × `priority` of one `direction` (`"in"` or `"out"`), so that recording a
    /// message is two atomic adds with no label lookup. Creating them makes every
    /// combination visible (at 0) in the exposition.
    ///
    /// ```
    /// use agentwire_hub::metrics::HubMetrics;
    /// let m = HubMetrics::new();
    /// let table = m.message_table("in", &["task", "event"], &["high", "low"]);
    /// table.record(1, 0, 10); // one `event` of class `high`, 10 bytes
    /// assert!(m.encode().contains(
    ///     "agentwire_hub_messages_total{direction=\"in\",kind=\"event\",priority=\"high\"} 1"
    /// ));
    /// ```
    pub fn message_table(
        &self,
        direction: &'static str,
        kinds: &[&'static str],
        priorities: &[&'static str],
    ) -> MessageTable {
        let mut cells = Vec::with_capacity(kinds.len() * priorities.len());
        for &kind in kinds {
            for &priority in priorities {
                let labels = MessageLabels {
                    direction,
                    kind,
                    priority,
                };
                cells.push((
                    self.inner.messages.get_or_create(&labels).clone(),
                    self.inner.message_bytes.get_or_create(&labels).clone(),
                ));
            }
        }
        MessageTable {
            cells,
            priorities: priorities.len(),
        }
    }

    /// Counts one protocol error with `code` in `errors_total{code}`.
    pub fn error(&self, code: &'static str) {
        self.inner.errors.get_or_create(&CodeLabels { code }).inc();
    }

    /// Counts one message dropped for `reason` (e.g. `"queue_full"`,
    /// `"no_route"`, `"expired"`) in `dropped_messages_total{reason}`.
    pub fn dropped(&self, reason: &'static str) {
        self.inner
            .dropped
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Adds `delta` (negative to subtract) to the `queued_messages` gauge, the
    /// total number of messages waiting in all agents' send queues.
    pub fn queue_depth_add(&self, delta: i64) {
        self.inner.queued_messages.inc_by(delta);
    }

    /// The `queued_bytes` gauge itself: the hub core's queue budget counts in it.
    pub fn queued_bytes(&self) -> Gauge {
        self.inner.queued_bytes.clone()
    }

    /// Observes one request's latency in seconds in `request_duration_seconds`
    /// (buckets 50 µs × 2ⁿ, n = 0..19). Negative, NaN and infinite values are
    /// ignored so they cannot poison the histogram's sum.
    pub fn request_latency(&self, seconds: f64) {
        if seconds.is_finite() && seconds >= 0.0 {
            self.inner.request_duration.observe(seconds);
        } else {
            tracing::debug!(seconds, "ignoring invalid request latency");
        }
    }

    /// Counts a QUIC 0-RTT attempt in `zero_rtt_total{result}`, where result is
    /// `accepted` or `rejected`.
    pub fn zero_rtt(&self, accepted: bool) {
        let result = if accepted { "accepted" } else { "rejected" };
        self.inner
            .zero_rtt
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Registers additional metrics in the hub's registry (the closure gets the
    /// registry, already prefixed with `agentwire_hub`). Meant for start-up;
    /// it takes the same lock as [`encode`](Self::encode).
    pub fn register_with<F: FnOnce(&mut Registry)>(&self, f: F) {
        f(&mut self.lock_registry());
    }

    /// Encodes every metric in the OpenMetrics text exposition format
    /// (ending in `# EOF`).
    #[must_use]
    pub fn encode(&self) -> String {
        self.try_encode().unwrap_or_else(|fmt::Error| {
            // Writing into a String cannot fail; this only guards against a
            // misbehaving custom metric added through `register_with`.
            tracing::error!("failed to encode metrics");
            String::new()
        })
    }

    fn try_encode(&self) -> Result<String, fmt::Error> {
        let mut out = String::with_capacity(4096);
        encode(&mut out, &self.lock_registry())?;
        Ok(out)
    }

    fn lock_registry(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding the lock cannot leave the registry half-updated
        // in a way that matters for reading, so recover from poisoning.
        self.inner.registry.lock_or_recover()
    }
}

/// Keeps one connection counted in `open_connections{transport}` until dropped.
/// Created by [`HubMetrics::connection_guard`].
#[derive(Debug)]
pub struct ConnectionGuard {
    metrics: HubMetrics,
    transport: &'static str,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.metrics.connection_closed(self.transport);
    }
}

fn text_response(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Answers one request of the metrics endpoint. Never fails.
fn handle(metrics: &HubMetrics, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET {
        let mut response = text_response(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            Bytes::from_static(b"method not allowed\n"),
        );
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    match req.uri().path() {
        "/metrics" => match metrics.try_encode() {
            Ok(text) => text_response(StatusCode::OK, OPENMETRICS_CONTENT_TYPE, Bytes::from(text)),
            Err(fmt::Error) => {
                tracing::error!("failed to encode metrics");
                text_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    PLAIN,
                    Bytes::from_static(b"failed to encode metrics\n"),
                )
            }
        },
        "/" => text_response(
            StatusCode::OK,
            PLAIN,
            Bytes::from_static(b"agentwire hub: metrics at /metrics\n"),
        ),
        _ => text_response(
            StatusCode::NOT_FOUND,
            PLAIN,
            Bytes::from_static(b"not found\n"),
        ),
    }
}

/// Whether an accept error concerns only the one incoming connection (the
/// listener itself is fine and accepting should go on).
fn is_per_connection_error(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::Interrupted
    )
}

/// Serves the metrics endpoint on `listener` over HTTP/1.1 (hyper 1):
///
/// * `GET /metrics` → 200, content type
///   `application/openmetrics-text; version=1.0.0; charset=utf-8`, body [`HubMetrics::encode`];
/// * `GET /` → 200, a one-line text pointer to `/metrics`;
/// * any other path → 404; any method other than GET → 405 (with `Allow: GET`).
///
/// Each connection runs in its own task; a client has
/// 10 s to send its request headers. Connection errors are logged, never fatal.
/// Returns only when accepting fails with an error that concerns the listener
/// (errors that concern one incoming connection, such as `ConnectionAborted`,
/// are logged and skipped).
///
/// # Errors
///
/// The listener's accept error that stopped the server.
pub async fn serve_metrics(listener: TcpListener, metrics: HubMetrics) -> std::io::Result<()> {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) if is_per_connection_error(&err) => {
                tracing::debug!(error = %err, "metrics endpoint: accept error on one connection");
                continue;
            }
            Err(err) => {
                tracing::warn!(error = %err, "metrics endpoint: accept failed, stopping");
                return Err(err);
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let response = handle(&metrics, &req);
                async move { Ok::<_, Infallible>(response) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            if let Err(err) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %err, "metrics endpoint: connection error");
            }
        });
    }
}

/// Binds a TCP listener on `addr`, spawns [`serve_metrics`] on it and returns
/// the bound address (so port 0 picks a free port) and the server's task.
/// Abort the handle to stop the server.
///
/// # Errors
///
/// Binding `addr` or reading the bound address failed.
pub async fn spawn_metrics_server(
    addr: SocketAddr,
    metrics: HubMetrics,
) -> std::io::Result<(SocketAddr, JoinHandle<std::io::Result<()>>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tracing::info!(addr = %local, "metrics endpoint listening");
    let handle = tokio::spawn(serve_metrics(listener, metrics));
    Ok((local, handle))
}

#[cfg(test)]
mod tests {
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
}
