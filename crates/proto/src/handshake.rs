//! The handshake: hello → welcome or reject.
//!
//! The agent offers a version range, its id and role, capabilities, the codecs it can speak
//! (in its order of preference), an optional auth token and its own frame-size limit. The hub
//! picks a version and a codec, agrees the smaller frame limit, assigns a session id and tells
//! the agent how often to beat; or it refuses with a code and a reason.
//!
//! Handshake frames are always MessagePack, whatever codec is then agreed.
//!
//! This module owns the messages and the decisions; it must not do I/O or read clocks. Checks
//! that need hub state (is this id already connected?) are the hub's, which can still answer
//! with [`Reject`] after [`HubHandshake::on_frame`] accepted.
//!
//! ```
//! use agentwire_proto::*;
//!
//! let mut agent = AgentHandshake::new(Hello::new("worker-1", "worker"));
//! let hello = agent.hello_frame().unwrap();
//!
//! let hub = HubHandshake::new(HubPolicy::default());
//! let raw = FrameDecoder::decode_one(hello, 1 << 20).unwrap();
//! let (reply, hub_session) = match hub.on_frame(&raw, 42) {
//!     HubDecision::Accept { reply, session } => (reply, session),
//!     HubDecision::Reject { reply, .. } => panic!("rejected: {reply:?}"),
//! };
//! let raw = FrameDecoder::decode_one(reply, 1 << 20).unwrap();
//! let agent_session = agent.on_frame(&raw).unwrap();
//! assert_eq!(agent_session, hub_session);
//! assert_eq!(agent_session.codec, Codec::MsgPack);
//! assert_eq!(agent_session.session_id, 42);
//! ```

use bytes::Bytes;

use crate::codec::Codec;
use crate::frame::{Frame, FrameType, RawFrame};
pub use crate::hello::{Hello, Reject, Welcome, PROTOCOL_VERSION};
use crate::{ErrorCode, Limits};

impl Reject {
    /// Encodes the reject as a frame.
    pub fn to_frame(&self) -> Bytes {
        encode_handshake_frame(Frame::Reject(self.clone()))
    }
}

/// What both sides agreed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The agent's id.
    pub agent_id: String,
    /// The agent's role.
    pub role: String,
    /// Protocol version in use.
    pub version: u16,
    /// Codec for envelopes.
    pub codec: Codec,
    /// Hub-assigned id.
    pub session_id: u64,
    /// Frame limit in force both ways.
    pub max_frame_size: u32,
    /// Heartbeat interval the agent follows.
    pub heartbeat_interval_ms: u32,
    /// Capabilities both support.
    pub capabilities: Vec<String>,
}

impl Session {
    /// True when both sides support `capability`.
    pub fn has_capability(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

/// Why the agent's side of the handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The hub refused.
    #[error("hub rejected the handshake: {code}: {reason}")]
    Rejected {
        /// The hub's code.
        code: ErrorCode,
        /// The hub's reason.
        reason: String,
    },
    /// The hub answered with something other than welcome or reject.
    #[error("expected welcome or reject, got frame type 0x{0:02x}")]
    UnexpectedFrame(u8),
    /// The answer did not decode.
    #[error("malformed handshake answer: {0}")]
    Malformed(String),
    /// The hub chose something the agent did not offer.
    #[error("hub chose {0}, which the agent did not offer")]
    NotOffered(String),
    /// `on_frame` was called after the handshake had finished.
    #[error("handshake already finished")]
    Finished,
}

/// The agent's side: send [`hello_frame`](AgentHandshake::hello_frame), feed the answer to
/// [`on_frame`](AgentHandshake::on_frame).
#[derive(Debug)]
pub struct AgentHandshake {
    hello: Hello,
    finished: bool,
}

impl AgentHandshake {
    /// Starts a handshake that will offer `hello`.
    pub fn new(hello: Hello) -> Self {
        AgentHandshake {
            hello,
            finished: false,
        }
    }

    /// The hello being offered.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// The encoded hello frame to send.
    pub fn hello_frame(&self) -> Result<Bytes, crate::CodecError> {
        Frame::Hello(self.hello.clone()).encode(Codec::MsgPack)
    }

