//! Who is on which hub: the presence messages hubs publish, and the directory each hub keeps
//! of the others' agents (sans-IO: it takes messages and `now`, and returns changes).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use agentwire::hub::DuplicatePolicy;
use serde::{Deserialize, Serialize};

/// One agent of a hub and the topics it subscribes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentEntry {
    /// Its id.
    pub id: String,
    /// Its topics.
    #[serde(default)]
    pub topics: BTreeSet<String>,
    /// When it connected to its hub (Unix ms, that hub's clock): which of two agents with one
    /// id came first. 0 from a hub that does not say.
    #[serde(default)]
    pub since_ms: u64,
}

/// A message on `agentwire.<cluster>.presence` (JSON).
///
/// ```
/// use agentwire_cluster::presence::PresenceMessage;
/// let m = PresenceMessage::Sync { hub: "h1".into() };
/// let text = serde_json::to_string(&m).unwrap();
/// assert_eq!(text, r#"{"type":"sync","hub":"h1"}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum PresenceMessage {
    /// A hub's whole view of its own agents: sent when it changes, and every beat.
    State {
        /// The hub.
        hub: String,
        /// Its agents.
        agents: Vec<AgentEntry>,
    },
    /// One part of a hub's state too large for one message (see [`state_messages`]): the
    /// parts of one `epoch` together are that hub's agents; an agent's topics may be spread
    /// over several parts.
    StatePart {
        /// The hub.
        hub: String,
        /// Which publication of the hub's state (grows by one each time).
        epoch: u64,
        /// This part's number, from 0.
        part: u32,
        /// How many parts the state has.
        parts: u32,
        /// Agents, or parts of their topic lists.
        agents: Vec<AgentEntry>,
    },
    /// A hub that just started asks the others for their state.
    Sync {
        /// The hub asking.
        hub: String,
    },
    /// A hub is going away: its agents are gone.
    Gone {
        /// The hub.
        hub: String,
    },
}

/// Most bytes of one presence message: a quarter of NATS's default payload limit (1 MiB).
impl PresenceMessage {
    /// The hub the message speaks for. A hub takes a message only when it arrived on that
    /// hub's own presence subject ([`crate::link::sending_hub`]).
    pub fn hub(&self) -> &str {
        match self {
            PresenceMessage::State { hub, .. }
            | PresenceMessage::StatePart { hub, .. }
            | PresenceMessage::Sync { hub }
            | PresenceMessage::Gone { hub } => hub,
        }
    }
}

/// The largest presence message a hub publishes: a state (its agent list) bigger than this is
/// sent as [`PresenceMessage::StatePart`]s of at most this size each.
pub const MAX_PRESENCE_BYTES: usize = 256 * 1024;

/// Most parts one hub's state may have (beyond, the parts are ignored): 256 MiB of state at
/// [`MAX_PRESENCE_BYTES`] a part.
pub const MAX_PRESENCE_PARTS: u32 = 1024;

