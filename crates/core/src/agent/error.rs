//! What can go wrong for an agent, typed, each with the error underneath as its source.
//!
//! This module owns the errors' kinds and wording; it must not decide retries.

use std::sync::Arc;
use std::time::Duration;

use agentwire_proto::{ErrorCode, FrameError, HandshakeError};

use agentwire_transport::queue::QueueError;
use agentwire_transport::TransportError;

/// What can go wrong for an agent. Failures underneath (a transport error, the handshake's,
/// a TLS set-up error) are kept as the source.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// Bad options (an address, a name, a transport that cannot do what was asked).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The TLS settings could not be loaded or built (a certificate file, a pin).
    #[error("invalid configuration: {0}")]
    Tls(#[source] Arc<agentwire_tls::TlsError>),
    /// A hub URL does not parse.
    #[error("invalid configuration: {0}")]
    Url(#[source] agentwire_transport::UrlError),
    /// A hub's host name could not be resolved.
    #[error("cannot connect to the hub: {0}")]
    Resolve(#[source] Arc<agentwire_transport::ResolveError>),
    /// The connection could not be set up (network, TLS, QUIC).
    #[error("cannot connect to the hub: {0}")]
    Connect(#[source] TransportError),
    /// Several hub addresses were given and none worked.
    #[error("cannot connect to the hub: no hub address worked: {}", attempts_text(.0))]
    Unreachable(Vec<FailedAttempt>),
    /// The hub refused the handshake.
    #[error("the hub rejected this agent: {code}: {reason}")]
    Rejected {
        /// The hub's code.
        code: ErrorCode,
        /// The hub's reason.
        reason: String,
    },
    /// The handshake failed otherwise (the hub's answer did not fit, or never came).
    #[error("handshake failed: {0}")]
    Handshake(#[source] HandshakeError),
    /// No answer in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The connection is gone.
    #[error("disconnected: {0}")]
    Disconnected(#[source] TransportError),
    /// The hub or the peer answered with an error envelope.
    #[error("{code}: {reason}")]
    Remote {
        /// The code from the `code` header.
        code: ErrorCode,
        /// The body, as text.
        reason: String,
    },
    /// The message is larger than the agreed frame limit.
    #[error("message too large: {0}")]
    TooLarge(#[source] FrameError),
    /// The message could not be encoded in the session's codec.
    #[error("cannot encode the message: {0}")]
    Encode(#[source] agentwire_proto::CodecError),
}

/// One hub address that did not work, in [`AgentError::Unreachable`].
#[derive(Debug, Clone)]
pub struct FailedAttempt {
    /// The address.
    pub url: String,
    /// Why (`None`: no answer within the fallback timeout).
    pub error: Option<Box<AgentError>>,
    /// How long the attempt was given.
    pub waited: Duration,
}

fn attempts_text(attempts: &[FailedAttempt]) -> String {
    attempts
        .iter()
        .map(|a| match &a.error {
            Some(e) => format!("{}: {e}", a.url),
            None => format!("{}: no answer within {:?}", a.url, a.waited),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl From<agentwire_tls::TlsError> for AgentError {
    fn from(e: agentwire_tls::TlsError) -> Self {
        AgentError::Tls(Arc::new(e))
    }
}

impl From<QueueError> for AgentError {
    fn from(e: QueueError) -> Self {
        AgentError::Disconnected(TransportError::Closed {
            code: None,
            reason: e.to_string(),
        })
    }
}

impl From<TransportError> for AgentError {
    fn from(e: TransportError) -> Self {
        AgentError::Disconnected(e)
    }
}

/// The reason given when the connection ended without one.
pub(super) fn connection_ended() -> TransportError {
    TransportError::Closed {
        code: None,
        reason: "connection ended".into(),
    }
}
