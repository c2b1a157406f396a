//! The handshake's messages: the agent's [`Hello`], the hub's [`Welcome`] or [`Reject`], and
//! the protocol version.
//!
//! This module owns the messages' fields and their serialisation; the decisions are
//! `handshake`'s, and the frames that carry them are `frame`'s.

use serde::{Deserialize, Serialize};

use crate::codec::Codec;
use crate::{ErrorCode, Limits};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// Agent → hub: who I am and what I can do. MessagePack array, fields in this order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Lowest protocol version the agent speaks.
    pub version_min: u16,
    /// Highest protocol version the agent speaks.
    pub version_max: u16,
    /// The id the agent wants to be reachable at.
    pub agent_id: String,
    /// A free-form role ("worker", "coordinator", ...).
    pub role: String,
    /// Optional features the agent supports (e.g. `datagrams`).
    pub capabilities: Vec<String>,
    /// Codec names the agent speaks, preferred first.
    pub codecs: Vec<String>,
    /// Shared secret, if the hub requires one.
    pub auth_token: Option<String>,
    /// Largest frame the agent accepts.
    pub max_frame_size: u32,
}

impl Hello {
    /// A hello for version [`PROTOCOL_VERSION`], both codecs (MessagePack first), no token,
    /// no capabilities and the default 16 MiB frame limit.
    pub fn new(agent_id: impl Into<String>, role: impl Into<String>) -> Self {
        Hello {
            version_min: PROTOCOL_VERSION,
            version_max: PROTOCOL_VERSION,
            agent_id: agent_id.into(),
            role: role.into(),
            capabilities: Vec::new(),
            codecs: Codec::ALL.iter().map(|c| c.name().to_owned()).collect(),
            auth_token: None,
            max_frame_size: Limits::default().max_frame_size,
        }
    }
}

/// Hub → agent: the session is open. MessagePack array, fields in this order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The version chosen.
    pub version: u16,
    /// The codec chosen (one of those offered).
    pub codec: String,
    /// The hub's id for this session.
    pub session_id: u64,
    /// The frame limit both sides now enforce (the smaller of the two).
    pub max_frame_size: u32,
    /// How often the agent should send a heartbeat when otherwise silent.
    pub heartbeat_interval_ms: u32,
    /// Capabilities both sides support.
    pub capabilities: Vec<String>,
}

/// Hub → agent: the session is refused. MessagePack array, fields in this order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reject {
    /// An [`ErrorCode`] number.
    pub code: u32,
    /// Free text for humans.
    pub reason: String,
}

impl Reject {
    /// A reject with a known code.
    pub fn new(code: ErrorCode, reason: impl Into<String>) -> Self {
        Reject {
            code: code.code(),
            reason: reason.into(),
        }
    }
}
