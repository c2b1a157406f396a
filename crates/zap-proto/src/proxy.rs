//! The proxy's side of one connection, sans-IO: events out, answers in, on explicit time.
//!
//! [`ProxySession`] sends the handshake, keys every event in flight by the correlation id the
//! event itself carries (one id, so the agent's answer always finds its request), expires
//! requests at their deadline (and tells the agent with a Cancel), and treats what breaks the
//! protocol as the end of the connection: a bad frame, an answer for an id it never sent, an
//! agent that refuses the handshake. [`ProxySession::close`] hands back every request still
//! in flight, so that a connection that dies fails its requests at once instead of at their
//! timeouts. A paused agent (flow control) is reported; what to do then is the pool's choice.
//!
//! This module owns that state; it must not do I/O or read a clock.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::agent::SendError;
use crate::encoding::{CodecError, Encoding};
use crate::event::{BodyWire, Event};
use crate::frame::{encode_frame, FrameDecoder, FrameError, MessageType, MAX_FRAME_LEN};
use crate::handshake::{Capabilities, HandshakeRequest, HandshakeResponse, PROTOCOL_VERSION};
use crate::messages::{
    AgentResponse, Cancel, FlowAction, FlowControl, HealthStatus, MetricsReport, Ping,
};
use crate::text::Text;

/// How a proxy connection behaves.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Who the proxy is (sent in the handshake).
    pub proxy_id: String,
    /// Encodings offered, most preferred first.
    pub encodings: Vec<Encoding>,
    /// Largest frame accepted from the agent.
    pub max_frame_len: u32,
    /// How long the agent has to answer the handshake.
    pub handshake_timeout: Duration,
    /// How long the agent has to answer an event.
    pub request_timeout: Duration,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            proxy_id: "agentwire".into(),
            encodings: vec![Encoding::MsgPack, Encoding::Json],
            max_frame_len: MAX_FRAME_LEN,
            handshake_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// What the session hands its owner.
// Each event is moved once, from the session to its owner: boxing the large variant would
// add an allocation per request for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum ProxyEvent {
    /// The agent accepted the handshake.
    Ready {
        /// What it does.
        capabilities: Box<Capabilities>,
        /// The encoding of every later frame.
        encoding: Encoding,
    },
    /// The answer to an event.
    Answer {
        /// The event's correlation id.
        correlation_id: String,
        /// The answer.
        response: AgentResponse,
    },
    /// An event passed its deadline unanswered; a Cancel was sent.
    TimedOut {
        /// The event's correlation id.
        correlation_id: String,
    },
    /// The agent's health report.
    Health(HealthStatus),
    /// The agent paused (`true`) or resumed (`false`) this connection.
    Paused(bool),
    /// The agent's metrics.
    Metrics(Box<MetricsReport>),
    /// A ping came back.
    Pong {
        /// Its sequence number.
        sequence: u64,
    },
}

/// Why the connection must end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The framing broke.
    #[error("bad frame from the agent: {0}")]
    Frame(#[from] FrameError),
    /// The handshake answer was missing, malformed or a refusal.
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// The agent did not answer the handshake in time.
    #[error("the agent did not answer the handshake within {0:?}")]
    HandshakeTimeout(Duration),
    /// An answer that did not decode.
    #[error("{kind:?} from the agent does not decode: {error}")]
    Undecodable {
        /// Its type.
        kind: MessageType,
        /// Why.
        error: CodecError,
    },
    /// An answer for a correlation id this connection has not sent (or already settled
    /// long ago).
    #[error("answer for unknown correlation id {0:?}")]
    UnknownAnswer(String),
    /// A frame only a proxy sends.
    #[error("unexpected {0:?} from the agent")]
    Unexpected(MessageType),
}

/// Why an event was not sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxySendError {
    /// The handshake has not completed, or the session ended.
    #[error("the connection is not ready")]
    NotReady,
    /// An event with this correlation id is already waiting for its answer.
    #[error("correlation id {0:?} already has an event in flight")]
    Busy(String),
    /// The event could not be framed.
    #[error(transparent)]
    Send(#[from] SendError),
}