    /// Handles the hub's answer.
    pub fn on_frame(&mut self, raw: &RawFrame) -> Result<Session, HandshakeError> {
        if self.finished {
            return Err(HandshakeError::Finished);
        }
        self.finished = true;
        match Frame::decode(raw, Codec::MsgPack) {
            Ok(Frame::Welcome(w)) => self.accept(w),
            Ok(Frame::Reject(r)) => Err(HandshakeError::Rejected {
                code: ErrorCode::from_code(r.code).unwrap_or(ErrorCode::ProtocolViolation),
                reason: r.reason,
            }),
            Ok(other) => Err(HandshakeError::UnexpectedFrame(other.frame_type() as u8)),
            Err(e) => Err(HandshakeError::Malformed(e.to_string())),
        }
    }

    fn accept(&self, w: Welcome) -> Result<Session, HandshakeError> {
        if w.version < self.hello.version_min || w.version > self.hello.version_max {
            return Err(HandshakeError::NotOffered(format!("version {}", w.version)));
        }
        let codec = Codec::from_name(&w.codec)
            .filter(|_| self.hello.codecs.contains(&w.codec))
            .ok_or_else(|| HandshakeError::NotOffered(format!("codec {:?}", w.codec)))?;
        if w.max_frame_size > self.hello.max_frame_size || w.max_frame_size == 0 {
            return Err(HandshakeError::NotOffered(format!(
                "max frame size {}",
                w.max_frame_size
            )));
        }
        if let Some(extra) = w
            .capabilities
            .iter()
            .find(|c| !self.hello.capabilities.contains(c))
        {
            return Err(HandshakeError::NotOffered(format!("capability {extra:?}")));
        }
        Ok(Session {
            agent_id: self.hello.agent_id.clone(),
            role: self.hello.role.clone(),
            version: w.version,
            codec,
            session_id: w.session_id,
            max_frame_size: w.max_frame_size,
            heartbeat_interval_ms: w.heartbeat_interval_ms,
            capabilities: w.capabilities,
        })
    }
}

/// What the hub requires and offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubPolicy {
    /// Lowest version accepted.
    pub version_min: u16,
    /// Highest version accepted.
    pub version_max: u16,
    /// Codecs accepted, in the hub's order of preference (the hub picks its most preferred
    /// codec among those the agent offered).
    pub codecs: Vec<Codec>,
    /// Token agents must present, if any.
    pub auth_token: Option<String>,
    /// Limits the hub enforces.
    pub limits: Limits,
    /// Heartbeat interval told to agents.
    pub heartbeat_interval_ms: u32,
    /// Capabilities the hub supports.
    pub capabilities: Vec<String>,
}

impl Default for HubPolicy {
    fn default() -> Self {
        HubPolicy {
            version_min: PROTOCOL_VERSION,
            version_max: PROTOCOL_VERSION,
            codecs: Codec::ALL.to_vec(),
            auth_token: None,
            limits: Limits::default(),
            heartbeat_interval_ms: 5_000,
            capabilities: Vec::new(),
        }
    }
}

/// The hub's answer to a hello: the encoded frame to send back, and either the session or the
/// reason for refusing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubDecision {
    /// Send `reply` (a welcome) and register the session.
    Accept {
        /// Encoded welcome frame.
        reply: Bytes,
        /// What was agreed.
        session: Session,
    },
    /// Send `reply` (a reject) and close with `code`.
    Reject {
        /// Encoded reject frame.
        reply: Bytes,
        /// Why.
        code: ErrorCode,
    },
}

/// The hub's side of the handshake: one decision per hello.
#[derive(Debug, Clone)]
pub struct HubHandshake {
    policy: HubPolicy,
}

impl HubHandshake {
    /// A handshake that applies `policy`.
    pub fn new(policy: HubPolicy) -> Self {
        HubHandshake { policy }
    }

    /// The policy in force.
    pub fn policy(&self) -> &HubPolicy {
        &self.policy
    }

    /// Decides on the first frame an agent sent.
    pub fn on_frame(&self, raw: &RawFrame, session_id: u64) -> HubDecision {
        match self.decide(raw, session_id) {
            Ok(welcome_and_session) => {
                let (welcome, session) = welcome_and_session;
                HubDecision::Accept {
                    reply: encode_handshake_frame(Frame::Welcome(welcome)),
                    session,
                }
            }
            Err(reject) => {
                let code = ErrorCode::from_code(reject.code).unwrap_or(ErrorCode::Internal);
                HubDecision::Reject {
                    reply: reject.to_frame(),
                    code,
                }
            }
        }
    }

