//! An envelope's MessagePack array layout, read by hand: the fast path under
//! [`EnvelopeView::parse`](crate::EnvelopeView::parse) and
//! [`Codec::decode_envelope`](crate::Codec::decode_envelope).
//!
//! Every message an agent receives and every message a hub routes is read once, and through
//! serde that read was 18 % of a fan-out subscriber's CPU (rmp-serde's `any_inner` and the
//! visitors). This reader takes the one layout this crate writes — an array of the ten fields
//! in [`Envelope`](crate::Envelope)'s order, integers as unsigned integers, text as `str`, the
//! body a `bin` that ends the payload — and declines (`None`) anything else, however valid:
//! a map layout, a signed encoding of a positive number, bytes after the body. The serde path
//! then decides, and it alone reports errors. So the reader may be strict but never lenient:
//! whatever it accepts, serde accepts with the same values (the tests check that on random
//! and mutated envelopes, in tests/properties.rs).
//!
//! This module owns reading those bytes; it must not check limits or decide what to do with
//! the message.

use std::collections::BTreeMap;

use crate::{DestinationRef, EnvelopeView, Kind, Priority};

/// The ten fields, borrowed from the payload: the routing header as the hub reads it, and the
/// headers' encoded entries for a full decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WireEnvelope<'a> {
    pub view: EnvelopeView<'a>,
    /// The encoded entries after the map's length, already checked.
    headers: &'a [u8],
}

impl<'a> WireEnvelope<'a> {
    /// Reads `payload`; `None` when it is not exactly the array layout described above.
    pub(crate) fn read(payload: &'a [u8]) -> Option<Self> {
        let mut c = Cursor(payload);
        if c.array_len()? != 10 {
            return None;
        }
        let id = c.uint()?;
        let from = c.str()?;
        if c.array_len()? != 2 {
            return None;
        }
        let tag = c.uint()?;
        let to = DestinationRef::from_tag(tag, c.str()?)?;
        let kind = Kind::from_code(u8::try_from(c.uint()?).ok()?)?;
        let priority = Priority::from_code(u8::try_from(c.uint()?).ok()?)?;
        let ttl_ms = u32::try_from(c.uint()?).ok()?;
        let timestamp_us = c.uint()?;
        let correlation = if c.peek()? == NIL {
            c.0 = &c.0[1..];
            None
        } else {
            Some(c.uint()?)
        };
        let header_count = c.map_len()?;
        let headers = c.0;
        let mut header_bytes = 0usize;
        for _ in 0..header_count {
            let k = c.str()?;
            let v = c.str()?;
            header_bytes += k.len() + v.len();
        }
        let headers = &headers[..headers.len() - c.0.len()];
        let body = c.bin()?;
        if !c.0.is_empty() {
            return None;
        }
        Some(WireEnvelope {
            view: EnvelopeView {
                id,
                from,
                to,
                kind,
                priority,
                ttl_ms,
                timestamp_us,
                correlation,
                header_count,
                header_bytes,
                body,
            },
            headers,
        })
    }

    /// The headers as a map (a later duplicate key wins, as serde's map does).
    pub(crate) fn header_map(&self) -> BTreeMap<String, String> {
        let mut map = BTreeMap::new();
        let mut c = Cursor(self.headers);
        for _ in 0..self.view.header_count {
            // Checked by `read`: neither fails.
            let (Some(k), Some(v)) = (c.str(), c.str()) else {
                break;
            };
            map.insert(k.to_owned(), v.to_owned());
        }
        map
    }
}

const NIL: u8 = 0xc0;

