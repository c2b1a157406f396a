//! The agent's side of one connection, sans-IO: bytes in, events and bytes out.
//!
//! [`AgentSession`] answers the handshake itself (version check, encoding negotiation, the
//! configured capabilities), answers pings (their bytes echoed, as the reference does; a
//! JSON ping on a MessagePack connection is fine), and hands every event and cancel to its
//! owner, who answers with [`AgentSession::respond`] in any order. It fails closed: an event
//! whose payload does not decode but whose correlation id can be found is answered
//! `block 400` here (the reference answers "allow" without its handler); anything that breaks
//! the protocol (bad frame, unknown type, a frame that makes no sense from a proxy) queues one
//! [`HealthStatus`] frame saying what was wrong (state unhealthy) and ends the session.
//!
//! This module owns that per-connection state; it must not do I/O, read a clock or run
//! handlers.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use crate::encoding::{CodecError, Encoding};
use crate::event::{recover_correlation_id, Event};
use crate::frame::{encode_frame, FrameDecoder, FrameError, MessageType, MAX_FRAME_LEN};
use crate::handshake::{
    negotiate, Capabilities, HandshakeRequest, HandshakeResponse, PROTOCOL_VERSION,
};
use crate::messages::{AgentResponse, Cancel, FlowControl, HealthStatus, MetricsReport};
use crate::text::Text;

/// What an agent announces and accepts.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Capabilities sent in the handshake answer.
    pub capabilities: Capabilities,
    /// Encodings this agent speaks; the proxy's first offered one among them is used.
    pub encodings: Vec<Encoding>,
    /// Largest frame accepted (length prefix), at most [`MAX_FRAME_LEN`].
    pub max_frame_len: u32,
}

impl AgentConfig {
    /// `capabilities`, both encodings, the 16 MiB limit.
    pub fn new(capabilities: Capabilities) -> Self {
        AgentConfig {
            capabilities,
            encodings: vec![Encoding::MsgPack, Encoding::Json],
            max_frame_len: MAX_FRAME_LEN,
        }
    }
}

/// What the session hands its owner.
// Each event is moved once, from the session to its owner: boxing the large variant would
// add an allocation per request for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// The handshake was answered: the proxy, and the encoding chosen.
    Connected {
        /// The proxy's request.
        proxy: Box<HandshakeRequest>,
        /// The encoding of every later frame.
        encoding: Encoding,
    },
    /// An event to handle; answer with [`AgentSession::respond`].
    Request {
        /// Its correlation id (from the event itself).
        correlation_id: Text,
        /// The event.
        event: Event,
    },
    /// An event that did not decode was answered `block 400` here.
    Refused {
        /// Its correlation id.
        correlation_id: String,
        /// Its type.
        kind: MessageType,
        /// Why it did not decode.
        error: String,
    },
    /// The proxy gave up on a request: stop its handler, answer nothing.
    Cancel(Cancel),
}

/// Why a session ended on the proxy's bytes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The framing broke.
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    /// The first frame was not a handshake request.
    #[error("expected a handshake request first, got {0:?}")]
    NoHandshake(MessageType),
    /// The handshake request did not decode.
    #[error("handshake request does not decode: {0}")]
    BadHandshake(CodecError),
    /// The proxy speaks no version this agent does.
    #[error("proxy offers protocol versions {0:?}; this agent speaks {PROTOCOL_VERSION}")]
    Version(Vec<u32>),
    /// An event whose correlation id cannot be found did not decode.
    #[error("{kind:?} does not decode and carries no correlation id: {error}")]
    Undecodable {
        /// Its type.
        kind: MessageType,
        /// Why.
        error: String,
    },
    /// A frame only an agent sends, or a second handshake.
    #[error("unexpected {0:?} from the proxy")]
    Unexpected(MessageType),
}

enum State {
    Handshake,
    Open(Encoding),
    Closed,
}