/// The messages that publish `agents` as `hub`'s state: one [`PresenceMessage::State`] when it
/// fits in `max_bytes`, otherwise [`PresenceMessage::StatePart`]s of publication `epoch`, each
/// at most `max_bytes` (an agent's topics are spread over parts when one agent alone is
/// larger), so that no presence message grows with the cluster.
///
/// ```
/// use agentwire_cluster::presence::{state_messages, AgentEntry, PresenceMessage};
/// let topics = (0..5000).map(|i| format!("topic-{i}")).collect();
/// let big = AgentEntry { id: "a".into(), topics, since_ms: 1 };
/// let messages = state_messages("h1", &[big], 7, 16 * 1024);
/// assert!(messages.len() > 1);
/// for m in &messages {
///     assert!(serde_json::to_vec(m).unwrap().len() <= 16 * 1024);
///     assert!(matches!(m, PresenceMessage::StatePart { epoch: 7, .. }));
/// }
/// ```
pub fn state_messages(
    hub: &str,
    agents: &[AgentEntry],
    epoch: u64,
    max_bytes: usize,
) -> Vec<PresenceMessage> {
    let whole = PresenceMessage::State {
        hub: hub.to_owned(),
        agents: agents.to_vec(),
    };
    if serde_json::to_vec(&whole).map_or(0, |b| b.len()) <= max_bytes {
        return vec![whole];
    }
    // Room for the envelope of a part (type, hub, numbers) and of one entry (id, since).
    let envelope = 128 + hub.len();
    // Room for one entry without its topics (id, since, punctuation).
    let entry_size = |id: &str| 64 + json_len(id);
    let mut parts: Vec<Vec<AgentEntry>> = vec![Vec::new()];
    let mut size = envelope;
    for agent in agents {
        let bare = || AgentEntry {
            id: agent.id.clone(),
            topics: BTreeSet::new(),
            since_ms: agent.since_ms,
        };
        if size + entry_size(&agent.id) > max_bytes && parts.last().is_some_and(|p| !p.is_empty()) {
            parts.push(Vec::new());
            size = envelope;
        }
        size += entry_size(&agent.id);
        let mut piece = bare();
        for topic in &agent.topics {
            let t = json_len(topic) + 1;
            // A new part, unless this one holds nothing else yet (then it takes the topic).
            let holds = !piece.topics.is_empty() || parts.last().is_some_and(|p| !p.is_empty());
            if size + t > max_bytes && holds {
                let full = std::mem::replace(&mut piece, bare());
                if let (false, Some(last)) = (full.topics.is_empty(), parts.last_mut()) {
                    last.push(full);
                }
                parts.push(Vec::new());
                size = envelope + entry_size(&agent.id);
            }
            size += t;
            piece.topics.insert(topic.clone());
        }
        if let Some(last) = parts.last_mut() {
            last.push(piece);
        }
    }
    let count = u32::try_from(parts.len()).unwrap_or(u32::MAX);
    parts
        .into_iter()
        .enumerate()
        .map(|(i, agents)| PresenceMessage::StatePart {
            hub: hub.to_owned(),
            epoch,
            part: u32::try_from(i).unwrap_or(u32::MAX),
            parts: count,
            agents,
        })
        .collect()
}

/// The length of `s` as a JSON string, quotes and escapes included.
fn json_len(s: &str) -> usize {
    serde_json::to_string(s).map_or(s.len() + 2, |j| j.len())
}

/// The parts of one hub's state received so far.
struct Partial {
    epoch: u64,
    parts: u32,
    received: BTreeMap<u32, Vec<AgentEntry>>,
}

/// What changed in the directory, for the stand-ins to follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An agent of `hub` appeared (or the id is now that hub's agent's: it won over another
    /// hub's agent with the same id).
    Join {
        /// Its hub.
        hub: String,
        /// The agent.
        agent: String,
        /// When it connected (Unix ms): for the hub to weigh it against a local agent with the
        /// same id.
        since_ms: u64,
    },
    /// An agent is gone.
    Leave {
        /// The agent.
        agent: String,
    },
    /// An agent subscribed to a topic.
    Subscribe {
        /// The agent.
        agent: String,
        /// The topic.
        topic: String,
    },
    /// An agent unsubscribed.
    Unsubscribe {
        /// The agent.
        agent: String,
        /// The topic.
        topic: String,
    },
}

struct RemoteHub {
    agents: BTreeMap<String, Claim>,
    last_seen: Instant,
}

/// One hub's agent with an id.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claim {
    topics: BTreeSet<String>,
    since_ms: u64,
}

/// Which of two agents with one id keeps it, the same rule on every hub (the hub's
/// `--on-duplicate`): with [`DuplicatePolicy::RejectNew`] the one that connected first, with
/// [`DuplicatePolicy::ReplaceOld`] the last; the smaller hub id on a tie.
///
/// ```
/// use agentwire::hub::DuplicatePolicy;
/// use agentwire_cluster::presence::keeps_id;
/// assert!(keeps_id(DuplicatePolicy::RejectNew, (100, "h2"), (200, "h1")));
/// assert!(keeps_id(DuplicatePolicy::ReplaceOld, (200, "h1"), (100, "h2")));
/// assert!(keeps_id(DuplicatePolicy::RejectNew, (100, "h1"), (100, "h2")));
/// ```
pub fn keeps_id(policy: DuplicatePolicy, a: (u64, &str), b: (u64, &str)) -> bool {
    let (since_a, hub_a) = a;
    let (since_b, hub_b) = b;
    match since_a.cmp(&since_b) {
        std::cmp::Ordering::Equal => hub_a <= hub_b,
        order => (order == std::cmp::Ordering::Less) == (policy == DuplicatePolicy::RejectNew),
    }
}

