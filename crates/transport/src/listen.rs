//! Listeners: where a hub's connections come from, one kind per transport, behind one trait.
//!
//! A [`Listen`] hands out one set-up per incoming connection (TLS, ALPN, the transport's own
//! handshake: QUIC's control stream, HTTP/2's session stream, the WebSocket upgrade); the
//! caller runs each set-up on a task of its own, so a slow peer never holds up the next. This
//! module owns the trait and the TCP and Unix-socket listeners (the QUIC one lives with the
//! QUIC transport); it must not run the agentwire handshake or route anything: that is the
//! hub's, on the [`FrameSender`]/[`FrameReceiver`] halves an [`Accepted`] carries.

use std::future::Future;
use std::pin::Pin;

use super::hello_gate::HelloGate;
use super::{FrameReceiver, FrameSender, TransportError};

/// A connection a listener accepted, ready for the hub's handshake.
pub struct Accepted<S, R> {
    /// Sending half.
    pub sender: S,
    /// Receiving half.
    pub receiver: R,
    /// The peer's first frame arrived as QUIC 0-RTT data.
    pub zero_rtt: bool,
    /// The peer's verified client certificate (mutual TLS), if it presented one: the agent
    /// id it names, and what the hub checks again at the hello and after a reload.
    pub certificate: Option<agentwire_tls::AgentCertificate>,
    /// For a TCP connection: the limit on what it may send before its hello, which the hub
    /// opens once it accepts the hello.
    pub hello_gate: Option<HelloGate>,
}

/// A connection that could not be set up.
#[derive(Debug)]
pub struct AcceptFailed {
    /// Which stage failed, as the hub's handshake metrics label it (`quic`, `tls`, `http2`,
    /// `websocket`).
    pub stage: &'static str,
    /// What went wrong.
    pub error: TransportError,
}

/// One incoming connection's set-up, run by the caller on a task of its own.
pub type Setup<S, R> = Pin<Box<dyn Future<Output = Result<Accepted<S, R>, AcceptFailed>> + Send>>;

/// A source of connections for a hub.
pub trait Listen: Send + 'static {
    /// The sending half of the connections it makes.
    type Sender: FrameSender;
    /// The receiving half.
    type Receiver: FrameReceiver;

    /// The next incoming connection's set-up; `None` once the listener is closed.
    fn accept(
        &mut self,
    ) -> impl Future<Output = Option<Setup<Self::Sender, Self::Receiver>>> + Send;
}
