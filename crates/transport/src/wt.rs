//! WebTransport sessions (HTTP/3 extended CONNECT, RFC 9220) on the hub's QUIC endpoint, for
//! agents in web pages: the session at [`WT_PATH`], the page's Origin checked against an
//! [`OriginPolicy`], then the agent's frames.
//!
//! The HTTP/3 layer (SETTINGS, the CONNECT request, stream and datagram headers, both the
//! draft-02 and the later settings browsers send) is web-transport-quinn's, on the
//! `quinn::Connection` the QUIC listener accepted with ALPN `h3`. The first mapping of frames is
//! the simplest: all of them ride the first bidirectional stream the agent opens, framed as on a
//! Unix socket ([`split_stream`]); per-message streams, priority lanes and datagrams are still
//! to come (issue 43). This module owns the session's set-up and that mapping; it must not run
//! the agentwire handshake (the hub does) or decide credentials.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentwire_proto::{ErrorCode, Priority};
use bytes::Bytes;
use quinn::VarInt;
use web_transport_quinn::http::{header, StatusCode};
use web_transport_quinn::proto::ConnectRequest;

use agentwire_sync::LockExt;

use super::any::{AnyReceiver, AnySender};
use super::dial::{Dial, DialTarget, Dialed, ZeroRtt};
use super::quic::QuicDial;
use super::quic_budget::Admission;
use super::stream::{split_stream, StreamReceiver, StreamSender};
use super::{
    ConnectError, ConnectionStats, FrameSender, ReplySlot, SendClass, TransportError, TransportKind,
};

/// The path of the agentwire session; a CONNECT to any other path is answered 404.
pub const WT_PATH: &str = "/agentwire";

/// How long a closed session waits for its peer to read the goodbye before the QUIC
/// connection is closed under it.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Which web pages may open a session: the `Origin` a browser sends with the CONNECT request
/// must match one of the patterns (`--allow-origin`). A pattern is an origin as browsers write
/// it (`https://app.example.com`, `http://localhost:8080`), in which `*` stands for any run of
/// characters other than `/` (`https://*.example.com`, `http://localhost:*`), or `*` alone
/// for any page.
///
/// A request without an `Origin` does not come from a page (browsers always send one): it is
/// let through, and its hello's credentials decide, as for every other agent.
///
/// ```
/// use agentwire_transport::wt::OriginPolicy;
/// let p = OriginPolicy::new(["https://*.example.com", "http://localhost:*"]).unwrap();
/// assert!(p.allows(Some("https://app.example.com")));
/// assert!(p.allows(Some("http://localhost:5173")));
/// assert!(!p.allows(Some("https://example.com.evil.net")));
/// assert!(!p.allows(Some("https://evil.net/https://app.example.com")));
/// assert!(p.allows(None));
/// assert!(!OriginPolicy::default().allows(Some("https://app.example.com")));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OriginPolicy {
    patterns: Vec<String>,
}

/// An `--allow-origin` pattern that cannot match an origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pattern:?} is not an origin pattern ({why}); write it as a page's origin, e.g. https://app.example.com or http://localhost:*")]
pub struct OriginPatternError {
    /// The pattern given.
    pub pattern: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl OriginPolicy {
    /// A policy allowing the pages whose origin matches one of `patterns`.
    pub fn new<I, S>(patterns: I) -> Result<OriginPolicy, OriginPatternError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut out = Vec::new();
        for pattern in patterns {
            let pattern: String = pattern.into();
            let bad = |why| OriginPatternError {
                pattern: pattern.clone(),
                why,
            };
            if pattern != "*" {
                let Some((scheme, rest)) = pattern.split_once("://") else {
                    return Err(bad("no scheme"));
                };
                if scheme.is_empty() || rest.is_empty() {
                    return Err(bad("no scheme or no host"));
                }
                if rest.contains('/') {
                    return Err(bad("an origin has no path"));
                }
            }
            if pattern.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(bad("white space or a control character"));
            }
            out.push(pattern);
        }
        Ok(OriginPolicy { patterns: out })
    }

    /// Whether a session whose CONNECT carried `origin` may go on.
    pub fn allows(&self, origin: Option<&str>) -> bool {
        let Some(origin) = origin else { return true };
        self.patterns
            .iter()
            .any(|p| p == "*" || glob_matches(p.as_bytes(), origin.as_bytes()))
    }

    /// Whether any page at all may open a session.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }
}

