//! The payloads: events the proxy sends, the agent's response, and the control messages.
//!
//! Field names and order follow `zentinel-agent-protocol` 0.6.45, so that both crates read
//! each other's frames. Two deliberate differences, both in what this side *accepts*:
//! - Body bytes ([`Body`]) are bytes. Text is base64 and must decode (the reference falls back
//!   to the raw text); MessagePack `bin` is taken as raw bytes whatever they are (the reference
//!   agent fails to decode non-UTF-8 `bin` and answers "allow" without its handler).
//! - Maps are `BTreeMap`, and [`Headers`] a list in insertion order, so what this side writes
//!   has one byte order.
//!
//! This module owns these types; it must not know frames or connections.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use crate::text::{Headers, Labels, Text};

/// Request metadata; the request headers event carries the correlation id here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestMetadata {
    /// Ties every event and answer of one request together.
    pub correlation_id: Text,
    /// The proxy's request id.
    pub request_id: Text,
    /// Client address.
    pub client_ip: Text,
    /// Client port.
    pub client_port: u16,
    /// TLS SNI or Host.
    pub server_name: Option<Text>,
    /// `HTTP/1.1`, `HTTP/2`, ...
    pub protocol: Text,
    /// TLS version, if any.
    pub tls_version: Option<Text>,
    /// TLS cipher, if any.
    pub tls_cipher: Option<Text>,
    /// Route matched.
    pub route_id: Option<Text>,
    /// Upstream chosen.
    pub upstream_id: Option<Text>,
    /// Request start (RFC 3339).
    pub timestamp: Text,
    /// W3C trace parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<Text>,
}

impl RequestMetadata {
    /// Metadata of request `correlation_id` (also its request id) from `client_ip`, HTTP/1.1,
    /// every optional field empty; set the others as needed.
    ///
    /// ```
    /// use agentwire_zap_proto::messages::RequestMetadata;
    /// let m = RequestMetadata::new("c1", "127.0.0.1");
    /// assert_eq!((m.correlation_id.as_str(), m.protocol.as_str()), ("c1", "HTTP/1.1"));
    /// ```
    pub fn new(correlation_id: &str, client_ip: &str) -> Self {
        RequestMetadata {
            correlation_id: correlation_id.into(),
            request_id: correlation_id.into(),
            client_ip: client_ip.into(),
            client_port: 0,
            server_name: None,
            protocol: "HTTP/1.1".into(),
            tls_version: None,
            tls_cipher: None,
            route_id: None,
            upstream_id: None,
            timestamp: Text::default(),
            traceparent: None,
        }
    }
}

/// 0x10: a request's headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestHeadersEvent {
    /// Metadata, with the correlation id.
    pub metadata: RequestMetadata,
    /// Method.
    pub method: Text,
    /// URI.
    pub uri: Text,
    /// Headers.
    pub headers: Headers,
}

/// Body bytes. Written as base64 text (JSON, and MessagePack towards agents that did not
/// announce `binary_body`) or as MessagePack `bin`; read from either. Text that is not
/// base64 is an error, so an event with a broken body fails closed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Body(pub Bytes);

impl Serialize for Body {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64_simd::STANDARD.encode_to_string(&self.0))
    }
}

/// [`Body`] written as MessagePack `bin` (raw bytes).
#[derive(Debug, Clone, Copy)]
pub struct BinBody<'a>(pub &'a [u8]);

impl Serialize for BinBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct BodyVisitor;
        impl<'de> Visitor<'de> for BodyVisitor {
            type Value = Body;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("body bytes: base64 text or binary")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Body, E> {
                base64_simd::STANDARD
                    .decode_to_vec(v)
                    .map(|b| Body(Bytes::from(b)))
                    .map_err(|e| E::custom(format!("body is not base64: {e}")))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Body, E> {
                Ok(Body(Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Body, E> {
                Ok(Body(Bytes::from(v)))
            }
        }
        d.deserialize_any(BodyVisitor)
    }
}

/// 0x11 / 0x13: a chunk of a request or response body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BodyChunkEvent {
    /// The request.
    pub correlation_id: Text,
    /// The bytes.
    pub data: Body,
    /// Whether this is the last chunk.
    pub is_last: bool,
    /// Whole body size, when known.
    pub total_size: Option<u64>,
    /// Index of this chunk.
    #[serde(default)]
    pub chunk_index: u32,
    /// Bytes received so far (request bodies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_received: Option<u64>,
    /// Bytes sent so far (response bodies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_sent: Option<u64>,
}

/// 0x12: the upstream response's headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseHeadersEvent {
    /// The request.
    pub correlation_id: Text,
    /// HTTP status.
    pub status: u16,
    /// Headers.
    pub headers: Headers,
}

