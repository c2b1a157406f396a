//! The hub: [`HubCore`] and its driver, which accepts agents on any transport and runs the core
//! for them; and the hub's [`metrics`] (Prometheus registry and its HTTP server).
//!
//! This crate depends on the transports, TLS and the protocol, never on the agent API
//! (`agentwire`), which embeds a hub only behind its `hub` feature.
//!
//! Routing, the registry, request tracking, queues and liveness are [`HubCore`]'s, a
//! state machine without I/O (`hub/core`). This module owns what the core must not do: one
//! reader task per connection that feeds it frames, one writer task per connection that takes
//! the frames it queued, the timer that calls it back, and the transports' listeners
//! (`hub/listen.rs`). It runs the same logic over every transport through
//! [`FrameSender`]/[`FrameReceiver`]; it must not route or interpret messages itself.
//!
//! Back-pressure policy: the hub never waits on a slow agent. Each agent has a bounded queue
//! (`agent_queue_capacity` frames); when a direct message finds it full, the sender gets a
//! [`Kind::Error`](agentwire_proto::Kind::Error) envelope with code `queue-full` and the
//! message's id as correlation. Topic and broadcast copies that find a queue full are dropped
//! for that subscriber and counted in
//! `agentwire_hub_dropped_messages_total{reason="queue-full"}`. Each queue is bounded in
//! bytes too (`agent_queue_bytes`), and all of them together by `hub_queue_bytes`: memory
//! held for agents that do not read is bounded by that budget, whatever their number.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod cluster;
mod core;
mod exposure;
mod listen;
pub mod metrics;
mod store;

use agentwire_sync::{LockExt, RwLockExt};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use agentwire_proto::{ErrorCode, HubPolicy};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

pub use self::core::{
    is_reserved, token_sha256, AbuseLimits, AccessError, AccessPolicy, Action, AgentSnapshot, Conn,
    CoreConfig, DuplicatePolicy, Grant, HubCore, HubOp, HubOpError, Now, Outbound, Peer,
    PolicyError, Registration, AFTER_HEADER, ATTEMPT_HEADER, CREDIT_HEADER, DEAD_LETTER_PAGE,
    DEFAULT_AGENT_QUEUE_BYTES, DEFAULT_HUB_QUEUE_BYTES, DEFAULT_MAX_OPEN_REQUESTS,
    DEFAULT_MAX_SUBSCRIPTIONS, DELAY_HEADER, DUPLICATE_HEADER, HUB_ID, HUB_OP_HEADER,
    NEXT_AFTER_HEADER, PRESENCE_TOPIC, PRODUCER_ID_HEADER, QUEUE_OP_HEADER, QUEUE_OWNER_ID,
    TASK_ID_HEADER,
};
pub use agentwire_transport::ConnectionControl;
pub use cluster::{ClusterHooks, TakeOverError};
pub use exposure::{exposures, Exposure};
pub use listen::{BoundAddr, Listener};

use crate::metrics::{HubMetrics, MessageTable};
use agentwire_tls::HubIdentity;
use agentwire_transport::quic::{QuicListen, QuicListenHandle};
use agentwire_transport::settings::{QuicSettings, SocketBuffers, StreamMapping};
use agentwire_transport::{
    ConnectError, ConnectionStats, FrameReceiver, FrameSender, ReplySlot, SendClass, TransportError,
};

/// How long a rejected peer gets to read the reject and close by itself.
const REJECT_LINGER: Duration = Duration::from_secs(2);

