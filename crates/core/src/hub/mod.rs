//! The hub: accepts agents on any transport, routes their messages, tracks liveness.
//!
//! The hub owns the registry (unique agent ids, see [`DuplicatePolicy`]), routing (direct,
//! topic, broadcast, request/response), bounded per-agent send queues, liveness from
//! heartbeats and the join/leave events published on the [`PRESENCE_TOPIC`] topic. It runs the
//! same logic over every transport through [`FrameSender`]/[`FrameReceiver`]; it must not know
//! about streams, datagrams or sockets.
//!
//! Back-pressure policy: the hub never waits on a slow agent. Each agent has a bounded queue
//! (`agent_queue_capacity` frames); when a direct message finds it full, the sender gets a
//! [`Kind::Error`] envelope with code `queue-full` and the message's id as correlation. Topic
//! and broadcast copies that find a queue full are dropped for that subscriber and counted in
//! `agentwire_hub_dropped_messages_total{reason="queue-full"}`. Memory is bounded by
//! agents × queue capacity × frame size.

mod listen;
mod registry;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use agentwire_proto::{
    Codec, Destination, Envelope, ErrorCode, Frame, HubDecision, HubHandshake, HubPolicy, Kind,
    Priority, RawFrame,
};
use bytes::Bytes;
use tokio::task::JoinHandle;

pub use listen::{BoundAddr, Listener};
pub use registry::{AgentInfo, ConnectionControl, DuplicatePolicy};
use registry::{AgentSlot, Outbound, Registered, Registry};

use crate::clock::now_us;
use crate::metrics::HubMetrics;
use crate::settings::{QuicSettings, SocketBuffers, StreamMapping};
use crate::tls::HubIdentity;
use crate::transport::quic_budget::{Admission, ReceiveBudget};
use crate::transport::{quic, FrameReceiver, FrameSender, ReplySlot, SendClass, TransportError};

/// The topic on which the hub publishes `join` and `leave` events. Subscribe to it to learn
/// who comes and goes; the events are [`Kind::Event`] envelopes from [`HUB_ID`] with headers
/// `event` (`join`/`leave`), `agent`, `role` and, for leaves, `reason`.
pub const PRESENCE_TOPIC: &str = "$presence";

/// The `from` of envelopes the hub itself sends (errors, presence events).
pub const HUB_ID: &str = "$hub";

/// Longest time the hub keeps a request's reply stream open waiting for its answer.
const MAX_REPLY_WAIT: Duration = Duration::from_secs(60);

/// Requests remembered for the latency histogram; beyond this the oldest are forgotten.
const MAX_TRACKED_REQUESTS: usize = 100_000;

/// Hub configuration.
///
/// ```
/// use agentwire::hub::HubConfig;
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
    pub websocket: crate::transport::ws::WsOptions,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            policy: HubPolicy {
                capabilities: vec!["datagrams".into()],
                ..HubPolicy::default()
            },
            heartbeat_miss_limit: 3,
            agent_queue_capacity: 4096,
            handshake_timeout: Duration::from_secs(10),
            duplicate_policy: DuplicatePolicy::RejectNew,
            quic: QuicSettings::default(),
            stream_mapping: StreamMapping::PerMessage,
            unix_socket_mode: crate::transport::uds::DEFAULT_SOCKET_MODE,
            websocket: crate::transport::ws::WsOptions::default(),
        }
    }
}

/// A running hub. Cheap to clone; every clone is the same hub.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<HubInner>,
}

struct HubInner {
    config: HubConfig,
    handshake: HubHandshake,
    registry: Registry,
    metrics: HubMetrics,
    started: Instant,
    next_session: AtomicU64,
    next_id: AtomicU64,
    requests: Mutex<HashMap<(String, u64), Instant>>,
    liveness_task: OnceLock<JoinHandle<()>>,
}

/// A QUIC listener of a hub.
pub struct QuicListener {
    /// The address bound (useful with port 0).
    pub local_addr: SocketAddr,
    /// The UDP socket buffers the kernel granted.
    pub socket_buffers: SocketBuffers,
    endpoint: quinn::Endpoint,
    task: JoinHandle<()>,
}

impl QuicListener {
    /// Stops accepting and closes every connection of this listener.
    pub fn close(&self) {
        self.endpoint.close(
            quinn::VarInt::from_u32(ErrorCode::ShuttingDown.code()),
            b"hub shutting down",
        );
        self.task.abort();
    }
}

