//! The hub's metrics: one registry (prefix `agentwire_hub`) and the handle of every family, with the recording methods the hub calls.
//!
//! This module owns what is counted and under which labels; it must not serve HTTP.

use super::*;

/// Label set `{transport}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TransportLabels {
    pub(super) transport: &'static str,
}

/// Label set `{transport, outcome}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct HandshakeLabels {
    pub(super) transport: &'static str,
    pub(super) outcome: &'static str,
}

/// Label set `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabels {
    pub(super) reason: &'static str,
}

/// Label set `{direction, kind, priority}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct MessageLabels {
    pub(super) direction: &'static str,
    pub(super) kind: &'static str,
    pub(super) priority: &'static str,
}

/// Label set `{code}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CodeLabels {
    pub(super) code: &'static str,
}

/// Label set `{result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabels {
    pub(super) result: &'static str,
}

/// Message counters resolved once for every kind × priority of one direction (see
/// [`HubMetrics::message_table`]): recording is two atomic adds.
#[derive(Clone, Debug)]
pub struct MessageTable {
    pub(super) cells: Vec<(Counter, Counter)>,
    pub(super) priorities: usize,
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
pub(super) struct Inner {
    pub(super) registry: Mutex<Registry>,
    pub(super) connections: Family<TransportLabels, Gauge>,
    pub(super) connections_total: Family<TransportLabels, Counter>,
    pub(super) handshakes: Family<HandshakeLabels, Counter>,
    pub(super) agents: Family<TransportLabels, Gauge>,
    pub(super) agent_removals: Family<ReasonLabels, Counter>,
    pub(super) messages: Family<MessageLabels, Counter>,
    pub(super) message_bytes: Family<MessageLabels, Counter>,
    pub(super) errors: Family<CodeLabels, Counter>,
    pub(super) dropped: Family<ReasonLabels, Counter>,
    pub(super) queued_messages: Gauge,
    pub(super) queued_bytes: Gauge,
    pub(super) request_duration: AtomicHistogram,
    pub(super) zero_rtt: Family<ResultLabels, Counter>,
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
    pub(super) inner: Arc<Inner>,
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

    pub(super) fn message(
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

    pub(super) fn try_encode(&self) -> Result<String, fmt::Error> {
        let mut out = String::with_capacity(4096);
        encode(&mut out, &self.lock_registry())?;
        Ok(out)
    }

    pub(super) fn lock_registry(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding the lock cannot leave the registry half-updated
        // in a way that matters for reading, so recover from poisoning.
        self.inner.registry.lock_or_recover()
    }
}