enum State {
    Handshake { deadline: Instant },
    Open(Encoding),
    Closed,
}

/// Correlation ids recently settled by a timeout or cancel: their late answers are dropped,
/// not taken as protocol errors. Bounded.
const SETTLED_MEMORY: usize = 4096;

/// One proxy-side connection.
///
/// ```
/// use std::time::{Duration, Instant};
/// use agentwire_zap_proto::proxy::{ProxyConfig, ProxySession};
/// let now = Instant::now();
/// let mut proxy = ProxySession::new(ProxyConfig::default(), now);
/// let hello = proxy.poll_transmit().unwrap();
/// assert_eq!(hello[4], 0x01); // the handshake request goes first
/// assert_eq!(proxy.poll_timeout(), Some(now + Duration::from_secs(5)));
/// ```
pub struct ProxySession {
    config: ProxyConfig,
    state: State,
    decoder: FrameDecoder,
    out: BytesMut,
    events: VecDeque<ProxyEvent>,
    /// Events in flight: correlation id → the send's number.
    pending: HashMap<Text, u64>,
    /// Deadlines in send order (one timeout for all, so also in deadline order), with the
    /// send's number; entries whose event was answered are skipped and dropped as they reach
    /// the front.
    deadlines: VecDeque<(Instant, u64, Text)>,
    next_seq: u64,
    settled: VecDeque<String>,
    body_wire: BodyWire,
    paused: bool,
    ping_sequence: u64,
}

impl ProxySession {
    /// A session whose handshake request is queued.
    pub fn new(config: ProxyConfig, now: Instant) -> Self {
        let mut out = BytesMut::new();
        let request = HandshakeRequest::new(
            &config.proxy_id,
            env!("CARGO_PKG_VERSION"),
            &config.encodings,
        );
        if let Ok(bytes) = Encoding::Json.encode(&request) {
            let _ = encode_frame(MessageType::HandshakeRequest, &bytes, &mut out);
        }
        ProxySession {
            decoder: FrameDecoder::new(config.max_frame_len),
            state: State::Handshake {
                deadline: now + config.handshake_timeout,
            },
            config,
            out,
            events: VecDeque::new(),
            pending: HashMap::new(),
            deadlines: VecDeque::new(),
            next_seq: 0,
            settled: VecDeque::new(),
            body_wire: BodyWire::Base64,
            paused: false,
            ping_sequence: 0,
        }
    }

    /// Whether the handshake completed and the session has not ended.
    pub fn is_ready(&self) -> bool {
        matches!(self.state, State::Open(_))
    }

    /// Whether the session has ended.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Whether the agent has paused this connection.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Events waiting for their answer.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Sends `event`, keyed by its own correlation id, due by `now` + the request timeout.
    pub fn send(&mut self, event: &Event, now: Instant) -> Result<(), ProxySendError> {
        let State::Open(encoding) = self.state else {
            return Err(ProxySendError::NotReady);
        };
        let cid = event.correlation_id();
        if self.pending.contains_key(cid.as_str()) {
            return Err(ProxySendError::Busy(cid.to_string()));
        }
        let body = self.body_wire;
        crate::frame::encode_frame_with(event.kind(), &mut self.out, |out| {
            event
                .encode_into(encoding, body, out)
                .map_err(SendError::Encode)
        })?;
        let deadline = now + self.config.request_timeout;
        self.next_seq += 1;
        let cid = cid.clone();
        self.pending.insert(cid.clone(), self.next_seq);
        self.deadlines.push_back((deadline, self.next_seq, cid));
        Ok(())
    }

    /// Gives up on `correlation_id`: a Cancel goes to the agent, a late answer is dropped.
    /// Returns whether it was in flight.
    pub fn cancel(&mut self, correlation_id: &str, reason: i32, unix_ms: u64) -> bool {
        if self.pending.remove(correlation_id).is_none() {
            return false;
        }
        self.drop_settled_deadlines();
        self.send_cancel(correlation_id, reason, unix_ms);
        self.remember_settled(correlation_id.to_string());
        true
    }

