//! The client's unidirectional streams (RFC 9114 §6.2): which kind each one is, reading its
//! control stream's SETTINGS, skipping what may be ignored, and the rule that each critical
//! stream is opened once.
//!
//! This module owns those streams; it must not read request streams.

use bytes::BytesMut;

use crate::{
    code, decode_varint, forbidden_everywhere, frame, frame_head, stream_type, H3Error,
    MAX_SETTINGS_FRAME,
};

/// The kind of a unidirectional stream the client opened, once its first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UniKind {
    /// The client's control stream (one per connection).
    Control,
    /// QPACK encoder stream: with a table capacity of 0 it carries nothing we use.
    QpackEncoder,
    /// QPACK decoder stream: we never refer to the dynamic table, so nothing to act on.
    QpackDecoder,
    /// Reserved or unknown: to be ignored (RFC 9114 section 6.2).
    Unknown,
}

impl UniKind {
    /// Whether closing this stream is a connection error (H3_CLOSED_CRITICAL_STREAM).
    pub fn is_critical(self) -> bool {
        matches!(
            self,
            UniKind::Control | UniKind::QpackEncoder | UniKind::QpackDecoder
        )
    }
}

/// Reads one of the client's unidirectional streams: its type, and for the control stream
/// its frames (SETTINGS first and once; no request frames). QPACK streams are read and
/// dropped; what a client may put there with a capacity of 0 needs no action.
///
/// ```
/// use agentwire_h3wire::{code, UniKind, UniReader};
/// let mut control = UniReader::default();
/// assert_eq!(control.push(&[0x00, 0x04, 0x00]).unwrap(), Some(UniKind::Control)); // SETTINGS, empty
/// assert_eq!(control.ended().unwrap().code, code::H3_CLOSED_CRITICAL_STREAM);
/// // A GOAWAY before SETTINGS:
/// assert_eq!(UniReader::default().push(&[0x00, 0x07, 0x01, 0x00]).unwrap_err().code, code::H3_MISSING_SETTINGS);
/// ```
#[derive(Debug, Default)]
pub struct UniReader {
    kind: Option<UniKind>,
    buf: BytesMut,
    skip: u64,
    settings_seen: bool,
}

impl UniReader {
    /// Feeds the next bytes. Returns the stream's kind the first time it is known.
    pub fn push(&mut self, mut data: &[u8]) -> Result<Option<UniKind>, H3Error> {
        let mut announced = None;
        if self.kind.is_none() {
            self.buf.extend_from_slice(data);
            let Some((ty, n)) = decode_varint(&self.buf) else {
                return Ok(None);
            };
            let kind = match ty {
                stream_type::CONTROL => UniKind::Control,
                stream_type::PUSH => {
                    return Err(H3Error::conn(
                        code::H3_STREAM_CREATION_ERROR,
                        "a client opened a push stream",
                    ))
                }
                stream_type::QPACK_ENCODER => UniKind::QpackEncoder,
                stream_type::QPACK_DECODER => UniKind::QpackDecoder,
                _ => UniKind::Unknown,
            };
            self.kind = Some(kind);
            announced = Some(kind);
            let rest = self.buf.split_off(n);
            self.buf.clear();
            if kind != UniKind::Control {
                return Ok(announced);
            }
            self.control(&rest)?;
            return Ok(announced);
        }
        if self.kind == Some(UniKind::Control) {
            if self.skip > 0 {
                let n = self.skip.min(data.len() as u64) as usize;
                self.skip -= n as u64;
                data = &data[n..];
            }
            self.control(data)?;
        }
        Ok(announced)
    }

