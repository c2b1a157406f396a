//! Frames of the binary Unix-socket transport: a 4-byte big-endian length (counting the type
//! byte and the payload), one type byte, the payload.
//!
//! This module owns the frame layout, the message type bytes and the size limit. It must not
//! look inside payloads: which encoding they use is the connection's business.

use bytes::{Buf, Bytes, BytesMut};

/// Bytes before a frame's payload: the length and the type byte.
pub const HEADER_LEN: usize = 5;

/// The largest length prefix accepted (type byte + payload): 16 MiB, the reference reader's
/// limit (its crate docs say 10 MB; its code enforces this). A payload of at most
/// `MAX_FRAME_LEN - 1` bytes is accepted by both ends.
pub const MAX_FRAME_LEN: u32 = 16 * 1024 * 1024;

/// What a frame carries, by its type byte (`zentinel-agent-protocol` 0.6.45, `v2::uds`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// Proxy → agent, first frame, always JSON.
    HandshakeRequest = 0x01,
    /// Agent → proxy, first frame, always JSON.
    HandshakeResponse = 0x02,
    /// A request's headers (proxy → agent).
    RequestHeaders = 0x10,
    /// A chunk of a request body.
    RequestBodyChunk = 0x11,
    /// The upstream response's headers.
    ResponseHeaders = 0x12,
    /// A chunk of a response body.
    ResponseBodyChunk = 0x13,
    /// The request finished (status, sizes, duration).
    RequestComplete = 0x14,
    /// One WebSocket frame.
    WebSocketFrame = 0x15,
    /// Content for guardrail inspection (prompt injection, PII).
    GuardrailInspect = 0x16,
    /// Configuration pushed to the agent.
    Configure = 0x17,
    /// The agent's answer to an event.
    AgentResponse = 0x20,
    /// The agent's health (agent → proxy).
    HealthStatus = 0x30,
    /// The agent's metrics (agent → proxy).
    MetricsReport = 0x31,
    /// The agent asks for a configuration change (agent → proxy).
    ConfigUpdateRequest = 0x32,
    /// Pause or resume (agent → proxy).
    FlowControl = 0x33,
    /// The proxy gave up on a request.
    Cancel = 0x40,
    /// Liveness probe.
    Ping = 0x41,
    /// Answer to a ping: the ping's payload echoed.
    Pong = 0x42,
}

impl MessageType {
    /// Every type, in byte order.
    pub const ALL: [MessageType; 18] = [
        MessageType::HandshakeRequest,
        MessageType::HandshakeResponse,
        MessageType::RequestHeaders,
        MessageType::RequestBodyChunk,
        MessageType::ResponseHeaders,
        MessageType::ResponseBodyChunk,
        MessageType::RequestComplete,
        MessageType::WebSocketFrame,
        MessageType::GuardrailInspect,
        MessageType::Configure,
        MessageType::AgentResponse,
        MessageType::HealthStatus,
        MessageType::MetricsReport,
        MessageType::ConfigUpdateRequest,
        MessageType::FlowControl,
        MessageType::Cancel,
        MessageType::Ping,
        MessageType::Pong,
    ];

    /// The type of `byte`, if it is one.
    ///
    /// ```
    /// use agentwire_zap_proto::MessageType;
    /// assert_eq!(MessageType::from_byte(0x41), Some(MessageType::Ping));
    /// assert_eq!(MessageType::from_byte(0x99), None);
    /// ```
    pub fn from_byte(byte: u8) -> Option<Self> {
        Self::ALL.iter().copied().find(|t| *t as u8 == byte)
    }
}

/// One frame: its type and its payload (a slice of the received buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The type byte.
    pub kind: MessageType,
    /// The payload, in the connection's encoding (JSON for the handshake).
    pub payload: Bytes,
}

/// A frame that breaks the framing rules; the connection cannot continue after it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A length prefix of 0 (there must be at least the type byte).
    #[error("zero-length frame")]
    ZeroLength,
    /// A length prefix above the limit.
    #[error("frame of {len} bytes is over the limit of {max}")]
    TooLarge {
        /// The announced length (type byte + payload).
        len: u64,
        /// The limit.
        max: u32,
    },
    /// A type byte that is not a [`MessageType`].
    #[error("unknown message type 0x{0:02x}")]
    UnknownType(u8),
    /// The stream ended inside a frame.
    #[error("the connection ended inside a frame ({buffered} of {needed} bytes)")]
    Truncated {
        /// Bytes of the frame received.
        buffered: usize,
        /// Bytes the frame needed.
        needed: usize,
    },
}

