//! A binding's connect options, as plain values, turned into [`AgentOptions`] with the same
//! rules as the CLI: exactly one way to trust the hub (a CA, a pin, or `insecure`) unless
//! every address is a transport without TLS.

use std::path::PathBuf;
use std::time::Duration;

use agentwire::tls::{certified_agent_id, AgentIdentity};
use agentwire::{AgentOptions, Codec, HubTrust, HubUrl};

use crate::SdkError;

/// How to connect, as a binding's caller gives it (keyword arguments in Python, an options
/// object in JavaScript).
///
/// ```
/// use agentwire_sdk::ConnectConfig;
/// let config = ConnectConfig {
///     hubs: vec!["quic://127.0.0.1:4433".into()],
///     id: "worker-1".into(),
///     pin: Some(format!("sha256:{}", "ab".repeat(32))),
///     ..ConnectConfig::default()
/// };
/// let options = config.options()?;
/// assert_eq!(options.id, "worker-1");
/// // No way to trust a TLS hub given: refused with a sentence saying what to pass.
/// let err = ConnectConfig { pin: None, ..config }.options().unwrap_err();
/// assert!(err.message.contains("ca="));
/// # Ok::<(), agentwire_sdk::SdkError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ConnectConfig {
    /// Hub addresses, tried in order (`quic://`, `h2://`, `wss://`, `ws://`, `unix://`,
    /// `auto://`); one entry may also hold several, comma-separated.
    pub hubs: Vec<String>,
    /// The agent's id.
    pub id: String,
    /// A PEM file with the CA that signed the hub's certificate.
    pub ca: Option<PathBuf>,
    /// The same CA as PEM text.
    pub ca_pem: Option<String>,
    /// The hub's public-key pin, `sha256:HEX`.
    pub pin: Option<String>,
    /// Accept any hub certificate (testing only; warns loudly).
    pub insecure: bool,
    /// The token the hub (or the agent's credential) requires.
    pub token: Option<String>,
    /// This agent's certificate and key files, for hubs that require one (mutual TLS).
    pub cert: Option<PathBuf>,
    /// The key of `cert`.
    pub key: Option<PathBuf>,
    /// The role announced to the hub (default `agent`).
    pub role: Option<String>,
    /// TLS server name (default: the address's host).
    pub server_name: Option<String>,
    /// Time allowed for the whole connect (default 10 s).
    pub connect_timeout: Option<Duration>,
    /// With several addresses, time allowed for each (default 2 s).
    pub fallback_timeout: Option<Duration>,
    /// Codecs offered, preferred first (`msgpack`, `json`; default both).
    pub codecs: Vec<String>,
}

