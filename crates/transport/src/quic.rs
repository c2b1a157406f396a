//! The QUIC transport (quinn + rustls, ALPN `agentwire/1`).
//!
//! Mapping (see `docs/protocol.md`, "Transport mappings"):
//! - the agent opens one bidirectional **control stream** first; the handshake, subscriptions
//!   and goodbyes travel on it, in order;
//! - every envelope travels on a **unidirectional stream**: its own stream in
//!   [`StreamMapping::PerMessage`] mode, or one long-lived stream per priority class in
//!   [`StreamMapping::Lanes`] mode. A receiver reads any unidirectional stream as a sequence of
//!   frames until its end, so the two modes interoperate without negotiation;
//! - stream priorities follow the envelope's class (critical highest), so quinn sends a
//!   critical message's bytes ahead of bulk bytes already queued;
//! - heartbeats ride **QUIC datagrams** when both sides enabled them, else the control stream.
//!
//! This module owns that mapping, endpoint and socket set-up and the per-connection stats. It
//! must not route or interpret envelopes: it hands whole raw frames to the hub or agent.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use agentwire_proto::{
    counted_goodbye, ErrorCode, FrameDecoder, FrameType, Limits, Priority, RawFrame,
};
use bytes::Bytes;
use quinn::{Connection, RecvStream, SendStream, VarInt};
use tokio::sync::Mutex;

use super::listen::{AcceptFailed, Accepted, Listen, Setup};
use super::quic_backlog::{Backlog, DEFAULT_MAX_UNREAD_BYTES};
use super::quic_budget::{Admission, ReceiveBudget};
use super::quic_inbound::{self, InboundReceiver, InboundSender, Ticket};
use super::quic_socket::GsoCapped;
use super::quic_streams_read::StreamsRead;
use super::{
    check_outgoing, ConnectError, ConnectionStats, FrameReceiver, FrameSender, ReplySlot,
    SendClass, TransportError, TransportKind,
};
use crate::qlog::QlogRole;
use crate::settings::{QuicSettings, SocketBuffers, StreamMapping};

/// Bytes of partially received frames one connection may hold across all its streams before
/// it is closed with `limit-exceeded` (guards against a peer opening many streams and never
/// finishing them).
pub const DEFAULT_MAX_BUFFERED_BYTES: usize = 64 * 1024 * 1024;

/// Frames queued between the stream readers and the consumer of one connection. Beyond it,
/// each stream reader holds at most one whole frame while it waits (admitted in the order
/// the peer opened the streams, see [`quic_inbound`]), so memory held for one connection is
/// bounded by (this + concurrent streams) × max frame size, plus the partial-frame budget.
const INBOUND_QUEUE: usize = 32;

/// A hub's connection window until the connection's hello is accepted: room for a hello (at
/// most `agentwire_proto::MAX_HELLO_FRAME`) and the control stream's first frames, so that a
/// peer that has not said who it is makes quinn buffer no more than this. Every connection is
/// accepted with it (the same transport parameters for all, as 0-RTT resumption needs); the
/// window is raised to its full size (or its share of a receive budget) once the hello is
/// accepted ([`FrameSender::hello_accepted`]).
pub const PRE_HELLO_WINDOW: u64 = 128 * 1024;

/// New connections quinn holds while the listener waits (at its accept limits); beyond, quinn
/// refuses them. As many as the TCP listeners' kernel backlog
/// ([`LISTEN_BACKLOG`](super::listen::LISTEN_BACKLOG)).
pub const INCOMING_QUEUE: usize = 4096;
/// Bytes of first packets (0-RTT data) quinn holds for the connections waiting in
/// [`INCOMING_QUEUE`], all together (one connection at most a sixteenth of it).
pub const INCOMING_QUEUE_BYTES: u64 = 16 << 20;

/// A bound QUIC server endpoint and the configuration it accepts with.
pub struct ServerEndpoint {
    /// The endpoint.
    pub endpoint: quinn::Endpoint,
    /// The UDP socket buffers the kernel granted.
    pub socket_buffers: SocketBuffers,
    /// The server configuration (TLS and transport) every connection starts from; a
    /// connection traced to qlog gets a copy with its own transport configuration.
    pub config: quinn::ServerConfig,
    /// Further endpoints on the same address (`SO_REUSEPORT`), one fewer than
    /// [`QuicSettings::server_endpoints`]; empty by default.
    pub more: Vec<quinn::Endpoint>,
}

/// Builds a quinn server endpoint bound to `addr`.
pub fn server_endpoint(
    addr: SocketAddr,
    settings: &QuicSettings,
    tls: rustls::ServerConfig,
) -> Result<ServerEndpoint, TransportError> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(|e| {
        ConnectError::Config(format!("the TLS configuration is not usable for QUIC: {e}"))
    })?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    // Connections waiting for the listener (at the accept limits) are held in a bounded queue:
    // quinn's defaults are 65,536 connections and 100 MiB of their first packets.
    config
        .max_incoming(INCOMING_QUEUE)
        .incoming_buffer_size(INCOMING_QUEUE_BYTES / 16)
        .incoming_buffer_size_total(INCOMING_QUEUE_BYTES);
    config.transport_config(Arc::new(
        settings.transport_config().map_err(ConnectError::Config)?,
    ));
    let mut sockets = settings
        .bind_udp_group(addr, settings.server_endpoints)
        .map_err(|e| ConnectError::socket(format!("cannot bind UDP {addr}"), e))?
        .into_iter();
    let Some((first, socket_buffers)) = sockets.next() else {
        return Err(ConnectError::Config("no UDP socket was bound".into()).into());
    };
    let endpoint = endpoint_on(first, settings, Some(config.clone()))?;
    let more = sockets
        .map(|(socket, _)| endpoint_on(socket, settings, Some(config.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ServerEndpoint {
        endpoint,
        socket_buffers,
        config,
        more,
    })
}

/// Accepts `incoming` with `base`, or with a copy of `base` whose transport configuration
/// fits this peer ([`QuicSettings::for_peer`]: loopback datagram size), has the connection
/// window `window` (a share of the endpoint's [receive budget](super::quic_budget)) and, when
/// `settings` ask for qlog traces, writes `DIR/hub-<connection id>.sqlog`.
pub fn accept_incoming(
    incoming: quinn::Incoming,
    base: &quinn::ServerConfig,
    settings: &QuicSettings,
    window: Option<u64>,
) -> Result<quinn::Connecting, quinn::ConnectionError> {
    let odcid = incoming.orig_dst_cid();
    let peer = incoming.remote_address().ip();
    match connection_transport(settings, peer, window, QlogRole::Hub, || odcid.to_string()) {
        None => incoming.accept(),
        Some(transport) => {
            let mut config = base.clone();
            config.transport_config(Arc::new(transport));
            incoming.accept_with(Arc::new(config))
        }
    }
}

/// `base`, or a copy of it whose transport configuration fits a hub at `peer`
/// ([`QuicSettings::for_peer`]: loopback datagram size) and, when `settings` ask for qlog
/// traces, writes `DIR/agent-<agent>-<pid>-<n>.sqlog`.
pub fn client_config_for(
    base: &quinn::ClientConfig,
    settings: &QuicSettings,
    peer: SocketAddr,
    agent: &str,
) -> quinn::ClientConfig {
    let mut config = base.clone();
    if let Some(transport) =
        connection_transport(settings, peer.ip(), None, QlogRole::Agent, || {
            crate::qlog::agent_trace_name(agent)
        })
    {
        config.transport_config(Arc::new(transport));
    }
    config
}

/// The transport configuration of one connection with `peer` when it differs from the
/// endpoint's shared one: `settings` adjusted for the peer ([`QuicSettings::for_peer`]), with
/// another connection window, or asking for a qlog trace (`name` is only computed then). A
/// trace that cannot be written is logged and the connection goes on untraced: tracing never
/// refuses service.
fn connection_transport(
    settings: &QuicSettings,
    peer: std::net::IpAddr,
    window: Option<u64>,
    role: QlogRole,
    name: impl FnOnce() -> String,
) -> Option<quinn::TransportConfig> {
    let mut settings = settings.for_peer(peer);
    if let Some(window) = window.filter(|w| *w != settings.receive_window) {
        settings.to_mut().receive_window = window;
    }
    if let Some(traced) = traced(&settings, role, name) {
        return Some(traced);
    }
    match &settings {
        std::borrow::Cow::Borrowed(_) => None,
        // Validated when the endpoint was built (`endpoint`).
        std::borrow::Cow::Owned(adjusted) => adjusted.transport_config().ok(),
    }
}

/// The traced transport configuration of one connection, when `settings` ask for qlog
/// traces (`name` is only computed then). A trace that cannot be written is logged and the
/// connection goes on untraced: tracing never refuses service.
fn traced(
    settings: &QuicSettings,
    role: QlogRole,
    name: impl FnOnce() -> String,
) -> Option<quinn::TransportConfig> {
    settings.qlog_dir.as_ref()?;
    crate::qlog::traced_transport(settings, role, &name()).unwrap_or_else(|e| {
        tracing::warn!("connection not traced: {e}");
        None
    })
}

/// What a UDP socket bound with `settings` on loopback gets from this machine: the buffers the
/// kernel granted and the GSO/GRO segments quinn detects. `None` if the socket cannot be
/// made. Benchmarks record it beside their results.
///
/// ```
/// use agentwire_transport::{quic::probe_udp, QuicSettings};
/// // Loopback UDP always binds; quinn reports at least one segment per send.
/// let udp = probe_udp(&QuicSettings::default()).ok_or("no loopback UDP socket")?;
/// assert!(udp.gso_segments >= 1 && udp.buffers.recv > 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn probe_udp(settings: &QuicSettings) -> Option<UdpSupport> {
    let (socket, buffers) = settings
        .bind_udp(SocketAddr::from(([127, 0, 0, 1], 0)))
        .ok()?;
    let state = quinn::udp::UdpSocketState::new((&socket).into()).ok()?;
    Some(UdpSupport {
        buffers,
        gso_segments: state.max_gso_segments(),
        gro_segments: state.gro_segments(),
    })
}