    fn send_cancel(&mut self, correlation_id: &str, reason: i32, unix_ms: u64) {
        let State::Open(encoding) = self.state else {
            return;
        };
        let cancel = Cancel {
            correlation_id: correlation_id.into(),
            reason,
            timestamp_ms: unix_ms,
        };
        if let Ok(bytes) = encoding.encode(&cancel) {
            let _ = encode_frame(MessageType::Cancel, &bytes, &mut self.out);
        }
    }

    fn remember_settled(&mut self, cid: String) {
        if self.settled.len() == SETTLED_MEMORY {
            self.settled.pop_front();
        }
        self.settled.push_back(cid);
    }

    /// Sends a ping (its pong comes back as [`ProxyEvent::Pong`]).
    pub fn ping(&mut self, unix_ms: u64) -> Result<u64, ProxySendError> {
        let State::Open(encoding) = self.state else {
            return Err(ProxySendError::NotReady);
        };
        self.ping_sequence += 1;
        let ping = Ping {
            sequence: self.ping_sequence,
            timestamp_ms: unix_ms,
        };
        let bytes = encoding
            .encode(&ping)
            .map_err(|e| ProxySendError::Send(SendError::Encode(e)))?;
        encode_frame(MessageType::Ping, &bytes, &mut self.out)
            .map_err(|e| ProxySendError::Send(SendError::TooLarge(e)))?;
        Ok(self.ping_sequence)
    }

