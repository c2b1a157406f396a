//! The handshake: the proxy offers protocol versions and encodings, the agent picks an
//! encoding and reports what it can do. Both frames are JSON.
//!
//! Field names, order and optionality follow `zentinel-agent-protocol` 0.6.45 (`v2::uds`), so
//! the bytes match the reference crate's; unknown encodings in the offer are skipped (the
//! reference agent refuses the whole handshake). This module owns these types and the
//! negotiation rule; it must not do I/O.

use serde::{Deserialize, Serialize};

use crate::encoding::Encoding;

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 2;

/// Proxy → agent, the first frame (type 0x01).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandshakeRequest {
    /// Protocol versions the proxy speaks.
    pub supported_versions: Vec<u32>,
    /// Who the proxy is.
    pub proxy_id: String,
    /// Its version.
    pub proxy_version: String,
    /// Configuration for the agent, if any (`null` on the wire otherwise).
    pub config: Option<serde_json::Value>,
    /// Encodings the proxy accepts, most preferred first (names, so that one this side does
    /// not know does not spoil the rest). Empty or absent: JSON only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supported_encodings: Vec<String>,
}

impl HandshakeRequest {
    /// A request from `proxy_id` offering `encodings` in that order.
    ///
    /// ```
    /// use agentwire_zap_proto::{Encoding, HandshakeRequest};
    /// let r = HandshakeRequest::new("edge-1", "1.0", &[Encoding::MsgPack, Encoding::Json]);
    /// assert_eq!(
    ///     serde_json::to_string(&r).unwrap(),
    ///     r#"{"supported_versions":[2],"proxy_id":"edge-1","proxy_version":"1.0","config":null,"supported_encodings":["msgpack","json"]}"#
    /// );
    /// ```
    pub fn new(proxy_id: &str, proxy_version: &str, encodings: &[Encoding]) -> Self {
        HandshakeRequest {
            supported_versions: vec![PROTOCOL_VERSION],
            proxy_id: proxy_id.into(),
            proxy_version: proxy_version.into(),
            config: None,
            supported_encodings: encodings.iter().map(|e| e.name().to_string()).collect(),
        }
    }
}

/// Agent → proxy, the answer (type 0x02).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandshakeResponse {
    /// The version the agent will speak.
    pub protocol_version: u32,
    /// What the agent does.
    pub capabilities: Capabilities,
    /// Whether the agent accepts the connection.
    pub success: bool,
    /// Why not, when it does not.
    pub error: Option<String>,
    /// The encoding of every later frame (absent: JSON).
    #[serde(default)]
    pub encoding: Encoding,
}

/// What an agent does: the events it wants, features and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Stable id of the agent.
    pub agent_id: String,
    /// Display name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Events it handles, as [`EventKind`] numbers.
    pub supported_events: Vec<i32>,
    /// Optional features.
    pub features: Features,
    /// Limits.
    pub limits: Limits,
}

/// Optional features of an agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Features {
    /// Handles body chunks as they stream.
    pub streaming_body: bool,
    /// Handles WebSocket frames.
    pub websocket: bool,
    /// Handles guardrail inspection.
    pub guardrails: bool,
    /// Accepts pushed configuration.
    pub config_push: bool,
    /// Sends metrics reports.
    pub metrics_export: bool,
    /// Requests it handles at once on one connection.
    pub concurrent_requests: u32,
    /// Stops a handler when the proxy cancels.
    pub cancellation: bool,
    /// Sends flow-control pauses.
    pub flow_control: bool,
    /// Sends health reports.
    pub health_reporting: bool,
    /// agentwire extension: accepts body bytes as MessagePack `bin` (the reference agent
    /// needs base64 text). Absent in the reference's frames, ignored by its decoder.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub binary_body: bool,
}

/// Limits an agent announces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Largest body it inspects, bytes.
    pub max_body_size: u64,
    /// Requests in flight it takes per connection.
    pub max_concurrency: u32,
    /// Body chunk size it prefers.
    pub preferred_chunk_size: u64,
}

impl Default for Limits {
    /// The reference crate's defaults: 10 MiB, 100, 64 KiB.
    fn default() -> Self {
        Limits {
            max_body_size: 10 * 1024 * 1024,
            max_concurrency: 100,
            preferred_chunk_size: 64 * 1024,
        }
    }
}

/// Event numbers used in [`Capabilities::supported_events`] (the protobuf's numbering).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Request headers.
    RequestHeaders = 1,
    /// Request body chunk.
    RequestBodyChunk = 2,
    /// Response headers.
    ResponseHeaders = 3,
    /// Response body chunk.
    ResponseBodyChunk = 4,
    /// Request complete.
    RequestComplete = 5,
    /// WebSocket frame.
    WebSocketFrame = 6,
    /// Guardrail inspection.
    GuardrailInspect = 7,
    /// Configuration.
    Configure = 8,
}

impl EventKind {
    /// Every event kind.
    pub const ALL: [EventKind; 8] = [
        EventKind::RequestHeaders,
        EventKind::RequestBodyChunk,
        EventKind::ResponseHeaders,
        EventKind::ResponseBodyChunk,
        EventKind::RequestComplete,
        EventKind::WebSocketFrame,
        EventKind::GuardrailInspect,
        EventKind::Configure,
    ];
}

/// The encoding an agent supporting `ours` picks from `offered`: the first offered one it
/// supports, JSON if none (or nothing was offered). Names it does not know are skipped.
///
/// ```
/// use agentwire_zap_proto::{negotiate, Encoding};
/// let offered = vec!["cbor".to_string(), "msgpack".into(), "json".into()];
/// assert_eq!(negotiate(&offered, &[Encoding::Json, Encoding::MsgPack]), Encoding::MsgPack);
/// assert_eq!(negotiate(&offered, &[Encoding::Json]), Encoding::Json);
/// assert_eq!(negotiate(&[], &[Encoding::MsgPack]), Encoding::Json);
/// ```
pub fn negotiate(offered: &[String], ours: &[Encoding]) -> Encoding {
    offered
        .iter()
        .filter_map(|name| Encoding::from_name(name))
        .find(|e| ours.contains(e))
        .unwrap_or(Encoding::Json)
}