/// Hub configuration.
///
/// ```
/// use agentwire_hub::HubConfig;
/// let c = HubConfig::default();
/// assert_eq!(c.heartbeat_miss_limit, 3);
/// ```
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// Versions, codecs, auth token, limits and heartbeat interval (see `agentwire_proto`).
    pub policy: HubPolicy,
    /// An agent silent for this many heartbeat intervals is removed.
    pub heartbeat_miss_limit: u32,
    /// Frames each agent's send queue holds before senders get `queue-full`.
    pub agent_queue_capacity: usize,
    /// Bytes each agent's send queue holds ([`CoreConfig::agent_queue_bytes`]).
    pub agent_queue_bytes: usize,
    /// Bytes all agents' send queues hold together ([`CoreConfig::hub_queue_bytes`]).
    pub hub_queue_bytes: usize,
    /// Topics one agent may subscribe to ([`CoreConfig::max_subscriptions`]).
    pub max_subscriptions: usize,
    /// Time allowed for TLS plus the hello/welcome exchange.
    pub handshake_timeout: Duration,
    /// What to do with a second agent using a connected id.
    pub duplicate_policy: DuplicatePolicy,
    /// QUIC transport settings.
    pub quic: QuicSettings,
    /// How the hub maps messages to QUIC streams when sending to agents.
    pub stream_mapping: StreamMapping,
    /// Permission bits of Unix socket files the hub creates.
    pub unix_socket_mode: u32,
    /// WebSocket liveness (ping interval, pong timeout).
    pub websocket: agentwire_transport::settings::WsOptions,
    /// Work queues: ack wait, attempts, backoff, duplicate window, limits.
    pub queue: agentwire_queue::QueueConfig,
    /// Per-agent credentials and permissions (an access file); `None`: any agent may take any
    /// id (subject to `policy.auth_token`) and do anything.
    pub access: Option<Arc<AccessPolicy>>,
    /// Rates and counts that hold under abuse (all off by default).
    pub limits: AbuseLimits,
    /// TCP connections in their TLS and transport handshake at once, in all and per address,
    /// counted before any cryptography.
    pub accept: agentwire_transport::accept_gate::AcceptLimits,
    /// Requests one agent may wait on at once, and requests it may owe answers to
    /// ([`CoreConfig::max_open_requests`]).
    pub max_open_requests: usize,
    /// With a CA: every TLS connection must show an agent certificate it signed, and an agent
    /// may take only the id its certificate names (mutual TLS). Plain WebSocket connections
    /// are then refused; Unix-socket ones are let through (the socket file's mode guards
    /// them; an access file can still ask them for tokens).
    pub client_ca: Option<agentwire_tls::ClientCa>,
    /// WebTransport sessions for agents in web pages, on every QUIC listener (ALPN `h3`
    /// beside `agentwire/1`); `None`: off. Not with `client_ca` (pages show no client
    /// certificate).
    pub webtransport: Option<WebTransportConfig>,
}

/// The hub's WebTransport: which pages may open a session, and the certificate they are served.
#[derive(Clone, Default)]
pub struct WebTransportConfig {
    /// The pages allowed (`--allow-origin`); a session from any other is answered 403.
    pub origins: agentwire_transport::wt::OriginPolicy,
    /// The certificate served to browsers (one they accept by its hash: at most 14 days,
    /// `agentwire cert --webtransport`); `None`: the hub's own. Replaceable while the hub runs
    /// ([`HubIdentity::serve_instead`]).
    pub identity: Option<HubIdentity>,
}

impl std::fmt::Debug for WebTransportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebTransportConfig")
            .field("origins", &self.origins)
            .field(
                "identity",
                &self.identity.as_ref().map(|_| "<browsers' certificate>"),
            )
            .finish()
    }
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            policy: HubPolicy {
                capabilities: vec![
                    "datagrams".into(),
                    agentwire_proto::counted_goodbye::CAPABILITY.into(),
                ],
                ..HubPolicy::default()
            },
            heartbeat_miss_limit: 3,
            agent_queue_capacity: 4096,
            agent_queue_bytes: DEFAULT_AGENT_QUEUE_BYTES,
            hub_queue_bytes: DEFAULT_HUB_QUEUE_BYTES,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            handshake_timeout: Duration::from_secs(10),
            duplicate_policy: DuplicatePolicy::RejectNew,
            quic: QuicSettings::default(),
            stream_mapping: StreamMapping::PerMessage,
            unix_socket_mode: agentwire_transport::uds::DEFAULT_SOCKET_MODE,
            websocket: agentwire_transport::settings::WsOptions::default(),
            queue: agentwire_queue::QueueConfig::default(),
            access: None,
            limits: AbuseLimits::default(),
            max_open_requests: DEFAULT_MAX_OPEN_REQUESTS,
            accept: agentwire_transport::accept_gate::AcceptLimits::default(),
            client_ca: None,
            webtransport: None,
        }
    }
}

