//! Fast paths for reading the request-headers event, the one every request starts with, in
//! the layout proxies write it (serde's: fields in declaration order, structs as maps,
//! compact JSON).
//!
//! Each reader follows that layout byte by byte and gives up (`None`) at anything else: a
//! field out of order or unknown, a JSON string with an escape, whitespace, another number
//! form, trailing bytes. The caller then decodes with serde, so the result, and every error,
//! is serde's; a property test checks that whatever these readers accept, serde reads to the
//! same event. Measured with the `agentwire-zap` crate's `zentinel_codec` bench: see
//! `docs/benchmarks/2026-11-26-zentinel-codec/`.
//!
//! This module owns those two readers; it must not decide which encoding is used.

use crate::messages::{RequestHeadersEvent, RequestMetadata, Text};
use crate::text::{HeaderValues, Headers};

/// Reads compact JSON as serde_json writes the event, or `None`.
pub(crate) fn request_headers_json(bytes: &[u8]) -> Option<RequestHeadersEvent> {
    let mut r = Json { bytes, at: 0 };
    r.lit(br#"{"metadata":{"correlation_id":"#)?;
    let correlation_id = r.str()?;
    r.lit(br#","request_id":"#)?;
    let request_id = r.str()?;
    r.lit(br#","client_ip":"#)?;
    let client_ip = r.str()?;
    r.lit(br#","client_port":"#)?;
    let client_port = r.u16()?;
    r.lit(br#","server_name":"#)?;
    let server_name = r.opt()?;
    r.lit(br#","protocol":"#)?;
    let protocol = r.str()?;
    r.lit(br#","tls_version":"#)?;
    let tls_version = r.opt()?;
    r.lit(br#","tls_cipher":"#)?;
    let tls_cipher = r.opt()?;
    r.lit(br#","route_id":"#)?;
    let route_id = r.opt()?;
    r.lit(br#","upstream_id":"#)?;
    let upstream_id = r.opt()?;
    r.lit(br#","timestamp":"#)?;
    let timestamp = r.str()?;
    let traceparent = if r.lit(br#","traceparent":"#).is_some() {
        r.opt()?
    } else {
        None
    };
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
        metadata: RequestMetadata {
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
            traceparent,
        },
        method,
        uri,
        headers: Headers::from_pairs(headers),
    })
}

struct Json<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Json<'_> {
    /// Takes `lit` if the input goes on with it.
    fn lit(&mut self, lit: &[u8]) -> Option<()> {
        let rest = self.bytes.get(self.at..)?;
        rest.starts_with(lit).then(|| self.at += lit.len())
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

    /// A number as serde_json writes a `u16`: no sign, no leading zero, no fraction.
    fn u16(&mut self) -> Option<u16> {
        let rest = self.bytes.get(self.at..)?;
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 5 || (digits > 1 && rest[0] == b'0') {
            return None;
        }
        if matches!(rest.get(digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let mut v: u32 = 0;
        for &d in &rest[..digits] {
            v = v * 10 + u32::from(d - b'0');
        }
        self.at += digits;
        u16::try_from(v).ok()
    }
}

/// Reads MessagePack as rmp_serde writes the event (structs as maps), or `None`.
pub(crate) fn request_headers_msgpack(bytes: &[u8]) -> Option<RequestHeadersEvent> {
    let mut r = Pack { bytes, at: 0 };
    r.lit(b"\x84\xa8metadata")?;
    let with_traceparent = match r.byte()? {
        0x8b => false,
        0x8c => true,
        _ => return None,
    };
    r.lit(b"\xaecorrelation_id")?;
    let correlation_id = r.str()?;
    r.lit(b"\xaarequest_id")?;
    let request_id = r.str()?;
    r.lit(b"\xa9client_ip")?;
    let client_ip = r.str()?;
    r.lit(b"\xabclient_port")?;
    let client_port = r.u16()?;
    r.lit(b"\xabserver_name")?;
    let server_name = r.opt()?;
    r.lit(b"\xa8protocol")?;
    let protocol = r.str()?;
    r.lit(b"\xabtls_version")?;
    let tls_version = r.opt()?;
    r.lit(b"\xaatls_cipher")?;
    let tls_cipher = r.opt()?;
    r.lit(b"\xa8route_id")?;
    let route_id = r.opt()?;
    r.lit(b"\xabupstream_id")?;
    let upstream_id = r.opt()?;
    r.lit(b"\xa9timestamp")?;
    let timestamp = r.str()?;
    let traceparent = if with_traceparent {
        r.lit(b"\xabtraceparent")?;
        r.opt()?
    } else {
        None
    };
    r.lit(b"\xa6method")?;
    let method = r.str()?;
    r.lit(b"\xa3uri")?;
    let uri = r.str()?;
    r.lit(b"\xa7headers")?;
    let count = r.len(0x80, 0xde)?;
    // Each header takes at least two bytes: no reserving more than the input can hold.
    let mut headers = Vec::with_capacity(count.min(bytes.len() / 2));
    for _ in 0..count {
        let name = r.str()?;
        let n = r.len(0x90, 0xdc)?;
        let mut values = HeaderValues::with_capacity(n.min(bytes.len()));
        for _ in 0..n {
            values.push(r.str()?);
        }
        headers.push((name, values));
    }
    (r.at == bytes.len()).then(|| RequestHeadersEvent {
        metadata: RequestMetadata {
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
            traceparent,
        },
        method,
        uri,
        headers: Headers::from_pairs(headers),
    })
}

struct Pack<'a> {
    bytes: &'a [u8],
    at: usize,
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

    fn be(&mut self, n: usize) -> Option<usize> {
        let b = self.take(n)?;
        Some(b.iter().fold(0usize, |v, &d| (v << 8) | usize::from(d)))
    }

    /// A map or array length: its fix form (`fix`, 16 values), or 16- or 32-bit (`wide16`,
    /// `wide16 + 1`).
    fn len(&mut self, fix: u8, wide16: u8) -> Option<usize> {
        match self.byte()? {
            b if b & 0xf0 == fix => Some(usize::from(b & 0x0f)),
            b if b == wide16 => self.be(2),
            b if b == wide16 + 1 => self.be(4),
            _ => None,
        }
    }

    /// A string, valid UTF-8.
    fn str(&mut self) -> Option<Text> {
        let len = match self.byte()? {
            b @ 0xa0..=0xbf => usize::from(b & 0x1f),
            0xd9 => self.be(1)?,
            0xda => self.be(2)?,
            0xdb => self.be(4)?,
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
