//! Fast paths for reading the payloads read most, in the layout peers write them (serde's:
//! fields in declaration order, structs as maps, compact JSON): the request-headers event
//! every request starts with, body chunks in JSON, metrics reports, and the plain answer to
//! every event (`allow`, nothing but the correlation id in its audit).
//!
//! Each reader follows that layout byte by byte and gives up (`None`) at anything else: a
//! field out of order or unknown, a JSON string with an escape, whitespace, another number
//! form, trailing bytes. The caller then decodes with serde, so the result, and every error,
//! is serde's; a property test checks that whatever these readers accept, serde reads to the
//! same event. Measured with the `agentwire-zap` crate's `zentinel_codec` bench: see
//! `docs/benchmarks/2026-11-26-zentinel-codec/`.
//!
//! This module owns those readers; it must not decide which encoding is used.

use bytes::Bytes;

use crate::Encoding;

use crate::messages::{
    AgentResponse, Body, BodyChunkEvent, CounterMetric, GaugeMetric, MetricsReport,
    RequestHeadersEvent, RequestMetadata, Text,
};
use crate::text::{HeaderValues, Headers, Labels};

/// A request-headers event in `encoding`, or `None` (see the module doc).
pub(crate) fn request_headers(encoding: Encoding, bytes: &[u8]) -> Option<RequestHeadersEvent> {
    match encoding {
        Encoding::Json => request_headers_json(bytes),
        Encoding::MsgPack => request_headers_msgpack(bytes),
    }
}

/// A body chunk in `encoding`, or `None`: MessagePack's `bin` bodies are read by serde fast
/// enough, so only JSON has a fast path.
pub(crate) fn body_chunk(encoding: Encoding, bytes: &[u8]) -> Option<BodyChunkEvent> {
    match encoding {
        Encoding::Json => body_chunk_json(bytes),
        Encoding::MsgPack => None,
    }
}

/// A metrics report in `encoding`, or `None`.
pub(crate) fn metrics_report(encoding: Encoding, bytes: &[u8]) -> Option<MetricsReport> {
    match encoding {
        Encoding::Json => metrics_report_json(bytes),
        Encoding::MsgPack => metrics_report_msgpack(bytes),
    }
}

/// An agent's answer in `encoding`, or `None`: only the plain one (an `allow` whose audit
/// carries nothing but the correlation id, no header operations, routing hints or body
/// changes), which is what most events get; every other answer goes to serde.
pub(crate) fn agent_response(encoding: Encoding, bytes: &[u8]) -> Option<AgentResponse> {
    match encoding {
        Encoding::Json => agent_response_json(bytes),
        Encoding::MsgPack => agent_response_msgpack(bytes),
    }
}

/// The plain answer with these fields, as serde reads it.
fn plain_answer(version: u64, correlation_id: &str, needs_more: bool) -> Option<AgentResponse> {
    let mut response = AgentResponse::allow();
    response.version = u32::try_from(version).ok()?;
    response.needs_more = needs_more;
    response.set_correlation_id(correlation_id);
    Some(response)
}