impl Drop for QuicListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why the reader loop for one agent ended.
struct Ending {
    code: ErrorCode,
    reason: String,
}

impl Hub {
    /// A hub with `config`, recording into `metrics`.
    pub fn new(config: HubConfig, metrics: HubMetrics) -> Self {
        Hub {
            inner: Arc::new(HubInner {
                handshake: HubHandshake::new(config.policy.clone()),
                config,
                registry: Registry::default(),
                metrics,
                started: Instant::now(),
                next_session: AtomicU64::new(1),
                next_id: AtomicU64::new(1),
                requests: Mutex::new(HashMap::new()),
                liveness_task: OnceLock::new(),
            }),
        }
    }

    /// The hub's metrics.
    pub fn metrics(&self) -> &HubMetrics {
        &self.inner.metrics
    }

    /// The configuration in force.
    pub fn config(&self) -> &HubConfig {
        &self.inner.config
    }

    /// Agents connected now.
    pub fn agent_count(&self) -> usize {
        self.inner.registry.len()
    }

    /// A snapshot of every connected agent, sorted by id.
    pub fn agents(&self) -> Vec<AgentInfo> {
        let mut v: Vec<AgentInfo> = self
            .inner
            .registry
            .all()
            .iter()
            .map(|s| Registry::info(s))
            .collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Starts accepting QUIC connections on `addr` (ALPN `agentwire/1`).
    pub fn listen_quic(
        &self,
        addr: SocketAddr,
        identity: &HubIdentity,
    ) -> Result<QuicListener, TransportError> {
        let tls = crate::tls::server_config(identity, &[crate::tls::ALPN_AGENTWIRE])
            .map_err(|e| TransportError::Connect(e.to_string()))?;
        let quic::ServerEndpoint {
            endpoint,
            socket_buffers,
            config: server_config,
        } = quic::server_endpoint(addr, &self.inner.config.quic, tls)?;
        let server_config = Arc::new(server_config);
        let local_addr = endpoint
            .local_addr()
            .map_err(|e| TransportError::Io(e.to_string()))?;
        self.start_liveness();
        let inner = self.inner.clone();
        let ep = endpoint.clone();
        let quic = &self.inner.config.quic;
        let budget = (quic.receive_budget > 0)
            .then(|| ReceiveBudget::new(quic.receive_budget, quic.receive_window));
        let task = tokio::spawn(async move {
            while let Some(incoming) = ep.accept().await {
                let inner = inner.clone();
                let server_config = server_config.clone();
                let admission = budget.as_ref().map(ReceiveBudget::admit);
                tokio::spawn(async move {
                    inner.accept_quic(incoming, &server_config, admission).await
                });
            }
        });
        tracing::info!(%local_addr, ?socket_buffers, "hub listening on QUIC");
        Ok(QuicListener {
            local_addr,
            socket_buffers,
            endpoint,
            task,
        })
    }

    /// Serves one already-established connection (any transport): handshake, then routing
    /// until it ends. Transports' listeners call this; tests may too.
    pub async fn serve_connection<S: FrameSender, R: FrameReceiver>(&self, sender: S, receiver: R) {
        self.start_liveness();
        self.inner.clone().serve_connection(sender, receiver).await
    }

    /// Closes every agent's connection with `shutting-down`.
    pub fn shutdown(&self) {
        for slot in self.inner.registry.all() {
            slot.connection
                .close(ErrorCode::ShuttingDown, "hub shutting down");
        }
    }

    fn start_liveness(&self) {
        let inner = self.inner.clone();
        self.inner.liveness_task.get_or_init(|| {
            let weak = Arc::downgrade(&inner);
            tokio::spawn(async move { HubInner::liveness_loop(weak).await })
        });
    }
}

impl HubInner {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    async fn accept_quic(
        self: Arc<Self>,
        incoming: quinn::Incoming,
        config: &quinn::ServerConfig,
        mut admission: Option<Admission>,
    ) {
        let metrics = &self.metrics;
        let timeout = self.config.handshake_timeout;
        let window = admission.as_ref().map(Admission::window);
        let connecting = match quic::accept_incoming(incoming, config, &self.config.quic, window) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("refused QUIC connection: {e}");
                metrics.handshake("quic", crate::metrics::outcome::FAILED);
                return;
            }
        };
        // Take the connection at 0.5-RTT so that a control stream sent as 0-RTT data can be
        // seen arriving before the handshake completes (that is how the hub counts accepted
        // 0-RTT), but act on nothing until the handshake has completed: a replayed 0-RTT
        // flight never completes it, so it can never register an agent.
        let Ok((conn, handshake_done)) = connecting.into_0rtt() else {
            metrics.handshake("quic", crate::metrics::outcome::FAILED);
            return;
        };
        // Raise the connection window from the common starting value to its share now, so
        // the MAX_DATA leaves with the hub's first 1-RTT packets.
        if let Some(admission) = admission.as_mut() {
            admission.register(&conn);
        }
        let setup = async {
            tokio::pin!(handshake_done);
            let (control, early) = tokio::select! {
                biased;
                _ = &mut handshake_done => (conn.accept_bi().await, false),
                control = conn.accept_bi() => (control, true),
            };
            if early {
                // On the server this resolves when the handshake completes; its value is not
                // meaningful there (quinn reports 0-RTT acceptance to clients only).
                let _ = handshake_done.await;
            }
            (control, early)
        };
        let (control, zero_rtt) = match tokio::time::timeout(timeout, setup).await {
            Ok((Ok(streams), zero_rtt)) => (streams, zero_rtt),
            Ok((Err(e), _)) => {
                tracing::debug!("QUIC handshake failed: {e}");
                metrics.handshake("quic", crate::metrics::outcome::FAILED);
                return;
            }
            Err(_) => {
                conn.close(
                    quinn::VarInt::from_u32(ErrorCode::HandshakeTimeout.code()),
                    b"no control stream in time",
                );
                metrics.handshake("quic", crate::metrics::outcome::FAILED);
                return;
            }
        };
        if let Some(reason) = conn.close_reason() {
            // The handshake failed after 0-RTT data arrived (e.g. a replayed flight).
            tracing::debug!("QUIC handshake failed: {reason}");
            metrics.handshake("quic", crate::metrics::outcome::FAILED);
            return;
        }
        if zero_rtt {
            metrics.zero_rtt(true);
        }
        let (sender, receiver) = quic::split_connection(
            conn,
            control,
            self.config.stream_mapping,
            self.config.quic.datagrams,
        );
        self.serve_connection(sender, receiver).await;
    }

    async fn serve_connection<S: FrameSender, R: FrameReceiver>(
        self: Arc<Self>,
        sender: S,
        mut receiver: R,
    ) {
        let transport = sender.kind();
        let _guard = self.metrics.connection_guard(transport.name());
        let Some(slot) = self.handshake(&sender, &mut receiver).await else {
            return;
        };
        let writer = tokio::spawn(writer_loop(
            slot.clone(),
            sender.clone(),
            self.metrics.clone(),
        ));
        self.publish_presence(&slot, "join", None);

        let ending = loop {
            match receiver.recv_frame().await {
                Ok(Some(raw)) => {
                    slot.touch(self.now_ms());
                    let reply = receiver.take_reply_slot();
                    if let Err(ending) = self.on_frame(&slot, raw, reply) {
                        break ending;
                    }
                }
                Ok(None) => {
                    break Ending {
                        code: ErrorCode::Normal,
                        reason: "connection closed".into(),
                    }
                }
                Err(e) => {
                    break Ending {
                        code: e.close_code(),
                        reason: e.to_string(),
                    }
                }
            }
        };
        if ending.code != ErrorCode::Normal {
            tracing::warn!(agent = %slot.id, code = %ending.code, reason = %ending.reason, "closing agent connection");
            self.metrics.error(ending.code.name());
        }
        sender.close(ending.code, &ending.reason);
        self.remove(&slot, ending.code);
        writer.abort();
    }

    /// Runs the hello/welcome exchange and registers the agent.
    async fn handshake<S: FrameSender, R: FrameReceiver>(
        &self,
        sender: &S,
        receiver: &mut R,
    ) -> Option<Arc<AgentSlot>> {
        let transport = sender.kind().name();
        let first =
            tokio::time::timeout(self.config.handshake_timeout, receiver.recv_frame()).await;
        let raw = match first {
            Ok(Ok(Some(raw))) => raw,
            Ok(Ok(None)) => return None,
            Ok(Err(e)) => {
                self.metrics
                    .handshake(transport, crate::metrics::outcome::FAILED);
                sender.close(e.close_code(), &e.to_string());
                return None;
            }
            Err(_) => {
                self.metrics
                    .handshake(transport, crate::metrics::outcome::FAILED);
                sender.close(ErrorCode::HandshakeTimeout, "no hello in time");
                return None;
            }
        };
        let session_id = self.next_session.fetch_add(1, Ordering::Relaxed);
        let (reply, session) = match self.handshake.on_frame(&raw, session_id) {
            HubDecision::Accept { reply, session } => (reply, session),
            HubDecision::Reject { reply, code } => {
                self.reject(sender, reply, code).await;
                return None;
            }
        };
        let slot = Arc::new(AgentSlot {
            id: session.agent_id.clone(),
            role: session.role.clone(),
            session_id,
            codec: session.codec,
            transport: sender.kind(),
            queue: crate::queue::PriorityQueue::new(self.config.agent_queue_capacity),
            topics: Mutex::new(Default::default()),
            last_seen_ms: AtomicU64::new(self.now_ms()),
            connection: Box::new(sender.clone()),
            connected_at: Instant::now(),
            replies: Mutex::new(HashMap::new()),
        });
        match self
            .registry
            .register(slot.clone(), self.config.duplicate_policy)
        {
            Ok(Registered::Fresh) => {}
            Ok(Registered::Replaced(old)) => {
                old.connection
                    .close(ErrorCode::Replaced, "replaced by a newer connection");
                self.retire(&old, ErrorCode::Replaced);
            }
            Err(code) => {
                let reply = agentwire_proto::Reject::new(
                    code,
                    format!("agent id {:?} is already connected", session.agent_id),
                )
                .to_frame();
                self.reject(sender, reply, code).await;
                return None;
            }
        }
        sender.set_peer_max_frame_size(session.max_frame_size);
        receiver.set_max_frame_size(session.max_frame_size);
        if let Err(e) = sender.send_frame(reply, SendClass::Control).await {
            tracing::debug!("welcome not sent: {e}");
            self.remove(&slot, ErrorCode::Internal);
            return None;
        }
        self.metrics
            .handshake(transport, crate::metrics::outcome::ACCEPTED);
        self.metrics.agent_registered(transport);
        tracing::debug!(agent = %slot.id, session_id, codec = %slot.codec, transport, "agent joined");
        Some(slot)
    }

    /// Sends a reject, gives the agent a moment to read it and close, then closes.
    async fn reject<S: FrameSender>(&self, sender: &S, reply: Bytes, code: ErrorCode) {
        self.metrics
            .handshake(sender.kind().name(), crate::metrics::outcome::REJECTED);
        self.metrics.error(code.name());
        if sender.send_frame(reply, SendClass::Control).await.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(2), sender.closed()).await;
        }
        sender.close(code, code.name());
    }

    /// Handles one frame from a registered agent. An `Err` ends that agent's connection.
    fn on_frame(
        &self,
        slot: &Arc<AgentSlot>,
        raw: RawFrame,
        reply: Option<ReplySlot>,
    ) -> Result<(), Ending> {
        let frame = Frame::decode(&raw, slot.codec).map_err(|e| Ending {
            code: e.close_code(),
            reason: e.to_string(),
        })?;
        let limits = &self.config.policy.limits;
        match frame {
            Frame::Envelope(mut env) => {
                limits.check_envelope(&env).map_err(|e| Ending {
                    code: ErrorCode::LimitExceeded,
                    reason: e.to_string(),
                })?;
                self.metrics.message_in(
                    env.kind.name(),
                    env.priority.name(),
                    env.body.len() as u64,
                );
                if env.from != slot.id {
                    env.from.clone_from(&slot.id);
                }
                if let (Kind::Request, Some(reply)) = (env.kind, reply) {
                    // The answer (or the hub's error) goes back on the request's own stream.
                    let ttl = match env.ttl_ms {
                        0 => MAX_REPLY_WAIT,
                        ms => Duration::from_millis(u64::from(ms)).min(MAX_REPLY_WAIT),
                    };
                    slot.keep_reply(env.id, reply, Instant::now() + ttl);
                }
                self.route(slot, env);
                Ok(())
            }
            Frame::Subscribe(topic) => {
                limits.check_name(&topic).map_err(|e| Ending {
                    code: ErrorCode::LimitExceeded,
                    reason: e.to_string(),
                })?;
                self.registry.subscribe(slot, &topic);
                Ok(())
            }
            Frame::Unsubscribe(topic) => {
                self.registry.unsubscribe(slot, &topic);
                Ok(())
            }
            Frame::Heartbeat(_) => Ok(()),
            Frame::Goodbye(g) => Err(Ending {
                code: ErrorCode::Normal,
                reason: format!("goodbye: {}", g.reason),
            }),
            Frame::Hello(_) | Frame::Welcome(_) | Frame::Reject(_) => Err(Ending {
                code: ErrorCode::ProtocolViolation,
                reason: "handshake frame after the handshake".into(),
            }),
        }
    }

    fn route(&self, from: &Arc<AgentSlot>, env: Envelope) {
        if env.is_expired(now_us()) {
            self.metrics.dropped("expired");
            self.send_error(
                from,
                env.id,
                ErrorCode::Expired,
                "ttl ran out before delivery",
            );
            return;
        }
        self.track_request(&env);
        let encoded = EncodedFrame::new(&env);
        match &env.to {
            Destination::Agent(id) => match self.registry.get(id) {
                None => self.send_error(
                    from,
                    env.id,
                    ErrorCode::UnknownAgent,
                    &format!("no agent {id:?} is connected"),
                ),
                Some(target) => {
                    if !self.enqueue(&target, &encoded, env.priority, env.kind, env.correlation) {
                        self.send_error(
                            from,
                            env.id,
                            ErrorCode::QueueFull,
                            &format!("agent {id:?} is not keeping up (queue full)"),
                        );
                    }
                }
            },
            Destination::Topic(topic) => {
                for target in self.registry.subscribers(topic) {
                    if !Arc::ptr_eq(&target, from) {
                        self.enqueue(&target, &encoded, env.priority, env.kind, None);
                    }
                }
            }
            Destination::Broadcast => {
                for target in self.registry.all() {
                    if !Arc::ptr_eq(&target, from) {
                        self.enqueue(&target, &encoded, env.priority, env.kind, None);
                    }
                }
            }
        }
    }

    /// Queues a frame for `target`; false (and counted) if its queue is full or closed.
    fn enqueue(
        &self,
        target: &AgentSlot,
        encoded: &EncodedFrame<'_>,
        priority: Priority,
        kind: Kind,
        correlation: Option<u64>,
    ) -> bool {
        let Some(frame) = encoded.get(target.codec) else {
            self.metrics.dropped("encode-failed");
            return false;
        };
        let reply = match (kind, correlation) {
            (Kind::Response | Kind::Error, Some(id)) => target.take_reply(id),
            _ => None,
        };
        let out = Outbound {
            frame,
            priority,
            kind: Some(kind),
            reply,
        };
        match target.queue.try_push(out, priority) {
            Ok(()) => {
                self.metrics.queue_depth_add(1);
                true
            }
            Err(_) => {
                self.metrics.dropped("queue-full");
                false
            }
        }
    }

    fn track_request(&self, env: &Envelope) {
        let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        match (env.kind, &env.to, env.correlation) {
            (Kind::Request, Destination::Agent(_), _) => {
                if requests.len() >= MAX_TRACKED_REQUESTS {
                    requests.clear();
                }
                requests.insert((env.from.clone(), env.id), Instant::now());
            }
            (Kind::Response | Kind::Error, Destination::Agent(to), Some(corr)) => {
                if let Some(start) = requests.remove(&(to.clone(), corr)) {
                    self.metrics.request_latency(start.elapsed().as_secs_f64());
                }
            }
            _ => {}
        }
    }

    fn hub_envelope(&self, to: Destination, kind: Kind) -> Envelope {
        Envelope::new(
            self.next_id.fetch_add(1, Ordering::Relaxed),
            HUB_ID,
            to,
            kind,
        )
        .with_timestamp_us(now_us())
    }

    /// Tells `to` that its message `correlation` failed.
    fn send_error(&self, to: &AgentSlot, correlation: u64, code: ErrorCode, reason: &str) {
        self.metrics.error(code.name());
        let env = self
            .hub_envelope(Destination::agent(to.id.clone()), Kind::Error)
            .with_correlation(correlation)
            .with_priority(Priority::High)
            .with_header("code", code.name())
            .with_body(reason.as_bytes().to_vec());
        let encoded = EncodedFrame::new(&env);
        self.enqueue(to, &encoded, Priority::High, Kind::Error, Some(correlation));
    }

    fn publish_presence(&self, slot: &AgentSlot, event: &str, reason: Option<ErrorCode>) {
        let mut env = self
            .hub_envelope(Destination::topic(PRESENCE_TOPIC), Kind::Event)
            .with_priority(Priority::High)
            .with_header("event", event)
            .with_header("agent", slot.id.clone())
            .with_header("role", slot.role.clone());
        if let Some(code) = reason {
            env = env.with_header("reason", code.name());
        }
        let encoded = EncodedFrame::new(&env);
        for target in self.registry.subscribers(PRESENCE_TOPIC) {
            if target.id != slot.id {
                self.enqueue(&target, &encoded, Priority::High, Kind::Event, None);
            }
        }
    }

    /// Unregisters `slot` (if still registered) and tells the others.
    fn remove(&self, slot: &Arc<AgentSlot>, code: ErrorCode) {
        if self.registry.unregister(slot) {
            self.retire(slot, code);
        }
    }

    /// Bookkeeping for a slot that left the registry.
    fn retire(&self, slot: &AgentSlot, code: ErrorCode) {
        let dropped = slot.queue.close();
        self.metrics.queue_depth_add(-(dropped as i64));
        self.metrics
            .agent_removed(slot.transport.name(), code.name());
        tracing::debug!(agent = %slot.id, reason = %code, "agent left");
        self.publish_presence(slot, "leave", Some(code));
    }

    async fn liveness_loop(hub: std::sync::Weak<HubInner>) {
        loop {
            let period = match hub.upgrade() {
                Some(h) => {
                    Duration::from_millis(u64::from(h.config.policy.heartbeat_interval_ms.max(10)))
                }
                None => return,
            };
            tokio::time::sleep(period / 2).await;
            let Some(hub) = hub.upgrade() else { return };
            let limit_ms = u64::from(hub.config.policy.heartbeat_interval_ms)
                * u64::from(hub.config.heartbeat_miss_limit.max(1));
            let now = hub.now_ms();
            let instant = Instant::now();
            for slot in hub.registry.all() {
                slot.drop_expired_replies(instant);
                let seen = slot.last_seen_ms.load(Ordering::Relaxed);
                if now.saturating_sub(seen) > limit_ms {
                    tracing::info!(agent = %slot.id, silent_ms = now - seen, "agent missed its heartbeats; removing");
                    slot.connection
                        .close(ErrorCode::LivenessTimeout, "missed heartbeats");
                    hub.remove(&slot, ErrorCode::LivenessTimeout);
                }
            }
        }
    }
}

