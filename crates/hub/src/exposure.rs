//! What a hub's listeners and credentials expose, before it starts: a hub open to anyone
//! beyond this machine, and tokens that would cross the network in clear.
//!
//! Owns the rule only: it takes the addresses the hub will listen on and what its
//! configuration asks of agents, and returns each exposure as a value. The CLI prints them as
//! warnings, or refuses to start (`agentwire hub --require-auth`). It must not listen, resolve
//! names or read files.

use std::net::IpAddr;

use super::HubConfig;
use agentwire_transport::url::{HubEndpoint, HubUrl};
use agentwire_transport::TransportKind;

/// One thing a hub configuration exposes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exposure {
    /// The hub asks agents for nothing (no token, no access file, no client CA): anyone who
    /// reaches the listener takes any agent id and sends anything.
    NoCredentials {
        /// The listener, when it is reachable beyond this machine; `None` when every
        /// listener is on loopback or a Unix socket.
        beyond_loopback: Option<String>,
    },
    /// Agents' tokens would cross a plain `ws://` listener unencrypted.
    TokensInClear {
        /// The listener.
        url: String,
        /// It is reachable beyond this machine (not a loopback address).
        beyond_loopback: bool,
    },
}

impl Exposure {
    /// Whether a hub started without `--require-auth` warns about it (every exposure except
    /// a hub without credentials that only this machine can reach).
    pub fn warns(&self) -> bool {
        !matches!(
            self,
            Exposure::NoCredentials {
                beyond_loopback: None
            }
        )
    }
}

impl std::fmt::Display for Exposure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exposure::NoCredentials {
                beyond_loopback: Some(url),
            } => write!(
                f,
                "{url} is reachable beyond this machine and the hub asks for no credentials: \
                 anyone who reaches it can take any agent id (give --auth-token-file, \
                 --access-file or --client-ca)"
            ),
            Exposure::NoCredentials {
                beyond_loopback: None,
            } => write!(
                f,
                "the hub asks for no credentials (give --auth-token-file, --access-file or \
                 --client-ca)"
            ),
            Exposure::TokensInClear {
                url,
                beyond_loopback,
            } => {
                let reach = if *beyond_loopback {
                    "across the network"
                } else {
                    "over loopback"
                };
                write!(
                    f,
                    "agents' tokens would travel unencrypted {reach} on {url} (plain WebSocket): \
                     listen on wss:// instead"
                )
            }
        }
    }
}

/// Every exposure of a hub that will listen on `listen` with `config`, in the order of
/// `listen`.
///
/// ```
/// use agentwire_hub::{exposures, Exposure, HubConfig};
/// use agentwire_transport::HubUrl;
/// let open = [HubUrl::parse("ws://0.0.0.0:8080").unwrap()];
/// let found = exposures(&open, &HubConfig::default());
/// assert!(matches!(&found[..], [Exposure::NoCredentials { beyond_loopback: Some(_) }]));
/// let local = [HubUrl::parse("quic://127.0.0.1:4433").unwrap()];
/// assert!(exposures(&local, &HubConfig::default()).iter().all(|e| !e.warns()));
/// ```
pub fn exposures(listen: &[HubUrl], config: &HubConfig) -> Vec<Exposure> {
    let tokens = config.policy.auth_token.is_some()
        || config.access.as_ref().is_some_and(|a| a.uses_tokens());
    let credentials = tokens || config.access.is_some() || config.client_ca.is_some();
    let mut found = Vec::new();
    if !credentials {
        let beyond = listen
            .iter()
            .find(|u| beyond_loopback(u))
            .map(|u| u.to_string());
        found.push(Exposure::NoCredentials {
            beyond_loopback: beyond,
        });
    }
    if tokens {
        for url in listen {
            if url.transport == TransportKind::WebSocket && !url.tls {
                found.push(Exposure::TokensInClear {
                    url: url.to_string(),
                    beyond_loopback: beyond_loopback(url),
                });
            }
        }
    }
    found
}

/// Whether peers beyond this machine can reach `url`: any network listener whose host is not
/// a loopback address or `localhost` (names other than `localhost` are not resolved, and
/// count as reachable).
fn beyond_loopback(url: &HubUrl) -> bool {
    match &url.endpoint {
        HubEndpoint::Path(_) => false,
        HubEndpoint::Net { host, .. } => {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            match host.parse::<IpAddr>() {
                Ok(ip) => !ip.is_loopback(),
                Err(_) => !host.eq_ignore_ascii_case("localhost"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{token_sha256, AccessPolicy};

    fn urls(list: &[&str]) -> Vec<HubUrl> {
        list.iter().map(|u| HubUrl::parse(u).unwrap()).collect()
    }

    #[test]
    fn an_open_hub_warns_only_beyond_loopback() {
        let none = HubConfig::default();
        for local in [
            "quic://127.0.0.1:1",
            "ws://localhost:2",
            "wss://[::1]:3",
            "unix:///tmp/a.sock",
        ] {
            let found = exposures(&urls(&[local]), &none);
            assert_eq!(
                found,
                [Exposure::NoCredentials {
                    beyond_loopback: None
                }]
            );
            assert!(!found[0].warns(), "{local}");
        }
        for open in [
            "ws://0.0.0.0:8080",
            "quic://[::]:4433",
            "h2://hub.example:443",
            "wss://10.1.2.3:1",
        ] {
            let found = exposures(&urls(&["unix:///tmp/a.sock", open]), &none);
            assert_eq!(found.len(), 1, "{open}");
            assert!(found[0].warns(), "{open}");
            assert!(
                found[0].to_string().contains("beyond this machine"),
                "{open}"
            );
        }
    }

    #[test]
    fn tokens_over_plain_websocket_warn_wherever_it_listens() {
        let mut token = HubConfig::default();
        token.policy.auth_token = Some("t".into());
        let found = exposures(
            &urls(&["wss://0.0.0.0:1", "ws://127.0.0.1:2", "ws://0.0.0.0:3"]),
            &token,
        );
        assert_eq!(
            found,
            [
                Exposure::TokensInClear {
                    url: "ws://127.0.0.1:2".into(),
                    beyond_loopback: false
                },
                Exposure::TokensInClear {
                    url: "ws://0.0.0.0:3".into(),
                    beyond_loopback: true
                },
            ]
        );
        assert!(found[1].to_string().contains("across the network"));
        assert!(exposures(&urls(&["quic://0.0.0.0:1"]), &token).is_empty());
    }

    #[test]
    fn an_access_file_counts_as_credentials_and_its_tokens_as_tokens() {
        let certs_only = r#"{"credentials": [{"client_cert": true, "ids": ["*"]}]}"#;
        let mut config = HubConfig {
            access: Some(Arc::new(AccessPolicy::from_json(certs_only).unwrap())),
            ..HubConfig::default()
        };
        assert!(exposures(&urls(&["ws://0.0.0.0:1"]), &config).is_empty());
        let tokens = format!(
            r#"{{"credentials": [{{"token_sha256": "{}", "ids": ["*"]}}]}}"#,
            token_sha256("t")
        );
        config.access = Some(Arc::new(AccessPolicy::from_json(&tokens).unwrap()));
        assert_eq!(exposures(&urls(&["ws://0.0.0.0:1"]), &config).len(), 1);
    }
}
