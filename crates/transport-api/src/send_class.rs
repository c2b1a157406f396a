//! How a frame travels: control, heartbeat, message or request, with its priority.
//!
//! This module owns the classes; how each maps onto streams or datagrams is the transport's.

use agentwire_proto::Priority;

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
