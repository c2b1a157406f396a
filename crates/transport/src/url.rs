//! Hub addresses: `quic://host:port`, `h2://host:port`, `wss://host:port`, `ws://host:port`,
//! `unix:///path/to/socket`, and `auto://host:port` (QUIC, then HTTP/2, then WebSocket on the
//! same host and port).
//!
//! This module owns parsing and resolving hub URLs; it must not connect.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use crate::TransportKind;

/// Where a hub listens, or where an agent connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubEndpoint {
    /// A network address (host name or IP literal, IPv6 without brackets) and port.
    Net {
        /// Host name or IP literal.
        host: String,
        /// Port.
        port: u16,
    },
    /// A Unix socket path.
    Path(PathBuf),
}

/// A parsed hub address.
///
/// ```
/// use agentwire_transport::{HubUrl, TransportKind};
/// let u = HubUrl::parse("quic://127.0.0.1:4433").unwrap();
/// assert_eq!(u.transport, TransportKind::Quic);
/// assert_eq!(u.host(), Some("127.0.0.1"));
/// assert_eq!(HubUrl::parse("wss://[::1]:8443").unwrap().port(), Some(8443));
/// assert!(!HubUrl::parse("ws://localhost:80").unwrap().tls);
/// assert_eq!(HubUrl::parse("unix:///run/aw.sock").unwrap().transport, TransportKind::Unix);
/// assert_eq!(HubUrl::parse_list("auto://127.0.0.1:4433").unwrap().len(), 3);
/// assert!(HubUrl::parse("quic://nohost").is_err());
/// assert!(HubUrl::parse("ftp://h:1").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubUrl {
    /// Which transport the scheme names.
    pub transport: TransportKind,
    /// Whether the transport runs over TLS (`ws://` and `unix://` do not).
    pub tls: bool,
    /// Where.
    pub endpoint: HubEndpoint,
}

impl HubUrl {
    /// Parses one URL (not `auto://`, which names several: see [`HubUrl::parse_list`]).
    pub fn parse(url: &str) -> Result<HubUrl, UrlError> {
        let owned = || url.to_owned();
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| UrlError::NoScheme { url: owned() })?;
        let (transport, tls) = match scheme {
            "quic" => (TransportKind::Quic, true),
            "h2" | "https" => (TransportKind::Http2, true),
            "wss" => (TransportKind::WebSocket, true),
            "ws" => (TransportKind::WebSocket, false),
            "unix" => (TransportKind::Unix, false),
            // A WebTransport session on the hub's QUIC port, as a page opens one.
            "wt" => (TransportKind::WebTransport, true),
            "auto" => return Err(UrlError::Several { url: owned() }),
            other => {
                return Err(UrlError::Scheme {
                    url: owned(),
                    scheme: other.to_owned(),
                })
            }
        };
        let endpoint = if transport == TransportKind::Unix {
            if rest.is_empty() {
                return Err(UrlError::EmptyPath { url: owned() });
            }
            HubEndpoint::Path(PathBuf::from(rest))
        } else {
            let (host, port) = parse_authority(url, rest)?;
            HubEndpoint::Net { host, port }
        };
        Ok(HubUrl {
            transport,
            tls,
            endpoint,
        })
    }

    /// Parses a URL that may be `auto://host:port`, which expands to QUIC, HTTP/2 and secure
    /// WebSocket on that host and port, tried in that order.
    pub fn parse_list(url: &str) -> Result<Vec<HubUrl>, UrlError> {
        match url.strip_prefix("auto://") {
            Some(rest) => {
                let (host, port) = parse_authority(url, rest)?;
                Ok([
                    (TransportKind::Quic, true),
                    (TransportKind::Http2, true),
                    (TransportKind::WebSocket, true),
                ]
                .into_iter()
                .map(|(transport, tls)| HubUrl {
                    transport,
                    tls,
                    endpoint: HubEndpoint::Net {
                        host: host.clone(),
                        port,
                    },
                })
                .collect())
            }
            None => Ok(vec![HubUrl::parse(url)?]),
        }
    }

    /// The host, for network URLs.
    pub fn host(&self) -> Option<&str> {
        match &self.endpoint {
            HubEndpoint::Net { host, .. } => Some(host),
            HubEndpoint::Path(_) => None,
        }
    }

    /// The port, for network URLs.
    pub fn port(&self) -> Option<u16> {
        match &self.endpoint {
            HubEndpoint::Net { port, .. } => Some(*port),
            HubEndpoint::Path(_) => None,
        }
    }

    /// Resolves a network URL to a socket address (IP literals need no lookup).
    pub async fn resolve(&self) -> Result<SocketAddr, ResolveError> {
        let HubEndpoint::Net { host, port } = &self.endpoint else {
            return Err(ResolveError::NotNetwork {
                url: self.to_string(),
            });
        };
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, *port));
        }
        tokio::net::lookup_host((host.as_str(), *port))
            .await
            .map_err(|source| ResolveError::Lookup {
                host: host.clone(),
                source,
            })?
            .next()
            .ok_or_else(|| ResolveError::NoAddress { host: host.clone() })
    }

    /// A local bind address of the same family as the host (port 0).
    pub fn default_bind(&self) -> SocketAddr {
        match self.host().and_then(|h| h.parse::<IpAddr>().ok()) {
            Some(IpAddr::V6(_)) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
            _ => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        }
    }

    fn scheme(&self) -> &'static str {
        match (self.transport, self.tls) {
            (TransportKind::Quic, _) => "quic",
            (TransportKind::Http2, _) => "h2",
            (TransportKind::WebSocket, true) => "wss",
            (TransportKind::WebSocket, false) => "ws",
            (TransportKind::Unix, _) => "unix",
            (TransportKind::WebTransport, _) => "wt",
            // Never parsed from a URL: a hub URL names a transport agents dial.
            (TransportKind::Cluster, _) => "cluster",
        }
    }
}

