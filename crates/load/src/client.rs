//! One client connection of a load run, for each protocol: connecting (TCP + TLS, or QUIC),
//! sending a GET and reading its whole body, and turning every failure into a
//! [`LoadError`] of the right [`ErrorKind`].
//!
//! This module does no timing of its own beyond what a request returns (time to first byte)
//! and no counting; it must not print, and it must not panic on anything from the network.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Context;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use futures_util::future::{FutureExt, Shared};
use http::header::HOST;
use http::{Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::h2conn::{H2Driver, H2Link};
use crate::report::{EarlyData, ErrorKind, LoadError};
pub(crate) use crate::response::{
    body_error, check_size, content_length, io_kind, GetError, Response,
};
use crate::session::TlsSetup;
use crate::Proto;

/// The HTTP/3 "no error" code (RFC 9114 §8.1), used to close connections cleanly.
pub(crate) const H3_NO_ERROR: u32 = 0x100;

/// Where the requests go: one server, one or more paths.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The server's address.
    pub addr: SocketAddr,
    /// TLS server name (SNI and certificate check).
    pub server_name: ServerName<'static>,
    /// `host[:port]` for HTTP/1.1's Host header.
    pub authority: String,
    /// Full `https://` URIs (HTTP/3 takes scheme and authority from them).
    pub uris: Vec<Uri>,
    /// HTTP/2: each URI's request head (each connection HPACK-encodes it with its own table).
    pub h2_heads: Vec<agentwire_h2wire::RequestHead>,
    /// Origin-form targets (`/path?query`) for HTTP/1.1.
    pub paths: Vec<Uri>,
}

/// The client configuration shared by all connections of a run, built once.
#[derive(Clone)]
pub(crate) struct ClientSetup {
    /// The protocol spoken.
    pub proto: Proto,
    /// TLS: verification, and the run's session tickets when resuming.
    pub tls: TlsSetup,
    /// HTTP/3: the QUIC client configuration (TLS from [`ClientSetup::tls`] inside).
    pub quic: quinn::ClientConfig,
    /// HTTP/3 to a loopback server: the same with agentwire's loopback datagram size
    /// ([`agentwire_transport::QuicSettings::for_peer`]).
    pub quic_loopback: quinn::ClientConfig,
    /// HTTP/2 and HTTP/1.1: TLS over TCP (the same TLS configuration).
    pub tcp_tls: tokio_rustls::TlsConnector,
    /// HTTP/3: send the first requests as 0-RTT data when a ticket allows it.
    pub zero_rtt: bool,
    /// Per-stream flow-control window (HTTP/2), bytes.
    pub stream_window: u32,
    /// Per-connection flow-control window (HTTP/2), bytes.
    pub conn_window: u32,
}

impl ClientSetup {
    /// Builds the QUIC and TCP client configurations from `tls`.
    pub(crate) fn new(
        proto: Proto,
        tls: TlsSetup,
        zero_rtt: bool,
        stream_window: u32,
        conn_window: u32,
    ) -> anyhow::Result<Self> {
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls.config())
            .map_err(|e| anyhow::anyhow!("the TLS configuration does not suit QUIC: {e}"))?;
        let mut quic = quinn::ClientConfig::new(Arc::new(crypto));
        quic.transport_config(Arc::new(quic_transport(stream_window, conn_window)?));
        let quic_loopback = agentwire_transport::quic::client_config_for(
            &quic,
            &quic_settings(stream_window, conn_window),
            SocketAddr::from(([127, 0, 0, 1], 0)),
            "load",
        );
        Ok(ClientSetup {
            quic_loopback,
            proto,
            tcp_tls: tokio_rustls::TlsConnector::from(tls.config()),
            tls,
            quic,
            zero_rtt,
            stream_window,
            conn_window,
        })
    }
}

/// With 0-RTT, the server's answer to a new connection's early data, still to come when the
/// client may already send.
pub(crate) struct PendingHandshake {
    /// Resolves to true when the server accepted the 0-RTT data (false: rejected, or the
    /// connection was lost before the handshake completed).
    zero_rtt: Option<Shared<quinn::ZeroRttAccepted>>,
    quic: Option<quinn::Connection>,
}