impl HubConfig {
    /// The part of this configuration [`HubCore`] runs on.
    pub fn core_config(&self) -> CoreConfig {
        CoreConfig {
            policy: self.policy.clone(),
            heartbeat_miss_limit: self.heartbeat_miss_limit,
            agent_queue_capacity: self.agent_queue_capacity,
            agent_queue_bytes: self.agent_queue_bytes,
            hub_queue_bytes: self.hub_queue_bytes,
            max_subscriptions: self.max_subscriptions,
            handshake_timeout: self.handshake_timeout,
            duplicate_policy: self.duplicate_policy,
            queue: self.queue.clone(),
            access: self.access.clone(),
            limits: self.limits,
            max_open_requests: self.max_open_requests,
            require_client_cert: self.client_ca.is_some(),
            ..CoreConfig::default()
        }
    }
}

/// A snapshot of one connected agent, for the API and the CLI.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AgentInfo {
    /// The agent's id.
    pub id: String,
    /// Its role.
    pub role: String,
    /// Hub-assigned session id.
    pub session_id: u64,
    /// Transport in use.
    pub transport: &'static str,
    /// Codec in use.
    pub codec: &'static str,
    /// Frames waiting in its send queue.
    pub queued: usize,
    /// Topics it subscribes to.
    pub topics: Vec<String>,
    /// Seconds since it connected.
    pub connected_secs: f64,
    /// When it connected, Unix ms (this hub's clock).
    pub connected_unix_ms: u64,
    /// Network counters of its connection.
    pub connection: ConnectionStats,
}

/// What the driver keeps per connection, inside the core's [`Conn`].
pub struct ConnDriver {
    /// Wakes the connection's writer task.
    wake: Notify,
    /// Closes the transport, reads its counters, sets its frame limit.
    control: Box<dyn ConnectionControl>,
    /// A close that waits for the writer to send what is queued first (a reject).
    linger: Mutex<Option<(ErrorCode, String)>>,
    /// The peer's verified client certificate, checked again after a reload.
    certificate: Option<agentwire_tls::AgentCertificate>,
}

type HubConn = Conn<ConnDriver, ReplySlot>;
type HubActions = Vec<Action<ConnDriver, ReplySlot>>;

impl AgentInfo {
    fn of(a: AgentSnapshot<ConnDriver, ReplySlot>) -> AgentInfo {
        AgentInfo {
            id: a.registration.agent_id.to_string(),
            role: a.registration.role,
            session_id: a.conn.id(),
            transport: a.conn.transport().name(),
            codec: a.registration.codec.name(),
            queued: a.queued,
            topics: a.topics,
            connected_secs: a.conn.opened().elapsed().as_secs_f64(),
            connected_unix_ms: a.conn.opened_unix_ms(),
            connection: a.conn.driver().control.stats(),
        }
    }
}

impl HubInner {
    fn store_slot(&self) -> std::sync::MutexGuard<'_, Option<store::StoreWriter>> {
        self.store.lock_or_recover()
    }
}

/// A running hub. Cheap to clone; every clone is the same hub.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<HubInner>,
}

struct HubInner {
    config: HubConfig,
    core: HubCore<ConnDriver, ReplySlot>,
    messages_out: MessageTable,
    timer_task: OnceLock<JoinHandle<()>>,
    /// What carries out the operations agents ask of the hub ([`Hub::on_hub_op`]).
    hub_ops: OnceLock<HubOpHandler>,
    /// The queue store's writer thread, when queues are durable: from the start
    /// ([`Hub::with_store`]), or while the hub keeps a cluster's queues.
    store: Mutex<Option<store::StoreWriter>>,
    /// The cluster this hub is part of, told when its agents change ([`Hub::join_cluster`]).
    cluster: std::sync::RwLock<Option<Arc<dyn cluster::ClusterHooks>>>,
}

