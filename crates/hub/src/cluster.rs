//! The hub's side of a cluster (agentwire-cluster joins hubs through NATS): what the hub tells
//! the cluster ([`ClusterHooks`], which the cluster implements) and what the cluster hands the
//! hub (the [`Hub`] methods here: other hubs' answers and deliveries, and the work queues
//! coming and going).
//!
//! This module owns those entry points and the hook; it must not know NATS, presence
//! messages or leases (the cluster's), nor route anything itself (the core does, in
//! `core/from_cluster.rs` and `core/queue_owner.rs`). A cluster's agents of other hubs reach
//! this one as ordinary connections of transport `cluster` ([`Hub::serve_connection`]).

use agentwire_sync::RwLockExt;
use std::sync::Arc;
use std::time::Duration;

use crate::{apply, store, Hub, Now};

/// What a hub tells the cluster it is part of. agentwire-cluster implements it and hands it
/// to [`Hub::join_cluster`].
///
/// The hub calls it on the task that made the change (a connection's reader, the timer): it
/// must return at once (wake a task of the cluster's, never block or wait).
pub trait ClusterHooks: Send + Sync + 'static {
    /// An agent of this hub (not a cluster's stand-in) joined, left, subscribed or
    /// unsubscribed: what the cluster announces to its other hubs ([`Hub::agents`]) changed.
    fn agents_changed(&self);
}

/// Why a hub could not take the work queues over ([`Hub::take_over_queues`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TakeOverError {
    /// The hub keeps its queues in a store already.
    #[error("this hub keeps its work queues in a store already")]
    HasStore,
    /// The store could not be read.
    #[error("cannot take the work queues over")]
    Store(#[source] agentwire_queue::StoreError),
}

impl Hub {
    /// This hub is part of a cluster from now on: `hooks` hears when its agents change. A
    /// hub is part of one cluster at a time; joining another replaces the hooks.
    pub fn join_cluster(&self, hooks: Arc<dyn ClusterHooks>) {
        *self.inner.cluster.write_or_recover() = Some(hooks);
    }

    /// This hub is no longer part of the cluster whose `hooks` these are: nothing hears of its
    /// agents any more. Hooks another cluster put in since are kept.
    pub fn leave_cluster(&self, hooks: &Arc<dyn ClusterHooks>) {
        let mut slot = self.inner.cluster.write_or_recover();
        if slot.as_ref().is_some_and(|h| Arc::ptr_eq(h, hooks)) {
            slot.take();
        }
    }

    /// From now on this hub keeps the work queues, in `store` (a cluster's new queue owner):
    /// it starts with what the store holds, and the consumers of its agents that consumed
    /// through the previous owner consume here. Queue work stops going to the
    /// [`QUEUE_OWNER_ID`](crate::QUEUE_OWNER_ID) connection. An error if the store cannot be read, or if the hub
    /// has a store already (once per hub).
    ///
    /// ```
    /// use agentwire_hub::{Hub, HubConfig};
    /// use agentwire_hub::metrics::HubMetrics;
    /// use agentwire_queue::MemoryStore;
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let hub = Hub::new(HubConfig::default(), HubMetrics::new());
    /// hub.take_over_queues(Box::new(MemoryStore::default())).unwrap();
    /// assert!(hub.take_over_queues(Box::new(MemoryStore::default())).is_err());
    /// # });
    /// ```
    pub fn take_over_queues(
        &self,
        mut store: Box<dyn agentwire_queue::QueueStore>,
    ) -> Result<(), TakeOverError> {
        if self.inner.store_slot().is_some() {
            return Err(TakeOverError::HasStore);
        }
        let recovered = store.load().map_err(TakeOverError::Store)?;
        let (writer, feed) = store::StoreWriter::channel();
        {
            let mut slot = self.inner.store_slot();
            if slot.is_some() {
                return Err(TakeOverError::HasStore);
            }
            *slot = Some(writer);
        }
        feed.start(store, Arc::downgrade(&self.inner));
        let mut actions = Vec::new();
        self.inner
            .core
            .take_over_queues(recovered, Now::system(), &mut actions);
        apply(&self.inner, &mut actions);
        Ok(())
    }

    /// Whether queue work goes to another hub now (through a [`QUEUE_OWNER_ID`](crate::QUEUE_OWNER_ID) connection).
    pub fn queues_elsewhere(&self) -> bool {
        self.inner.core.queues_elsewhere()
    }

    /// This hub no longer keeps the cluster's work queues (it lost the lease): its store is
    /// closed (waiting up to 2 s for its thread), requests waiting on queue writes fail with
    /// `cancelled`, and queue work goes to the [`QUEUE_OWNER_ID`](crate::QUEUE_OWNER_ID) connection again once one
    /// is registered; its agents' consumers are named to the next owner by
    /// [`queues_moved`](Self::queues_moved). The hub may take the queues over again later.
    pub fn give_up_queues(&self) {
        let writer = self.inner.store_slot().take();
        if let Some(writer) = writer {
            writer.stop(Duration::from_secs(2));
        }
        let mut actions = Vec::new();
        self.inner.core.give_up_queues(Now::system(), &mut actions);
        apply(&self.inner, &mut actions);
    }

    /// Another hub keeps the work queues now (reached through the [`QUEUE_OWNER_ID`](crate::QUEUE_OWNER_ID)
    /// connection): the consumers of this hub's agents are named to it again.
    pub fn queues_moved(&self) {
        let mut actions = Vec::new();
        self.inner.core.queues_moved(&mut actions);
        apply(&self.inner, &mut actions);
    }

    /// An answer another hub made for a request of one of this hub's agents (`frame`: its
    /// error, or the queue owner's response; MessagePack): it settles the request if that
    /// still waits on another hub's agent or on the queue owner. `false` when it settled
    /// nothing.
    pub fn answer_from_cluster(&self, frame: bytes::Bytes) -> bool {
        let mut actions = Vec::new();
        let settled = self
            .inner
            .core
            .answer_from_cluster(frame, Now::system(), &mut actions);
        apply(&self.inner, &mut actions);
        settled
    }

    /// A task the queue owner delivers to `agent`, a consumer on this hub (`frame`: the
    /// delivery envelope's frame, MessagePack). `false` when the agent is not here or the
    /// frame is not a delivery.
    pub fn deliver_from_owner(&self, agent: &str, frame: bytes::Bytes) -> bool {
        let mut actions = Vec::new();
        let queued = self
            .inner
            .core
            .deliver_from_owner(agent, frame, &mut actions);
        apply(&self.inner, &mut actions);
        queued
    }
}
