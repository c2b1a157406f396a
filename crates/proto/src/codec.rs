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
