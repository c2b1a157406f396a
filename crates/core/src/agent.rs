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

use agentwire_proto::frame::{Goodbye, Heartbeat};
use agentwire_proto::{
    AgentHandshake, Codec, Destination, Envelope, ErrorCode, Frame, FrameError, HandshakeError,
    Hello, Kind, Priority, Session,
};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use agentwire_tls::HubTrust;
use agentwire_transport::any::{AnyReceiver, AnySender};
use agentwire_transport::clock::now_us;
use agentwire_transport::dial::Dial;
#[cfg(feature = "h2")]
use agentwire_transport::dial::H2Dial;
#[cfg(feature = "unix")]
use agentwire_transport::dial::UnixDial;
#[cfg(feature = "ws")]
use agentwire_transport::dial::WsDial;
use agentwire_transport::dial::{DialTarget, ZeroRtt};
use agentwire_transport::queue::{PriorityQueue, QueueError};
#[cfg(feature = "quic")]
use agentwire_transport::quic::{QuicDial, QuicEndpointHandle};
use agentwire_transport::settings::{QuicSettings, SocketBuffers, StreamMapping};
use agentwire_transport::url::{HubEndpoint, HubUrl};
use agentwire_transport::ConnectionControl;
use agentwire_transport::ReplySlot;
use agentwire_transport::{
    ConnectionStats, FrameReceiver, FrameSender, SendClass, TransportError, TransportKind,
};

/// Whether this build can dial `kind` (agentwire's cargo features `quic`, `h2`, `ws`, `unix`).
// With every feature on the arms all read `true`, which clippy would fold into `matches!`.
#[allow(clippy::match_like_matches_macro)]
fn built_in(kind: TransportKind) -> bool {
    match kind {
        TransportKind::Quic => cfg!(feature = "quic"),
        TransportKind::Http2 => cfg!(feature = "h2"),
        TransportKind::WebSocket => cfg!(feature = "ws"),
        TransportKind::Unix => cfg!(feature = "unix"),
        _ => false,
    }
}

/// The cargo feature that builds `kind` in.
fn feature_of(kind: TransportKind) -> &'static str {
    match kind {
        TransportKind::Quic => "quic",
        TransportKind::Http2 => "h2",
        TransportKind::WebSocket => "ws",
        TransportKind::Unix => "unix",
        _ => "none",
    }
}

/// Without QUIC built in, an agent never has a QUIC endpoint: this stands in for its handle.
#[cfg(not(feature = "quic"))]
#[derive(Clone, Debug)]
enum QuicEndpointHandle {}

#[cfg(not(feature = "quic"))]
impl QuicEndpointHandle {
    fn rebind(&self, _addr: SocketAddr) -> Result<SocketAddr, TransportError> {
        match *self {}
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        match *self {}
    }
}

/// Everything an agent needs to connect.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The id to register as (unique among connected agents).
    pub id: String,
    /// A free-form role.
    pub role: String,
    /// Hub addresses tried in order until one works: `quic://`, `h2://`, `wss://`, `ws://`,
    /// `unix://` URLs, or `auto://host:port` (QUIC, then HTTP/2, then WebSocket).
    pub hubs: Vec<String>,
    /// How to verify the hub's certificate.
    pub trust: HubTrust,
    /// TLS server name; defaults to the URL's host.
    pub server_name: Option<String>,
    /// Codecs offered, preferred first.
    pub codecs: Vec<Codec>,
    /// Shared secret, if the hub requires one.
    pub auth_token: Option<String>,
    /// Largest frame accepted from the hub.
    pub max_frame_size: u32,
    /// QUIC settings.
    pub quic: QuicSettings,
    /// How messages map to QUIC streams.
    pub stream_mapping: StreamMapping,
    /// WebSocket liveness settings.
    pub websocket: agentwire_transport::settings::WsOptions,
    /// Try 0-RTT when a session ticket from an earlier connection is cached (through the same
    /// [`Connector`]). Only the hello, which is idempotent, is sent as early data.
    pub zero_rtt: bool,
    /// Frames the send queue holds before `send` waits.
    pub send_queue_capacity: usize,
    /// Messages the inbox holds before the transport stops reading.
    pub inbox_capacity: usize,
    /// Time allowed for the whole connect, all fallbacks included.
    pub connect_timeout: Duration,
    /// With several hub addresses: time allowed for one attempt before moving to the next
    /// (so blocked UDP or a silent port cannot hold the agent for the idle timeout).
    pub fallback_timeout: Duration,
    /// Local address to bind for QUIC (port 0 picks one).
    pub bind: Option<SocketAddr>,
    /// This agent's certificate and key, for hubs that require one (mutual TLS; from
    /// `agentwire cert agent --id ID`, whose name must be `id`).
    pub identity: Option<agentwire_tls::AgentIdentity>,
}

