//! The envelope: the one unit of agent messaging.
//!
//! This module owns the in-memory shape of a message and how each field is represented by the
//! two codecs (through serde, switching on `is_human_readable`: MessagePack gets compact
//! integers and raw bytes, JSON gets names and base64). It must not know about frames, streams
//! or sockets.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use bytes::Bytes;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeTuple, Serializer};
use serde::{Deserialize, Serialize};

use crate::Codec;

/// What a message is for. The hub routes every kind the same way; the kind tells agents and
/// metrics what the message means.
///
/// On the wire (MessagePack) a kind is its numeric code; in JSON it is its lowercase name.
///
/// ```
/// use agentwire_proto::Kind;
/// assert_eq!(Kind::from_code(1), Some(Kind::Result));
/// assert_eq!(Kind::Request.name(), "request");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A unit of work handed to an agent.
    Task = 0,
    /// The outcome of a task.
    Result = 1,
    /// A state update.
    State = 2,
    /// An application-level heartbeat (hub liveness uses heartbeat frames, not this kind).
    Heartbeat = 3,
    /// State synchronisation.
    Sync = 4,
    /// A request that expects exactly one [`Kind::Response`].
    Request = 5,
    /// The answer to a [`Kind::Request`]; its correlation id is the request's id.
    Response = 6,
    /// A notification (the hub's join/leave events use this kind).
    Event = 7,
    /// An error report; the hub sends these to a sender whose message it could not deliver.
    Error = 8,
}

impl Kind {
    /// Every kind, in code order.
    pub const ALL: [Kind; 9] = [
        Kind::Task,
        Kind::Result,
        Kind::State,
        Kind::Heartbeat,
        Kind::Sync,
        Kind::Request,
        Kind::Response,
        Kind::Event,
        Kind::Error,
    ];

    /// The numeric code used by MessagePack.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The kind for a numeric code, if there is one.
    pub fn from_code(code: u8) -> Option<Kind> {
        Kind::ALL.get(usize::from(code)).copied()
    }

    /// The lowercase name used by JSON, metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Task => "task",
            Kind::Result => "result",
            Kind::State => "state",
            Kind::Heartbeat => "heartbeat",
            Kind::Sync => "sync",
            Kind::Request => "request",
            Kind::Response => "response",
            Kind::Event => "event",
            Kind::Error => "error",
        }
    }

    /// The kind for a lowercase name, if there is one.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Delivery priority. Transports send a higher class ahead of queued lower classes.
///
/// Codes run from 0 (critical) to 3 (low), so a smaller code is more urgent.
///
/// ```
/// use agentwire_proto::Priority;
/// assert!(Priority::Critical < Priority::Low);
/// assert_eq!(Priority::default(), Priority::Medium);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Priority {
    /// Control traffic that must overtake everything else.
    Critical = 0,
    /// Interactive traffic.
    High = 1,
    /// The default class.
    #[default]
    Medium = 2,
    /// Bulk traffic.
    Low = 3,
}

impl Priority {
    /// Every class, most urgent first.
    pub const ALL: [Priority; 4] = [
        Priority::Critical,
        Priority::High,
        Priority::Medium,
        Priority::Low,
    ];

    /// The numeric code used by MessagePack (0 = critical).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The class for a numeric code, if there is one.
    pub fn from_code(code: u8) -> Option<Priority> {
        Priority::ALL.get(usize::from(code)).copied()
    }