/// Appends one frame to `out`.
///
/// ```
/// use agentwire_zap_proto::{encode_frame, MessageType};
/// let mut out = bytes::BytesMut::new();
/// encode_frame(MessageType::Ping, b"{}", &mut out).unwrap();
/// assert_eq!(&out[..], &[0, 0, 0, 3, 0x41, b'{', b'}']);
/// ```
pub fn encode_frame(
    kind: MessageType,
    payload: &[u8],
    out: &mut BytesMut,
) -> Result<(), FrameError> {
    let len = payload.len() as u64 + 1;
    if len > u64::from(MAX_FRAME_LEN) {
        return Err(FrameError::TooLarge {
            len,
            max: MAX_FRAME_LEN,
        });
    }
    out.reserve(HEADER_LEN + payload.len());
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.extend_from_slice(&[kind as u8]);
    out.extend_from_slice(payload);
    Ok(())
}

/// Appends one frame whose payload `write` appends to `out` (encoding straight into the
/// output, without a buffer of its own). Nothing is left in `out` if `write` fails or the
/// payload is over the limit.
///
/// ```
/// use agentwire_zap_proto::{frame::encode_frame_with, FrameError, MessageType};
/// let mut out = bytes::BytesMut::new();
/// encode_frame_with(MessageType::Ping, &mut out, |o| {
///     o.extend_from_slice(b"{}");
///     Ok::<(), FrameError>(())
/// })
/// .unwrap();
/// assert_eq!(&out[..], &[0, 0, 0, 3, 0x41, b'{', b'}']);
/// ```
pub fn encode_frame_with<E: From<FrameError>>(
    kind: MessageType,
    out: &mut BytesMut,
    write: impl FnOnce(&mut BytesMut) -> Result<(), E>,
) -> Result<(), E> {
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0, 0, kind as u8]);
    if let Err(e) = write(out) {
        out.truncate(start);
        return Err(e);
    }
    let len = (out.len() - start - 4) as u64;
    if len > u64::from(MAX_FRAME_LEN) {
        out.truncate(start);
        return Err(FrameError::TooLarge {
            len,
            max: MAX_FRAME_LEN,
        }
        .into());
    }
    out[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// Cuts frames out of received bytes.
///
/// ```
/// use agentwire_zap_proto::{FrameDecoder, FrameError, MessageType};
/// let mut d = FrameDecoder::new(1024);
/// d.push(&[0, 0, 0, 3, 0x41, b'{']);
/// assert_eq!(d.next_frame(), Ok(None)); // one byte short
/// d.push(b"}");
/// let f = d.next_frame().unwrap().unwrap();
/// assert_eq!((f.kind, &f.payload[..]), (MessageType::Ping, &b"{}"[..]));
/// d.push(&[0, 0, 0, 1, 0x99]);
/// assert_eq!(d.next_frame(), Err(FrameError::UnknownType(0x99)));
/// ```
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_len: u32,
}

