//! The WebSocket transport: agentwire frames as binary WebSocket messages.
//!
//! # Mapping
//!
//! * **Endpoint.** The hub upgrades HTTP/1.1 requests for the path [`WS_PATH`]
//!   (`/agentwire/v1`); a request for any other path is answered with HTTP 404 and no upgrade.
//!   `wss://` is TLS 1.3 (tokio-rustls) with ALPN `http/1.1` ([`ALPN_HTTP11`]); `ws://` is
//!   plain TCP, meant for local use. The client sends `Host: host:port`.
//! * **Frames.** Every agentwire frame, length prefix included and exactly as
//!   [`FrameSender::send_frame`] receives it, travels as one binary WebSocket message. The
//!   receiver decodes each message with `FrameDecoder::decode_one(message, current max)`:
//!   a message that is not exactly one frame (trailing bytes, truncated, larger than the
//!   agreed maximum) is a [`TransportError::Frame`] and closes the connection with
//!   `frame-too-large` or `malformed-frame`. Text messages are a protocol error (closed with
//!   `malformed-frame`). The WebSocket library itself refuses messages and WebSocket frames
//!   larger than the default agentwire limit plus the 4-byte prefix.
//! * **Priorities.** [`SendClass`] is not used on the wire: the hub's and the agent's send
//!   queues honour priorities; heartbeat frames go as ordinary binary messages.
//! * **Liveness.** Each side sends a WebSocket Ping every [`WsOptions::ping_interval`]
//!   (default [`DEFAULT_PING_INTERVAL`], 10 s; pings are answered automatically) and ends
//!   the connection with [`TransportError::Timeout`] (sending close code 4007,
//!   `liveness-timeout`) if nothing at all (Pong or any other message) arrives within
//!   [`WsOptions::pong_timeout`] (default [`DEFAULT_PONG_TIMEOUT`], 30 s). The round trip of
//!   the last Ping/Pong is reported as `rtt_us`.
//! * **Close.** `close(code, reason)` sends a WebSocket Close frame with close code
//!   `4000 + code` (the private range, see [`CLOSE_CODE_BASE`]) and the reason truncated to
//!   123 bytes, waits briefly for the peer's Close, then drops the connection. A receiver
//!   maps a close code in `4000..=4999` back to `ErrorCode::from_code(code - 4000)` and
//!   returns [`TransportError::Closed`] with it; a Close with code 1000 or 4000 (`normal`),
//!   or without a code, makes `recv_frame` return `Ok(None)`. Other close codes give
//!   `Closed { code: None, .. }`. `closed()` resolves when either side closed, the liveness
//!   timeout fired or the stream failed. Dropping every handle of a connection closes it
//!   with 4000.
//!
//! This module owns that mapping only; it must not route or interpret envelopes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use agentwire_proto::{ErrorCode, FrameDecoder, FrameError, Limits, RawFrame};
use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Mutex};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{self, StatusCode};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use super::stream::ByteStream;
use super::{
    check_outgoing, ConnectError, ConnectionStats, FrameReceiver, FrameSender, SendClass,
    TransportError, TransportKind,
};

/// The HTTP path the hub upgrades.
pub const WS_PATH: &str = "/agentwire/v1";

/// The ALPN protocol `wss://` negotiates (the upgrade is an HTTP/1.1 request).
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// Longest close reason a WebSocket Close frame carries, bytes.
const MAX_CLOSE_REASON: usize = 123;

/// How long closing waits for the sink and for the peer's Close reply.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Decoded frames buffered between the reading task and [`WsReceiver`].
const CHANNEL_CAPACITY: usize = 32;

pub use crate::settings::{WsOptions, DEFAULT_PING_INTERVAL, DEFAULT_PONG_TIMEOUT};

/// WebSocket close code of `ErrorCode::Normal`; agentwire code `n` is `CLOSE_CODE_BASE + n`.
pub const CLOSE_CODE_BASE: u16 = 4000;

type Io = Box<dyn ByteStream>;
type WsStream = WebSocketStream<Io>;
type WsSink = SplitSink<WsStream, Message>;
type WsSource = SplitStream<WsStream>;

/// How the connection ended, and the Close frame still to send for it.
#[derive(Clone)]
struct Ending {
    why: TransportError,
    close: Option<CloseFrame>,
}

/// Shared by the handles and the background tasks of one connection.
struct Inner {
    remote: Option<SocketAddr>,
    state: watch::Sender<Option<Ending>>,
    sink: Mutex<Option<WsSink>>,
    peer_max: AtomicU32,
    max_frame: AtomicU32,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    rtt_us: AtomicU64,
    /// The last Ping sent: its sequence number and when.
    ping: StdMutex<Option<(u64, Instant)>>,
}

impl Inner {
    /// Records the end of the connection (the first reason wins); the reading task then
    /// sends `close`, if any, and drops the connection.
    fn end(&self, why: TransportError, close: Option<CloseFrame>) {
        self.state.send_if_modified(|state| {
            if state.is_none() {
                *state = Some(Ending { why, close });
                true
            } else {
                false
            }
        });
    }

    fn ended(&self) -> Option<TransportError> {
        self.state.borrow().as_ref().map(|e| e.why.clone())
    }
}

/// Resolves with the reason once the connection has ended.
async fn wait_end(rx: &mut watch::Receiver<Option<Ending>>) -> TransportError {
    loop {
        let why = rx.borrow_and_update().as_ref().map(|e| e.why.clone());
        if let Some(why) = why {
            return why;
        }
        if rx.changed().await.is_err() {
            return closed_locally();
        }
    }
}

