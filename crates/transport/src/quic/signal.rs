//! WebTransport stream signals: the bytes that open every stream of a WebTransport session
//! (RFC 9220's extended CONNECT session; draft-ietf-webtrans-http3), so that agentwire's QUIC
//! mapping can run inside a session on the raw connection.
//!
//! A unidirectional stream starts with the type `0x54` and the session id, a bidirectional one
//! with the signal `0x41` and the session id (QUIC variable-length integers). This module owns
//! writing and checking those prefixes; it must not read streams or frames.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The type of a WebTransport unidirectional stream.
pub const WT_UNI_STREAM: u64 = 0x54;
/// The signal of a WebTransport bidirectional stream.
pub const WT_BIDI_SIGNAL: u64 = 0x41;

/// The prefixes of one session's streams.
#[derive(Debug, Clone)]
pub struct SessionSignal {
    /// The session id (the CONNECT stream's id).
    pub session_id: u64,
    /// What opens a unidirectional stream.
    pub uni: Bytes,
    /// What opens a bidirectional stream.
    pub bidi: Bytes,
    /// What opens each of the session's datagrams: its quarter stream id (RFC 9297: the
    /// session's stream id divided by four).
    pub datagram: Bytes,
}

impl SessionSignal {
    /// The prefixes for session `session_id`.
    pub fn new(session_id: u64) -> SessionSignal {
        let prefix = |kind| {
            let mut out = BytesMut::with_capacity(16);
            put_varint(&mut out, kind);
            put_varint(&mut out, session_id);
            out.freeze()
        };
        let mut datagram = BytesMut::with_capacity(8);
        put_varint(&mut datagram, session_id / 4);
        SessionSignal {
            session_id,
            uni: prefix(WT_UNI_STREAM),
            bidi: prefix(WT_BIDI_SIGNAL),
            datagram: datagram.freeze(),
        }
    }
}

/// What the first bytes of a peer's stream say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// A stream of this session; its prefix is this many bytes.
    Ours(usize),
    /// A stream of another kind or session (`kind`, `session` if the kind carries one): an
    /// HTTP/3 stream such as QPACK's, to be kept open and drained, not read as frames.
    Other {
        /// The stream type (unidirectional) or signal (bidirectional).
        kind: u64,
    },
    /// Not enough bytes yet.
    Short,
}

/// Reads the opening of a peer's stream from `bytes` (the first bytes it sent).
///
/// ```
/// use agentwire_transport::quic::signal::{opening, Opening, SessionSignal};
/// let s = SessionSignal::new(0);
/// let mut stream = s.uni.to_vec();
/// stream.extend_from_slice(b"frame");
/// assert_eq!(opening(&stream, false, 0), Opening::Ours(3)); // 0x54 takes two bytes as a varint
/// assert_eq!(opening(&[0x02], false, 0), Opening::Other { kind: 2 });
/// assert_eq!(opening(&[0x54], false, 0), Opening::Short);
/// assert_eq!(opening(&s.uni, false, 4), Opening::Other { kind: 0x54 });
/// ```
pub fn opening(bytes: &[u8], bidi: bool, session_id: u64) -> Opening {
    let want = if bidi { WT_BIDI_SIGNAL } else { WT_UNI_STREAM };
    let mut rest = bytes;
    let Some(kind) = get_varint(&mut rest) else {
        return Opening::Short;
    };
    if kind != want {
        return Opening::Other { kind };
    }
    let Some(session) = get_varint(&mut rest) else {
        return Opening::Short;
    };
    if session != session_id {
        return Opening::Other { kind };
    }
    Opening::Ours(bytes.len() - rest.len())
}

/// Reads a QUIC variable-length integer from the front of `buf`, or `None` if it is cut short.
pub fn get_varint(buf: &mut &[u8]) -> Option<u64> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    if buf.len() < len {
        return None;
    }
    let mut value = u64::from(first & 0x3f);
    for b in &buf[1..len] {
        value = (value << 8) | u64::from(*b);
    }
    buf.advance(len);
    Some(value)
}

/// Writes `value` (at most 2^62 - 1) as a QUIC variable-length integer.
pub fn put_varint(out: &mut BytesMut, value: u64) {
    match value {
        0..=0x3f => out.put_u8(value as u8),
        0x40..=0x3fff => out.put_u16(0x4000 | value as u16),
        0x4000..=0x3fff_ffff => out.put_u32(0x8000_0000 | value as u32),
        _ => out.put_u64(0xc000_0000_0000_0000 | (value & 0x3fff_ffff_ffff_ffff)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_length() {
        for v in [
            0,
            0x3f,
            0x40,
            0x3fff,
            0x4000,
            0x3fff_ffff,
            0x4000_0000,
            (1 << 62) - 1,
        ] {
            let mut out = BytesMut::new();
            put_varint(&mut out, v);
            let mut slice = &out[..];
            assert_eq!(get_varint(&mut slice), Some(v));
            assert!(slice.is_empty());
            assert_eq!(get_varint(&mut &out[..out.len() - 1]), None);
        }
    }

    #[test]
    fn openings_of_this_session_other_streams_and_short_ones() {
        let s = SessionSignal::new(4);
        assert_eq!(opening(&s.bidi, true, 4), Opening::Ours(s.bidi.len()));
        assert_eq!(opening(&s.uni, true, 4), Opening::Other { kind: 0x54 });
        assert_eq!(opening(&s.bidi[..1], true, 4), Opening::Short);
        assert_eq!(opening(&[], false, 4), Opening::Short);
        assert_eq!(opening(&[0x00], false, 4), Opening::Other { kind: 0 });
        assert_eq!(opening(&s.uni, false, 8), Opening::Other { kind: 0x54 });
    }
}