    fn decide(&self, raw: &RawFrame, session_id: u64) -> Result<(Welcome, Session), Reject> {
        let p = &self.policy;
        // The transports refuse a longer frame at its length prefix; this holds the rule for
        // any reader that let one through whole.
        let len = raw.payload.len().saturating_add(1);
        if len > MAX_HELLO_FRAME as usize {
            return Err(Reject::new(
                ErrorCode::FrameTooLarge,
                format!("a {len}-byte frame before the hello is done (at most {MAX_HELLO_FRAME})"),
            ));
        }
        if raw.type_byte != FrameType::Hello as u8 {
            return Err(Reject::new(
                ErrorCode::ProtocolViolation,
                format!("expected hello, got frame type 0x{:02x}", raw.type_byte),
            ));
        }
        let hello = match Frame::decode(raw, Codec::MsgPack) {
            Ok(Frame::Hello(h)) => h,
            Ok(_) => return Err(Reject::new(ErrorCode::ProtocolViolation, "expected hello")),
            Err(e) => return Err(Reject::new(ErrorCode::MalformedFrame, e.to_string())),
        };
        let version = hello.version_max.min(p.version_max);
        if version < hello.version_min.max(p.version_min) {
            return Err(Reject::new(
                ErrorCode::UnsupportedVersion,
                format!(
                    "agent speaks {}..={}, hub speaks {}..={}",
                    hello.version_min, hello.version_max, p.version_min, p.version_max
                ),
            ));
        }
        if let Err(e) = p.limits.check_name(&hello.agent_id) {
            return Err(Reject::new(ErrorCode::InvalidAgentId, e.to_string()));
        }
        if let Some(expected) = &p.auth_token {
            let given = hello.auth_token.as_deref().unwrap_or("");
            if !constant_time_eq(expected.as_bytes(), given.as_bytes()) {
                return Err(Reject::new(
                    ErrorCode::Unauthorized,
                    "missing or wrong auth token",
                ));
            }
        }
        let codec = p
            .codecs
            .iter()
            .copied()
            .find(|c| hello.codecs.iter().any(|o| o == c.name()))
            .ok_or_else(|| {
                Reject::new(
                    ErrorCode::NoCommonCodec,
                    format!(
                        "agent offered {:?}, hub accepts {:?}",
                        hello.codecs, p.codecs
                    ),
                )
            })?;
        if hello.max_frame_size < 64 {
            return Err(Reject::new(
                ErrorCode::LimitExceeded,
                format!("max frame size {} is below 64 bytes", hello.max_frame_size),
            ));
        }
        let max_frame_size = hello.max_frame_size.min(p.limits.max_frame_size);
        let mut capabilities: Vec<String> = Vec::new();
        for c in &hello.capabilities {
            if p.capabilities.contains(c) && !capabilities.contains(c) {
                capabilities.push(c.clone());
            }
        }
        let welcome = Welcome {
            version,
            codec: codec.name().to_owned(),
            session_id,
            max_frame_size,
            heartbeat_interval_ms: p.heartbeat_interval_ms,
            capabilities: capabilities.clone(),
        };
        let session = Session {
            agent_id: hello.agent_id,
            role: hello.role,
            version,
            codec,
            session_id,
            max_frame_size,
            heartbeat_interval_ms: p.heartbeat_interval_ms,
            capabilities,
        };
        Ok((welcome, session))
    }
}

fn encode_handshake_frame(frame: Frame) -> Bytes {
    // Handshake structs hold only strings, integers and string lists: MessagePack encoding of
    // them into a Vec cannot fail, but stay total rather than panic.
    frame.encode(Codec::MsgPack).unwrap_or_default()
}

/// The largest frame a hub reads before the hello is done: a hello's id, role, codecs,
/// capabilities and token fit in far less, and a peer that has not said who it is cannot
/// make the hub hold more. The limit agreed in the handshake applies from the welcome on.
pub const MAX_HELLO_FRAME: u32 = 64 * 1024;

