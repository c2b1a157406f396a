//! Zentinel Agent Protocol v2, binary Unix-socket transport, sans-IO.
//!
//! A reverse proxy hands every HTTP request to external agents (WAF, auth, rate limits, LLM
//! guardrails) over this protocol. This crate speaks it compatibly with the reference crate
//! (`zentinel-agent-protocol` 0.6.45, module `v2::uds`; the wire format is unchanged up to
//! 0.6.54), with test vectors the reference produced (committed in the `agentwire-zap` crate's
//! `tests/vectors/`, checked by its `zentinel_vectors` tests):
//!
//! - [`frame`]: 4-byte big-endian length (type byte + payload, at most 16 MiB), type byte,
//!   payload;
//! - [`encoding`]: JSON or MessagePack (structs as maps), chosen at the handshake;
//! - [`handshake`]: versions, encodings offered and chosen, capabilities;
//! - [`messages`]: every payload; [`event`]: the events as one enum;
//! - [`agent::AgentSession`] and [`proxy::ProxySession`]: each side of one connection as a
//!   state machine that takes bytes (and, on the proxy side, time) and returns events and
//!   bytes.
//!
//! Where this crate differs from the reference on purpose (each has a test): body bytes stay
//! bytes and an undecodable event fails closed; an event is answered by the id it carries;
//! a protocol error is reported in a frame before the connection is dropped; a JSON Ping (and
//! Cancel) on a MessagePack connection is accepted, as the reference proxy sends them.
//!
//! This crate owns the protocol; it must not do I/O, read clocks or spawn tasks (the
//! `agentwire-zap` crate drives it over sockets).

#![warn(missing_docs)]

pub mod agent;
pub mod encoding;
pub mod event;
mod fast_read;
mod fast_write;
pub mod frame;
pub mod handshake;
pub mod messages;
pub mod proxy;
pub mod text;

pub use encoding::{CodecError, Encoding};
pub use event::{recover_correlation_id, BodyWire, Event};
pub use frame::{encode_frame, Frame, FrameDecoder, FrameError, MessageType, MAX_FRAME_LEN};
pub use handshake::{
    negotiate, Capabilities, EventKind, Features, HandshakeRequest, HandshakeResponse, Limits,
    PROTOCOL_VERSION,
};
pub use messages::AgentResponse;