/// Ends the connection when the last user handle (sender clones and receiver) is dropped.
struct Handles {
    inner: Arc<Inner>,
}

impl Drop for Handles {
    fn drop(&mut self) {
        self.inner.end(
            closed_locally(),
            Some(close_frame(ErrorCode::Normal, "connection dropped")),
        );
    }
}

fn closed_locally() -> TransportError {
    TransportError::Closed {
        code: Some(ErrorCode::Normal),
        reason: "closed locally".into(),
    }
}

/// The WebSocket Close frame for an agentwire code.
fn close_frame(code: ErrorCode, reason: &str) -> CloseFrame {
    let number = u16::try_from(code.code()).unwrap_or(999);
    CloseFrame {
        code: CloseCode::from(CLOSE_CODE_BASE.saturating_add(number)),
        reason: truncate_reason(reason).into(),
    }
}

fn truncate_reason(reason: &str) -> String {
    let mut end = reason.len().min(MAX_CLOSE_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason.get(..end).unwrap_or_default().to_string()
}

/// What a Close frame from the peer means.
fn peer_close(frame: Option<&CloseFrame>) -> TransportError {
    let Some(frame) = frame else {
        return TransportError::Closed {
            code: Some(ErrorCode::Normal),
            reason: "closed by peer".into(),
        };
    };
    let number = u16::from(frame.code);
    let text = frame.reason.as_str();
    let code = match number {
        1000 => Some(ErrorCode::Normal),
        4000..=4999 => ErrorCode::from_code(u32::from(number - CLOSE_CODE_BASE)),
        _ => None,
    };
    let label = match code {
        Some(c) => c.name().to_string(),
        None => format!("WebSocket close code {number}"),
    };
    TransportError::Closed {
        code,
        reason: format!("closed by peer: {label} {text}")
            .trim_end()
            .to_owned(),
    }
}

/// A read error: why the connection ends, and the Close frame to send for it.
fn map_read_error(e: WsError) -> (TransportError, Option<CloseFrame>) {
    match e {
        WsError::Capacity(CapacityError::MessageTooLong { size, max_size }) => {
            let err = FrameError::TooLarge {
                len: u32::try_from(size.saturating_sub(agentwire_proto::FRAME_HEADER_LEN))
                    .unwrap_or(u32::MAX),
                max: u32::try_from(max_size.saturating_sub(agentwire_proto::FRAME_HEADER_LEN))
                    .unwrap_or(u32::MAX),
            };
            let close = close_frame(err.close_code(), &err.to_string());
            (TransportError::Frame(err), Some(close))
        }
        WsError::ConnectionClosed
        | WsError::AlreadyClosed
        | WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => (
            TransportError::Closed {
                code: None,
                reason: "the peer closed the connection without a WebSocket close".into(),
            },
            None,
        ),
        WsError::Protocol(p) => {
            let reason = format!("WebSocket protocol error from the peer: {p}");
            let close = close_frame(ErrorCode::ProtocolViolation, &reason);
            (
                TransportError::Closed {
                    code: Some(ErrorCode::ProtocolViolation),
                    reason,
                },
                Some(close),
            )
        }
        WsError::Utf8(_) => malformed("the peer sent a WebSocket text message that is not UTF-8"),
        other => (TransportError::io("WebSocket read failed", other), None),
    }
}

fn malformed(reason: &str) -> (TransportError, Option<CloseFrame>) {
    (
        TransportError::Closed {
            code: Some(ErrorCode::MalformedFrame),
            reason: reason.to_string(),
        },
        Some(close_frame(ErrorCode::MalformedFrame, reason)),
    )
}

/// A deadline `d` from now, saturating far in the future.
fn deadline_after(d: Duration) -> Instant {
    later(Instant::now(), d)
}

/// `d` after `t`, saturating a year after `t`.
fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .unwrap_or_else(|| t + Duration::from_secs(86_400 * 365))
}

/// How much tungstenite asks of the stream per read. It zero-fills that much of its buffer
/// before every read (5 % of a hub's CPU at 100 × 10 KiB with its default of 128 KiB), and a
/// read from TLS returns at most a few 16 KiB records anyway.
const READ_BUFFER: usize = 32 * 1024;

/// The tungstenite limits: the default agentwire frame limit plus the length prefix.
fn ws_config() -> WebSocketConfig {
    let max = Limits::default().max_frame_size as usize + agentwire_proto::FRAME_HEADER_LEN;
    WebSocketConfig::default()
        .max_message_size(Some(max))
        .max_frame_size(Some(max))
        .read_buffer_size(READ_BUFFER)
}

/// Sending half of a WebSocket connection.
#[derive(Clone)]
pub struct WsSender {
    inner: Arc<Inner>,
    _handles: Arc<Handles>,
}

impl WsSender {
    /// Writes `frame` (if any) into tungstenite's buffer, and the buffer out when `flush`.
    async fn write(&self, frame: Option<Bytes>, flush: bool) -> Result<(), TransportError> {
        if let Some(f) = &frame {
            check_outgoing(f, self.inner.peer_max.load(Ordering::Relaxed))?;
        }
        if let Some(why) = self.inner.ended() {
            return Err(why);
        }
        let len = frame.as_ref().map_or(0, Bytes::len) as u64;
        let inner = &self.inner;
        let write = async {
            let mut guard = inner.sink.lock().await;
            let Some(sink) = guard.as_mut() else {
                return Err(inner.ended().unwrap_or_else(closed_locally));
            };
            let written = match (frame, flush) {
                (Some(f), true) => sink.send(Message::Binary(f)).await,
                (Some(f), false) => sink.feed(Message::Binary(f)).await,
                (None, _) => sink.flush().await,
            };
            written.map_err(|e| TransportError::io("WebSocket write failed", e))
        };
        // The write goes first: most complete at once, and then the watch for the end is never
        // polled (so never registered) for them. `wait_end` looks at the current state before it
        // waits, so an end that came before it is seen.
        let result = tokio::select! {
            biased;
            r = write => r,
            why = async {
                let mut state = inner.state.subscribe();
                wait_end(&mut state).await
            } => Err(why),
        };
        match result {
            Ok(()) => {
                inner.bytes_sent.fetch_add(len, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                if let Some(why) = inner.ended() {
                    return Err(why);
                }
                inner.end(e.clone(), None);
                Err(e)
            }
        }
    }
}

impl FrameSender for WsSender {
    async fn send_frame(&self, frame: Bytes, _class: SendClass) -> Result<(), TransportError> {
        self.write(Some(frame), true).await
    }

