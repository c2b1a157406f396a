//! The public agent API: connect to a hub, send, request, subscribe, receive.
//!
//! An [`Agent`] is a connected session. Its [`AgentHandle`] (cloneable, `Send + Sync`) sends;
//! its [`Inbox`] yields [`Incoming`] messages, each of which can be answered with
//! [`Incoming::reply`]. Requests are matched to responses by correlation id, so they work the
//! same on every transport.
//!
//! Back-pressure: sends wait while the agent's bounded send queue is full. Received messages
//! wait in a bounded inbox; if the application does not read it, the transport stops reading
//! and the hub's queue for this agent fills, and senders then get `queue-full` errors.
//!
//! This module owns the agent-side session logic; it must not parse frames itself (that is
//! `agentwire_proto`) or know stream details (that is `transport`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), agentwire::AgentError> {
//! use agentwire::{Agent, AgentOptions, HubTrust};
//! use std::time::Duration;
//!
//! let trust = HubTrust::ca_file("certs/ca.pem".as_ref())?;
//! let opts = AgentOptions::new("worker-1", "quic://127.0.0.1:4433", trust);
//! let mut agent = Agent::connect(opts).await?;
//! while let Some(msg) = agent.recv().await {
//!     if msg.envelope.kind == agentwire::Kind::Request {
//!         msg.reply(msg.envelope.body.clone()).await?;
//!     }
//! }
//! # Ok(()) }
//! ```

use agentwire_sync::LockExt;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentwire_proto::frame::Goodbye;
use agentwire_proto::{
    Destination, Envelope, ErrorCode, Frame, FrameError, Kind, Priority, Session,
};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use agentwire_transport::clock::now_us;
use agentwire_transport::queue::PriorityQueue;
#[cfg(feature = "quic")]
use agentwire_transport::quic::QuicEndpointHandle;
use agentwire_transport::settings::SocketBuffers;
use agentwire_transport::ConnectionControl;
use agentwire_transport::ReplySlot;
use agentwire_transport::{
    ConnectionStats, FrameReceiver, FrameSender, SendClass, TransportError, TransportKind,
};

mod connector;
mod error;
mod options;
mod tasks;

#[cfg(not(feature = "quic"))]
use connector::QuicEndpointHandle;
pub use connector::{Connector, RawConnection};
use error::connection_ended;
pub use error::{AgentError, FailedAttempt};
pub use options::AgentOptions;
use tasks::{agent_heartbeat, agent_reader, agent_writer};

/// Agent-side counters, with the connection's network counters.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct AgentStats {
    /// Network counters.
    pub connection: ConnectionStats,
    /// Envelopes queued for sending.
    pub messages_sent: u64,
    /// Envelopes received.
    pub messages_received: u64,
    /// Connections through this agent's connector whose 0-RTT data the hub accepted.
    pub zero_rtt_accepted: u64,
    /// Connections whose 0-RTT data the hub rejected (the hello was then resent).
    pub zero_rtt_rejected: u64,
    /// Whether this connection's hello went as accepted 0-RTT data.
    pub zero_rtt_used: bool,
    /// UDP socket buffers granted.
    pub socket_buffers: SocketBuffers,
}

struct AgentCounters {
    zero_rtt_accepted: Arc<AtomicU64>,
    zero_rtt_rejected: Arc<AtomicU64>,
    zero_rtt_used: bool,
    socket_buffers: SocketBuffers,
}

/// One frame waiting to be sent by the agent.
struct Outgoing {
    frame: Bytes,
    class: SendClass,
    /// For an answer: the stream its request arrived on.
    reply: Option<ReplySlot>,
    /// Written only once the peer has everything written before it (the goodbye: on QUIC it
    /// travels on the control stream and could otherwise overtake messages on their own).
    after_delivery: bool,
}

/// A connected agent: a sending handle plus the inbox of received messages.
pub struct Agent {
    handle: AgentHandle,
    inbox: Inbox,
}

/// The sending side of an agent. Cheap to clone.
#[derive(Clone)]
pub struct AgentHandle {
    inner: Arc<AgentInner>,
}

struct AgentInner {
    session: Session,
    /// The hub address this connection went to (one of the fallbacks, maybe).
    hub_url: String,
    transport: TransportKind,
    queue: Arc<PriorityQueue<Outgoing>>,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Pending>>,
    connection: Box<dyn ConnectionControl>,
    closed: tokio::sync::watch::Receiver<Option<TransportError>>,
    sent: AtomicU64,
    received: AtomicU64,
    counters: AgentCounters,
    quic: Option<QuicEndpointHandle>,
}