    /// The lowercase name used by JSON, metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::High => "high",
            Priority::Medium => "medium",
            Priority::Low => "low",
        }
    }

    /// The class for a lowercase name, if there is one.
    pub fn from_name(name: &str) -> Option<Priority> {
        Priority::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The index of this class in [`Priority::ALL`] (0 = critical), for per-class arrays.
    pub fn index(self) -> usize {
        usize::from(self.code())
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a message goes: one agent, every subscriber of a topic, or every other agent.
///
/// ```
/// use agentwire_proto::Destination;
/// assert_eq!(Destination::agent("w1").to_string(), "agent:w1");
/// assert_eq!("topic:news".parse::<Destination>().unwrap(), Destination::topic("news"));
/// assert_eq!("*".parse::<Destination>().unwrap(), Destination::Broadcast);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Destination {
    /// One agent, by id.
    Agent(String),
    /// Every agent subscribed to the topic.
    Topic(String),
    /// Every connected agent except the sender.
    Broadcast,
    /// A durable work queue: the hub stores the message as a task and hands it to one of the
    /// queue's consumers at a time until one acks it.
    Queue(String),
}

impl Destination {
    /// A destination for one agent.
    pub fn agent(id: impl Into<String>) -> Self {
        Destination::Agent(id.into())
    }

    /// A destination for a topic's subscribers.
    pub fn topic(name: impl Into<String>) -> Self {
        Destination::Topic(name.into())
    }

    /// A work queue, by name.
    pub fn queue(name: impl Into<String>) -> Self {
        Destination::Queue(name.into())
    }

    fn tag(&self) -> u8 {
        match self {
            Destination::Agent(_) => 0,
            Destination::Topic(_) => 1,
            Destination::Broadcast => 2,
            Destination::Queue(_) => 3,
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Destination::Agent(_) => "agent",
            Destination::Topic(_) => "topic",
            Destination::Broadcast => "broadcast",
            Destination::Queue(_) => "queue",
        }
    }

    fn name(&self) -> &str {
        match self {
            Destination::Agent(n) | Destination::Topic(n) | Destination::Queue(n) => n,
            Destination::Broadcast => "",
        }
    }

    fn from_parts(tag_or_type: DestinationTag<'_>, name: String) -> Option<Self> {
        match tag_or_type {
            DestinationTag::Code(0) | DestinationTag::Name("agent") => {
                Some(Destination::Agent(name))
            }
            DestinationTag::Code(1) | DestinationTag::Name("topic") => {
                Some(Destination::Topic(name))
            }
            DestinationTag::Code(2) | DestinationTag::Name("broadcast") => {
                Some(Destination::Broadcast)
            }
            DestinationTag::Code(3) | DestinationTag::Name("queue") => {
                Some(Destination::Queue(name))
            }
            _ => None,
        }
    }
}

enum DestinationTag<'a> {
    Code(u8),
    Name(&'a str),
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Agent(n) => write!(f, "agent:{n}"),
            Destination::Topic(n) => write!(f, "topic:{n}"),
            Destination::Broadcast => f.write_str("*"),
            Destination::Queue(n) => write!(f, "queue:{n}"),
        }
    }
}

/// A destination string whose name part is empty (`topic:`, `agent:`, an empty string).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("destination {0:?} has an empty name")]
pub struct EmptyDestination(pub String);

impl std::str::FromStr for Destination {
    type Err = EmptyDestination;

    /// Parses `agent:ID`, `topic:NAME`, `queue:NAME`, `*` (broadcast), or a bare agent id.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "*" || s == "broadcast" {
            return Ok(Destination::Broadcast);
        }
        let dest = match s.split_once(':') {
            Some(("agent", id)) => Destination::agent(id),
            Some(("topic", t)) => Destination::topic(t),
            Some(("queue", q)) => Destination::queue(q),
            _ => Destination::agent(s),
        };
        if dest.name().is_empty() {
            return Err(EmptyDestination(s.to_owned()));
        }
        Ok(dest)
    }
}

/// One agent message, with its routing header and an opaque body.
///
/// Field order is wire order: MessagePack encodes an envelope as a 10-element array in the
/// order the fields are declared here (see `docs/protocol.md`).
///
/// `id` is chosen by the sender and unique among its own messages; `(from, id)` names a message
/// across the system. A response's `correlation` is the id of the request it answers.
///
/// ```
/// use agentwire_proto::{Destination, Envelope, Kind, Priority};
/// let env = Envelope::new(7, "a", Destination::topic("jobs"), Kind::Event)
///     .with_priority(Priority::High)
///     .with_header("trace", "abc")
///     .with_body(&b"{}"[..]);
/// assert_eq!(env.headers["trace"], "abc");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Sender-chosen id, unique among the sender's messages.
    pub id: u64,
    /// The sending agent's id. The hub overwrites it with the authenticated id.
    pub from: String,
    /// Where the message goes.
    pub to: Destination,
    /// What the message is.
    pub kind: Kind,
    /// Delivery class.
    pub priority: Priority,
    /// Time to live in milliseconds after `timestamp_us`; 0 means no expiry.
    pub ttl_ms: u32,
    /// Sender's clock when the message was made, microseconds since the Unix epoch.
    pub timestamp_us: u64,
    /// For responses and errors: the id of the message this one answers.
    pub correlation: Option<u64>,
    /// A small map of text headers (bounded by [`crate::Limits`]).
    pub headers: BTreeMap<String, String>,
    /// The payload, opaque to agentwire.
    #[serde(with = "body_repr")]
    pub body: Bytes,
}