impl AgentOptions {
    /// Options with defaults: one hub address, MessagePack then JSON offered, 16 MiB frames,
    /// 0-RTT off, 10 s to connect, 2 s per fallback attempt.
    pub fn new(id: impl Into<String>, hub: impl Into<String>, trust: HubTrust) -> Self {
        AgentOptions {
            id: id.into(),
            role: "agent".into(),
            hubs: vec![hub.into()],
            trust,
            server_name: None,
            codecs: Codec::ALL.to_vec(),
            auth_token: None,
            max_frame_size: agentwire_proto::Limits::default().max_frame_size,
            quic: QuicSettings::default(),
            stream_mapping: StreamMapping::PerMessage,
            websocket: agentwire_transport::settings::WsOptions::default(),
            zero_rtt: false,
            send_queue_capacity: 4096,
            inbox_capacity: 4096,
            connect_timeout: Duration::from_secs(10),
            fallback_timeout: Duration::from_secs(2),
            bind: None,
            identity: None,
        }
    }

    /// Every address to try, in order, with `auto://` expanded.
    pub fn hub_urls(&self) -> Result<Vec<HubUrl>, AgentError> {
        let mut urls = Vec::new();
        for hub in &self.hubs {
            for part in hub.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                urls.extend(HubUrl::parse_list(part).map_err(AgentError::Url)?);
            }
        }
        if urls.is_empty() {
            return Err(AgentError::Config("no hub address given".into()));
        }
        Ok(urls)
    }
}

