//! The transports' errors: what failed, typed, with the error underneath kept as its source
//! (as rustls's error enums do), so callers match on kinds and `source()` reaches the cause.
//!
//! This module only names failures; it must not decide what to do about them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agentwire_proto::{ErrorCode, FrameError};

/// The error underneath another, shareable so that errors stay `Clone`.
pub type ErrorSource = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong with a connection.
///
/// ```
/// use agentwire_transport_api::{ConnectError, TransportError};
/// use std::error::Error;
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
/// let e = TransportError::from(ConnectError::socket("cannot connect to 127.0.0.1:1", io));
/// assert_eq!(e.to_string(), "cannot connect to 127.0.0.1:1: refused");
/// // `Connect` is transparent: its source is the socket's error itself.
/// let cause = e.source().and_then(|c| c.downcast_ref::<std::io::Error>());
/// assert_eq!(cause.map(|io| io.kind()), Some(std::io::ErrorKind::ConnectionRefused));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum TransportError {
    /// The peer (or we) closed the connection, with an agentwire code where one was given.
    Closed {
        /// The agentwire close code, if the close carried one of ours.
        code: Option<ErrorCode>,
        /// What the close said.
        reason: String,
    },
    /// The peer sent bytes that are not valid frames.
    Frame(FrameError),
    /// A frame we were asked to send is larger than the peer accepts.
    TooLarge {
        /// The frame's length.
        len: usize,
        /// The agreed limit.
        max: u32,
    },
    /// Setting up the connection failed (its `source` is the failure underneath).
    Connect(ConnectError),
    /// Nothing happened within the allowed time.
    Timeout(Duration),
    /// Reading or writing an established connection failed.
    Io {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: ErrorSource,
    },
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Closed { reason, .. } => write!(f, "connection closed: {reason}"),
            TransportError::Frame(e) => write!(f, "bad frame from peer: {e}"),
            TransportError::TooLarge { len, max } => {
                write!(f, "frame of {len} bytes exceeds the peer's limit of {max}")
            }
            TransportError::Connect(e) => e.fmt(f),
            TransportError::Timeout(d) => write!(f, "timed out after {d:?}"),
            TransportError::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for TransportError {
    /// The error underneath, itself (not a wrapper of it), so that `downcast_ref` reaches it;
    /// for `Connect`, the set-up failure's own source.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TransportError::Frame(e) => Some(e),
            TransportError::Connect(e) => e.source(),
            TransportError::Io { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

impl From<FrameError> for TransportError {
    fn from(e: FrameError) -> Self {
        TransportError::Frame(e)
    }
}

impl From<ConnectError> for TransportError {
    fn from(e: ConnectError) -> Self {
        TransportError::Connect(e)
    }
}

impl TransportError {
    /// An I/O failure while doing `what`.
    pub fn io(what: &'static str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        TransportError::Io {
            what,
            source: Arc::new(source),
        }
    }

    /// The agentwire code to close the connection with after this error.
    pub fn close_code(&self) -> ErrorCode {
        match self {
            TransportError::Frame(e) => e.close_code(),
            TransportError::TooLarge { .. } => ErrorCode::FrameTooLarge,
            TransportError::Closed { code, .. } => code.unwrap_or(ErrorCode::Normal),
            TransportError::Timeout(_) => ErrorCode::HandshakeTimeout,
            _ => ErrorCode::Internal,
        }
    }
}

/// Why a connection (or a listener) could not be set up.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ConnectError {
    /// A socket could not be bound, connected, accepted or set up.
    Socket {
        /// What was being done, with the address.
        what: String,
        /// Why it failed (an `std::io::Error` in most cases).
        source: ErrorSource,
    },
    /// The TLS handshake failed: the hub's certificate, our trust in it, or the protocols
    /// offered. The text says which, in a sentence.
    Tls(rustls::Error),
    /// QUIC could not establish the connection.
    Quic {
        /// The peer's address.
        peer: String,
        /// quinn's reason (a `quinn::ConnectionError`).
        source: ErrorSource,
    },
    /// The peer answered, but not as an agentwire hub on this transport (an HTTP status, a
    /// refused upgrade or session).
    Refused {
        /// What was refused.
        what: String,
        /// The protocol's error.
        source: ErrorSource,
    },
    /// A qlog trace file could not be created or started.
    Trace {
        /// What was being done, with the path.
        what: String,
        /// Why it failed.
        source: ErrorSource,
    },
    /// The settings cannot work: a TLS configuration without the protocol this transport
    /// needs, a missing certificate, an address of the wrong kind, an invalid name.
    Config(String),
    /// QUIC settings quinn cannot use (the source is the settings' own error).
    Settings(ErrorSource),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Socket { what, source }
            | ConnectError::Refused { what, source }
            | ConnectError::Trace { what, source } => write!(f, "{what}: {source}"),
            ConnectError::Tls(e) => f.write_str(&agentwire_tls::describe_tls_error(e)),
            ConnectError::Quic { peer, source } => write!(f, "{peer}: {source}"),
            ConnectError::Config(what) => f.write_str(what),
            ConnectError::Settings(e) => write!(f, "invalid QUIC settings: {e}"),
        }
    }
}

impl std::error::Error for ConnectError {
    /// The error underneath, itself (not a wrapper of it), so that `downcast_ref` reaches it.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Socket { source, .. }
            | ConnectError::Refused { source, .. }
            | ConnectError::Trace { source, .. } => Some(&**source),
            ConnectError::Tls(e) => Some(e),
            ConnectError::Quic { source, .. } => Some(&**source),
            ConnectError::Config(_) => None,
            ConnectError::Settings(e) => Some(&**e),
        }
    }
}

impl ConnectError {
    /// QUIC could not establish the connection to `peer`.
    pub fn quic(
        peer: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ConnectError::Quic {
            peer: peer.into(),
            source: Arc::new(source),
        }
    }

    /// QUIC settings quinn cannot use.
    pub fn settings(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        ConnectError::Settings(Arc::new(source))
    }

    /// A socket failure while doing `what`.
    pub fn socket(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ConnectError::Socket {
            what: what.into(),
            source: Arc::new(source),
        }
    }

    /// A failed TLS handshake as tokio-rustls reports it: the rustls error inside the I/O
    /// error when there is one (our check of the hub's certificate, an alert), otherwise the
    /// socket failure while doing `what`.
    pub fn tls_handshake(what: impl Into<String>, e: std::io::Error) -> Self {
        match e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            Some(tls) => ConnectError::Tls(tls.clone()),
            None => ConnectError::socket(what, e),
        }
    }

    /// The peer refused `what`; when a TLS alert or certificate check underneath is the
    /// reason (TLS 1.3 servers refuse a client certificate after the client's handshake has
    /// completed, so it shows up in the first read), that TLS error.
    pub fn refused(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        if let Some(tls) = tls_cause(&source) {
            return ConnectError::Tls(tls);
        }
        ConnectError::Refused {
            what: what.into(),
            source: Arc::new(source),
        }
    }
}

/// The rustls error in `e`'s chain of sources, looking inside I/O errors too (whose
/// `source()` skips the error they wrap). (h2 keeps only the text of an I/O error.)
fn tls_cause(e: &(dyn std::error::Error + 'static)) -> Option<rustls::Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls.clone());
        }
        if let Some(tls) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls.clone());
        }
        next = err.source();
    }
    None
}