/// The result of [`probe_udp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpSupport {
    /// The socket buffers granted.
    pub buffers: SocketBuffers,
    /// Segments per GSO send quinn would use (1 = no GSO).
    pub gso_segments: usize,
    /// Segments per GRO receive quinn would use (1 = no GRO).
    pub gro_segments: usize,
}

/// Builds a quinn client endpoint bound to `bind` (use port 0).
pub fn client_endpoint(
    bind: SocketAddr,
    settings: &QuicSettings,
) -> Result<(quinn::Endpoint, SocketBuffers), TransportError> {
    endpoint(bind, settings, None)
}

/// A quinn endpoint on a UDP socket set up from `settings` (buffers granted are returned).
fn endpoint(
    addr: SocketAddr,
    settings: &QuicSettings,
    server: Option<quinn::ServerConfig>,
) -> Result<(quinn::Endpoint, SocketBuffers), TransportError> {
    let (socket, buffers) = settings
        .bind_udp(addr)
        .map_err(|e| ConnectError::socket(format!("cannot bind UDP {addr}"), e))?;
    Ok((endpoint_on(socket, settings, server)?, buffers))
}

/// A quinn endpoint on `socket` (bound by the caller, for example with
/// [`QuicSettings::bind_udp`]), set up as agentwire's own: the largest datagram any of its
/// connections may use ([`QuicSettings::endpoint_config`]) and GSO batches that the kernel
/// takes, one loopback-sized datagram per batch when `socket` is bound to a loopback address
/// ([`GsoCapped`]). Pair it with [`accept_incoming`] and [`client_config_for`], which give
/// each connection the settings for its peer. `agentwire serve` and `agentwire load` use it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use agentwire_transport::{quic::endpoint_on, QuicSettings};
/// let settings = QuicSettings::default();
/// let (socket, _buffers) = settings.bind_udp("127.0.0.1:0".parse()?)?;
/// let endpoint = endpoint_on(socket, &settings, None)?;
/// assert!(endpoint.local_addr()?.ip().is_loopback());
/// # Ok(())
/// # }
/// ```
pub fn endpoint_on(
    socket: std::net::UdpSocket,
    settings: &QuicSettings,
    server: Option<quinn::ServerConfig>,
) -> Result<quinn::Endpoint, TransportError> {
    let addr = socket
        .local_addr()
        .map_err(|e| ConnectError::socket("cannot read the UDP socket's address", e))?;
    // A connection's settings may differ by peer; check the loopback variant here, once.
    settings
        .for_peer(std::net::Ipv4Addr::LOCALHOST.into())
        .transport_config()
        .map_err(ConnectError::Config)?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| ConnectError::Config("no async runtime found".into()))?;
    let socket = runtime
        .wrap_udp_socket(socket)
        .map_err(|e| ConnectError::socket(format!("cannot use UDP socket {addr}"), e))?;
    // Bound to loopback, every peer is a loopback peer and every datagram has its size.
    let loopback = settings.for_peer(addr.ip());
    let socket = Arc::new(
        if addr.ip().to_canonical().is_loopback() && settings.loopback_mtu > 0 {
            let capped = GsoCapped::loopback(socket, loopback.max_mtu);
            if server.is_some() {
                capped.receiving_one_send(settings.endpoint_payload())
            } else {
                capped
            }
        } else {
            GsoCapped::new(socket)
        },
    );
    quinn::Endpoint::new_with_abstract_socket(
        settings.endpoint_config().map_err(ConnectError::Config)?,
        server,
        socket,
        runtime,
    )
    .map_err(|e| ConnectError::socket(format!("cannot start QUIC endpoint on {addr}"), e).into())
}

/// Builds a quinn client configuration from TLS settings and transport settings.
pub fn client_config(
    settings: &QuicSettings,
    tls: rustls::ClientConfig,
) -> Result<quinn::ClientConfig, TransportError> {
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| {
        ConnectError::Config(format!("the TLS configuration is not usable for QUIC: {e}"))
    })?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(
        settings.transport_config().map_err(ConnectError::Config)?,
    ));
    Ok(config)
}

/// Maps a quinn connection error to ours, recovering agentwire close codes.
pub fn map_connection_error(e: &quinn::ConnectionError) -> TransportError {
    use quinn::ConnectionError as C;
    match e {
        C::ApplicationClosed(close) => {
            let code = ErrorCode::from_code(
                u32::try_from(close.error_code.into_inner()).unwrap_or(u32::MAX),
            );
            TransportError::Closed {
                code,
                reason: format!(
                    "closed by peer: {} {}",
                    code.map(|c| c.name()).unwrap_or("unknown-code"),
                    String::from_utf8_lossy(&close.reason)
                )
                .trim_end()
                .to_owned(),
            }
        }
        C::LocallyClosed => TransportError::Closed {
            code: Some(ErrorCode::Normal),
            reason: "closed locally".into(),
        },
        C::TimedOut => TransportError::Closed {
            code: None,
            reason: "idle timeout: no packets from the peer".into(),
        },
        C::ConnectionClosed(close) => match crypto_alert(u64::from(close.error_code)) {
            // The peer refused the TLS handshake with this alert.
            Some(alert) => ConnectError::Tls(rustls::Error::AlertReceived(alert)).into(),
            None => ConnectError::Quic {
                peer: "the peer".into(),
                source: e.clone(),
            }
            .into(),
        },
        // A failure on this side (our TLS check of the peer among them: the dialer turns those
        // into the rustls error itself, see `QuicDial`).
        C::TransportError(_) => ConnectError::Quic {
            peer: "QUIC".into(),
            source: e.clone(),
        }
        .into(),
        other => TransportError::Closed {
            code: None,
            reason: other.to_string(),
        },
    }
}

