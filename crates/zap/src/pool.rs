//! The proxy's pool: several connections to each agent, a choice among them per request, and
//! what to do when an agent fails or pushes back.
//!
//! - `connections_per_agent` connections per agent, chosen per request by [`Strategy`]
//!   (round robin, least connections, health-based, random). The events of one request follow
//!   its first event's connection (correlation affinity), so an agent sees a request's
//!   headers and body on one connection.
//! - A connection that drops fails its requests at once; the request is retried once on
//!   another live connection of the same agent, and the slot reconnects in the background
//!   with exponential backoff, forever, each failure logged and counted (never silently).
//! - A per-agent circuit breaker: `failures_to_open` consecutive failures (timeouts, lost
//!   connections, no connection) open it; requests then fail fast for `open_for`; then one
//!   request is let through as a probe (half-open) and its outcome closes or re-opens it.
//! - When the agent cannot take a request (circuit open, no live connection, every
//!   connection paused by flow control) the pool applies [`OnUnavailable`]: fail open (an
//!   `allow` marked in its audit), fail closed (an error), or wait and retry up to a bound.
//! - [`AgentPool::drain`] stops new requests to an agent, waits for those in flight (up to a
//!   bound) and closes its connections.
//! - Prometheus metrics through any `prometheus_client` registry (the hub's:
//!   `HubMetrics::register_with`).
//!
//! This module owns those policies; one connection's protocol is [`crate::client`]'s.

use agentwire_sync::{LockExt, RwLockExt};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use agentwire_zap_proto::proxy::ProxyConfig;
use agentwire_zap_proto::{AgentResponse, Encoding, Event};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::client::{AgentConnection, RequestError};

use crate::select::Load;
pub use crate::select::Strategy;

/// What a request gets when its agent cannot take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnavailable {
    /// `allow`, with `agent_unavailable_fail_open` in the answer's audit reason codes.
    FailOpen,
    /// [`PoolError::Unavailable`].
    FailClosed,
    /// Retry every 10 ms for up to this long, then fail closed.
    WaitAndRetry(Duration),
}

/// Circuit-breaker settings.
#[derive(Debug, Clone, Copy)]
pub struct BreakerConfig {
    /// Consecutive failures that open the circuit.
    pub failures_to_open: u32,
    /// How long it stays open before a probe.
    pub open_for: Duration,
}

/// Pool settings.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Connections per agent.
    pub connections_per_agent: usize,
    /// Choice of connection.
    pub strategy: Strategy,
    /// Connect and handshake timeout.
    pub connect_timeout: Duration,
    /// Time an agent has to answer an event.
    pub request_timeout: Duration,
    /// First reconnect delay; doubles per failure up to `reconnect_max`.
    pub reconnect_initial: Duration,
    /// Longest reconnect delay.
    pub reconnect_max: Duration,
    /// Circuit breaker.
    pub breaker: BreakerConfig,
    /// When the agent cannot take a request.
    pub on_unavailable: OnUnavailable,
    /// Encodings offered, most preferred first.
    pub encodings: Vec<Encoding>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            connections_per_agent: 4,
            strategy: Strategy::RoundRobin,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            reconnect_initial: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(30),
            breaker: BreakerConfig {
                failures_to_open: 5,
                open_for: Duration::from_secs(10),
            },
            on_unavailable: OnUnavailable::FailClosed,
            encodings: vec![Encoding::MsgPack, Encoding::Json],
        }
    }
}

/// Why a request through the pool got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// No agent by that id.
    #[error("no agent {0:?} in the pool")]
    UnknownAgent(String),
    /// The agent cannot take requests now (circuit open, no live connection, paused, or
    /// draining), and the pool fails closed.
    #[error("agent {agent:?} unavailable: {why}")]
    Unavailable {
        /// The agent.
        agent: String,
        /// Why.
        why: &'static str,
    },
    /// The request failed on its connection.
    #[error("agent {agent:?}: {error}")]
    Request {
        /// The agent.
        agent: String,
        /// What happened.
        error: RequestError,
    },
}

impl PoolError {
    /// A short label for metrics and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            PoolError::UnknownAgent(_) => "unknown_agent",
            PoolError::Unavailable { why, .. } => why,
            PoolError::Request { error, .. } => match error {
                RequestError::Timeout => "timeout",
                RequestError::ConnectionLost(_) => "connection_lost",
                RequestError::Paused => "paused",
                RequestError::NotSent(_) => "not_sent",
                RequestError::Cancelled => "cancelled",
            },
        }
    }
}

enum BreakerState {
    Closed {
        failures: u32,
    },
    Open {
        until: Instant,
    },
    /// One probe request is out; the others fail fast until it settles.
    HalfOpen,
}

