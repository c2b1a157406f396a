//! Transports: one trait for "a connection that carries agentwire frames", and its adapters.
//!
//! A transport moves whole, already-encoded frames (see `agentwire_proto::frame`) between an
//! agent and the hub and reports what the network is doing (RTT, losses, bytes). It owns
//! stream mapping, priorities on the wire and liveness plumbing (e.g. QUIC datagrams); it must
//! not route messages, interpret envelopes or run the handshake logic: the hub and the agent
//! do that on top, identically for every transport.
//!
//! A connection is used as two halves: a [`FrameSender`] (cloneable; used by the writer task
//! and by whoever needs to close the connection) and a [`FrameReceiver`] (owned by one reader
//! task). The first frame each way is the handshake, sent with [`SendClass::Control`].
//!
//! Beside the transports this crate holds what both the agent side and the hub use to set
//! them up: [`settings`] (QUIC tuning), [`url`] (`quic://`, `h2://`, ...), [`qlog`], the
//! bounded priority [`queue`] every connection's writer takes from, and a token [`rate`].
//! It must not depend on the hub or the agent API (`agentwire`): they depend on it.

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod accept_gate;
pub mod any;
#[doc(hidden)]
pub mod clock;
pub mod dial;
mod error;
mod error_text;
pub mod frame_writer;
pub mod h2;
pub mod hello_gate;
pub mod listen;
pub mod qlog;
pub mod queue;
pub mod quic;
pub mod quic_backlog;
pub mod quic_budget;
pub mod quic_inbound;
pub mod quic_socket;
mod quic_streams_read;
pub mod rate;
pub mod read_ahead;
pub mod settings;
pub mod stream;
pub mod stream_listen;
mod tls_alert;
pub mod uds;
pub mod url;
mod write_through;
pub mod ws;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;

use agentwire_proto::{ErrorCode, Priority, RawFrame};

use bytes::Bytes;
pub use error::{ConnectError, ErrorSource, TransportError};
pub use error_text::error_chain;
pub use settings::{CongestionControl, QuicSettings, SettingsError, SocketBuffers, StreamMapping};
pub use url::{HubUrl, ResolveError, UrlError};

/// Which transport a connection uses.
///
/// ```
/// use agentwire_transport::TransportKind;
/// assert_eq!(TransportKind::Quic.name(), "quic");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// QUIC (quinn + rustls), ALPN `agentwire/1`.
    Quic,
    /// HTTP/2 over TLS 1.3 (ALPN `h2`).
    Http2,
    /// WebSocket, `wss://` over TLS 1.3 or `ws://` for local use.
    WebSocket,
    /// Unix domain socket (same host, no TLS).
    Unix,
    /// Not a transport agents dial: an agent connected to another hub of the same cluster,
    /// stood in for on this hub (agentwire-cluster, over NATS). Its own hub checked its
    /// credentials and permissions.
    Cluster,
}

impl TransportKind {
    /// Every transport agents connect over.
    pub const ALL: [TransportKind; 4] = [
        TransportKind::Quic,
        TransportKind::Http2,
        TransportKind::WebSocket,
        TransportKind::Unix,
    ];

