//! Who is connected under which id, and who subscribes to what.
//!
//! This module owns the id → connection map, the duplicate-id policy and the topic →
//! subscribers map. Routing reads both under read locks (many readers at once); only
//! joins, leaves and (un)subscriptions write. It must not send or close anything.

use agentwire_sync::RwLockExt;
use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use agentwire_proto::ErrorCode;

use super::conn::Conn;

/// What the hub does when an agent connects with an id that is already connected.
///
/// ```
/// use agentwire_hub::DuplicatePolicy;
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
    type Err = agentwire_proto::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "reject" | "reject-new" => Ok(DuplicatePolicy::RejectNew),
            "replace" | "replace-old" => Ok(DuplicatePolicy::ReplaceOld),
            other => Err(agentwire_proto::UnknownName::new(
                "duplicate policy",
                other,
                "reject or replace",
            )),
        }
    }
}

/// Outcome of registering a connection.
pub(super) enum Registered<D, R> {
    /// The id was free.
    Fresh,
    /// The id was taken; the old connection was removed and must be closed.
    Replaced(Arc<Conn<D, R>>),
}

type Agents<D, R> = HashMap<Arc<str>, Arc<Conn<D, R>>>;
type Topics<D, R> = HashMap<Arc<str>, Vec<Arc<Conn<D, R>>>>;

pub(super) struct Registry<D, R> {
    agents: RwLock<Agents<D, R>>,
    topics: RwLock<Topics<D, R>>,
}

impl<D, R> Default for Registry<D, R> {
    fn default() -> Self {
        Registry {
            agents: RwLock::new(HashMap::new()),
            topics: RwLock::new(HashMap::new()),
        }
    }
}

impl<D, R> Registry<D, R> {
    // Every write below leaves both maps consistent, so a poisoned lock is safe to use.
    fn agents(&self) -> RwLockReadGuard<'_, Agents<D, R>> {
        self.agents.read_or_recover()
    }

    fn agents_mut(&self) -> RwLockWriteGuard<'_, Agents<D, R>> {
        self.agents.write_or_recover()
    }

    fn topics(&self) -> RwLockReadGuard<'_, Topics<D, R>> {
        self.topics.read_or_recover()
    }

    fn topics_mut(&self) -> RwLockWriteGuard<'_, Topics<D, R>> {
        self.topics.write_or_recover()
    }

    /// Registers `conn` under `id` following `policy`.
    pub fn register(
        &self,
        id: &Arc<str>,
        conn: &Arc<Conn<D, R>>,
        policy: DuplicatePolicy,
    ) -> Result<Registered<D, R>, ErrorCode> {
        let mut agents = self.agents_mut();
        match agents.get(id) {
            Some(_) if policy == DuplicatePolicy::RejectNew => Err(ErrorCode::DuplicateAgentId),
            _ => Ok(match agents.insert(id.clone(), conn.clone()) {
                Some(old) => Registered::Replaced(old),
                None => Registered::Fresh,
            }),
        }
    }

    /// Removes `conn` if it is still the one registered under `id`. True if it was.
    pub fn unregister(&self, id: &str, conn: &Arc<Conn<D, R>>) -> bool {
        let mut agents = self.agents_mut();
        match agents.get(id) {
            Some(current) if Arc::ptr_eq(current, conn) => {
                agents.remove(id);
                true
            }
            _ => false,
        }
    }

    pub fn get(&self, id: &str) -> Option<Arc<Conn<D, R>>> {
        self.agents().get(id).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Conn<D, R>>> {
        self.agents().values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.agents().len()
    }

    /// Calls `f` for every registered connection but `except`, under the read lock.
    pub fn for_each_other(&self, except: &Arc<Conn<D, R>>, mut f: impl FnMut(&Arc<Conn<D, R>>)) {
        for conn in self.agents().values() {
            if !Arc::ptr_eq(conn, except) {
                f(conn);
            }
        }
    }

    /// Calls `f` for every subscriber of `topic` but `except`, under the read lock.
    pub fn for_each_subscriber(
        &self,
        topic: &str,
        except: Option<&Arc<Conn<D, R>>>,
        mut f: impl FnMut(&Arc<Conn<D, R>>),
    ) {
        if let Some(subs) = self.topics().get(topic) {
            for conn in subs {
                if except.is_none_or(|e| !Arc::ptr_eq(conn, e)) {
                    f(conn);
                }
            }
        }
    }

    /// Adds `conn` to `topic`'s subscribers (the caller made sure it was not one yet).
    pub fn subscribe(&self, topic: &Arc<str>, conn: &Arc<Conn<D, R>>) {
        self.topics_mut()
            .entry(topic.clone())
            .or_default()
            .push(conn.clone());
    }

    /// Removes `conn` from each of `topics`.
    pub fn unsubscribe<'a>(
        &self,
        topics: impl IntoIterator<Item = &'a Arc<str>>,
        conn: &Arc<Conn<D, R>>,
    ) {
        let mut map = self.topics_mut();
        for topic in topics {
            if let Some(subs) = map.get_mut(topic) {
                subs.retain(|c| !Arc::ptr_eq(c, conn));
                if subs.is_empty() {
                    map.remove(topic);
                }
            }
        }
    }
}