    async fn feed_frame(&self, frame: Bytes, _class: SendClass) -> Result<(), TransportError> {
        self.write(Some(frame), false).await
    }

    async fn flush(&self) -> Result<(), TransportError> {
        self.write(None, true).await
    }

    fn set_peer_max_frame_size(&self, max: u32) {
        self.inner.peer_max.store(max, Ordering::Relaxed);
    }

    fn close(&self, code: ErrorCode, reason: &str) {
        self.inner.end(
            TransportError::Closed {
                code: Some(code),
                reason: format!("closed locally: {} {reason}", code.name())
                    .trim_end()
                    .to_owned(),
            },
            Some(close_frame(code, reason)),
        );
    }

    async fn closed(&self) -> TransportError {
        let mut state = self.inner.state.subscribe();
        wait_end(&mut state).await
    }

    fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            transport: TransportKind::WebSocket.name(),
            remote_addr: self.inner.remote,
            rtt_us: self.inner.rtt_us.load(Ordering::Relaxed),
            bytes_sent: self.inner.bytes_sent.load(Ordering::Relaxed),
            bytes_received: self.inner.bytes_received.load(Ordering::Relaxed),
            ..ConnectionStats::default()
        }
    }

    fn kind(&self) -> TransportKind {
        TransportKind::WebSocket
    }
}

/// Receiving half of a WebSocket connection.
pub struct WsReceiver {
    rx: mpsc::Receiver<RawFrame>,
    inner: Arc<Inner>,
    _handles: Arc<Handles>,
    done: bool,
}

impl FrameReceiver for WsReceiver {
    async fn recv_frame(&mut self) -> Result<Option<RawFrame>, TransportError> {
        if self.done {
            return Ok(None);
        }
        if let Some(frame) = self.rx.recv().await {
            return Ok(Some(frame));
        }
        self.done = true;
        match self.inner.ended() {
            None
            | Some(TransportError::Closed {
                code: Some(ErrorCode::Normal),
                ..
            }) => Ok(None),
            Some(other) => Err(other),
        }
    }

    fn set_max_frame_size(&mut self, max: u32) {
        self.inner.max_frame.store(max, Ordering::Relaxed);
    }
}

/// Server side: takes an accepted TCP stream, does TLS if `tls` is Some, then the WebSocket
/// upgrade (only for [`WS_PATH`]; other paths get HTTP 404).
pub async fn accept(
    tcp: TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    options: WsOptions,
) -> Result<(WsSender, WsReceiver), TransportError> {
    let remote = tcp.peer_addr().ok();
    let _ = tcp.set_nodelay(true);
    let io: Io = match tls {
        Some(acceptor) => Box::new(
            acceptor
                .accept(super::read_ahead::ReadAhead::new(tcp))
                .await
                .map_err(|e| ConnectError::tls_handshake("TLS handshake failed", e))?,
        ),
        None => Box::new(tcp),
    };
    accept_io(io, remote, options).await
}

/// Server side over a stream that is already set up (e.g. TLS accepted by a listener that
/// chose WebSocket by ALPN): the WebSocket upgrade only.
pub async fn accept_io<T>(
    io: T,
    remote: Option<SocketAddr>,
    options: WsOptions,
) -> Result<(WsSender, WsReceiver), TransportError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io: Io = Box::new(io);
    let refused = Arc::new(StdMutex::new(None::<Refusal>));
    let seen = refused.clone();
    let origins = options.origins.clone();
    // The signature is tungstenite's `Callback`; its error type is an HTTP response.
    #[allow(clippy::result_large_err)]
    let callback = move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let refusal = if req.uri().path() != WS_PATH {
            Refusal::Path(req.uri().path().to_string())
        } else {
            let origin = req
                .headers()
                .get(http::header::ORIGIN)
                .map(|o| String::from_utf8_lossy(o.as_bytes()).into_owned());
            match &origins {
                Some(p) if !p.allows(origin.as_deref()) => {
                    Refusal::Origin(origin.unwrap_or_default())
                }
                _ => return Ok(resp),
            }
        };
        let (status, body) = match &refusal {
            Refusal::Path(_) => (
                StatusCode::NOT_FOUND,
                format!("agentwire speaks WebSocket at {WS_PATH} only\n"),
            ),
            Refusal::Origin(_) => (
                StatusCode::FORBIDDEN,
                "this page may not reach the hub\n".to_string(),
            ),
        };
        if let Ok(mut seen) = seen.lock() {
            *seen = Some(refusal);
        }
        let mut response = ErrorResponse::new(Some(body));
        *response.status_mut() = status;
        Err(response)
    };
    let ws = tokio_tungstenite::accept_hdr_async_with_config(io, callback, Some(ws_config()))
        .await
        .map_err(|e| {
            let refusal = refused.lock().ok().and_then(|p| p.clone());
            match (refusal, e) {
                (Some(Refusal::Path(path)), e) => ConnectError::refused(
                    format!(
                        "WebSocket upgrade refused with HTTP 404: the client asked for path \
                         {path:?}, agentwire is at {WS_PATH}"
                    ),
                    e,
                ),
                (Some(Refusal::Origin(origin)), e) => ConnectError::refused(
                    format!(
                        "WebSocket upgrade refused with HTTP 403: a page from {origin:?}, \
                         which --allow-origin does not list"
                    ),
                    e,
                ),
                (None, WsError::Io(io)) => {
                    ConnectError::tls_handshake("WebSocket upgrade failed", io)
                }
                (None, e) => ConnectError::refused("WebSocket upgrade failed", e),
            }
        })?;
    // Nothing bigger than a hello until the hub has read the hello: the read loop starts
    // now, before the hub holds the receiver.
    Ok(start(ws, remote, options, agentwire_proto::MAX_HELLO_FRAME))
}