    /// When [`on_timeout`](Self::on_timeout) next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.state {
            State::Handshake { deadline } => Some(*deadline),
            State::Open(_) => self.deadlines.front().map(|(d, _, _)| *d),
            State::Closed => None,
        }
    }

    /// Expires what is due at `now`: events become [`ProxyEvent::TimedOut`] (a Cancel with
    /// reason 1, timeout, goes to the agent); an unanswered handshake ends the session.
    pub fn on_timeout(&mut self, now: Instant, unix_ms: u64) -> Result<(), ProxyError> {
        if let State::Handshake { deadline } = self.state {
            if now >= deadline {
                self.state = State::Closed;
                return Err(ProxyError::HandshakeTimeout(self.config.handshake_timeout));
            }
            return Ok(());
        }
        while let Some((deadline, _, _)) = self.deadlines.front() {
            if *deadline > now {
                break;
            }
            let Some((_, seq, cid)) = self.deadlines.pop_front() else {
                break;
            };
            if self.pending.get(cid.as_str()) != Some(&seq) {
                continue; // answered or cancelled
            }
            self.pending.remove(cid.as_str());
            self.send_cancel(&cid, 1, unix_ms);
            self.remember_settled(cid.to_string());
            self.events.push_back(ProxyEvent::TimedOut {
                correlation_id: cid.to_string(),
            });
        }
        self.drop_settled_deadlines();
        Ok(())
    }

    /// Drops deadlines at the front whose event is settled, so the queue holds about what is
    /// in flight.
    fn drop_settled_deadlines(&mut self) {
        while let Some((_, seq, cid)) = self.deadlines.front() {
            if self.pending.get(cid.as_str()) == Some(seq) {
                return;
            }
            self.deadlines.pop_front();
        }
    }

    /// Takes bytes from the agent. An error ends the session: close the connection and fail
    /// what [`close`](Self::close) returns.
    pub fn receive(&mut self, bytes: &[u8]) -> Result<(), ProxyError> {
        if self.is_closed() {
            return Ok(());
        }
        self.decoder.push(bytes);
        loop {
            let frame = match self.decoder.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => {
                    self.state = State::Closed;
                    return Err(e.into());
                }
            };
            if let Err(e) = self.on_frame(frame.kind, &frame.payload) {
                self.state = State::Closed;
                return Err(e);
            }
        }
    }

    fn on_frame(&mut self, kind: MessageType, payload: &[u8]) -> Result<(), ProxyError> {
        let encoding = match self.state {
            State::Handshake { .. } => return self.on_handshake(kind, payload),
            State::Open(e) => e,
            State::Closed => return Ok(()),
        };
        let undecodable = |error| ProxyError::Undecodable { kind, error };
        match kind {
            MessageType::AgentResponse => {
                let response = AgentResponse::decode(encoding, payload).map_err(undecodable)?;
                let cid = response.correlation_id().unwrap_or_default().to_string();
                if self.pending.remove(cid.as_str()).is_some() {
                    self.drop_settled_deadlines();
                    self.events.push_back(ProxyEvent::Answer {
                        correlation_id: cid,
                        response,
                    });
                } else if !self.settled.contains(&cid) {
                    return Err(ProxyError::UnknownAnswer(cid));
                }
            }
            MessageType::HealthStatus => {
                let status: HealthStatus = encoding.decode_or_json(payload).map_err(undecodable)?;
                self.events.push_back(ProxyEvent::Health(status));
            }
            MessageType::FlowControl => {
                let flow: FlowControl = encoding.decode(payload).map_err(undecodable)?;
                let paused = flow.action == FlowAction::Pause as i64;
                if paused != self.paused {
                    self.paused = paused;
                    self.events.push_back(ProxyEvent::Paused(paused));
                }
            }
            MessageType::MetricsReport => {
                let report = MetricsReport::decode(encoding, payload).map_err(undecodable)?;
                self.events.push_back(ProxyEvent::Metrics(Box::new(report)));
            }
            MessageType::Pong => {
                // The agent echoes the ping's bytes; a pong that is not our ping is ignored.
                if let Ok(ping) = encoding.decode_or_json::<Ping>(payload) {
                    self.events.push_back(ProxyEvent::Pong {
                        sequence: ping.sequence,
                    });
                }
            }
            // The agent asks for a configuration change: nothing on this side acts on it yet.
            MessageType::ConfigUpdateRequest => {}
            other => return Err(ProxyError::Unexpected(other)),
        }
        Ok(())
    }

    fn on_handshake(&mut self, kind: MessageType, payload: &[u8]) -> Result<(), ProxyError> {
        if kind != MessageType::HandshakeResponse {
            // An agent that breaks the protocol before the handshake may still say why.
            if kind == MessageType::HealthStatus {
                if let Ok(status) = Encoding::Json.decode::<HealthStatus>(payload) {
                    return Err(ProxyError::Handshake(
                        status.message.map(String::from).unwrap_or_default(),
                    ));
                }
            }
            return Err(ProxyError::Handshake(format!(
                "expected a handshake response, got {kind:?}"
            )));
        }
        let response: HandshakeResponse = Encoding::Json
            .decode(payload)
            .map_err(|e| ProxyError::Handshake(format!("response does not decode: {e}")))?;
        if !response.success {
            return Err(ProxyError::Handshake(
                response
                    .error
                    .unwrap_or_else(|| "refused without a reason".into()),
            ));
        }
        if response.protocol_version != PROTOCOL_VERSION {
            return Err(ProxyError::Handshake(format!(
                "agent speaks protocol version {}, this proxy {PROTOCOL_VERSION}",
                response.protocol_version
            )));
        }
        if !self.config.encodings.contains(&response.encoding)
            && response.encoding != Encoding::Json
        {
            return Err(ProxyError::Handshake(format!(
                "agent chose {}, which was not offered",
                response.encoding.name()
            )));
        }
        if response.capabilities.features.binary_body {
            self.body_wire = BodyWire::Binary;
        }
        self.state = State::Open(response.encoding);
        self.events.push_back(ProxyEvent::Ready {
            capabilities: Box::new(response.capabilities),
            encoding: response.encoding,
        });
        Ok(())
    }

    /// The next event for the owner.
    pub fn poll_event(&mut self) -> Option<ProxyEvent> {
        self.events.pop_front()
    }

    /// Everything queued for the agent, if anything.
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        (!self.out.is_empty()).then(|| self.out.split().freeze())
    }

    /// Ends the session; returns the correlation ids still in flight, which will get no
    /// answer on this connection.
    pub fn close(&mut self) -> Vec<String> {
        self.state = State::Closed;
        self.deadlines.clear();
        self.pending
            .drain()
            .map(|(cid, _)| cid.to_string())
            .collect()
    }
}
