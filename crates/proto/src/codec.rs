//! The two body codecs, MessagePack (default) and JSON, negotiated at the handshake.
//!
//! This module owns turning values into bytes and back; it must not frame them or know which
//! codec a session uses.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::Envelope;

/// How envelopes are encoded inside frames.
///
/// ```
/// use agentwire_proto::{Codec, Destination, Envelope, Kind};
/// let env = Envelope::new(1, "a", Destination::Broadcast, Kind::Event).with_body(&b"hi"[..]);
/// for codec in [Codec::MsgPack, Codec::Json] {
///     let bytes = codec.encode(&env).unwrap();
///     assert_eq!(codec.decode::<Envelope>(&bytes).unwrap(), env);
/// }
/// assert_eq!(Codec::from_name("json"), Some(Codec::Json));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Codec {
    /// MessagePack: structs as arrays, bodies as raw `bin` bytes. The default.
    #[default]
    MsgPack,
    /// JSON: structs as objects, bodies as standard base64.
    Json,
}

/// A value that could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{codec} codec: {message}")]
pub struct CodecError {
    /// Which codec failed.
    pub codec: Codec,
    /// What went wrong.
    pub message: String,
}

impl Codec {
    /// Every codec, in the hub's default order of preference.
    pub const ALL: [Codec; 2] = [Codec::MsgPack, Codec::Json];

