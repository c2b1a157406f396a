//! Names that belong to the hub: agent ids, destinations and topics beginning with `$`.
//!
//! The hub speaks as [`HUB_ID`](super::HUB_ID) (errors, receipts, presence), publishes
//! join/leave events on [`PRESENCE_TOPIC`](super::PRESENCE_TOPIC), and a cluster's queue
//! keeper stands in as [`QUEUE_OWNER_ID`](super::QUEUE_OWNER_ID). Agents trust those names,
//! so no agent may take them, send to them or publish on them. The one documented use of a
//! `$` name by an agent is subscribing to `$presence`.
//!
//! This module owns the rule only; the hub core applies it at the hello, on every envelope and
//! on every subscribe. It must not route or count anything.

use agentwire_proto::DestinationRef;

use super::queue_owner::QUEUE_OWNER_ID;
use super::PRESENCE_TOPIC;
use agentwire_transport::TransportKind;

pub use agentwire_proto::names::{is_reserved, RESERVED_PREFIX};

/// Why a connection over `transport` may not take `agent_id`, if it may not: a reserved id,
/// except the queue keeper's for the cluster's own connection.
pub(super) fn id_refusal(agent_id: &str, transport: TransportKind) -> Option<String> {
    if !is_reserved(agent_id) {
        return None;
    }
    if agent_id == QUEUE_OWNER_ID && transport == TransportKind::Cluster {
        return None;
    }
    Some(format!(
        "agent ids beginning with {RESERVED_PREFIX:?} are the hub's; {agent_id:?} cannot be taken"
    ))
}

/// Why an agent may not send to `to`, if it may not.
pub(super) fn send_refusal(to: &DestinationRef<'_>) -> Option<String> {
    let (what, name) = match to {
        DestinationRef::Agent(n) => ("agent", *n),
        DestinationRef::Topic(n) => ("topic", *n),
        DestinationRef::Queue(n) => ("queue", *n),
        DestinationRef::Broadcast => return None,
    };
    is_reserved(name).then(|| format!("{what} {name:?} is the hub's: agents may not send to it"))
}

/// Why an agent may not subscribe to `topic`, if it may not: reserved topics other than
/// `$presence`.
pub(super) fn subscribe_refusal(topic: &str) -> Option<String> {
    (is_reserved(topic) && topic != PRESENCE_TOPIC).then(|| {
        format!("topic {topic:?} is the hub's; of its topics agents may subscribe to {PRESENCE_TOPIC:?} only")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_cluster_takes_the_queue_keepers_id_and_nobody_the_others() {
        assert!(id_refusal("worker", TransportKind::Quic).is_none());
        assert!(id_refusal("$hub", TransportKind::Quic).is_some());
        assert!(id_refusal("$hub", TransportKind::Cluster).is_some());
        assert!(id_refusal("$queues", TransportKind::Unix).is_some());
        assert!(id_refusal("$queues", TransportKind::Cluster).is_none());
    }

    #[test]
    fn reserved_destinations_and_topics() {
        assert!(send_refusal(&DestinationRef::Topic("$presence")).is_some());
        assert!(send_refusal(&DestinationRef::Agent("$hub")).is_some());
        assert!(send_refusal(&DestinationRef::Queue("$q")).is_some());
        assert!(send_refusal(&DestinationRef::Agent("a$")).is_none());
        assert!(send_refusal(&DestinationRef::Broadcast).is_none());
        assert!(subscribe_refusal("$presence").is_none());
        assert!(subscribe_refusal("$other").is_some());
        assert!(subscribe_refusal("status").is_none());
    }
}
