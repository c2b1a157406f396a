//! Who is on which hub: the presence messages hubs publish, and the directory each hub keeps
//! of the others' agents (sans-IO: it takes messages and `now`, and returns changes).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One agent of a hub and the topics it subscribes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentEntry {
    /// Its id.
    pub id: String,
    /// Its topics.
    #[serde(default)]
    pub topics: BTreeSet<String>,
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

/// What changed in the directory, for the stand-ins to follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An agent of `hub` appeared.
    Join {
        /// Its hub.
        hub: String,
        /// The agent.
        agent: String,
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
    agents: BTreeMap<String, BTreeSet<String>>,
    last_seen: Instant,
}

/// The agents of every other hub, from their presence messages.
///
/// ```
/// use std::time::{Duration, Instant};
/// use agentwire_cluster::presence::{AgentEntry, Change, Directory};
/// let mut d = Directory::new("me", Duration::from_secs(3));
/// let now = Instant::now();
/// let a = AgentEntry { id: "a".into(), topics: ["news".to_string()].into() };
/// let changes = d.on_state("h2", vec![a], now);
/// assert_eq!(changes[0], Change::Join { hub: "h2".into(), agent: "a".into() });
/// assert_eq!(d.hub_of("a"), Some("h2"));
/// assert_eq!(d.expire(now + Duration::from_secs(4)), vec![Change::Leave { agent: "a".into() }]);
/// ```
pub struct Directory {
    me: String,
    expiry: Duration,
    hubs: HashMap<String, RemoteHub>,
    /// Which hub each remote agent is on (the first hub that announced it).
    owner: HashMap<String, String>,
}

impl Directory {
    /// A directory for hub `me`; a hub silent for `expiry` is taken as gone.
    pub fn new(me: impl Into<String>, expiry: Duration) -> Self {
        Directory {
            me: me.into(),
            expiry,
            hubs: HashMap::new(),
            owner: HashMap::new(),
        }
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
        let new: BTreeMap<String, BTreeSet<String>> =
            agents.into_iter().map(|a| (a.id, a.topics)).collect();
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
        let mut changes = Vec::new();
        for (id, topics) in &old {
            if !new.contains_key(id) {
                self.leave(hub, id, &mut changes);
            } else if self.owner.get(id).map(String::as_str) == Some(hub) {
                for t in topics.difference(&new[id]) {
                    changes.push(Change::Unsubscribe {
                        agent: id.clone(),
                        topic: t.clone(),
                    });
                }
            }
        }
        for (id, topics) in &new {
            let before = old.get(id);
            if before.is_none() {
                if self.owner.contains_key(id) {
                    // Already on another hub: the first announcement keeps it.
                    continue;
                }
                self.owner.insert(id.clone(), hub.to_owned());
                changes.push(Change::Join {
                    hub: hub.to_owned(),
                    agent: id.clone(),
                });
            }
            if self.owner.get(id).map(String::as_str) != Some(hub) {
                continue;
            }
            let empty = BTreeSet::new();
            for t in topics.difference(before.unwrap_or(&empty)) {
                changes.push(Change::Subscribe {
                    agent: id.clone(),
                    topic: t.clone(),
                });
            }
        }
        changes
    }

    /// Hub `hub` went away.
    pub fn on_gone(&mut self, hub: &str) -> Vec<Change> {
        let mut changes = Vec::new();
        if let Some(h) = self.hubs.remove(hub) {
            for id in h.agents.keys() {
                self.leave(hub, id, &mut changes);
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

    fn leave(&mut self, hub: &str, id: &str, changes: &mut Vec<Change>) {
        if self.owner.get(id).map(String::as_str) == Some(hub) {
            self.owner.remove(id);
            changes.push(Change::Leave {
                agent: id.to_owned(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, topics: &[&str]) -> AgentEntry {
        AgentEntry {
            id: id.into(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
        }
    }

    #[test]
    fn joins_leaves_and_topics_follow_the_states() {
        let mut d = Directory::new("me", Duration::from_secs(3));
        let t0 = Instant::now();
        assert_eq!(d.on_state("me", vec![entry("x", &[])], t0), vec![]);
        let c = d.on_state("h2", vec![entry("a", &["n"]), entry("b", &[])], t0);
        assert!(c.contains(&Change::Join {
            hub: "h2".into(),
            agent: "a".into()
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
        // Another hub announcing the same id does not take it over.
        assert!(d.on_state("h3", vec![entry("a", &[])], t0).is_empty());
        assert_eq!(d.hub_of("a"), Some("h2"));
        assert_eq!(d.on_gone("h2"), vec![Change::Leave { agent: "a".into() }]);
        assert_eq!(d.hub_of("a"), None);
    }

    #[test]
    fn silent_hubs_expire() {
        let mut d = Directory::new("me", Duration::from_secs(3));
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
}