struct Slot {
    conn: Mutex<Option<AgentConnection>>,
    reconnecting: AtomicBool,
    requests: AtomicU64,
    errors: AtomicU64,
}

impl Slot {
    /// Whether its connection is up (without cloning it).
    fn is_live(&self) -> bool {
        self.conn
            .lock_or_recover()
            .as_ref()
            .is_some_and(AgentConnection::is_connected)
    }

    fn live(&self) -> Option<AgentConnection> {
        self.conn
            .lock_or_recover()
            .clone()
            .filter(AgentConnection::is_connected)
    }
}

struct Agent {
    id: String,
    path: PathBuf,
    slots: Vec<Arc<Slot>>,
    next: AtomicUsize,
    breaker: Mutex<BreakerState>,
    draining: AtomicBool,
    /// Correlation id → slot of the request's first event (kept only with several slots).
    affinity: Mutex<HashMap<String, usize>>,
    /// `zap_requests` counters of this agent, resolved once.
    outcomes: HashMap<&'static str, Counter>,
    /// Its `zap_circuit_open` gauge, resolved once.
    circuit_gauge: Gauge,
}

impl Agent {
    /// Requests keep to their first event's connection only when there is a choice.
    fn keeps_affinity(&self) -> bool {
        self.slots.len() > 1
    }

    fn circuit_is_open(&self) -> bool {
        matches!(*self.breaker.lock_or_recover(), BreakerState::Open { .. })
    }
}

/// Every outcome `zap_requests` counts.
const OUTCOMES: [&str; 12] = [
    "answered",
    "fail_open",
    "unknown_agent",
    "draining",
    "circuit_open",
    "paused",
    "no_connection",
    "timeout",
    "connection_lost",
    "not_sent",
    "cancelled",
    "other",
];

/// Affinities kept per agent at most (oldest requests' entries are dropped past it).
const MAX_AFFINITY: usize = 100_000;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    agent: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    agent: String,
}

#[derive(Default, Clone)]
struct Metrics {
    requests: Family<OutcomeLabels, Counter>,
    connections: Family<AgentLabels, Gauge>,
    reconnects: Family<OutcomeLabels, Counter>,
    circuit_open: Family<AgentLabels, Gauge>,
}

/// A pool of connections to agents.
#[derive(Clone)]
pub struct AgentPool {
    config: Arc<PoolConfig>,
    agents: Arc<RwLock<HashMap<String, Arc<Agent>>>>,
    metrics: Metrics,
}

impl AgentPool {
    /// An empty pool.
    pub fn new(config: PoolConfig) -> Self {
        AgentPool {
            config: Arc::new(config),
            agents: Arc::default(),
            metrics: Metrics::default(),
        }
    }