/// Carries out an operation an allowed agent asked of the hub; `Ok` is the answer's body.
pub type HubOpHandler = Box<dyn Fn(HubOp) -> Result<String, HubOpError> + Send + Sync>;

/// A hub that does not keep it alive ([`Hub::downgrade`]), for handlers the hub holds.
#[derive(Clone)]
pub struct WeakHub(std::sync::Weak<HubInner>);

impl WeakHub {
    /// The hub, if it still exists.
    pub fn upgrade(&self) -> Option<Hub> {
        self.0.upgrade().map(|inner| Hub { inner })
    }
}

/// A QUIC listener of a hub.
pub struct QuicListener {
    /// The address bound (useful with port 0).
    pub local_addr: SocketAddr,
    /// The UDP socket buffers the kernel granted.
    pub socket_buffers: SocketBuffers,
    handle: QuicListenHandle,
    task: JoinHandle<()>,
}

impl QuicListener {
    /// Connections open on each of the listener's QUIC endpoints (one entry per UDP socket;
    /// several with [`QuicSettings::server_endpoints`]).
    pub fn connections_per_endpoint(&self) -> Vec<usize> {
        self.handle.connections_per_endpoint()
    }

    /// QUIC Retry packets this listener sent ([`QuicSettings::retry_above_per_sec`]).
    pub fn retries_sent(&self) -> u64 {
        self.handle.retries_sent()
    }

    /// Stops accepting and closes every connection of this listener.
    pub fn close(&self) {
        self.handle
            .close(ErrorCode::ShuttingDown, "hub shutting down");
        self.task.abort();
    }
}

impl Drop for QuicListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Hub {
    /// A hub with `config`, recording into `metrics`. Its work queues live in memory.
    pub fn new(config: HubConfig, metrics: HubMetrics) -> Self {
        let core = HubCore::new(config.core_config(), metrics, Now::system());
        Hub {
            inner: Arc::new(HubInner {
                messages_out: core.message_out_table(),
                core,
                config,
                timer_task: OnceLock::new(),
                hub_ops: OnceLock::new(),
                store: Mutex::new(None),
                cluster: std::sync::RwLock::new(None),
            }),
        }
    }

    /// A hub whose work queues are kept in `store`: it starts with what the store holds, and
    /// acknowledges a task, or delivers it, only once the store has it. Writes of many
    /// connections go to the store together, one batch per commit, from a thread of its own.
    /// A store that cannot be read is an error (it names the store's file).
    ///
    /// ```
    /// use agentwire_hub::{Hub, HubConfig};
    /// use agentwire_hub::metrics::HubMetrics;
    /// use agentwire_queue::FileStore;
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = FileStore::open(dir.path()).unwrap();
    /// let hub = Hub::with_store(HubConfig::default(), HubMetrics::new(), Box::new(store)).unwrap();
    /// assert!(hub.queue_stats("jobs").is_none());
    /// ```
    pub fn with_store(
        config: HubConfig,
        metrics: HubMetrics,
        mut store: Box<dyn agentwire_queue::QueueStore>,
    ) -> Result<Self, agentwire_queue::StoreError> {
        let now = Now::system();
        let recovered = store.load()?;
        let core = HubCore::new(config.core_config(), metrics, now);
        core.restore_queues(recovered, now);
        let (writer, feed) = store::StoreWriter::channel();
        let inner = Arc::new(HubInner {
            messages_out: core.message_out_table(),
            core,
            config,
            timer_task: OnceLock::new(),
            hub_ops: OnceLock::new(),
            store: Mutex::new(Some(writer)),
            cluster: std::sync::RwLock::new(None),
        });
        feed.start(store, Arc::downgrade(&inner));
        Ok(Hub { inner })
    }