    /// Lowercase name for logs, metrics and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Quic => "quic",
            TransportKind::Http2 => "http2",
            TransportKind::WebSocket => "websocket",
            TransportKind::Unix => "unix",
            TransportKind::Cluster => "cluster",
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a frame travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendClass {
    /// Handshake, subscriptions, goodbye: in order, on the control channel.
    Control,
    /// Liveness beats: unreliable where the transport has datagrams, else the control channel.
    Heartbeat,
    /// An envelope of this priority class.
    Message(Priority),
    /// A request envelope: where the transport can, its answer comes back on the same stream
    /// (QUIC, `per-message` mapping: a bidirectional stream); elsewhere like `Message`.
    Request(Priority),
}

impl SendClass {
    /// The priority class of a message or request (control and heartbeats count as critical).
    pub fn priority(self) -> Priority {
        match self {
            SendClass::Message(p) | SendClass::Request(p) => p,
            SendClass::Control | SendClass::Heartbeat => Priority::Critical,
        }
    }
}

/// Where the answer to one received request can be written (on QUIC, the request's own
/// bidirectional stream). Obtained from [`FrameReceiver::take_reply_slot`] right after the
/// request frame was received, used with [`FrameSender::send_reply`]. Dropping it unused
/// simply ends what it holds; the answer then travels like any other message.
///
/// The slot is neutral: it names no transport. The transport that made it puts in whatever
/// its replies need ([`ReplySlot::new`]) and alone takes it out again ([`ReplySlot::take`]);
/// any other transport finds nothing it knows in it and sends the answer the ordinary way.
pub struct ReplySlot {
    inner: Box<dyn std::any::Any + Send>,
    transport: TransportKind,
}

impl ReplySlot {
    /// `handle` as the reply slot of a request received over `transport`.
    pub(crate) fn new<T: std::any::Any + Send>(transport: TransportKind, handle: T) -> Self {
        ReplySlot {
            inner: Box::new(handle),
            transport,
        }
    }

    /// The handle inside, if it is a `T` (that is, if the slot came from the transport that
    /// puts a `T` in).
    pub(crate) fn take<T: std::any::Any>(self) -> Option<T> {
        self.inner.downcast::<T>().ok().map(|b| *b)
    }
}

impl fmt::Debug for ReplySlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReplySlot({})", self.transport)
    }
}

/// A snapshot of a connection's network-level counters. Fields a transport cannot know are 0.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ConnectionStats {
    /// Transport name.
    pub transport: &'static str,
    /// Peer address.
    pub remote_addr: Option<SocketAddr>,
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u64,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// Packets declared lost.
    pub lost_packets: u64,
    /// Bytes declared lost.
    pub lost_bytes: u64,
    /// Packets sent.
    pub sent_packets: u64,
    /// UDP/TCP payload bytes sent.
    pub bytes_sent: u64,
    /// UDP/TCP payload bytes received.
    pub bytes_received: u64,
    /// Streams this side opened.
    pub streams_opened: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Requests sent on streams of their own that carry the answer back (QUIC).
    pub request_streams: u64,
    /// Answers written on the stream their request arrived on (QUIC).
    pub replies_on_request_streams: u64,
    /// Current path MTU, bytes.
    pub mtu: u16,
    /// Congestion events.
    pub congestion_events: u64,
}

/// The sending half of a connection.
pub trait FrameSender: Clone + Send + Sync + 'static {
    /// Sends one encoded frame (length prefix included). Returns once the transport has taken
    /// the bytes (not when the peer has them); waits while the transport's buffers are full.
    fn send_frame(
        &self,
        frame: Bytes,
        class: SendClass,
    ) -> impl Future<Output = Result<(), TransportError>> + Send;

    /// Sends the answer to a received request on its reply slot; transports without reply
    /// slots (or a slot that no longer works) send it as an ordinary message.
    fn send_reply(
        &self,
        frame: Bytes,
        priority: Priority,
        slot: ReplySlot,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        drop(slot);
        self.send_frame(frame, SendClass::Message(priority))
    }

    /// Sends a frame that more frames follow at once. A transport that writes a byte stream
    /// may hold it until [`flush`](FrameSender::flush), so that several frames go out in one
    /// TLS record and one system call; the others send it as [`send_frame`] does.
    ///
    /// [`send_frame`]: FrameSender::send_frame
    fn feed_frame(
        &self,
        frame: Bytes,
        class: SendClass,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        self.send_frame(frame, class)
    }

    /// Resolves once the peer has acknowledged everything sent so far, so that a frame sent
    /// next (a goodbye) cannot overtake it. Byte-stream transports deliver in order and
    /// resolve at once; QUIC, whose messages travel on streams of their own, waits for their
    /// acknowledgements where the connection keeps track of them (agents' connections do).
    fn delivered(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Writes out what [`feed_frame`](FrameSender::feed_frame) held back.
    fn flush(&self) -> impl Future<Output = Result<(), TransportError>> + Send {
        async { Ok(()) }
    }

    /// Sets the largest frame the peer accepts (after the handshake).
    fn set_peer_max_frame_size(&self, max: u32);

    /// The peer understands counted goodbyes (both offered
    /// `agentwire_proto::counted_goodbye::CAPABILITY`): a transport that sends messages on
    /// streams other than its goodbye's (QUIC) names how many it opened in its goodbye, so
    /// that the peer passes the goodbye on only after them. Others ignore it.
    fn count_streams_in_goodbye(&self) {}

    /// The hub accepted the peer's hello: a transport that held the peer to a small window
    /// before it (QUIC, `quic::PRE_HELLO_WINDOW`) opens it now. Others ignore it.
    fn hello_accepted(&self) {}

    /// Closes the connection with a code and a reason; pending frames may be lost.
    fn close(&self, code: ErrorCode, reason: &str);

    /// Resolves when the connection is closed, by either side.
    fn closed(&self) -> impl Future<Output = TransportError> + Send;

    /// Network counters.
    fn stats(&self) -> ConnectionStats;

    /// The transport in use.
    fn kind(&self) -> TransportKind;
}