    /// Reads control-stream frames (RFC 9114 section 6.2.1).
    fn control(&mut self, data: &[u8]) -> Result<(), H3Error> {
        self.buf.extend_from_slice(data);
        loop {
            let Some(head) = frame_head(&self.buf) else {
                return Ok(());
            };
            let first = !self.settings_seen;
            match head.ty {
                frame::SETTINGS if first => {
                    if head.len > MAX_SETTINGS_FRAME {
                        return Err(H3Error::conn(
                            code::H3_EXCESSIVE_LOAD,
                            "SETTINGS frame over 4 KiB",
                        ));
                    }
                    let end = head.head_len + head.len as usize;
                    if self.buf.len() < end {
                        return Ok(());
                    }
                    check_settings(&self.buf[head.head_len..end])?;
                    self.settings_seen = true;
                    let _ = self.buf.split_to(end);
                    continue;
                }
                _ if first => {
                    return Err(H3Error::conn(
                        code::H3_MISSING_SETTINGS,
                        "the control stream did not begin with SETTINGS",
                    ))
                }
                frame::SETTINGS | frame::DATA | frame::HEADERS | frame::PUSH_PROMISE => {
                    return Err(H3Error::conn(
                        code::H3_FRAME_UNEXPECTED,
                        "frame not allowed on the control stream",
                    ))
                }
                ty if forbidden_everywhere(ty) => {
                    return Err(H3Error::conn(
                        code::H3_FRAME_UNEXPECTED,
                        "HTTP/2 frame type on the control stream",
                    ))
                }
                _ => {
                    // GOAWAY, CANCEL_PUSH, MAX_PUSH_ID and unknown frames: nothing for a
                    // file server to act on (a GOAWAY from a client only limits pushes).
                    let available = (self.buf.len() - head.head_len) as u64;
                    if head.len > available {
                        self.skip = head.len - available;
                        self.buf.clear();
                        return Ok(());
                    }
                    let _ = self.buf.split_to(head.head_len + head.len as usize);
                }
            }
        }
    }

    /// The error for the end of this stream, if its end is one (a critical stream closed).
    pub fn ended(&self) -> Option<H3Error> {
        match self.kind {
            Some(kind) if kind.is_critical() => Some(H3Error::conn(
                code::H3_CLOSED_CRITICAL_STREAM,
                "the client closed a control or QPACK stream",
            )),
            _ => None,
        }
    }
}

/// Which critical unidirectional streams a client has opened on one connection: a control
/// stream and the two QPACK streams, each at most once (RFC 9114 section 6.2.1, RFC 9204
/// section 4.2). Shared by the readers of that connection's streams, hence atomic.
///
/// ```
/// use agentwire_h3wire::{code, CriticalStreams, UniKind};
/// let seen = CriticalStreams::default();
/// assert!(seen.open(UniKind::Control).is_ok());
/// assert!(seen.open(UniKind::Unknown).is_ok());
/// assert_eq!(seen.open(UniKind::Control).unwrap_err().code, code::H3_STREAM_CREATION_ERROR);
/// ```
#[derive(Debug, Default)]
pub struct CriticalStreams(std::sync::atomic::AtomicU8);

impl CriticalStreams {
    /// Records a stream of `kind`; an error if one of that kind was already open.
    pub fn open(&self, kind: UniKind) -> Result<(), H3Error> {
        let bit = match kind {
            UniKind::Control => 1,
            UniKind::QpackEncoder => 2,
            UniKind::QpackDecoder => 4,
            UniKind::Unknown => return Ok(()),
        };
        let before = self.0.fetch_or(bit, std::sync::atomic::Ordering::Relaxed);
        if before & bit != 0 {
            return Err(H3Error::conn(
                code::H3_STREAM_CREATION_ERROR,
                "a second control or QPACK stream",
            ));
        }
        Ok(())
    }
}

/// Checks a SETTINGS payload (RFC 9114 section 7.2.4): whole identifier-value pairs, no
/// HTTP/2 identifiers, none repeated.
fn check_settings(mut payload: &[u8]) -> Result<(), H3Error> {
    let mut seen: Vec<u64> = Vec::new();
    while !payload.is_empty() {
        let malformed = || H3Error::conn(code::H3_FRAME_ERROR, "malformed SETTINGS frame");
        let (id, a) = decode_varint(payload).ok_or_else(malformed)?;
        let (_, b) = decode_varint(&payload[a..]).ok_or_else(malformed)?;
        payload = &payload[a + b..];
        if (0x02..=0x05).contains(&id) {
            return Err(H3Error::conn(
                code::H3_SETTINGS_ERROR,
                "HTTP/2 setting in SETTINGS",
            ));
        }
        if seen.contains(&id) {
            return Err(H3Error::conn(
                code::H3_SETTINGS_ERROR,
                "repeated setting in SETTINGS",
            ));
        }
        seen.push(id);
    }
    Ok(())
}
