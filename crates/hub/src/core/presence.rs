//! Telling others that an agent joined or left: the `join`/`leave` events on
//! [`PRESENCE_TOPIC`], and `Action::AgentsChanged` for a cluster.
//!
//! This module owns those two announcements; it must not track presence itself (the
//! registry does).

use std::sync::Arc;

use agentwire_proto::{Destination, ErrorCode, Kind, Priority};

use super::conn::Conn;
use super::routing::Forward;
use super::{Action, HubCore, Now, PRESENCE_TOPIC, QUEUE_OWNER_ID};
use agentwire_transport::{SendClass, TransportKind};

impl<D, R> HubCore<D, R> {
    /// [`Action::AgentsChanged`], unless `conn` is a cluster's own (a stand-in or the queue
    /// owner's connection: the cluster announces only this hub's agents).
    pub(super) fn agents_changed(&self, conn: &Arc<Conn<D, R>>, out: &mut Vec<Action<D, R>>) {
        if conn.transport() != TransportKind::Cluster {
            out.push(Action::AgentsChanged);
        }
    }

    pub(super) fn publish_presence(
        &self,
        conn: &Arc<Conn<D, R>>,
        event: &str,
        reason: Option<ErrorCode>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let Some(reg) = conn.registration() else {
            return;
        };
        if &*reg.agent_id == QUEUE_OWNER_ID {
            return; // the cluster's own connection, not an agent
        }
        let mut env = self
            .hub_envelope(Destination::topic(PRESENCE_TOPIC), Kind::Event, now)
            .with_priority(Priority::High)
            .with_header("event", event)
            .with_header("agent", reg.agent_id.to_string())
            .with_header("role", reg.role.clone());
        if let Some(code) = reason {
            env = env.with_header("reason", code.name());
        }
        let frames = Forward::owned(&env);
        self.registry
            .for_each_subscriber(PRESENCE_TOPIC, Some(conn), |target| {
                self.fan_out(
                    target,
                    &frames,
                    SendClass::Message(Priority::High),
                    Kind::Event,
                    None,
                    out,
                );
            });
    }
}