/// Takes frames from an agent's queue and hands them to its transport.
async fn writer_loop<S: FrameSender>(slot: Arc<AgentSlot>, sender: S, metrics: HubMetrics) {
    while let Some(out) = slot.queue.pop().await {
        metrics.queue_depth_add(-1);
        let len = out.frame.len() as u64;
        let result = match (out.reply, out.kind) {
            (Some(slot), _) => sender.send_reply(out.frame, out.priority, slot).await,
            (None, Some(Kind::Request)) => {
                sender
                    .send_frame(out.frame, SendClass::Request(out.priority))
                    .await
            }
            (None, _) => {
                sender
                    .send_frame(out.frame, SendClass::Message(out.priority))
                    .await
            }
        };
        if let Err(e) = result {
            tracing::debug!(agent = %slot.id, "send failed: {e}");
            sender.close(e.close_code(), &e.to_string());
            return;
        }
        if let Some(kind) = out.kind {
            metrics.message_out(kind.name(), out.priority.name(), len);
        }
    }
}

/// An envelope encoded lazily, at most once per codec, for fan-out.
struct EncodedFrame<'a> {
    env: &'a Envelope,
    msgpack: OnceLock<Option<Bytes>>,
    json: OnceLock<Option<Bytes>>,
}

impl<'a> EncodedFrame<'a> {
    fn new(env: &'a Envelope) -> Self {
        EncodedFrame {
            env,
            msgpack: OnceLock::new(),
            json: OnceLock::new(),
        }
    }

    fn get(&self, codec: Codec) -> Option<Bytes> {
        let cell = match codec {
            Codec::MsgPack => &self.msgpack,
            Codec::Json => &self.json,
        };
        cell.get_or_init(|| Frame::encode_envelope(self.env, codec).ok())
            .clone()
    }
}
