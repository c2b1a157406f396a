//! Framing: how envelopes and control messages are cut out of a byte stream.
//!
//! A frame is a 4-byte big-endian length `L`, then `L` bytes: one type byte and `L - 1` bytes
//! of payload. `L` never exceeds the negotiated maximum frame size; the decoder rejects an
//! oversized length as soon as it has read the 4 length bytes, before buffering the body.
//!
//! This module owns the length prefix, the frame types and the payload layout of each type.
//! It must not do I/O: [`FrameDecoder`] is fed bytes by the caller and hands back whole frames.

use bytes::{Buf, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use crate::codec::{Codec, CodecError};
use crate::hello::{Hello, Reject, Welcome};
use crate::{Envelope, ErrorCode};

/// Bytes of the length prefix.
pub const FRAME_HEADER_LEN: usize = 4;

/// Most bytes [`FrameDecoder`] reserves ahead of what has arrived while waiting for a frame.
const MAX_RESERVE_AHEAD: usize = 64 * 1024;

/// The type byte of a frame.
///
/// ```
/// use agentwire_proto::FrameType;
/// assert_eq!(FrameType::from_byte(0x10), Some(FrameType::Envelope));
/// assert_eq!(FrameType::from_byte(0x99), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameType {
    /// Agent → hub: the opening handshake message (MessagePack always).
    Hello = 0x01,
    /// Hub → agent: the handshake was accepted (MessagePack always).
    Welcome = 0x02,
    /// Hub → agent: the handshake was refused (MessagePack always).
    Reject = 0x03,
    /// An envelope, in the session's codec.
    Envelope = 0x10,
    /// Agent → hub: subscribe to a topic (payload: the topic, UTF-8).
    Subscribe = 0x20,
    /// Agent → hub: unsubscribe from a topic (payload: the topic, UTF-8).
    Unsubscribe = 0x21,
    /// Agent → hub: consume a work queue (payload: credit u32 BE, then the queue, UTF-8;
    /// credit 0 stops consuming it).
    Consume = 0x22,
    /// Agent → hub: a delivered queue task is done (payload: task id u64 BE).
    Ack = 0x23,
    /// Agent → hub: a delivered queue task could not be done (payload: task id u64 BE, delay
    /// in ms u32 BE; `u32::MAX` leaves the delay to the queue's backoff).
    Nack = 0x24,
    /// Liveness beat (payload: sequence u64 BE, timestamp µs u64 BE).
    Heartbeat = 0x30,
    /// Orderly close with a reason (payload: code u32 BE, reason UTF-8).
    Goodbye = 0x40,
}

impl FrameType {
    /// The frame type for a type byte.
    pub fn from_byte(b: u8) -> Option<FrameType> {
        Some(match b {
            0x01 => FrameType::Hello,
            0x02 => FrameType::Welcome,
            0x03 => FrameType::Reject,
            0x10 => FrameType::Envelope,
            0x20 => FrameType::Subscribe,
            0x21 => FrameType::Unsubscribe,
            0x22 => FrameType::Consume,
            0x23 => FrameType::Ack,
            0x24 => FrameType::Nack,
            0x30 => FrameType::Heartbeat,
            0x40 => FrameType::Goodbye,
            _ => return None,
        })
    }
}

/// A liveness beat. The hub answers nothing; any frame counts as a sign of life, and agents
/// send these when they have nothing else to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Increments by one per beat.
    pub seq: u64,
    /// Sender's clock, microseconds since the Unix epoch.
    pub timestamp_us: u64,
}

/// An orderly close: why the sender is going away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Goodbye {
    /// The reason's code.
    pub code: ErrorCode,
    /// Free text for humans.
    pub reason: String,
}

/// Consume a work queue: the hub delivers up to `credit` of its tasks at a time, each once
/// until it is acked (see `agentwire_queue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consume {
    /// The queue's name.
    pub queue: String,
    /// Tasks in flight at most; 0 stops consuming (tasks held go back to the queue).
    pub credit: u32,
}

/// A delivered task could not be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nack {
    /// The task's id (the delivery envelope's `id`).
    pub task: u64,
    /// Wait this long before the next attempt; `None`: the queue's backoff.
    pub delay_ms: Option<u32>,
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// See [`Hello`].
    Hello(Hello),
    /// See [`Welcome`].
    Welcome(Welcome),
    /// See [`Reject`].
    Reject(Reject),
    /// An agent message.
    Envelope(Envelope),
    /// Subscribe to a topic.
    Subscribe(String),
    /// Unsubscribe from a topic.
    Unsubscribe(String),
    /// Consume a work queue.
    Consume(Consume),
    /// A delivered task is done (its id).
    Ack(u64),
    /// A delivered task could not be done.
    Nack(Nack),
    /// A liveness beat.
    Heartbeat(Heartbeat),
    /// An orderly close.
    Goodbye(Goodbye),
}

/// A frame whose length prefix has been checked but whose payload is not yet decoded.
///
/// A frame cut from received bytes also keeps the whole frame as it arrived (length prefix,
/// type byte, payload: one buffer), so that a hub can forward it without copying
/// ([`RawFrame::to_wire`]).
#[derive(Debug, Clone)]
pub struct RawFrame {
    /// The type byte (may be unknown; [`Frame::decode`] rejects it then).
    pub type_byte: u8,
    /// The payload after the type byte.
    pub payload: Bytes,
    /// The whole frame as received, when it was cut from one buffer.
    wire: Option<Bytes>,
}

impl PartialEq for RawFrame {
    fn eq(&self, other: &Self) -> bool {
        self.type_byte == other.type_byte && self.payload == other.payload
    }
}

impl Eq for RawFrame {}

impl RawFrame {
    /// A frame of `type_byte` with `payload`.
    pub fn new(type_byte: u8, payload: Bytes) -> Self {
        RawFrame {
            type_byte,
            payload,
            wire: None,
        }
    }