/// The unread rest of the payload.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.0.first().copied()
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn be(&mut self, n: usize) -> Option<u64> {
        Some(
            self.take(n)?
                .iter()
                .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)),
        )
    }

    /// A length in the next `width` bytes, big-endian.
    fn len(&mut self, width: usize) -> Option<usize> {
        usize::try_from(self.be(width)?).ok()
    }

    /// An unsigned integer (positive fixint, uint 8/16/32/64).
    fn uint(&mut self) -> Option<u64> {
        match self.byte()? {
            b @ 0x00..=0x7f => Some(u64::from(b)),
            0xcc => self.be(1),
            0xcd => self.be(2),
            0xce => self.be(4),
            0xcf => self.be(8),
            _ => None,
        }
    }

    /// UTF-8 text (fixstr, str 8/16/32).
    fn str(&mut self) -> Option<&'a str> {
        let n = match self.byte()? {
            b @ 0xa0..=0xbf => usize::from(b & 0x1f),
            0xd9 => self.len(1)?,
            0xda => self.len(2)?,
            0xdb => self.len(4)?,
            _ => return None,
        };
        std::str::from_utf8(self.take(n)?).ok()
    }

    /// Raw bytes (bin 8/16/32).
    fn bin(&mut self) -> Option<&'a [u8]> {
        let n = match self.byte()? {
            0xc4 => self.len(1)?,
            0xc5 => self.len(2)?,
            0xc6 => self.len(4)?,
            _ => return None,
        };
        self.take(n)
    }

    /// An array's element count (fixarray, array 16/32).
    fn array_len(&mut self) -> Option<usize> {
        match self.byte()? {
            b @ 0x90..=0x9f => Some(usize::from(b & 0x0f)),
            0xdc => self.len(2),
            0xdd => self.len(4),
            _ => None,
        }
    }

    /// A map's entry count (fixmap, map 16/32).
    fn map_len(&mut self) -> Option<usize> {
        match self.byte()? {
            b @ 0x80..=0x8f => Some(usize::from(b & 0x0f)),
            0xde => self.len(2),
            0xdf => self.len(4),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Codec, Destination, Envelope};
    use bytes::Bytes;

    /// What the serde path makes of `payload`.
    fn serde_decode(payload: &[u8]) -> Option<Envelope> {
        Codec::MsgPack.decode::<Envelope>(payload).ok()
    }

    #[test]
    fn reads_every_width_of_length_and_integer() {
        for (n, big) in [(0usize, 0u64), (31, 127), (32, 128), (255, 255), (256, 256)]
            .into_iter()
            .chain([(65_535, 65_535), (65_536, u64::from(u32::MAX) + 1)])
        {
            let name = "q".repeat(n.max(1));
            let env = Envelope::new(big, "é".repeat(n / 2), Destination::queue(name), Kind::Task)
                .with_ttl_ms(u32::try_from(big.min(u64::from(u32::MAX))).unwrap())
                .with_timestamp_us(big)
                .with_correlation(big)
                .with_header("k".repeat(n), "v")
                .with_body(vec![7u8; n]);
            let payload = Bytes::from(Codec::MsgPack.encode(&env).unwrap());
            let wire = WireEnvelope::read(&payload).expect("read by hand");
            assert_eq!(wire.view, EnvelopeView::of(&env), "{n}");
            assert_eq!(wire.header_map(), env.headers, "{n}");
        }
    }

    #[test]
    fn declines_what_it_does_not_read_in_place() {
        let env = Envelope::new(3, "a", Destination::topic("t"), Kind::Event)
            .with_header("k", "v")
            .with_body(&b"body"[..]);
        let payload = Codec::MsgPack.encode(&env).unwrap();
        assert!(WireEnvelope::read(&payload).is_some());
        // The map layout, a trailing byte, a cut body, invalid UTF-8 in `from`.
        assert!(WireEnvelope::read(&rmp_serde::to_vec_named(&env).unwrap()).is_none());
        let mut trailing = payload.clone();
        trailing.push(0);
        assert!(WireEnvelope::read(&trailing).is_none());
        assert!(WireEnvelope::read(&payload[..payload.len() - 1]).is_none());
        let mut bad_utf8 = payload.clone();
        assert_eq!(bad_utf8[2], 0xa1, "from is a 1-byte fixstr");
        bad_utf8[3] = 0xff;
        assert!(WireEnvelope::read(&bad_utf8).is_none());
        assert!(serde_decode(&bad_utf8).is_none());
        // A positive number written as a signed integer: valid, left to serde.
        let mut signed = payload.clone();
        assert_eq!(signed[1], 0x03, "id is a positive fixint");
        signed.splice(1..2, [0xd0, 0x03]);
        assert!(WireEnvelope::read(&signed).is_none());
        assert_eq!(serde_decode(&signed), Some(env.clone()));
        assert_eq!(
            Codec::MsgPack
                .decode_envelope(&Bytes::from(signed))
                .unwrap(),
            env
        );
    }

    #[test]
    fn a_huge_claimed_header_count_is_declined_without_allocating() {
        // An array of 10 whose map claims 2^32 - 1 entries and then ends.
        let mut payload = vec![
            0x9a, 0x01, 0xa1, b'a', 0x92, 0x00, 0xa1, b'b', 0, 2, 0, 0, NIL,
        ];
        payload.extend_from_slice(&[0xdf, 0xff, 0xff, 0xff, 0xff]);
        assert!(WireEnvelope::read(&payload).is_none());
        assert!(serde_decode(&payload).is_none());
    }
}