/// 0x14: the request finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCompleteEvent {
    /// The request.
    pub correlation_id: Text,
    /// Final status.
    pub status: u16,
    /// Duration, ms.
    pub duration_ms: u64,
    /// Request body bytes.
    pub request_body_size: u64,
    /// Response body bytes.
    pub response_body_size: u64,
    /// Upstream attempts.
    pub upstream_attempts: u32,
    /// Error, if the request failed.
    pub error: Option<Text>,
}

/// 0x15: one WebSocket frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebSocketFrameEvent {
    /// The connection's request.
    pub correlation_id: Text,
    /// Opcode (`text`, `binary`, `close`, `ping`, `pong`, `continuation`).
    pub opcode: Text,
    /// Payload, base64.
    pub data: Body,
    /// Client → server.
    pub client_to_server: bool,
    /// Index of this frame.
    pub frame_index: u64,
    /// FIN bit.
    pub fin: bool,
    /// Route, if any.
    pub route_id: Option<Text>,
    /// Client address.
    pub client_ip: Text,
}

/// 0x16: content for guardrail inspection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuardrailInspectEvent {
    /// The request.
    pub correlation_id: Text,
    /// `prompt_injection` or `pii_detection`.
    pub inspection_type: Text,
    /// The text to inspect.
    pub content: Text,
    /// Model, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Text>,
    /// Categories to check.
    #[serde(default)]
    pub categories: Vec<Text>,
    /// Route, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_id: Option<Text>,
    /// Extra context.
    #[serde(default)]
    pub metadata: BTreeMap<Text, Text>,
}

/// 0x17: configuration pushed to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigureEvent {
    /// The request (the reference puts one at the top level).
    #[serde(default)]
    pub correlation_id: Text,
    /// The configuration.
    #[serde(default)]
    pub config: serde_json::Value,
    /// Its version, if any.
    #[serde(default)]
    pub config_version: Option<Text>,
}

/// The agent's decision.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Let the request through.
    #[default]
    Allow,
    /// Refuse it.
    Block {
        /// Status to answer with.
        status: u16,
        /// Body, if any.
        body: Option<String>,
        /// Headers, if any.
        headers: Option<BTreeMap<String, String>>,
    },
    /// Redirect it.
    Redirect {
        /// Where to.
        url: String,
        /// Status (302, 307, ...).
        status: u16,
    },
    /// Challenge the client.
    Challenge {
        /// Kind of challenge.
        challenge_type: String,
        /// Its parameters.
        params: BTreeMap<String, String>,
    },
}

/// A header change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeaderOp {
    /// Set (replace).
    Set {
        /// Name.
        name: String,
        /// Value.
        value: String,
    },
    /// Add a value.
    Add {
        /// Name.
        name: String,
        /// Value.
        value: String,
    },
    /// Remove.
    Remove {
        /// Name.
        name: String,
    },
}

/// A body change: `None` passes the chunk, `Some("")` drops it, otherwise replaces it
/// (base64).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BodyMutation {
    /// Replacement, base64.
    pub data: Option<String>,
    /// Chunk it applies to.
    #[serde(default)]
    pub chunk_index: u32,
}

/// What to do with a WebSocket frame.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebSocketDecision {
    /// Forward it.
    #[default]
    Allow,
    /// Drop it.
    Drop,
    /// Close the connection.
    Close {
        /// Close code.
        code: u16,
        /// Reason.
        reason: String,
    },
}