impl FrameDecoder {
    /// A decoder refusing length prefixes above `max_len` (at most [`MAX_FRAME_LEN`]).
    pub fn new(max_len: u32) -> Self {
        FrameDecoder {
            buf: BytesMut::new(),
            max_len: max_len.min(MAX_FRAME_LEN),
        }
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received and not yet cut into frames.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next whole frame, `Ok(None)` if more bytes are needed. A bad length or type is
    /// reported as soon as the header has arrived, before the payload is waited for.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        if len == 0 {
            return Err(FrameError::ZeroLength);
        }
        if len > self.max_len {
            return Err(FrameError::TooLarge {
                len: u64::from(len),
                max: self.max_len,
            });
        }
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let kind =
            MessageType::from_byte(self.buf[4]).ok_or(FrameError::UnknownType(self.buf[4]))?;
        let total = 4 + len as usize;
        if self.buf.len() < total {
            // Grow towards the announced size, a bounded step at a time: a peer announcing
            // 16 MiB and sending nothing must not pin 16 MiB.
            self.buf.reserve((total - self.buf.len()).min(64 * 1024));
            return Ok(None);
        }
        let mut frame = self.buf.split_to(total);
        frame.advance(HEADER_LEN);
        Ok(Some(Frame {
            kind,
            payload: frame.freeze(),
        }))
    }

    /// Checks that the stream ended between frames.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let needed = if self.buf.len() < 4 {
            4
        } else {
            4 + u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize
        };
        Err(FrameError::Truncated {
            buffered: self.buf.len(),
            needed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_type_round_trips_through_its_byte() {
        for t in MessageType::ALL {
            assert_eq!(MessageType::from_byte(t as u8), Some(t));
        }
        let known: Vec<u8> = MessageType::ALL.iter().map(|t| *t as u8).collect();
        for b in 0..=255u8 {
            assert_eq!(MessageType::from_byte(b).is_some(), known.contains(&b));
        }
    }

    #[test]
    fn limits_are_the_reference_readers() {
        let mut d = FrameDecoder::new(MAX_FRAME_LEN);
        d.push(&(MAX_FRAME_LEN + 1).to_be_bytes());
        assert_eq!(
            d.next_frame(),
            Err(FrameError::TooLarge {
                len: u64::from(MAX_FRAME_LEN) + 1,
                max: MAX_FRAME_LEN
            })
        );
        let mut d = FrameDecoder::new(MAX_FRAME_LEN);
        d.push(&MAX_FRAME_LEN.to_be_bytes());
        d.push(&[0x10]);
        assert_eq!(d.next_frame(), Ok(None), "the largest frame is accepted");
        let mut out = BytesMut::new();
        let payload = vec![0u8; MAX_FRAME_LEN as usize];
        assert!(matches!(
            encode_frame(MessageType::RequestBodyChunk, &payload, &mut out),
            Err(FrameError::TooLarge { .. })
        ));
        encode_frame(MessageType::RequestBodyChunk, &payload[1..], &mut out).unwrap();
        let mut d = FrameDecoder::new(MAX_FRAME_LEN);
        d.push(&out);
        assert_eq!(
            d.next_frame().unwrap().unwrap().payload.len(),
            payload.len() - 1
        );
    }

    #[test]
    fn zero_length_and_truncation_are_errors() {
        let mut d = FrameDecoder::new(1024);
        d.push(&[0, 0, 0, 0]);
        assert_eq!(d.next_frame(), Err(FrameError::ZeroLength));
        let mut d = FrameDecoder::new(1024);
        d.push(&[0, 0, 0, 9, 0x10, 1, 2]);
        assert_eq!(d.next_frame(), Ok(None));
        assert_eq!(
            d.finish(),
            Err(FrameError::Truncated {
                buffered: 7,
                needed: 13
            })
        );
    }

    proptest! {
        /// Any bytes: the decoder never panics, and whatever it accepts re-encodes to the same
        /// bytes.
        #[test]
        fn arbitrary_bytes_never_panic(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16)) {
            let mut d = FrameDecoder::new(4096);
            let mut accepted = BytesMut::new();
            let mut all = Vec::new();
            'feed: for c in &chunks {
                all.extend_from_slice(c);
                d.push(c);
                loop {
                    match d.next_frame() {
                        Ok(Some(f)) => encode_frame(f.kind, &f.payload, &mut accepted).unwrap(),
                        Ok(None) => break,
                        Err(_) => break 'feed,
                    }
                }
            }
            prop_assert_eq!(&all[..accepted.len()], &accepted[..]);
        }

        /// Frames split anywhere come out whole and in order.
        #[test]
        fn frames_survive_any_split(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..8), cut in 1usize..50) {
            let mut wire = BytesMut::new();
            for p in &payloads {
                encode_frame(MessageType::RequestBodyChunk, p, &mut wire).unwrap();
            }
            let mut d = FrameDecoder::new(4096);
            let mut got = Vec::new();
            for piece in wire.chunks(cut) {
                d.push(piece);
                while let Some(f) = d.next_frame().unwrap() {
                    got.push(f.payload.to_vec());
                }
            }
            d.finish().unwrap();
            prop_assert_eq!(got, payloads);
        }
    }
}