/// Why an upgrade was refused.
#[derive(Debug, Clone)]
enum Refusal {
    /// A path other than [`WS_PATH`].
    Path(String),
    /// A page the hub's origin policy does not list.
    Origin(String),
}

/// Client side: connects TCP to `addr`, TLS with `tls` = Some((client_config, server_name))
/// for `wss://`, then upgrades with `Host: host:port` and path [`WS_PATH`].
pub async fn connect(
    addr: SocketAddr,
    host: &str,
    tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls_pki_types::ServerName<'static>,
    )>,
    options: WsOptions,
) -> Result<(WsSender, WsReceiver), TransportError> {
    connect_path(addr, host, WS_PATH, tls, options).await
}

async fn connect_path(
    addr: SocketAddr,
    host: &str,
    path: &str,
    tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls_pki_types::ServerName<'static>,
    )>,
    options: WsOptions,
) -> Result<(WsSender, WsReceiver), TransportError> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| ConnectError::socket(format!("cannot connect to {addr}"), e))?;
    let _ = tcp.set_nodelay(true);
    let (scheme, io): (&str, Io) = match tls {
        Some((config, name)) => {
            let connector = tokio_rustls::TlsConnector::from(config);
            let stream = connector
                .connect(name, super::read_ahead::ReadAhead::new(tcp))
                .await
                .map_err(|e| {
                    ConnectError::tls_handshake(format!("TLS handshake with {addr} failed"), e)
                })?;
            ("wss", Box::new(stream))
        }
        None => ("ws", Box::new(tcp)),
    };
    let host = if host.is_empty() {
        addr.ip().to_string()
    } else {
        host.to_string()
    };
    let authority = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{}", addr.port())
    } else {
        format!("{host}:{}", addr.port())
    };
    let url = format!("{scheme}://{authority}{path}");
    let (ws, _response) =
        tokio_tungstenite::client_async_with_config(url.as_str(), io, Some(ws_config()))
            .await
            .map_err(|e| match e {
                WsError::Http(resp) => {
                    let body = resp
                        .body()
                        .as_deref()
                        .map(|b| {
                            String::from_utf8_lossy(b)
                                .trim()
                                .chars()
                                .take(200)
                                .collect()
                        })
                        .unwrap_or_default();
                    let body: String = body;
                    let status = resp.status();
                    ConnectError::refused(
                        format!(
                            "{addr} refused the WebSocket upgrade for {url}: HTTP {status} {body}"
                        )
                        .trim_end()
                        .to_owned(),
                        WsError::Http(resp),
                    )
                }
                WsError::Io(io) => {
                    ConnectError::tls_handshake(format!("WebSocket upgrade with {addr} failed"), io)
                }
                other => ConnectError::refused(
                    format!("WebSocket upgrade with {addr} failed for {url}"),
                    other,
                ),
            })?;
    Ok(start(
        ws,
        Some(addr),
        options,
        Limits::default().max_frame_size,
    ))
}

/// Splits an upgraded connection into its halves and starts the reading and ping tasks;
/// incoming frames are limited to `max_in` bytes from the first.
fn start(
    ws: WsStream,
    remote: Option<SocketAddr>,
    options: WsOptions,
    max_in: u32,
) -> (WsSender, WsReceiver) {
    let (sink, source) = ws.split();
    let (state, _) = watch::channel(None);
    let max = Limits::default().max_frame_size;
    let inner = Arc::new(Inner {
        remote,
        state,
        sink: Mutex::new(Some(sink)),
        peer_max: AtomicU32::new(max),
        max_frame: AtomicU32::new(max_in),
        bytes_sent: AtomicU64::new(0),
        bytes_received: AtomicU64::new(0),
        rtt_us: AtomicU64::new(0),
        ping: StdMutex::new(None),
    });
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    tokio::spawn(read_loop(inner.clone(), source, tx, options.pong_timeout));
    if !options.ping_interval.is_zero() {
        tokio::spawn(ping_loop(inner.clone(), options.ping_interval));
    }
    let handles = Arc::new(Handles {
        inner: inner.clone(),
    });
    (
        WsSender {
            inner: inner.clone(),
            _handles: handles.clone(),
        },
        WsReceiver {
            rx,
            inner,
            _handles: handles,
            done: false,
        },
    )
}

/// Takes the sink out of the connection, sends `close` on it if given, and drops it.
async fn shut_sink(inner: &Inner, close: Option<CloseFrame>) {
    let sink = match tokio::time::timeout(CLOSE_GRACE, inner.sink.lock()).await {
        Ok(mut guard) => guard.take(),
        Err(_) => None,
    };
    if let (Some(mut sink), Some(frame)) = (sink, close) {
        let _ = tokio::time::timeout(CLOSE_GRACE, sink.send(Message::Close(Some(frame)))).await;
    }
}