/// Reads compact JSON as serde_json writes the plain answer, or `None`.
fn agent_response_json(bytes: &[u8]) -> Option<AgentResponse> {
    let mut r = Json { bytes, at: 0 };
    r.lit(br#"{"version":"#)?;
    let version = r.u64()?;
    r.lit(br#","decision":"allow","request_headers":[],"response_headers":[],"routing_metadata":{},"audit":{"tags":[],"rule_ids":[],"confidence":null,"reason_codes":[],"custom":{"correlation_id":"#)?;
    let cid = r.str()?;
    r.lit(br#"}},"needs_more":"#)?;
    let needs_more = r.bool()?;
    r.lit(br#","request_body_mutation":null,"response_body_mutation":null,"websocket_decision":null}"#)?;
    if r.at != bytes.len() {
        return None;
    }
    plain_answer(version, &cid, needs_more)
}

/// Reads MessagePack as rmp_serde writes the plain answer (structs as maps), or `None`.
fn agent_response_msgpack(bytes: &[u8]) -> Option<AgentResponse> {
    let mut r = Pack { bytes, at: 0 };
    r.lit(b"\x8a\xa7version")?;
    let version = r.u64()?;
    r.lit(b"\xa8decision\xa5allow\xafrequest_headers\x90\xb0response_headers\x90\xb0routing_metadata\x80\xa5audit\x85\xa4tags\x90\xa8rule_ids\x90\xaaconfidence\xc0\xacreason_codes\x90\xa6custom\x81\xaecorrelation_id")?;
    let cid = r.str()?;
    r.lit(b"\xaaneeds_more")?;
    let needs_more = match r.byte()? {
        0xc2 => false,
        0xc3 => true,
        _ => return None,
    };
    r.lit(
        b"\xb5request_body_mutation\xc0\xb6response_body_mutation\xc0\xb2websocket_decision\xc0",
    )?;
    if r.at != bytes.len() {
        return None;
    }
    plain_answer(version, &cid, needs_more)
}

/// Most items reserved ahead for a length a peer announced (the list grows past it as items
/// really come): a 16 MiB frame announcing millions of items must not reserve hundreds of
/// MiB before its bytes run out.
const RESERVE_MAX: usize = 256;

/// Reads compact JSON as serde_json writes the event, or `None`.
fn request_headers_json(bytes: &[u8]) -> Option<RequestHeadersEvent> {
    let mut r = Json { bytes, at: 0 };
    r.lit(br#"{"metadata":{"#)?;
    let mut metadata = metadata_fields(&mut r)?;
    if r.lit(br#","traceparent":"#).is_some() {
        metadata.traceparent = r.opt()?;
    }
    r.lit(br#"},"method":"#)?;
    let method = r.str()?;
    r.lit(br#","uri":"#)?;
    let uri = r.str()?;
    r.lit(br#","headers":{"#)?;
    let mut headers = Vec::new();
    if r.lit(b"}").is_none() {
        loop {
            let name = r.str()?;
            r.lit(b":[")?;
            let mut values = HeaderValues::new();
            if r.lit(b"]").is_none() {
                loop {
                    values.push(r.str()?);
                    if r.lit(b",").is_none() {
                        break;
                    }
                }
                r.lit(b"]")?;
            }
            headers.push((name, values));
            if r.lit(b",").is_none() {
                break;
            }
        }
        r.lit(b"}")?;
    }
    r.lit(b"}")?;
    (r.at == bytes.len()).then(|| RequestHeadersEvent {
        metadata,
        method,
        uri,
        headers: Headers::from_pairs(headers),
    })
}

/// What the two layouts share for a struct's fields: its key, then its value.
trait Fields {
    /// Takes the key of field `name`; `first` in its struct (JSON writes no comma before it).
    fn key(&mut self, name: &str, first: bool) -> Option<()>;
    fn str(&mut self) -> Option<Text>;
    fn opt(&mut self) -> Option<Option<Text>>;
    fn u16(&mut self) -> Option<u16>;
}

/// The request metadata's fields up to `timestamp`, in the order serde writes them; the
/// optional `traceparent` that may follow is left to the caller (each layout marks it its own
/// way).
fn metadata_fields(r: &mut impl Fields) -> Option<RequestMetadata> {
    r.key("correlation_id", true)?;
    let correlation_id = r.str()?;
    r.key("request_id", false)?;
    let request_id = r.str()?;
    r.key("client_ip", false)?;
    let client_ip = r.str()?;
    r.key("client_port", false)?;
    let client_port = r.u16()?;
    r.key("server_name", false)?;
    let server_name = r.opt()?;
    r.key("protocol", false)?;
    let protocol = r.str()?;
    r.key("tls_version", false)?;
    let tls_version = r.opt()?;
    r.key("tls_cipher", false)?;
    let tls_cipher = r.opt()?;
    r.key("route_id", false)?;
    let route_id = r.opt()?;
    r.key("upstream_id", false)?;
    let upstream_id = r.opt()?;
    r.key("timestamp", false)?;
    let timestamp = r.str()?;
    Some(RequestMetadata {
        correlation_id,
        request_id,
        client_ip,
        client_port,
        server_name,
        protocol,
        tls_version,
        tls_cipher,
        route_id,
        upstream_id,
        timestamp,
        traceparent: None,
    })
}

struct Json<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Fields for Json<'_> {
    fn key(&mut self, name: &str, first: bool) -> Option<()> {
        if !first {
            self.lit(b",")?;
        }
        self.lit(b"\"")?;
        self.lit(name.as_bytes())?;
        self.lit(b"\":")
    }

    /// A string without escapes or control characters, valid UTF-8.
    fn str(&mut self) -> Option<Text> {
        self.lit(b"\"")?;
        let rest = self.bytes.get(self.at..)?;
        let len = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        let s = std::str::from_utf8(&rest[..len]).ok()?;
        self.at += len + 1;
        Some(Text::from(s))
    }

    fn opt(&mut self) -> Option<Option<Text>> {
        if self.lit(b"null").is_some() {
            return Some(None);
        }
        self.str().map(Some)
    }

    /// A number as serde_json writes a `u16`.
    fn u16(&mut self) -> Option<u16> {
        self.u64().and_then(|v| u16::try_from(v).ok())
    }
}

impl Json<'_> {
    /// Takes `lit` if the input goes on with it.
    fn lit(&mut self, lit: &[u8]) -> Option<()> {
        let rest = self.bytes.get(self.at..)?;
        rest.starts_with(lit).then(|| self.at += lit.len())
    }

    /// A number as serde_json writes an unsigned integer: no sign, no leading zero, no
    /// fraction or exponent, no overflow.
    fn u64(&mut self) -> Option<u64> {
        let rest = self.bytes.get(self.at..)?;
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || (digits > 1 && rest[0] == b'0') {
            return None;
        }
        if matches!(rest.get(digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let mut v: u64 = 0;
        for &d in &rest[..digits] {
            v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        self.at += digits;
        Some(v)
    }

    fn opt_u64(&mut self) -> Option<Option<u64>> {
        if self.lit(b"null").is_some() {
            return Some(None);
        }
        self.u64().map(Some)
    }

    /// A number in JSON's grammar, as `f64` (correctly rounded, as the serde path reads
    /// it).
    fn f64(&mut self) -> Option<f64> {
        let rest = self.bytes.get(self.at..)?;
        let mut i = usize::from(rest.first() == Some(&b'-'));
        let int = rest[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        if int == 0 || (int > 1 && rest[i] == b'0') {
            return None;
        }
        i += int;
        if rest.get(i) == Some(&b'.') {
            let frac = rest[i + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if frac == 0 {
                return None;
            }
            i += 1 + frac;
        }
        if matches!(rest.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(rest.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let exp = rest[i..].iter().take_while(|b| b.is_ascii_digit()).count();
            if exp == 0 {
                return None;
            }
            i += exp;
        }
        let v: f64 = std::str::from_utf8(&rest[..i]).ok()?.parse().ok()?;
        if !v.is_finite() {
            return None;
        }
        self.at += i;
        Some(v)
    }

    fn bool(&mut self) -> Option<bool> {
        if self.lit(b"true").is_some() {
            Some(true)
        } else {
            self.lit(b"false").map(|()| false)
        }
    }

    /// `{"name":..,["help":..,]"labels":{..},"value":` of a metric.
    fn metric_head(&mut self) -> Option<(Text, Option<Text>, Labels)> {
        self.lit(br#"{"name":"#)?;
        let name = self.str()?;
        let help = if self.lit(br#","help":"#).is_some() {
            self.opt()?
        } else {
            None
        };
        self.lit(br#","labels":{"#)?;
        let mut labels = Vec::new();
        if self.lit(b"}").is_none() {
            loop {
                let k = self.str()?;
                self.lit(b":")?;
                labels.push((k, self.str()?));
                if self.lit(b",").is_none() {
                    break;
                }
            }
            self.lit(b"}")?;
        }
        self.lit(br#","value":"#)?;
        Some((name, help, Labels::from_pairs(labels)))
    }

    /// `[` items `]`, each read by `item`.
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        self.lit(b"[")?;
        let mut out = Vec::new();
        if self.lit(b"]").is_some() {
            return Some(out);
        }
        loop {
            out.push(item(self)?);
            if self.lit(b",").is_none() {
                break;
            }
        }
        self.lit(b"]")?;
        Some(out)
    }
}

/// Reads compact JSON as serde_json writes a body chunk, or `None`.
fn body_chunk_json(bytes: &[u8]) -> Option<BodyChunkEvent> {
    let mut r = Json { bytes, at: 0 };
    r.lit(br#"{"correlation_id":"#)?;
    let correlation_id = r.str()?;
    r.lit(br#","data":""#)?;
    let rest = bytes.get(r.at..)?;
    let len = memchr::memchr(b'"', rest)?;
    let data = base64_simd::STANDARD.decode_to_vec(&rest[..len]).ok()?;
    r.at += len + 1;
    r.lit(br#","is_last":"#)?;
    let is_last = r.bool()?;
    r.lit(br#","total_size":"#)?;
    let total_size = r.opt_u64()?;
    r.lit(br#","chunk_index":"#)?;
    let chunk_index = u32::try_from(r.u64()?).ok()?;
    let bytes_received = if r.lit(br#","bytes_received":"#).is_some() {
        r.opt_u64()?
    } else {
        None
    };
    let bytes_sent = if r.lit(br#","bytes_sent":"#).is_some() {
        r.opt_u64()?
    } else {
        None
    };
    r.lit(b"}")?;
    (r.at == bytes.len()).then(|| BodyChunkEvent {
        correlation_id,
        data: Body(Bytes::from(data)),
        is_last,
        total_size,
        chunk_index,
        bytes_received,
        bytes_sent,
    })
}

/// Reads compact JSON as serde_json writes a metrics report (histograms empty), or `None`.
fn metrics_report_json(bytes: &[u8]) -> Option<MetricsReport> {
    let mut r = Json { bytes, at: 0 };
    r.lit(br#"{"agent_id":"#)?;
    let agent_id = r.str()?;
    r.lit(br#","timestamp_ms":"#)?;
    let timestamp_ms = r.u64()?;
    r.lit(br#","interval_ms":"#)?;
    let interval_ms = r.u64()?;
    r.lit(br#","counters":"#)?;
    let counters = r.list(|r| {
        let (name, help, labels) = r.metric_head()?;
        let value = r.u64()?;
        r.lit(b"}")?;
        Some(CounterMetric {
            name,
            help,
            labels,
            value,
        })
    })?;
    r.lit(br#","gauges":"#)?;
    let gauges = r.list(|r| {
        let (name, help, labels) = r.metric_head()?;
        let value = r.f64()?;
        r.lit(b"}")?;
        Some(GaugeMetric {
            name,
            help,
            labels,
            value,
        })
    })?;
    r.lit(br#","histograms":[]}"#)?;
    (r.at == bytes.len()).then(|| MetricsReport {
        agent_id,
        timestamp_ms,
        interval_ms,
        counters,
        gauges,
        histograms: Vec::new(),
    })
}

/// Reads MessagePack as rmp_serde writes a metrics report (histograms empty), or `None`.
fn metrics_report_msgpack(bytes: &[u8]) -> Option<MetricsReport> {
    let mut r = Pack { bytes, at: 0 };
    r.lit(b"\x86\xa8agent_id")?;
    let agent_id = r.str()?;
    r.lit(b"\xactimestamp_ms")?;
    let timestamp_ms = r.u64()?;
    r.lit(b"\xabinterval_ms")?;
    let interval_ms = r.u64()?;
    r.lit(b"\xa8counters")?;
    let n = r.len(0x90, 0xdc)?;
    let mut counters = Vec::with_capacity(n.min(RESERVE_MAX));
    for _ in 0..n {
        let (name, help, labels) = r.metric_head()?;
        counters.push(CounterMetric {
            name,
            help,
            labels,
            value: r.u64()?,
        });
    }
    r.lit(b"\xa6gauges")?;
    let n = r.len(0x90, 0xdc)?;
    let mut gauges = Vec::with_capacity(n.min(RESERVE_MAX));
    for _ in 0..n {
        let (name, help, labels) = r.metric_head()?;
        r.lit(&[0xcb])?;
        let value = f64::from_bits(r.be(8)?);
        gauges.push(GaugeMetric {
            name,
            help,
            labels,
            value,
        });
    }
    r.lit(b"\xaahistograms\x90")?;
    (r.at == bytes.len()).then(|| MetricsReport {
        agent_id,
        timestamp_ms,
        interval_ms,
        counters,
        gauges,
        histograms: Vec::new(),
    })
}

/// Reads MessagePack as rmp_serde writes the event (structs as maps), or `None`.
fn request_headers_msgpack(bytes: &[u8]) -> Option<RequestHeadersEvent> {
    let mut r = Pack { bytes, at: 0 };
    r.lit(b"\x84\xa8metadata")?;
    let with_traceparent = match r.byte()? {
        0x8b => false,
        0x8c => true,
        _ => return None,
    };
    let mut metadata = metadata_fields(&mut r)?;
    if with_traceparent {
        r.lit(b"\xabtraceparent")?;
        metadata.traceparent = r.opt()?;
    }
    r.lit(b"\xa6method")?;
    let method = r.str()?;
    r.lit(b"\xa3uri")?;
    let uri = r.str()?;
    r.lit(b"\xa7headers")?;
    let count = r.len(0x80, 0xde)?;
    let mut headers = Vec::with_capacity(count.min(RESERVE_MAX));
    for _ in 0..count {
        let name = r.str()?;
        let n = r.len(0x90, 0xdc)?;
        let mut values = HeaderValues::with_capacity(n.min(RESERVE_MAX));
        for _ in 0..n {
            values.push(r.str()?);
        }
        headers.push((name, values));
    }
    (r.at == bytes.len()).then(|| RequestHeadersEvent {
        metadata,
        method,
        uri,
        headers: Headers::from_pairs(headers),
    })
}

struct Pack<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Fields for Pack<'_> {
    /// A key as rmp_serde writes a field name: a fixstr.
    fn key(&mut self, name: &str, _first: bool) -> Option<()> {
        self.lit(&[0xa0 | u8::try_from(name.len()).ok().filter(|n| *n < 32)?])?;
        self.lit(name.as_bytes())
    }

    /// A string, valid UTF-8.
    fn str(&mut self) -> Option<Text> {
        let len = match self.byte()? {
            b @ 0xa0..=0xbf => usize::from(b & 0x1f),
            0xd9 => self.be_len(1)?,
            0xda => self.be_len(2)?,
            0xdb => self.be_len(4)?,
            _ => return None,
        };
        let s = std::str::from_utf8(self.take(len)?).ok()?;
        Some(Text::from(s))
    }

    fn opt(&mut self) -> Option<Option<Text>> {
        if self.lit(&[0xc0]).is_some() {
            return Some(None);
        }
        self.str().map(Some)
    }

    /// An unsigned integer up to 65,535 in the forms rmp_serde writes it.
    fn u16(&mut self) -> Option<u16> {
        match self.byte()? {
            b @ 0x00..=0x7f => Some(u16::from(b)),
            0xcc => self.be(1).and_then(|v| u16::try_from(v).ok()),
            0xcd => self.be(2).and_then(|v| u16::try_from(v).ok()),
            _ => None,
        }
    }
}

impl Pack<'_> {
    fn lit(&mut self, lit: &[u8]) -> Option<()> {
        let rest = self.bytes.get(self.at..)?;
        rest.starts_with(lit).then(|| self.at += lit.len())
    }

    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    /// An `n`-byte big-endian unsigned number (`n` at most 8).
    fn be(&mut self, n: usize) -> Option<u64> {
        let b = self.take(n)?;
        Some(b.iter().fold(0u64, |v, &d| (v << 8) | u64::from(d)))
    }

    /// An `n`-byte big-endian length.
    fn be_len(&mut self, n: usize) -> Option<usize> {
        usize::try_from(self.be(n)?).ok()
    }

    /// A map or array length: its fix form (`fix`, 16 values), or 16- or 32-bit (`wide16`,
    /// `wide16 + 1`).
    fn len(&mut self, fix: u8, wide16: u8) -> Option<usize> {
        match self.byte()? {
            b if b & 0xf0 == fix => Some(usize::from(b & 0x0f)),
            b if b == wide16 => self.be_len(2),
            b if b == wide16 + 1 => self.be_len(4),
            _ => None,
        }
    }

    /// An unsigned integer in any of MessagePack's unsigned forms.
    fn u64(&mut self) -> Option<u64> {
        match self.byte()? {
            b @ 0x00..=0x7f => Some(u64::from(b)),
            0xcc => self.be(1),
            0xcd => self.be(2),
            0xce => self.be(4),
            0xcf => self.be(8),
            _ => None,
        }
    }

    /// A metric's map header and fields before its value.
    fn metric_head(&mut self) -> Option<(Text, Option<Text>, Labels)> {
        let with_help = match self.byte()? {
            0x83 => false,
            0x84 => true,
            _ => return None,
        };
        self.lit(b"\xa4name")?;
        let name = self.str()?;
        let help = if with_help {
            self.lit(b"\xa4help")?;
            self.opt()?
        } else {
            None
        };
        self.lit(b"\xa6labels")?;
        let n = self.len(0x80, 0xde)?;
        let mut labels = Vec::with_capacity(n.min(RESERVE_MAX));
        for _ in 0..n {
            let k = self.str()?;
            labels.push((k, self.str()?));
        }
        self.lit(b"\xa5value")?;
        Some((name, help, Labels::from_pairs(labels)))
    }
}

/// Decoding through the fast readers.
impl crate::messages::AgentResponse {
    /// Decodes an answer: the plain one (`allow`, nothing but the correlation id in its
    /// audit) directly, anything else by serde (the same result either way; what the proxy
    /// side uses).
    ///
    /// ```
    /// use agentwire_zap_proto::{messages::{Decision, ResponseWire}, AgentResponse, Encoding};
    /// let wire = Encoding::MsgPack.encode(&ResponseWire::new(&AgentResponse::allow(), "r1"))?;
    /// let answer = AgentResponse::decode(Encoding::MsgPack, &wire)?;
    /// assert_eq!(answer.decision, Decision::Allow);
    /// assert_eq!(answer.correlation_id(), Some("r1"));
    /// # Ok::<(), agentwire_zap_proto::CodecError>(())
    /// ```
    pub fn decode(encoding: crate::Encoding, payload: &[u8]) -> Result<Self, crate::CodecError> {
        encoding.decode_fast(payload, agent_response)
    }
}

/// Decoding through the fast readers.
impl crate::messages::MetricsReport {
    /// Decodes a report: in the layout peers write it directly, anything else by serde (the
    /// same result either way; what the proxy side uses).
    ///
    /// ```
    /// use agentwire_zap_proto::{messages::MetricsReport, Encoding};
    /// let report = MetricsReport::decode(Encoding::Json,
    ///     br#"{"agent_id":"a","timestamp_ms":1,"interval_ms":2,"counters":[],"gauges":[],"histograms":[]}"#)?;
    /// assert_eq!(report.agent_id, "a");
    /// # Ok::<(), agentwire_zap_proto::CodecError>(())
    /// ```
    pub fn decode(encoding: crate::Encoding, payload: &[u8]) -> Result<Self, crate::CodecError> {
        encoding.decode_fast(payload, metrics_report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Encoding;
    use proptest::prelude::*;

    fn event(
        ids: &[String],
        optional: &[Option<String>],
        port: u16,
        headers: &[(String, Vec<String>)],
    ) -> RequestHeadersEvent {
        let opt = |s: &Option<String>| s.as_deref().map(Text::from);
        RequestHeadersEvent {
            metadata: RequestMetadata {
                correlation_id: ids[0].as_str().into(),
                request_id: ids[1].as_str().into(),
                client_ip: ids[2].as_str().into(),
                client_port: port,
                server_name: opt(&optional[0]),
                protocol: ids[3].as_str().into(),
                tls_version: opt(&optional[1]),
                tls_cipher: opt(&optional[2]),
                route_id: opt(&optional[3]),
                upstream_id: opt(&optional[4]),
                timestamp: "2026-11-26T00:00:00Z".into(),
                traceparent: opt(&optional[5]),
            },
            method: "GET".into(),
            uri: ids[0].as_str().into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.iter().map(String::as_str)))
                .collect(),
        }
    }

    fn needs_json_escape(e: &RequestHeadersEvent) -> bool {
        serde_json::to_vec(e).unwrap().contains(&b'\\')
    }

    proptest! {
        /// What the writers write, these readers read back (JSON strings with escapes are
        /// left to serde).
        #[test]
        fn reads_what_serde_writes(
            ids in proptest::collection::vec(any::<String>(), 4),
            optional in proptest::collection::vec(proptest::option::of(any::<String>()), 6),
            port in any::<u16>(),
            headers in proptest::collection::vec((any::<String>(), proptest::collection::vec("[ -~é]{0,300}", 0..20)), 0..20),
        ) {
            let e = event(&ids, &optional, port, &headers);
            let packed = rmp_serde::to_vec_named(&e).unwrap();
            prop_assert_eq!(request_headers_msgpack(&packed), Some(e.clone()));
            let json = serde_json::to_vec(&e).unwrap();
            match request_headers_json(&json) {
                Some(got) => prop_assert_eq!(got, e),
                None => prop_assert!(needs_json_escape(&e)),
            }
        }

        /// Whatever a reader accepts, serde reads to the same event: cut, changed or
        /// appended bytes never make the fast path disagree.
        #[test]
        fn never_disagree_with_serde(
            ids in proptest::collection::vec("[a-z0-9]{0,40}", 4),
            optional in proptest::collection::vec(proptest::option::of("[a-z]{0,8}"), 6),
            port in any::<u16>(),
            headers in proptest::collection::vec(("[a-z]{1,12}", proptest::collection::vec("[ -~]{0,20}", 0..3)), 0..5),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            how in 0u8..3,
        ) {
            let e = event(&ids, &optional, port, &headers);
            for (encoding, mut bytes) in [
                (Encoding::Json, serde_json::to_vec(&e).unwrap()),
                (Encoding::MsgPack, rmp_serde::to_vec_named(&e).unwrap()),
            ] {
                let i = at.index(bytes.len());
                match how {
                    0 => bytes.truncate(i),
                    1 => bytes[i] = byte,
                    _ => bytes.push(byte),
                }
                let fast = match encoding {
                    Encoding::Json => request_headers_json(&bytes),
                    Encoding::MsgPack => request_headers_msgpack(&bytes),
                };
                if let Some(fast) = fast {
                    let slow: RequestHeadersEvent = encoding.decode(&bytes).unwrap();
                    prop_assert_eq!(fast, slow);
                }
            }
        }
    }

    /// A metric's name, help, labels and value, as the tests draw them.
    type MetricParts<V> = (String, Option<String>, Vec<(String, String)>, V);

    fn report(
        agent: &str,
        times: (u64, u64),
        counters: &[MetricParts<u64>],
        gauges: &[MetricParts<f64>],
    ) -> MetricsReport {
        let labels =
            |l: &Vec<(String, String)>| l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        MetricsReport {
            agent_id: agent.into(),
            timestamp_ms: times.0,
            interval_ms: times.1,
            counters: counters
                .iter()
                .map(|(name, help, l, value)| CounterMetric {
                    name: name.as_str().into(),
                    help: help.as_deref().map(Text::from),
                    labels: labels(l),
                    value: *value,
                })
                .collect(),
            gauges: gauges
                .iter()
                .map(|(name, help, l, value)| GaugeMetric {
                    name: name.as_str().into(),
                    help: help.as_deref().map(Text::from),
                    labels: labels(l),
                    value: *value,
                })
                .collect(),
            histograms: Vec::new(),
        }
    }

    fn chunk(
        cid: &str,
        data: Vec<u8>,
        nums: (bool, Option<u64>, u32, Option<u64>, Option<u64>),
    ) -> BodyChunkEvent {
        BodyChunkEvent {
            correlation_id: cid.into(),
            data: Body(data.into()),
            is_last: nums.0,
            total_size: nums.1,
            chunk_index: nums.2,
            bytes_received: nums.3,
            bytes_sent: nums.4,
        }
    }

    /// Applies one of three damages (cut, change, append) at `at`.
    fn damage(bytes: &mut Vec<u8>, at: prop::sample::Index, byte: u8, how: u8) {
        let i = at.index(bytes.len());
        match how {
            0 => bytes.truncate(i),
            1 => bytes[i] = byte,
            _ => bytes.push(byte),
        }
    }

    fn metric_strategy<V: Arbitrary>(
    ) -> impl Strategy<Value = (String, Option<String>, Vec<(String, String)>, V)> {
        (
            "[a-z_]{1,30}",
            proptest::option::of("[ -~]{0,20}"),
            proptest::collection::vec(("[a-z]{1,8}", "[ -~é]{0,12}"), 0..4),
            any::<V>(),
        )
    }

    proptest! {
        #[test]
        fn metrics_and_chunks_read_what_serde_writes_and_never_disagree(
            agent in any::<String>(),
            times in any::<(u64, u64)>(),
            counters in proptest::collection::vec(metric_strategy::<u64>(), 0..5),
            gauges in proptest::collection::vec(metric_strategy::<f64>(), 0..5),
            cid in any::<String>(),
            data in proptest::collection::vec(any::<u8>(), 0..100),
            nums in any::<(bool, Option<u64>, u32, Option<u64>, Option<u64>)>(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            how in 0u8..3,
        ) {
            let gauges: Vec<_> = gauges.into_iter().filter(|g| g.3.is_finite()).collect();
            let r = report(&agent, times, &counters, &gauges);
            let packed = rmp_serde::to_vec_named(&r).unwrap();
            prop_assert_eq!(metrics_report_msgpack(&packed), Some(r.clone()));
            let json = serde_json::to_vec(&r).unwrap();
            match metrics_report_json(&json) {
                Some(got) => prop_assert_eq!(got, r.clone()),
                None => prop_assert!(json.contains(&b'\\')),
            }
            let c = chunk(&cid, data, nums);
            let chunk_json = serde_json::to_vec(&c).unwrap();
            match body_chunk_json(&chunk_json) {
                Some(got) => prop_assert_eq!(got, c.clone()),
                None => prop_assert!(chunk_json.contains(&b'\\')),
            }
            // Damaged: whatever a reader accepts, serde reads the same.
            for (encoding, mut bytes) in [(Encoding::Json, json), (Encoding::MsgPack, packed)] {
                damage(&mut bytes, at, byte, how);
                let fast = match encoding {
                    Encoding::Json => metrics_report_json(&bytes),
                    Encoding::MsgPack => metrics_report_msgpack(&bytes),
                };
                if let Some(fast) = fast {
                    prop_assert_eq!(fast, encoding.decode::<MetricsReport>(&bytes).unwrap());
                }
            }
            let mut bytes = chunk_json;
            damage(&mut bytes, at, byte, how);
            if let Some(fast) = body_chunk_json(&bytes) {
                prop_assert_eq!(fast, Encoding::Json.decode::<BodyChunkEvent>(&bytes).unwrap());
            }
        }
    }

    /// An answer as an agent writes it: `response` answering `cid`, in both encodings.
    fn answer_bytes(response: &AgentResponse, cid: &str) -> [(Encoding, Vec<u8>); 2] {
        let wire = crate::messages::ResponseWire::new(response, cid);
        [
            (
                Encoding::Json,
                Encoding::Json.encode(&wire).unwrap().to_vec(),
            ),
            (
                Encoding::MsgPack,
                Encoding::MsgPack.encode(&wire).unwrap().to_vec(),
            ),
        ]
    }

    proptest! {
        /// The plain answer is read back as serde reads it, whatever its correlation id,
        /// version and `needs_more`; damaged, the reader gives up or agrees with serde.
        #[test]
        fn plain_answers_read_what_serde_writes_and_never_disagree(
            cid in any::<String>(),
            version in any::<u32>(),
            needs_more in any::<bool>(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            how in 0u8..3,
        ) {
            let mut response = AgentResponse::allow();
            response.version = version;
            response.needs_more = needs_more;
            for (encoding, mut bytes) in answer_bytes(&response, &cid) {
                let slow: AgentResponse = encoding.decode(&bytes).unwrap();
                match agent_response(encoding, &bytes) {
                    Some(fast) => prop_assert_eq!(fast, slow),
                    None => prop_assert!(encoding == Encoding::Json && bytes.contains(&b'\\')),
                }
                damage(&mut bytes, at, byte, how);
                if let Some(fast) = agent_response(encoding, &bytes) {
                    prop_assert_eq!(fast, encoding.decode::<AgentResponse>(&bytes).unwrap());
                }
            }
        }
    }

    #[test]
    fn answers_that_are_not_plain_are_left_to_serde() {
        let mut tagged = AgentResponse::allow();
        tagged.audit.tags.push("waf".into());
        let mut routed = AgentResponse::allow();
        routed.routing_metadata.insert("pool".into(), "b".into());
        let mut custom = AgentResponse::allow();
        custom
            .audit
            .custom
            .insert("score".into(), serde_json::Value::from(3));
        for response in [
            AgentResponse::block(403, Some("no".into())),
            tagged,
            routed,
            custom,
        ] {
            for (encoding, bytes) in answer_bytes(&response, "r1") {
                assert!(agent_response(encoding, &bytes).is_none(), "{response:?}");
                let decoded = crate::messages::AgentResponse::decode(encoding, &bytes).unwrap();
                assert_eq!(decoded.decision, response.decision);
                assert_eq!(decoded.correlation_id(), Some("r1"));
            }
        }
    }

    #[test]
    fn announced_lengths_are_not_trusted() {
        // A metrics report announcing 2^32 - 1 counters, then ending.
        let mut packed =
            b"\x86\xa8agent_id\xa1a\xactimestamp_ms\x01\xabinterval_ms\x02\xa8counters".to_vec();
        packed.extend_from_slice(&[0xdd, 0xff, 0xff, 0xff, 0xff]);
        assert!(metrics_report_msgpack(&packed).is_none());
        assert!(Encoding::MsgPack.decode::<MetricsReport>(&packed).is_err());
    }

    #[test]
    fn other_layouts_are_left_to_serde() {
        let json = br#"{"method":"GET","uri":"/","headers":{},"metadata":{"correlation_id":"c","request_id":"r","client_ip":"::1","client_port":1,"server_name":null,"protocol":"HTTP/1.1","tls_version":null,"tls_cipher":null,"route_id":null,"upstream_id":null,"timestamp":""}}"#;
        assert!(request_headers_json(json).is_none(), "fields out of order");
        let e: RequestHeadersEvent = Encoding::Json.decode(json).unwrap();
        assert_eq!(e.metadata.correlation_id, "c");
        let spaced = serde_json::to_vec_pretty(&e).unwrap();
        assert!(request_headers_json(&spaced).is_none(), "whitespace");
        let as_array = rmp_serde::to_vec(&e).unwrap();
        assert!(
            request_headers_msgpack(&as_array).is_none(),
            "structs as arrays"
        );
        assert_eq!(
            Encoding::MsgPack
                .decode::<RequestHeadersEvent>(&as_array)
                .unwrap(),
            e
        );
    }
}