fn quic_priority(class: SendClass) -> i32 {
    match class {
        SendClass::Control | SendClass::Heartbeat => 16,
        SendClass::Message(p) | SendClass::Request(p) => match p {
            Priority::Critical => 12,
            Priority::High => 8,
            Priority::Medium => 4,
            Priority::Low => 0,
        },
    }
}

/// The TLS alert a QUIC crypto error code carries (0x100 + alert), if it is one.
fn crypto_alert(code: u64) -> Option<rustls::AlertDescription> {
    let alert = code.checked_sub(0x100).filter(|a| *a <= 0xff)?;
    u8::try_from(alert).ok().map(rustls::AlertDescription::from)
}

/// Wraps an established connection and its control stream into sender and receiver halves.
///
/// `control` is the bidirectional stream the agent opened first (the agent passes the halves
/// from `open_bi`, the hub those from `accept_bi`). `max_in` is the largest frame the
/// receiver takes until [`FrameReceiver::set_max_frame_size`] says otherwise.
pub fn split_connection(
    conn: Connection,
    control: (SendStream, RecvStream),
    mapping: StreamMapping,
    datagrams: bool,
    max_in: u32,
) -> (QuicSender, QuicReceiver) {
    let (control_send, control_recv) = control;
    let _ = control_send.set_priority(quic_priority(SendClass::Control));
    let limits = Limits::default();
    let max_in = Arc::new(AtomicU32::new(max_in));
    let buffered = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = quic_inbound::channel(INBOUND_QUEUE);
    let streams = Arc::new(StreamsRead::default());
    let backlog = Arc::new(Backlog::new(DEFAULT_MAX_UNREAD_BYTES));
    let reader = StreamReader {
        max_frame_size: max_in.clone(),
        buffered,
        max_buffered: Arc::new(AtomicUsize::new(DEFAULT_MAX_BUFFERED_BYTES)),
        tx: tx.clone(),
        streams: streams.clone(),
        backlog: backlog.clone(),
    };
    tokio::spawn(
        reader
            .clone()
            .pump(control_recv, None, None, Vec::new(), Counted::No),
    );
    tokio::spawn(accept_loop(conn.clone(), reader.clone(), tx));
    let sender = QuicSender {
        inner: Arc::new(SenderInner {
            conn,
            control: Mutex::new(control_send),
            lanes: Default::default(),
            mapping,
            datagrams,
            peer_max: AtomicU32::new(limits.max_frame_size),
            streams_opened: AtomicU64::new(1),
            datagrams_sent: AtomicU64::new(0),
            request_streams: AtomicU64::new(0),
            replies_on_request_streams: AtomicU64::new(0),
            reader,
            admission: std::sync::Mutex::new(None),
            window_after_hello: AtomicU64::new(0),
            sent: std::sync::OnceLock::new(),
            count_goodbye: std::sync::atomic::AtomicBool::new(false),
        }),
    };
    let receiver = QuicReceiver {
        rx,
        max_frame_size: max_in,
        done: false,
        last_reply: None,
        goodbye: None,
        streams,
        backlog,
    };
    (sender, receiver)
}

/// Sending half of a QUIC connection.
#[derive(Clone)]
pub struct QuicSender {
    inner: Arc<SenderInner>,
}

struct SenderInner {
    conn: Connection,
    control: Mutex<SendStream>,
    lanes: [Mutex<Option<SendStream>>; 4],
    mapping: StreamMapping,
    datagrams: bool,
    peer_max: AtomicU32,
    streams_opened: AtomicU64,
    datagrams_sent: AtomicU64,
    request_streams: AtomicU64,
    replies_on_request_streams: AtomicU64,
    /// Reads answers arriving on the request streams this side opens.
    reader: StreamReader,
    /// The connection's share of the hub's receive budget, held as long as the connection.
    admission: std::sync::Mutex<Option<Admission>>,
    /// The window to raise the connection to once its hello is accepted (0: leave it).
    window_after_hello: AtomicU64,
    /// Message streams finished but perhaps not yet acknowledged, kept (by agents'
    /// connections: [`QuicSender::keep_sent_streams`]) so that `delivered` can wait for them.
    sent: std::sync::OnceLock<std::sync::Mutex<SentStreams>>,
    /// The peer understands counted goodbyes: this side's goodbye names its message streams.
    count_goodbye: std::sync::atomic::AtomicBool,
}

/// Finished message streams whose acknowledgement may still be outstanding. Those already
/// acknowledged are dropped whenever the list has doubled since the last look, so it stays
/// about as long as the data in flight, at a cost per message that does not grow with it.
#[derive(Default)]
struct SentStreams {
    streams: Vec<SendStream>,
    look_at: usize,
}

impl SentStreams {
    fn keep(&mut self, stream: SendStream) {
        if self.streams.len() >= self.look_at {
            self.streams
                .retain(|s| futures_util::FutureExt::now_or_never(s.stopped()).is_none());
            self.look_at = (self.streams.len() * 2).max(64);
        }
        self.streams.push(stream);
    }
}

impl QuicSender {
    /// Keeps every finished message stream until the peer acknowledges it, so that
    /// [`FrameSender::delivered`] can wait for all of them (agents do, before their goodbye).
    pub fn keep_sent_streams(&self) {
        let _ = self
            .inner
            .sent
            .set(std::sync::Mutex::new(SentStreams::default()));
    }

    fn finished(&self, stream: SendStream) {
        if let Some(sent) = self.inner.sent.get() {
            sent.lock().unwrap_or_else(|p| p.into_inner()).keep(stream);
        }
    }

    /// Keeps the connection's place in a receive budget until the last sender is dropped.
    fn hold_admission(&self, admission: Admission) {
        *self
            .inner
            .admission
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(admission);
    }

    /// The underlying quinn connection (for stats, addresses and tests).
    pub fn connection(&self) -> &Connection {
        &self.inner.conn
    }

    async fn write_control(&self, frame: Bytes) -> Result<(), TransportError> {
        let mut control = self.inner.control.lock().await;
        // A goodbye names the message streams opened before it (all of them: the control
        // stream's lock is held, and nothing is sent after a goodbye), so that the peer
        // passes it on only after their frames.
        let frame = match self.inner.count_goodbye.load(Ordering::Relaxed) {
            true => {
                let opened = self.inner.streams_opened.load(Ordering::Relaxed) - 1;
                counted_goodbye::count(&frame, opened).unwrap_or(frame)
            }
            false => frame,
        };
        control.write_chunk(frame).await.map_err(map_write_error)
    }

    async fn write_message(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        let inner = &self.inner;
        let open = || async {
            let stream = inner
                .conn
                .open_uni()
                .await
                .map_err(|e| map_connection_error(&e))?;
            let _ = stream.set_priority(quic_priority(class));
            inner.streams_opened.fetch_add(1, Ordering::Relaxed);
            Ok::<_, TransportError>(stream)
        };
        match (inner.mapping, class) {
            (StreamMapping::PerMessage, SendClass::Request(_)) => {
                let (mut stream, answers) = inner
                    .conn
                    .open_bi()
                    .await
                    .map_err(|e| map_connection_error(&e))?;
                let _ = stream.set_priority(quic_priority(class));
                inner.streams_opened.fetch_add(1, Ordering::Relaxed);
                inner.request_streams.fetch_add(1, Ordering::Relaxed);
                // The answer comes back on the other direction of this stream.
                tokio::spawn(inner.reader.clone().pump(
                    answers,
                    None,
                    None,
                    Vec::new(),
                    Counted::No,
                ));
                stream.write_chunk(frame).await.map_err(map_write_error)?;
                let _ = stream.finish();
                self.finished(stream);
                Ok(())
            }
            (StreamMapping::Lanes, SendClass::Message(p) | SendClass::Request(p)) => {
                let mut lane = inner.lanes[p.index()].lock().await;
                let stream = match lane.as_mut() {
                    Some(s) => s,
                    None => lane.insert(open().await?),
                };
                stream.write_chunk(frame).await.map_err(map_write_error)
            }
            _ => {
                let mut stream = open().await?;
                stream.write_chunk(frame).await.map_err(map_write_error)?;
                // Ends the stream; the bytes still go out (and are retransmitted) after this.
                let _ = stream.finish();
                self.finished(stream);
                Ok(())
            }
        }
    }
}

