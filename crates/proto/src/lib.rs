//! # agentwire-proto — the sans-IO protocol core of agentwire
//!
//! This crate owns everything about agentwire's bytes on the wire and nothing about how they
//! travel: the [`Envelope`] every agent message is carried in, the length-prefixed
//! [frames](frame) that carry envelopes and control messages, the two [codecs](Codec)
//! (MessagePack by default, JSON as an option), the [handshake](handshake) state machines that
//! negotiate version, codec and limits, the [`Limits`] both sides enforce and the numeric
//! [`ErrorCode`]s a connection is closed with.
//!
//! It must not do I/O: no sockets, no tokio, no clocks it reads by itself (callers pass time
//! in). Every function is a pure transformation or a small state machine, so it can be tested
//! exhaustively and fuzzed. Transports (QUIC, HTTP/2, WebSocket, Unix sockets) live in the
//! `agentwire` crate and adapt this core to real I/O.
//!
//! Decoding never panics: malformed, truncated or oversized input is a typed error.
//!
//! ```
//! use agentwire_proto::{Codec, Destination, Envelope, Frame, FrameDecoder, Kind, Limits};
//!
//! let env = Envelope::new(1, "coordinator", Destination::agent("worker-1"), Kind::Task)
//!     .with_body(&b"resize image 17"[..]);
//! let bytes = Frame::Envelope(env.clone()).encode(Codec::MsgPack).unwrap();
//!
//! let mut decoder = FrameDecoder::new(Limits::default().max_frame_size);
//! decoder.push(&bytes);
//! let raw = decoder.next_frame().unwrap().expect("one whole frame");
//! assert_eq!(Frame::decode(&raw, Codec::MsgPack).unwrap(), Frame::Envelope(env));
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod codec;
pub mod counted_goodbye;
mod envelope;
mod error;
pub mod frame;
pub mod handshake;
mod hello;
mod limits;
pub mod names;
mod unknown_name;
mod view;
mod wire_read;

pub use codec::{Codec, CodecError};
pub use envelope::{Destination, EmptyDestination, Envelope, Kind, Priority};
pub use error::ErrorCode;
pub use frame::{
    Consume, Frame, FrameDecoder, FrameError, FrameType, Goodbye, Heartbeat, Nack, RawFrame,
    FRAME_HEADER_LEN,
};
pub use handshake::{
    AgentHandshake, HandshakeError, Hello, HubDecision, HubHandshake, HubPolicy, Reject, Session,
    Welcome, MAX_HELLO_FRAME, PROTOCOL_VERSION,
};
pub use limits::{LimitError, Limits};
pub use unknown_name::UnknownName;
pub use view::{DestinationRef, EnvelopeView};