/// The receiving half of a connection.
pub trait FrameReceiver: Send + 'static {
    /// The next whole frame, `Ok(None)` at an orderly end, or an error that ends the
    /// connection (a malformed or oversized frame, a reset, a timeout).
    fn recv_frame(
        &mut self,
    ) -> impl Future<Output = Result<Option<RawFrame>, TransportError>> + Send;

    /// Sets the largest frame accepted from the peer (after the handshake).
    fn set_max_frame_size(&mut self, max: u32);

    /// The reply slot of the frame [`recv_frame`](FrameReceiver::recv_frame) returned last,
    /// if that frame arrived as a request on a stream that can carry its answer.
    fn take_reply_slot(&mut self) -> Option<ReplySlot> {
        None
    }
}

/// Closing and inspecting a connection without knowing its transport (what the hub keeps of
/// each connection besides its writer).
pub trait ConnectionControl: Send + Sync {
    /// Closes the connection with a code.
    fn close(&self, code: ErrorCode, reason: &str);
    /// Network counters.
    fn stats(&self) -> ConnectionStats;
    /// Sets the largest frame the peer accepts (after the handshake).
    fn set_peer_frame_limit(&self, max: u32);
    /// See [`FrameSender::count_streams_in_goodbye`].
    fn count_streams_in_goodbye(&self);
    /// See [`FrameSender::hello_accepted`].
    fn hello_accepted(&self);
}

impl<S: FrameSender> ConnectionControl for S {
    fn close(&self, code: ErrorCode, reason: &str) {
        FrameSender::close(self, code, reason)
    }
    fn stats(&self) -> ConnectionStats {
        FrameSender::stats(self)
    }
    fn set_peer_frame_limit(&self, max: u32) {
        FrameSender::set_peer_max_frame_size(self, max)
    }
    fn count_streams_in_goodbye(&self) {
        FrameSender::count_streams_in_goodbye(self)
    }
    fn hello_accepted(&self) {
        FrameSender::hello_accepted(self)
    }
}

/// Checks an outgoing frame against the peer's limit (the 4-byte length prefix excluded).
pub(crate) fn check_outgoing(frame: &Bytes, peer_max: u32) -> Result<(), TransportError> {
    let len = frame
        .len()
        .saturating_sub(agentwire_proto::FRAME_HEADER_LEN);
    if len > peer_max as usize {
        return Err(TransportError::TooLarge { len, max: peer_max });
    }
    Ok(())
}

#[cfg(test)]
mod reply_slot_tests {
    use super::*;

    #[test]
    fn only_the_transport_that_filled_a_reply_slot_finds_its_handle() {
        let slot = ReplySlot::new(TransportKind::Quic, 7u64);
        assert_eq!(format!("{slot:?}"), "ReplySlot(quic)");
        assert_eq!(slot.take::<u64>(), Some(7));
        let slot = ReplySlot::new(TransportKind::Quic, 7u64);
        assert_eq!(
            slot.take::<String>(),
            None,
            "another transport's handle type finds nothing"
        );
    }
}
