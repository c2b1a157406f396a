//! A hub started in-process: what the bindings' tests run against, and what an application
//! that wants its own hub embeds. A real [`agentwire::hub::Hub`] on real sockets.

use agentwire_sync::LockExt;
use std::path::PathBuf;

use agentwire::hub::{Hub, HubConfig, Listener};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, HubIdentity};
use agentwire::HubUrl;

use crate::SdkError;

/// What to start.
///
/// ```
/// let spec = agentwire_sdk::HubConfigSpec::default();
/// assert_eq!(spec.listen, vec!["quic://127.0.0.1:0".to_string()]);
/// ```
#[derive(Debug, Clone)]
pub struct HubConfigSpec {
    /// Addresses to listen on (`quic://HOST:0` picks a port); default one QUIC port on
    /// loopback.
    pub listen: Vec<String>,
    /// Directory with `hub.pem` and `hub.key` (`agentwire cert`); without it a fresh CA and
    /// hub certificate for `localhost`/`127.0.0.1`/`::1` are made in memory.
    pub cert_dir: Option<PathBuf>,
    /// The shared token agents must present.
    pub token: Option<String>,
    /// Keep work queues in this directory (they live in memory otherwise).
    pub store: Option<PathBuf>,
}

impl Default for HubConfigSpec {
    fn default() -> Self {
        HubConfigSpec {
            listen: vec!["quic://127.0.0.1:0".into()],
            cert_dir: None,
            token: None,
            store: None,
        }
    }
}

/// A running hub. Dropping it (or [`close`](Self::close)) stops it.
pub struct EmbeddedHub {
    hub: Hub,
    listeners: std::sync::Mutex<Vec<Listener>>,
    /// The addresses agents use (with the ports chosen).
    pub urls: Vec<String>,
    /// The CA certificate agents trust it with (PEM), when it made its own.
    pub ca_pem: Option<String>,
    /// Its public-key pin (`sha256:HEX`), for `pin=`.
    pub pin: String,
}

impl EmbeddedHub {
    /// Starts listening on every address in `spec`. Runs on the caller's tokio runtime.
    pub async fn start(spec: HubConfigSpec) -> Result<EmbeddedHub, SdkError> {
        if spec.listen.is_empty() {
            return Err(SdkError::config("give at least one address to listen on"));
        }
        let (identity, ca_pem) = match &spec.cert_dir {
            Some(dir) => (HubIdentity::from_dir(dir)?, None),
            None => {
                let bundle = tls::generate(&tls::default_hub_names())?;
                let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem)?;
                (identity, Some(bundle.ca_cert_pem))
            }
        };
        let mut config = HubConfig::default();
        config.policy.auth_token.clone_from(&spec.token);
        let metrics = HubMetrics::new();
        let hub = match &spec.store {
            Some(dir) => {
                let store = agentwire_queue::FileStore::open(dir)
                    .map_err(|e| SdkError::config(e.with_causes()))?;
                Hub::with_store(config, metrics, Box::new(store))
                    .map_err(|e| SdkError::config(e.with_causes()))?
            }
            None => Hub::new(config, metrics),
        };
        let mut listeners = Vec::new();
        let mut urls = Vec::new();
        for address in &spec.listen {
            let url = HubUrl::parse(address).map_err(|e| SdkError::config(e.to_string()))?;
            let listener = hub.listen(&url, Some(&identity)).await.map_err(|e| {
                SdkError::new(
                    crate::ErrorKind::Connect,
                    format!("cannot listen on {address}: {e}"),
                )
            })?;
            urls.push(listener.url.to_string());
            listeners.push(listener);
        }
        Ok(EmbeddedHub {
            pin: identity.spki_pin()?,
            hub,
            listeners: std::sync::Mutex::new(listeners),
            urls,
            ca_pem,
        })
    }

    /// Agents connected now.
    pub fn agent_count(&self) -> usize {
        self.hub.agent_count()
    }

    /// Stops listening, closes every agent's connection and the queue store.
    pub fn close(&self) {
        let listeners = std::mem::take(&mut *self.listeners.lock_or_recover());
        for listener in &listeners {
            listener.close();
        }
        self.hub.shutdown();
    }
}

impl Drop for EmbeddedHub {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ConnectConfig, SdkAgent};

    #[test]
    fn an_agent_reaches_another_through_an_embedded_hub() {
        let rt = crate::runtime().unwrap();
        rt.block_on(async {
            let hub = EmbeddedHub::start(HubConfigSpec::default()).await.unwrap();
            let config = |id: &str| ConnectConfig {
                hubs: hub.urls.clone(),
                id: id.into(),
                pin: Some(hub.pin.clone()),
                ..ConnectConfig::default()
            };
            let worker = std::sync::Arc::new(SdkAgent::connect(config("worker")).await.unwrap());
            let echo = {
                let worker = worker.clone();
                tokio::spawn(async move {
                    while let Some(msg) = worker.recv().await {
                        if msg.is_request() {
                            msg.reply(msg.body.clone()).await.unwrap();
                        }
                    }
                })
            };
            let boss = SdkAgent::connect(config("boss")).await.unwrap();
            let timeout = SdkAgent::timeout(5.0).unwrap();
            let reply = boss
                .request(
                    "worker",
                    "hi".into(),
                    timeout,
                    "high",
                    vec![("k".into(), "v".into())],
                )
                .await
                .unwrap();
            assert_eq!(
                (&reply.body[..], reply.sender.as_str()),
                (&b"hi"[..], "worker")
            );
            assert_eq!(reply.kind, "response");
            let err = boss
                .request("nobody", "x".into(), timeout, "medium", Vec::new())
                .await
                .unwrap_err();
            assert_eq!(err.code_name(), Some("unknown-agent"));
            assert_eq!(hub.agent_count(), 2);
            hub.close();
            echo.abort();
        });
    }
}
