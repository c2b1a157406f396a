//! WebTransport sessions (HTTP/3 extended CONNECT, RFC 9220) on the hub's QUIC endpoint, for
//! agents in web pages: the session at [`WT_PATH`], the page's Origin checked against an
//! [`OriginPolicy`], then the agent's frames.
//!
//! The HTTP/3 layer (SETTINGS and the CONNECT request, both the draft-02 and the later settings
//! browsers send) is web-transport-quinn's, on the `quinn::Connection` the QUIC listener
//! accepted with ALPN `h3`. Inside the session, frames are mapped as on QUIC
//! ([`split_session`]): the agent's first bidirectional stream is the control stream, every
//! message gets a stream of its own (or a lane per priority), each stream opened with the
//! session's signal ([`signal`]). Heartbeats ride the session's datagrams (after its quarter
//! stream id) when the connection has them, else the control stream. This
//! module owns the session's set-up; it must not run the agentwire handshake (the hub does)
//! or decide credentials.

use std::sync::Arc;

use agentwire_proto::{ErrorCode, Priority};
use bytes::Bytes;
use web_transport_quinn::http::{header, StatusCode};
use web_transport_quinn::proto::ConnectRequest;

pub use super::origin::{OriginPatternError, OriginPolicy};

use super::any::{AnyReceiver, AnySender};
use super::dial::{Dial, DialTarget, Dialed, ZeroRtt};
use super::quic::signal::{self, SessionSignal};
use super::quic::{split_session, QuicDial, QuicReceiver, QuicSender};
use super::quic_budget::Admission;
use super::{
    ConnectError, ConnectionStats, FrameSender, ReplySlot, SendClass, TransportError, TransportKind,
};
use crate::settings::{QuicSettings, StreamMapping};

/// The path of the agentwire session; a CONNECT to any other path is answered 404.
pub const WT_PATH: &str = "/agentwire";

/// The hub's WebTransport settings.
#[derive(Debug, Clone, Default)]
pub struct WtOptions {
    /// The pages that may open a session.
    pub origins: OriginPolicy,
}

/// The sending half of a WebTransport session: agentwire's QUIC mapping inside the session
/// (a control stream, a stream per message or per lane, each opened with the session's
/// signal), holding the session for as long as it lives.
#[derive(Clone)]
pub struct WtSender {
    inner: QuicSender,
    /// Held for the session's life: its task reads the CONNECT stream and ends the
    /// connection with it.
    _session: Arc<web_transport_quinn::Session>,
}

/// The receiving half of a WebTransport session.
pub type WtReceiver = QuicReceiver;

impl FrameSender for WtSender {
    async fn send_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        self.inner.send_frame(frame, class).await
    }

    async fn send_reply(
        &self,
        frame: Bytes,
        priority: Priority,
        slot: ReplySlot,
    ) -> Result<(), TransportError> {
        self.inner.send_reply(frame, priority, slot).await
    }

    async fn feed_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        self.inner.feed_frame(frame, class).await
    }

    async fn flush(&self) -> Result<(), TransportError> {
        FrameSender::flush(&self.inner).await
    }

    async fn delivered(&self) {
        self.inner.delivered().await
    }

    fn set_peer_max_frame_size(&self, max: u32) {
        self.inner.set_peer_max_frame_size(max);
    }

    fn count_streams_in_goodbye(&self) {
        FrameSender::count_streams_in_goodbye(&self.inner);
    }

    fn hello_accepted(&self) {
        FrameSender::hello_accepted(&self.inner);
    }

    fn close(&self, code: ErrorCode, reason: &str) {
        FrameSender::close(&self.inner, code, reason);
    }

    async fn closed(&self) -> TransportError {
        self.inner.closed().await
    }

    fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            transport: TransportKind::WebTransport.name(),
            ..FrameSender::stats(&self.inner)
        }
    }

    fn kind(&self) -> TransportKind {
        TransportKind::WebTransport
    }
}

