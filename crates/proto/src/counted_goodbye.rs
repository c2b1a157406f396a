//! The counted goodbye: a QUIC peer's goodbye that names how many message streams it opened.
//!
//! On QUIC a goodbye travels on the control stream while the messages sent before it travel on
//! streams of their own, so a receiver can read the goodbye before messages its peer sent
//! earlier. When both sides offered the [`CAPABILITY`] in the handshake, the sender writes its
//! goodbye as a [`TYPE`] frame instead: the number of message streams it opened (u64 BE), then
//! the Goodbye payload (code u32 BE, reason). The receiver passes the goodbye on once it has
//! read that many streams to their end, and only then.
//!
//! This module owns the frame's bytes: [`count`] rewrites an encoded Goodbye, [`split`] takes a
//! received one apart. It must not count streams or wait: transports do (QUIC only; byte
//! streams deliver in order and never need it). The type never reaches [`Frame::decode`]:
//! the transport that received it hands on the plain Goodbye it stands for.
//!
//! [`Frame::decode`]: crate::Frame::decode

use bytes::{BufMut, Bytes};

use crate::frame::{FrameError, FrameType, RawFrame, FRAME_HEADER_LEN};

/// The capability both sides offer to use counted goodbyes.
pub const CAPABILITY: &str = "goodbye-count";

/// The counted goodbye's type byte.
pub const TYPE: u8 = 0x41;

/// Rewrites an encoded Goodbye frame (length prefix included) as a counted goodbye naming
/// `streams`; `None` when `frame` is not a whole Goodbye frame.
///
/// ```
/// use agentwire_proto::{counted_goodbye, Codec, ErrorCode, Frame, FrameDecoder, Goodbye};
/// let bye = Frame::Goodbye(Goodbye { code: ErrorCode::Normal, reason: "done".into() })
///     .encode(Codec::MsgPack)
///     .unwrap();
/// let counted = counted_goodbye::count(&bye, 17).unwrap();
/// let raw = FrameDecoder::decode_one(counted, 1024).unwrap();
/// let (streams, goodbye) = counted_goodbye::split(&raw).unwrap();
/// assert_eq!(streams, 17);
/// assert_eq!(goodbye.to_wire(), bye);
/// ```
pub fn count(frame: &[u8], streams: u64) -> Option<Bytes> {
    let (prefix, rest) = frame.split_at_checked(FRAME_HEADER_LEN)?;
    let len = u32::from_be_bytes(prefix.try_into().ok()?) as usize;
    let (&type_byte, payload) = rest.split_first()?;
    if type_byte != FrameType::Goodbye as u8 || len != rest.len() {
        return None;
    }
    let new_len = u32::try_from(len + 8).ok()?;
    let mut out = Vec::with_capacity(frame.len() + 8);
    out.put_u32(new_len);
    out.put_u8(TYPE);
    out.put_u64(streams);
    out.extend_from_slice(payload);
    Some(Bytes::from(out))
}

/// Splits a received counted goodbye into the number of streams it names and the Goodbye
/// frame it stands for. A payload too short for the count is `malformed`.
pub fn split(raw: &RawFrame) -> Result<(u64, RawFrame), FrameError> {
    let Some((count, _)) = raw.payload.split_first_chunk::<8>() else {
        return Err(FrameError::Malformed {
            frame: FrameType::Goodbye,
            message: format!(
                "counted goodbye of {} bytes, expected at least 8",
                raw.payload.len()
            ),
        });
    };
    let streams = u64::from_be_bytes(*count);
    Ok((
        streams,
        RawFrame::new(FrameType::Goodbye as u8, raw.payload.slice(8..)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Codec, ErrorCode, Frame, Goodbye};

    #[test]
    fn the_goodbye_inside_decodes_as_sent() {
        let goodbye = Goodbye {
            code: ErrorCode::ShuttingDown,
            reason: "hub restarting".into(),
        };
        let bytes = Frame::Goodbye(goodbye.clone())
            .encode(Codec::MsgPack)
            .unwrap();
        let counted = count(&bytes, u64::MAX).unwrap();
        assert_eq!(counted[4], TYPE);
        let raw = crate::FrameDecoder::decode_one(counted, 1024).unwrap();
        let (streams, inner) = split(&raw).unwrap();
        assert_eq!(streams, u64::MAX);
        assert_eq!(
            Frame::decode(&inner, Codec::MsgPack).unwrap(),
            Frame::Goodbye(goodbye)
        );
    }

    #[test]
    fn only_a_whole_goodbye_is_counted() {
        let sub = Frame::Subscribe("a".into()).encode(Codec::MsgPack).unwrap();
        assert_eq!(count(&sub, 1), None);
        let bye = Frame::Goodbye(Goodbye {
            code: ErrorCode::Normal,
            reason: "x".into(),
        })
        .encode(Codec::MsgPack)
        .unwrap();
        assert_eq!(count(&bye[..bye.len() - 1], 1), None);
        assert_eq!(count(&bye[..3], 1), None);
        assert_eq!(count(&[], 1), None);
    }

    #[test]
    fn a_short_count_is_malformed() {
        for len in 0..8 {
            let raw = RawFrame::new(TYPE, Bytes::from(vec![0u8; len]));
            assert!(matches!(split(&raw), Err(FrameError::Malformed { .. })));
        }
        // A count alone stands for a goodbye without a code, which Frame::decode refuses.
        let raw = RawFrame::new(TYPE, Bytes::from(vec![0u8; 8]));
        let (streams, inner) = split(&raw).unwrap();
        assert_eq!(streams, 0);
        assert!(Frame::decode(&inner, Codec::MsgPack).is_err());
    }
}