/// The agents of every other hub, from their presence messages.
///
/// ```
/// use std::time::{Duration, Instant};
/// use agentwire::hub::DuplicatePolicy;
/// use agentwire_cluster::presence::{AgentEntry, Change, Directory};
/// let mut d = Directory::new("me", Duration::from_secs(3), DuplicatePolicy::RejectNew);
/// let now = Instant::now();
/// let a = AgentEntry { id: "a".into(), topics: ["news".to_string()].into(), since_ms: 5 };
/// let changes = d.on_state("h2", vec![a], now);
/// assert_eq!(changes[0], Change::Join { hub: "h2".into(), agent: "a".into(), since_ms: 5 });
/// assert_eq!(d.hub_of("a"), Some("h2"));
/// assert_eq!(d.expire(now + Duration::from_secs(4)), vec![Change::Leave { agent: "a".into() }]);
/// ```
pub struct Directory {
    me: String,
    expiry: Duration,
    policy: DuplicatePolicy,
    hubs: HashMap<String, RemoteHub>,
    /// Which hub's agent has each id (of the hubs announcing it, the one [`keeps_id`] picks).
    owner: HashMap<String, String>,
    /// States in parts not complete yet, by hub (the newest epoch only).
    partial: HashMap<String, Partial>,
}

impl Directory {
    /// A directory for hub `me`; a hub silent for `expiry` is taken as gone; two agents with
    /// one id are settled by `policy`.
    pub fn new(me: impl Into<String>, expiry: Duration, policy: DuplicatePolicy) -> Self {
        Directory {
            me: me.into(),
            expiry,
            policy,
            hubs: HashMap::new(),
            owner: HashMap::new(),
            partial: HashMap::new(),
        }
    }

    /// One part of hub `hub`'s state ([`PresenceMessage::StatePart`]): once every part of its
    /// epoch is in, the state applies as [`on_state`](Self::on_state)'s. A part of an older
    /// epoch than one being gathered, or of a state in more than [`MAX_PRESENCE_PARTS`] parts,
    /// is ignored; a newer epoch drops the older one's parts.
    pub fn on_state_part(
        &mut self,
        hub: &str,
        epoch: u64,
        part: u32,
        parts: u32,
        agents: Vec<AgentEntry>,
        now: Instant,
    ) -> Vec<Change> {
        if hub == self.me || parts == 0 || parts > MAX_PRESENCE_PARTS || part >= parts {
            return Vec::new();
        }
        if let Some(h) = self.hubs.get_mut(hub) {
            h.last_seen = now;
        }
        let gathering = self.partial.entry(hub.to_owned()).or_insert(Partial {
            epoch,
            parts,
            received: BTreeMap::new(),
        });
        if epoch < gathering.epoch {
            return Vec::new();
        }
        if epoch > gathering.epoch || parts != gathering.parts {
            *gathering = Partial {
                epoch,
                parts,
                received: BTreeMap::new(),
            };
        }
        gathering.received.insert(part, agents);
        if gathering.received.len() < parts as usize {
            return Vec::new();
        }
        let Some(done) = self.partial.remove(hub) else {
            return Vec::new();
        };
        // One agent's topics may come in several parts.
        let mut merged: BTreeMap<String, AgentEntry> = BTreeMap::new();
        for entry in done.received.into_values().flatten() {
            match merged.get_mut(&entry.id) {
                Some(a) => a.topics.extend(entry.topics),
                None => {
                    merged.insert(entry.id.clone(), entry);
                }
            }
        }
        self.on_state(hub, merged.into_values().collect(), now)
    }

    /// The hub agent `agent` is on, if it is a remote agent.
    pub fn hub_of(&self, agent: &str) -> Option<&str> {
        self.owner.get(agent).map(String::as_str)
    }