impl Envelope {
    /// About how many bytes the envelope takes encoded with `codec` (never fewer than it
    /// takes in MessagePack; JSON's base64 body is counted at its size): a capacity to reserve
    /// before encoding, so that the body is copied once.
    ///
    /// ```
    /// use agentwire_proto::{Codec, Destination, Envelope, Kind};
    /// let env = Envelope::new(1, "a", Destination::agent("b"), Kind::Task).with_body(vec![7u8; 10_000]);
    /// for codec in Codec::ALL {
    ///     assert!(codec.encode(&env).unwrap().len() <= env.encoded_len_hint(codec));
    /// }
    /// ```
    pub fn encoded_len_hint(&self, codec: Codec) -> usize {
        let body = match codec {
            Codec::MsgPack => self.body.len(),
            Codec::Json => self.body.len().div_ceil(3) * 4,
        };
        let headers: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.len() + 8)
            .sum();
        let to = match &self.to {
            Destination::Agent(s) | Destination::Topic(s) | Destination::Queue(s) => s.len(),
            Destination::Broadcast => 0,
        };
        // Fixed fields, field names (JSON) and framing of strings and arrays.
        let fixed = match codec {
            Codec::MsgPack => 64,
            Codec::Json => 256,
        };
        fixed + self.from.len() + to + headers + body
    }

    /// A medium-priority envelope with no ttl, no correlation, no headers and an empty body.
    /// The timestamp is 0 until the caller sets it (this crate reads no clock).
    pub fn new(id: u64, from: impl Into<String>, to: Destination, kind: Kind) -> Self {
        Envelope {
            id,
            from: from.into(),
            to,
            kind,
            priority: Priority::Medium,
            ttl_ms: 0,
            timestamp_us: 0,
            correlation: None,
            headers: BTreeMap::new(),
            body: Bytes::new(),
        }
    }

    /// Sets the body.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the priority.
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Adds a header.
    pub fn with_header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(key.into(), value.into());
        self
    }

    /// Sets the correlation id.
    pub fn with_correlation(mut self, id: u64) -> Self {
        self.correlation = Some(id);
        self
    }

    /// Sets the time to live in milliseconds (0 = no expiry).
    pub fn with_ttl_ms(mut self, ttl_ms: u32) -> Self {
        self.ttl_ms = ttl_ms;
        self
    }

    /// Sets the timestamp (microseconds since the Unix epoch).
    pub fn with_timestamp_us(mut self, timestamp_us: u64) -> Self {
        self.timestamp_us = timestamp_us;
        self
    }

    /// True when `ttl_ms` is set and `now_us` is past `timestamp_us + ttl_ms`.
    ///
    /// ```
    /// use agentwire_proto::{Destination, Envelope, Kind};
    /// let e = Envelope::new(1, "a", Destination::Broadcast, Kind::Event)
    ///     .with_timestamp_us(1_000_000).with_ttl_ms(10);
    /// assert!(!e.is_expired(1_005_000));
    /// assert!(e.is_expired(1_010_001));
    /// ```
    pub fn is_expired(&self, now_us: u64) -> bool {
        self.ttl_ms != 0
            && now_us
                > self
                    .timestamp_us
                    .saturating_add(u64::from(self.ttl_ms) * 1000)
    }
}

// ---- serde representations -------------------------------------------------------------

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(self.name())
        } else {
            s.serialize_u8(self.code())
        }
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let name = String::deserialize(d)?;
            Kind::from_name(&name)
                .ok_or_else(|| de::Error::custom(format!("unknown kind {name:?}")))
        } else {
            let code = u8::deserialize(d)?;
            Kind::from_code(code).ok_or_else(|| de::Error::custom(format!("unknown kind {code}")))
        }
    }
}

impl Serialize for Priority {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(self.name())
        } else {
            s.serialize_u8(self.code())
        }
    }
}

impl<'de> Deserialize<'de> for Priority {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let name = String::deserialize(d)?;
            Priority::from_name(&name)
                .ok_or_else(|| de::Error::custom(format!("unknown priority {name:?}")))
        } else {
            let code = u8::deserialize(d)?;
            Priority::from_code(code)
                .ok_or_else(|| de::Error::custom(format!("unknown priority {code}")))
        }
    }
}

/// JSON form of a destination: `{"type": "agent", "name": "w1"}`.
#[derive(Serialize, Deserialize)]
struct DestinationJson {
    #[serde(rename = "type")]
    kind: String,
    name: String,
}

