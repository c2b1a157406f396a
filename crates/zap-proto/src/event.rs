//! Events (proxy → agent, types 0x10-0x17) as one enum: decoded by type byte and encoding,
//! encoded back, and their correlation id in one place.
//!
//! The correlation id of an event is read from the event itself (`metadata.correlation_id`
//! for request headers, the top-level field for the others): the proxy side keys its answers
//! by the same id, so the two cannot differ (the reference proxy keys by an argument the caller
//! passes separately, and a mismatch hangs the request). This module must not do I/O.

use serde::{Deserialize, Serialize};

use crate::encoding::{CodecError, Encoding};
use crate::fast_read;
use crate::frame::MessageType;
use crate::messages::{
    BinBody, BodyChunkEvent, ConfigureEvent, GuardrailInspectEvent, RequestCompleteEvent,
    RequestHeadersEvent, ResponseHeadersEvent, WebSocketFrameEvent,
};
use crate::text::Text;

/// An event for the agent.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// 0x10.
    RequestHeaders(RequestHeadersEvent),
    /// 0x11.
    RequestBodyChunk(BodyChunkEvent),
    /// 0x12.
    ResponseHeaders(ResponseHeadersEvent),
    /// 0x13.
    ResponseBodyChunk(BodyChunkEvent),
    /// 0x14.
    RequestComplete(RequestCompleteEvent),
    /// 0x15.
    WebSocketFrame(WebSocketFrameEvent),
    /// 0x16.
    GuardrailInspect(GuardrailInspectEvent),
    /// 0x17.
    Configure(ConfigureEvent),
}

/// How body bytes are written in MessagePack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BodyWire {
    /// Base64 text: what the reference agent reads.
    #[default]
    Base64,
    /// `bin`, raw bytes: for agents that announce `binary_body`.
    Binary,
}

impl Event {
    /// The frame type that carries it.
    pub fn kind(&self) -> MessageType {
        match self {
            Event::RequestHeaders(_) => MessageType::RequestHeaders,
            Event::RequestBodyChunk(_) => MessageType::RequestBodyChunk,
            Event::ResponseHeaders(_) => MessageType::ResponseHeaders,
            Event::ResponseBodyChunk(_) => MessageType::ResponseBodyChunk,
            Event::RequestComplete(_) => MessageType::RequestComplete,
            Event::WebSocketFrame(_) => MessageType::WebSocketFrame,
            Event::GuardrailInspect(_) => MessageType::GuardrailInspect,
            Event::Configure(_) => MessageType::Configure,
        }
    }

    /// The request this event belongs to.
    pub fn correlation_id(&self) -> &Text {
        match self {
            Event::RequestHeaders(e) => &e.metadata.correlation_id,
            Event::RequestBodyChunk(e) | Event::ResponseBodyChunk(e) => &e.correlation_id,
            Event::ResponseHeaders(e) => &e.correlation_id,
            Event::RequestComplete(e) => &e.correlation_id,
            Event::WebSocketFrame(e) => &e.correlation_id,
            Event::GuardrailInspect(e) => &e.correlation_id,
            Event::Configure(e) => &e.correlation_id,
        }
    }

    /// Decodes the payload of a frame of type `kind`; `Ok(None)` if `kind` is not an event.
    pub fn decode(
        kind: MessageType,
        encoding: Encoding,
        payload: &[u8],
    ) -> Result<Option<Event>, CodecError> {
        Ok(Some(match kind {
            // The layouts peers write are read directly, anything else through serde.
            MessageType::RequestHeaders => {
                Event::RequestHeaders(encoding.decode_fast(payload, fast_read::request_headers)?)
            }
            MessageType::RequestBodyChunk => {
                Event::RequestBodyChunk(encoding.decode_fast(payload, fast_read::body_chunk)?)
            }
            MessageType::ResponseHeaders => Event::ResponseHeaders(encoding.decode(payload)?),
            MessageType::ResponseBodyChunk => {
                Event::ResponseBodyChunk(encoding.decode_fast(payload, fast_read::body_chunk)?)
            }
            MessageType::RequestComplete => Event::RequestComplete(encoding.decode(payload)?),
            MessageType::WebSocketFrame => Event::WebSocketFrame(encoding.decode(payload)?),
            MessageType::GuardrailInspect => Event::GuardrailInspect(encoding.decode(payload)?),
            MessageType::Configure => Event::Configure(encoding.decode(payload)?),
            _ => return Ok(None),
        }))
    }