    /// Closes agent `agent_id`'s connection with `code` and `reason` (the agent sees both);
    /// `false` when it is not connected here.
    pub fn disconnect(&self, agent_id: &str, code: ErrorCode, reason: &str) -> bool {
        let mut actions = Vec::new();
        let found = self
            .inner
            .core
            .disconnect(agent_id, code, reason, Now::system(), &mut actions);
        apply(&self.inner, &mut actions);
        found
    }

    /// Puts a reloaded access policy in force; agents whose credential was removed or whose
    /// permissions changed are closed with `unauthorized` ([`HubCore::reload_access`]).
    /// Returns how many were closed.
    ///
    /// The CLI calls it on SIGHUP, with [`reload_certificates`](Self::reload_certificates).
    pub fn reload_access(&self, policy: Arc<AccessPolicy>) -> usize {
        let mut actions = Vec::new();
        let closed = self
            .inner
            .core
            .reload_access(policy, Now::system(), &mut actions);
        apply(&self.inner, &mut actions);
        closed
    }

    /// Sets what carries out the operations agents with an `admin` credential ask of the hub
    /// (requests to `$hub` with a [`HUB_OP_HEADER`]); once per hub (later calls are ignored).
    /// Without a handler such requests get an `internal` error. The handler runs on the task
    /// that read the request: keep it short, and hold the hub through a [`WeakHub`].
    pub fn on_hub_op(&self, handler: HubOpHandler) {
        let _ = self.inner.hub_ops.set(handler);
    }

    /// A handle that does not keep the hub alive.
    pub fn downgrade(&self) -> WeakHub {
        WeakHub(Arc::downgrade(&self.inner))
    }

    /// Reads the client CA file and the revoked-serials file again ([`ClientCa::reload`]; a
    /// file that cannot be read or parsed changes nothing), then closes with `unauthorized`
    /// every agent whose certificate is now revoked or no longer chains to a CA in force.
    /// Returns what is in force and how many agents were closed; `None` without a client CA.
    ///
    /// [`ClientCa::reload`]: agentwire_tls::ClientCa::reload
    pub fn reload_certificates(
        &self,
    ) -> Option<Result<(agentwire_tls::Reloaded, usize), agentwire_tls::TlsError>> {
        let ca = self.inner.config.client_ca.as_ref()?;
        Some(
            ca.reload()
                .map(|reloaded| (reloaded, self.recheck_certificates())),
        )
    }

    /// Checks every agent's certificate against the client CA in force, closing with
    /// `unauthorized` those it no longer accepts. Returns how many were closed.
    pub fn recheck_certificates(&self) -> usize {
        let mut actions = Vec::new();
        let mut closed = 0;
        for agent in self.inner.core.agents() {
            let certificate = agent.conn.driver().certificate.as_ref();
            if let Some(why) = self.inner.refused_certificate(certificate) {
                tracing::info!(agent = %agent.registration.agent_id, %why, "closing an agent after a certificate reload");
                self.inner
                    .core
                    .revoke(&agent.conn, &why, Now::system(), &mut actions);
                closed += 1;
            }
        }
        apply(&self.inner, &mut actions);
        closed
    }

    /// One work queue's counts (`None` for a queue unknown since start).
    pub fn queue_stats(&self, queue: &str) -> Option<agentwire_queue::QueueStats> {
        self.inner.core.queue_stats(queue)
    }

    /// The hub's metrics.
    pub fn metrics(&self) -> &HubMetrics {
        self.inner.core.metrics()
    }

    /// The configuration in force.
    pub fn config(&self) -> &HubConfig {
        &self.inner.config
    }

    /// Agents connected now.
    pub fn agent_count(&self) -> usize {
        self.inner.core.agent_count()
    }

    /// A snapshot of every connected agent, sorted by id (a cluster's queue-owner connection
    /// left out: it is no agent).
    pub fn agents(&self) -> Vec<AgentInfo> {
        self.inner
            .core
            .agents()
            .into_iter()
            .filter(|a| &*a.registration.agent_id != QUEUE_OWNER_ID)
            .map(AgentInfo::of)
            .collect()
    }