/// Received messages.
pub struct Inbox {
    rx: mpsc::Receiver<Incoming>,
}

/// A received message, with a way to answer it.
pub struct Incoming {
    /// The message.
    pub envelope: Envelope,
    handle: AgentHandle,
    /// For a request that arrived on a stream able to carry its answer (QUIC).
    reply_slot: Mutex<Option<ReplySlot>>,
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.envelope.fmt(f)
    }
}

impl Incoming {
    /// Answers a request: sends a [`Kind::Response`] to its sender, correlated to its id, at
    /// the request's priority.
    pub async fn reply(&self, body: impl Into<Bytes>) -> Result<(), AgentError> {
        let env = self
            .handle
            .envelope(
                Destination::agent(self.envelope.from.clone()),
                Kind::Response,
            )
            .with_correlation(self.envelope.id)
            .with_priority(self.envelope.priority)
            .with_body(body);
        let slot = self.reply_slot.lock_or_recover().take();
        self.handle.send_envelope_with(env, slot).await.map(|_| ())
    }

    /// The handle of the agent that received this message.
    pub fn handle(&self) -> &AgentHandle {
        &self.handle
    }
}

impl Agent {
    /// Connects to the hub named in `opts` (a fresh [`Connector`], so no 0-RTT).
    pub async fn connect(opts: AgentOptions) -> Result<Agent, AgentError> {
        Connector::new(&opts)?.connect(&opts).await
    }

    fn start<S: FrameSender, R: FrameReceiver>(
        session: Session,
        opts: &AgentOptions,
        hub_url: String,
        sender: S,
        receiver: R,
        counters: AgentCounters,
        quic: Option<QuicEndpointHandle>,
    ) -> Agent {
        let (closed_tx, closed_rx) = tokio::sync::watch::channel(None);
        let inner = Arc::new(AgentInner {
            transport: sender.kind(),
            queue: Arc::new(PriorityQueue::new(opts.send_queue_capacity)),
            next_id: AtomicU64::new(first_envelope_id()),
            pending: Mutex::new(HashMap::new()),
            connection: Box::new(sender.clone()),
            closed: closed_rx,
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            counters,
            quic,
            session,
            hub_url,
        });
        let handle = AgentHandle { inner };
        let (in_tx, in_rx) = mpsc::channel(opts.inbox_capacity.max(1));
        tokio::spawn(agent_writer(handle.inner.queue.clone(), sender.clone()));
        tokio::spawn(agent_heartbeat(
            Arc::downgrade(&handle.inner),
            sender,
            Duration::from_millis(u64::from(
                handle.inner.session.heartbeat_interval_ms.max(10),
            )),
        ));
        tokio::spawn(agent_reader(
            Arc::downgrade(&handle.inner),
            handle.inner.session.codec,
            handle.inner.queue.clone(),
            receiver,
            in_tx,
            closed_tx,
        ));
        Agent {
            handle,
            inbox: Inbox { rx: in_rx },
        }
    }

    /// The next received message; `None` once the connection has ended.
    pub async fn recv(&mut self) -> Option<Incoming> {
        self.inbox.recv().await
    }

    /// Splits into the cloneable sending handle and the inbox.
    pub fn split(self) -> (AgentHandle, Inbox) {
        (self.handle, self.inbox)
    }

    /// The sending handle.
    pub fn handle(&self) -> &AgentHandle {
        &self.handle
    }
}

impl std::ops::Deref for Agent {
    type Target = AgentHandle;
    fn deref(&self) -> &AgentHandle {
        &self.handle
    }
}

impl Inbox {
    /// The next received message; `None` once the connection has ended.
    pub async fn recv(&mut self) -> Option<Incoming> {
        self.rx.recv().await
    }
}

impl AgentHandle {
    /// This agent's id.
    pub fn id(&self) -> &str {
        &self.inner.session.agent_id
    }

    /// The hub address this agent is connected to: with several in
    /// [`AgentOptions::hubs`], the one that answered.
    pub fn hub_url(&self) -> &str {
        &self.inner.hub_url
    }

    /// What the handshake agreed.
    pub fn session(&self) -> &Session {
        &self.inner.session
    }

    /// The transport in use.
    pub fn transport(&self) -> TransportKind {
        self.inner.transport
    }

