//! # agentwire — a QUIC-first transport for multi-agent systems
//!
//! A [`Hub`](hub::Hub) accepts agents and routes their messages (direct, topic, broadcast,
//! request/response); an [`Agent`] connects to it, sends, requests, subscribes and receives.
//! Messages are [`Envelope`]s from the sans-IO [`agentwire_proto`] crate, carried over QUIC
//! (quinn + rustls) with one stream per message or one lane per priority class.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use agentwire::{hub::{Hub, HubConfig}, metrics::HubMetrics, tls, Agent, AgentOptions, HubTrust};
//! use std::time::Duration;
//!
//! let bundle = tls::generate(&tls::default_hub_names())?;
//! let identity = tls::HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem)?;
//! let hub = Hub::new(HubConfig::default(), HubMetrics::new());
//! let listener = hub.listen_quic("127.0.0.1:0".parse()?, &identity)?;
//! let url = format!("quic://127.0.0.1:{}", listener.local_addr.port());
//!
//! let trust = HubTrust::ca_pem(&bundle.ca_cert_pem)?;
//! let mut worker = Agent::connect(AgentOptions::new("worker", url.clone(), trust.clone())).await?;
//! tokio::spawn(async move {
//!     while let Some(msg) = worker.recv().await {
//!         let _ = msg.reply(msg.envelope.body.clone()).await;
//!     }
//! });
//! let boss = Agent::connect(AgentOptions::new("boss", url, trust)).await?;
//! let answer = boss.request("worker", "ping", Duration::from_secs(1)).await?;
//! assert_eq!(&answer.body[..], b"ping");
//! # Ok(()) }
//! ```

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod agent;
pub mod agent_queues;

pub use agent::{
    Agent, AgentError, AgentHandle, AgentOptions, AgentStats, Connector, Inbox, Incoming,
};
#[cfg(feature = "hub")]
pub use agentwire_hub as hub;
#[cfg(feature = "hub")]
pub use agentwire_hub::metrics;
pub use agentwire_proto::{Codec, Destination, Envelope, ErrorCode, Kind, Priority};
pub use agentwire_tls as tls;
pub use agentwire_tls::HubTrust;
pub use agentwire_transport as transport;
#[cfg(feature = "quic")]
pub use agentwire_transport::qlog;
pub use agentwire_transport::HubUrl;
pub use agentwire_transport::{error_chain, queue, settings, url};
pub use agentwire_transport::{CongestionControl, QuicSettings, SocketBuffers, StreamMapping};
