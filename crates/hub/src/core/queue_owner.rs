//! Queues kept by another hub: what the hub core does with queue work while a connection
//! registered as [`QUEUE_OWNER_ID`] stands for the hub that keeps the queues (a cluster's
//! queue owner, issue 18).
//!
//! While that connection is registered, nothing queue-related is decided here:
//! - an envelope to `queue:NAME` goes to it like a message or request to an agent (a request
//!   waits for its answer as any request does, reply slot and deadline included);
//! - `Consume`, `Ack` and `Nack` frames go to it as queue operations
//!   ([`QUEUE_OP_HEADER`](super::QUEUE_OP_HEADER) `consume`, `ack`, `nack`) from the agent
//!   that sent them, and this hub remembers each agent's consumers, so that it can name them
//!   again to a new owner ([`HubCore::queues_moved`]) or take them over itself
//!   ([`HubCore::restore_queues`]);
//! - the owner's deliveries arrive through [`HubCore::deliver_from_owner`].
//!
//! It must not keep tasks or decide who gets one: the owner's queue core does.

use std::collections::HashMap;
use std::sync::Arc;

use agentwire_proto::{Destination, Envelope, Kind, Priority};

use super::conn::Conn;
use super::queue_control::{AgentConsumers, NamedConsumer, QueueControl};
use super::{Action, HubCore};
use agentwire_proto::names::{CREDIT_HEADER, DELAY_HEADER, QUEUE_OP_HEADER, TASK_ID_HEADER};
use agentwire_transport::TransportKind;

/// The agent id of the connection that stands for the hub keeping the queues. Only a
/// connection of transport `cluster` may take it.
pub use agentwire_proto::names::QUEUE_OWNER_ID;

/// The queue named in an `ack` or `nack` operation sent to the owner: the task's id is what
/// counts there.
const SETTLE_QUEUE: &str = "*";

/// Why a request waiting on the hub that kept the work queues failed when that changed.
pub(super) const OWNER_CHANGED: &str = "the hub keeping the work queues changed before \
     answering; send again (with a producer id, the task is stored once)";

impl<D, R> HubCore<D, R> {
    /// The connection standing for the queues' owner, when the queues are kept elsewhere.
    pub(super) fn queue_owner(&self) -> Option<Arc<Conn<D, R>>> {
        if self.lock_queues().taken_over {
            return None;
        }
        self.registry
            .get(QUEUE_OWNER_ID)
            .filter(|c| c.transport() == TransportKind::Cluster)
    }

    /// Whether queue work goes to another hub now (a [`QUEUE_OWNER_ID`] connection is
    /// registered and this hub has not taken the queues over).
    pub fn queues_elsewhere(&self) -> bool {
        self.queue_owner().is_some()
    }

    /// Passes a `Consume`, `Ack` or `Nack` of `conn` on to `owner` as a queue operation.
    pub(super) fn to_owner(
        &self,
        owner: &Arc<Conn<D, R>>,
        conn: &Arc<Conn<D, R>>,
        what: QueueControl,
        out: &mut Vec<Action<D, R>>,
    ) {
        let Some(reg) = conn.registration() else {
            return;
        };
        let env = op_envelope(&reg.agent_id, what);
        self.push_hub_envelope(owner, &env, Priority::Medium, None, out);
    }

    /// Remembers (or, with credit 0, forgets) that agent `conn` of this hub consumes `queue`,
    /// whoever keeps the queues now: to name it to the next owner, or to consume here when
    /// this hub takes the queues over. Stand-ins are not remembered (their own hub names
    /// them).
    pub(super) fn remember_consumer(&self, conn: &Arc<Conn<D, R>>, queue: &str, credit: u32) {
        if conn.transport() == TransportKind::Cluster {
            return;
        }
        let mut q = self.lock_queues();
        let entry = q
            .agent_consumers
            .entry(conn.id())
            .or_insert_with(|| AgentConsumers {
                conn: Arc::downgrade(conn),
                queues: HashMap::new(),
            });
        match credit {
            0 => entry.queues.remove(queue),
            c => entry.queues.insert(queue.to_owned(), c),
        };
    }

    /// This hub no longer keeps the queues (a cluster's owner that lost its lease): they go
    /// back to memory, empty (the store has them; the next owner reads them), requests waiting
    /// on writes fail with `cancelled`, and queue work goes to a
    /// [`QUEUE_OWNER_ID`] connection again. The consumers of agents here are kept, to be
    /// named to the next owner ([`queues_moved`](Self::queues_moved)).
    pub fn give_up_queues(&self, now: super::Now, out: &mut Vec<Action<D, R>>) {
        let waiting = {
            let mut q = self.lock_queues();
            let waiting = q.take_pending();
            let memory = super::queues::HubQueues::in_memory(self.config.queue.clone(), now);
            q.replace(memory);
            waiting
        };
        self.fail_deferred(
            waiting,
            agentwire_proto::ErrorCode::Cancelled,
            OWNER_CHANGED,
            now,
            out,
        );
    }

    /// The consumers of agents here, as (connection, queue, credit), for a new owner.
    pub(super) fn agent_consumers(&self) -> Vec<NamedConsumer<D, R>> {
        let q = self.lock_queues();
        let mut all = Vec::new();
        for rc in q.agent_consumers.values() {
            let Some(conn) = rc.conn.upgrade() else {
                continue;
            };
            for (queue, credit) in &rc.queues {
                all.push(NamedConsumer {
                    conn: conn.clone(),
                    queue: queue.clone(),
                    credit: *credit,
                });
            }
        }
        all
    }

    /// Another hub keeps the queues now: every consumer of an agent here is named to it again
    /// (what the old owner had in flight, the new one delivers again).
    ///
    /// ```
    /// use agentwire_hub::{CoreConfig, HubCore, Now};
    /// use agentwire_hub::metrics::HubMetrics;
    /// let core: HubCore<(), ()> = HubCore::new(CoreConfig::default(), HubMetrics::new(), Now::system());
    /// let mut out = Vec::new();
    /// core.queues_moved(&mut out); // no owner connection, no consumers: nothing to do
    /// assert!(out.is_empty());
    /// ```
    pub fn queues_moved(&self, out: &mut Vec<Action<D, R>>) {
        let Some(owner) = self.queue_owner() else {
            return;
        };
        for NamedConsumer {
            conn,
            queue,
            credit,
        } in self.agent_consumers()
        {
            let Some(reg) = conn.registration() else {
                continue;
            };
            let env = op_envelope(&reg.agent_id, QueueControl::Consume { queue, credit });
            self.push_hub_envelope(&owner, &env, Priority::Medium, None, out);
        }
    }
}

/// The operation envelope for `what`, from `agent`.
fn op_envelope(agent: &str, what: QueueControl) -> Envelope {
    match what {
        QueueControl::Consume { queue, credit } => {
            Envelope::new(0, agent, Destination::Queue(queue), Kind::Event)
                .with_header(QUEUE_OP_HEADER, "consume")
                .with_header(CREDIT_HEADER, credit.to_string())
        }
        QueueControl::Settle { task, nack } => {
            let to = Destination::Queue(SETTLE_QUEUE.to_owned());
            let env = Envelope::new(0, agent, to, Kind::Event)
                .with_header(TASK_ID_HEADER, task.to_string());
            match nack {
                None => env.with_header(QUEUE_OP_HEADER, "ack"),
                Some(n) => {
                    let env = env.with_header(QUEUE_OP_HEADER, "nack");
                    match n.delay_ms {
                        Some(ms) => env.with_header(DELAY_HEADER, ms.to_string()),
                        None => env,
                    }
                }
            }
        }
    }
}
