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

use super::any::{AnyReceiver, AnySender};
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

mod endpoint;
pub mod signal;
pub use endpoint::*;
mod error;
pub use error::*;
mod sender;
pub use sender::*;
mod receiver;
pub use receiver::*;
mod streams;
use streams::*;
mod listen;
pub use listen::*;
mod config;
mod dial;
pub use dial::*;
mod udp;

/// Bytes of partially received frames one connection may hold across all its streams before
/// it is closed with `limit-exceeded` (guards against a peer opening many streams and never
/// finishing them).
pub const DEFAULT_MAX_BUFFERED_BYTES: usize = 64 * 1024 * 1024;

/// Frames queued between the stream readers and the consumer of one connection. Beyond it,
/// each stream reader holds at most one whole frame while it waits (admitted in the order
/// the peer opened the streams, see [`quic_inbound`]), so memory held for one connection is
/// bounded by (this + concurrent streams) × max frame size, plus the partial-frame budget.
const INBOUND_QUEUE: usize = 32;

pub use crate::settings::PRE_HELLO_WINDOW;

/// New connections quinn holds while the listener waits (at its accept limits); beyond, quinn
/// refuses them. As many as the TCP listeners' kernel backlog
/// ([`LISTEN_BACKLOG`](crate::stream_listen::LISTEN_BACKLOG)).
pub const INCOMING_QUEUE: usize = 4096;

/// Bytes of first packets (0-RTT data) quinn holds for the connections waiting in
/// [`INCOMING_QUEUE`], all together (one connection at most a sixteenth of it).
pub const INCOMING_QUEUE_BYTES: u64 = 16 << 20;

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
    split(conn, control, mapping, datagrams, max_in, None)
}

/// [`split_connection`] for a WebTransport session on `conn`: every stream this side opens
/// starts with the session's signal, every stream the peer opens must (others, such as a
/// browser's QPACK streams, are kept open and drained); with `datagrams`, heartbeats ride
/// the session's datagrams (each opened with its quarter stream id). `control` is the
/// session's first bidirectional stream, its signal already read or written.
pub fn split_session(
    conn: Connection,
    control: (SendStream, RecvStream),
    mapping: StreamMapping,
    datagrams: bool,
    max_in: u32,
    signal: signal::SessionSignal,
) -> (QuicSender, QuicReceiver) {
    split(conn, control, mapping, datagrams, max_in, Some(signal))
}

fn split(
    conn: Connection,
    control: (SendStream, RecvStream),
    mapping: StreamMapping,
    datagrams: bool,
    max_in: u32,
    signal: Option<signal::SessionSignal>,
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
        session: signal.as_ref().map(|s| s.session_id),
    };
    tokio::spawn(
        reader
            .clone()
            .pump(control_recv, None, None, Vec::new(), Counted::No),
    );
    tokio::spawn(accept_loop(conn.clone(), reader.clone(), tx));
    let sender = QuicSender {
        inner: Arc::new(SenderInner {
            batch_limit: AtomicUsize::new(sender::batch_limit(conn.stats().path.current_mtu)),
            conn,
            control: Mutex::new(control_send),
            lanes: Default::default(),
            mapping,
            datagrams,
            peer_max: AtomicU32::new(limits.max_frame_size),
            streams_opened: AtomicU64::new(1),
            datagrams_sent: AtomicU64::new(0),
            replies_on_request_streams: AtomicU64::new(0),
            reader,
            admission: std::sync::Mutex::new(None),
            window_after_hello: AtomicU64::new(0),
            sent: std::sync::OnceLock::new(),
            count_goodbye: std::sync::atomic::AtomicBool::new(false),
            signal,
            batch: std::sync::Mutex::new(sender::Batch::default()),
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