/// Why a session was not set up.
fn refused(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> TransportError {
    ConnectError::refused(format!("WebTransport: {what}"), e).into()
}

/// What the hub sets a session up with.
pub(crate) struct HubSide<'a> {
    pub(crate) options: &'a WtOptions,
    pub(crate) settings: &'a QuicSettings,
    pub(crate) mapping: StreamMapping,
}

/// Hub side: runs the HTTP/3 and CONNECT exchange on `conn` (a connection that chose ALPN
/// `h3`), answers 404 for another path and 403 for a page the options do not allow, then
/// takes the agent's control stream (the session's first bidirectional stream, whose signal
/// names the session). The caller bounds the whole in time.
pub(crate) async fn accept(
    conn: quinn::Connection,
    hub: HubSide<'_>,
    admission: Option<Admission>,
) -> Result<(WtSender, WtReceiver), TransportError> {
    let request = web_transport_quinn::Request::accept(conn.clone())
        .await
        .map_err(|e| refused("the HTTP/3 session request failed", e))?;
    let path = request.url.path().to_owned();
    if path != WT_PATH {
        let _ = request.reject(StatusCode::NOT_FOUND).await;
        return Err(TransportError::Closed {
            code: Some(ErrorCode::ProtocolViolation),
            reason: format!("WebTransport session asked for {path:?}; agentwire is at {WT_PATH}"),
        });
    }
    let origin = request
        .headers
        .get(header::ORIGIN)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if !hub.options.origins.allows(origin.as_deref()) {
        let _ = request.reject(StatusCode::FORBIDDEN).await;
        return Err(TransportError::Closed {
            code: Some(ErrorCode::Unauthorized),
            reason: format!(
                "WebTransport session from the page {:?}, which --allow-origin does not allow",
                origin.unwrap_or_default()
            ),
        });
    }
    let session = request
        .ok()
        .await
        .map_err(|e| refused("answering the session request failed", e))?;
    let (send, mut recv) = conn
        .accept_bi()
        .await
        .map_err(|e| refused("the agent opened no stream", e))?;
    let session_id = read_signal(&mut recv).await?;
    let signal = SessionSignal::new(session_id);
    let max_in = agentwire_proto::MAX_HELLO_FRAME;
    let (sender, receiver) = split_session(
        conn,
        (send, recv),
        hub.mapping,
        hub.settings.datagrams,
        max_in,
        signal,
    );
    crate::quic::before_hello(&sender, &receiver, hub.settings, admission);
    let sender = WtSender {
        inner: sender,
        _session: Arc::new(session),
    };
    Ok((sender, receiver))
}

/// Reads a bidirectional stream's WebTransport signal (`0x41`, then the session id).
async fn read_signal(recv: &mut quinn::RecvStream) -> Result<u64, TransportError> {
    let mut head = Vec::new();
    loop {
        let mut byte = [0u8; 1];
        recv.read_exact(&mut byte)
            .await
            .map_err(|e| refused("the agent's stream ended in its signal", e))?;
        head.push(byte[0]);
        let mut rest = &head[..];
        if let Some(kind) = signal::get_varint(&mut rest) {
            if kind != signal::WT_BIDI_SIGNAL {
                return Err(TransportError::Closed {
                    code: Some(ErrorCode::ProtocolViolation),
                    reason: format!("the session's first stream opened with 0x{kind:x}, not 0x41"),
                });
            }
            if let Some(session) = signal::get_varint(&mut rest) {
                return Ok(session);
            }
        }
    }
}

/// The session id of the first session on a fresh connection: its CONNECT is the client's
/// first bidirectional stream (id 0), as browsers and [`connect`] open it.
const FIRST_SESSION: u64 = 0;

/// Agent side: opens a session at `https://{server_name}:{port}{WT_PATH}` over `conn` (a new
/// QUIC connection that chose ALPN `h3`), sending `origin` as a page would, then its control
/// stream, frames mapped as on QUIC (a stream per message).
pub async fn connect(
    conn: quinn::Connection,
    server_name: &str,
    origin: Option<&str>,
) -> Result<(WtSender, WtReceiver), TransportError> {
    connect_at(conn, server_name, WT_PATH, origin).await
}