impl Serialize for Destination {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            DestinationJson {
                kind: self.type_name().to_owned(),
                name: self.name().to_owned(),
            }
            .serialize(s)
        } else {
            let mut t = s.serialize_tuple(2)?;
            t.serialize_element(&self.tag())?;
            t.serialize_element(self.name())?;
            t.end()
        }
    }
}

impl<'de> Deserialize<'de> for Destination {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let j = DestinationJson::deserialize(d)?;
            Destination::from_parts(DestinationTag::Name(&j.kind), j.name)
                .ok_or_else(|| de::Error::custom(format!("unknown destination type {:?}", j.kind)))
        } else {
            struct TupleVisitor;
            impl<'de> Visitor<'de> for TupleVisitor {
                type Value = Destination;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a [tag, name] destination")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Destination, A::Error> {
                    let tag: u8 = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                    let name: String = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                    Destination::from_parts(DestinationTag::Code(tag), name)
                        .ok_or_else(|| de::Error::custom(format!("unknown destination tag {tag}")))
                }
            }
            d.deserialize_tuple(2, TupleVisitor)
        }
    }
}

/// The body: raw bytes in MessagePack, standard base64 (with padding) in JSON.
/// An envelope as MessagePack carries it, with the body borrowed from the frame (same fields,
/// same order as [`Envelope`]; `Codec::decode_envelope` turns the borrowed body into a slice
/// of the frame's buffer instead of copying it).
#[derive(Deserialize)]
pub(crate) struct BorrowedEnvelope<'a> {
    id: u64,
    from: String,
    to: Destination,
    kind: Kind,
    priority: Priority,
    ttl_ms: u32,
    timestamp_us: u64,
    correlation: Option<u64>,
    headers: BTreeMap<String, String>,
    #[serde(borrow)]
    pub(crate) body: &'a [u8],
}

impl BorrowedEnvelope<'_> {
    /// The envelope, with `body` in place of the borrowed one.
    pub(crate) fn with_body(self, body: Bytes) -> Envelope {
        Envelope {
            id: self.id,
            from: self.from,
            to: self.to,
            kind: self.kind,
            priority: self.priority,
            ttl_ms: self.ttl_ms,
            timestamp_us: self.timestamp_us,
            correlation: self.correlation,
            headers: self.headers,
            body,
        }
    }
}

pub(crate) mod body_repr {
    use super::*;