    /// Agent `agent_id`, if it is connected here (a cluster's stand-ins included).
    pub fn agent(&self, agent_id: &str) -> Option<AgentInfo> {
        self.inner.core.agent(agent_id).map(AgentInfo::of)
    }

    /// Starts accepting QUIC connections on `addr` (ALPN `agentwire/1`).
    pub fn listen_quic(
        &self,
        addr: SocketAddr,
        identity: &HubIdentity,
    ) -> Result<QuicListener, TransportError> {
        let config = &self.inner.config;
        let webtransport = config.webtransport.as_ref();
        if webtransport.is_some() && config.client_ca.is_some() {
            return Err(ConnectError::Config(
                "WebTransport sessions come from web pages, which show no client certificate: \
                 a hub with a client CA cannot take them (drop one of the two)"
                    .into(),
            )
            .into());
        }
        let alpn: &[&[u8]] = match webtransport {
            Some(_) => &[agentwire_tls::ALPN_AGENTWIRE, agentwire_tls::ALPN_H3],
            None => &[agentwire_tls::ALPN_AGENTWIRE],
        };
        let clients = config.client_ca.as_ref();
        let tls = match webtransport.and_then(|w| w.identity.as_ref()) {
            Some(browsers) => agentwire_tls::server_config_for_agents_and_browsers(
                identity, browsers, alpn, clients,
            ),
            None => agentwire_tls::server_config_for_agents(identity, alpn, clients),
        }
        .map_err(|e| ConnectError::Config(e.to_string()))?;
        let (listen, handle) = QuicListen::bind(
            addr,
            &config.quic,
            tls,
            config.stream_mapping,
            config.handshake_timeout,
        )?;
        let mut listen = listen.with_accept_limits(config.accept);
        if let Some(wt) = webtransport {
            listen = listen.with_webtransport(agentwire_transport::wt::WtOptions {
                origins: wt.origins.clone(),
            });
        }
        let task = self.spawn_listener(listen);
        tracing::info!(local_addr = %handle.local_addr, socket_buffers = ?handle.socket_buffers, "hub listening on QUIC");
        Ok(QuicListener {
            local_addr: handle.local_addr,
            socket_buffers: handle.socket_buffers,
            handle,
            task,
        })
    }

    /// Serves one already-established connection (any transport): handshake, then routing
    /// until it ends. Transports' listeners call this; tests may too.
    pub async fn serve_connection<S: FrameSender, R: FrameReceiver>(&self, sender: S, receiver: R) {
        self.serve_connection_as(sender, receiver, None).await
    }

    /// [`serve_connection`](Self::serve_connection) for a peer whose verified client
    /// certificate names `certified_id` (it may then take only that agent id).
    pub async fn serve_connection_as<S: FrameSender, R: FrameReceiver>(
        &self,
        sender: S,
        receiver: R,
        certified_id: Option<Arc<str>>,
    ) {
        self.inner
            .clone()
            .serve_connection(sender, receiver, certified_id, None, None)
            .await
    }

    /// [`serve_connection_as`](Self::serve_connection_as) for a connection whose `hello_gate`
    /// limits what it may send before its hello (opened once the hello is accepted).
    /// A `certificate` is checked against the client CA in force first (a resumed TLS
    /// session was not verified again), and kept to check after a reload.
    pub(crate) async fn serve_gated<S: FrameSender, R: FrameReceiver>(
        &self,
        sender: S,
        receiver: R,
        certificate: Option<agentwire_tls::AgentCertificate>,
        hello_gate: Option<agentwire_transport::hello_gate::HelloGate>,
    ) {
        self.start_timer();
        let certified_id = certificate.as_ref().and_then(|c| c.agent_id().cloned());
        self.inner
            .clone()
            .serve_connection(sender, receiver, certified_id, certificate, hello_gate)
            .await
    }

    /// Closes every agent's connection with `shutting-down`, and closes the queue store (after
    /// writing what it was given), so that another hub may open it.
    pub fn shutdown(&self) {
        let mut actions = Vec::new();
        self.inner.core.shutdown(Now::system(), &mut actions);
        apply(&self.inner, &mut actions);
        // Taken out first: the writer thread looks at the slot while it stops.
        let writer = self.inner.store_slot().take();
        if let Some(store) = writer {
            store.stop(Duration::from_secs(10));
        }
    }