    /// Counters, including the connection's RTT, congestion window and losses.
    pub fn stats(&self) -> AgentStats {
        let c = &self.inner.counters;
        AgentStats {
            connection: self.inner.connection.stats(),
            messages_sent: self.inner.sent.load(Ordering::Relaxed),
            messages_received: self.inner.received.load(Ordering::Relaxed),
            zero_rtt_accepted: c.zero_rtt_accepted.load(Ordering::Relaxed),
            zero_rtt_rejected: c.zero_rtt_rejected.load(Ordering::Relaxed),
            zero_rtt_used: c.zero_rtt_used,
            socket_buffers: c.socket_buffers,
        }
    }

    /// A new envelope from this agent with a fresh id and the current time.
    pub fn envelope(&self, to: Destination, kind: Kind) -> Envelope {
        Envelope::new(
            self.inner.next_id.fetch_add(1, Ordering::Relaxed),
            self.id(),
            to,
            kind,
        )
        .with_timestamp_us(now_us())
    }

    /// Queues an envelope for sending and returns its id. Waits while the send queue is full.
    /// Delivery failures (unknown agent, full queue at the hub) come back later as
    /// [`Kind::Error`] envelopes in the inbox, correlated to the returned id.
    pub async fn send_envelope(&self, env: Envelope) -> Result<u64, AgentError> {
        self.send_envelope_with(env, None).await
    }

    /// Queues several envelopes at once and returns their ids, in order. They reach the
    /// connection's writer together, so the transport writes them together: one TLS record
    /// and system call over TCP, streams shared by the small ones over QUIC (most urgent class
    /// first). Nothing is queued if one of them cannot be encoded or is too large; if the
    /// connection closes while they wait for room, those not yet queued are not sent.
    pub async fn send_envelopes(
        &self,
        envelopes: impl IntoIterator<Item = Envelope>,
    ) -> Result<Vec<u64>, AgentError> {
        if let Some(why) = self.inner.closed.borrow().clone() {
            return Err(AgentError::Disconnected(why));
        }
        let mut ids = Vec::new();
        let mut items = Vec::new();
        for env in envelopes {
            ids.push(env.id);
            let priority = env.priority;
            items.push((self.outgoing(env, None)?, priority));
        }
        let count = items.len() as u64;
        self.inner
            .queue
            .push_all(items)
            .await
            .map_err(|(queued, e)| {
                self.inner.sent.fetch_add(queued as u64, Ordering::Relaxed);
                AgentError::from(e)
            })?;
        self.inner.sent.fetch_add(count, Ordering::Relaxed);
        Ok(ids)
    }

    /// Publishes every body to `topic` as events of `kind`, at medium priority, queued at once
    /// ([`send_envelopes`](Self::send_envelopes)); returns their ids in order.
    pub async fn publish_many<B: Into<Bytes>>(
        &self,
        topic: &str,
        kind: Kind,
        bodies: impl IntoIterator<Item = B>,
    ) -> Result<Vec<u64>, AgentError> {
        let envelopes: Vec<Envelope> = bodies
            .into_iter()
            .map(|body| {
                self.envelope(Destination::topic(topic), kind)
                    .with_body(body)
            })
            .collect();
        self.send_envelopes(envelopes).await
    }

    /// The frame and class of `env` from this agent, checked against the hub's frame limit.
    fn outgoing(
        &self,
        mut env: Envelope,
        reply: Option<ReplySlot>,
    ) -> Result<Outgoing, AgentError> {
        env.from.clone_from(&self.inner.session.agent_id);
        let priority = env.priority;
        let class = match env.kind {
            Kind::Request => SendClass::Request(priority),
            _ => SendClass::Message(priority),
        };
        let frame = Frame::Envelope(env)
            .encode(self.inner.session.codec)
            .map_err(AgentError::Encode)?;
        let len = frame
            .len()
            .saturating_sub(agentwire_proto::FRAME_HEADER_LEN);
        if len > self.inner.session.max_frame_size as usize {
            return Err(AgentError::TooLarge(FrameError::TooLarge {
                len: u32::try_from(len).unwrap_or(u32::MAX),
                max: self.inner.session.max_frame_size,
            }));
        }
        Ok(Outgoing {
            frame,
            class,
            reply,
            after_delivery: false,
        })
    }

    async fn send_envelope_with(
        &self,
        env: Envelope,
        reply: Option<ReplySlot>,
    ) -> Result<u64, AgentError> {
        if let Some(why) = self.inner.closed.borrow().clone() {
            return Err(AgentError::Disconnected(why));
        }
        let (id, priority) = (env.id, env.priority);
        let outgoing = self.outgoing(env, reply)?;
        self.inner.queue.push(outgoing, priority).await?;
        self.inner.sent.fetch_add(1, Ordering::Relaxed);
        Ok(id)
    }