/// One agent-side connection.
///
/// ```
/// use agentwire_zap_proto::{agent::{AgentConfig, AgentEvent, AgentSession}, *};
/// let caps = Capabilities { agent_id: "a".into(), name: "a".into(), version: "1".into(),
///     supported_events: vec![1], features: Features::default(), limits: Limits::default() };
/// let mut agent = AgentSession::new(AgentConfig::new(caps));
/// let mut wire = bytes::BytesMut::new();
/// let hello = HandshakeRequest::new("proxy", "1", &[Encoding::Json]);
/// encode_frame(MessageType::HandshakeRequest, &serde_json::to_vec(&hello).unwrap(), &mut wire).unwrap();
/// agent.receive(&wire).unwrap();
/// assert!(matches!(agent.poll_event(), Some(AgentEvent::Connected { encoding: Encoding::Json, .. })));
/// let answer = agent.poll_transmit().unwrap();
/// assert_eq!(answer[4], MessageType::HandshakeResponse as u8);
/// ```
pub struct AgentSession {
    config: AgentConfig,
    state: State,
    decoder: FrameDecoder,
    out: BytesMut,
    events: VecDeque<AgentEvent>,
}

impl AgentSession {
    /// A session waiting for the proxy's handshake.
    pub fn new(config: AgentConfig) -> Self {
        let decoder = FrameDecoder::new(config.max_frame_len);
        AgentSession {
            config,
            state: State::Handshake,
            decoder,
            out: BytesMut::new(),
            events: VecDeque::new(),
        }
    }

    /// The negotiated encoding, once connected.
    pub fn encoding(&self) -> Option<Encoding> {
        match self.state {
            State::Open(e) => Some(e),
            _ => None,
        }
    }