/// Audit information; the correlation id of the answer travels in `custom["correlation_id"]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AuditMetadata {
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Rules that matched.
    #[serde(default)]
    pub rule_ids: Vec<String>,
    /// Confidence.
    pub confidence: Option<f32>,
    /// Reason codes.
    #[serde(default)]
    pub reason_codes: Vec<String>,
    /// Anything else.
    #[serde(default)]
    pub custom: BTreeMap<String, serde_json::Value>,
}

/// 0x20: the agent's answer to one event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentResponse {
    /// Protocol version (2).
    pub version: u32,
    /// The decision.
    pub decision: Decision,
    /// Request header changes.
    #[serde(default)]
    pub request_headers: Vec<HeaderOp>,
    /// Response header changes.
    #[serde(default)]
    pub response_headers: Vec<HeaderOp>,
    /// Routing hints.
    #[serde(default)]
    pub routing_metadata: BTreeMap<String, String>,
    /// Audit.
    #[serde(default)]
    pub audit: AuditMetadata,
    /// The agent wants more of the body before deciding.
    #[serde(default)]
    pub needs_more: bool,
    /// Request body change.
    #[serde(default)]
    pub request_body_mutation: Option<BodyMutation>,
    /// Response body change.
    #[serde(default)]
    pub response_body_mutation: Option<BodyMutation>,
    /// WebSocket decision.
    #[serde(default)]
    pub websocket_decision: Option<WebSocketDecision>,
}

impl AgentResponse {
    /// Allow, nothing else.
    ///
    /// ```
    /// use agentwire_zap_proto::{messages::Decision, AgentResponse};
    /// assert_eq!(AgentResponse::allow().decision, Decision::Allow);
    /// ```
    pub fn allow() -> Self {
        Self::with(Decision::Allow)
    }

    /// Block with `status` and `body`.
    pub fn block(status: u16, body: Option<String>) -> Self {
        Self::with(Decision::Block {
            status,
            body,
            headers: None,
        })
    }

    fn with(decision: Decision) -> Self {
        AgentResponse {
            version: 2,
            decision,
            request_headers: Vec::new(),
            response_headers: Vec::new(),
            routing_metadata: BTreeMap::new(),
            audit: AuditMetadata::default(),
            needs_more: false,
            request_body_mutation: None,
            response_body_mutation: None,
            websocket_decision: None,
        }
    }

    /// The correlation id the answer carries (`audit.custom["correlation_id"]`), if any.
    pub fn correlation_id(&self) -> Option<&str> {
        self.audit.custom.get(CID_KEY).and_then(|v| v.as_str())
    }

    /// Sets the correlation id the answer carries.
    pub fn set_correlation_id(&mut self, cid: &str) {
        self.audit
            .custom
            .insert(CID_KEY.into(), serde_json::Value::String(cid.into()));
    }
}

/// Where an [`AgentResponse`] carries its correlation id.
pub const CID_KEY: &str = "correlation_id";

/// An [`AgentResponse`] as it goes on the wire with `correlation_id` in its audit, without
/// copying the answer or inserting the id into its map (an agent answers every event this
/// way: the insert cost a map node, two strings and, with glibc, a `malloc_consolidate`
/// per answer). Encodes to the same bytes as the answer after
/// [`AgentResponse::set_correlation_id`].
///
/// ```
/// use agentwire_zap_proto::{messages::ResponseWire, AgentResponse, Encoding};
/// let mut set = AgentResponse::allow();
/// set.set_correlation_id("r1");
/// let allow = AgentResponse::allow();
/// let wire = ResponseWire::new(&allow, "r1");
/// assert_eq!(Encoding::MsgPack.encode(&wire)?, Encoding::MsgPack.encode(&set)?);
/// # Ok::<(), agentwire_zap_proto::CodecError>(())
/// ```
#[derive(Debug, Serialize)]
pub struct ResponseWire<'a> {
    version: u32,
    decision: &'a Decision,
    request_headers: &'a [HeaderOp],
    response_headers: &'a [HeaderOp],
    routing_metadata: &'a BTreeMap<String, String>,
    audit: AuditWire<'a>,
    needs_more: bool,
    request_body_mutation: &'a Option<BodyMutation>,
    response_body_mutation: &'a Option<BodyMutation>,
    websocket_decision: &'a Option<WebSocketDecision>,
}