impl PendingHandshake {
    /// Waits (at most `wait`) for the server's answer to the 0-RTT data; `None` if none was
    /// sent, or the connection was lost (or the handshake did not finish in time) before the
    /// client could tell.
    pub(crate) async fn early_data(&self, wait: Duration) -> Option<EarlyData> {
        let answer = self.zero_rtt.as_ref()?;
        match tokio::time::timeout(wait, answer.clone()).await {
            Ok(true) => Some(EarlyData::Accepted),
            // "false" means rejected only once the handshake has completed (the server's
            // identity is known, from its certificate or the resumed session), even if the
            // connection has closed since; before that, the connection was lost.
            Ok(false)
                if self
                    .quic
                    .as_ref()
                    .is_some_and(|q| q.peer_identity().is_some()) =>
            {
                Some(EarlyData::Rejected)
            }
            _ => None,
        }
    }
}

/// One established connection.
pub(crate) enum Conn {
    H3 {
        send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
        quic: quinn::Connection,
        _driver: JoinHandle<()>,
    },
    H2 {
        link: H2Link,
        driver: Box<H2Driver>,
    },
    H1 {
        send: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
        driver: JoinHandle<()>,
    },
}

/// A request sender on a connection (HTTP/2 and HTTP/3 connections have one per stream in
/// flight, HTTP/1.1 exactly one).
pub(crate) enum Lane {
    H3 {
        send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
        quic: quinn::Connection,
    },
    H2(H2Link),
    H1(hyper::client::conn::http1::SendRequest<Empty<Bytes>>),
}

/// Connects to `target`: the QUIC handshake, or TCP + TLS (+ the HTTP/2 preface). With
/// 0-RTT (HTTP/3, a ticket in the store) it returns as soon as requests may be sent, before
/// the handshake completes. The caller bounds the time.
pub(crate) async fn connect(
    setup: &ClientSetup,
    endpoint: Option<&quinn::Endpoint>,
    target: &Target,
) -> Result<(Conn, PendingHandshake), LoadError> {
    if setup.proto == Proto::H3 {
        let endpoint =
            endpoint.ok_or_else(|| LoadError::new(ErrorKind::Other, "no QUIC endpoint"))?;
        let name = server_name_str(&target.server_name);
        let config = if target.addr.ip().to_canonical().is_loopback() {
            &setup.quic_loopback
        } else {
            &setup.quic
        };
        let connecting = endpoint
            .connect_with(config.clone(), target.addr, &name)
            .map_err(|e| LoadError::new(ErrorKind::Connect, format!("cannot connect: {e}")))?;
        let (quic, zero_rtt) = if setup.zero_rtt {
            match connecting.into_0rtt() {
                Ok((quic, accepted)) => (quic, Some(accepted.shared())),
                Err(connecting) => (connecting.await.map_err(|e| quic_connect_error(&e))?, None),
            }
        } else {
            (connecting.await.map_err(|e| quic_connect_error(&e))?, None)
        };
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(quic.clone()))
            .await
            .map_err(|e| {
                LoadError::new(ErrorKind::Protocol, format!("HTTP/3 set-up failed: {e}"))
            })?;
        let driver = tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        let pending = PendingHandshake {
            zero_rtt,
            quic: Some(quic.clone()),
        };
        return Ok((
            Conn::H3 {
                send,
                quic,
                _driver: driver,
            },
            pending,
        ));
    }
    let pending = PendingHandshake {
        zero_rtt: None,
        quic: None,
    };
    let tcp = TcpStream::connect(target.addr)
        .await
        .map_err(|e| tcp_connect_error(&e, target.addr))?;
    let _ = tcp.set_nodelay(true);
    let stream = setup
        .tcp_tls
        .connect(target.server_name.clone(), tcp)
        .await
        .map_err(|e| tls_io_error(&e))?;
    let want: &[u8] = if setup.proto == Proto::H2 {
        crate::ALPN_H2
    } else {
        crate::ALPN_HTTP11
    };
    if stream.get_ref().1.alpn_protocol() != Some(want) {
        return Err(LoadError::new(
            ErrorKind::Tls,
            format!(
                "the server did not agree to ALPN {:?} (it is not speaking {} over TLS)",
                String::from_utf8_lossy(want),
                setup.proto
            ),
        ));
    }
    let conn = if setup.proto == Proto::H2 {
        // Our own HTTP/2 client (agentwire-h2wire), driven in the slot's task: the h2 crate
        // and its header map took a fifth of the CPU per request.
        let (link, driver) = crate::h2conn::start(stream, setup.stream_window, setup.conn_window);
        Conn::H2 { link, driver }
    } else {
        let (send, conn) = hyper::client::conn::http1::Builder::new()
            .handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(|e| classify_hyper(&e))?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        Conn::H1 { send, driver }
    };
    Ok((conn, pending))
}

