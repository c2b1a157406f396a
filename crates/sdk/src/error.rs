//! Errors as the bindings raise them: a kind (one exception class per kind), the protocol's
//! error code where there is one, and a sentence.

use agentwire::{AgentError, ErrorCode};

/// Which exception a binding raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad arguments or options (a binding raises a `ValueError`/`TypeError`-like error).
    Config,
    /// The hub could not be reached, or TLS failed.
    Connect,
    /// The hub refused the handshake (the code says why: `unauthorized`, `duplicate-agent-id`…).
    Rejected,
    /// The hub or the peer answered with an error (the code says which).
    Remote,
    /// No answer in time.
    Timeout,
    /// The connection is gone, or the agent was closed.
    Closed,
    /// The message is larger than the hub accepts.
    TooLarge,
    /// Anything else (a bug, or the system refusing resources).
    Internal,
}

impl ErrorKind {
    /// The kind's name, as the bindings' exception classes are named (`ConnectError`, …).
    ///
    /// ```
    /// assert_eq!(agentwire_sdk::ErrorKind::Rejected.class_name(), "RejectedError");
    /// ```
    pub fn class_name(self) -> &'static str {
        match self {
            ErrorKind::Config => "ConfigError",
            ErrorKind::Connect => "ConnectError",
            ErrorKind::Rejected => "RejectedError",
            ErrorKind::Remote => "RemoteError",
            ErrorKind::Timeout => "TimeoutError",
            ErrorKind::Closed => "ClosedError",
            ErrorKind::TooLarge => "TooLargeError",
            ErrorKind::Internal => "AgentwireError",
        }
    }
}

/// An error a binding hands to its caller.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct SdkError {
    /// Which exception to raise.
    pub kind: ErrorKind,
    /// The protocol's error code (`unauthorized`, `unknown-agent`, …), where there is one.
    pub code: Option<ErrorCode>,
    /// What went wrong, in a sentence (causes included).
    pub message: String,
}

impl SdkError {
    /// An error of `kind` without a protocol code.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        SdkError {
            kind,
            code: None,
            message: message.into(),
        }
    }

    /// A bad argument.
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }

    /// The code's number (as on the wire), if there is a code.
    pub fn code_number(&self) -> Option<u32> {
        self.code.map(ErrorCode::code)
    }

    /// The code's name (`unauthorized`), if there is a code.
    pub fn code_name(&self) -> Option<&'static str> {
        self.code.map(ErrorCode::name)
    }
}

impl From<AgentError> for SdkError {
    fn from(e: AgentError) -> Self {
        let message = agentwire::error_chain(&e);
        let (kind, code) = match &e {
            AgentError::Config(_)
            | AgentError::Tls(_)
            | AgentError::Url(_)
            | AgentError::Encode(_) => (ErrorKind::Config, None),
            AgentError::Connect(_)
            | AgentError::Resolve(_)
            | AgentError::Unreachable(_)
            | AgentError::Handshake(_) => (ErrorKind::Connect, None),
            AgentError::Rejected { code, .. } => (ErrorKind::Rejected, Some(*code)),
            AgentError::Remote { code, .. } => (ErrorKind::Remote, Some(*code)),
            AgentError::Timeout(_) => (ErrorKind::Timeout, None),
            AgentError::Disconnected(_) => (ErrorKind::Closed, None),
            AgentError::TooLarge(_) => (ErrorKind::TooLarge, Some(ErrorCode::FrameTooLarge)),
            // An error the agent API adds later crosses as internal until it is named here.
            _ => (ErrorKind::Internal, None),
        };
        SdkError {
            kind,
            code,
            message,
        }
    }
}

impl From<agentwire::tls::TlsError> for SdkError {
    fn from(e: agentwire::tls::TlsError) -> Self {
        SdkError::config(agentwire::error_chain(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_errors_keep_their_code_and_kind() {
        let e = SdkError::from(AgentError::Rejected {
            code: ErrorCode::Unauthorized,
            reason: "no credential".into(),
        });
        assert_eq!(e.kind, ErrorKind::Rejected);
        assert_eq!(e.code_name(), Some("unauthorized"));
        assert_eq!(e.code_number(), Some(ErrorCode::Unauthorized.code()));
        assert!(e.message.contains("no credential"));
        let e = SdkError::from(AgentError::Timeout(std::time::Duration::from_secs(1)));
        assert_eq!((e.kind, e.code), (ErrorKind::Timeout, None));
    }
}