/// `*` in `pattern` matches any run of bytes other than `/`; everything else matches itself
/// (ASCII case-insensitively, as origins compare).
fn glob_matches(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len())
            .take_while(|&i| i == 0 || text[i - 1] != b'/')
            .any(|i| glob_matches(rest, &text[i..])),
        Some((c, rest)) => match text.split_first() {
            Some((t, more)) if t.eq_ignore_ascii_case(c) => glob_matches(rest, more),
            _ => false,
        },
    }
}

/// The hub's WebTransport settings.
#[derive(Debug, Clone, Default)]
pub struct WtOptions {
    /// The pages that may open a session.
    pub origins: OriginPolicy,
}

/// The sending half of a WebTransport session: frames on the session's stream, and the QUIC
/// connection under it for its window, its statistics and its end.
#[derive(Clone)]
pub struct WtSender {
    inner: StreamSender,
    session: Arc<web_transport_quinn::Session>,
    /// The connection's receive window once the hello is accepted (0: leave it), or its
    /// share of the listener's receive budget.
    after_hello: Arc<AfterHello>,
}

/// What the hello's acceptance raises the connection's window to.
struct AfterHello {
    window: AtomicU64,
    admission: std::sync::Mutex<Option<Admission>>,
}

/// The receiving half of a WebTransport session.
pub type WtReceiver = StreamReceiver;

impl WtSender {
    fn new(
        inner: StreamSender,
        session: web_transport_quinn::Session,
        window: u64,
        admission: Option<Admission>,
    ) -> Self {
        WtSender {
            inner,
            session: Arc::new(session),
            after_hello: Arc::new(AfterHello {
                window: AtomicU64::new(window),
                admission: std::sync::Mutex::new(admission),
            }),
        }
    }
}