fn server_name_str(name: &ServerName<'static>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().to_owned(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        _ => String::new(),
    }
}

impl Conn {
    /// Hands out `n` request senders (HTTP/1.1: always exactly one) and what closes the
    /// connection once they are dropped.
    pub(crate) fn into_lanes(self, n: usize) -> (Vec<Lane>, ConnGuard) {
        match self {
            Conn::H1 { send, driver } => (vec![Lane::H1(send)], ConnGuard::Task(driver)),
            Conn::H2 { link, driver } => (
                (0..n.max(1)).map(|_| Lane::H2(link.clone())).collect(),
                ConnGuard::H2(driver),
            ),
            Conn::H3 { send, quic, .. } => (
                (0..n.max(1))
                    .map(|_| Lane::H3 {
                        send: send.clone(),
                        quic: quic.clone(),
                    })
                    .collect(),
                ConnGuard::Quic(quic),
            ),
        }
    }
}

/// What is left of a connection once its lanes are handed out; [`ConnGuard::close`] ends it.
pub(crate) enum ConnGuard {
    Task(JoinHandle<()>),
    Quic(quinn::Connection),
    /// HTTP/2: the connection is driven by whoever polls [`ConnGuard::poll_drive`].
    H2(Box<H2Driver>),
}

impl ConnGuard {
    /// Drives a connection that has no task of its own (HTTP/2): writes what the lanes
    /// queued, reads what arrived. True if the lanes should be polled again.
    pub(crate) fn poll_drive(&mut self, cx: &mut Context<'_>) -> bool {
        match self {
            ConnGuard::H2(driver) => driver.poll_drive(cx),
            ConnGuard::Task(_) | ConnGuard::Quic(_) => false,
        }
    }

    /// Closes the connection (the lanes must have been dropped): QUIC with H3_NO_ERROR; a TCP
    /// connection's task ends by itself once its senders are gone (graceful close), and is
    /// aborted if it has not after a moment.
    pub(crate) async fn close(self) {
        match self {
            ConnGuard::Quic(quic) => quic.close(H3_NO_ERROR.into(), b""),
            ConnGuard::H2(driver) => driver.close().await,
            ConnGuard::Task(task) => {
                let abort = task.abort_handle();
                if tokio::time::timeout(Duration::from_millis(200), task)
                    .await
                    .is_err()
                {
                    abort.abort();
                }
            }
        }
    }
}

impl Lane {
    /// True once the connection under this lane is known to be closed.
    pub(crate) fn is_closed(&self) -> bool {
        match self {
            Lane::H3 { quic, .. } => quic.close_reason().is_some(),
            Lane::H2(link) => link.is_closed(),
            Lane::H1(s) => s.is_closed(),
        }
    }

    /// Sends `GET url` and reads the whole body, checking its length against Content-Length.
    /// A request the server cannot have processed (the connection closed before it was
    /// sent, or a graceful HTTP/2 GOAWAY or REFUSED_STREAM turned it away) comes back as
    /// [`GetError::NotSent`]; the caller may send it again on another connection. The caller
    /// bounds the time.
    pub(crate) async fn get(
        &mut self,
        target: &Target,
        index: usize,
    ) -> Result<Response, GetError> {
        let i = index % target.uris.len().max(1);
        match self {
            Lane::H3 { send, quic } => {
                let uri = target.uris.get(i).cloned().unwrap_or_default();
                let result = h3_get(send, uri).await;
                result.map_err(|e| {
                    GetError::Failed(match quic.close_reason() {
                        Some(reason) => quic_request_error(&reason),
                        None => e,
                    })
                })
            }
            Lane::H2(link) => match target.h2_heads.get(i) {
                Some(head) => link.get(head).await,
                None => Err(GetError::Failed(LoadError::new(ErrorKind::Other, "no URL"))),
            },
            Lane::H1(send) => {
                let path = target.paths.get(i).cloned().unwrap_or_default();
                send.ready()
                    .await
                    .map_err(|e| GetError::NotSent(classify_hyper(&e)))?;
                let req = Request::get(path)
                    .header(HOST, target.authority.as_str())
                    .body(Empty::new())
                    .map_err(|e| {
                        GetError::Failed(LoadError::new(ErrorKind::Other, e.to_string()))
                    })?;
                let resp = send.try_send_request(req).await.map_err(|mut e| {
                    if e.take_message().is_some() {
                        GetError::NotSent(classify_hyper(e.error()))
                    } else {
                        GetError::Failed(classify_hyper(e.error()))
                    }
                })?;
                read_hyper_body(resp).await.map_err(GetError::Failed)
            }
        }
    }
}