impl<'a> ResponseWire<'a> {
    /// `response`, answering the event with `correlation_id`.
    pub fn new(response: &'a AgentResponse, correlation_id: &'a str) -> Self {
        ResponseWire {
            version: response.version,
            decision: &response.decision,
            request_headers: &response.request_headers,
            response_headers: &response.response_headers,
            routing_metadata: &response.routing_metadata,
            audit: AuditWire {
                tags: &response.audit.tags,
                rule_ids: &response.audit.rule_ids,
                confidence: response.audit.confidence,
                reason_codes: &response.audit.reason_codes,
                custom: CustomWithCid {
                    custom: &response.audit.custom,
                    correlation_id,
                },
            },
            needs_more: response.needs_more,
            request_body_mutation: &response.request_body_mutation,
            response_body_mutation: &response.response_body_mutation,
            websocket_decision: &response.websocket_decision,
        }
    }
}

#[derive(Debug, Serialize)]
struct AuditWire<'a> {
    tags: &'a [String],
    rule_ids: &'a [String],
    confidence: Option<f32>,
    reason_codes: &'a [String],
    custom: CustomWithCid<'a>,
}

/// The audit's `custom` map with the correlation id in its sorted place (replacing one the
/// map may hold).
#[derive(Debug)]
struct CustomWithCid<'a> {
    custom: &'a BTreeMap<String, serde_json::Value>,
    correlation_id: &'a str,
}

impl Serialize for CustomWithCid<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let others = self.custom.iter().filter(|(k, _)| k.as_str() != CID_KEY);
        let len = others.clone().count() + 1;
        let mut map = serializer.serialize_map(Some(len))?;
        let mut cid_written = false;
        for (k, v) in others {
            if !cid_written && k.as_str() > CID_KEY {
                map.serialize_entry(CID_KEY, self.correlation_id)?;
                cid_written = true;
            }
            map.serialize_entry(k, v)?;
        }
        if !cid_written {
            map.serialize_entry(CID_KEY, self.correlation_id)?;
        }
        map.end()
    }
}

/// 0x40: the proxy gave up on a request. The reference proxy sends it as JSON whatever was
/// negotiated, with the reason as 0-5.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancel {
    /// The request.
    pub correlation_id: Text,
    /// Why (the reference's `CancelReason` as a number: 0 client disconnect, 1 timeout,
    /// 2 blocked by agent, 3 upstream error, 4 proxy shutdown, 5 manual).
    #[serde(default)]
    pub reason: i32,
    /// When, ms since the epoch.
    #[serde(default)]
    pub timestamp_ms: u64,
}

/// 0x41: a ping (the pong echoes its bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ping {
    /// Counter.
    pub sequence: u64,
    /// When, ms since the epoch.
    pub timestamp_ms: u64,
}

/// Health states, numbered as the reference proxy reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthState {
    /// Serving.
    Healthy = 1,
    /// Serving with limits.
    Degraded = 2,
    /// Finishing what it has, taking nothing new.
    Draining = 3,
    /// Not serving (also sent before a protocol error closes the connection).
    Unhealthy = 4,
}

/// 0x30: the agent's health. The reference proxy reads `state` (1-4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthStatus {
    /// The agent.
    pub agent_id: Text,
    /// [`HealthState`] as a number.
    pub state: i64,
    /// Why, for anything but healthy.
    #[serde(default)]
    pub message: Option<Text>,
    /// Requests in flight on this connection.
    #[serde(default)]
    pub in_flight: u32,
    /// When, ms since the epoch.
    #[serde(default)]
    pub timestamp_ms: u64,
}

/// Flow-control actions, numbered as the reference proxy reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowAction {
    /// Send nothing new on this connection.
    Pause = 1,
    /// Carry on.
    Resume = 2,
}

/// 0x33: pause or resume. The reference proxy reads `action` (1 pause, 2 resume).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowControl {
    /// [`FlowAction`] as a number.
    pub action: i64,
    /// Requests in flight when it was sent.
    #[serde(default)]
    pub in_flight: u32,
    /// When, ms since the epoch.
    #[serde(default)]
    pub timestamp_ms: u64,
}

