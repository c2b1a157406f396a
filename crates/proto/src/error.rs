//! Numeric error codes, shared by every transport.
//!
//! A code closes a connection (QUIC application close, WebSocket close, a `Goodbye` frame),
//! rejects a handshake, or rides in an [`Kind::Error`](crate::Kind::Error) envelope's `code`
//! header. This module only names codes; it must not decide when to use them.

use std::fmt;

/// Why a connection, handshake or message failed. The numbers are part of the protocol.
///
/// ```
/// use agentwire_proto::ErrorCode;
/// assert_eq!(ErrorCode::FrameTooLarge.code(), 2);
/// assert_eq!(ErrorCode::from_code(2), Some(ErrorCode::FrameTooLarge));
/// assert_eq!(ErrorCode::FrameTooLarge.name(), "frame-too-large");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Orderly close, no error.
    Normal,
    /// The peer broke the protocol (wrong frame in a state, bad field).
    ProtocolViolation,
    /// A frame larger than the agreed maximum.
    FrameTooLarge,
    /// Bytes that do not decode as a frame or envelope (including an unknown kind).
    MalformedFrame,
    /// No protocol version in common.
    UnsupportedVersion,
    /// Missing or wrong auth token.
    Unauthorized,
    /// Another agent with this id is connected (and the hub's policy rejects newcomers).
    DuplicateAgentId,
    /// The agent missed too many heartbeats.
    LivenessTimeout,
    /// The handshake did not finish in time.
    HandshakeTimeout,
    /// A configured limit (headers, id length, streams, rate) was exceeded.
    LimitExceeded,
    /// The destination agent is not connected.
    UnknownAgent,
    /// The destination's bounded queue is full.
    QueueFull,
    /// The session was replaced by a newer connection with the same agent id.
    Replaced,
    /// The agent offered no codec the hub accepts.
    NoCommonCodec,
    /// A bug or resource failure inside the hub.
    Internal,
    /// The message's ttl ran out before delivery.
    Expired,
    /// The hub is shutting down.
    ShuttingDown,
    /// The agent id is empty, too long or contains control characters.
    InvalidAgentId,
    /// A request was cancelled or timed out.
    Cancelled,
}

impl ErrorCode {
    /// Every code, in numeric order.
    pub const ALL: [ErrorCode; 19] = [
        ErrorCode::Normal,
        ErrorCode::ProtocolViolation,
        ErrorCode::FrameTooLarge,
        ErrorCode::MalformedFrame,
        ErrorCode::UnsupportedVersion,
        ErrorCode::Unauthorized,
        ErrorCode::DuplicateAgentId,
        ErrorCode::LivenessTimeout,
        ErrorCode::HandshakeTimeout,
        ErrorCode::LimitExceeded,
        ErrorCode::UnknownAgent,
        ErrorCode::QueueFull,
        ErrorCode::Replaced,
        ErrorCode::NoCommonCodec,
        ErrorCode::Internal,
        ErrorCode::Expired,
        ErrorCode::ShuttingDown,
        ErrorCode::InvalidAgentId,
        ErrorCode::Cancelled,
    ];

    /// The number on the wire.
    pub fn code(self) -> u32 {
        ErrorCode::ALL.iter().position(|c| *c == self).unwrap_or(14) as u32
    }

    /// The code for a number, if it is one of ours.
    pub fn from_code(code: u32) -> Option<ErrorCode> {
        usize::try_from(code)
            .ok()
            .and_then(|i| ErrorCode::ALL.get(i).copied())
    }

    /// A stable kebab-case name, for logs, metrics labels and the `error` header.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Normal => "normal",
            ErrorCode::ProtocolViolation => "protocol-violation",
            ErrorCode::FrameTooLarge => "frame-too-large",
            ErrorCode::MalformedFrame => "malformed-frame",
            ErrorCode::UnsupportedVersion => "unsupported-version",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::DuplicateAgentId => "duplicate-agent-id",
            ErrorCode::LivenessTimeout => "liveness-timeout",
            ErrorCode::HandshakeTimeout => "handshake-timeout",
            ErrorCode::LimitExceeded => "limit-exceeded",
            ErrorCode::UnknownAgent => "unknown-agent",
            ErrorCode::QueueFull => "queue-full",
            ErrorCode::Replaced => "replaced",
            ErrorCode::NoCommonCodec => "no-common-codec",
            ErrorCode::Internal => "internal",
            ErrorCode::Expired => "expired",
            ErrorCode::ShuttingDown => "shutting-down",
            ErrorCode::InvalidAgentId => "invalid-agent-id",
            ErrorCode::Cancelled => "cancelled",
        }
    }

    /// The code for a name, if there is one.
    pub fn from_name(name: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.name() == name)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_dense_and_stable() {
        for (i, c) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(c.code() as usize, i);
            assert_eq!(ErrorCode::from_code(c.code()), Some(*c));
            assert_eq!(ErrorCode::from_name(c.name()), Some(*c));
        }
        assert_eq!(ErrorCode::from_code(19), None);
        assert_eq!(ErrorCode::from_code(u32::MAX), None);
        assert_eq!(ErrorCode::from_name("nope"), None);
        // Spot-check numbers that are part of the protocol.
        assert_eq!(ErrorCode::Normal.code(), 0);
        assert_eq!(ErrorCode::Unauthorized.code(), 5);
        assert_eq!(ErrorCode::NoCommonCodec.code(), 13);
        assert_eq!(ErrorCode::Internal.code(), 14);
        assert_eq!(ErrorCode::Cancelled.code(), 18);
        assert_eq!(ErrorCode::QueueFull.to_string(), "queue-full (11)");
    }
}