    /// The name used in the handshake: `msgpack` or `json`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::MsgPack => "msgpack",
            Codec::Json => "json",
        }
    }

    /// The codec for a handshake name.
    pub fn from_name(name: &str) -> Option<Codec> {
        Codec::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Appends the encoding of `value` to `out`.
    pub fn encode_into<T: Serialize + ?Sized>(
        self,
        value: &T,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let res = match self {
            Codec::MsgPack => rmp_serde::encode::write(out, value).map_err(|e| e.to_string()),
            Codec::Json => serde_json::to_writer(out, value).map_err(|e| e.to_string()),
        };
        res.map_err(|message| CodecError {
            codec: self,
            message,
        })
    }

    /// Encodes `value` into a new buffer.
    pub fn encode<T: Serialize + ?Sized>(self, value: &T) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::new();
        self.encode_into(value, &mut out)?;
        Ok(out)
    }

    /// Decodes exactly one value from `bytes`; trailing bytes are an error.
    pub fn decode<T: DeserializeOwned>(self, bytes: &[u8]) -> Result<T, CodecError> {
        let res = match self {
            Codec::MsgPack => {
                let mut de = rmp_serde::Deserializer::new(bytes);
                T::deserialize(&mut de)
                    .map_err(|e| e.to_string())
                    .and_then(|v| {
                        let rest = de.into_inner();
                        if rest.is_empty() {
                            Ok(v)
                        } else {
                            Err(format!("{} trailing bytes", rest.len()))
                        }
                    })
            }
            Codec::Json => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
        };
        res.map_err(|message| CodecError {
            codec: self,
            message,
        })
    }

    /// Encodes an envelope (shorthand for [`Codec::encode`]).
    pub fn encode_envelope(self, env: &Envelope) -> Result<Vec<u8>, CodecError> {
        self.encode(env)
    }

    /// Decodes an envelope from a frame's payload. With MessagePack the body is a slice of
    /// `payload` (no copy) when it is the payload's last bytes, as this crate and every
    /// array-layout encoder write it; any other layout takes the copying [`Codec::decode`],
    /// which also reports trailing bytes.
    ///
    /// ```
    /// use agentwire_proto::{Codec, Destination, Envelope, Kind};
    /// let env = Envelope::new(7, "a", Destination::agent("b"), Kind::Task).with_body(vec![1u8; 4096]);
    /// let payload = bytes::Bytes::from(Codec::MsgPack.encode(&env).unwrap());
    /// let back = Codec::MsgPack.decode_envelope(&payload).unwrap();
    /// assert_eq!(back, env);
    /// // The body points into the payload's buffer.
    /// assert_eq!(back.body.as_ptr(), payload[payload.len() - 4096..].as_ptr());
    /// ```
    pub fn decode_envelope(self, payload: &bytes::Bytes) -> Result<Envelope, CodecError> {
        if self != Codec::MsgPack {
            return self.decode(payload);
        }
        if let Some(wire) = crate::wire_read::WireEnvelope::read(payload) {
            let view = wire.view;
            return Ok(Envelope {
                id: view.id,
                from: view.from.to_owned(),
                to: view.to.to_owned(),
                kind: view.kind,
                priority: view.priority,
                ttl_ms: view.ttl_ms,
                timestamp_us: view.timestamp_us,
                correlation: view.correlation,
                headers: wire.header_map(),
                body: payload.slice_ref(view.body),
            });
        }
        // Any other layout through serde, which also reports what is wrong.
        let mut de = rmp_serde::Deserializer::from_read_ref(&payload[..]);
        let Ok(wire) =
            <crate::envelope::BorrowedEnvelope as serde::Deserialize>::deserialize(&mut de)
        else {
            return self.decode(payload);
        };
        let body_end = wire.body.as_ptr() as usize + wire.body.len();
        let payload_end = payload.as_ptr() as usize + payload.len();
        if body_end != payload_end {
            // Map layout, or bytes after the envelope: the checked path decides.
            return self.decode(payload);
        }
        let body = payload.slice_ref(wire.body);
        Ok(wire.with_body(body))
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Destination, Kind};

    fn envelope() -> Envelope {
        Envelope::new(9, "a", Destination::agent("b"), Kind::Task)
            .with_header("k", "v")
            .with_body(vec![5u8; 300])
    }

    #[test]
    fn decode_envelope_checks_what_decode_checks() {
        let env = envelope();
        let payload = bytes::Bytes::from(Codec::MsgPack.encode(&env).unwrap());
        assert_eq!(Codec::MsgPack.decode_envelope(&payload).unwrap(), env);
        // A trailing byte, a truncated body and garbage are errors, as with `decode`.
        let mut trailing = payload.to_vec();
        trailing.push(0);
        let e = Codec::MsgPack
            .decode_envelope(&bytes::Bytes::from(trailing))
            .unwrap_err();
        assert!(e.message.contains("trailing"), "{e}");
        let truncated = payload.slice(..payload.len() - 1);
        assert!(Codec::MsgPack.decode_envelope(&truncated).is_err());
        assert!(Codec::MsgPack
            .decode_envelope(&bytes::Bytes::from_static(b"\xc1garbage"))
            .is_err());
    }

    #[test]
    fn decode_envelope_takes_the_map_layout_too() {
        // Some MessagePack encoders write structs as maps; the body is then not last.
        let env = envelope();
        let named = bytes::Bytes::from(rmp_serde::to_vec_named(&env).unwrap());
        assert_eq!(Codec::MsgPack.decode_envelope(&named).unwrap(), env);
        let json = bytes::Bytes::from(Codec::Json.encode(&env).unwrap());
        assert_eq!(Codec::Json.decode_envelope(&json).unwrap(), env);
    }

    #[test]
    fn names() {
        for c in Codec::ALL {
            assert_eq!(Codec::from_name(c.name()), Some(c));
            assert_eq!(c.to_string(), c.name());
        }
        assert_eq!(Codec::from_name("MsgPack"), None);
        assert_eq!(Codec::default(), Codec::MsgPack);
    }

    #[test]
    fn trailing_bytes_are_errors() {
        let env = Envelope::new(1, "a", Destination::Broadcast, Kind::Event);
        for codec in Codec::ALL {
            let mut bytes = codec.encode_envelope(&env).unwrap();
            bytes.push(b'1');
            let err = codec.decode::<Envelope>(&bytes).unwrap_err();
            assert_eq!(err.codec, codec);
        }
    }

    #[test]
    fn encode_into_appends() {
        let mut out = vec![9];
        Codec::MsgPack.encode_into(&5u8, &mut out).unwrap();
        assert_eq!(out, [9, 5]);
        let mut out = vec![b'x'];
        Codec::Json.encode_into("s", &mut out).unwrap();
        assert_eq!(out, b"x\"s\"");
    }

    #[test]
    fn error_display_names_codec() {
        let err = Codec::Json.decode::<Envelope>(b"{").unwrap_err();
        assert!(err.to_string().starts_with("json codec: "));
    }
}