/// What can go wrong for an agent. Failures underneath (a transport error, the handshake's,
/// a TLS set-up error) are kept as the source.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// Bad options (an address, a name, a transport that cannot do what was asked).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The TLS settings could not be loaded or built (a certificate file, a pin).
    #[error("invalid configuration: {0}")]
    Tls(#[source] Arc<agentwire_tls::TlsError>),
    /// A hub URL does not parse.
    #[error("invalid configuration: {0}")]
    Url(#[source] agentwire_transport::UrlError),
    /// A hub's host name could not be resolved.
    #[error("cannot connect to the hub: {0}")]
    Resolve(#[source] Arc<agentwire_transport::ResolveError>),
    /// The connection could not be set up (network, TLS, QUIC).
    #[error("cannot connect to the hub: {0}")]
    Connect(#[source] TransportError),
    /// Several hub addresses were given and none worked.
    #[error("cannot connect to the hub: no hub address worked: {}", attempts_text(.0))]
    Unreachable(Vec<FailedAttempt>),
    /// The hub refused the handshake.
    #[error("the hub rejected this agent: {code}: {reason}")]
    Rejected {
        /// The hub's code.
        code: ErrorCode,
        /// The hub's reason.
        reason: String,
    },
    /// The handshake failed otherwise (the hub's answer did not fit, or never came).
    #[error("handshake failed: {0}")]
    Handshake(#[source] HandshakeError),
    /// No answer in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The connection is gone.
    #[error("disconnected: {0}")]
    Disconnected(#[source] TransportError),
    /// The hub or the peer answered with an error envelope.
    #[error("{code}: {reason}")]
    Remote {
        /// The code from the `code` header.
        code: ErrorCode,
        /// The body, as text.
        reason: String,
    },
    /// The message is larger than the agreed frame limit.
    #[error("message too large: {0}")]
    TooLarge(#[source] FrameError),
    /// The message could not be encoded in the session's codec.
    #[error("cannot encode the message: {0}")]
    Encode(#[source] agentwire_proto::CodecError),
}

/// One hub address that did not work, in [`AgentError::Unreachable`].
#[derive(Debug, Clone)]
pub struct FailedAttempt {
    /// The address.
    pub url: String,
    /// Why (`None`: no answer within the fallback timeout).
    pub error: Option<Box<AgentError>>,
    /// How long the attempt was given.
    pub waited: Duration,
}

fn attempts_text(attempts: &[FailedAttempt]) -> String {
    attempts
        .iter()
        .map(|a| match &a.error {
            Some(e) => format!("{}: {e}", a.url),
            None => format!("{}: no answer within {:?}", a.url, a.waited),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl From<agentwire_tls::TlsError> for AgentError {
    fn from(e: agentwire_tls::TlsError) -> Self {
        AgentError::Tls(Arc::new(e))
    }
}

impl From<QueueError> for AgentError {
    fn from(e: QueueError) -> Self {
        AgentError::Disconnected(TransportError::Closed {
            code: None,
            reason: e.to_string(),
        })
    }
}

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

/// Makes connections and keeps what should survive them: the QUIC endpoint and the TLS
/// session-ticket cache (so a reconnect can use 0-RTT).
///
/// ```no_run
/// # async fn demo(opts: agentwire::AgentOptions) -> Result<(), agentwire::AgentError> {
/// let connector = agentwire::Connector::new(&opts)?;
/// let first = connector.connect(&opts).await?;   // full handshake, ticket cached
/// first.close().await;
/// let second = connector.connect(&opts).await?;  // 0-RTT if opts.zero_rtt
/// assert!(second.stats().zero_rtt_accepted <= 1);
/// # Ok(()) }
/// ```
pub struct Connector {
    #[cfg(feature = "quic")]
    quic: tokio::sync::OnceCell<QuicDial>,
    zero_rtt_accepted: Arc<AtomicU64>,
    zero_rtt_rejected: Arc<AtomicU64>,
}

impl Connector {
    /// Checks `opts` (addresses, TLS trust); the QUIC endpoint is made on first use.
    pub fn new(opts: &AgentOptions) -> Result<Self, AgentError> {
        opts.hub_urls()?;
        Ok(Connector {
            #[cfg(feature = "quic")]
            quic: tokio::sync::OnceCell::new(),
            zero_rtt_accepted: Arc::default(),
            zero_rtt_rejected: Arc::default(),
        })
    }

    #[cfg(feature = "quic")]
    async fn quic_dial(&self, opts: &AgentOptions, url: &HubUrl) -> Result<&QuicDial, AgentError> {
        self.quic
            .get_or_try_init(|| async {
                let bind = opts.bind.unwrap_or_else(|| url.default_bind());
                let verifier = agentwire_tls::server_verifier(&opts.trust)?;
                QuicDial::with_identity(bind, &opts.quic, verifier, opts.identity.as_ref())
                    .map_err(AgentError::Connect)
            })
            .await
    }

    /// Connects and runs the handshake, trying each hub address in order. With more than one
    /// address, each attempt gets `fallback_timeout`; a hub that answers and rejects the agent
    /// ends the search (falling back would not change its answer).
    pub async fn connect(&self, opts: &AgentOptions) -> Result<Agent, AgentError> {
        let urls = opts.hub_urls()?;
        let attempts = async {
            if let [url] = urls.as_slice() {
                return self.connect_url(opts, url).await;
            }
            let mut failures = Vec::new();
            for url in &urls {
                let error =
                    match tokio::time::timeout(opts.fallback_timeout, self.connect_url(opts, url))
                        .await
                    {
                        Ok(Ok(agent)) => return Ok(agent),
                        Ok(Err(e @ AgentError::Rejected { .. })) => return Err(e),
                        Ok(Err(e)) => Some(Box::new(e)),
                        Err(_) => None,
                    };
                failures.push(FailedAttempt {
                    url: url.to_string(),
                    error,
                    waited: opts.fallback_timeout,
                });
                tracing::info!(%url, "hub not reachable, trying the next address");
            }
            Err(AgentError::Unreachable(failures))
        };
        tokio::time::timeout(opts.connect_timeout, attempts)
            .await
            .map_err(|_| AgentError::Timeout(opts.connect_timeout))?
    }

    fn hello(opts: &AgentOptions, transport: TransportKind) -> AgentHandshake {
        let mut hello = Hello::new(opts.id.clone(), opts.role.clone());
        hello.codecs = opts.codecs.iter().map(|c| c.name().to_owned()).collect();
        hello.auth_token.clone_from(&opts.auth_token);
        hello.max_frame_size = opts.max_frame_size;
        if transport == TransportKind::Quic && opts.quic.datagrams {
            hello.capabilities.push("datagrams".into());
        }
        if transport == TransportKind::Quic {
            hello
                .capabilities
                .push(agentwire_proto::counted_goodbye::CAPABILITY.into());
        }
        AgentHandshake::new(hello)
    }

    fn counters(&self, zero_rtt_used: bool, socket_buffers: SocketBuffers) -> AgentCounters {
        AgentCounters {
            zero_rtt_accepted: self.zero_rtt_accepted.clone(),
            zero_rtt_rejected: self.zero_rtt_rejected.clone(),
            zero_rtt_used,
            socket_buffers,
        }
    }

    /// Connects to one address.
    pub async fn connect_url(
        &self,
        opts: &AgentOptions,
        url: &HubUrl,
    ) -> Result<Agent, AgentError> {
        let mut handshake = Self::hello(opts, url.transport);
        let hello = handshake.hello_frame().map_err(AgentError::Encode)?;
        let RawConnection {
            sender,
            mut receiver,
            quic,
            zero_rtt_used,
            socket_buffers,
        } = self.open(opts, url, hello).await?;
        let session = match receiver.recv_frame().await {
            Ok(Some(raw)) => handshake.on_frame(&raw).map_err(|e| match e {
                HandshakeError::Rejected { code, reason } => AgentError::Rejected { code, reason },
                other => AgentError::Handshake(other),
            }),
            Ok(None) => Err(AgentError::Connect(TransportError::Closed {
                code: None,
                reason: "the hub closed before answering the hello".into(),
            })),
            Err(e) => Err(AgentError::Connect(e)),
        };
        let session = match session {
            Ok(s) => s,
            Err(e) => {
                FrameSender::close(&sender, ErrorCode::Normal, "handshake failed");
                return Err(e);
            }
        };
        sender.set_peer_max_frame_size(session.max_frame_size);
        if session.has_capability(agentwire_proto::counted_goodbye::CAPABILITY) {
            FrameSender::count_streams_in_goodbye(&sender);
        }
        receiver.set_max_frame_size(session.max_frame_size);
        let counters = self.counters(zero_rtt_used, socket_buffers);
        Ok(Agent::start(
            session,
            opts,
            url.to_string(),
            sender,
            receiver,
            counters,
            quic,
        ))
    }

    /// Opens a transport connection to `url` and sends `hello` (normally a hello frame) as its
    /// first control frame, without waiting for an answer. The agent API is built on this;
    /// tests and tools use it to speak to a hub frame by frame.
    pub async fn open(
        &self,
        opts: &AgentOptions,
        url: &HubUrl,
        hello: Bytes,
    ) -> Result<RawConnection, AgentError> {
        let mut target = DialTarget {
            addr: None,
            path: None,
            host: url.host().unwrap_or_default().to_owned(),
            server_name: opts
                .server_name
                .clone()
                .or_else(|| url.host().map(str::to_owned))
                .unwrap_or_default(),
            agent_id: opts.id.clone(),
            zero_rtt: opts.zero_rtt,
            mapping: opts.stream_mapping,
        };
        match &url.endpoint {
            HubEndpoint::Path(path) => target.path = Some(path.clone()),
            HubEndpoint::Net { .. } => {
                target.addr = Some(
                    url.resolve()
                        .await
                        .map_err(|e| AgentError::Resolve(Arc::new(e)))?,
                )
            }
        }
        // The QUIC endpoint goes with the connection (for `rebind`); other transports have none.
        let (dialed, quic) = match (url.transport, &url.endpoint) {
            #[cfg(feature = "quic")]
            (TransportKind::Quic, HubEndpoint::Net { .. }) => {
                let dial = self.quic_dial(opts, url).await?;
                (dial.dial(&target, hello).await, Some(dial.endpoint()))
            }
            #[cfg(feature = "unix")]
            (TransportKind::Unix, HubEndpoint::Path(_)) => {
                (UnixDial.dial(&target, hello).await, None)
            }
            #[cfg(feature = "h2")]
            (TransportKind::Http2, HubEndpoint::Net { .. }) => {
                let alpn = [agentwire_transport::h2::ALPN_H2];
                let tls =
                    agentwire_tls::client_config_as(&opts.trust, &alpn, opts.identity.as_ref())?;
                let dial = H2Dial { tls: Arc::new(tls) };
                (dial.dial(&target, hello).await, None)
            }
            #[cfg(feature = "ws")]
            (TransportKind::WebSocket, HubEndpoint::Net { .. }) => {
                let tls = if url.tls {
                    let alpn = [agentwire_transport::ws::ALPN_HTTP11];
                    let identity = opts.identity.as_ref();
                    Some(Arc::new(agentwire_tls::client_config_as(
                        &opts.trust,
                        &alpn,
                        identity,
                    )?))
                } else {
                    None
                };
                let options = opts.websocket;
                (WsDial { tls, options }.dial(&target, hello).await, None)
            }
            (kind, _) if TransportKind::ALL.contains(&kind) && !built_in(kind) => {
                return Err(AgentError::Config(format!(
                    "{url}: the {kind} transport is not built in (agentwire's cargo feature `{}`)",
                    feature_of(kind)
                )))
            }
            _ => {
                return Err(AgentError::Config(format!(
                    "{url}: not a usable hub address"
                )))
            }
        };
        let dialed = dialed.map_err(AgentError::Connect)?;
        match dialed.zero_rtt {
            ZeroRtt::Accepted => self.zero_rtt_accepted.fetch_add(1, Ordering::Relaxed),
            ZeroRtt::Rejected => self.zero_rtt_rejected.fetch_add(1, Ordering::Relaxed),
            ZeroRtt::NotTried => 0,
        };
        Ok(RawConnection {
            sender: dialed.sender,
            receiver: dialed.receiver,
            quic,
            zero_rtt_used: dialed.zero_rtt == ZeroRtt::Accepted,
            socket_buffers: dialed.socket_buffers,
        })
    }
}

/// A transport connection whose first frame has been sent, before the hub has answered.
pub struct RawConnection {
    /// Sending half.
    pub sender: AnySender,
    /// Receiving half.
    pub receiver: AnyReceiver,
    quic: Option<QuicEndpointHandle>,
    zero_rtt_used: bool,
    socket_buffers: SocketBuffers,
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

    async fn send_envelope_with(
        &self,
        mut env: Envelope,
        reply: Option<ReplySlot>,
    ) -> Result<u64, AgentError> {
        if let Some(why) = self.inner.closed.borrow().clone() {
            return Err(AgentError::Disconnected(why));
        }
        env.from.clone_from(&self.inner.session.agent_id);
        let id = env.id;
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
        self.inner
            .queue
            .push(
                Outgoing {
                    frame,
                    class,
                    reply,
                    after_delivery: false,
                },
                priority,
            )
            .await?;
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

async fn agent_writer<S: FrameSender>(queue: Arc<PriorityQueue<Outgoing>>, sender: S) {
    while let Some(out) = queue.pop().await {
        if out.after_delivery {
            // Everything popped before was written (this loop waits for each write); wait,
            // within the close's own bound, until the peer has acknowledged it.
            let _ = tokio::time::timeout(Duration::from_secs(5), sender.delivered()).await;
        }
        let result = match out.reply {
            Some(slot) => {
                sender
                    .send_reply(out.frame, out.class.priority(), slot)
                    .await
            }
            // More queued behind it: let the transport write them together.
            None if !queue.is_empty() => sender.feed_frame(out.frame, out.class).await,
            None => match sender.feed_frame(out.frame, out.class).await {
                Ok(()) => sender.flush().await,
                Err(e) => Err(e),
            },
        };
        if let Err(e) = result {
            tracing::debug!("agent send failed: {e}");
            queue.close();
            return;
        }
    }
}

impl Drop for AgentInner {
    /// The last handle is gone: nobody can send or reply any more, so end the session.
    fn drop(&mut self) {
        self.queue.close();
        self.connection.close(ErrorCode::Normal, "agent dropped");
    }
}

async fn agent_heartbeat<S: FrameSender>(
    inner: std::sync::Weak<AgentInner>,
    sender: S,
    period: Duration,
) {
    let mut seq = 0u64;
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.queue.is_closed() {
            return;
        }
        seq += 1;
        let beat = Frame::Heartbeat(Heartbeat {
            seq,
            timestamp_us: now_us(),
        });
        let Ok(frame) = beat.encode(inner.session.codec) else {
            return;
        };
        drop(inner);
        if sender
            .send_frame(frame, SendClass::Heartbeat)
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Reads frames from the hub: answers go to their waiting requests, everything else to the
/// inbox. Holds the agent only weakly while it waits, so dropping every handle ends the
/// session.
async fn agent_reader<R: FrameReceiver>(
    agent: std::sync::Weak<AgentInner>,
    codec: Codec,
    queue: Arc<PriorityQueue<Outgoing>>,
    mut receiver: R,
    inbox: mpsc::Sender<Incoming>,
    closed: tokio::sync::watch::Sender<Option<TransportError>>,
) {
    let ended = |code: ErrorCode, reason: String| TransportError::Closed {
        code: Some(code),
        reason,
    };
    let reason = loop {
        let raw = match receiver.recv_frame().await {
            Ok(Some(raw)) => raw,
            Ok(None) => break ended(ErrorCode::Normal, "the hub ended the connection".into()),
            Err(e) => break e,
        };
        let reply_slot = receiver.take_reply_slot();
        let Some(inner) = agent.upgrade() else {
            break ended(ErrorCode::Normal, "agent dropped".into());
        };
        let handle = AgentHandle { inner };
        let env = match Frame::decode(&raw, codec) {
            Ok(Frame::Envelope(env)) => env,
            Ok(Frame::Goodbye(g)) => {
                break ended(g.code, format!("hub said goodbye: {} {}", g.code, g.reason))
            }
            Ok(_) => continue,
            Err(e) => {
                handle
                    .inner
                    .connection
                    .close(e.close_code(), &e.to_string());
                break TransportError::Frame(e);
            }
        };
        handle.inner.received.fetch_add(1, Ordering::Relaxed);
        if matches!(env.kind, Kind::Response | Kind::Error) {
            if let Some(corr) = env.correlation {
                let waiter = {
                    let mut pending = handle.lock_pending();
                    match pending.get(&corr) {
                        Some(p) if p.asked.may_answer(&env.from) => pending.remove(&corr),
                        Some(p) => {
                            tracing::warn!(correlation = corr, from = %env.from, asked = ?p.asked, "dropping an answer from an agent that was not asked");
                            continue;
                        }
                        None => None,
                    }
                };
                if let Some(waiter) = waiter {
                    let _ = waiter.tx.send(env);
                    continue;
                }
                // Its request timed out or was cancelled: nobody waits for it any more. The
                // hub's own `cancelled` answer to a request whose ttl ran out is just as late.
                if env.kind == Kind::Response || is_hub_cancel(&env) {
                    tracing::debug!(correlation = corr, kind = %env.kind, "discarding a late answer");
                    continue;
                }
            }
        }
        let reply_slot = reply_slot.filter(|_| env.kind == Kind::Request);
        let incoming = Incoming {
            envelope: env,
            handle,
            reply_slot: Mutex::new(reply_slot),
        };
        // If nobody reads the inbox any more, keep serving responses.
        let _ = inbox.send(incoming).await;
    };
    tracing::debug!("agent connection ended: {reason}");
    queue.close();
    if let Some(inner) = agent.upgrade() {
        AgentHandle { inner }.lock_pending().clear();
    }
    let _ = closed.send(Some(reason));
}

impl From<TransportError> for AgentError {
    fn from(e: TransportError) -> Self {
        AgentError::Disconnected(e)
    }
}

/// The reason given when the connection ended without one.
fn connection_ended() -> TransportError {
    TransportError::Closed {
        code: None,
        reason: "connection ended".into(),
    }
}
