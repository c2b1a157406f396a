//! The routing header of an envelope, read in place: what a hub needs to forward a message
//! without decoding it into an [`Envelope`] and encoding it again.
//!
//! [`EnvelopeView::parse`] reads a MessagePack envelope's fields as borrowed slices of the
//! frame's payload: no allocation, the body untouched. It checks everything a full decode
//! checks (types, UTF-8, the destination's tag, no trailing bytes) and counts the headers
//! instead of building a map, so a payload it accepts is one every receiver's
//! [`Codec::decode_envelope`](crate::Codec::decode_envelope) accepts too. It declines
//! (`None`) what it does not read in place — JSON, MessagePack whose body is not its last
//! field — and the caller then takes the full decode, which is what reports errors.
//!
//! This module owns reading the header in place; it must not decide what to do with it.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::wire_read::WireEnvelope;
use crate::{Codec, Destination, Envelope, Kind, LimitError, Limits, Priority};

/// Where an envelope goes, borrowed from the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DestinationRef<'a> {
    /// One agent, by id.
    Agent(&'a str),
    /// A topic's subscribers.
    Topic(&'a str),
    /// Every connected agent except the sender.
    Broadcast,
    /// A work queue.
    Queue(&'a str),
}

impl<'a> DestinationRef<'a> {
    /// The destination MessagePack writes as `[tag, name]` (a broadcast's name is ignored);
    /// `None` for an unknown tag.
    pub(crate) fn from_tag(tag: u64, name: &'a str) -> Option<Self> {
        Some(match tag {
            0 => DestinationRef::Agent(name),
            1 => DestinationRef::Topic(name),
            2 => DestinationRef::Broadcast,
            3 => DestinationRef::Queue(name),
            _ => return None,
        })
    }

    /// The owned destination.
    pub fn to_owned(self) -> Destination {
        match self {
            DestinationRef::Agent(n) => Destination::agent(n),
            DestinationRef::Topic(n) => Destination::topic(n),
            DestinationRef::Broadcast => Destination::Broadcast,
            DestinationRef::Queue(n) => Destination::queue(n),
        }
    }
}

impl<'a> From<&'a Destination> for DestinationRef<'a> {
    fn from(d: &'a Destination) -> Self {
        match d {
            Destination::Agent(n) => DestinationRef::Agent(n),
            Destination::Topic(n) => DestinationRef::Topic(n),
            Destination::Broadcast => DestinationRef::Broadcast,
            Destination::Queue(n) => DestinationRef::Queue(n),
        }
    }
}

/// An envelope's routing header, read in place from a MessagePack payload.
///
/// ```
/// use agentwire_proto::{Codec, Destination, Envelope, EnvelopeView, DestinationRef, Kind, Limits};
/// let env = Envelope::new(7, "a", Destination::agent("b"), Kind::Request)
///     .with_header("trace", "t1")
///     .with_body(vec![1u8; 1000]);
/// let payload = Codec::MsgPack.encode(&env).unwrap();
/// let view = EnvelopeView::parse(&payload).expect("array layout is read in place");
/// assert_eq!((view.id, view.from, view.to), (7, "a", DestinationRef::Agent("b")));
/// assert_eq!((view.header_count, view.body.len()), (1, 1000));
/// assert!(view.check(&Limits::default()).is_ok());
/// // JSON is not read in place.
/// let json = Codec::Json.encode(&env).unwrap();
/// assert!(EnvelopeView::parse_with(Codec::Json, &json).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvelopeView<'a> {
    /// Sender-chosen id.
    pub id: u64,
    /// The sender's id as written (the hub replaces it if it differs from the session's).
    pub from: &'a str,
    /// Where it goes.
    pub to: DestinationRef<'a>,
    /// What it is.
    pub kind: Kind,
    /// Delivery class.
    pub priority: Priority,
    /// Time to live in milliseconds after `timestamp_us`; 0 means no expiry.
    pub ttl_ms: u32,
    /// Sender's clock when made, microseconds since the Unix epoch.
    pub timestamp_us: u64,
    /// The id this message answers, for responses and errors.
    pub correlation: Option<u64>,
    /// Number of headers (duplicate keys counted each time).
    pub header_count: usize,
    /// Bytes of header keys and values together.
    pub header_bytes: usize,
    /// The body, a slice of the payload.
    pub body: &'a [u8],
}

