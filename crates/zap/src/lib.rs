//! Zentinel Agent Protocol v2 over Unix sockets, on tokio: both sides.
//!
//! - [`server`]: write an agent: a [`server::Handler`] per event, run concurrently and
//!   cancellable, with flow control, health and metrics reports.
//! - [`client`]: the proxy's connection to one agent, multiplexing requests by correlation id.
//! - [`select`]: the choice of a connection from each candidate's load (pure).
//! - [`pool`]: connections to many agents, strategies, reconnects, a circuit breaker per
//!   agent, fail-open/closed/wait when an agent cannot take a request, draining, metrics.
//! - [`bench`]: the closed loop behind `agentwire agent-protocol bench`.
//!
//! The protocol itself (frames, messages, handshake, both sides' state machines) is the
//! sans-IO crate `agentwire-zap-proto`; this crate owns sockets, tasks and timers.

#![warn(missing_docs)]

pub mod bench;
pub mod client;
pub mod pool;
pub mod select;
pub mod server;

pub use agentwire_zap_proto as proto;

/// Milliseconds since the Unix epoch (0 if the clock is before it), for the timestamps the
/// protocol's messages carry.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
