//! Several agentwire hubs that behave as one agent space, over a NATS cluster
//! (`agentwire hub --cluster nats://HOST:PORT[,…]`).
//!
//! Every hub publishes the state of its own agents (ids and topics) on
//! `agentwire.<cluster>.presence.<hub>` and listens for the others'. For each agent of another hub it
//! runs a stand-in connection on its own hub core (transport `cluster`: [`link`]), so the core
//! routes to remote agents exactly as to local ones: a direct message, a request and its answer,
//! a topic message for a remote subscriber, a broadcast. What the core hands a stand-in is
//! published to the agent's hub on `agentwire.<cluster>.hub.<id>.from.<hub>`, which feeds it to its core as
//! coming from the sender's stand-in there. `$presence` shows every hub's agents, because each
//! hub sees the stand-ins join and leave.
//!
//! The cluster's work queues are kept by one hub at a time, in a JetStream stream
//! ([`store`]), while it holds a lease in a JetStream key-value bucket (the owner module,
//! [`lease`]); the other hubs pass their agents' queue work to it through a `$queues`
//! stand-in, and another hub takes the queues over when it stops.
//!
//! This crate owns the subjects, the presence messages and the directory of remote agents
//! ([`presence`], sans-IO), the stand-in connections ([`link`]), the queue owner's lease and
//! store, and the NATS wiring ([`node`]). It must not route or decide about tasks: that stays
//! the hub cores'.
//! A hub's own error for a request of another hub's agent travels back to that hub, which
//! settles the request with it.

#![warn(missing_docs)]

mod error;
pub mod lease;
pub mod link;
pub mod node;
mod owner;
pub mod presence;
pub mod store;

pub use error::ClusterError;
pub use node::{Cluster, ClusterConfig, QueuePlacement, ANNOUNCE_GAP};
