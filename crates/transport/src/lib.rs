//! Transports: QUIC, HTTP/2, WebSocket and Unix sockets, each behind a cargo feature of the
//! same name (`quic`, `h2`, `ws`, `unix`; all on by default), implementing the traits of
//! `agentwire-transport-api` (re-exported here under the same names).
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

#[cfg(not(any(feature = "quic", feature = "h2", feature = "ws", feature = "unix")))]
compile_error!(
    "agentwire-transport needs at least one of its features quic, h2, ws and unix \
     (the traits alone are agentwire-transport-api)"
);

pub mod accept_gate;
pub mod any;
#[doc(hidden)]
pub mod clock;
pub mod dial;
#[cfg(any(feature = "ws", feature = "unix", feature = "wt"))]
pub mod frame_writer;
#[cfg(feature = "h2")]
pub mod h2;
pub mod hello_gate;
pub mod listen;
pub mod origin;
#[cfg(feature = "quic")]
pub mod qlog;
pub mod queue;
#[cfg(feature = "quic")]
pub mod quic;
#[cfg(feature = "quic")]
pub mod quic_backlog;
#[cfg(feature = "quic")]
pub mod quic_budget;
#[cfg(feature = "quic")]
pub mod quic_inbound;
#[cfg(feature = "quic")]
pub mod quic_socket;
#[cfg(feature = "quic")]
mod quic_streams_read;
pub mod rate;
pub mod read_ahead;
pub mod settings;
#[cfg(any(feature = "ws", feature = "unix", feature = "wt"))]
pub mod stream;
#[cfg(any(feature = "h2", feature = "ws", feature = "unix"))]
pub mod stream_listen;
#[cfg(feature = "h2")]
mod tls_alert;
#[cfg(feature = "unix")]
pub mod uds;
pub mod url;
mod write_through;
#[cfg(feature = "ws")]
pub mod ws;
#[cfg(feature = "wt")]
pub mod wt;

pub use agentwire_transport_api::{
    check_outgoing, error_chain, ConnectError, ConnectionControl, ConnectionStats, ErrorSource,
    FrameReceiver, FrameSender, ReplySlot, SendClass, TransportError, TransportKind,
};
pub use settings::{CongestionControl, QuicSettings, SettingsError, SocketBuffers, StreamMapping};
pub use url::{HubUrl, ResolveError, UrlError};
