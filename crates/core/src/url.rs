//! Hub addresses: `quic://host:port`.
//!
//! This module owns parsing and resolving hub URLs; it must not connect.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::transport::TransportKind;

/// A parsed hub address.
///
/// ```
/// use agentwire::HubUrl;
/// let u = HubUrl::parse("quic://127.0.0.1:4433").unwrap();
/// assert_eq!(u.host, "127.0.0.1");
/// assert_eq!(u.port, 4433);
/// assert!(HubUrl::parse("quic://nohost").is_err());
/// assert!(HubUrl::parse("ftp://h:1").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubUrl {
    /// Which transport the scheme names.
    pub transport: TransportKind,
    /// Host name or IP literal (IPv6 without brackets).
    pub host: String,
    /// Port.
    pub port: u16,
}

impl HubUrl {
    /// Parses `quic://HOST:PORT` (IPv6 as `[::1]:4433`).
    pub fn parse(url: &str) -> Result<HubUrl, String> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("hub URL {url:?} has no scheme (expected quic://host:port)"))?;
        let transport = match scheme {
            "quic" => TransportKind::Quic,
            other => {
                return Err(format!(
                    "hub URL {url:?}: unsupported scheme {other:?} (expected quic)"
                ))
            }
        };
        let authority = rest.trim_end_matches('/');
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("hub URL {url:?}: unclosed '['"))?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| format!("hub URL {url:?} needs a port"))?;
            (host, port)
        } else {
            authority
                .rsplit_once(':')
                .ok_or_else(|| format!("hub URL {url:?} needs a port (host:port)"))?
        };
        if host.is_empty() {
            return Err(format!("hub URL {url:?} has an empty host"));
        }
        let port = port
            .parse::<u16>()
            .map_err(|_| format!("hub URL {url:?}: invalid port {port:?}"))?;
        Ok(HubUrl {
            transport,
            host: host.to_owned(),
            port,
        })
    }

    /// Resolves the host to a socket address (IP literals need no lookup).
    pub async fn resolve(&self) -> Result<SocketAddr, String> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, self.port));
        }
        tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("cannot resolve {}: {e}", self.host))?
            .next()
            .ok_or_else(|| format!("{} resolves to no address", self.host))
    }

    /// A local bind address of the same family as the host (port 0).
    pub fn default_bind(&self) -> SocketAddr {
        match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V6(_)) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
            _ => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        }
    }
}

impl std::fmt::Display for HubUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.transport, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.transport, self.host, self.port)
        }
    }
}