    /// Starts the task that calls [`HubCore::on_timeout`] (once per hub).
    fn start_timer(&self) {
        let weak = Arc::downgrade(&self.inner);
        self.inner
            .timer_task
            .get_or_init(|| tokio::spawn(HubInner::timer_loop(weak)));
    }
}

impl HubInner {
    /// Why the client CA in force refuses `certificate` now, if it does.
    fn refused_certificate(
        &self,
        certificate: Option<&agentwire_tls::AgentCertificate>,
    ) -> Option<String> {
        let (ca, cert) = (self.config.client_ca.as_ref()?, certificate?);
        ca.check(cert, rustls_pki_types::UnixTime::now())
            .err()
            .map(|e| e.to_string())
    }

    async fn serve_connection<S: FrameSender, R: FrameReceiver>(
        self: Arc<Self>,
        sender: S,
        mut receiver: R,
        certified_id: Option<Arc<str>>,
        certificate: Option<agentwire_tls::AgentCertificate>,
        hello_gate: Option<agentwire_transport::hello_gate::HelloGate>,
    ) {
        let transport = sender.kind();
        let _guard = self.core.metrics().connection_guard(transport.name());
        if let Some(why) = self.refused_certificate(certificate.as_ref()) {
            tracing::info!(%why, "refusing a connection before its hello");
            self.core.metrics().dropped("credential-revoked");
            sender.close(ErrorCode::Unauthorized, &why);
            return;
        }
        let driver = ConnDriver {
            wake: Notify::new(),
            control: Box::new(sender.clone()),
            linger: Mutex::new(None),
            certificate,
        };
        let peer = Peer {
            remote: sender.stats().remote_addr.map(|a| a.ip()),
            certified_id,
        };
        // Nothing bigger than a hello until the hello is read: the core's registration
        // raises the limit to the agreed one.
        receiver.set_max_frame_size(agentwire_proto::MAX_HELLO_FRAME);
        let mut opened = Vec::new();
        let conn = self
            .core
            .open_from(transport, peer, driver, Now::system(), &mut opened);
        apply(&self, &mut opened);
        let writer = tokio::spawn(writer_loop(self.clone(), conn.clone(), sender));
        let mut actions = Vec::new();
        loop {
            match receiver.recv_frame().await {
                Ok(Some(raw)) => {
                    let reply = receiver.take_reply_slot();
                    self.core
                        .on_frame(&conn, raw, reply, Now::system(), &mut actions);
                }
                Ok(None) => self.core.on_closed(
                    &conn,
                    ErrorCode::Normal,
                    "connection closed",
                    Now::system(),
                    &mut actions,
                ),
                Err(e) => self.core.on_closed(
                    &conn,
                    e.close_code(),
                    &e.to_string(),
                    Now::system(),
                    &mut actions,
                ),
            }
            for action in &actions {
                if let Action::Registered(c) = action {
                    if let (true, Some(reg)) = (Arc::ptr_eq(c, &conn), c.registration()) {
                        receiver.set_max_frame_size(reg.max_frame_size);
                        if let Some(gate) = &hello_gate {
                            gate.open();
                        }
                    }
                }
            }
            apply(&self, &mut actions);
            if conn.is_closed() {
                break;
            }
        }
        let lingering = conn.driver().linger.lock_or_recover().is_some();
        if lingering {
            let _ = writer.await;
        } else {
            writer.abort();
        }
    }

    async fn timer_loop(hub: Weak<HubInner>) {
        let period = match hub.upgrade() {
            Some(h) => h.core.timer_period(),
            None => return,
        };
        let mut actions = Vec::new();
        loop {
            tokio::time::sleep(period).await;
            let Some(hub) = hub.upgrade() else { return };
            hub.core.on_timeout(Now::system(), &mut actions);
            apply(&hub, &mut actions);
        }
    }
}