    /// Hub `hub` says these are its agents.
    pub fn on_state(&mut self, hub: &str, agents: Vec<AgentEntry>, now: Instant) -> Vec<Change> {
        if hub == self.me {
            return Vec::new();
        }
        let new: BTreeMap<String, Claim> = agents
            .into_iter()
            .map(|a| {
                let claim = Claim {
                    topics: a.topics,
                    since_ms: a.since_ms,
                };
                (a.id, claim)
            })
            .collect();
        let old = self
            .hubs
            .insert(
                hub.to_owned(),
                RemoteHub {
                    agents: new.clone(),
                    last_seen: now,
                },
            )
            .map(|h| h.agents)
            .unwrap_or_default();
        let ids: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
        let mut changes = Vec::new();
        for id in ids {
            self.settle(id, hub, old.get(id), &mut changes);
        }
        changes
    }

    /// Hub `hub` went away.
    pub fn on_gone(&mut self, hub: &str) -> Vec<Change> {
        self.partial.remove(hub);
        let mut changes = Vec::new();
        if let Some(h) = self.hubs.remove(hub) {
            for (id, claim) in &h.agents {
                self.settle(id, hub, Some(claim), &mut changes);
            }
        }
        changes
    }

    /// Hubs not heard from for the expiry time are taken as gone.
    pub fn expire(&mut self, now: Instant) -> Vec<Change> {
        let silent: Vec<String> = self
            .hubs
            .iter()
            .filter(|(_, h)| now.saturating_duration_since(h.last_seen) > self.expiry)
            .map(|(name, _)| name.clone())
            .collect();
        silent.iter().flat_map(|h| self.on_gone(h)).collect()
    }

    /// The hub whose agent keeps `id` now, and its claim.
    fn winner(&self, id: &str) -> Option<(&str, &Claim)> {
        let mut best: Option<(&str, &Claim)> = None;
        for (hub, h) in &self.hubs {
            let Some(claim) = h.agents.get(id) else {
                continue;
            };
            best = match best {
                Some((b, bc)) if keeps_id(self.policy, (bc.since_ms, b), (claim.since_ms, hub)) => {
                    Some((b, bc))
                }
                _ => Some((hub.as_str(), claim)),
            };
        }
        best
    }

    /// Brings `id`'s owner up to date after hub `changed` announced it or stopped;
    /// `before` is that hub's claim before the change.
    fn settle(
        &mut self,
        id: &str,
        changed: &str,
        before: Option<&Claim>,
        changes: &mut Vec<Change>,
    ) {
        let old_owner = self.owner.get(id).cloned();
        let winner = self
            .winner(id)
            .map(|(hub, claim)| (hub.to_owned(), claim.clone()));
        let new_owner = winner.as_ref().map(|(hub, _)| hub.clone());
        if old_owner == new_owner {
            // The same hub's agent: only its topics may have changed.
            if let Some((hub, claim)) = winner {
                if hub == changed {
                    let empty = BTreeSet::new();
                    let was = before.map_or(&empty, |c| &c.topics);
                    topic_changes(id, was, &claim.topics, changes);
                }
            }
            return;
        }
        if old_owner.is_some() {
            self.owner.remove(id);
            changes.push(Change::Leave {
                agent: id.to_owned(),
            });
        }
        if let Some((hub, claim)) = winner {
            self.owner.insert(id.to_owned(), hub.clone());
            changes.push(Change::Join {
                hub,
                agent: id.to_owned(),
                since_ms: claim.since_ms,
            });
            topic_changes(id, &BTreeSet::new(), &claim.topics, changes);
        }
    }
}

