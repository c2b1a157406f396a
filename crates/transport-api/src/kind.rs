//! Which transport a connection uses: the names logs, metrics and the CLI show.
//!
//! This module owns the list of transports; it must not know how any of them works.

use std::fmt;

/// Which transport a connection uses.
///
/// ```
/// use agentwire_transport_api::TransportKind;
/// assert_eq!(TransportKind::Quic.name(), "quic");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// QUIC (quinn + rustls), ALPN `agentwire/1`.
    Quic,
    /// HTTP/2 over TLS 1.3 (ALPN `h2`).
    Http2,
    /// WebSocket, `wss://` over TLS 1.3 or `ws://` for local use.
    WebSocket,
    /// Unix domain socket (same host, no TLS).
    Unix,
    /// WebTransport (HTTP/3, ALPN `h3`) on the hub's QUIC port: agents in web pages.
    WebTransport,
    /// Not a transport agents dial: an agent connected to another hub of the same cluster,
    /// stood in for on this hub (agentwire-cluster, over NATS). Its own hub checked its
    /// credentials and permissions.
    Cluster,
}

impl TransportKind {
    /// Every transport agents connect over.
    pub const ALL: [TransportKind; 4] = [
        TransportKind::Quic,
        TransportKind::Http2,
        TransportKind::WebSocket,
        TransportKind::Unix,
    ];

    /// Lowercase name for logs, metrics and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Quic => "quic",
            TransportKind::Http2 => "http2",
            TransportKind::WebSocket => "websocket",
            TransportKind::Unix => "unix",
            TransportKind::WebTransport => "webtransport",
            TransportKind::Cluster => "cluster",
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
