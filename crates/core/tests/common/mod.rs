//! Shared set-up for the integration tests: a real hub on loopback QUIC with fresh
//! certificates, and helpers for agents and raw QUIC clients.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use agentwire::hub::{Hub, HubConfig, QuicListener};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, CertBundle, HubIdentity};
use agentwire::{Agent, AgentOptions, HubTrust, Kind};
use tokio::task::JoinHandle;

pub struct TestHub {
    pub hub: Hub,
    pub listener: QuicListener,
    pub url: String,
    pub bundle: CertBundle,
}

pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AGENTWIRE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}

pub async fn start_hub(config: HubConfig) -> TestHub {
    init_logs();
    let bundle = tls::generate(&tls::default_hub_names()).unwrap();
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let hub = Hub::new(config, HubMetrics::new());
    let listener = hub
        .listen_quic("127.0.0.1:0".parse().unwrap(), &identity)
        .unwrap();
    let url = format!("quic://127.0.0.1:{}", listener.local_addr.port());
    TestHub {
        hub,
        listener,
        url,
        bundle,
    }
}

impl TestHub {
    pub fn trust(&self) -> HubTrust {
        HubTrust::ca_pem(&self.bundle.ca_cert_pem).unwrap()
    }

    pub fn opts(&self, id: &str) -> AgentOptions {
        let mut o = AgentOptions::new(id, self.url.clone(), self.trust());
        o.connect_timeout = Duration::from_secs(10);
        o
    }

    pub async fn agent(&self, id: &str) -> Agent {
        Agent::connect(self.opts(id)).await.unwrap()
    }

    /// An agent that answers every request with its body.
    pub async fn echo_agent(&self, id: &str) -> JoinHandle<()> {
        let mut agent = self.agent(id).await;
        tokio::spawn(async move {
            while let Some(msg) = agent.recv().await {
                if msg.envelope.kind == Kind::Request {
                    let _ = msg.reply(msg.envelope.body.clone()).await;
                }
            }
        })
    }

    /// Waits until the hub has exactly `n` agents (or panics after 10 s).
    pub async fn wait_agents(&self, n: usize) {
        for _ in 0..1000 {
            if self.hub.agent_count() == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("hub has {} agents, expected {n}", self.hub.agent_count());
    }

    /// A raw quinn connection to the hub (ALPN agentwire/1, CA-verified), for sending bytes
    /// that no well-behaved agent would.
    pub async fn raw_connection(&self) -> quinn::Connection {
        let tls = tls::client_config(&self.trust(), &[tls::ALPN_AGENTWIRE]).unwrap();
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
        endpoint
            .connect(self.listener.local_addr, "localhost")
            .unwrap()
            .await
            .unwrap()
    }
}

/// The agentwire close code a connection ended with, if it was closed by the application.
pub async fn close_code(conn: &quinn::Connection) -> Option<u64> {
    match tokio::time::timeout(Duration::from_secs(10), conn.closed()).await {
        Ok(quinn::ConnectionError::ApplicationClosed(c)) => Some(c.error_code.into_inner()),
        Ok(other) => panic!("connection ended without an application close: {other}"),
        Err(_) => panic!("connection was not closed within 10 s"),
    }
}

/// Makes `hub` listen on every transport at once (QUIC, HTTP/2 and WebSocket on loopback
/// ports chosen by the kernel, and a Unix socket at `sock`).
pub async fn listen_everywhere(
    hub: &Hub,
    identity: &HubIdentity,
    sock: &std::path::Path,
) -> Vec<agentwire::hub::Listener> {
    let mut listeners = Vec::new();
    for url in [
        "quic://127.0.0.1:0".to_owned(),
        "h2://127.0.0.1:0".to_owned(),
        "wss://127.0.0.1:0".to_owned(),
        format!("unix://{}", sock.display()),
    ] {
        let url = agentwire::HubUrl::parse(&url).unwrap();
        listeners.push(hub.listen(&url, Some(identity)).await.unwrap());
    }
    listeners
}

/// A hub with `config` and `bundle`'s hub certificate, listening on QUIC at 127.0.0.1 (any
/// port): the hub, and its listener or why it could not listen.
pub async fn hub_on_quic(
    config: HubConfig,
    bundle: &CertBundle,
) -> (
    Hub,
    Result<agentwire::hub::Listener, agentwire::transport::TransportError>,
) {
    let hub = Hub::new(config, HubMetrics::new());
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let url = agentwire::HubUrl::parse("quic://127.0.0.1:0").unwrap();
    let listener = hub.listen(&url, Some(&identity)).await;
    (hub, listener)
}

/// A hub taking WebTransport sessions from the pages `origins` allows, serving browsers a
/// certificate of their own, listening on QUIC at 127.0.0.1.
pub struct WebTransportHub {
    pub hub: Hub,
    pub listener: agentwire::hub::Listener,
    /// Where the QUIC listener is bound.
    pub addr: std::net::SocketAddr,
    pub bundle: CertBundle,
    /// The certificate served to browsers.
    pub browsers: tls::WebTransportCert,
}

pub async fn webtransport_hub(origins: &[&str]) -> WebTransportHub {
    webtransport_hub_with(origins, HubConfig::default()).await
}

/// [`webtransport_hub`] with the rest of the hub's configuration from `config`.
pub async fn webtransport_hub_with(origins: &[&str], config: HubConfig) -> WebTransportHub {
    init_logs();
    let names = tls::default_hub_names();
    let bundle = tls::generate(&names).unwrap();
    let browsers =
        tls::issue_webtransport_cert(&bundle.ca_cert_pem, &bundle.ca_key_pem, &names, 13).unwrap();
    let config = HubConfig {
        webtransport: Some(agentwire::hub::WebTransportConfig {
            origins: agentwire::transport::wt::OriginPolicy::new(origins.iter().copied()).unwrap(),
            identity: Some(HubIdentity::from_pem(&browsers.cert_pem, &browsers.key_pem).unwrap()),
        }),
        ..config
    };
    let (hub, listener) = hub_on_quic(config, &bundle).await;
    let listener = listener.unwrap();
    let addr = match listener.bound {
        agentwire::hub::BoundAddr::Net(a) => a,
        _ => unreachable!("a QUIC listener is bound to a network address"),
    };
    WebTransportHub {
        hub,
        listener,
        addr,
        bundle,
        browsers,
    }
}