fn map_write_error(e: quinn::WriteError) -> TransportError {
    match e {
        quinn::WriteError::ConnectionLost(c) => map_connection_error(&c),
        other => TransportError::io("stream write failed", other),
    }
}

impl FrameSender for QuicSender {
    async fn send_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        check_outgoing(&frame, self.inner.peer_max.load(Ordering::Relaxed))?;
        match class {
            SendClass::Control => self.write_control(frame).await,
            SendClass::Heartbeat => {
                let fits = self
                    .inner
                    .conn
                    .max_datagram_size()
                    .is_some_and(|max| frame.len() <= max);
                if self.inner.datagrams && fits {
                    match self.inner.conn.send_datagram(frame.clone()) {
                        Ok(()) => {
                            self.inner.datagrams_sent.fetch_add(1, Ordering::Relaxed);
                            return Ok(());
                        }
                        Err(quinn::SendDatagramError::ConnectionLost(c)) => {
                            return Err(map_connection_error(&c))
                        }
                        Err(_) => {}
                    }
                }
                self.write_control(frame).await
            }
            SendClass::Message(_) | SendClass::Request(_) => self.write_message(frame, class).await,
        }
    }

    async fn send_reply(
        &self,
        frame: Bytes,
        priority: Priority,
        slot: ReplySlot,
    ) -> Result<(), TransportError> {
        let Some(mut stream) = slot.into_quic() else {
            return self.send_frame(frame, SendClass::Message(priority)).await;
        };
        check_outgoing(&frame, self.inner.peer_max.load(Ordering::Relaxed))?;
        let _ = stream.set_priority(quic_priority(SendClass::Message(priority)));
        match stream.write_chunk(frame.clone()).await {
            Ok(()) => {
                let _ = stream.finish();
                self.finished(stream);
                self.inner
                    .replies_on_request_streams
                    .fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            // The requester gave up on this stream (stopped it); the answer still goes out,
            // as an ordinary message, in case it waits by correlation.
            Err(quinn::WriteError::Stopped(_)) | Err(quinn::WriteError::ClosedStream) => {
                self.send_frame(frame, SendClass::Message(priority)).await
            }
            Err(e) => Err(map_write_error(e)),
        }
    }

    fn set_peer_max_frame_size(&self, max: u32) {
        self.inner.peer_max.store(max, Ordering::Relaxed);
    }

    fn count_streams_in_goodbye(&self) {
        self.inner.count_goodbye.store(true, Ordering::Relaxed);
    }

    fn hello_accepted(&self) {
        self.inner
            .reader
            .max_buffered
            .store(DEFAULT_MAX_BUFFERED_BYTES, Ordering::Relaxed);
        let mut admission = self
            .inner
            .admission
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match admission.as_mut() {
            // Its share of the receive budget, adjusted by the budget from now on.
            Some(admission) => admission.register(&self.inner.conn),
            None => {
                let window = self.inner.window_after_hello.swap(0, Ordering::Relaxed);
                if window > 0 {
                    self.inner
                        .conn
                        .set_receive_window(VarInt::from_u64(window).unwrap_or(VarInt::MAX));
                }
            }
        }
    }

    fn close(&self, code: ErrorCode, reason: &str) {
        self.inner
            .conn
            .close(VarInt::from_u32(code.code()), reason.as_bytes());
    }

    async fn closed(&self) -> TransportError {
        map_connection_error(&self.inner.conn.closed().await)
    }

    fn stats(&self) -> ConnectionStats {
        let s = self.inner.conn.stats();
        ConnectionStats {
            transport: TransportKind::Quic.name(),
            remote_addr: Some(self.inner.conn.remote_address()),
            rtt_us: u64::try_from(s.path.rtt.as_micros()).unwrap_or(u64::MAX),
            cwnd_bytes: s.path.cwnd,
            lost_packets: s.path.lost_packets,
            lost_bytes: s.path.lost_bytes,
            sent_packets: s.path.sent_packets,
            bytes_sent: s.udp_tx.bytes,
            bytes_received: s.udp_rx.bytes,
            streams_opened: self.inner.streams_opened.load(Ordering::Relaxed),
            datagrams_sent: self.inner.datagrams_sent.load(Ordering::Relaxed),
            request_streams: self.inner.request_streams.load(Ordering::Relaxed),
            replies_on_request_streams: self
                .inner
                .replies_on_request_streams
                .load(Ordering::Relaxed),
            mtu: s.path.current_mtu,
            congestion_events: s.path.congestion_events,
        }
    }

    async fn delivered(&self) {
        let Some(sent) = self.inner.sent.get() else {
            return;
        };
        // A lane stays open for the next message: end it, so that its data can be awaited
        // like a finished stream's (the next message on that lane opens a new one).
        for lane in &self.inner.lanes {
            if let Some(mut stream) = lane.lock().await.take() {
                let _ = stream.finish();
                self.finished(stream);
            }
        }
        let streams = std::mem::take(&mut sent.lock().unwrap_or_else(|p| p.into_inner()).streams);
        for stream in &streams {
            let _ = stream.stopped().await;
        }
    }

    fn kind(&self) -> TransportKind {
        TransportKind::Quic
    }
}

/// Receiving half of a QUIC connection: frames from the control stream, every unidirectional
/// stream and datagrams, merged.
pub struct QuicReceiver {
    rx: InboundReceiver<Result<Inbound, TransportError>>,
    max_frame_size: Arc<AtomicU32>,
    done: bool,
    last_reply: Option<ReplySlot>,
    /// A goodbye held back while the frames of other streams, sent before it, come in.
    goodbye: Option<Held>,
    /// How far the peer's streams have been read.
    streams: Arc<StreamsRead>,
    /// Bytes read and not yet taken from here.
    backlog: Arc<Backlog>,
}

impl QuicReceiver {
    /// Bytes read from the peer's streams and not yet taken with `recv_frame`: at most
    /// about 16 MiB before new streams wait (`quic_backlog`), plus one frame per stream
    /// being read.
    pub fn unconsumed_bytes(&self) -> usize {
        self.backlog.bytes()
    }

    /// Reads no further while this many bytes are read and not taken
    /// ([`QuicSettings::max_unread_bytes`]).
    pub fn set_max_unread_bytes(&self, max: usize) {
        self.backlog.set_limit(max);
    }
}

impl Drop for QuicReceiver {
    fn drop(&mut self) {
        self.backlog.consumer_gone();
    }
}

/// A goodbye held back, and until when.
struct Held {
    goodbye: Inbound,
    /// A counted goodbye: the message streams the peer opened before it.
    streams: Option<u64>,
    /// When it arrived (for an uncounted goodbye's hold).
    since: tokio::time::Instant,
}

/// A peer that does not count its streams in its goodbye (it did not offer the capability):
/// its goodbye is handed on once no other frame has come for this long...
const GOODBYE_QUIET: std::time::Duration = std::time::Duration::from_millis(25);
/// ...or this long after it arrived: a guess, which a receiver whose readers are starved for
/// longer can lose messages to. Counted goodbyes wait for exactly what was sent before them.
const GOODBYE_HOLD_MAX: std::time::Duration = std::time::Duration::from_millis(500);

/// What [`QuicReceiver::next`] found.
enum Next {
    /// A frame (or the end, or an error) from the streams.
    Item(Option<Result<Inbound, TransportError>>),
    /// The held goodbye, now due.
    Goodbye(Inbound),
}

/// A frame read from a stream, with the stream's reply direction if it arrived as the first
/// frame of a peer-opened bidirectional (request) stream.
type Inbound = (RawFrame, Option<ReplySlot>);