/// Owns the reading half: decodes messages into frames, watches liveness, and once the
/// connection has ended sends the Close frame and drains until the peer's Close (bounded by
/// [`CLOSE_GRACE`]).
async fn read_loop(
    inner: Arc<Inner>,
    mut source: WsSource,
    tx: mpsc::Sender<RawFrame>,
    pong_timeout: Duration,
) {
    let mut tx = Some(tx);
    let mut state = inner.state.subscribe();
    // The end of the connection (set once: the first reason wins). One future for the whole
    // loop, so waiting for a message does not register and drop a watcher every time. Fused:
    // once it has resolved it stays pending, and the loop's top sees the end.
    let ended = state.changed().fuse();
    tokio::pin!(ended);
    let mut grace: Option<Instant> = None;
    // Liveness: one timer, moved on only when it fires, rather than armed anew per message.
    let mut last_heard = Instant::now();
    let timer = tokio::time::sleep_until(later(last_heard, pong_timeout));
    tokio::pin!(timer);
    loop {
        if grace.is_none() {
            let close = inner.state.borrow().as_ref().map(|e| e.close.clone());
            if let Some(close) = close {
                tx = None;
                shut_sink(&inner, close).await;
                let until = deadline_after(CLOSE_GRACE);
                grace = Some(until);
                timer.as_mut().reset(until);
            }
        }
        let next = tokio::select! {
            biased;
            _ = &mut ended, if grace.is_none() => continue,
            // Before the timer: bytes that wait in the socket count as heard even if this task
            // was held up (by a full channel to the receiver) past the deadline.
            next = source.next() => next,
            () = &mut timer => {
                if grace.is_some() {
                    break;
                }
                let due = later(last_heard, pong_timeout);
                if due > Instant::now() {
                    timer.as_mut().reset(due);
                    continue;
                }
                let reason = format!("no message from the peer within {pong_timeout:?}");
                inner.end(
                    TransportError::Timeout(pong_timeout),
                    Some(close_frame(ErrorCode::LivenessTimeout, &reason)),
                );
                continue;
            }
        };
        let message = match next {
            Some(Ok(message)) => message,
            _ if grace.is_some() => break,
            None => {
                inner.end(
                    TransportError::Closed {
                        code: None,
                        reason: "the peer closed the connection without a WebSocket close".into(),
                    },
                    None,
                );
                continue;
            }
            Some(Err(e)) => {
                let (why, close) = map_read_error(e);
                inner.end(why, close);
                continue;
            }
        };
        if grace.is_some() {
            continue; // draining until the peer's Close
        }
        last_heard = Instant::now();
        match message {
            Message::Binary(bytes) => {
                inner
                    .bytes_received
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                match FrameDecoder::decode_one(bytes, inner.max_frame.load(Ordering::Relaxed)) {
                    Ok(frame) => {
                        if let Some(sender) = &tx {
                            let delivered = tokio::select! {
                                biased;
                                r = sender.send(frame) => r.is_ok(),
                                // Ended meanwhile: the loop's top notices.
                                _ = &mut ended => true,
                            };
                            if !delivered {
                                // The receiver is gone: keep reading for liveness and Close.
                                tx = None;
                            }
                        }
                    }
                    Err(e) => {
                        let close = close_frame(e.close_code(), &e.to_string());
                        inner.end(TransportError::Frame(e), Some(close));
                    }
                }
            }
            Message::Text(_) => {
                let (why, close) = malformed(
                    "the peer sent a WebSocket text message; agentwire frames travel as binary messages",
                );
                inner.end(why, close);
            }
            Message::Pong(payload) => {
                if let Ok(seq) = <[u8; 8]>::try_from(payload.as_ref()) {
                    let seq = u64::from_be_bytes(seq);
                    let sent = inner.ping.lock().ok().and_then(|p| *p);
                    if let Some((expected, at)) = sent {
                        if expected == seq {
                            let rtt = u64::try_from(at.elapsed().as_micros()).unwrap_or(u64::MAX);
                            inner.rtt_us.store(rtt.max(1), Ordering::Relaxed);
                        }
                    }
                }
            }
            Message::Close(frame) => inner.end(peer_close(frame.as_ref()), None),
            // Pings are answered by tungstenite; raw frames are never returned by reads.
            Message::Ping(_) | Message::Frame(_) => {}
        }
    }
    inner.end(
        TransportError::Closed {
            code: None,
            reason: "connection ended".into(),
        },
        None,
    );
    drop(tx);
    if let Ok(mut guard) = inner.sink.try_lock() {
        guard.take();
    }
}

