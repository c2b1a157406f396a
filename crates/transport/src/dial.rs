//! Dialers: how an agent reaches a hub, one kind per transport, behind one trait.
//!
//! A [`Dial`] opens a connection to a [`DialTarget`] and sends the caller's first frame (the
//! hello) as its first control frame, without waiting for an answer. This module owns the
//! trait and the HTTP/2, WebSocket and Unix-socket dialers (the QUIC one, which keeps an
//! endpoint and a session-ticket cache across connections, lives with the QUIC transport); it
//! must not run the agentwire handshake: that is the agent's, on the halves a [`Dialed`]
//! carries.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
#[cfg(any(feature = "h2", feature = "ws"))]
use std::sync::Arc;

use bytes::Bytes;

use super::any::{AnyReceiver, AnySender};
#[cfg(feature = "h2")]
use super::h2;
#[cfg(feature = "unix")]
use super::uds;
#[cfg(feature = "ws")]
use super::ws;
use super::{ConnectError, TransportError};
#[cfg(any(feature = "ws", feature = "unix"))]
use super::{FrameSender, SendClass};
use crate::settings::{SocketBuffers, StreamMapping};

/// Where and as whom to connect.
#[derive(Debug, Clone)]
pub struct DialTarget {
    /// The hub's address (network transports).
    pub addr: Option<SocketAddr>,
    /// The hub's socket file (Unix sockets).
    pub path: Option<PathBuf>,
    /// The host name for the WebSocket `Host` header.
    pub host: String,
    /// The name the hub's certificate must be valid for.
    pub server_name: String,
    /// The agent's id (names its qlog traces).
    pub agent_id: String,
    /// Try to send the first frame as QUIC 0-RTT data.
    pub zero_rtt: bool,
    /// How a QUIC connection maps messages to streams.
    pub mapping: StreamMapping,
}

impl DialTarget {
    /// The network address, or the error for a target that has none.
    #[cfg(any(feature = "quic", feature = "h2", feature = "ws"))]
    pub(crate) fn addr(&self) -> Result<SocketAddr, TransportError> {
        self.addr
            .ok_or_else(|| ConnectError::Config("no network address to connect to".into()).into())
    }

    #[cfg(any(feature = "h2", feature = "ws"))]
    fn tls_name(&self) -> Result<rustls_pki_types::ServerName<'static>, TransportError> {
        rustls_pki_types::ServerName::try_from(self.server_name.clone()).map_err(|_| {
            ConnectError::Config(format!(
                "{:?} is not a valid TLS server name",
                self.server_name
            ))
            .into()
        })
    }
}

/// Whether the first frame went as 0-RTT data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroRtt {
    /// Not tried (not QUIC, no ticket, or not asked for).
    #[default]
    NotTried,
    /// The hub accepted it.
    Accepted,
    /// The hub discarded it; the first frame was sent again in 1-RTT.
    Rejected,
}

/// A connection whose first frame has been sent.
pub struct Dialed {
    /// Sending half.
    pub sender: AnySender,
    /// Receiving half.
    pub receiver: AnyReceiver,
    /// What became of 0-RTT.
    pub zero_rtt: ZeroRtt,
    /// UDP socket buffers granted (QUIC).
    pub socket_buffers: SocketBuffers,
}

/// A way to reach a hub over one transport.
pub trait Dial: Send + Sync {
    /// Connects to `target` and sends `first_frame` as the first control frame.
    fn dial(
        &self,
        target: &DialTarget,
        first_frame: Bytes,
    ) -> impl Future<Output = Result<Dialed, TransportError>> + Send;
}

#[cfg(any(feature = "ws", feature = "unix"))]
async fn send_first(
    sender: AnySender,
    receiver: AnyReceiver,
    first_frame: Bytes,
) -> Result<Dialed, TransportError> {
    sender.send_frame(first_frame, SendClass::Control).await?;
    Ok(Dialed::without_0rtt(sender, receiver))
}

impl Dialed {
    /// A connection of a transport without 0-RTT or UDP socket buffers.
    #[cfg(any(feature = "h2", feature = "ws", feature = "unix"))]
    fn without_0rtt(sender: AnySender, receiver: AnyReceiver) -> Dialed {
        Dialed {
            sender,
            receiver,
            zero_rtt: ZeroRtt::NotTried,
            socket_buffers: SocketBuffers::default(),
        }
    }
}

#[cfg(feature = "h2")]
/// HTTP/2 over TLS 1.3.
pub struct H2Dial {
    /// Client TLS configuration offering ALPN `h2`.
    pub tls: Arc<rustls::ClientConfig>,
}

#[cfg(feature = "h2")]
impl Dial for H2Dial {
    async fn dial(
        &self,
        target: &DialTarget,
        first_frame: Bytes,
    ) -> Result<Dialed, TransportError> {
        let (s, r) = h2::connect_sending(
            target.addr()?,
            self.tls.clone(),
            target.tls_name()?,
            Some(first_frame),
        )
        .await?;
        Ok(Dialed::without_0rtt(AnySender::H2(s), AnyReceiver::H2(r)))
    }
}

#[cfg(feature = "ws")]
/// WebSocket, over TLS 1.3 (`wss://`) or plain (`ws://`).
pub struct WsDial {
    /// Client TLS configuration offering ALPN `http/1.1`, or `None` for `ws://`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Liveness options.
    pub options: ws::WsOptions,
}

#[cfg(feature = "ws")]
impl Dial for WsDial {
    async fn dial(
        &self,
        target: &DialTarget,
        first_frame: Bytes,
    ) -> Result<Dialed, TransportError> {
        let tls = match &self.tls {
            Some(config) => Some((config.clone(), target.tls_name()?)),
            None => None,
        };
        let (s, r) = ws::connect(target.addr()?, &target.host, tls, self.options.clone()).await?;
        send_first(AnySender::Ws(s), AnyReceiver::Ws(r), first_frame).await
    }
}

#[cfg(feature = "unix")]
/// Unix domain sockets (same host, no TLS).
pub struct UnixDial;

#[cfg(feature = "unix")]
impl Dial for UnixDial {
    async fn dial(
        &self,
        target: &DialTarget,
        first_frame: Bytes,
    ) -> Result<Dialed, TransportError> {
        let path = target
            .path
            .as_ref()
            .ok_or_else(|| ConnectError::Config("no socket path to connect to".into()))?;
        let (s, r) = uds::connect(path).await?;
        send_first(AnySender::Stream(s), AnyReceiver::Stream(r), first_frame).await
    }
}