    /// The frame as it goes on the wire (length prefix, type byte, payload): the received
    /// buffer itself when there is one (no copy), otherwise a new buffer.
    ///
    /// ```
    /// use agentwire_proto::{Codec, Frame, FrameDecoder, RawFrame};
    /// let bytes = Frame::Subscribe("news".into()).encode(Codec::MsgPack).unwrap();
    /// let raw = FrameDecoder::decode_one(bytes.clone(), 1024).unwrap();
    /// assert_eq!(raw.to_wire(), bytes);
    /// assert_eq!(raw.to_wire().as_ptr(), bytes.as_ptr()); // the same buffer
    /// assert_eq!(RawFrame::new(raw.type_byte, raw.payload.clone()).to_wire(), bytes);
    /// ```
    pub fn to_wire(&self) -> Bytes {
        if let Some(wire) = &self.wire {
            return wire.clone();
        }
        let len = u32::try_from(self.payload.len() + 1).unwrap_or(u32::MAX);
        let mut out = Vec::with_capacity(FRAME_HEADER_LEN + 1 + self.payload.len());
        out.extend_from_slice(&len.to_be_bytes());
        out.push(self.type_byte);
        out.extend_from_slice(&self.payload);
        Bytes::from(out)
    }
}

/// Why bytes could not be turned into a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The length prefix exceeds the maximum frame size.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// The length the prefix announced.
        len: u32,
        /// The limit in force.
        max: u32,
    },
    /// A zero length prefix (a frame needs at least its type byte).
    #[error("empty frame (length 0)")]
    Empty,
    /// The input ended inside a frame.
    #[error("input ended inside a frame: {buffered} of {needed} bytes")]
    Truncated {
        /// Bytes that arrived.
        buffered: usize,
        /// Bytes the frame needed (prefix included).
        needed: usize,
    },
    /// Bytes after the one frame a message stream may carry, where exactly one was expected.
    #[error("{0} bytes after the frame")]
    Trailing(usize),
    /// A type byte this version does not know.
    #[error("unknown frame type 0x{0:02x}")]
    UnknownType(u8),
    /// The payload does not decode as its type says.
    #[error("malformed {frame:?} frame: {message}")]
    Malformed {
        /// The frame's type.
        frame: FrameType,
        /// What was wrong.
        message: String,
    },
}

impl FrameError {
    /// The close code a transport uses for this error.
    ///
    /// ```
    /// use agentwire_proto::{ErrorCode, FrameError};
    /// assert_eq!(FrameError::Empty.close_code(), ErrorCode::MalformedFrame);
    /// assert_eq!(FrameError::TooLarge { len: 9, max: 8 }.close_code(), ErrorCode::FrameTooLarge);
    /// ```
    pub fn close_code(&self) -> ErrorCode {
        match self {
            FrameError::TooLarge { .. } => ErrorCode::FrameTooLarge,
            _ => ErrorCode::MalformedFrame,
        }
    }
}

impl Frame {
    /// The frame's type.
    pub fn frame_type(&self) -> FrameType {
        match self {
            Frame::Hello(_) => FrameType::Hello,
            Frame::Welcome(_) => FrameType::Welcome,
            Frame::Reject(_) => FrameType::Reject,
            Frame::Envelope(_) => FrameType::Envelope,
            Frame::Subscribe(_) => FrameType::Subscribe,
            Frame::Unsubscribe(_) => FrameType::Unsubscribe,
            Frame::Consume(_) => FrameType::Consume,
            Frame::Ack(_) => FrameType::Ack,
            Frame::Nack(_) => FrameType::Nack,
            Frame::Heartbeat(_) => FrameType::Heartbeat,
            Frame::Goodbye(_) => FrameType::Goodbye,
        }
    }

    /// Encodes the frame, length prefix included. `codec` applies to envelopes only;
    /// handshake frames are always MessagePack.
    pub fn encode(&self, codec: Codec) -> Result<Bytes, CodecError> {
        // An envelope's body is most of its frame: reserve for it, or the buffer grows by
        // doubling from 64 bytes and a 10 KiB body is copied about eight times.
        let capacity = match self {
            Frame::Envelope(env) => FRAME_HEADER_LEN + 1 + env.encoded_len_hint(codec),
            _ => 64,
        };
        let mut out = Vec::with_capacity(capacity);
        self.encode_into(codec, &mut out)?;
        Ok(Bytes::from(out))
    }

    /// Appends the encoded frame to `out`.
    pub fn encode_into(&self, codec: Codec, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let start = out.len();
        out.extend_from_slice(&[0, 0, 0, 0, self.frame_type() as u8]);
        match self {
            Frame::Hello(h) => Codec::MsgPack.encode_into(h, out)?,
            Frame::Welcome(w) => Codec::MsgPack.encode_into(w, out)?,
            Frame::Reject(r) => Codec::MsgPack.encode_into(r, out)?,
            Frame::Envelope(e) => codec.encode_into(e, out)?,
            Frame::Subscribe(t) | Frame::Unsubscribe(t) => out.extend_from_slice(t.as_bytes()),
            Frame::Consume(c) => {
                out.extend_from_slice(&c.credit.to_be_bytes());
                out.extend_from_slice(c.queue.as_bytes());
            }
            Frame::Ack(task) => out.extend_from_slice(&task.to_be_bytes()),
            Frame::Nack(n) => {
                out.extend_from_slice(&n.task.to_be_bytes());
                out.extend_from_slice(&n.delay_ms.unwrap_or(u32::MAX).to_be_bytes());
            }
            Frame::Heartbeat(h) => {
                out.extend_from_slice(&h.seq.to_be_bytes());
                out.extend_from_slice(&h.timestamp_us.to_be_bytes());
            }
            Frame::Goodbye(g) => {
                out.extend_from_slice(&g.code.code().to_be_bytes());
                out.extend_from_slice(g.reason.as_bytes());
            }
        }
        let len = u32::try_from(out.len() - start - FRAME_HEADER_LEN).map_err(|_| CodecError {
            codec,
            message: "frame longer than 4 GiB".into(),
        })?;
        out[start..start + FRAME_HEADER_LEN].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }

    /// Encodes an envelope frame from a borrowed envelope (no copy of the envelope; the hub
    /// uses this to fan one message out to many agents).
    ///
    /// ```
    /// use agentwire_proto::{Codec, Destination, Envelope, Frame, Kind};
    /// let env = Envelope::new(1, "a", Destination::Broadcast, Kind::Event);
    /// assert_eq!(
    ///     Frame::encode_envelope(&env, Codec::Json).unwrap(),
    ///     Frame::Envelope(env).encode(Codec::Json).unwrap()
    /// );
    /// ```
    pub fn encode_envelope(env: &Envelope, codec: Codec) -> Result<Bytes, CodecError> {
        let mut out = Vec::with_capacity(FRAME_HEADER_LEN + 1 + env.encoded_len_hint(codec));
        out.extend_from_slice(&[0, 0, 0, 0, FrameType::Envelope as u8]);
        codec.encode_into(env, &mut out)?;
        let len = u32::try_from(out.len() - FRAME_HEADER_LEN).map_err(|_| CodecError {
            codec,
            message: "frame longer than 4 GiB".into(),
        })?;
        out[..FRAME_HEADER_LEN].copy_from_slice(&len.to_be_bytes());
        Ok(Bytes::from(out))
    }

    /// Decodes a raw frame's payload. `codec` applies to envelopes only.
    pub fn decode(raw: &RawFrame, codec: Codec) -> Result<Frame, FrameError> {
        let frame_type =
            FrameType::from_byte(raw.type_byte).ok_or(FrameError::UnknownType(raw.type_byte))?;
        let malformed = |message: String| FrameError::Malformed {
            frame: frame_type,
            message,
        };
        let codec_err = |e: CodecError| malformed(e.to_string());
        let text = |bytes: &[u8]| {
            std::str::from_utf8(bytes)
                .map(str::to_owned)
                .map_err(|e| malformed(format!("not UTF-8: {e}")))
        };
        let p = &raw.payload[..];
        Ok(match frame_type {
            FrameType::Hello => Frame::Hello(Codec::MsgPack.decode(p).map_err(codec_err)?),
            FrameType::Welcome => Frame::Welcome(Codec::MsgPack.decode(p).map_err(codec_err)?),
            FrameType::Reject => Frame::Reject(Codec::MsgPack.decode(p).map_err(codec_err)?),
            FrameType::Envelope => {
                Frame::Envelope(codec.decode_envelope(&raw.payload).map_err(codec_err)?)
            }
            FrameType::Subscribe => Frame::Subscribe(text(p)?),
            FrameType::Unsubscribe => Frame::Unsubscribe(text(p)?),
            FrameType::Consume => {
                if p.len() < 4 {
                    return Err(malformed(format!("{} bytes, expected at least 4", p.len())));
                }
                let mut b = p;
                let credit = b.get_u32();
                Frame::Consume(Consume {
                    queue: text(b)?,
                    credit,
                })
            }
            FrameType::Ack => {
                if p.len() != 8 {
                    return Err(malformed(format!("{} bytes, expected 8", p.len())));
                }
                let mut b = p;
                Frame::Ack(b.get_u64())
            }
            FrameType::Nack => {
                if p.len() != 12 {
                    return Err(malformed(format!("{} bytes, expected 12", p.len())));
                }
                let mut b = p;
                let task = b.get_u64();
                let delay = b.get_u32();
                Frame::Nack(Nack {
                    task,
                    delay_ms: (delay != u32::MAX).then_some(delay),
                })
            }
            FrameType::Heartbeat => {
                if p.len() != 16 {
                    return Err(malformed(format!("{} bytes, expected 16", p.len())));
                }
                let mut b = p;
                Frame::Heartbeat(Heartbeat {
                    seq: b.get_u64(),
                    timestamp_us: b.get_u64(),
                })
            }
            FrameType::Goodbye => {
                if p.len() < 4 {
                    return Err(malformed(format!("{} bytes, expected at least 4", p.len())));
                }
                let mut b = p;
                let code = b.get_u32();
                Frame::Goodbye(Goodbye {
                    code: ErrorCode::from_code(code).unwrap_or(ErrorCode::ProtocolViolation),
                    reason: String::from_utf8_lossy(b).into_owned(),
                })
            }
        })
    }
}

/// Cuts frames out of a byte stream, enforcing the maximum frame size.
///
/// Feed it bytes with [`push`](FrameDecoder::push) in any chunking, take frames with
/// [`next_frame`](FrameDecoder::next_frame), and call [`finish`](FrameDecoder::finish) at end
/// of stream to learn whether it ended inside a frame.
///
/// ```
/// use agentwire_proto::{FrameDecoder, FrameError};
/// let mut d = FrameDecoder::new(8);
/// d.push(&[0, 0, 0, 2, 0x30]);
/// assert_eq!(d.next_frame(), Ok(None)); // one byte of payload still missing
/// assert_eq!(d.finish(), Err(FrameError::Truncated { buffered: 5, needed: 6 }));
///
/// let mut d = FrameDecoder::new(8);
/// d.push(&[0, 0, 1, 0]); // announces 256 bytes: rejected before any are buffered
/// assert_eq!(d.next_frame(), Err(FrameError::TooLarge { len: 256, max: 8 }));
/// ```
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    /// A received buffer not yet copied into `buf` (only while `buf` is empty): whole frames
    /// are cut out of it without copying.
    whole: Bytes,
    max_frame_size: u32,
}