async fn read_hyper_body(
    resp: http::Response<hyper::body::Incoming>,
) -> Result<Response, LoadError> {
    let first_byte = Instant::now();
    let status = resp.status().as_u16();
    let announced = content_length(resp.headers());
    let mut body = resp.into_body();
    let mut received = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| body_error(classify_hyper(&e), received, announced))?;
        if let Some(data) = frame.data_ref() {
            received += data.len() as u64;
        }
    }
    check_size(received, announced)?;
    Ok(Response {
        status,
        body_bytes: received,
        first_byte,
    })
}

async fn h3_get(
    send: &mut h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    uri: Uri,
) -> Result<Response, LoadError> {
    let req = Request::get(uri)
        .body(())
        .map_err(|e| LoadError::new(ErrorKind::Other, e.to_string()))?;
    let mut stream = send.send_request(req).await.map_err(|e| h3_error(&e))?;
    stream.finish().await.map_err(|e| h3_error(&e))?;
    let resp = stream.recv_response().await.map_err(|e| h3_error(&e))?;
    let first_byte = Instant::now();
    let status = resp.status().as_u16();
    let announced = content_length(resp.headers());
    let mut received = 0u64;
    loop {
        match stream.recv_data().await {
            Ok(Some(chunk)) => received += chunk.remaining() as u64,
            Ok(None) => break,
            Err(e) => return Err(body_error(h3_error(&e), received, announced)),
        }
    }
    check_size(received, announced)?;
    Ok(Response {
        status,
        body_bytes: received,
        first_byte,
    })
}

/// Classifies an HTTP/3 stream error (the caller prefers the QUIC connection's close reason
/// when there is one).
fn h3_error(e: &h3::error::StreamError) -> LoadError {
    use h3::error::{ConnectionError, StreamError};
    // The variants are non-exhaustive: match them with `{ .. }`.
    let kind = match e {
        StreamError::RemoteTerminate { .. } => ErrorKind::Reset,
        StreamError::RemoteClosing { .. } => ErrorKind::Closed,
        StreamError::ConnectionError { 0: c, .. } => match c {
            ConnectionError::Timeout { .. } => ErrorKind::Timeout,
            _ => ErrorKind::Closed,
        },
        StreamError::HeaderTooBig { .. } | StreamError::StreamError { .. } => ErrorKind::Protocol,
        _ => ErrorKind::Other,
    };
    LoadError::new(kind, e.to_string())
}

/// Classifies the reason a QUIC connection closed while requests were in flight.
fn quic_request_error(e: &quinn::ConnectionError) -> LoadError {
    use quinn::ConnectionError as C;
    let kind = match e {
        C::TimedOut => ErrorKind::Timeout,
        C::Reset => ErrorKind::Reset,
        C::TransportError(_) => ErrorKind::Protocol,
        _ => ErrorKind::Closed,
    };
    LoadError::new(kind, format!("the QUIC connection closed: {e}"))
}

fn is_crypto_code(code: quinn::TransportErrorCode) -> bool {
    (0x100..0x200).contains(&u64::from(code))
}

/// Classifies a failed QUIC handshake.
fn quic_connect_error(e: &quinn::ConnectionError) -> LoadError {
    use quinn::ConnectionError as C;
    match e {
        C::TransportError(te) if is_crypto_code(te.code) => {
            LoadError::new(ErrorKind::Tls, describe_tls(&te.reason))
        }
        C::ConnectionClosed(close) if is_crypto_code(close.error_code) => LoadError::new(
            ErrorKind::Tls,
            describe_tls(&format!(
                "the server refused the handshake: {}",
                String::from_utf8_lossy(&close.reason)
            )),
        ),
        C::TimedOut => LoadError::new(
            ErrorKind::ConnectTimeout,
            "the QUIC handshake timed out (is an HTTP/3 server listening on that UDP port?)",
        ),
        other => LoadError::new(
            ErrorKind::Connect,
            format!("QUIC handshake failed: {other}"),
        ),
    }
}