/// Carries out what the core asked for. Closes first, then wake-ups, so that a writer woken
/// for a reject already knows it must close after sending it. (The reader whose handshake
/// registered applies the receiving half's frame limit itself.)
fn apply(hub: &HubInner, actions: &mut HubActions) {
    for action in actions.iter_mut() {
        match action {
            Action::Persist { token, writes } => match hub.store_slot().as_ref() {
                Some(store) => store.submit(*token, std::mem::take(writes)),
                None => tracing::error!(
                    "the hub core asked for a queue store write, but the hub has no store"
                ),
            },
            Action::Registered(conn) => {
                if let Some(reg) = conn.registration() {
                    let control = &conn.driver().control;
                    control.set_peer_frame_limit(reg.max_frame_size);
                    control.hello_accepted();
                    if reg.counted_goodbye {
                        control.count_streams_in_goodbye();
                    }
                }
            }
            Action::Close {
                conn,
                code,
                reason,
                linger,
            } => {
                let driver = conn.driver();
                if *linger {
                    *driver.linger.lock_or_recover() = Some((*code, reason.clone()));
                } else {
                    driver.control.close(*code, reason);
                }
                driver.wake.notify_one();
            }
            Action::HubOp {
                conn,
                request,
                op,
                reply,
            } => {
                // Rare and quick (a few files read): done here, on the task that read the
                // request.
                let result = match hub.hub_ops.get() {
                    Some(handler) => handler(*op),
                    None => Err(HubOpError::NoHandler),
                };
                let mut answer = Vec::new();
                hub.core.answer_hub_op(
                    conn,
                    *request,
                    result,
                    reply.take(),
                    Now::system(),
                    &mut answer,
                );
                apply(hub, &mut answer);
            }
            Action::AgentsChanged => {
                if let Some(cluster) = hub.cluster.read_or_recover().as_ref() {
                    cluster.agents_changed();
                }
            }
            Action::Wake(_) => {}
        }
    }
    for action in actions.drain(..) {
        if let Action::Wake(conn) = action {
            conn.driver().wake.notify_one();
        }
    }
}

/// Takes the frames the core queued for one connection and hands them to its transport.
async fn writer_loop<S: FrameSender>(hub: Arc<HubInner>, conn: Arc<HubConn>, sender: S) {
    loop {
        conn.driver().wake.notified().await;
        // Everything queued now goes out together: fed to the transport, flushed once the
        // queue is empty (one TLS record and system call for many small frames).
        let mut fed = false;
        while let Some(out) = hub.core.poll_outbound(&conn) {
            let len = out.frame.len() as u64;
            let class = out.class;
            let result = match (out.reply, class) {
                (Some(slot), SendClass::Message(priority)) => {
                    sender.send_reply(out.frame, priority, slot).await
                }
                (_, class) => {
                    fed = true;
                    sender.feed_frame(out.frame, class).await
                }
            };
            if let Err(e) = result {
                tracing::debug!(agent = ?conn.registration().map(|r| &r.agent_id), "send failed: {e}");
                sender.close(e.close_code(), &e.to_string());
                return;
            }
            if let Some(kind) = out.kind {
                hub.messages_out
                    .record(usize::from(kind.code()), class.priority().index(), len);
            }
        }
        if fed {
            if let Err(e) = sender.flush().await {
                tracing::debug!(agent = ?conn.registration().map(|r| &r.agent_id), "flush failed: {e}");
                sender.close(e.close_code(), &e.to_string());
                return;
            }
        }
        hub.core.written(&conn);
        if conn.is_closed() {
            // Read, not taken: `serve_connection` checks it too, to wait for this linger
            // rather than abort it (aborting dropped the sender, which closed the connection
            // before the peer had read the reject: a page saw "Connection lost").
            let linger = conn.driver().linger.lock_or_recover().clone();
            if let Some((code, reason)) = linger {
                let _ = tokio::time::timeout(REJECT_LINGER, sender.closed()).await;
                sender.close(code, &reason);
            }
            return;
        }
    }
}