/// Whether `given` equals the secret `expected`, in a time that depends on `given`'s length
/// alone: neither where they differ nor how long `expected` is shows in the time taken
/// (every byte given is compared, with the secret read round and round).
fn constant_time_eq(expected: &[u8], given: &[u8]) -> bool {
    if expected.is_empty() {
        return given.is_empty();
    }
    let differ = given
        .iter()
        .enumerate()
        .fold(expected.len() ^ given.len(), |acc, (i, g)| {
            acc | usize::from(g ^ expected[i % expected.len()])
        });
    std::hint::black_box(differ) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameDecoder;

    const MAX: u32 = 1 << 24;

    fn raw(bytes: Bytes) -> RawFrame {
        FrameDecoder::decode_one(bytes, MAX).unwrap()
    }

    fn hello_raw(hello: &Hello) -> RawFrame {
        raw(AgentHandshake::new(hello.clone()).hello_frame().unwrap())
    }

    fn accept(policy: HubPolicy, hello: &Hello) -> Session {
        match HubHandshake::new(policy).on_frame(&hello_raw(hello), 1) {
            HubDecision::Accept { reply, session } => {
                let agent_session = AgentHandshake::new(hello.clone())
                    .on_frame(&raw(reply))
                    .unwrap();
                assert_eq!(agent_session, session);
                session
            }
            HubDecision::Reject { reply, code } => panic!("rejected {code}: {reply:?}"),
        }
    }

    /// Runs the hub on `hello`, expects a reject with `want`, and checks the agent sees it.
    fn reject(policy: HubPolicy, hello: &Hello, want: ErrorCode) -> String {
        match HubHandshake::new(policy).on_frame(&hello_raw(hello), 1) {
            HubDecision::Accept { session, .. } => panic!("accepted: {session:?}"),
            HubDecision::Reject { reply, code } => {
                assert_eq!(code, want);
                let err = AgentHandshake::new(hello.clone())
                    .on_frame(&raw(reply))
                    .unwrap_err();
                match err {
                    HandshakeError::Rejected { code, reason } => {
                        assert_eq!(code, want);
                        reason
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }

    fn welcome() -> Welcome {
        Welcome {
            version: PROTOCOL_VERSION,
            codec: "msgpack".into(),
            session_id: 9,
            max_frame_size: 1024,
            heartbeat_interval_ms: 100,
            capabilities: vec![],
        }
    }

    fn agent_on_welcome(hello: Hello, w: Welcome) -> Result<Session, HandshakeError> {
        let bytes = Frame::Welcome(w).encode(Codec::MsgPack).unwrap();
        AgentHandshake::new(hello).on_frame(&raw(bytes))
    }

    #[test]
    fn a_hello_over_the_hello_limit_is_refused_whole() {
        let big = Hello::new("w1", "x".repeat(MAX_HELLO_FRAME as usize));
        let reason = reject(HubPolicy::default(), &big, ErrorCode::FrameTooLarge);
        assert!(reason.contains("before the hello"), "{reason}");
        let fits = Hello::new("w1", "x".repeat(MAX_HELLO_FRAME as usize - 200));
        accept(HubPolicy::default(), &fits);
    }

    #[test]
    fn default_handshake_agrees_on_msgpack() {
        let s = accept(HubPolicy::default(), &Hello::new("w1", "worker"));
        assert_eq!(s.codec, Codec::MsgPack);
        assert_eq!(s.version, PROTOCOL_VERSION);
        assert_eq!(s.agent_id, "w1");
        assert_eq!(s.role, "worker");
        assert_eq!(s.session_id, 1);
        assert_eq!(s.heartbeat_interval_ms, 5_000);
        assert_eq!(s.max_frame_size, Limits::default().max_frame_size);
    }

    #[test]
    fn hub_preference_wins_among_offered_codecs() {
        let mut hello = Hello::new("w1", "worker");
        hello.codecs = vec!["msgpack".into(), "json".into()];
        let policy = HubPolicy {
            codecs: vec![Codec::Json, Codec::MsgPack],
            ..HubPolicy::default()
        };
        assert_eq!(accept(policy, &hello).codec, Codec::Json);
    }

    #[test]
    fn json_only_agent_gets_json() {
        let mut hello = Hello::new("w1", "worker");
        hello.codecs = vec!["json".into()];
        assert_eq!(accept(HubPolicy::default(), &hello).codec, Codec::Json);
    }

    #[test]
    fn unknown_codec_names_are_ignored() {
        let mut hello = Hello::new("w1", "worker");
        hello.codecs = vec!["cbor".into(), "json".into()];
        assert_eq!(accept(HubPolicy::default(), &hello).codec, Codec::Json);
    }

    #[test]
    fn no_common_codec_is_rejected() {
        let mut hello = Hello::new("w1", "worker");
        hello.codecs = vec!["json".into()];
        let policy = HubPolicy {
            codecs: vec![Codec::MsgPack],
            ..HubPolicy::default()
        };
        reject(policy, &hello, ErrorCode::NoCommonCodec);
        hello.codecs = vec![];
        reject(HubPolicy::default(), &hello, ErrorCode::NoCommonCodec);
        hello.codecs = vec!["cbor".into()];
        reject(HubPolicy::default(), &hello, ErrorCode::NoCommonCodec);
    }

    #[test]
    fn version_is_min_of_maxes() {
        let mut hello = Hello::new("w1", "worker");
        hello.version_min = 1;
        hello.version_max = 5;
        let policy = HubPolicy {
            version_min: 1,
            version_max: 3,
            ..HubPolicy::default()
        };
        assert_eq!(accept(policy, &hello).version, 3);
    }

    #[test]
    fn version_range_mismatch_is_rejected() {
        let mut hello = Hello::new("w1", "worker");
        hello.version_min = 2;
        hello.version_max = 3;
        reject(HubPolicy::default(), &hello, ErrorCode::UnsupportedVersion);

        let hello = Hello::new("w1", "worker");
        let policy = HubPolicy {
            version_min: 2,
            version_max: 4,
            ..HubPolicy::default()
        };
        reject(policy, &hello, ErrorCode::UnsupportedVersion);

        // An inverted range offers nothing.
        let mut hello = Hello::new("w1", "worker");
        hello.version_min = 2;
        hello.version_max = 1;
        reject(HubPolicy::default(), &hello, ErrorCode::UnsupportedVersion);
    }

    #[test]
    fn auth_token() {
        let policy = HubPolicy {
            auth_token: Some("s3cret".into()),
            ..HubPolicy::default()
        };
        let mut hello = Hello::new("w1", "worker");
        reject(policy.clone(), &hello, ErrorCode::Unauthorized);
        hello.auth_token = Some("wrong!".into());
        reject(policy.clone(), &hello, ErrorCode::Unauthorized);
        hello.auth_token = Some("s3cre".into());
        reject(policy.clone(), &hello, ErrorCode::Unauthorized);
        hello.auth_token = Some(String::new());
        reject(policy.clone(), &hello, ErrorCode::Unauthorized);
        hello.auth_token = Some("s3cret".into());
        accept(policy, &hello);
        // A hub without a token ignores whatever the agent sends.
        accept(HubPolicy::default(), &hello);
    }

    #[test]
    fn invalid_agent_ids_are_rejected() {
        let long = "x".repeat(Limits::default().max_name_len + 1);
        for id in [
            "",
            long.as_str(),
            "a\nb",
            "tab\there",
            "nul\0",
            "del\u{7f}",
            "c1\u{85}",
        ] {
            reject(
                HubPolicy::default(),
                &Hello::new(id, "worker"),
                ErrorCode::InvalidAgentId,
            );
        }
        let longest = "x".repeat(Limits::default().max_name_len);
        for id in [longest.as_str(), "ü-agent", "a b", "worker/1"] {
            accept(HubPolicy::default(), &Hello::new(id, "worker"));
        }
    }

    #[test]
    fn max_frame_size_is_the_smaller() {
        let mut hello = Hello::new("w1", "worker");
        hello.max_frame_size = 4096;
        assert_eq!(accept(HubPolicy::default(), &hello).max_frame_size, 4096);

        hello.max_frame_size = u32::MAX;
        let mut policy = HubPolicy::default();
        policy.limits.max_frame_size = 2048;
        assert_eq!(accept(policy, &hello).max_frame_size, 2048);

        hello.max_frame_size = 64;
        assert_eq!(accept(HubPolicy::default(), &hello).max_frame_size, 64);
        hello.max_frame_size = 63;
        reject(HubPolicy::default(), &hello, ErrorCode::LimitExceeded);
        hello.max_frame_size = 0;
        reject(HubPolicy::default(), &hello, ErrorCode::LimitExceeded);
    }

    #[test]
    fn capabilities_are_the_intersection() {
        let mut hello = Hello::new("w1", "worker");
        hello.capabilities = vec!["a".into(), "b".into(), "b".into(), "c".into()];
        let policy = HubPolicy {
            capabilities: vec!["c".into(), "b".into(), "z".into()],
            ..HubPolicy::default()
        };
        let s = accept(policy, &hello);
        assert_eq!(s.capabilities, vec!["b".to_owned(), "c".to_owned()]);
        assert!(s.has_capability("b"));
        assert!(!s.has_capability("a"));
        assert!(!s.has_capability("z"));
    }

    #[test]
    fn hub_rejects_non_hello_first_frames() {
        let hub = HubHandshake::new(HubPolicy::default());
        let bytes = Frame::Subscribe("x".into()).encode(Codec::MsgPack).unwrap();
        match hub.on_frame(&raw(bytes), 1) {
            HubDecision::Reject { code, .. } => assert_eq!(code, ErrorCode::ProtocolViolation),
            other => panic!("{other:?}"),
        }
        let garbage = RawFrame::new(FrameType::Hello as u8, Bytes::from_static(&[0x93, 1, 2]));
        match hub.on_frame(&garbage, 1) {
            HubDecision::Reject { code, reply } => {
                assert_eq!(code, ErrorCode::MalformedFrame);
                let decoded = Frame::decode(&raw(reply), Codec::MsgPack).unwrap();
                assert!(
                    matches!(decoded, Frame::Reject(r) if r.code == ErrorCode::MalformedFrame.code())
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn agent_accepts_a_valid_welcome() {
        let s = agent_on_welcome(Hello::new("w1", "worker"), welcome()).unwrap();
        assert_eq!(s.session_id, 9);
        assert_eq!(s.max_frame_size, 1024);
        assert_eq!(s.heartbeat_interval_ms, 100);
    }

    #[test]
    fn agent_rejects_unoffered_codec() {
        let mut hello = Hello::new("w1", "worker");
        hello.codecs = vec!["json".into()];
        let err = agent_on_welcome(hello.clone(), welcome()).unwrap_err();
        assert!(matches!(err, HandshakeError::NotOffered(ref m) if m.contains("msgpack")));
        let w = Welcome {
            codec: "cbor".into(),
            ..welcome()
        };
        assert!(matches!(
            agent_on_welcome(Hello::new("w1", "worker"), w),
            Err(HandshakeError::NotOffered(_))
        ));
    }

    #[test]
    fn agent_rejects_unoffered_version_frame_size_and_capability() {
        let hello = Hello::new("w1", "worker");
        for w in [
            Welcome {
                version: PROTOCOL_VERSION + 1,
                ..welcome()
            },
            Welcome {
                max_frame_size: hello.max_frame_size + 1,
                ..welcome()
            },
            Welcome {
                max_frame_size: 0,
                ..welcome()
            },
            Welcome {
                capabilities: vec!["datagrams".into()],
                ..welcome()
            },
        ] {
            assert!(matches!(
                agent_on_welcome(hello.clone(), w),
                Err(HandshakeError::NotOffered(_))
            ));
        }
    }

    #[test]
    fn agent_handles_odd_answers() {
        let mut agent = AgentHandshake::new(Hello::new("w1", "worker"));
        let bytes = Frame::Subscribe("x".into()).encode(Codec::MsgPack).unwrap();
        assert_eq!(
            agent.on_frame(&raw(bytes)),
            Err(HandshakeError::UnexpectedFrame(0x20))
        );
        assert_eq!(
            agent.on_frame(&raw(Reject::new(ErrorCode::Normal, "").to_frame())),
            Err(HandshakeError::Finished)
        );

        let mut agent = AgentHandshake::new(Hello::new("w1", "worker"));
        let garbage = RawFrame::new(FrameType::Welcome as u8, Bytes::from_static(&[0xc1]));
        assert!(matches!(
            agent.on_frame(&garbage),
            Err(HandshakeError::Malformed(_))
        ));

        let mut agent = AgentHandshake::new(Hello::new("w1", "worker"));
        let unknown_code = Reject {
            code: 9999,
            reason: "?".into(),
        };
        assert_eq!(
            agent.on_frame(&raw(unknown_code.to_frame())),
            Err(HandshakeError::Rejected {
                code: ErrorCode::ProtocolViolation,
                reason: "?".into()
            })
        );
    }

    #[test]
    fn hello_new_defaults() {
        let h = Hello::new("a", "r");
        assert_eq!(h.version_min, PROTOCOL_VERSION);
        assert_eq!(h.version_max, PROTOCOL_VERSION);
        assert_eq!(h.codecs, vec!["msgpack".to_owned(), "json".to_owned()]);
        assert_eq!(h.auth_token, None);
        let agent = AgentHandshake::new(h.clone());
        assert_eq!(agent.hello(), &h);
        assert_eq!(
            HubHandshake::new(HubPolicy::default()).policy(),
            &HubPolicy::default()
        );
    }

    #[test]
    fn constant_time_eq_works() {
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"abc", b""));
        // A repetition of the secret is not the secret.
        assert!(!constant_time_eq(b"abc", b"abcabc"));
        assert!(!constant_time_eq(b"abcabc", b"abc"));
    }
}