    /// Encodes the event's payload. Body bytes go as base64 text except in MessagePack with
    /// [`BodyWire::Binary`].
    ///
    /// ```
    /// use agentwire_zap_proto::{messages::{Body, BodyChunkEvent}, BodyWire, Encoding, Event};
    /// let chunk = Event::RequestBodyChunk(BodyChunkEvent {
    ///     correlation_id: "c1".into(), data: Body(vec![0xff, 0].into()), is_last: true,
    ///     total_size: None, chunk_index: 0, bytes_received: None, bytes_sent: None,
    /// });
    /// let json = chunk.encode(Encoding::Json, BodyWire::Binary).unwrap();
    /// assert_eq!(json, br#"{"correlation_id":"c1","data":"/wA=","is_last":true,"total_size":null,"chunk_index":0}"#);
    /// let bin = chunk.encode(Encoding::MsgPack, BodyWire::Binary).unwrap();
    /// let back = Event::decode(chunk.kind(), Encoding::MsgPack, &bin).unwrap().unwrap();
    /// assert_eq!(back, chunk);
    /// ```
    pub fn encode(&self, encoding: Encoding, body: BodyWire) -> Result<Vec<u8>, CodecError> {
        let mut out = bytes::BytesMut::new();
        self.encode_into(encoding, body, &mut out)?;
        Ok(out.to_vec())
    }

    /// Encodes the event's payload at the end of `out` (see [`encode`](Self::encode)).
    pub fn encode_into(
        &self,
        encoding: Encoding,
        body: BodyWire,
        out: &mut bytes::BytesMut,
    ) -> Result<(), CodecError> {
        match self {
            Event::RequestHeaders(e) => crate::encoding::with_scratch(out, |buf| {
                match encoding {
                    Encoding::Json => crate::fast_write::request_headers_json(e, buf),
                    Encoding::MsgPack => crate::fast_write::request_headers_msgpack(e, buf),
                }
                Ok(())
            }),
            Event::RequestBodyChunk(e) | Event::ResponseBodyChunk(e)
                if encoding == Encoding::MsgPack && body == BodyWire::Binary =>
            {
                encoding.encode_into(
                    &BinChunk {
                        correlation_id: &e.correlation_id,
                        data: BinBody(&e.data.0),
                        is_last: e.is_last,
                        total_size: e.total_size,
                        chunk_index: e.chunk_index,
                        bytes_received: e.bytes_received,
                        bytes_sent: e.bytes_sent,
                    },
                    out,
                )
            }
            Event::RequestBodyChunk(e) | Event::ResponseBodyChunk(e) => {
                encoding.encode_into(e, out)
            }
            Event::ResponseHeaders(e) => encoding.encode_into(e, out),
            Event::RequestComplete(e) => encoding.encode_into(e, out),
            Event::WebSocketFrame(e) => encoding.encode_into(e, out),
            Event::GuardrailInspect(e) => encoding.encode_into(e, out),
            Event::Configure(e) => encoding.encode_into(e, out),
        }
    }
}

#[derive(Serialize)]
struct BinChunk<'a> {
    correlation_id: &'a str,
    data: BinBody<'a>,
    is_last: bool,
    total_size: Option<u64>,
    chunk_index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_received: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_sent: Option<u64>,
}

/// The correlation id of an event payload that did not decode, if it can be found: the
/// top-level `correlation_id`, else `metadata.correlation_id`.
///
/// ```
/// use agentwire_zap_proto::{recover_correlation_id, Encoding};
/// let broken = br#"{"metadata":{"correlation_id":"c7"},"method":42}"#;
/// assert_eq!(recover_correlation_id(Encoding::Json, broken).as_deref(), Some("c7"));
/// assert_eq!(recover_correlation_id(Encoding::Json, b"[1,2]"), None);
/// ```
pub fn recover_correlation_id(encoding: Encoding, payload: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Meta {
        #[serde(default)]
        correlation_id: Option<String>,
    }
    #[derive(Deserialize)]
    struct CidOnly {
        #[serde(default)]
        correlation_id: Option<String>,
        #[serde(default)]
        metadata: Option<Meta>,
    }
    let found: CidOnly = encoding.decode(payload).ok()?;
    found
        .correlation_id
        .filter(|c| !c.is_empty())
        .or_else(|| found.metadata.and_then(|m| m.correlation_id))
        .filter(|c| !c.is_empty())
}