    /// Whether the session has ended (after a protocol error or a refused handshake).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Takes bytes from the proxy. On a protocol error the session queues its error frame
    /// (take it with [`poll_transmit`](Self::poll_transmit), then close the connection) and
    /// ends.
    pub fn receive(&mut self, bytes: &[u8]) -> Result<(), ProtocolError> {
        if self.is_closed() {
            return Ok(());
        }
        self.decoder.push(bytes);
        loop {
            let frame = match self.decoder.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.fail(e.into())),
            };
            if let Err(e) = self.on_frame(frame.kind, &frame.payload) {
                return Err(self.fail(e));
            }
            if self.is_closed() {
                return Ok(());
            }
        }
    }

    /// The proxy closed its side: an error if it stopped inside a frame.
    pub fn finish(&mut self) -> Result<(), ProtocolError> {
        self.decoder.finish().map_err(ProtocolError::from)
    }

    fn on_frame(&mut self, kind: MessageType, payload: &[u8]) -> Result<(), ProtocolError> {
        let encoding = match self.state {
            State::Handshake => return self.on_handshake(kind, payload),
            State::Open(e) => e,
            State::Closed => return Ok(()),
        };
        match kind {
            MessageType::Ping => self.queue(MessageType::Pong, payload),
            MessageType::Pong => {}
            MessageType::Cancel => {
                // A cancel that does not decode cancels nothing; the request's answer still
                // comes.
                if let Ok(cancel) = encoding.decode_or_json::<Cancel>(payload) {
                    self.events.push_back(AgentEvent::Cancel(cancel));
                }
            }
            _ => match Event::decode(kind, encoding, payload) {
                Ok(Some(event)) => self.events.push_back(AgentEvent::Request {
                    correlation_id: event.correlation_id().clone(),
                    event,
                }),
                Ok(None) => return Err(ProtocolError::Unexpected(kind)),
                Err(e) => match recover_correlation_id(encoding, payload) {
                    Some(cid) => {
                        let mut refusal = AgentResponse::block(
                            400,
                            Some(format!("agent could not decode the {kind:?} event: {e}")),
                        );
                        refusal.audit.reason_codes.push("undecodable_event".into());
                        // Encoding a response of our own cannot fail.
                        let _ = self.respond(&cid, refusal);
                        self.events.push_back(AgentEvent::Refused {
                            correlation_id: cid,
                            kind,
                            error: e.to_string(),
                        });
                    }
                    None => {
                        return Err(ProtocolError::Undecodable {
                            kind,
                            error: e.to_string(),
                        })
                    }
                },
            },
        }
        Ok(())
    }

    fn on_handshake(&mut self, kind: MessageType, payload: &[u8]) -> Result<(), ProtocolError> {
        if kind != MessageType::HandshakeRequest {
            return Err(ProtocolError::NoHandshake(kind));
        }
        let request: HandshakeRequest = Encoding::Json
            .decode(payload)
            .map_err(ProtocolError::BadHandshake)?;
        let encoding = negotiate(&request.supported_encodings, &self.config.encodings);
        let version_ok = request.supported_versions.contains(&PROTOCOL_VERSION);
        let response = HandshakeResponse {
            protocol_version: PROTOCOL_VERSION,
            capabilities: self.config.capabilities.clone(),
            success: version_ok,
            error: (!version_ok).then(|| {
                format!(
                    "proxy offers protocol versions {:?}; this agent speaks {PROTOCOL_VERSION}",
                    request.supported_versions
                )
            }),
            encoding,
        };
        let bytes = Encoding::Json
            .encode(&response)
            .map_err(ProtocolError::BadHandshake)?;
        self.queue(MessageType::HandshakeResponse, &bytes);
        if !version_ok {
            self.state = State::Closed;
            return Err(ProtocolError::Version(request.supported_versions));
        }
        self.state = State::Open(encoding);
        self.events.push_back(AgentEvent::Connected {
            proxy: Box::new(request),
            encoding,
        });
        Ok(())
    }

    /// Queues the error frame for `error` and ends the session.
    fn fail(&mut self, error: ProtocolError) -> ProtocolError {
        if !matches!(self.state, State::Closed) {
            let status = HealthStatus {
                agent_id: self.config.capabilities.agent_id.as_str().into(),
                state: crate::messages::HealthState::Unhealthy as i64,
                message: Some(format!("protocol error, closing the connection: {error}").into()),
                in_flight: 0,
                timestamp_ms: 0,
            };
            // Before the handshake the proxy has agreed on nothing: JSON.
            let encoding = self.encoding().unwrap_or(Encoding::Json);
            if let Ok(bytes) = encoding.encode(&status) {
                self.queue(MessageType::HealthStatus, &bytes);
            }
        }
        self.state = State::Closed;
        error
    }

    fn queue(&mut self, kind: MessageType, payload: &[u8]) {
        // Payloads this session builds are far below the limit; a handler's oversized
        // answer is refused in `respond` before it gets here.
        let _ = encode_frame(kind, payload, &mut self.out);
    }

    /// The next event for the owner.
    pub fn poll_event(&mut self) -> Option<AgentEvent> {
        self.events.pop_front()
    }

    /// Answers the event with `correlation_id` (the id is written into the answer's audit,
    /// where the proxy looks for it).
    pub fn respond(
        &mut self,
        correlation_id: &str,
        response: AgentResponse,
    ) -> Result<(), SendError> {
        let State::Open(encoding) = self.state else {
            return Err(SendError::NotOpen);
        };
        let wire = crate::messages::ResponseWire::new(&response, correlation_id);
        self.send(MessageType::AgentResponse, encoding, &wire)
    }

    /// Reports health.
    pub fn health(&mut self, status: &HealthStatus) -> Result<(), SendError> {
        let encoding = self.encoding().ok_or(SendError::NotOpen)?;
        self.send(MessageType::HealthStatus, encoding, status)
    }

    /// Pauses or resumes the proxy.
    pub fn flow(&mut self, flow: &FlowControl) -> Result<(), SendError> {
        let encoding = self.encoding().ok_or(SendError::NotOpen)?;
        self.send(MessageType::FlowControl, encoding, flow)
    }

    /// Reports metrics.
    pub fn metrics(&mut self, report: &MetricsReport) -> Result<(), SendError> {
        let encoding = self.encoding().ok_or(SendError::NotOpen)?;
        crate::frame::encode_frame_with(MessageType::MetricsReport, &mut self.out, |out| {
            report.encode_into(encoding, out).map_err(SendError::Encode)
        })
    }

    fn send<T: serde::Serialize>(
        &mut self,
        kind: MessageType,
        encoding: Encoding,
        value: &T,
    ) -> Result<(), SendError> {
        crate::frame::encode_frame_with(kind, &mut self.out, |out| {
            encoding.encode_into(value, out).map_err(SendError::Encode)
        })
    }

    /// Everything queued for the proxy, if anything.
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        (!self.out.is_empty()).then(|| self.out.split().freeze())
    }
}

impl From<FrameError> for SendError {
    fn from(e: FrameError) -> Self {
        SendError::TooLarge(e)
    }
}

/// A frame the session could not send.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// Before the handshake, or after the session ended.
    #[error("the session is not open")]
    NotOpen,
    /// The payload did not encode.
    #[error("encoding failed: {0}")]
    Encode(CodecError),
    /// The payload is over the frame limit.
    #[error("{0}")]
    TooLarge(FrameError),
}