impl ConnectConfig {
    /// The agent options these values mean, or a sentence saying which value is wrong.
    pub fn options(&self) -> Result<AgentOptions, SdkError> {
        if self.id.is_empty() {
            return Err(SdkError::config("id must not be empty"));
        }
        let hubs: Vec<String> = self
            .hubs
            .iter()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .collect();
        if hubs.is_empty() {
            return Err(SdkError::config("give at least one hub address"));
        }
        let trust = self.trust(&hubs)?;
        let mut opts = AgentOptions::new(self.id.clone(), String::new(), trust);
        opts.hubs = hubs;
        opts.auth_token.clone_from(&self.token);
        opts.server_name.clone_from(&self.server_name);
        if let Some(role) = &self.role {
            opts.role.clone_from(role);
        }
        if let Some(t) = self.connect_timeout {
            opts.connect_timeout = t;
        }
        if let Some(t) = self.fallback_timeout {
            opts.fallback_timeout = t;
        }
        if !self.codecs.is_empty() {
            opts.codecs = self
                .codecs
                .iter()
                .map(|n| {
                    Codec::from_name(n.trim()).ok_or_else(|| {
                        SdkError::config(format!("unknown codec {n:?} (msgpack or json)"))
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        opts.identity = self.identity()?;
        opts.hub_urls()?;
        Ok(opts)
    }

    fn trust(&self, hubs: &[String]) -> Result<HubTrust, SdkError> {
        let given = [
            self.ca.is_some(),
            self.ca_pem.is_some(),
            self.pin.is_some(),
            self.insecure,
        ];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(SdkError::config(
                "give one way to trust the hub: ca=, ca_pem=, pin= or insecure=True",
            ));
        }
        if let Some(path) = &self.ca {
            return Ok(HubTrust::ca_file(path)?);
        }
        if let Some(pem) = &self.ca_pem {
            return Ok(HubTrust::ca_pem(pem)?);
        }
        if let Some(pin) = &self.pin {
            return Ok(HubTrust::pin(pin)?);
        }
        if self.insecure {
            return Ok(HubTrust::Insecure);
        }
        let mut plain = true;
        for hub in hubs {
            for part in hub.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                for url in HubUrl::parse_list(part).map_err(|e| SdkError::config(e.to_string()))? {
                    plain &= !url.tls;
                }
            }
        }
        if plain {
            return Ok(HubTrust::Ca(Vec::new()));
        }
        Err(SdkError::config(
            "say how to verify the hub: ca= (the CA's PEM file from `agentwire cert`), pin= \
             (sha256:HEX), or insecure=True for testing",
        ))
    }

    fn identity(&self) -> Result<Option<AgentIdentity>, SdkError> {
        let (cert, key) = match (&self.cert, &self.key) {
            (None, None) => return Ok(None),
            (Some(cert), Some(key)) => (cert, key),
            _ => return Err(SdkError::config("give cert= and key= together")),
        };
        let identity = AgentIdentity::load(cert, key)?;
        let named = match identity.cert_chain.first() {
            Some(c) => certified_agent_id(c.as_ref())?,
            None => String::new(),
        };
        if named != self.id {
            return Err(SdkError::config(format!(
                "{} names agent {named:?}, not {:?}; the hub would refuse it",
                cert.display(),
                self.id
            )));
        }
        Ok(Some(identity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> ConnectConfig {
        ConnectConfig {
            hubs: vec!["quic://127.0.0.1:1".into()],
            id: "a".into(),
            insecure: true,
            ..ConnectConfig::default()
        }
    }

    #[test]
    fn bad_values_are_named() {
        let cases = [
            (
                ConnectConfig {
                    id: String::new(),
                    ..base()
                },
                "id",
            ),
            (
                ConnectConfig {
                    hubs: vec![" ".into()],
                    ..base()
                },
                "hub address",
            ),
            (
                ConnectConfig {
                    hubs: vec!["gopher://x:1".into()],
                    ..base()
                },
                "gopher",
            ),
            (
                ConnectConfig {
                    pin: Some("sha256:00".into()),
                    ..base()
                },
                "one way",
            ),
            (
                ConnectConfig {
                    insecure: false,
                    pin: Some("sha256:zz".into()),
                    ..base()
                },
                "pin",
            ),
            (
                ConnectConfig {
                    codecs: vec!["xml".into()],
                    ..base()
                },
                "xml",
            ),
            (
                ConnectConfig {
                    cert: Some("c.pem".into()),
                    ..base()
                },
                "together",
            ),
            (
                ConnectConfig {
                    ca: Some("/nonexistent/ca.pem".into()),
                    insecure: false,
                    ..base()
                },
                "/nonexistent/ca.pem",
            ),
        ];
        for (config, needle) in cases {
            let err = config.options().unwrap_err();
            assert!(err.message.contains(needle), "{needle}: {}", err.message);
            assert_eq!(err.kind, crate::ErrorKind::Config);
        }
    }

    #[test]
    fn plain_transports_need_no_trust() {
        let config = ConnectConfig {
            hubs: vec!["unix:///tmp/x.sock".into()],
            insecure: false,
            ..base()
        };
        assert!(config.options().is_ok());
    }
}
