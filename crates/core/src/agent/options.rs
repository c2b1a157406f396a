//! What an agent connects with: its id and role, the hub addresses, trust, credentials, codecs,
//! limits, timeouts and the transports' settings.
//!
//! This module owns the options and their defaults; it must not connect.

use std::net::SocketAddr;
use std::time::Duration;

use agentwire_proto::Codec;

use agentwire_tls::HubTrust;
use agentwire_transport::settings::{QuicSettings, StreamMapping};
use agentwire_transport::url::HubUrl;

use super::error::AgentError;

/// Everything an agent needs to connect.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The id to register as (unique among connected agents).
    pub id: String,
    /// A free-form role.
    pub role: String,
    /// Hub addresses tried in order until one works: `quic://`, `h2://`, `wss://`, `ws://`,
    /// `unix://` URLs, or `auto://host:port` (QUIC, then HTTP/2, then WebSocket).
    pub hubs: Vec<String>,
    /// How to verify the hub's certificate.
    pub trust: HubTrust,
    /// TLS server name; defaults to the URL's host.
    pub server_name: Option<String>,
    /// Codecs offered, preferred first.
    pub codecs: Vec<Codec>,
    /// Shared secret, if the hub requires one.
    pub auth_token: Option<String>,
    /// Largest frame accepted from the hub.
    pub max_frame_size: u32,
    /// QUIC settings.
    pub quic: QuicSettings,
    /// How messages map to QUIC streams.
    pub stream_mapping: StreamMapping,
    /// WebSocket liveness settings.
    pub websocket: agentwire_transport::settings::WsOptions,
    /// Try 0-RTT when a session ticket from an earlier connection is cached (through the same
    /// [`Connector`]). Only the hello, which is idempotent, is sent as early data.
    pub zero_rtt: bool,
    /// Frames the send queue holds before `send` waits.
    pub send_queue_capacity: usize,
    /// Messages the inbox holds before the transport stops reading.
    pub inbox_capacity: usize,
    /// Time allowed for the whole connect, all fallbacks included.
    pub connect_timeout: Duration,
    /// With several hub addresses: time allowed for one attempt before moving to the next
    /// (so blocked UDP or a silent port cannot hold the agent for the idle timeout).
    pub fallback_timeout: Duration,
    /// Local address to bind for QUIC (port 0 picks one).
    pub bind: Option<SocketAddr>,
    /// This agent's certificate and key, for hubs that require one (mutual TLS; from
    /// `agentwire cert agent --id ID`, whose name must be `id`).
    pub identity: Option<agentwire_tls::AgentIdentity>,
}

impl AgentOptions {
    /// Options with defaults: one hub address, MessagePack then JSON offered, 16 MiB frames,
    /// 0-RTT off, 10 s to connect, 2 s per fallback attempt.
    pub fn new(id: impl Into<String>, hub: impl Into<String>, trust: HubTrust) -> Self {
        AgentOptions {
            id: id.into(),
            role: "agent".into(),
            hubs: vec![hub.into()],
            trust,
            server_name: None,
            codecs: Codec::ALL.to_vec(),
            auth_token: None,
            max_frame_size: agentwire_proto::Limits::default().max_frame_size,
            quic: QuicSettings::for_agent(),
            stream_mapping: StreamMapping::PerMessage,
            websocket: agentwire_transport::settings::WsOptions::default(),
            zero_rtt: false,
            send_queue_capacity: 4096,
            inbox_capacity: 4096,
            connect_timeout: Duration::from_secs(10),
            fallback_timeout: Duration::from_secs(2),
            bind: None,
            identity: None,
        }
    }

    /// Every address to try, in order, with `auto://` expanded.
    pub fn hub_urls(&self) -> Result<Vec<HubUrl>, AgentError> {
        let mut urls = Vec::new();
        for hub in &self.hubs {
            for part in hub.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                urls.extend(HubUrl::parse_list(part).map_err(AgentError::Url)?);
            }
        }
        if urls.is_empty() {
            return Err(AgentError::Config("no hub address given".into()));
        }
        Ok(urls)
    }
}