impl<'a> EnvelopeView<'a> {
    /// Reads a MessagePack envelope in place. `None` when the payload is not an envelope in
    /// the array layout with the body last: other layouts (a map, a body that is not `bin`)
    /// may still decode fully, and the full decode is what reports an error.
    pub fn parse(payload: &'a [u8]) -> Option<Self> {
        if let Some(wire) = WireEnvelope::read(payload) {
            return Some(wire.view);
        }
        // Any other layout (a map, a signed encoding) through serde.
        let mut de = rmp_serde::Deserializer::from_read_ref(payload);
        let wire = WireView::deserialize(&mut de).ok()?;
        let body_end = wire.body.as_ptr() as usize + wire.body.len();
        let payload_end = payload.as_ptr() as usize + payload.len();
        if body_end != payload_end {
            return None;
        }
        Some(EnvelopeView {
            id: wire.id,
            from: wire.from,
            to: wire.to.0,
            kind: wire.kind,
            priority: wire.priority,
            ttl_ms: wire.ttl_ms,
            timestamp_us: wire.timestamp_us,
            correlation: wire.correlation,
            header_count: wire.headers.count,
            header_bytes: wire.headers.bytes,
            body: wire.body,
        })
    }

    /// [`parse`](EnvelopeView::parse) for a session's codec: JSON is never read in place.
    pub fn parse_with(codec: Codec, payload: &'a [u8]) -> Option<Self> {
        match codec {
            Codec::MsgPack => Self::parse(payload),
            Codec::Json => None,
        }
    }

    /// The header of a decoded envelope, borrowed from it.
    pub fn of(env: &'a Envelope) -> Self {
        EnvelopeView {
            id: env.id,
            from: &env.from,
            to: DestinationRef::from(&env.to),
            kind: env.kind,
            priority: env.priority,
            ttl_ms: env.ttl_ms,
            timestamp_us: env.timestamp_us,
            correlation: env.correlation,
            header_count: env.headers.len(),
            header_bytes: env.headers.iter().map(|(k, v)| k.len() + v.len()).sum(),
            body: &env.body,
        }
    }

    /// The checks [`Limits::check_envelope`] makes, on the view.
    pub fn check(&self, limits: &Limits) -> Result<(), LimitError> {
        if self.header_count > limits.max_headers {
            return Err(LimitError::TooManyHeaders {
                count: self.header_count,
                max: limits.max_headers,
            });
        }
        if self.header_bytes > limits.max_header_bytes {
            return Err(LimitError::HeadersTooLarge {
                bytes: self.header_bytes,
                max: limits.max_header_bytes,
            });
        }
        match self.to {
            DestinationRef::Agent(n) | DestinationRef::Topic(n) | DestinationRef::Queue(n) => {
                limits.check_name(n)?
            }
            DestinationRef::Broadcast => {}
        }
        if !self.from.is_empty() {
            limits.check_name(self.from)?;
        }
        Ok(())
    }

    /// True when `ttl_ms` is set and `now_us` is past `timestamp_us + ttl_ms` (as
    /// [`Envelope::is_expired`]).
    pub fn is_expired(&self, now_us: u64) -> bool {
        self.ttl_ms != 0
            && now_us
                > self
                    .timestamp_us
                    .saturating_add(u64::from(self.ttl_ms) * 1000)
    }
}