/// The subscribes and unsubscribes that take agent `id` from topics `was` to `now`.
fn topic_changes(
    id: &str,
    was: &BTreeSet<String>,
    now: &BTreeSet<String>,
    changes: &mut Vec<Change>,
) {
    for t in was.difference(now) {
        changes.push(Change::Unsubscribe {
            agent: id.to_owned(),
            topic: t.clone(),
        });
    }
    for t in now.difference(was) {
        changes.push(Change::Subscribe {
            agent: id.to_owned(),
            topic: t.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, topics: &[&str]) -> AgentEntry {
        AgentEntry {
            id: id.into(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            since_ms: 100,
        }
    }

    fn directory() -> Directory {
        Directory::new("me", Duration::from_secs(3), DuplicatePolicy::RejectNew)
    }

    /// A state too large for one message goes in parts none larger than the limit, and the
    /// parts, in any order, make the same directory as the whole state; older epochs and
    /// absurd part counts are ignored.
    #[test]
    fn a_large_state_travels_in_parts() {
        let many: Vec<String> = (0..20_000).map(|i| format!("topic.{i:05}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let agents = vec![
            entry("a", &refs),
            entry("b", &["x"]),
            entry("c", &refs[..3000]),
        ];
        let limit = 64 * 1024;
        let messages = state_messages("h2", &agents, 5, limit);
        assert!(messages.len() > 1, "{} parts", messages.len());
        for m in &messages {
            assert!(serde_json::to_vec(m).unwrap().len() <= limit);
        }
        let t0 = Instant::now();
        let mut whole = directory();
        let expected = whole.on_state("h2", agents.clone(), t0);
        let mut parted = directory();
        let mut got = Vec::new();
        // Last part first, then the rest: complete only at the end.
        let mut order: Vec<&PresenceMessage> = messages.iter().collect();
        order.rotate_right(1);
        for (i, m) in order.into_iter().enumerate() {
            let PresenceMessage::StatePart {
                hub,
                epoch,
                part,
                parts,
                agents,
            } = m.clone()
            else {
                panic!("expected parts")
            };
            let changes = parted.on_state_part(&hub, epoch, part, parts, agents, t0);
            if i + 1 < messages.len() {
                assert!(changes.is_empty(), "applied before the last part");
            }
            got.extend(changes);
        }
        assert_eq!(got.len(), expected.len());
        let (mut got, mut expected) = (got, expected);
        let key = |c: &Change| format!("{c:?}");
        got.sort_by_key(key);
        expected.sort_by_key(key);
        assert_eq!(got, expected);
        // An older epoch's part while a newer one is gathered: ignored.
        let newer = state_messages("h2", &agents, 9, limit);
        let PresenceMessage::StatePart {
            parts,
            agents: first,
            ..
        } = newer[0].clone()
        else {
            panic!()
        };
        assert!(parted
            .on_state_part("h2", 9, 0, parts, first, t0)
            .is_empty());
        assert!(parted
            .on_state_part("h2", 8, 1, parts, vec![entry("z", &[])], t0)
            .is_empty());
        assert!(parted.partial["h2"].received.len() == 1 && parted.partial["h2"].epoch == 9);
        // Too many parts: ignored, nothing kept.
        let mut d = directory();
        assert!(d
            .on_state_part(
                "h3",
                1,
                0,
                MAX_PRESENCE_PARTS + 1,
                vec![entry("q", &[])],
                t0
            )
            .is_empty());
        assert!(d.partial.is_empty());
        // Many agents with one long topic each, at limits that fall anywhere in an entry:
        // no part over the limit, and the parts make the same state.
        let long: Vec<AgentEntry> = (0..300)
            .map(|i| {
                entry(
                    &format!("agent-{i}"),
                    &[&format!("{i}-{}", "x".repeat(300 + (i * 37) % 900))],
                )
            })
            .collect();
        for limit in [2_000, 3_333, 5_001] {
            let messages = state_messages("h2", &long, 1, limit);
            let mut back: BTreeMap<String, AgentEntry> = BTreeMap::new();
            for m in &messages {
                assert!(
                    serde_json::to_vec(m).unwrap().len() <= limit,
                    "limit {limit}"
                );
                let PresenceMessage::StatePart { agents, .. } = m else {
                    panic!()
                };
                for a in agents {
                    back.entry(a.id.clone())
                        .or_insert_with(|| entry(&a.id, &[]))
                        .topics
                        .extend(a.topics.iter().cloned());
                }
            }
            let expected: BTreeMap<String, AgentEntry> =
                long.iter().map(|a| (a.id.clone(), a.clone())).collect();
            assert_eq!(back, expected);
        }
        // A small state still goes whole.
        assert!(matches!(
            state_messages("h2", &[entry("a", &["n"])], 1, limit)[..],
            [PresenceMessage::State { .. }]
        ));
    }

    #[test]
    fn joins_leaves_and_topics_follow_the_states() {
        let mut d = directory();
        let t0 = Instant::now();
        assert_eq!(d.on_state("me", vec![entry("x", &[])], t0), vec![]);
        let c = d.on_state("h2", vec![entry("a", &["n"]), entry("b", &[])], t0);
        assert!(c.contains(&Change::Join {
            hub: "h2".into(),
            agent: "a".into(),
            since_ms: 100,
        }));
        assert!(c.contains(&Change::Subscribe {
            agent: "a".into(),
            topic: "n".into()
        }));
        assert_eq!(c.len(), 3);
        // The same state again changes nothing.
        assert!(d
            .on_state("h2", vec![entry("a", &["n"]), entry("b", &[])], t0)
            .is_empty());
        let c = d.on_state("h2", vec![entry("a", &["m"])], t0);
        assert!(c.contains(&Change::Leave { agent: "b".into() }));
        assert!(c.contains(&Change::Unsubscribe {
            agent: "a".into(),
            topic: "n".into()
        }));
        assert!(c.contains(&Change::Subscribe {
            agent: "a".into(),
            topic: "m".into()
        }));
        // Another hub announcing the same id (connected at the same time: the smaller hub id
        // wins) does not take it over, until the first hub goes.
        assert!(d.on_state("h3", vec![entry("a", &[])], t0).is_empty());
        assert_eq!(d.hub_of("a"), Some("h2"));
        assert_eq!(
            d.on_gone("h2"),
            vec![
                Change::Leave { agent: "a".into() },
                Change::Join {
                    hub: "h3".into(),
                    agent: "a".into(),
                    since_ms: 100
                }
            ]
        );
        assert_eq!(d.hub_of("a"), Some("h3"));
        assert_eq!(d.on_gone("h3"), vec![Change::Leave { agent: "a".into() }]);
        assert_eq!(d.hub_of("a"), None);
    }

    #[test]
    fn silent_hubs_expire() {
        let mut d = directory();
        let t0 = Instant::now();
        d.on_state("h2", vec![entry("a", &[])], t0);
        assert!(d.expire(t0 + Duration::from_secs(2)).is_empty());
        d.on_state("h2", vec![entry("a", &[])], t0 + Duration::from_secs(2));
        assert!(d.expire(t0 + Duration::from_secs(4)).is_empty());
        assert_eq!(
            d.expire(t0 + Duration::from_secs(6)),
            vec![Change::Leave { agent: "a".into() }]
        );
    }

    #[test]
    fn two_agents_with_one_id_the_policy_picks_the_same_everywhere() {
        let t0 = Instant::now();
        let early = |id: &str| AgentEntry {
            since_ms: 50,
            ..entry(id, &["n"])
        };
        // Reject the newcomer: the agent that connected first keeps the id.
        let mut d = directory();
        d.on_state("h2", vec![entry("a", &[])], t0);
        let c = d.on_state("h3", vec![early("a")], t0);
        assert_eq!(
            c,
            vec![
                Change::Leave { agent: "a".into() },
                Change::Join {
                    hub: "h3".into(),
                    agent: "a".into(),
                    since_ms: 50
                },
                Change::Subscribe {
                    agent: "a".into(),
                    topic: "n".into()
                },
            ]
        );
        // It leaves: the other one has the id again.
        let c = d.on_gone("h3");
        assert_eq!(c[0], Change::Leave { agent: "a".into() });
        assert_eq!(d.hub_of("a"), Some("h2"));
        // Replace the old: the last to connect keeps it.
        let mut d = Directory::new("me", Duration::from_secs(3), DuplicatePolicy::ReplaceOld);
        d.on_state("h2", vec![entry("a", &[])], t0);
        assert!(d.on_state("h3", vec![early("a")], t0).is_empty());
        assert_eq!(d.hub_of("a"), Some("h2"));
    }
}