impl FrameSender for WtSender {
    async fn send_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        self.inner.send_frame(frame, class).await
    }

    async fn send_reply(
        &self,
        frame: Bytes,
        priority: Priority,
        _slot: ReplySlot,
    ) -> Result<(), TransportError> {
        self.inner
            .send_frame(frame, SendClass::Message(priority))
            .await
    }

    async fn feed_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        self.inner.feed_frame(frame, class).await
    }

    async fn flush(&self) -> Result<(), TransportError> {
        FrameSender::flush(&self.inner).await
    }

    fn set_peer_max_frame_size(&self, max: u32) {
        self.inner.set_peer_max_frame_size(max);
    }

    fn hello_accepted(&self) {
        let conn: &quinn::Connection = &self.session;
        let mut admission = self.after_hello.admission.lock_or_recover();
        match admission.as_mut() {
            Some(admission) => admission.register(conn),
            None => {
                let window = self.after_hello.window.swap(0, Ordering::Relaxed);
                if window > 0 {
                    conn.set_receive_window(VarInt::from_u64(window).unwrap_or(VarInt::MAX));
                }
            }
        }
    }

    fn close(&self, code: ErrorCode, reason: &str) {
        FrameSender::close(&self.inner, code, reason);
        // The goodbye is on its way on the session's stream; the connection goes once the
        // peer has closed it, or after a grace period.
        let session = Arc::clone(&self.session);
        let reason = reason.to_owned();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(CLOSE_GRACE, session.closed()).await;
            session.close(code.code(), reason.as_bytes());
        });
    }

    async fn closed(&self) -> TransportError {
        self.inner.closed().await
    }

    fn stats(&self) -> ConnectionStats {
        let conn: &quinn::Connection = &self.session;
        let quic = conn.stats();
        ConnectionStats {
            rtt_us: u64::try_from(conn.rtt().as_micros()).unwrap_or(u64::MAX),
            cwnd_bytes: quic.path.cwnd,
            lost_packets: quic.path.lost_packets,
            lost_bytes: quic.path.lost_bytes,
            sent_packets: quic.path.sent_packets,
            mtu: quic.path.current_mtu,
            congestion_events: quic.path.congestion_events,
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

/// Hub side: runs the HTTP/3 and CONNECT exchange on `conn` (a connection that chose ALPN
/// `h3`), answers 404 for another path and 403 for a page `options` does not allow, then waits
/// for the agent's stream. The caller bounds the whole in time.
pub(crate) async fn accept(
    conn: quinn::Connection,
    options: &WtOptions,
    window_after_hello: u64,
    admission: Option<Admission>,
) -> Result<(WtSender, WtReceiver), TransportError> {
    let remote = conn.remote_address();
    let request = web_transport_quinn::Request::accept(conn)
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
    if !options.origins.allows(origin.as_deref()) {
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
    let (send, recv) = session
        .accept_bi()
        .await
        .map_err(|e| refused("the agent opened no stream", e))?;
    let (sender, receiver) = split_stream(
        tokio::io::join(recv, send),
        TransportKind::WebTransport,
        Some(remote),
    );
    let sender = WtSender::new(sender, session, window_after_hello, admission);
    Ok((sender, receiver))
}

/// Agent side: opens a session at `https://{server_name}:{port}{WT_PATH}` over `conn` (a new
/// QUIC connection that chose ALPN `h3`), sending `origin` as a page would, and its stream.
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
    let remote = conn.remote_address();
    let port = remote.port();
    let url = format!("https://{server_name}:{port}{path}");
    let url = url::Url::parse(&url).map_err(|e| refused(&format!("bad URL {url}"), e))?;
    let mut request = ConnectRequest::new(url);
    if let Some(origin) = origin {
        let value = header::HeaderValue::from_str(origin)
            .map_err(|e| refused(&format!("bad Origin {origin:?}"), e))?;
        request = request.with_header(header::ORIGIN, value);
    }
    let session = web_transport_quinn::Session::connect(conn, request)
        .await
        .map_err(|e| refused("the hub refused the session", e))?;
    let (send, recv) = session
        .open_bi()
        .await
        .map_err(|e| refused("opening the session's stream failed", e))?;
    let (sender, receiver) = split_stream(
        tokio::io::join(recv, send),
        TransportKind::WebTransport,
        Some(remote),
    );
    Ok((WtSender::new(sender, session, 0, None), receiver))
}

/// An agent's WebTransport dialer (`wt://` URLs): a QUIC client endpoint offering ALPN `h3`,
/// one session per connection, the first frame written on the session's stream. It sends no
/// Origin (it is not a page).
pub struct WtDial(QuicDial);

impl WtDial {
    /// A client endpoint bound to `bind` with `settings`, checking hubs' certificates with
    /// `verifier`, presenting `identity` to hubs that ask.
    pub fn new(
        bind: std::net::SocketAddr,
        settings: &crate::settings::QuicSettings,
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
        let (sender, receiver) = connect(conn, &target.server_name, None).await?;
        sender.send_frame(first_frame, SendClass::Control).await?;
        Ok(Dialed {
            sender: AnySender::Wt(sender),
            receiver: AnyReceiver::Wt(receiver),
            zero_rtt: ZeroRtt::NotTried,
            socket_buffers: self.0.socket_buffers(),
        })
    }
}

/// The QUIC connection `conn` chose ALPN `h3` (a WebTransport session, not an agentwire one).
pub(crate) fn is_h3(conn: &quinn::Connection) -> bool {
    conn.handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.protocol)
        .is_some_and(|p| p == agentwire_tls::ALPN_H3)
}