    /// Registers the pool's metrics (`zap_requests`, `zap_connections`, `zap_reconnects`,
    /// `zap_circuit_open`, labelled by agent) in `registry`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        let m = self.metrics.clone();
        registry.register(
            "zap_requests",
            "Requests through the agent pool by outcome",
            m.requests,
        );
        registry.register(
            "zap_connections",
            "Live connections per agent",
            m.connections,
        );
        registry.register(
            "zap_reconnects",
            "Reconnect attempts by outcome",
            m.reconnects,
        );
        registry.register(
            "zap_circuit_open",
            "1 while an agent's circuit is open",
            m.circuit_open,
        );
    }

    fn proxy_config(&self) -> ProxyConfig {
        ProxyConfig {
            proxy_id: "agentwire-pool".into(),
            encodings: self.config.encodings.clone(),
            handshake_timeout: self.config.connect_timeout,
            request_timeout: self.config.request_timeout,
            ..ProxyConfig::default()
        }
    }

    /// Adds the agent listening at `path` and opens its connections. Returns how many
    /// connected; the others keep trying in the background (logged, counted in
    /// `zap_reconnects`).
    pub async fn add_agent(&self, id: &str, path: &Path) -> usize {
        let slots: Vec<Arc<Slot>> = (0..self.config.connections_per_agent.max(1))
            .map(|_| {
                Arc::new(Slot {
                    conn: Mutex::new(None),
                    reconnecting: AtomicBool::new(false),
                    requests: AtomicU64::new(0),
                    errors: AtomicU64::new(0),
                })
            })
            .collect();
        let agent = Arc::new(Agent {
            id: id.to_string(),
            path: path.to_path_buf(),
            slots,
            next: AtomicUsize::new(0),
            breaker: Mutex::new(BreakerState::Closed { failures: 0 }),
            draining: AtomicBool::new(false),
            affinity: Mutex::new(HashMap::new()),
            outcomes: OUTCOMES
                .iter()
                .map(|o| {
                    let labels = OutcomeLabels {
                        agent: id.to_string(),
                        outcome: (*o).to_string(),
                    };
                    (*o, self.metrics.requests.get_or_create(&labels).clone())
                })
                .collect(),
            circuit_gauge: self
                .metrics
                .circuit_open
                .get_or_create(&AgentLabels { agent: id.into() })
                .clone(),
        });
        self.agents
            .write_or_recover()
            .insert(id.to_string(), agent.clone());
        let mut connected = 0;
        for slot in &agent.slots {
            match AgentConnection::connect(&agent.path, self.proxy_config()).await {
                Ok(conn) => {
                    *slot.conn.lock_or_recover() = Some(conn);
                    connected += 1;
                }
                Err(e) => {
                    tracing::warn!(
                        "agent {id}: connection failed, retrying in the background: {e}"
                    );
                    self.reconnect(&agent, slot.clone());
                }
            }
        }
        self.metrics
            .connections
            .get_or_create(&AgentLabels { agent: id.into() })
            .set(connected as i64);
        connected
    }

    /// Reconnects `slot` in the background with exponential backoff, until it succeeds or the
    /// agent drains.
    fn reconnect(&self, agent: &Arc<Agent>, slot: Arc<Slot>) {
        if slot.reconnecting.swap(true, Ordering::SeqCst) {
            return;
        }
        let pool = self.clone();
        let agent = agent.clone();
        tokio::spawn(async move {
            let mut delay = pool.config.reconnect_initial;
            loop {
                tokio::time::sleep(delay).await;
                if agent.draining.load(Ordering::Relaxed) {
                    break;
                }
                let labels = |outcome: &str| OutcomeLabels {
                    agent: agent.id.clone(),
                    outcome: outcome.into(),
                };
                match AgentConnection::connect(&agent.path, pool.proxy_config()).await {
                    Ok(conn) => {
                        *slot.conn.lock_or_recover() = Some(conn);
                        pool.metrics.reconnects.get_or_create(&labels("ok")).inc();
                        pool.update_connections(&agent);
                        break;
                    }
                    Err(e) => {
                        pool.metrics
                            .reconnects
                            .get_or_create(&labels("failed"))
                            .inc();
                        tracing::warn!(
                            "agent {}: reconnect failed (next in {:?}): {e}",
                            agent.id,
                            delay * 2
                        );
                        delay = (delay * 2).min(pool.config.reconnect_max);
                    }
                }
            }
            slot.reconnecting.store(false, Ordering::SeqCst);
        });
    }

    fn update_connections(&self, agent: &Agent) {
        let live = agent.slots.iter().filter(|s| s.is_live()).count();
        self.metrics
            .connections
            .get_or_create(&AgentLabels {
                agent: agent.id.clone(),
            })
            .set(live as i64);
    }

    fn agent(&self, id: &str) -> Result<Arc<Agent>, PoolError> {
        self.agents
            .read_or_recover()
            .get(id)
            .cloned()
            .ok_or_else(|| PoolError::UnknownAgent(id.to_string()))
    }

    /// Sends `event` to agent `id` and waits for the answer (or applies
    /// [`OnUnavailable`]).
    pub async fn send(&self, id: &str, event: Event) -> Result<AgentResponse, PoolError> {
        let agent = self.agent(id)?;
        let event = Arc::new(event);
        let started = Instant::now();
        let result = loop {
            match self.try_send(&agent, &event).await {
                Err(PoolError::Unavailable { why, .. }) => match self.config.on_unavailable {
                    OnUnavailable::FailOpen => {
                        let mut r = AgentResponse::allow();
                        r.audit
                            .reason_codes
                            .push("agent_unavailable_fail_open".into());
                        r.audit.reason_codes.push(why.into());
                        r.set_correlation_id(event.correlation_id());
                        break Ok(r);
                    }
                    OnUnavailable::WaitAndRetry(max) if started.elapsed() < max => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    _ => {
                        break Err(PoolError::Unavailable {
                            agent: id.to_string(),
                            why,
                        })
                    }
                },
                other => break other,
            }
        };
        let outcome = match &result {
            Ok(r)
                if r.audit
                    .reason_codes
                    .iter()
                    .any(|c| c == "agent_unavailable_fail_open") =>
            {
                "fail_open"
            }
            Ok(_) => "answered",
            Err(e) => e.kind(),
        };
        let counter = agent
            .outcomes
            .get(outcome)
            .or_else(|| agent.outcomes.get("other"));
        if let Some(counter) = counter {
            counter.inc();
        }
        result
    }

    async fn try_send(
        &self,
        agent: &Arc<Agent>,
        event: &Arc<Event>,
    ) -> Result<AgentResponse, PoolError> {
        let unavailable = |why| PoolError::Unavailable {
            agent: agent.id.clone(),
            why,
        };
        if agent.draining.load(Ordering::Relaxed) {
            return Err(unavailable("draining"));
        }
        if !self.admit(agent) {
            return Err(unavailable("circuit_open"));
        }
        let cid = event.correlation_id();
        let mut tried: Option<usize> = None;
        let mut last = RequestError::Paused;
        // One retry on another connection when a connection is lost (or found paused) under
        // the request.
        for _ in 0..2 {
            let Some((index, conn)) = self.choose(agent, cid, tried) else {
                self.settle(agent, false);
                let some_live = agent.slots.iter().any(|s| s.is_live());
                return Err(unavailable(if some_live {
                    "paused"
                } else {
                    "no_connection"
                }));
            };
            let slot = &agent.slots[index];
            slot.requests.fetch_add(1, Ordering::Relaxed);
            match conn.send(event.clone()).await {
                Ok(response) => {
                    self.settle(agent, true);
                    self.forget_if_done(agent, event);
                    return Ok(response);
                }
                Err(RequestError::ConnectionLost(why)) => {
                    slot.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        "agent {}: connection {index} lost ({why}); retrying elsewhere",
                        agent.id
                    );
                    self.update_connections(agent);
                    self.reconnect(agent, slot.clone());
                    tried = Some(index);
                    self.forget(agent, cid);
                    last = RequestError::ConnectionLost(why);
                }
                Err(RequestError::Paused) => {
                    tried = Some(index);
                    last = RequestError::Paused;
                }
                Err(error) => {
                    slot.errors.fetch_add(1, Ordering::Relaxed);
                    self.settle(agent, false);
                    self.forget(agent, cid);
                    return Err(PoolError::Request {
                        agent: agent.id.clone(),
                        error,
                    });
                }
            }
        }
        self.settle(agent, false);
        Err(PoolError::Request {
            agent: agent.id.clone(),
            error: last,
        })
    }

    /// Whether the breaker lets a request through: always when closed; once the open time
    /// has passed, one probe (half-open); otherwise not.
    fn admit(&self, agent: &Agent) -> bool {
        let mut b = agent.breaker.lock_or_recover();
        match *b {
            BreakerState::Closed { .. } => true,
            BreakerState::Open { until } if Instant::now() >= until => {
                *b = BreakerState::HalfOpen;
                true
            }
            BreakerState::Open { .. } | BreakerState::HalfOpen => false,
        }
    }

    /// Records a request's outcome: a success closes the circuit; a failure counts towards
    /// opening it, and a failed probe re-opens it.
    fn settle(&self, agent: &Agent, ok: bool) {
        let mut b = agent.breaker.lock_or_recover();
        let open = BreakerState::Open {
            until: Instant::now() + self.config.breaker.open_for,
        };
        *b = match (&*b, ok) {
            (_, true) => BreakerState::Closed { failures: 0 },
            (BreakerState::Closed { failures }, false)
                if failures + 1 < self.config.breaker.failures_to_open =>
            {
                BreakerState::Closed {
                    failures: failures + 1,
                }
            }
            (BreakerState::Closed { .. } | BreakerState::HalfOpen, false) => open,
            (BreakerState::Open { until }, false) => BreakerState::Open { until: *until },
        };
        let is_open = matches!(*b, BreakerState::Open { .. });
        agent.circuit_gauge.set(i64::from(is_open));
    }

    /// The connection for a request: its affinity if it has one and it is live, else by
    /// strategy among live, unpaused connections other than `skip`.
    fn choose(
        &self,
        agent: &Arc<Agent>,
        cid: &str,
        skip: Option<usize>,
    ) -> Option<(usize, AgentConnection)> {
        if !agent.keeps_affinity() {
            // One connection: no affinity, no choice.
            let slot = agent.slots.first()?;
            return match slot.live() {
                None => {
                    self.reconnect(agent, slot.clone());
                    None
                }
                Some(c) if skip != Some(0) && !c.is_paused() => Some((0, c)),
                Some(_) => None,
            };
        }
        let affine = agent.affinity.lock_or_recover().get(cid).copied();
        if let Some(i) = affine.filter(|&i| Some(i) != skip) {
            if let Some(c) = agent.slots[i].live().filter(|c| !c.is_paused()) {
                return Some((i, c));
            }
        }
        let mut candidates: Vec<(usize, AgentConnection)> = Vec::with_capacity(agent.slots.len());
        for (i, slot) in agent.slots.iter().enumerate() {
            match slot.live() {
                // A connection that died while idle is found here and brought back.
                None => self.reconnect(agent, slot.clone()),
                Some(c) if Some(i) != skip && !c.is_paused() => candidates.push((i, c)),
                Some(_) => {}
            }
        }
        let loads: Vec<Load> = candidates
            .iter()
            .map(|(i, c)| {
                let slot = &agent.slots[*i];
                Load {
                    in_flight: c.in_flight(),
                    requests: slot.requests.load(Ordering::Relaxed),
                    errors: slot.errors.load(Ordering::Relaxed),
                }
            })
            .collect();
        let pick = self.config.strategy.pick(&loads, &agent.next)?;
        let (index, conn) = candidates.swap_remove(pick);
        let mut affinity = agent.affinity.lock_or_recover();
        if affinity.len() >= MAX_AFFINITY {
            affinity.clear();
        }
        affinity.insert(cid.to_string(), index);
        Some((index, conn))
    }

    fn forget(&self, agent: &Agent, cid: &str) {
        if !agent.keeps_affinity() {
            return;
        }
        agent.affinity.lock_or_recover().remove(cid);
    }

    /// A request's last event ends its affinity.
    fn forget_if_done(&self, agent: &Agent, event: &Event) {
        let done = match event {
            Event::RequestComplete(_) => true,
            Event::ResponseBodyChunk(c) => c.is_last,
            _ => false,
        };
        if done {
            self.forget(agent, event.correlation_id());
        }
    }

    /// Cancels request `cid` on agent `id` (reason: the reference's numbering).
    pub fn cancel(&self, id: &str, cid: &str, reason: i32) {
        let Ok(agent) = self.agent(id) else {
            return;
        };
        let slot = agent.affinity.lock_or_recover().remove(cid);
        let targets: Vec<&Arc<Slot>> = match slot {
            Some(i) => agent.slots.get(i).into_iter().collect(),
            None => agent.slots.iter().collect(),
        };
        for s in targets {
            if let Some(c) = s.live() {
                c.cancel(cid, reason);
            }
        }
    }

    /// Stops new requests to agent `id`, waits up to `grace` for those in flight, then
    /// closes its connections and removes it. Returns the requests still in flight at the
    /// close (they fail with a lost connection).
    pub async fn drain(&self, id: &str, grace: Duration) -> Result<usize, PoolError> {
        let agent = self.agent(id)?;
        agent.draining.store(true, Ordering::Relaxed);
        let in_flight = |a: &Agent| -> usize {
            a.slots
                .iter()
                .filter_map(|s| s.live())
                .map(|c| c.in_flight())
                .sum()
        };
        let until = Instant::now() + grace;
        while in_flight(&agent) > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let left = in_flight(&agent);
        for s in &agent.slots {
            s.conn.lock_or_recover().take();
        }
        self.agents.write_or_recover().remove(id);
        self.update_connections(&agent);
        Ok(left)
    }

    /// The encoding agent `id`'s live connections use.
    pub fn encoding(&self, id: &str) -> Option<Encoding> {
        let agent = self.agent(id).ok()?;
        let encoding = agent
            .slots
            .iter()
            .find_map(|s| s.live())
            .map(|c| c.encoding());
        encoding
    }

    /// Live connections to agent `id`.
    pub fn live_connections(&self, id: &str) -> usize {
        self.agent(id)
            .map(|a| a.slots.iter().filter(|s| s.is_live()).count())
            .unwrap_or(0)
    }

    /// Whether agent `id` takes requests now: it is in the pool, not draining, its circuit is
    /// not open, and at least one of its connections is live. The check a proxy makes before
    /// it routes a request (the reference's `is_agent_healthy`).
    ///
    /// ```
    /// use agentwire_zap::pool::{AgentPool, PoolConfig};
    /// let pool = AgentPool::new(PoolConfig::default());
    /// assert!(!pool.is_healthy("waf"));
    /// ```
    pub fn is_healthy(&self, id: &str) -> bool {
        let agents = self.agents.read_or_recover();
        let Some(agent) = agents.get(id) else {
            return false;
        };
        !agent.draining.load(Ordering::Relaxed)
            && !agent.circuit_is_open()
            && agent.slots.iter().any(|s| s.is_live())
    }

    /// Whether agent `id`'s circuit is open now.
    pub fn circuit_open(&self, id: &str) -> bool {
        self.agent(id).is_ok_and(|a| a.circuit_is_open())
    }
}