    pub fn serialize<S: Serializer>(body: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(body))
        } else {
            s.serialize_bytes(body)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        if d.is_human_readable() {
            let text = String::deserialize(d)?;
            base64::engine::general_purpose::STANDARD
                .decode(text.as_bytes())
                .map(Bytes::from)
                .map_err(|e| de::Error::custom(format!("body is not valid base64: {e}")))
        } else {
            let buf: serde_bytes::ByteBuf = serde_bytes::ByteBuf::deserialize(d)?;
            Ok(Bytes::from(buf.into_vec()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Codec;

    fn small() -> Envelope {
        Envelope::new(1, "a", Destination::agent("b"), Kind::Task).with_body(&b"hi"[..])
    }

    #[test]
    fn msgpack_layout_is_a_10_array() {
        let bytes = Codec::MsgPack.encode(&small()).unwrap();
        assert_eq!(
            bytes,
            [
                0x9a, // array of 10
                0x01, // id
                0xa1, b'a', // from
                0x92, 0x00, 0xa1, b'b', // to: [0, "b"]
                0x00, // kind task
                0x02, // priority medium
                0x00, // ttl_ms
                0x00, // timestamp_us
                0xc0, // correlation nil
                0x80, // headers {}
                0xc4, 0x02, b'h', b'i', // body bin8
            ]
        );
    }

    #[test]
    fn json_layout_uses_names_and_base64() {
        let env = small()
            .with_correlation(5)
            .with_priority(Priority::Low)
            .with_header("k", "v");
        let v: serde_json::Value =
            serde_json::from_slice(&Codec::Json.encode(&env).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "id": 1, "from": "a", "to": {"type": "agent", "name": "b"},
                "kind": "task", "priority": "low", "ttl_ms": 0, "timestamp_us": 0,
                "correlation": 5, "headers": {"k": "v"}, "body": "aGk="
            })
        );
        let b: serde_json::Value = serde_json::from_slice(
            &Codec::Json
                .encode(&Envelope::new(1, "a", Destination::Broadcast, Kind::Event))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            b["to"],
            serde_json::json!({"type": "broadcast", "name": ""})
        );
        assert_eq!(b["correlation"], serde_json::Value::Null);
    }

    #[test]
    fn kind_and_priority_codes_and_names() {
        for (i, k) in Kind::ALL.iter().enumerate() {
            assert_eq!(usize::from(k.code()), i);
            assert_eq!(Kind::from_code(k.code()), Some(*k));
            assert_eq!(Kind::from_name(k.name()), Some(*k));
            assert_eq!(k.to_string(), k.name());
        }
        assert_eq!(Kind::from_code(9), None);
        assert_eq!(Kind::from_name("Task"), None);
        for (i, p) in Priority::ALL.iter().enumerate() {
            assert_eq!(p.index(), i);
            assert_eq!(Priority::from_code(p.code()), Some(*p));
            assert_eq!(Priority::from_name(p.name()), Some(*p));
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!(Priority::from_code(4), None);
        assert!(Priority::Critical < Priority::High);
    }

    #[test]
    fn unknown_codes_do_not_decode() {
        let mut bytes = Codec::MsgPack.encode(&small()).unwrap();
        bytes[8] = 9; // kind
        assert!(Codec::MsgPack.decode::<Envelope>(&bytes).is_err());
        let mut bytes = Codec::MsgPack.encode(&small()).unwrap();
        bytes[9] = 4; // priority
        assert!(Codec::MsgPack.decode::<Envelope>(&bytes).is_err());
        let mut bytes = Codec::MsgPack.encode(&small()).unwrap();
        bytes[5] = 4; // destination tag (0-3 are agent, topic, broadcast, queue)
        assert!(Codec::MsgPack.decode::<Envelope>(&bytes).is_err());
        let mut bytes = Codec::MsgPack.encode(&small()).unwrap();
        bytes[4] = 0x93; // destination with 3 elements
        assert!(Codec::MsgPack.decode::<Envelope>(&bytes).is_err());

        let json = String::from_utf8(Codec::Json.encode(&small()).unwrap()).unwrap();
        for (from, to) in [
            ("\"task\"", "\"Task\""),
            ("\"medium\"", "\"urgent\""),
            ("\"agent\"", "\"group\""),
            ("\"aGk=\"", "\"aGk\""),
            ("\"aGk=\"", "\"!!!!\""),
        ] {
            let bad = json.replace(from, to);
            assert!(
                Codec::Json.decode::<Envelope>(bad.as_bytes()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn json_missing_correlation_is_none() {
        let json = br#"{"id":1,"from":"a","to":{"type":"topic","name":"t"},"kind":"event",
            "priority":"high","ttl_ms":0,"timestamp_us":0,"headers":{},"body":""}"#;
        let env: Envelope = Codec::Json.decode(json).unwrap();
        assert_eq!(env.correlation, None);
        assert_eq!(env.to, Destination::topic("t"));
        assert!(env.body.is_empty());
    }

    #[test]
    fn destination_text_forms() {
        assert_eq!("agent:w1".parse(), Ok(Destination::agent("w1")));
        assert_eq!("w1".parse(), Ok(Destination::agent("w1")));
        assert_eq!("topic:a:b".parse(), Ok(Destination::topic("a:b")));
        assert_eq!("broadcast".parse(), Ok(Destination::Broadcast));
        assert!("agent:".parse::<Destination>().is_err());
        assert!("topic:".parse::<Destination>().is_err());
        assert!("".parse::<Destination>().is_err());
        for d in [
            Destination::agent("x"),
            Destination::topic("y"),
            Destination::Broadcast,
        ] {
            assert_eq!(d.to_string().parse(), Ok(d));
        }
    }

    #[test]
    fn expiry() {
        let e = small().with_timestamp_us(1_000);
        assert!(!e.is_expired(u64::MAX));
        let e = e.with_ttl_ms(1);
        assert!(!e.is_expired(2_000));
        assert!(e.is_expired(2_001));
        let far = small()
            .with_timestamp_us(u64::MAX - 1)
            .with_ttl_ms(u32::MAX);
        assert!(!far.is_expired(u64::MAX));
    }

    #[test]
    fn builders() {
        let e = small()
            .with_header("a", "1")
            .with_header("a", "2")
            .with_correlation(4)
            .with_ttl_ms(5)
            .with_timestamp_us(6)
            .with_priority(Priority::Critical);
        assert_eq!(e.headers.len(), 1);
        assert_eq!(e.headers["a"], "2");
        assert_eq!(
            (e.correlation, e.ttl_ms, e.timestamp_us, e.priority),
            (Some(4), 5, 6, Priority::Critical)
        );
    }
}