fn tcp_connect_error(e: &std::io::Error, addr: SocketAddr) -> LoadError {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => LoadError::new(
            ErrorKind::ConnectRefused,
            format!("connection to {addr} refused (is the server running?)"),
        ),
        K::TimedOut => LoadError::new(
            ErrorKind::ConnectTimeout,
            format!("connecting to {addr} timed out"),
        ),
        _ => LoadError::new(ErrorKind::Connect, format!("cannot connect to {addr}: {e}")),
    }
}

fn tls_io_error(e: &std::io::Error) -> LoadError {
    let inner = e
        .get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .map(|r| r.to_string());
    match inner {
        Some(text) => LoadError::new(ErrorKind::Tls, describe_tls(&text)),
        None => LoadError::new(
            ErrorKind::Tls,
            format!("TLS handshake failed: {e} (is this a TLS server?)"),
        ),
    }
}

/// Turns rustls's text for a failed handshake into a sentence naming the fix.
pub(crate) fn describe_tls(text: &str) -> String {
    if text.contains("UnknownIssuer") {
        format!(
            "the server's certificate is not signed by a trusted CA: pass --ca FILE with the CA \
             that issued it (e.g. CERTS/ca.pem from `agentwire cert`), or --insecure for \
             testing ({text})"
        )
    } else if text.contains("NotValidForName") || text.contains("not valid for name") {
        format!(
            "the server's certificate is not valid for the name connected to; use a name it \
             lists ({text})"
        )
    } else if text.contains("NoApplicationProtocol") || text.contains("no_application_protocol") {
        format!("no common ALPN protocol: the server does not speak this protocol ({text})")
    } else {
        format!("TLS handshake failed: {text}")
    }
}

/// Classifies a hyper error by what it and its sources say.
pub(crate) fn classify_hyper(e: &hyper::Error) -> LoadError {
    let message = agentwire_transport::error_chain(e);
    let kind = hyper_kind(e);
    LoadError::new(kind, message)
}

fn hyper_kind(e: &hyper::Error) -> ErrorKind {
    if e.is_timeout() {
        return ErrorKind::Timeout;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io_kind(io);
        }
        source = s.source();
    }
    if e.is_canceled() || e.is_closed() || e.is_incomplete_message() {
        ErrorKind::Closed
    } else if e.is_parse() || e.is_parse_status() {
        ErrorKind::Protocol
    } else {
        ErrorKind::Other
    }
}

/// QUIC transport settings for both sides: agentwire's defaults, no datagrams, the given
/// windows.
pub(crate) fn quic_transport(
    stream_window: u32,
    conn_window: u32,
) -> anyhow::Result<quinn::TransportConfig> {
    let settings = quic_settings(stream_window, conn_window);
    settings
        .transport_config()
        .map_err(|e| anyhow::anyhow!("QUIC settings: {e}"))
}

/// The QUIC settings used by `serve` and `load`.
pub(crate) fn quic_settings(
    stream_window: u32,
    conn_window: u32,
) -> agentwire_transport::QuicSettings {
    agentwire_transport::QuicSettings {
        datagrams: false,
        stream_receive_window: stream_window,
        receive_window: u64::from(conn_window),
        ..agentwire_transport::QuicSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_tls_messages() {
        assert!(check_size(10, Some(10)).is_ok());
        assert!(check_size(10, None).is_ok());
        let e = check_size(9, Some(10)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::WrongSize);
        let cut = body_error(LoadError::new(ErrorKind::Closed, "eof"), 5, Some(10));
        assert_eq!(cut.kind, ErrorKind::WrongSize);
        assert!(cut.message.contains("5 of 10"), "{}", cut.message);
        let reset = body_error(LoadError::new(ErrorKind::Reset, "rst"), 5, Some(10));
        assert_eq!(reset.kind, ErrorKind::Reset);
        assert!(describe_tls("invalid peer certificate: UnknownIssuer").contains("--ca FILE"));
        let refused = tcp_connect_error(
            &std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            "127.0.0.1:1".parse().unwrap(),
        );
        assert_eq!(refused.kind, ErrorKind::ConnectRefused);
    }
}