    /// Sends `body` as a message of `kind` to `to` at medium priority; returns its id.
    pub async fn send(
        &self,
        to: Destination,
        kind: Kind,
        body: impl Into<Bytes>,
    ) -> Result<u64, AgentError> {
        self.send_envelope(self.envelope(to, kind).with_body(body))
            .await
    }

    /// Publishes to a topic's subscribers.
    pub async fn publish(
        &self,
        topic: &str,
        kind: Kind,
        body: impl Into<Bytes>,
    ) -> Result<u64, AgentError> {
        self.send(Destination::topic(topic), kind, body).await
    }

    /// Sends a request to agent `to` and waits up to `timeout` for its response.
    ///
    /// The request carries `ttl = timeout`, so the hub drops it if it could not be delivered
    /// in time. Dropping the returned future cancels the wait; a response arriving later is
    /// discarded.
    pub async fn request(
        &self,
        to: &str,
        body: impl Into<Bytes>,
        timeout: Duration,
    ) -> Result<Envelope, AgentError> {
        let env = self
            .envelope(Destination::agent(to), Kind::Request)
            .with_ttl_ms(u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX))
            .with_body(body);
        self.request_envelope(env, timeout).await
    }

    /// Asks the hub itself for an operation (`reload`: read its access file, client CA,
    /// revoked serials and certificate again, as SIGHUP does); the agent's credential must
    /// say `"admin": true`. Returns the hub's JSON answer.
    pub async fn hub_op(
        &self,
        op: &str,
        timeout: Duration,
    ) -> Result<serde_json::Value, AgentError> {
        let env = self
            .envelope(
                Destination::agent(agentwire_proto::names::HUB_ID),
                Kind::Request,
            )
            .with_ttl_ms(u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX))
            .with_header(agentwire_proto::names::HUB_OP_HEADER, op);
        let answer = self.request_envelope(env, timeout).await?;
        serde_json::from_slice(&answer.body)
            .map_err(|e| AgentError::Config(format!("the hub's answer is not JSON: {e}")))
    }

    /// Sends a prepared request envelope (kind set to request) and waits for its response.
    pub async fn request_envelope(
        &self,
        mut env: Envelope,
        timeout: Duration,
    ) -> Result<Envelope, AgentError> {
        env.kind = Kind::Request;
        let (tx, rx) = oneshot::channel();
        let id = env.id;
        let asked = match &env.to {
            Destination::Agent(agent) => Asked::Agent(agent.clone()),
            Destination::Queue(_) => Asked::Hub,
            Destination::Topic(_) | Destination::Broadcast => Asked::Anyone,
        };
        self.lock_pending().insert(id, Pending { tx, asked });
        let guard = PendingGuard { handle: self, id };
        self.send_envelope(env).await?;
        let answer = tokio::time::timeout(timeout, rx).await;
        drop(guard);
        match answer {
            Err(_) => Err(AgentError::Timeout(timeout)),
            Ok(Err(_)) => Err(AgentError::Disconnected(
                self.inner
                    .closed
                    .borrow()
                    .clone()
                    .unwrap_or_else(connection_ended),
            )),
            // The hub answers `cancelled` when the request's ttl (= `timeout`) ran out there
            // first: the same timeout as ours.
            Ok(Ok(resp)) if is_hub_cancel(&resp) => Err(AgentError::Timeout(timeout)),
            Ok(Ok(resp)) if resp.kind == Kind::Error => Err(remote_error(&resp)),
            Ok(Ok(resp)) => Ok(resp),
        }
    }

    /// Subscribes to a topic (the hub's [`PRESENCE_TOPIC`](agentwire_proto::names::PRESENCE_TOPIC) gives
    /// join/leave events).
    pub async fn subscribe(&self, topic: &str) -> Result<(), AgentError> {
        self.control(Frame::Subscribe(topic.to_owned())).await
    }

    /// Unsubscribes from a topic.
    pub async fn unsubscribe(&self, topic: &str) -> Result<(), AgentError> {
        self.control(Frame::Unsubscribe(topic.to_owned())).await
    }

    async fn control(&self, frame: Frame) -> Result<(), AgentError> {
        self.control_at(frame, Priority::Critical).await
    }

    /// Queues a control frame (subscribe, goodbye) behind anything more urgent than `priority`.
    pub(crate) async fn control_at(
        &self,
        frame: Frame,
        priority: Priority,
    ) -> Result<(), AgentError> {
        self.control_with(frame, priority, false).await
    }

    async fn control_with(
        &self,
        frame: Frame,
        priority: Priority,
        after_delivery: bool,
    ) -> Result<(), AgentError> {
        let frame = frame
            .encode(self.inner.session.codec)
            .map_err(AgentError::Encode)?;
        self.inner
            .queue
            .push(
                Outgoing {
                    frame,
                    class: SendClass::Control,
                    reply: None,
                    after_delivery,
                },
                priority,
            )
            .await?;
        Ok(())
    }

    /// Moves the agent's QUIC endpoint to a new local address (connection migration); the
    /// session continues. Returns the new local address.
    pub fn rebind(&self, addr: SocketAddr) -> Result<SocketAddr, AgentError> {
        let quic = self
            .inner
            .quic
            .as_ref()
            .ok_or_else(|| AgentError::Config("rebind needs the QUIC transport".into()))?;
        quic.rebind(addr).map_err(AgentError::Connect)
    }

    /// The local address of the agent's QUIC endpoint.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.inner
            .quic
            .as_ref()
            .and_then(QuicEndpointHandle::local_addr)
    }

    /// Why the connection ended, once it has.
    pub fn closed_reason(&self) -> Option<String> {
        self.closed_error().map(|e| e.to_string())
    }

    /// Why the connection ended, once it has, as the error it ended with.
    pub fn closed_error(&self) -> Option<TransportError> {
        self.inner.closed.borrow().clone()
    }

    /// Waits until the connection has ended, returning why.
    pub async fn closed(&self) -> String {
        let mut rx = self.inner.closed.clone();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why.to_string();
            }
            if rx.changed().await.is_err() {
                return connection_ended().to_string();
            }
        }
    }

    /// Sends what is queued and waits until the hub has it (at most 5 s), says goodbye and
    /// closes the connection: a message sent before `close` is not lost to it.
    pub async fn close(&self) {
        // Low priority: the goodbye goes out after everything already queued, and only once
        // the transport has delivered all of it.
        let goodbye = Frame::Goodbye(Goodbye {
            code: ErrorCode::Normal,
            reason: "agent closing".into(),
        });
        let _ = self.control_with(goodbye, Priority::Low, true).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !self.inner.queue.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.inner.queue.close();
        // Give the transport a moment to flush the goodbye; the hub then closes.
        let mut closed = self.inner.closed.clone();
        let _ = tokio::time::timeout(Duration::from_millis(500), closed.changed()).await;
        self.inner
            .connection
            .close(ErrorCode::Normal, "agent closed");
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.inner.pending.lock_or_recover()
    }
}