fn parse_authority(url: &str, rest: &str) -> Result<(String, u16), UrlError> {
    let owned = || url.to_owned();
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| UrlError::UnclosedBracket { url: owned() })?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| UrlError::NoPort { url: owned() })?;
        (host, port)
    } else {
        authority
            .rsplit_once(':')
            .ok_or_else(|| UrlError::NoPort { url: owned() })?
    };
    if host.is_empty() {
        return Err(UrlError::EmptyHost { url: owned() });
    }
    let port = port.parse::<u16>().map_err(|_| UrlError::BadPort {
        url: owned(),
        port: port.to_owned(),
    })?;
    Ok((host.to_owned(), port))
}

/// Why a hub URL could not be parsed. Each names the URL as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// No `scheme://`.
    #[error(
        "hub URL {url:?} has no scheme (expected quic://, h2://, wss://, ws://, wt:// or unix://)"
    )]
    NoScheme {
        /// The URL.
        url: String,
    },
    /// `auto://` names several URLs: [`HubUrl::parse_list`] takes it.
    #[error("hub URL {url:?}: auto:// names several transports; use HubUrl::parse_list")]
    Several {
        /// The URL.
        url: String,
    },
    /// A scheme agentwire does not speak.
    #[error(
        "hub URL {url:?}: unsupported scheme {scheme:?} (expected quic, h2, wss, ws, wt, unix or auto)"
    )]
    Scheme {
        /// The URL.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// `unix://` with nothing after it.
    #[error("hub URL {url:?} has an empty socket path")]
    EmptyPath {
        /// The URL.
        url: String,
    },
    /// An IPv6 host's `[` is not closed.
    #[error("hub URL {url:?}: unclosed '['")]
    UnclosedBracket {
        /// The URL.
        url: String,
    },
    /// No `:port`.
    #[error("hub URL {url:?} needs a port (host:port)")]
    NoPort {
        /// The URL.
        url: String,
    },
    /// Nothing before the port.
    #[error("hub URL {url:?} has an empty host")]
    EmptyHost {
        /// The URL.
        url: String,
    },
    /// The port is not a number from 0 to 65535.
    #[error("hub URL {url:?}: invalid port {port:?}")]
    BadPort {
        /// The URL.
        url: String,
        /// The port as written.
        port: String,
    },
}

/// Why a hub URL's address could not be found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The URL names a socket path, not a network address.
    #[error("{url} is not a network address")]
    NotNetwork {
        /// The URL.
        url: String,
    },
    /// The name lookup failed.
    #[error("cannot resolve {host}")]
    Lookup {
        /// The host.
        host: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The name resolves to nothing.
    #[error("{host} resolves to no address")]
    NoAddress {
        /// The host.
        host: String,
    },
}

impl std::fmt::Display for HubUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.endpoint {
            HubEndpoint::Path(p) => write!(f, "{}://{}", self.scheme(), p.display()),
            HubEndpoint::Net { host, port } if host.contains(':') => {
                write!(f, "{}://[{host}]:{port}", self.scheme())
            }
            HubEndpoint::Net { host, port } => write!(f, "{}://{host}:{port}", self.scheme()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bad_url_gets_its_own_error_naming_the_url() {
        let err = |u: &str| HubUrl::parse(u).unwrap_err();
        assert!(matches!(err("localhost:4433"), UrlError::NoScheme { .. }));
        assert!(matches!(err("auto://h:1"), UrlError::Several { .. }));
        assert!(
            matches!(err("http://h:1"), UrlError::Scheme { ref scheme, .. } if scheme == "http")
        );
        assert!(matches!(err("unix://"), UrlError::EmptyPath { .. }));
        assert!(matches!(
            err("quic://[::1:4433"),
            UrlError::UnclosedBracket { .. }
        ));
        assert!(matches!(err("quic://[::1]"), UrlError::NoPort { .. }));
        assert!(matches!(err("quic://host"), UrlError::NoPort { .. }));
        assert!(matches!(err("quic://:4433"), UrlError::EmptyHost { .. }));
        assert!(
            matches!(err("quic://h:99999"), UrlError::BadPort { ref port, .. } if port == "99999")
        );
        assert!(err("quic://h:x").to_string().contains("\"quic://h:x\""));
        assert_eq!(HubUrl::parse_list("auto://h:1").unwrap().len(), 3);
        assert!(matches!(
            HubUrl::parse_list("auto://h"),
            Err(UrlError::NoPort { .. })
        ));
    }

    #[tokio::test]
    async fn a_socket_path_has_no_network_address() {
        let url = HubUrl::parse("unix:///tmp/hub.sock").unwrap();
        assert!(matches!(
            url.resolve().await,
            Err(ResolveError::NotNetwork { .. })
        ));
        let url = HubUrl::parse("quic://127.0.0.1:4433").unwrap();
        assert_eq!(url.resolve().await.unwrap().port(), 4433);
    }
}
