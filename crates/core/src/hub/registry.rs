//! The hub's registry: connected agents, their send queues and topic subscriptions.
//!
//! This module owns who is connected and who subscribes to what, and enforces the
//! duplicate-id policy. It must not do I/O: closing a connection goes through the
//! [`ConnectionControl`] each slot holds.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use agentwire_proto::{Codec, ErrorCode, Kind, Priority};
use bytes::Bytes;

use crate::queue::PriorityQueue;
use crate::transport::{ConnectionStats, FrameSender, ReplySlot, TransportKind};

/// What the hub does when an agent connects with an id that is already connected.
///
/// ```
/// use agentwire::hub::DuplicatePolicy;
/// assert_eq!("replace".parse::<DuplicatePolicy>().unwrap(), DuplicatePolicy::ReplaceOld);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DuplicatePolicy {
    /// Refuse the newcomer with `duplicate-agent-id`; the connected agent is untouched.
    #[default]
    RejectNew,
    /// Close the connected agent with `replaced` and accept the newcomer (for agents that
    /// reconnect faster than the hub notices they left).
    ReplaceOld,
}

impl std::str::FromStr for DuplicatePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "reject" | "reject-new" => Ok(DuplicatePolicy::RejectNew),
            "replace" | "replace-old" => Ok(DuplicatePolicy::ReplaceOld),
            other => Err(format!(
                "unknown duplicate policy {other:?} (reject or replace)"
            )),
        }
    }
}

/// Closing and inspecting a connection without knowing its transport.
pub trait ConnectionControl: Send + Sync {
    /// Closes the connection with a code.
    fn close(&self, code: ErrorCode, reason: &str);
    /// Network counters.
    fn stats(&self) -> ConnectionStats;
}

impl<S: FrameSender> ConnectionControl for S {
    fn close(&self, code: ErrorCode, reason: &str) {
        FrameSender::close(self, code, reason)
    }
    fn stats(&self) -> ConnectionStats {
        FrameSender::stats(self)
    }
}

/// One frame waiting to go to an agent.
#[derive(Debug)]
pub(crate) struct Outbound {
    pub frame: Bytes,
    pub priority: Priority,
    pub kind: Option<Kind>,
    /// For an answer: the stream its request arrived on.
    pub reply: Option<ReplySlot>,
}

/// Most reply slots one agent may hold; beyond it answers travel as ordinary messages.
const MAX_REPLY_SLOTS: usize = 10_000;

/// A connected agent as the hub sees it.
pub(crate) struct AgentSlot {
    pub id: String,
    pub role: String,
    pub session_id: u64,
    pub codec: Codec,
    pub transport: TransportKind,
    pub queue: PriorityQueue<Outbound>,
    pub topics: Mutex<HashSet<String>>,
    /// Milliseconds since the hub started, when a frame last arrived.
    pub last_seen_ms: AtomicU64,
    pub connection: Box<dyn ConnectionControl>,
    pub connected_at: Instant,
    /// Streams on which this agent's pending requests want their answers, by request id.
    pub replies: Mutex<HashMap<u64, (ReplySlot, Instant)>>,
}

impl AgentSlot {
    pub fn touch(&self, now_ms: u64) {
        self.last_seen_ms.store(now_ms, Ordering::Relaxed);
    }