/// Sends a Ping every `interval` until the connection ends.
async fn ping_loop(inner: Arc<Inner>, interval: Duration) {
    let mut state = inner.state.subscribe();
    let mut ticker = tokio::time::interval_at(deadline_after(interval), interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq: u64 = 0;
    loop {
        tokio::select! {
            _ = wait_end(&mut state) => return,
            _ = ticker.tick() => {}
        }
        seq = seq.wrapping_add(1);
        let payload = Bytes::copy_from_slice(&seq.to_be_bytes());
        let ping = async {
            let mut guard = inner.sink.lock().await;
            let Some(sink) = guard.as_mut() else {
                return Ok(());
            };
            if let Ok(mut last) = inner.ping.lock() {
                *last = Some((seq, Instant::now()));
            }
            sink.send(Message::Ping(payload)).await
        };
        let sent = tokio::select! {
            _ = wait_end(&mut state) => return,
            r = ping => r,
        };
        if let Err(e) = sent {
            inner.end(TransportError::io("WebSocket ping failed", e), None);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_proto::{Codec, Frame};
    use agentwire_tls::{client_config, generate, server_config, HubIdentity, HubTrust};
    use rustls_pki_types::ServerName;
    use tokio::net::TcpListener;

    const WAIT: Duration = Duration::from_secs(10);

    type Pair = (WsSender, WsReceiver);

    fn fast() -> WsOptions {
        WsOptions::default()
    }

    fn subscribe(topic: &str) -> Bytes {
        Frame::Subscribe(topic.into())
            .encode(Codec::MsgPack)
            .unwrap()
    }

    fn topic(frame: &RawFrame) -> String {
        match Frame::decode(frame, Codec::MsgPack).unwrap() {
            Frame::Subscribe(t) => t,
            other => panic!("unexpected frame {other:?}"),
        }
    }

    async fn recv(rx: &mut WsReceiver) -> Result<Option<RawFrame>, TransportError> {
        tokio::time::timeout(WAIT, rx.recv_frame())
            .await
            .expect("recv_frame timed out")
    }

    struct Tls {
        acceptor: tokio_rustls::TlsAcceptor,
        client: Arc<rustls::ClientConfig>,
    }

    fn tls_setup(trust_other_ca: bool) -> Tls {
        let bundle = generate(&["localhost".into(), "127.0.0.1".into()]).unwrap();
        let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
        let server = server_config(&identity, &[ALPN_HTTP11]).unwrap();
        let ca = if trust_other_ca {
            generate(&["localhost".into()]).unwrap().ca_cert_pem
        } else {
            bundle.ca_cert_pem
        };
        let client = client_config(&HubTrust::ca_pem(&ca).unwrap(), &[ALPN_HTTP11]).unwrap();
        Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            client: Arc::new(client),
        }
    }

    /// Starts a one-connection server; returns its address and the accept result.
    async fn serve(
        tls: Option<tokio_rustls::TlsAcceptor>,
        options: WsOptions,
    ) -> (
        SocketAddr,
        tokio::task::JoinHandle<Result<Pair, TransportError>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            accept(tcp, tls, options).await
        });
        (addr, task)
    }

    async fn ws_pair() -> (Pair, Pair) {
        let (addr, server) = serve(None, fast()).await;
        let client = connect(addr, "127.0.0.1", None, fast()).await.unwrap();
        let server = server.await.unwrap().unwrap();
        (client, server)
    }

    async fn exchange(client: Pair, server: Pair) {
        let (c_tx, mut c_rx) = client;
        let (s_tx, mut s_rx) = server;
        const N: usize = 100;
        let c_send = c_tx.clone();
        let sending = tokio::spawn(async move {
            for i in 0..N {
                c_send
                    .send_frame(subscribe(&format!("c{i}")), SendClass::Control)
                    .await
                    .unwrap();
            }
        });
        for i in 0..N {
            s_tx.send_frame(subscribe(&format!("s{i}")), SendClass::Heartbeat)
                .await
                .unwrap();
        }
        for i in 0..N {
            let f = recv(&mut s_rx).await.unwrap().unwrap();
            assert_eq!(topic(&f), format!("c{i}"));
            let f = recv(&mut c_rx).await.unwrap().unwrap();
            assert_eq!(topic(&f), format!("s{i}"));
        }
        sending.await.unwrap();
        let stats = c_tx.stats();
        assert_eq!(stats.transport, "websocket");
        assert_eq!(c_tx.kind(), TransportKind::WebSocket);
        assert!(stats.remote_addr.is_some());
        assert!(stats.bytes_sent > 0 && stats.bytes_received > 0);
        assert_eq!(stats.bytes_sent, s_tx.stats().bytes_received);
    }

    #[tokio::test]
    async fn ws_round_trip_both_ways_in_order() {
        let (client, server) = ws_pair().await;
        exchange(client, server).await;
    }

    #[tokio::test]
    async fn wss_round_trip_with_trusted_ca() {
        let tls = tls_setup(false);
        let (addr, server) = serve(Some(tls.acceptor), fast()).await;
        let name = ServerName::try_from("localhost").unwrap();
        let client = connect(addr, "localhost", Some((tls.client, name)), fast())
            .await
            .unwrap();
        let server = server.await.unwrap().unwrap();
        exchange(client, server).await;
    }

    #[tokio::test]
    async fn wss_with_wrong_ca_fails_with_a_clear_sentence() {
        let tls = tls_setup(true);
        let (addr, server) = serve(Some(tls.acceptor), fast()).await;
        let name = ServerName::try_from("localhost").unwrap();
        let err = connect(addr, "localhost", Some((tls.client, name)), fast())
            .await
            .err()
            .expect("connect must fail");
        assert!(
            err.to_string().contains("not signed by the trusted CA"),
            "{err}"
        );
        assert!(server.await.unwrap().is_err());
    }

    #[tokio::test]
    async fn wrong_path_is_refused_with_404() {
        let (addr, server) = serve(None, fast()).await;
        let err = connect_path(addr, "127.0.0.1", "/elsewhere", None, fast())
            .await
            .err()
            .expect("connect must fail");
        assert!(matches!(err, TransportError::Connect(_)), "{err:?}");
        assert!(err.to_string().contains("404"), "{err}");
        let server_err = server.await.unwrap().err().expect("accept must fail");
        assert!(
            server_err.to_string().contains("/elsewhere"),
            "{server_err}"
        );
    }

    /// A page the hub's policy does not list is answered 403 and gets no connection; a listed
    /// page, and a client that names no page, upgrade.
    #[tokio::test]
    async fn a_page_the_origin_policy_does_not_list_is_refused_with_403() {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let policy = crate::origin::OriginPolicy::new(["https://app.example.com"]).unwrap();
        let options = WsOptions {
            origins: Some(Arc::new(policy)),
            ..fast()
        };
        let upgrade = |origin: Option<&'static str>| {
            let options = options.clone();
            async move {
                let (addr, server) = serve(None, options).await;
                let mut req = format!("ws://{addr}{WS_PATH}")
                    .into_client_request()
                    .unwrap();
                if let Some(origin) = origin {
                    req.headers_mut()
                        .insert(http::header::ORIGIN, origin.parse().unwrap());
                }
                let tcp = TcpStream::connect(addr).await.unwrap();
                let client = tokio_tungstenite::client_async(req, tcp).await;
                (client.map(|_| ()), server.await.unwrap().map(|_| ()))
            }
        };
        let (client, server) = upgrade(Some("https://evil.example.net")).await;
        let err = client.expect_err("the upgrade is refused");
        assert!(err.to_string().contains("403"), "{err}");
        let server = server.expect_err("no connection");
        assert!(server.to_string().contains("evil.example.net"), "{server}");
        let (client, server) = upgrade(Some("https://app.example.com")).await;
        assert!(client.is_ok() && server.is_ok());
        let (client, server) = upgrade(None).await;
        assert!(client.is_ok() && server.is_ok());
    }

    #[tokio::test]
    async fn close_code_reaches_the_peer() {
        let ((c_tx, mut c_rx), (s_tx, mut s_rx)) = ws_pair().await;
        c_tx.close(ErrorCode::LivenessTimeout, "x");
        match recv(&mut s_rx).await {
            Err(TransportError::Closed {
                code: Some(ErrorCode::LivenessTimeout),
                reason,
            }) => assert!(reason.contains('x'), "{reason}"),
            other => panic!("unexpected {other:?}"),
        }
        let why = tokio::time::timeout(WAIT, s_tx.closed()).await.unwrap();
        assert!(matches!(
            why,
            TransportError::Closed {
                code: Some(ErrorCode::LivenessTimeout),
                ..
            }
        ));
        tokio::time::timeout(WAIT, c_tx.closed()).await.unwrap();
        assert!(c_rx.recv_frame().await.is_err());
        assert!(c_tx
            .send_frame(subscribe("late"), SendClass::Control)
            .await
            .is_err());
    }

    #[tokio::test]
    async fn normal_close_and_dropping_end_the_peer_stream_cleanly() {
        let ((c_tx, mut c_rx), (_s_tx, mut s_rx)) = ws_pair().await;
        c_tx.close(ErrorCode::Normal, "bye");
        assert!(recv(&mut s_rx).await.unwrap().is_none());
        assert!(recv(&mut c_rx).await.unwrap().is_none());

        let ((c_tx, c_rx), (s_tx, mut s_rx)) = ws_pair().await;
        drop(c_tx);
        drop(c_rx);
        assert!(recv(&mut s_rx).await.unwrap().is_none());
        tokio::time::timeout(WAIT, s_tx.closed()).await.unwrap();
    }

    /// A raw tokio-tungstenite client against `accept`.
    async fn raw_client() -> (WebSocketStream<TcpStream>, Pair) {
        let (addr, server) = serve(None, fast()).await;
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (raw, _) = tokio_tungstenite::client_async(
            format!("ws://127.0.0.1:{}{WS_PATH}", addr.port()),
            tcp,
        )
        .await
        .unwrap();
        (raw, server.await.unwrap().unwrap())
    }

    async fn close_code_seen_by(raw: &mut WebSocketStream<TcpStream>) -> Option<u16> {
        tokio::time::timeout(WAIT, async {
            while let Some(Ok(m)) = raw.next().await {
                if let Message::Close(frame) = m {
                    return frame.map(|f| u16::from(f.code));
                }
            }
            None
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn text_message_is_an_error() {
        let (mut raw, (_tx, mut rx)) = raw_client().await;
        raw.send(Message::text("hello")).await.unwrap();
        match recv(&mut rx).await {
            Err(TransportError::Closed {
                code: Some(ErrorCode::MalformedFrame),
                ..
            }) => {}
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            close_code_seen_by(&mut raw).await,
            Some(CLOSE_CODE_BASE + ErrorCode::MalformedFrame.code() as u16)
        );
    }

    #[tokio::test]
    async fn garbage_binary_message_is_a_frame_error() {
        let (mut raw, (_tx, mut rx)) = raw_client().await;
        // A good frame first, then one announcing 9 bytes but carrying 1.
        raw.send(Message::binary(subscribe("ok"))).await.unwrap();
        raw.send(Message::binary(vec![0u8, 0, 0, 9, 0x20]))
            .await
            .unwrap();
        assert_eq!(topic(&recv(&mut rx).await.unwrap().unwrap()), "ok");
        match recv(&mut rx).await {
            Err(TransportError::Frame(FrameError::Truncated { .. })) => {}
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            close_code_seen_by(&mut raw).await,
            Some(CLOSE_CODE_BASE + ErrorCode::MalformedFrame.code() as u16)
        );

        let (mut raw, (_tx, mut rx)) = raw_client().await;
        let mut two = subscribe("a").to_vec();
        two.extend_from_slice(&subscribe("b"));
        raw.send(Message::binary(two)).await.unwrap();
        assert!(matches!(
            recv(&mut rx).await,
            Err(TransportError::Frame(FrameError::Trailing(_)))
        ));
    }

    /// The read loop starts before the hub holds the receiver: a first frame over a hello's
    /// size is refused even when the whole of it arrived before the hub set any limit.
    #[tokio::test]
    async fn a_first_frame_over_the_hello_limit_is_refused_before_the_hub_reads() {
        let (mut raw, (_tx, mut rx)) = raw_client().await;
        let mut first = vec![0u8, 1, 0x86, 0xa1, 0x01];
        first.resize(100_005, b'x');
        raw.send(Message::binary(first)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        match recv(&mut rx).await {
            Err(TransportError::Frame(FrameError::TooLarge { len, max })) => {
                assert_eq!(len, 100_001);
                assert_eq!(max, agentwire_proto::MAX_HELLO_FRAME);
            }
            Ok(Some(f)) => panic!("a {}-byte first frame was read whole", f.payload.len()),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn oversized_frame_is_refused() {
        let ((c_tx, _c_rx), (_s_tx, mut s_rx)) = ws_pair().await;
        let big = subscribe(&"x".repeat(200));
        // The sender refuses what the peer said it does not accept.
        c_tx.set_peer_max_frame_size(64);
        assert!(matches!(
            c_tx.send_frame(big.clone(), SendClass::Control).await,
            Err(TransportError::TooLarge { max: 64, .. })
        ));
        // The receiver refuses a frame announcing more than its limit.
        c_tx.set_peer_max_frame_size(1 << 20);
        s_rx.set_max_frame_size(64);
        c_tx.send_frame(big, SendClass::Control).await.unwrap();
        match recv(&mut s_rx).await {
            Err(TransportError::Frame(FrameError::TooLarge { max: 64, .. })) => {}
            other => panic!("unexpected {other:?}"),
        }
        let why = tokio::time::timeout(WAIT, c_tx.closed()).await.unwrap();
        assert!(matches!(
            why,
            TransportError::Closed {
                code: Some(ErrorCode::FrameTooLarge),
                ..
            }
        ));
    }

    #[tokio::test]
    async fn pong_timeout_closes_a_silent_peer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let peer = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
            // Never poll again; keep the socket open until the test ends.
            let _ = stop_rx.await;
            drop(ws);
        });
        let options = WsOptions {
            ping_interval: Duration::from_millis(50),
            pong_timeout: Duration::from_millis(200),
            ..WsOptions::default()
        };
        let (tx, mut rx) = connect(addr, "127.0.0.1", None, options).await.unwrap();
        let why = tokio::time::timeout(Duration::from_secs(5), tx.closed())
            .await
            .expect("closed() must resolve");
        assert!(matches!(why, TransportError::Timeout(_)), "{why:?}");
        assert!(matches!(
            recv(&mut rx).await,
            Err(TransportError::Timeout(_))
        ));
        let _ = stop_tx.send(());
        peer.await.unwrap();
    }

    /// A receiver that stops taking frames for longer than the liveness timeout holds up the
    /// reading task; a peer that kept talking meanwhile must not be timed out for it.
    #[tokio::test]
    async fn a_slow_receiver_does_not_time_out_a_talking_peer() {
        let quick = WsOptions {
            ping_interval: Duration::from_millis(50),
            pong_timeout: Duration::from_millis(300),
            ..WsOptions::default()
        };
        let (addr, server) = serve(None, quick.clone()).await;
        let (c_tx, _c_rx) = connect(addr, "127.0.0.1", None, quick).await.unwrap();
        let (_s_tx, mut s_rx) = server.await.unwrap().unwrap();
        let frames = CHANNEL_CAPACITY + 8;
        for i in 0..frames {
            c_tx.send_frame(subscribe(&format!("t{i}")), SendClass::Control)
                .await
                .unwrap();
        }
        // The channel fills and the reading task waits on it, well past the timeout.
        tokio::time::sleep(Duration::from_millis(900)).await;
        for i in 0..frames {
            assert_eq!(
                topic(&recv(&mut s_rx).await.unwrap().unwrap()),
                format!("t{i}")
            );
        }
        // Still alive a few timeouts later: pings kept arriving.
        tokio::time::sleep(Duration::from_millis(600)).await;
        c_tx.send_frame(subscribe("after"), SendClass::Control)
            .await
            .unwrap();
        assert_eq!(topic(&recv(&mut s_rx).await.unwrap().unwrap()), "after");
    }

    #[tokio::test]
    async fn ping_pong_measures_rtt() {
        let (addr, server) = serve(None, fast()).await;
        let options = WsOptions {
            ping_interval: Duration::from_millis(20),
            pong_timeout: Duration::from_secs(30),
            ..WsOptions::default()
        };
        let (tx, _rx) = connect(addr, "127.0.0.1", None, options).await.unwrap();
        let _server = server.await.unwrap().unwrap();
        tokio::time::timeout(WAIT, async {
            while tx.stats().rtt_us == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("a pong must arrive");
    }

    #[test]
    fn close_codes_map_both_ways() {
        for code in ErrorCode::ALL {
            let frame = close_frame(code, "why");
            match peer_close(Some(&frame)) {
                TransportError::Closed { code: got, .. } => assert_eq!(got, Some(code)),
                other => panic!("unexpected {other:?}"),
            }
        }
        let long = "é".repeat(100);
        let frame = close_frame(ErrorCode::Internal, &long);
        assert!(frame.reason.len() <= MAX_CLOSE_REASON);
        let away = CloseFrame {
            code: CloseCode::Away,
            reason: "".into(),
        };
        assert!(matches!(
            peer_close(Some(&away)),
            TransportError::Closed { code: None, .. }
        ));
    }
}