/// The wire layout, field by field as [`Envelope`] declares them, borrowed.
#[derive(Deserialize)]
struct WireView<'a> {
    id: u64,
    #[serde(borrow)]
    from: &'a str,
    #[serde(borrow)]
    to: WireDestination<'a>,
    kind: Kind,
    priority: Priority,
    ttl_ms: u32,
    timestamp_us: u64,
    correlation: Option<u64>,
    headers: HeaderCount,
    #[serde(borrow)]
    body: &'a [u8],
}

/// A destination as MessagePack writes it: `[tag, name]`.
struct WireDestination<'a>(DestinationRef<'a>);

impl<'de: 'a, 'a> Deserialize<'de> for WireDestination<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TupleVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for TupleVisitor<'a> {
            type Value = WireDestination<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a [tag, name] destination")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let tag: u8 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let name: &'a str = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                DestinationRef::from_tag(u64::from(tag), name)
                    .map(WireDestination)
                    .ok_or_else(|| de::Error::custom(format!("unknown destination tag {tag}")))
            }
        }
        d.deserialize_tuple(2, TupleVisitor(std::marker::PhantomData))
    }
}

/// A header map, counted and measured but not kept.
struct HeaderCount {
    count: usize,
    bytes: usize,
}

impl<'de> Deserialize<'de> for HeaderCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MapVisitor;
        impl<'de> Visitor<'de> for MapVisitor {
            type Value = HeaderCount;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of text headers")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HeaderCount, A::Error> {
                let mut out = HeaderCount { count: 0, bytes: 0 };
                while let Some((k, v)) = map.next_entry::<&'de str, &'de str>()? {
                    out.count += 1;
                    out.bytes += k.len() + v.len();
                }
                Ok(out)
            }
        }
        d.deserialize_map(MapVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Envelope {
        Envelope::new(42, "sender", Destination::topic("jobs"), Kind::Response)
            .with_priority(Priority::Critical)
            .with_ttl_ms(1500)
            .with_timestamp_us(1_700_000_000_000_000)
            .with_correlation(41)
            .with_header("a", "1")
            .with_header("bb", "22")
            .with_body(vec![9u8; 300])
    }

    #[test]
    fn view_matches_the_decoded_envelope() {
        for env in [
            full(),
            Envelope::new(1, "", Destination::Broadcast, Kind::Event),
            Envelope::new(2, "x", Destination::agent("y"), Kind::Request)
                .with_body(vec![0u8; 70_000]),
        ] {
            let payload = Codec::MsgPack.encode(&env).unwrap();
            let view = EnvelopeView::parse(&payload).unwrap();
            assert_eq!(view, EnvelopeView::of(&env));
            assert_eq!(view.to.to_owned(), env.to);
            let limits = Limits::default();
            assert_eq!(view.check(&limits), limits.check_envelope(&env));
            assert_eq!(
                view.is_expired(1_700_000_001_600_000),
                env.is_expired(1_700_000_001_600_000)
            );
        }
    }

    #[test]
    fn trailing_bytes_and_garbage_are_declined_not_refused() {
        let env = full();
        // Written as a map, the body still comes last: read in place as well.
        let named = rmp_serde::to_vec_named(&env).unwrap();
        assert_eq!(EnvelopeView::parse(&named), Some(EnvelopeView::of(&env)));
        let mut trailing = Codec::MsgPack.encode(&env).unwrap();
        trailing.push(0xc0);
        assert_eq!(EnvelopeView::parse(&trailing), None);
        assert_eq!(EnvelopeView::parse(b"\xc1garbage"), None);
    }

    #[test]
    fn limits_are_checked_like_the_full_envelope() {
        let limits = Limits {
            max_headers: 1,
            ..Limits::default()
        };
        let env = full();
        let payload = Codec::MsgPack.encode(&env).unwrap();
        let view = EnvelopeView::parse(&payload).unwrap();
        assert_eq!(view.check(&limits), limits.check_envelope(&env));
        assert!(view.check(&limits).is_err());
    }
}