    fn lock_replies(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (ReplySlot, Instant)>> {
        self.replies.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers where the answer to this agent's request `id` goes, until `deadline`.
    pub fn keep_reply(&self, id: u64, slot: ReplySlot, deadline: Instant) {
        let mut replies = self.lock_replies();
        if replies.len() < MAX_REPLY_SLOTS {
            replies.insert(id, (slot, deadline));
        }
    }

    /// The reply slot of this agent's request `id`, if it is still waiting.
    pub fn take_reply(&self, id: u64) -> Option<ReplySlot> {
        self.lock_replies().remove(&id).map(|(slot, _)| slot)
    }

    /// Forgets reply slots whose requests can no longer be answered in time.
    pub fn drop_expired_replies(&self, now: Instant) {
        self.lock_replies()
            .retain(|_, (_, deadline)| *deadline > now);
    }
}

/// A snapshot of one connected agent, for the API and the CLI.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AgentInfo {
    /// The agent's id.
    pub id: String,
    /// Its role.
    pub role: String,
    /// Hub-assigned session id.
    pub session_id: u64,
    /// Transport in use.
    pub transport: &'static str,
    /// Codec in use.
    pub codec: &'static str,
    /// Frames waiting in its send queue.
    pub queued: usize,
    /// Topics it subscribes to.
    pub topics: Vec<String>,
    /// Seconds since it connected.
    pub connected_secs: f64,
    /// Network counters of its connection.
    pub connection: ConnectionStats,
}

#[derive(Default)]
pub(crate) struct Registry {
    agents: RwLock<HashMap<String, Arc<AgentSlot>>>,
    topics: RwLock<HashMap<String, HashSet<String>>>,
}

/// Outcome of registering a slot.
pub(crate) enum Registered {
    /// The id was free.
    Fresh,
    /// The id was taken; the old slot was removed and must be closed.
    Replaced(Arc<AgentSlot>),
}

impl Registry {
    fn read_agents(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<AgentSlot>>> {
        self.agents.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_agents(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<AgentSlot>>> {
        self.agents.write().unwrap_or_else(|p| p.into_inner())
    }

    fn write_topics(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, HashSet<String>>> {
        self.topics.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn register(
        &self,
        slot: Arc<AgentSlot>,
        policy: DuplicatePolicy,
    ) -> Result<Registered, ErrorCode> {
        let mut agents = self.write_agents();
        match agents.get(&slot.id) {
            Some(_) if policy == DuplicatePolicy::RejectNew => Err(ErrorCode::DuplicateAgentId),
            Some(_) => {
                let old = agents.insert(slot.id.clone(), slot);
                drop(agents);
                match old {
                    Some(old) => {
                        self.drop_subscriptions(&old);
                        Ok(Registered::Replaced(old))
                    }
                    None => Ok(Registered::Fresh),
                }
            }
            None => {
                agents.insert(slot.id.clone(), slot);
                Ok(Registered::Fresh)
            }
        }
    }

    /// Removes `slot` if it is still the registered one for its id. True if it was.
    pub fn unregister(&self, slot: &Arc<AgentSlot>) -> bool {
        let removed = {
            let mut agents = self.write_agents();
            match agents.get(&slot.id) {
                Some(current) if Arc::ptr_eq(current, slot) => {
                    agents.remove(&slot.id);
                    true
                }
                _ => false,
            }
        };
        if removed {
            self.drop_subscriptions(slot);
        }
        removed
    }

    fn drop_subscriptions(&self, slot: &AgentSlot) {
        let topics: Vec<String> = slot
            .topics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect();
        let mut map = self.write_topics();
        for t in topics {
            if let Some(set) = map.get_mut(&t) {
                set.remove(&slot.id);
                if set.is_empty() {
                    map.remove(&t);
                }
            }
        }
    }

    pub fn get(&self, id: &str) -> Option<Arc<AgentSlot>> {
        self.read_agents().get(id).cloned()
    }

    pub fn all(&self) -> Vec<Arc<AgentSlot>> {
        self.read_agents().values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.read_agents().len()
    }

    /// Subscribes `slot` to `topic`; false if it already was.
    pub fn subscribe(&self, slot: &AgentSlot, topic: &str) -> bool {
        let fresh = slot
            .topics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(topic.to_owned());
        if fresh {
            self.write_topics()
                .entry(topic.to_owned())
                .or_default()
                .insert(slot.id.clone());
        }
        fresh
    }

    /// Unsubscribes `slot` from `topic`; false if it was not subscribed.
    pub fn unsubscribe(&self, slot: &AgentSlot, topic: &str) -> bool {
        let was = slot
            .topics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(topic);
        if was {
            let mut map = self.write_topics();
            if let Some(set) = map.get_mut(topic) {
                set.remove(&slot.id);
                if set.is_empty() {
                    map.remove(topic);
                }
            }
        }
        was
    }

    /// The slots subscribed to `topic`.
    pub fn subscribers(&self, topic: &str) -> Vec<Arc<AgentSlot>> {
        let ids: Vec<String> = self
            .topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let agents = self.read_agents();
        ids.iter()
            .filter_map(|id| agents.get(id).cloned())
            .collect()
    }

    pub fn info(slot: &AgentSlot) -> AgentInfo {
        let mut topics: Vec<String> = slot
            .topics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        topics.sort();
        AgentInfo {
            id: slot.id.clone(),
            role: slot.role.clone(),
            session_id: slot.session_id,
            transport: slot.transport.name(),
            codec: slot.codec.name(),
            queued: slot.queue.len(),
            topics,
            connected_secs: slot.connected_at.elapsed().as_secs_f64(),
            connection: slot.connection.stats(),
        }
    }
}