impl FrameDecoder {
    /// A decoder that rejects frames longer than `max_frame_size` bytes (type byte included).
    pub fn new(max_frame_size: u32) -> Self {
        FrameDecoder {
            buf: BytesMut::new(),
            whole: Bytes::new(),
            max_frame_size,
        }
    }

    /// Changes the limit (after the handshake agreed on one).
    pub fn set_max_frame_size(&mut self, max_frame_size: u32) {
        self.max_frame_size = max_frame_size;
    }

    /// Bytes buffered and not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.whole.len()
    }

    /// Appends received bytes (copied).
    pub fn push(&mut self, bytes: &[u8]) {
        self.make_room(bytes);
        self.spill();
        self.buf.extend_from_slice(bytes);
    }

    /// Appends a received buffer. While nothing else is buffered, the frames it holds whole
    /// are handed out as slices of it, without a copy; only a frame cut across buffers is
    /// copied together.
    ///
    /// ```
    /// use agentwire_proto::{Codec, Frame, FrameDecoder};
    /// let bytes = Frame::Subscribe("news".into()).encode(Codec::MsgPack).unwrap();
    /// let mut d = FrameDecoder::new(1024);
    /// d.push_bytes(bytes.clone());
    /// let raw = d.next_frame().unwrap().unwrap();
    /// assert_eq!(raw.to_wire().as_ptr(), bytes.as_ptr()); // the received buffer itself
    /// ```
    pub fn push_bytes(&mut self, mut bytes: Bytes) {
        if self.buf.is_empty() && self.whole.is_empty() {
            self.whole = bytes;
            return;
        }
        // A frame begun in an earlier buffer: copy in only the bytes that complete it, and
        // keep the rest of this buffer uncopied behind it (frames of 10 KiB in 64 KiB reads
        // or QUIC chunks straddle nearly every boundary, and the whole buffer was copied).
        if let Some(rest) = self.completing(&bytes) {
            let head = bytes.split_to(rest);
            self.make_room(&head);
            self.buf.extend_from_slice(&head);
            self.whole = bytes;
            return;
        }
        self.make_room(&bytes);
        self.spill();
        self.buf.extend_from_slice(&bytes);
    }

    /// When `buf` holds the start of a frame (its length prefix complete and valid) that
    /// `incoming` completes with bytes to spare, how many bytes of `incoming` complete it.
    fn completing(&self, incoming: &[u8]) -> Option<usize> {
        if !self.whole.is_empty() {
            return None;
        }
        let len = read_len(&self.buf, self.max_frame_size).ok()??;
        let total = FRAME_HEADER_LEN.saturating_add(len as usize);
        let need = total.checked_sub(self.buf.len()).filter(|&n| n > 0)?;
        (incoming.len() > need).then_some(need)
    }

    /// Moves an uncopied received buffer into `buf` (before anything is appended after it).
    fn spill(&mut self) {
        if !self.whole.is_empty() {
            self.make_room(&[]);
            let whole = std::mem::take(&mut self.whole);
            self.buf.extend_from_slice(&whole);
        }
    }

    /// Makes room in `buf` for the bytes of `whole` (about to be copied in) and `incoming`.
    /// While a frame whose length is known is gathered, `buf` grows towards that length, but
    /// never more than [`MAX_RESERVE_AHEAD`] (or the bytes held, when more) beyond the bytes
    /// held: a peer announcing a large frame and then stalling must not pin
    /// `max_frame_size` bytes per connection.
    ///
    /// A frame larger than [`MAX_RESERVE_AHEAD`] ends in an allocation of exactly its size,
    /// not in `BytesMut::reserve`'s: that doubles, so a 100 KiB frame gathered after a 64 KiB
    /// QUIC chunk sat in a 128 KiB allocation, reached by a copy of the 64 KiB, and one
    /// gathered from 16 KiB HTTP/2 chunks in a 160 KiB one
    /// (`docs/benchmarks/2026-11-26-frame-buffers/`).
    fn make_room(&mut self, incoming: &[u8]) {
        let adding = self.whole.len().saturating_add(incoming.len());
        let spare = self.buf.capacity() - self.buf.len();
        if spare >= adding {
            return;
        }
        let held = self.buf.len().saturating_add(adding);
        match self.announced_total(incoming).filter(|&total| total > held) {
            Some(total) if total > MAX_RESERVE_AHEAD => {
                let target = total.min(held.saturating_add(MAX_RESERVE_AHEAD.max(held)));
                if self.buf.try_reclaim(target - self.buf.len()) {
                    return;
                }
                let mut exact = BytesMut::with_capacity(target);
                exact.extend_from_slice(&self.buf);
                self.buf = exact;
            }
            Some(total) => self.buf.reserve(total - self.buf.len()),
            None => self.buf.reserve(adding),
        }
    }

    /// The whole size (prefix included) of the frame at the front, read from the bytes held
    /// and then `incoming`; `None` before its prefix is complete or when it is over the limit.
    fn announced_total(&self, incoming: &[u8]) -> Option<usize> {
        let held = self.front();
        let mut prefix = [0u8; FRAME_HEADER_LEN];
        let from_held = held.len().min(FRAME_HEADER_LEN);
        prefix[..from_held].copy_from_slice(&held[..from_held]);
        let from_incoming = (FRAME_HEADER_LEN - from_held).min(incoming.len());
        prefix[from_held..from_held + from_incoming].copy_from_slice(&incoming[..from_incoming]);
        if from_held + from_incoming < FRAME_HEADER_LEN {
            return None;
        }
        let len = u32::from_be_bytes(prefix);
        (len != 0 && len <= self.max_frame_size).then(|| FRAME_HEADER_LEN + len as usize)
    }

    /// The length the next frame announces, once its prefix has arrived, checked against the
    /// limit. Lets a reader size its next read.
    pub fn next_len(&self) -> Result<Option<u32>, FrameError> {
        read_len(self.front(), self.max_frame_size)
    }

    /// The buffered bytes the next frame starts in: `buf` while it holds any (`whole` is set
    /// beside it only once `buf` holds whole frames), else `whole`.
    fn front(&self) -> &[u8] {
        if self.buf.is_empty() {
            &self.whole
        } else {
            &self.buf
        }
    }

    /// The next whole frame, `Ok(None)` if more bytes are needed, or an error if the stream
    /// is broken (after which the decoder should be dropped).
    pub fn next_frame(&mut self) -> Result<Option<RawFrame>, FrameError> {
        // `buf` comes first: `whole` is set beside it only once `buf` holds whole frames.
        if !self.buf.is_empty() {
            return self.next_from_buf();
        }
        if !self.whole.is_empty() {
            if let Some(len) = read_len(&self.whole, self.max_frame_size)? {
                let total = FRAME_HEADER_LEN.saturating_add(len as usize);
                if self.whole.len() >= total {
                    let wire = self.whole.split_to(total);
                    let type_byte = wire[FRAME_HEADER_LEN];
                    let payload = wire.slice(FRAME_HEADER_LEN + 1..);
                    return Ok(Some(RawFrame {
                        type_byte,
                        payload,
                        wire: Some(wire),
                    }));
                }
            }
            // A partial frame: copy it into the buffer, where the rest will join it.
            self.spill();
        }
        self.next_from_buf()
    }

    /// The next whole frame in `buf`, if it holds one.
    fn next_from_buf(&mut self) -> Result<Option<RawFrame>, FrameError> {
        let Some(len) = read_len(&self.buf, self.max_frame_size)? else {
            return Ok(None);
        };
        let total = FRAME_HEADER_LEN.saturating_add(len as usize);
        if self.buf.len() < total {
            return Ok(None);
        }
        let wire = self.buf.split_to(total).freeze();
        let type_byte = wire[FRAME_HEADER_LEN];
        let payload = wire.slice(FRAME_HEADER_LEN + 1..);
        Ok(Some(RawFrame {
            type_byte,
            payload,
            wire: Some(wire),
        }))
    }

    /// Call at end of stream: an error if a partial frame is buffered.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buffered() == 0 {
            return Ok(());
        }
        let needed = match self.next_len() {
            Ok(Some(len)) => FRAME_HEADER_LEN.saturating_add(len as usize),
            _ => FRAME_HEADER_LEN,
        };
        Err(FrameError::Truncated {
            buffered: self.buffered(),
            needed,
        })
    }

    /// Decodes a buffer that must hold exactly one frame (a message stream's whole content).
    ///
    /// ```
    /// use agentwire_proto::{Codec, Frame, FrameDecoder};
    /// let bytes = Frame::Subscribe("news".into()).encode(Codec::MsgPack).unwrap();
    /// let raw = FrameDecoder::decode_one(bytes.clone(), 1024).unwrap();
    /// assert_eq!(Frame::decode(&raw, Codec::MsgPack).unwrap(), Frame::Subscribe("news".into()));
    /// ```
    pub fn decode_one(bytes: Bytes, max_frame_size: u32) -> Result<RawFrame, FrameError> {
        let len = read_len(&bytes, max_frame_size)?.ok_or(FrameError::Truncated {
            buffered: bytes.len(),
            needed: FRAME_HEADER_LEN,
        })?;
        let total = FRAME_HEADER_LEN.saturating_add(len as usize);
        if bytes.len() < total {
            return Err(FrameError::Truncated {
                buffered: bytes.len(),
                needed: total,
            });
        }
        if bytes.len() > total {
            return Err(FrameError::Trailing(bytes.len() - total));
        }
        let type_byte = bytes[FRAME_HEADER_LEN];
        let payload = bytes.slice(FRAME_HEADER_LEN + 1..);
        Ok(RawFrame {
            type_byte,
            payload,
            wire: Some(bytes),
        })
    }
}