/// [`connect`] to another `path` (a hub answers 404 there).
pub async fn connect_at(
    conn: quinn::Connection,
    server_name: &str,
    path: &str,
    origin: Option<&str>,
) -> Result<(WtSender, WtReceiver), TransportError> {
    let (session, control, signal) = open_session(&conn, server_name, path, origin).await?;
    let max_in = agentwire_proto::Limits::default().max_frame_size;
    let (sender, receiver) = split_session(
        conn,
        control,
        StreamMapping::PerMessage,
        true,
        max_in,
        signal,
    );
    let sender = WtSender {
        inner: sender,
        _session: Arc::new(session),
    };
    Ok((sender, receiver))
}

/// The session and its control stream, the signal written on it.
async fn open_session(
    conn: &quinn::Connection,
    server_name: &str,
    path: &str,
    origin: Option<&str>,
) -> Result<
    (
        web_transport_quinn::Session,
        (quinn::SendStream, quinn::RecvStream),
        SessionSignal,
    ),
    TransportError,
> {
    let port = conn.remote_address().port();
    let url = format!("https://{server_name}:{port}{path}");
    let url = url::Url::parse(&url).map_err(|e| refused(&format!("bad URL {url}"), e))?;
    let mut request = ConnectRequest::new(url);
    if let Some(origin) = origin {
        let value = header::HeaderValue::from_str(origin)
            .map_err(|e| refused(&format!("bad Origin {origin:?}"), e))?;
        request = request.with_header(header::ORIGIN, value);
    }
    let session = web_transport_quinn::Session::connect(conn.clone(), request)
        .await
        .map_err(|e| refused("the hub refused the session", e))?;
    let signal = SessionSignal::new(FIRST_SESSION);
    let (mut send, recv) = conn
        .open_bi()
        .await
        .map_err(|e| refused("opening the session's stream failed", e))?;
    send.write_chunk(signal.bidi.clone())
        .await
        .map_err(|e| refused("writing the session's stream failed", e))?;
    Ok((session, (send, recv), signal))
}

/// An agent's WebTransport dialer (`wt://` URLs): a QUIC client endpoint offering ALPN `h3`,
/// one session per connection, agentwire's QUIC mapping inside it. It sends no Origin (it
/// is not a page).
pub struct WtDial(QuicDial);

impl WtDial {
    /// A client endpoint bound to `bind` with `settings`, checking hubs' certificates with
    /// `verifier`, presenting `identity` to hubs that ask.
    pub fn new(
        bind: std::net::SocketAddr,
        settings: &QuicSettings,
        verifier: Arc<dyn rustls::client::danger::ServerCertVerifier>,
        identity: Option<&agentwire_tls::AgentIdentity>,
    ) -> Result<WtDial, TransportError> {
        QuicDial::with_alpn(bind, settings, verifier, identity, agentwire_tls::ALPN_H3).map(WtDial)
    }
}

impl Dial for WtDial {
    async fn dial(
        &self,
        target: &DialTarget,
        first_frame: Bytes,
    ) -> Result<Dialed, TransportError> {
        let conn = self.0.handshake_with(target).await?;
        let (session, control, signal) =
            open_session(&conn, &target.server_name, WT_PATH, None).await?;
        let (sender, receiver) = self.0.split_session(conn, control, target.mapping, signal);
        let sender = WtSender {
            inner: sender,
            _session: Arc::new(session),
        };
        sender.send_frame(first_frame, SendClass::Control).await?;
        Ok(Dialed {
            sender: AnySender::Wt(sender),
            receiver: AnyReceiver::Wt(receiver),
            zero_rtt: ZeroRtt::NotTried,
            socket_buffers: self.0.socket_buffers(),
        })
    }
}

/// The handshake data of a connection being accepted says it chose ALPN `h3` (a
/// WebTransport session, not an agentwire connection).
pub(crate) fn chose_h3(data: &dyn std::any::Any) -> bool {
    data.downcast_ref::<quinn::crypto::rustls::HandshakeData>()
        .and_then(|d| d.protocol.as_deref())
        .is_some_and(|p| p == agentwire_tls::ALPN_H3)
}