impl QuicReceiver {
    /// The next item from the streams, or, when a goodbye is held, the goodbye once
    /// everything sent before it was handed on.
    async fn next(&mut self) -> Next {
        let Some(held) = &self.goodbye else {
            return Next::Item(self.rx.recv().await);
        };
        let Some(named) = held.streams else {
            let quiet = tokio::time::Instant::now() + GOODBYE_QUIET;
            let until = quiet.min(held.since + GOODBYE_HOLD_MAX);
            return match tokio::time::timeout_at(until, self.rx.recv()).await {
                Ok(next) => Next::Item(next),
                // Quiet (or held long enough): the goodbye now.
                Err(_) => Next::Goodbye(self.take_goodbye()),
            };
        };
        loop {
            if self.streams.all_read(named) {
                // Every frame of those streams is queued already: those first, then the
                // goodbye.
                return match self.rx.try_recv() {
                    Some(next) => Next::Item(Some(next)),
                    None => Next::Goodbye(self.take_goodbye()),
                };
            }
            tokio::select! {
                () = self.streams.changed() => {}
                next = self.rx.recv() => return Next::Item(next),
            }
        }
    }

    fn take_goodbye(&mut self) -> Inbound {
        let held = self.goodbye.take().expect("a goodbye is held");
        held.goodbye
    }
}

impl FrameReceiver for QuicReceiver {
    async fn recv_frame(&mut self) -> Result<Option<RawFrame>, TransportError> {
        self.last_reply = None;
        if self.done {
            return Ok(None);
        }
        let next = loop {
            let next = match self.next().await {
                Next::Item(next) => next,
                Next::Goodbye(goodbye) => break Some(Ok(goodbye)),
            };
            let counted = matches!(&next, Some(Ok((f, _))) if f.type_byte == counted_goodbye::TYPE);
            match next {
                Some(Ok((frame, reply)))
                    if (counted || frame.type_byte == FrameType::Goodbye as u8)
                        && self.goodbye.is_none() =>
                {
                    let (streams, frame) = match counted {
                        true => match counted_goodbye::split(&frame) {
                            Ok((n, goodbye)) => {
                                self.backlog
                                    .taken(frame.payload.len() - goodbye.payload.len());
                                (Some(n), goodbye)
                            }
                            Err(e) => break Some(Err(TransportError::Frame(e))),
                        },
                        false => (None, frame),
                    };
                    self.goodbye = Some(Held {
                        goodbye: (frame, reply),
                        streams,
                        since: tokio::time::Instant::now(),
                    });
                }
                // The connection ended (or a stream broke) while a counted goodbye was held:
                // the streams already started still finish (a closed connection's received
                // data stays readable), and the goodbye waits for them.
                Some(Err(_)) if self.goodbye.as_ref().is_some_and(|h| h.streams.is_some()) => {}
                // The connection ended while an uncounted goodbye was held: the goodbye first.
                Some(Err(_)) | None if self.goodbye.is_some() => {
                    break Some(Ok(self.take_goodbye()));
                }
                other => break other,
            }
        };
        match next {
            Some(Ok((frame, reply))) => {
                self.backlog.taken(backlog_len(&frame));
                self.last_reply = reply;
                Ok(Some(frame))
            }
            Some(Err(TransportError::Closed {
                code: Some(ErrorCode::Normal),
                ..
            }))
            | None => {
                self.done = true;
                Ok(None)
            }
            Some(Err(e)) => {
                self.done = true;
                Err(e)
            }
        }
    }

    fn set_max_frame_size(&mut self, max: u32) {
        self.max_frame_size.store(max, Ordering::Relaxed);
    }

    fn take_reply_slot(&mut self) -> Option<ReplySlot> {
        self.last_reply.take()
    }
}

/// Bytes the accept loop reads from one new stream before it hands the stream to a task.
const INLINE_READ_MAX: usize = 64 * 1024;

/// Reads frames from streams into the connection's inbound queue.
#[derive(Clone)]
struct StreamReader {
    max_frame_size: Arc<AtomicU32>,
    buffered: Arc<AtomicUsize>,
    /// Bytes of partly received frames all streams together may hold ([`PRE_HELLO_WINDOW`]
    /// on a hub's connection until the hello is accepted).
    max_buffered: Arc<AtomicUsize>,
    tx: InboundSender<Result<Inbound, TransportError>>,
    /// The peer-opened streams read so far (for the counted goodbye).
    streams: Arc<StreamsRead>,
    /// Frames read and not yet consumed.
    backlog: Arc<Backlog>,
}

/// What a frame counts in a connection's [`Backlog`].
fn backlog_len(frame: &RawFrame) -> usize {
    frame.payload.len() + agentwire_proto::FRAME_HEADER_LEN + 1
}

/// Whether a stream is one the peer opened for its messages, which its counted goodbye
/// counts (the control stream and the answers to this side's requests are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    Yes,
    No,
}

impl StreamReader {
    /// Reads a stream the accept loop has just accepted. A message stream whose bytes and end
    /// have all arrived (most small messages: one packet) is read here, in the accept loop,
    /// and its frame queued without a wait; a task per stream was 4.5 % of a QUIC hub's CPU
    /// at 10 × 1 KiB. Anything else (bytes still to come, a full queue, not exactly one
    /// frame) goes to a [`pump`](Self::pump) task with the bytes read so far, and ends
    /// exactly as if that task had read them.
    fn start(&self, mut stream: RecvStream, reply: Option<SendStream>, ticket: Ticket) {
        use futures_util::FutureExt;
        self.streams.started();
        let mut read = Vec::new();
        let mut size = 0usize;
        let finished = loop {
            match stream.read_chunk(usize::MAX, true).now_or_never() {
                Some(Ok(Some(chunk))) => {
                    size += chunk.bytes.len();
                    read.push(chunk.bytes);
                    if size > INLINE_READ_MAX {
                        break false;
                    }
                }
                Some(Ok(None)) => break true,
                // A reset stream loses only its own message.
                Some(Err(_)) => return self.streams.read(),
                None => break false,
            }
        };
        if finished && read.len() == 1 {
            let max = self.max_frame_size.load(Ordering::Relaxed);
            if let Ok(frame) = FrameDecoder::decode_one(read[0].clone(), max) {
                self.backlog.read(backlog_len(&frame));
                let item = Ok((frame, reply.map(ReplySlot::quic)));
                match self.tx.try_send(ticket, item) {
                    Ok(()) | Err(quic_inbound::TrySendError::Closed(_)) => self.streams.read(),
                    Err(quic_inbound::TrySendError::Full(item)) => {
                        let (tx, streams) = (self.tx.clone(), self.streams.clone());
                        tokio::spawn(async move {
                            let _ = tx.send(ticket, item).await;
                            streams.read();
                        });
                    }
                }
                return;
            }
        }
        tokio::spawn(
            self.clone()
                .pump(stream, reply, Some(ticket), read, Counted::Yes),
        );
    }