/// A request waiting for its answer.
struct Pending {
    tx: oneshot::Sender<Envelope>,
    asked: Asked,
}

/// Who may answer a request. The hub already refuses answers from anyone not asked and
/// writes every envelope's `from` itself; the agent checks again (defence in depth).
#[derive(Debug)]
enum Asked {
    /// The agent it went to, or the hub (an error on its behalf).
    Agent(String),
    /// The hub only (a queue's receipt, or an error).
    Hub,
    /// Any subscriber (a topic or broadcast request): the first answer wins.
    Anyone,
}

impl Asked {
    fn may_answer(&self, from: &str) -> bool {
        match self {
            Asked::Agent(id) => from == id || agentwire_proto::names::is_reserved(from),
            Asked::Hub => agentwire_proto::names::is_reserved(from),
            Asked::Anyone => true,
        }
    }
}

/// Where an agent's envelope ids start: random, so that ids say nothing across connections
/// and cannot be guessed from a count. Below 2^52, so that JSON readers keep them exact.
fn first_envelope_id() -> u64 {
    let mut bytes = [0u8; 8];
    let random = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    match random {
        Ok(()) => (u64::from_le_bytes(bytes) >> 12).max(1),
        Err(_) => 1,
    }
}

/// Removes a pending request when its waiter goes away (timeout or cancellation).
struct PendingGuard<'a> {
    handle: &'a AgentHandle,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.handle.lock_pending().remove(&self.id);
    }
}

/// The hub's answer to a request whose ttl ran out before its answer came.
fn is_hub_cancel(env: &Envelope) -> bool {
    env.kind == Kind::Error
        && env.from == agentwire_proto::names::HUB_ID
        && env.headers.get("code").map(String::as_str) == Some(ErrorCode::Cancelled.name())
}

fn remote_error(env: &Envelope) -> AgentError {
    let code = env
        .headers
        .get("code")
        .and_then(|c| ErrorCode::from_name(c))
        .unwrap_or(ErrorCode::Internal);
    AgentError::Remote {
        code,
        reason: String::from_utf8_lossy(&env.body).into_owned(),
    }
}
