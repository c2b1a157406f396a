//! The contract of an agentwire transport: what "a connection that carries agentwire frames"
//! promises, without any transport in it.
//!
//! A transport moves whole, already-encoded frames (see `agentwire_proto::frame`) between an
//! agent and the hub and reports what the network is doing (RTT, losses, bytes). A connection
//! is used as two halves: a [`FrameSender`] (cloneable; used by the writer task and by whoever
//! needs to close the connection) and a [`FrameReceiver`] (owned by one reader task). The
//! first frame each way is the handshake, sent with [`SendClass::Control`].
//!
//! This crate owns the traits, the [`SendClass`] of a frame, the neutral [`ReplySlot`], the
//! [`ConnectionStats`] snapshot and the transports' errors ([`TransportError`],
//! [`ConnectError`]). It must not implement a transport, open a socket or route anything: the
//! transports (QUIC, HTTP/2, WebSocket, Unix sockets) live in `agentwire-transport`, each
//! behind a cargo feature, and whatever else carries frames (a cluster's stand-ins, a test's
//! in-memory pair) implements the same traits. `agentwire-transport` re-exports everything
//! here under the same names.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod error_text;
mod kind;
mod reply_slot;
mod send_class;
mod stats;
mod traits;

pub use error::{ConnectError, ErrorSource, TransportError};
pub use error_text::error_chain;
pub use kind::TransportKind;
pub use reply_slot::ReplySlot;
pub use send_class::SendClass;
pub use stats::ConnectionStats;
pub use traits::{check_outgoing, ConnectionControl, FrameReceiver, FrameSender};