/// Reads and checks the length prefix at the start of `buf`; `None` if it has not all arrived.
fn read_len(buf: &[u8], max_frame_size: u32) -> Result<Option<u32>, FrameError> {
    let Some(prefix) = buf.get(..FRAME_HEADER_LEN) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    if len == 0 {
        return Err(FrameError::Empty);
    }
    if len > max_frame_size {
        return Err(FrameError::TooLarge {
            len,
            max: max_frame_size,
        });
    }
    Ok(Some(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::{Hello, Reject, Welcome};
    use crate::{Destination, Kind, Priority};

    const MAX: u32 = 1024;

    fn sample_envelope() -> Envelope {
        Envelope::new(7, "a", Destination::topic("jobs"), Kind::Request)
            .with_priority(Priority::High)
            .with_header("trace", "t-1")
            .with_correlation(3)
            .with_ttl_ms(500)
            .with_timestamp_us(1_700_000_000_000_000)
            .with_body(vec![0u8, 0xff, 0x80, b'x'])
    }

    fn every_frame() -> Vec<Frame> {
        let mut hello = Hello::new("worker-1", "worker");
        hello.auth_token = Some("s3cret".into());
        hello.capabilities = vec!["datagrams".into()];
        vec![
            Frame::Hello(hello),
            Frame::Welcome(Welcome {
                version: 1,
                codec: "json".into(),
                session_id: u64::MAX,
                max_frame_size: 4096,
                heartbeat_interval_ms: 5000,
                capabilities: vec!["datagrams".into()],
            }),
            Frame::Reject(Reject::new(ErrorCode::Unauthorized, "nope")),
            Frame::Envelope(sample_envelope()),
            Frame::Envelope(Envelope::new(0, "", Destination::Broadcast, Kind::Event)),
            Frame::Subscribe("news".into()),
            Frame::Unsubscribe("news/ü".into()),
            Frame::Consume(Consume {
                queue: "jobs".into(),
                credit: 16,
            }),
            Frame::Consume(Consume {
                queue: "jobs".into(),
                credit: 0,
            }),
            Frame::Ack(u64::MAX),
            Frame::Nack(Nack {
                task: 7,
                delay_ms: Some(250),
            }),
            Frame::Nack(Nack {
                task: 7,
                delay_ms: None,
            }),
            Frame::Subscribe(String::new()),
            Frame::Heartbeat(Heartbeat {
                seq: 9,
                timestamp_us: u64::MAX,
            }),
            Frame::Goodbye(Goodbye {
                code: ErrorCode::ShuttingDown,
                reason: "bye".into(),
            }),
            Frame::Goodbye(Goodbye {
                code: ErrorCode::Normal,
                reason: String::new(),
            }),
        ]
    }

    fn decode_all(dec: &mut FrameDecoder) -> Vec<RawFrame> {
        let mut out = Vec::new();
        while let Some(raw) = dec.next_frame().unwrap() {
            out.push(raw);
        }
        out
    }

    #[test]
    fn every_frame_type_round_trips_with_both_codecs() {
        for codec in Codec::ALL {
            for frame in every_frame() {
                let bytes = frame.encode(codec).unwrap();
                let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                assert_eq!(len as usize, bytes.len() - FRAME_HEADER_LEN);
                assert_eq!(bytes[4], frame.frame_type() as u8);
                let raw = FrameDecoder::decode_one(bytes, MAX).unwrap();
                assert_eq!(Frame::decode(&raw, codec).unwrap(), frame, "{codec}");
            }
        }
    }

    #[test]
    fn frame_type_bytes_round_trip() {
        for b in 0..=255u8 {
            if let Some(t) = FrameType::from_byte(b) {
                assert_eq!(t as u8, b);
            }
        }
        let known = (0..=255u8).filter_map(FrameType::from_byte).count();
        assert_eq!(known, 11);
    }

    #[test]
    fn handshake_frames_are_msgpack_whatever_the_codec() {
        let frame = Frame::Reject(Reject::new(ErrorCode::Internal, "x"));
        assert_eq!(
            frame.encode(Codec::Json).unwrap(),
            frame.encode(Codec::MsgPack).unwrap()
        );
    }

    #[test]
    fn encode_into_appends() {
        let mut out = vec![0xaa];
        Frame::Subscribe("t".into())
            .encode_into(Codec::MsgPack, &mut out)
            .unwrap();
        assert_eq!(out, [0xaa, 0, 0, 0, 2, 0x20, b't']);
    }

    #[test]
    fn decoder_handles_every_chunking() {
        let frames = every_frame();
        let mut stream = Vec::new();
        for f in &frames {
            f.encode_into(Codec::MsgPack, &mut stream).unwrap();
        }
        for chunk in 1..=stream.len() {
            let mut dec = FrameDecoder::new(MAX);
            let mut got = Vec::new();
            for piece in stream.chunks(chunk) {
                dec.push(piece);
                got.extend(decode_all(&mut dec));
            }
            assert_eq!(dec.buffered(), 0);
            assert_eq!(dec.finish(), Ok(()));
            let decoded: Vec<Frame> = got
                .iter()
                .map(|r| Frame::decode(r, Codec::MsgPack).unwrap())
                .collect();
            assert_eq!(decoded, frames, "chunk size {chunk}");
        }
    }

    #[test]
    fn decoder_byte_by_byte_reports_progress() {
        let bytes = Frame::Heartbeat(Heartbeat {
            seq: 1,
            timestamp_us: 2,
        })
        .encode(Codec::MsgPack)
        .unwrap();
        let mut dec = FrameDecoder::new(MAX);
        for (i, b) in bytes.iter().enumerate() {
            assert_eq!(dec.next_frame(), Ok(None));
            if i < FRAME_HEADER_LEN {
                assert_eq!(dec.next_len(), Ok(None));
            } else {
                assert_eq!(dec.next_len(), Ok(Some(17)));
            }
            dec.push(&[*b]);
        }
        let raw = dec.next_frame().unwrap().unwrap();
        assert_eq!(raw.type_byte, 0x30);
        assert_eq!(raw.payload.len(), 16);
        assert_eq!(dec.next_frame(), Ok(None));
    }

    #[test]
    fn oversized_length_rejected_before_body() {
        let mut dec = FrameDecoder::new(16);
        dec.push(&[0, 0, 0]);
        assert_eq!(dec.next_frame(), Ok(None));
        dec.push(&[17]);
        assert_eq!(
            dec.next_frame(),
            Err(FrameError::TooLarge { len: 17, max: 16 })
        );
        assert_eq!(
            dec.next_len(),
            Err(FrameError::TooLarge { len: 17, max: 16 })
        );
        assert_eq!(
            FrameError::TooLarge { len: 17, max: 16 }.close_code(),
            ErrorCode::FrameTooLarge
        );

        // Exactly at the limit is fine.
        let mut dec = FrameDecoder::new(16);
        dec.push(&[0, 0, 0, 16]);
        assert_eq!(dec.next_len(), Ok(Some(16)));
        assert_eq!(dec.next_frame(), Ok(None));

        // The largest possible prefix is rejected too.
        let mut dec = FrameDecoder::new(u32::MAX - 1);
        dec.push(&[0xff; 4]);
        assert_eq!(
            dec.next_frame(),
            Err(FrameError::TooLarge {
                len: u32::MAX,
                max: u32::MAX - 1
            })
        );
        assert!(matches!(
            FrameDecoder::decode_one(Bytes::from_static(&[0, 1, 0, 0]), 8),
            Err(FrameError::TooLarge { len: 65536, max: 8 })
        ));
    }

    #[test]
    fn announced_length_does_not_preallocate_without_bound() {
        let mut dec = FrameDecoder::new(u32::MAX);
        dec.push(&[0x7f, 0xff, 0xff, 0xff]);
        assert_eq!(dec.next_frame(), Ok(None));
        assert!(dec.buf.capacity() < 1024 * 1024);
    }

    /// A frame of `len` bytes after the prefix, filled with a pattern.
    fn big_frame(len: usize) -> Bytes {
        let mut wire = (len as u32).to_be_bytes().to_vec();
        wire.push(FrameType::Envelope as u8);
        wire.extend((1..len).map(|i| i as u8));
        Bytes::from(wire)
    }

    #[test]
    fn frames_after_one_that_straddles_two_buffers_are_not_copied() {
        let (a, b, c) = (big_frame(10_000), big_frame(10_000), big_frame(10_000));
        let stream: Vec<u8> = [&a[..], &b[..], &c[..]].concat();
        let stream = Bytes::from(stream);
        // The first buffer ends inside `b`; the second holds b's end and all of `c`.
        let cut = a.len() + 4_000;
        let mut dec = FrameDecoder::new(u32::MAX);
        dec.push_bytes(stream.slice(..cut));
        assert_eq!(dec.next_frame().unwrap().unwrap().to_wire(), a);
        assert_eq!(dec.next_frame(), Ok(None));
        let second = stream.slice(cut..);
        dec.push_bytes(second.clone());
        // Only b's missing bytes were copied in: c is still the received buffer.
        assert_eq!(dec.buf.len(), b.len());
        let rest = b.len() - 4_000;
        assert_eq!(dec.whole.as_ptr(), second[rest..].as_ptr());
        assert_eq!(dec.next_frame().unwrap().unwrap().to_wire(), b);
        let third = dec.next_frame().unwrap().unwrap();
        assert_eq!(third.to_wire(), c);
        assert_eq!(third.to_wire().as_ptr(), second[rest..].as_ptr());
        assert_eq!(dec.next_frame(), Ok(None));
        assert_eq!(dec.finish(), Ok(()));
    }

    #[test]
    fn a_large_frame_is_gathered_in_an_allocation_of_its_own_size() {
        let wire = big_frame(100 * 1024);
        // From QUIC: one 64 KiB received chunk, then the rest.
        let mut dec = FrameDecoder::new(u32::MAX);
        dec.push_bytes(wire.slice(..64 * 1024));
        assert_eq!(dec.next_frame(), Ok(None));
        assert_eq!(dec.buf.capacity(), wire.len());
        dec.push_bytes(wire.slice(64 * 1024..));
        assert_eq!(dec.buf.capacity(), wire.len());
        let frame = dec.next_frame().unwrap().unwrap();
        assert_eq!(frame.to_wire(), wire);

        // From a byte stream in 16 KiB reads (HTTP/2's DATA frames).
        // The first allocation reaches 64 KiB past the first read; the second is the frame's.
        let mut dec = FrameDecoder::new(u32::MAX);
        let mut grown = Vec::new();
        for piece in wire.chunks(16 * 1024) {
            dec.push(piece);
            if grown.last() != Some(&dec.buf.capacity()) {
                grown.push(dec.buf.capacity());
            }
        }
        assert_eq!(grown, vec![80 * 1024, wire.len()]);
        assert_eq!(dec.next_frame().unwrap().unwrap().to_wire(), wire);
    }

    #[test]
    fn a_huge_frame_grows_geometrically_and_never_past_its_size() {
        let wire = big_frame(3 * 1024 * 1024 + 5);
        let mut dec = FrameDecoder::new(u32::MAX);
        let mut allocations = 0;
        let mut capacity = 0;
        for piece in wire.chunks(8 * 1024) {
            dec.push(piece);
            assert!(dec.buf.capacity() <= wire.len());
            // Never more than the bytes held ahead of them (or 64 KiB, when more).
            assert!(dec.buf.capacity() <= (2 * dec.buf.len()).max(dec.buf.len() + 64 * 1024));
            if dec.buf.capacity() != capacity {
                capacity = dec.buf.capacity();
                allocations += 1;
            }
        }
        assert!(allocations <= 8, "{allocations} allocations");
        assert_eq!(dec.next_frame().unwrap().unwrap().to_wire(), wire);
    }

    #[test]
    fn lowering_the_limit_applies_to_the_next_frame() {
        let mut dec = FrameDecoder::new(MAX);
        dec.push(
            &Frame::Subscribe("abcdef".into())
                .encode(Codec::MsgPack)
                .unwrap(),
        );
        dec.set_max_frame_size(4);
        assert_eq!(
            dec.next_frame(),
            Err(FrameError::TooLarge { len: 7, max: 4 })
        );
    }

    #[test]
    fn empty_frame_rejected() {
        let mut dec = FrameDecoder::new(MAX);
        dec.push(&[0, 0, 0, 0, 0x30]);
        assert_eq!(dec.next_frame(), Err(FrameError::Empty));
        assert_eq!(
            FrameDecoder::decode_one(Bytes::from_static(&[0, 0, 0, 0]), MAX),
            Err(FrameError::Empty)
        );
        assert_eq!(FrameError::Empty.close_code(), ErrorCode::MalformedFrame);
    }

    #[test]
    fn type_byte_only_frame() {
        let mut dec = FrameDecoder::new(MAX);
        dec.push(&[0, 0, 0, 1, 0x20]);
        let raw = dec.next_frame().unwrap().unwrap();
        assert_eq!(raw.type_byte, 0x20);
        assert!(raw.payload.is_empty());
        assert_eq!(
            Frame::decode(&raw, Codec::MsgPack),
            Ok(Frame::Subscribe(String::new()))
        );
        assert!(matches!(
            Frame::decode(&RawFrame::new(0x10, Bytes::new()), Codec::Json),
            Err(FrameError::Malformed {
                frame: FrameType::Envelope,
                ..
            })
        ));
    }

    #[test]
    fn truncated_input() {
        let bytes = Frame::Subscribe("news".into())
            .encode(Codec::MsgPack)
            .unwrap();
        for cut in 0..bytes.len() {
            let part = bytes.slice(..cut);
            let needed = if cut < FRAME_HEADER_LEN {
                FRAME_HEADER_LEN
            } else {
                bytes.len()
            };
            assert_eq!(
                FrameDecoder::decode_one(part.clone(), MAX),
                Err(FrameError::Truncated {
                    buffered: cut,
                    needed
                })
            );
            let mut dec = FrameDecoder::new(MAX);
            dec.push(&part);
            assert_eq!(dec.next_frame(), Ok(None));
            if cut == 0 {
                assert_eq!(dec.finish(), Ok(()));
            } else {
                assert_eq!(
                    dec.finish(),
                    Err(FrameError::Truncated {
                        buffered: cut,
                        needed
                    })
                );
            }
        }
    }

    #[test]
    fn decode_one_rejects_trailing_bytes() {
        let mut bytes = Frame::Subscribe("news".into())
            .encode(Codec::MsgPack)
            .unwrap()
            .to_vec();
        bytes.extend_from_slice(&[1, 2, 3]);
        assert_eq!(
            FrameDecoder::decode_one(Bytes::from(bytes), MAX),
            Err(FrameError::Trailing(3))
        );
    }

    #[test]
    fn unknown_frame_type() {
        let mut dec = FrameDecoder::new(MAX);
        dec.push(&[0, 0, 0, 3, 0x99, 1, 2]);
        let raw = dec.next_frame().unwrap().unwrap();
        assert_eq!(raw.type_byte, 0x99);
        for codec in Codec::ALL {
            assert_eq!(
                Frame::decode(&raw, codec),
                Err(FrameError::UnknownType(0x99))
            );
        }
        assert_eq!(
            FrameError::UnknownType(0x99).close_code(),
            ErrorCode::MalformedFrame
        );
        assert_eq!(FrameType::from_byte(0x00), None);
    }

    #[test]
    fn heartbeat_payload_must_be_16_bytes() {
        for len in [0usize, 1, 8, 15, 17, 32] {
            let raw = RawFrame::new(FrameType::Heartbeat as u8, Bytes::from(vec![0u8; len]));
            assert!(
                matches!(
                    Frame::decode(&raw, Codec::MsgPack),
                    Err(FrameError::Malformed {
                        frame: FrameType::Heartbeat,
                        ..
                    })
                ),
                "length {len}"
            );
        }
        let mut payload = 5u64.to_be_bytes().to_vec();
        payload.extend_from_slice(&6u64.to_be_bytes());
        let raw = RawFrame::new(0x30, Bytes::from(payload));
        assert_eq!(
            Frame::decode(&raw, Codec::Json),
            Ok(Frame::Heartbeat(Heartbeat {
                seq: 5,
                timestamp_us: 6
            }))
        );
    }

    #[test]
    fn goodbye_payload_needs_a_code() {
        for len in 0..4 {
            let raw = RawFrame::new(FrameType::Goodbye as u8, Bytes::from(vec![0u8; len]));
            assert!(matches!(
                Frame::decode(&raw, Codec::MsgPack),
                Err(FrameError::Malformed {
                    frame: FrameType::Goodbye,
                    ..
                })
            ));
        }
        let raw = RawFrame::new(0x40, Bytes::from_static(&[0, 0, 0, 16]));
        assert_eq!(
            Frame::decode(&raw, Codec::MsgPack),
            Ok(Frame::Goodbye(Goodbye {
                code: ErrorCode::ShuttingDown,
                reason: String::new()
            }))
        );
    }

    #[test]
    fn goodbye_is_lenient_about_unknown_codes_and_bad_utf8() {
        let raw = RawFrame::new(0x40, Bytes::from_static(&[0, 0, 0x10, 0, b'o', 0xff, b'k']));
        assert_eq!(
            Frame::decode(&raw, Codec::MsgPack),
            Ok(Frame::Goodbye(Goodbye {
                code: ErrorCode::ProtocolViolation,
                reason: "o\u{fffd}k".into()
            }))
        );
    }

    #[test]
    fn subscribe_rejects_invalid_utf8() {
        for t in [0x20u8, 0x21] {
            let raw = RawFrame::new(t, Bytes::from_static(&[b'a', 0xc3]));
            assert!(matches!(
                Frame::decode(&raw, Codec::MsgPack),
                Err(FrameError::Malformed { .. })
            ));
        }
    }

    #[test]
    fn envelope_payload_in_the_wrong_codec_is_malformed() {
        let env = sample_envelope();
        let bytes = Frame::Envelope(env).encode(Codec::MsgPack).unwrap();
        let raw = FrameDecoder::decode_one(bytes, MAX).unwrap();
        assert!(matches!(
            Frame::decode(&raw, Codec::Json),
            Err(FrameError::Malformed {
                frame: FrameType::Envelope,
                ..
            })
        ));
    }

    #[test]
    fn handshake_payload_trailing_bytes_are_malformed() {
        let bytes = Frame::Reject(Reject::new(ErrorCode::Normal, ""))
            .encode(Codec::MsgPack)
            .unwrap();
        let mut raw = FrameDecoder::decode_one(bytes, MAX).unwrap();
        let mut payload = raw.payload.to_vec();
        payload.push(0xc0);
        raw.payload = Bytes::from(payload);
        assert!(matches!(
            Frame::decode(&raw, Codec::MsgPack),
            Err(FrameError::Malformed {
                frame: FrameType::Reject,
                ..
            })
        ));
    }

    #[test]
    fn decoder_error_is_sticky() {
        let mut dec = FrameDecoder::new(MAX);
        dec.push(&[0, 0, 0, 0]);
        assert_eq!(dec.next_frame(), Err(FrameError::Empty));
        assert_eq!(dec.next_frame(), Err(FrameError::Empty));
        assert!(dec.finish().is_err());
    }
}