    /// Reads frames from `stream` until it ends, starting with the bytes `read` already
    /// taken from it. `reply` is the other direction of a peer-opened bidirectional stream:
    /// it travels with the first frame, as that request's reply slot. `first` is the stream's
    /// place in the peer's opening order (taken when it was accepted); its first frame waits
    /// for room with it, later frames with a new ticket. A [`Counted`] stream is reported
    /// read once its last frame is queued.
    async fn pump(
        self,
        mut stream: RecvStream,
        mut reply: Option<SendStream>,
        mut first: Option<Ticket>,
        read: Vec<Bytes>,
        counted: Counted,
    ) {
        let mut decoder = FrameDecoder::new(self.max_frame_size.load(Ordering::Relaxed));
        let mut held = 0usize;
        let mut pending = read.into_iter();
        let mut read_before = false;
        let result = loop {
            let chunk = match pending.next() {
                Some(bytes) => bytes,
                None => {
                    if read_before {
                        // Chunks already buffered come back without waiting: give the
                        // connection's other tasks (the accept loop with a new, maybe
                        // critical, stream) a turn.
                        tokio::task::yield_now().await;
                    }
                    read_before = true;
                    // Nothing more read while the consumer has a full backlog: the bytes wait
                    // in quinn, within the stream's flow-control window.
                    if !self.backlog.has_room() {
                        self.backlog.room().await;
                    }
                    match stream.read_chunk(usize::MAX, true).await {
                        Ok(Some(chunk)) => chunk.bytes,
                        Ok(None) => break decoder.finish().map_err(TransportError::from),
                        // A reset stream loses only its own message; a lost connection is
                        // reported by the accept loop.
                        Err(_) => break Ok(()),
                    }
                }
            };
            decoder.push_bytes(chunk);
            let outcome = self.drain(&mut decoder, &mut reply, &mut first).await;
            let now = decoder.buffered();
            if now > held {
                let total = self.buffered.fetch_add(now - held, Ordering::Relaxed) + now - held;
                held = now;
                let max_buffered = self.max_buffered.load(Ordering::Relaxed);
                if total > max_buffered {
                    break Err(TransportError::Frame(
                        agentwire_proto::FrameError::TooLarge {
                            len: u32::try_from(total).unwrap_or(u32::MAX),
                            max: u32::try_from(max_buffered).unwrap_or(u32::MAX),
                        },
                    ));
                }
            } else {
                self.buffered.fetch_sub(held - now, Ordering::Relaxed);
                held = now;
            }
            match outcome {
                Ok(true) => {}
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.buffered.fetch_sub(held, Ordering::Relaxed);
        if let Err(e) = result {
            let _ = self.tx.send(self.tx.ticket(), Err(e)).await;
        }
        if counted == Counted::Yes {
            self.streams.read();
        }
    }

    /// Hands every whole frame in the decoder on; `Ok(false)` when the consumer is gone.
    async fn drain(
        &self,
        decoder: &mut FrameDecoder,
        reply: &mut Option<SendStream>,
        first: &mut Option<Ticket>,
    ) -> Result<bool, TransportError> {
        loop {
            decoder.set_max_frame_size(self.max_frame_size.load(Ordering::Relaxed));
            match decoder.next_frame()? {
                Some(frame) => {
                    self.backlog.read(backlog_len(&frame));
                    let slot = reply.take().map(ReplySlot::quic);
                    let ticket = first.take().unwrap_or_else(|| self.tx.ticket());
                    if self.tx.send(ticket, Ok((frame, slot))).await.is_err() {
                        return Ok(false);
                    }
                }
                None => return Ok(true),
            }
        }
    }
}

async fn accept_loop(
    conn: Connection,
    reader: StreamReader,
    tx: InboundSender<Result<Inbound, TransportError>>,
) {
    let ended = loop {
        // No new stream while the consumer has a full backlog (see `quic_backlog`).
        if !reader.backlog.has_room() {
            tokio::select! {
                () = reader.backlog.room() => {}
                e = conn.closed() => break Some(e),
            }
        }
        tokio::select! {
            stream = conn.accept_uni() => match stream {
                Ok(stream) => reader.start(stream, None, tx.ticket()),
                Err(e) => break Some(e),
            },
            request = conn.accept_bi() => match request {
                Ok((reply, stream)) => reader.start(stream, Some(reply), tx.ticket()),
                Err(e) => break Some(e),
            },
            datagram = conn.read_datagram() => match datagram {
                Ok(bytes) => {
                    let max = reader.max_frame_size.load(Ordering::Relaxed);
                    let frame = FrameDecoder::decode_one(bytes, max).map_err(TransportError::from).and_then(|f| {
                        if f.type_byte == FrameType::Heartbeat as u8 {
                            Ok(f)
                        } else {
                            Err(TransportError::Frame(agentwire_proto::FrameError::Malformed {
                                frame: FrameType::Heartbeat,
                                message: format!("datagram carried frame type 0x{:02x}; only heartbeats may", f.type_byte),
                            }))
                        }
                    });
                    let fatal = frame.is_err();
                    if let Ok(f) = &frame {
                        reader.backlog.read(backlog_len(f));
                    }
                    if tx.send(tx.ticket(), frame.map(|f| (f, None))).await.is_err() || fatal {
                        break None;
                    }
                }
                Err(e) => break Some(e),
            },
        }
    };
    if let Some(e) = ended {
        // The connection ended. Streams whose data had arrived are still handed out before
        // the error, and their data stays readable: take them all (one branch's error above
        // said nothing about the other's streams), so that nothing sent before a goodbye and
        // then a close is lost.
        while let Ok(stream) = conn.accept_uni().await {
            reader.start(stream, None, tx.ticket());
        }
        while let Ok((reply, stream)) = conn.accept_bi().await {
            reader.start(stream, Some(reply), tx.ticket());
        }
        reader.streams.end();
        let _ = tx.send(tx.ticket(), Err(map_connection_error(&e))).await;
    } else {
        reader.streams.end();
    }
}

/// A QUIC listener: the endpoint (or endpoints, see [`QuicSettings::server_endpoints`]), the
/// configuration connections start from, and the receive budget they share (see
/// [`quic_budget`](super::quic_budget)).
pub struct QuicListen {
    incoming: Incomings,
    config: Arc<quinn::ServerConfig>,
    settings: QuicSettings,
    mapping: StreamMapping,
    budget: Option<Arc<ReceiveBudget>>,
    handshake_timeout: std::time::Duration,
    /// Connection attempts in the current one-second window, for Retry under a flood.
    attempts: (std::time::Instant, u32),
    retries: Arc<std::sync::atomic::AtomicU64>,
    /// Handshakes going on, in all and per address, counted before any cryptography.
    gate: super::accept_gate::AcceptGate,
}

/// What the owner of a [`QuicListen`] keeps: where it is bound, and a way to close it.
#[derive(Clone)]
pub struct QuicListenHandle {
    /// The address bound (useful with port 0).
    pub local_addr: SocketAddr,
    /// The UDP socket buffers the kernel granted (each socket's, when there are several).
    pub socket_buffers: SocketBuffers,
    endpoints: Vec<quinn::Endpoint>,
    retries: Arc<std::sync::atomic::AtomicU64>,
}

impl QuicListenHandle {
    /// QUIC Retry packets sent so far ([`QuicSettings::retry_above_per_sec`]).
    pub fn retries_sent(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Stops accepting and closes every connection with `code`.
    pub fn close(&self, code: ErrorCode, reason: &str) {
        for endpoint in &self.endpoints {
            endpoint.close(VarInt::from_u32(code.code()), reason.as_bytes());
        }
    }

    /// Connections open on each of the listener's endpoints (one entry per UDP socket, see
    /// [`QuicSettings::server_endpoints`]).
    pub fn connections_per_endpoint(&self) -> Vec<usize> {
        self.endpoints
            .iter()
            .map(quinn::Endpoint::open_connections)
            .collect()
    }
}

/// Where a listener's incoming connections come from: its one endpoint, or the tasks that
/// accept on each of several endpoints sharing one address.
enum Incomings {
    One(quinn::Endpoint),
    Many(tokio::sync::mpsc::Receiver<quinn::Incoming>),
    /// With a rate of set-ups: every incoming connection is taken from quinn at once and
    /// queued here with the time it came (at most [`INCOMING_QUEUE`]; beyond, refused), so
    /// that the listener can let go of those that waited longer than their peer would.
    Paced(tokio::sync::mpsc::Receiver<(std::time::Instant, quinn::Incoming)>),
}

impl Incomings {
    /// Accepts on every endpoint; with more than one, a task per endpoint hands its incoming
    /// connections on (it ends when its endpoint closes, and the listener's `accept` returns
    /// `None` once all have).
    fn new(mut endpoints: Vec<quinn::Endpoint>) -> Incomings {
        if endpoints.len() == 1 {
            if let Some(endpoint) = endpoints.pop() {
                return Incomings::One(endpoint);
            }
        }
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        for endpoint in endpoints {
            let tx = tx.clone();
            tokio::spawn(async move {
                loop {
                    // Ends with the endpoint, or with the listener (its receiver dropped).
                    let incoming = tokio::select! {
                        incoming = endpoint.accept() => incoming,
                        () = tx.closed() => None,
                    };
                    let Some(incoming) = incoming else { break };
                    if tx.send(incoming).await.is_err() {
                        break;
                    }
                }
            });
        }
        Incomings::Many(rx)
    }

    /// The next incoming connection and when it came.
    async fn next(&mut self) -> Option<(std::time::Instant, quinn::Incoming)> {
        let now = std::time::Instant::now;
        match self {
            Incomings::One(endpoint) => endpoint.accept().await.map(|i| (now(), i)),
            Incomings::Many(rx) => rx.recv().await.map(|i| (now(), i)),
            Incomings::Paced(rx) => rx.recv().await,
        }
    }

    /// These incomings, taken from quinn as they come by a task of their own and queued with
    /// their arrival time ([`Incomings::Paced`]).
    fn paced(mut self) -> Incomings {
        if matches!(self, Incomings::Paced(_)) {
            return self;
        }
        let (tx, rx) = tokio::sync::mpsc::channel(INCOMING_QUEUE);
        tokio::spawn(async move {
            loop {
                let incoming = tokio::select! {
                    incoming = self.next() => incoming,
                    () = tx.closed() => None,
                };
                let Some(incoming) = incoming else { break };
                match tx.try_send(incoming) {
                    Ok(()) => {}
                    Err(tokio::sync::mpsc::error::TrySendError::Full((_, incoming))) => {
                        incoming.refuse();
                    }
                    Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => break,
                }
            }
        });
        Incomings::Paced(rx)
    }
}

impl QuicListen {
    /// Binds `addr` with `settings` and the server TLS configuration `tls`. Connections whose
    /// control stream does not open within `handshake_timeout` are closed.
    pub fn bind(
        addr: SocketAddr,
        settings: &QuicSettings,
        tls: rustls::ServerConfig,
        mapping: StreamMapping,
        handshake_timeout: std::time::Duration,
    ) -> Result<(QuicListen, QuicListenHandle), TransportError> {
        let ServerEndpoint {
            endpoint,
            socket_buffers,
            config,
            more,
        } = server_endpoint(addr, settings, tls)?;
        let local_addr = endpoint
            .local_addr()
            .map_err(|e| ConnectError::socket("cannot read the UDP socket's address", e))?;
        let budget = (settings.receive_budget > 0)
            .then(|| ReceiveBudget::new(settings.receive_budget, settings.receive_window));
        let mut endpoints = vec![endpoint];
        endpoints.extend(more);
        let retries = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let handle = QuicListenHandle {
            local_addr,
            socket_buffers,
            endpoints: endpoints.clone(),
            retries: retries.clone(),
        };
        let listen = QuicListen {
            incoming: Incomings::new(endpoints),
            config: Arc::new(config),
            settings: settings.clone(),
            mapping,
            budget,
            handshake_timeout,
            attempts: (std::time::Instant::now(), 0),
            retries,
            gate: super::accept_gate::AcceptGate::new(Default::default()),
        };
        Ok((listen, handle))
    }
}

impl QuicListen {
    /// Whether to answer `incoming` with a Retry: the address is not validated yet and the
    /// attempts of this second are over the configured threshold.
    fn should_retry(&mut self, incoming: &quinn::Incoming) -> bool {
        let Some(limit) = self.settings.retry_above_per_sec else {
            return false;
        };
        let now = std::time::Instant::now();
        if now.duration_since(self.attempts.0) >= std::time::Duration::from_secs(1) {
            self.attempts = (now, 0);
        }
        self.attempts.1 = self.attempts.1.saturating_add(1);
        self.attempts.1 > limit && incoming.may_retry()
    }
}

impl QuicListen {
    /// Holds the connections in their QUIC handshake and set-up (until the control stream is
    /// open) to `limits`, as the TCP listeners are: at the total, the listener takes no new
    /// connection until one is set up (quinn queues the rest); past the per-address count a
    /// new connection is refused before any cryptography.
    ///
    /// With a rate of set-ups per second, connections beyond it wait for their turn in a queue
    /// of [`INCOMING_QUEUE`]; one that waited longer than the handshake timeout (its peer has
    /// given up by then) is let go without an answer and without spending a turn, so that a
    /// newcomer after a flood waits at most about that long.
    pub fn with_accept_limits(mut self, limits: super::accept_gate::AcceptLimits) -> Self {
        self.gate = super::accept_gate::AcceptGate::new(limits);
        if limits.handshakes_per_sec.is_some() {
            let incoming = std::mem::replace(
                &mut self.incoming,
                Incomings::Many(tokio::sync::mpsc::channel(1).1),
            );
            self.incoming = incoming.paced();
        }
        self
    }
}

impl Listen for QuicListen {
    type Sender = QuicSender;
    type Receiver = QuicReceiver;

    async fn accept(&mut self) -> Option<Setup<QuicSender, QuicReceiver>> {
        let (incoming, pass) = loop {
            // At the limit of set-ups going on, or of set-ups per second, wait (quinn holds
            // the next ones, up to INCOMING_QUEUE).
            let slot = self.gate.slot().await?;
            let (came, incoming) = self.incoming.next().await?;
            if came.elapsed() > self.handshake_timeout {
                // Its peer gave up waiting: no answer, no turn spent.
                incoming.ignore();
                continue;
            }
            self.gate.turn().await;
            if self.should_retry(&incoming) {
                if incoming.retry().is_ok() {
                    self.retries.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            let remote = incoming.remote_address().ip();
            match self.gate.admit(slot, remote) {
                Ok(pass) => break (incoming, pass),
                Err(reason) => {
                    // Before the handshake: refused at once, counted by the hub as a failed
                    // set-up.
                    incoming.refuse();
                    return Some(Box::pin(async move {
                        Err(AcceptFailed {
                            stage: "accept",
                            error: TransportError::Closed {
                                code: Some(ErrorCode::LimitExceeded),
                                reason,
                            },
                        })
                    }));
                }
            }
        };
        let admission = self.budget.as_ref().map(ReceiveBudget::admit);
        let config = self.config.clone();
        let settings = self.settings.clone();
        let mapping = self.mapping;
        let timeout = self.handshake_timeout;
        Some(Box::pin(async move {
            let set_up =
                accept_connection(incoming, &config, &settings, mapping, admission, timeout).await;
            drop(pass);
            set_up
        }))
    }
}

/// Takes one incoming connection to the point where its control stream is open.
async fn accept_connection(
    incoming: quinn::Incoming,
    config: &quinn::ServerConfig,
    settings: &QuicSettings,
    mapping: StreamMapping,
    admission: Option<Admission>,
    timeout: std::time::Duration,
) -> Result<Accepted<QuicSender, QuicReceiver>, AcceptFailed> {
    let failed = |error: TransportError| AcceptFailed {
        stage: "quic",
        error,
    };
    let window = admission
        .as_ref()
        .map_or(settings.pre_hello_window, Admission::window)
        .min(settings.pre_hello_window)
        .min(settings.receive_window);
    let connecting = accept_incoming(incoming, config, settings, Some(window))
        .map_err(|e| failed(map_connection_error(&e)))?;
    // Take the connection at 0.5-RTT so that a control stream sent as 0-RTT data can be seen
    // arriving before the handshake completes (that is how the hub counts accepted 0-RTT),
    // but hand on nothing until the handshake has completed: a replayed 0-RTT flight never
    // completes it, so it can never register an agent.
    let (conn, handshake_done) = connecting.into_0rtt().map_err(|_| {
        failed(ConnectError::Config("the QUIC handshake could not start".into()).into())
    })?;
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
        Ok((Err(e), _)) => return Err(failed(map_connection_error(&e))),
        Err(_) => {
            conn.close(
                VarInt::from_u32(ErrorCode::HandshakeTimeout.code()),
                b"no control stream in time",
            );
            return Err(failed(TransportError::Timeout(timeout)));
        }
    };
    if let Some(reason) = conn.close_reason() {
        // The handshake failed after 0-RTT data arrived (e.g. a replayed flight).
        return Err(failed(map_connection_error(&reason)));
    }
    let certificate = conn
        .peer_identity()
        .and_then(|any| {
            any.downcast::<Vec<rustls_pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .and_then(|chain| agentwire_tls::AgentCertificate::of_chain(&chain));
    // Nothing bigger than a hello until the hub has read the hello (the hub raises the limit
    // to the agreed one then).
    let max_in = agentwire_proto::MAX_HELLO_FRAME;
    let (sender, receiver) = split_connection(conn, control, mapping, settings.datagrams, max_in);
    // The window, and what partly received frames may hold, stay small until the hello is
    // accepted (`hello_accepted`).
    sender.inner.reader.max_buffered.store(
        usize::try_from(settings.pre_hello_window).unwrap_or(usize::MAX),
        Ordering::Relaxed,
    );
    receiver.set_max_unread_bytes(settings.max_unread_bytes);
    match admission {
        Some(admission) => sender.hold_admission(admission),
        None => sender
            .inner
            .window_after_hello
            .store(settings.receive_window, Ordering::Relaxed),
    }
    Ok(Accepted {
        sender,
        receiver,
        zero_rtt,
        certificate,
        // QUIC bounds what a peer may send before its hello by the connection window
        // (PRE_HELLO_WINDOW); the receiver takes no frame over a hello's size before it.
        hello_gate: None,
    })
}

/// A QUIC client: one endpoint and one TLS configuration, with its session-ticket cache, for
/// all of an agent's connections, so that a reconnect can send its hello as 0-RTT data. Its
/// certificate check records why it refused a hub, so that a refused certificate comes back
/// as the rustls error itself ([`ConnectError::Tls`]), not as quinn's text of it.
pub struct QuicDial {
    endpoint: quinn::Endpoint,
    client_config: quinn::ClientConfig,
    recorder: Arc<agentwire_tls::RecordingVerifier>,
    socket_buffers: SocketBuffers,
    settings: QuicSettings,
}

/// A QUIC client endpoint, to move it to another local address (connection migration) or
/// read the one it has.
#[derive(Clone)]
pub struct QuicEndpointHandle {
    endpoint: quinn::Endpoint,
    settings: QuicSettings,
}

impl QuicEndpointHandle {
    /// Moves the endpoint, and every connection on it, to a new UDP socket bound to `addr`;
    /// returns the address bound.
    pub fn rebind(&self, addr: SocketAddr) -> Result<SocketAddr, TransportError> {
        let (socket, _) = self
            .settings
            .bind_udp(addr)
            .map_err(|e| ConnectError::socket(format!("cannot bind {addr}"), e))?;
        let local = socket
            .local_addr()
            .map_err(|e| ConnectError::socket(format!("cannot read the address of {addr}"), e))?;
        self.endpoint
            .rebind(socket)
            .map_err(|e| ConnectError::socket(format!("cannot move the endpoint to {addr}"), e))?;
        Ok(local)
    }

    /// The endpoint's local address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.endpoint.local_addr().ok()
    }
}

impl QuicDial {
    /// A client endpoint bound to `bind` (port 0 for any) with `settings`, checking hubs'
    /// certificates with `verifier` (see [`agentwire_tls::server_verifier`]).
    pub fn new(
        bind: SocketAddr,
        settings: &QuicSettings,
        verifier: Arc<dyn rustls::client::danger::ServerCertVerifier>,
    ) -> Result<QuicDial, TransportError> {
        Self::with_identity(bind, settings, verifier, None)
    }

    /// [`new`](Self::new) that presents `identity` (an agent certificate) to hubs that ask.
    pub fn with_identity(
        bind: SocketAddr,
        settings: &QuicSettings,
        verifier: Arc<dyn rustls::client::danger::ServerCertVerifier>,
        identity: Option<&agentwire_tls::AgentIdentity>,
    ) -> Result<QuicDial, TransportError> {
        let recorder = Arc::new(agentwire_tls::RecordingVerifier::new(verifier));
        let tls = agentwire_tls::client_config_with_verifier_as(
            recorder.clone(),
            &[agentwire_tls::ALPN_AGENTWIRE],
            identity,
        )
        .map_err(|e| ConnectError::Config(e.to_string()))?;
        let client_config = client_config(settings, tls)?;
        let (endpoint, socket_buffers) = client_endpoint(bind, settings)?;
        Ok(QuicDial {
            endpoint,
            client_config,
            recorder,
            socket_buffers,
            settings: settings.clone(),
        })
    }

    /// The endpoint, for migration and its address.
    pub fn endpoint(&self) -> QuicEndpointHandle {
        QuicEndpointHandle {
            endpoint: self.endpoint.clone(),
            settings: self.settings.clone(),
        }
    }
}

/// One connection attempt: where to, and how to tell why it failed.
struct Attempt<'a> {
    addr: SocketAddr,
    server_name: &'a str,
    recorder: &'a agentwire_tls::RecordingVerifier,
}

impl Attempt<'_> {
    /// Waits for the handshake.
    async fn handshake(&self, connecting: quinn::Connecting) -> Result<Connection, TransportError> {
        connecting.await.map_err(|e| self.failed(e))
    }

    /// Opens the control stream and writes the first frame on it.
    async fn open_control(
        &self,
        conn: &Connection,
        first_frame: &Bytes,
    ) -> Result<(SendStream, RecvStream), TransportError> {
        let (mut send, recv) = conn.open_bi().await.map_err(|e| self.failed(e))?;
        send.write_chunk(first_frame.clone())
            .await
            .map_err(map_write_error)?;
        Ok((send, recv))
    }

    /// A failed handshake: our certificate check's refusal as the rustls error, else quinn's.
    fn failed(&self, e: quinn::ConnectionError) -> TransportError {
        if let Some(tls) = self.recorder.take_refusal(self.server_name) {
            return ConnectError::Tls(tls).into();
        }
        match map_connection_error(&e) {
            TransportError::Connect(ConnectError::Quic { source, .. }) => ConnectError::Quic {
                peer: self.addr.to_string(),
                source,
            }
            .into(),
            other => other,
        }
    }
}

impl super::dial::Dial for QuicDial {
    async fn dial(
        &self,
        target: &super::dial::DialTarget,
        first_frame: Bytes,
    ) -> Result<super::dial::Dialed, TransportError> {
        use super::dial::ZeroRtt;
        let addr = target.addr()?;
        let config = client_config_for(&self.client_config, &self.settings, addr, &target.agent_id);
        let connecting = self
            .endpoint
            .connect_with(config, addr, &target.server_name)
            .map_err(|e| ConnectError::Config(format!("cannot connect to {addr}: {e}")))?;
        let attempt = Attempt {
            addr,
            server_name: &target.server_name,
            recorder: &self.recorder,
        };
        let (conn, early) = if target.zero_rtt {
            match connecting.into_0rtt() {
                Ok((conn, accepted)) => (conn, Some(accepted)),
                Err(connecting) => (attempt.handshake(connecting).await?, None),
            }
        } else {
            (attempt.handshake(connecting).await?, None)
        };
        let mut control = attempt.open_control(&conn, &first_frame).await?;
        let mut zero_rtt = ZeroRtt::NotTried;
        if let Some(accepted) = early {
            if accepted.await {
                zero_rtt = ZeroRtt::Accepted;
            } else {
                // The hub discarded the early data: send the first frame again in 1-RTT.
                zero_rtt = ZeroRtt::Rejected;
                control = attempt.open_control(&conn, &first_frame).await?;
            }
        }
        let max_in = Limits::default().max_frame_size;
        let (sender, receiver) = split_connection(
            conn,
            control,
            target.mapping,
            self.settings.datagrams,
            max_in,
        );
        sender.keep_sent_streams();
        receiver.set_max_unread_bytes(self.settings.max_unread_bytes);
        Ok(super::dial::Dialed {
            sender: super::any::AnySender::Quic(sender),
            receiver: super::any::AnyReceiver::Quic(receiver),
            zero_rtt,
            socket_buffers: self.socket_buffers,
        })
    }
}