/// A counter in a [`MetricsReport`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterMetric {
    /// Name.
    pub name: Text,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help: Option<Text>,
    /// Labels.
    #[serde(default)]
    pub labels: Labels,
    /// Value.
    pub value: u64,
}

/// A gauge in a [`MetricsReport`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GaugeMetric {
    /// Name.
    pub name: Text,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help: Option<Text>,
    /// Labels.
    #[serde(default)]
    pub labels: Labels,
    /// Value.
    pub value: f64,
}

/// 0x31: the agent's metrics (the reference's `v2::MetricsReport`, histograms left empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsReport {
    /// The agent.
    pub agent_id: Text,
    /// When, ms since the epoch.
    pub timestamp_ms: u64,
    /// Interval covered, ms.
    pub interval_ms: u64,
    /// Counters.
    #[serde(default)]
    pub counters: Vec<CounterMetric>,
    /// Gauges.
    #[serde(default)]
    pub gauges: Vec<GaugeMetric>,
    /// Histograms (not sent by this crate; kept for the reference's shape).
    #[serde(default)]
    pub histograms: Vec<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Encoding;

    #[test]
    fn response_wire_encodes_as_the_answer_with_its_id_set() {
        let mut full = AgentResponse::block(403, Some("no".into()));
        full.request_headers.push(HeaderOp::Set {
            name: "x-waf".into(),
            value: "1".into(),
        });
        full.routing_metadata.insert("pool".into(), "b".into());
        full.audit.tags.push("sqli".into());
        full.audit.confidence = Some(0.5);
        for (k, v) in [("a", 1), ("correlation_id", 2), ("zeta", 3)] {
            full.audit.custom.insert(k.into(), serde_json::json!(v));
        }
        full.needs_more = true;
        full.websocket_decision = Some(WebSocketDecision::Drop);
        for response in [AgentResponse::allow(), full] {
            let mut set = response.clone();
            set.set_correlation_id("cid-7");
            for encoding in [Encoding::Json, Encoding::MsgPack] {
                assert_eq!(
                    encoding
                        .encode(&ResponseWire::new(&response, "cid-7"))
                        .unwrap(),
                    encoding.encode(&set).unwrap(),
                    "{encoding:?}"
                );
            }
        }
    }

    #[test]
    fn body_reads_base64_text_and_binary_and_refuses_other_text() {
        #[derive(Deserialize)]
        struct B {
            data: Body,
        }
        let b: B = serde_json::from_str(r#"{"data":"AAEC/w=="}"#).unwrap();
        assert_eq!(&b.data.0[..], &[0, 1, 2, 255]);
        assert!(serde_json::from_str::<B>(r#"{"data":"not base64!"}"#).is_err());
        #[derive(Serialize)]
        struct Bin<'a> {
            data: BinBody<'a>,
        }
        let raw = [0xff, 0xfe, 0x00, 0x80];
        let bytes = Encoding::MsgPack
            .encode(&Bin {
                data: BinBody(&raw),
            })
            .unwrap();
        let b: B = Encoding::MsgPack.decode(&bytes).unwrap();
        assert_eq!(&b.data.0[..], &raw, "non-UTF-8 bin stays bytes");
    }

    #[test]
    fn decisions_have_the_reference_shapes() {
        let j = |d: &Decision| serde_json::to_string(d).unwrap();
        assert_eq!(j(&Decision::Allow), r#""allow""#);
        assert_eq!(
            j(&Decision::Block {
                status: 403,
                body: Some("x".into()),
                headers: None
            }),
            r#"{"block":{"status":403,"body":"x","headers":null}}"#
        );
        let mut r = AgentResponse::allow();
        r.set_correlation_id("cid-1");
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"version":2,"decision":"allow","request_headers":[],"response_headers":[],"routing_metadata":{},"audit":{"tags":[],"rule_ids":[],"confidence":null,"reason_codes":[],"custom":{"correlation_id":"cid-1"}},"needs_more":false,"request_body_mutation":null,"response_body_mutation":null,"websocket_decision":null}"#
        );
    }
}
