//! Durable work queues for agentwire's hub (issue 16).
//!
//! A coordinator sends a task to `queue:NAME`; the hub stores it before it acknowledges the
//! sender, hands it to one consumer of that queue at a time (competing consumers), waits for
//! that consumer's ack, and hands it out again after an ack deadline, a nack or the
//! consumer's disconnect, after a backoff. After `max_deliver` attempts the task becomes a dead
//! letter, which can be listed and replayed. A task sent again with the same producer id within
//! the duplicate window is dropped as a duplicate. These are the promises of NATS JetStream's
//! work-queue streams (ack wait, max deliver, backoff, `Nats-Msg-Id`), which agent builders
//! already know.
//!
//! The crate owns two things and nothing else:
//! - [`QueueCore`], a sans-IO state machine like quinn-proto's `Connection`: it takes events
//!   (`enqueue`, `consume`, `ack`, `nack`, `consumer_gone`, `on_timeout`) with an explicit
//!   [`Now`], and returns [`QueueAction`]s (deliveries) and the [`StoreOp`]s that make its state
//!   durable. It reads no clock, owns no socket, spawns nothing.
//! - The [`QueueStore`] trait and two stores: [`FileStore`] (one redb file) and
//!   [`MemoryStore`] (no disk: queues that live as long as the process).
//!
//! It must not know about frames, transports or agents' identities: the hub's driver maps
//! connections to [`ConsumerId`]s and its wire format to these calls.
//!
//! # The driver's one rule
//!
//! After each batch of calls, the driver applies [`QueueCore::take_writes`] to its store and
//! only then acts on what the calls returned: it acknowledges a producer, or delivers a task,
//! only once the write that records it is durable. Calls may be batched before one write
//! (group commit); that is how a store with an `fsync` per transaction keeps up.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use agentwire_queue::{ConsumerId, Enqueue, MemoryStore, Now, QueueAction, QueueConfig, QueueCore, QueueStore};
//!
//! let mut store = MemoryStore::default();
//! let now = Now::new(Instant::now(), 1_700_000_000_000);
//! let mut core = QueueCore::recover(QueueConfig::default(), store.load().unwrap(), now);
//! let sent = core.enqueue(Enqueue::new("jobs", "resize photo 7"), now).unwrap();
//! core.consume(ConsumerId(1), "jobs", 1, now).unwrap();
//! store.apply(&core.take_writes()).unwrap(); // durable first ...
//! let Some(QueueAction::Deliver(d)) = core.poll_action() else { panic!() };
//! assert_eq!((d.consumer, d.task, &d.body[..]), (ConsumerId(1), sent.task, &b"resize photo 7"[..]));
//! core.ack(ConsumerId(1), d.task, now).unwrap(); // ... then the consumer's ack removes it
//! store.apply(&core.take_writes()).unwrap();
//! assert_eq!(store.load().unwrap().tasks.len(), 0);
//! ```

#![warn(missing_docs)]

mod core;
mod file_store;
mod model;
mod record;
mod store;

pub use crate::core::QueueCore;
pub use crate::file_store::FileStore;
pub use crate::model::{
    ConsumerId, DeadLetter, DeadLetterPage, Delivery, Enqueue, Enqueued, FailReason, Now,
    QueueAction, QueueConfig, QueueError, QueueName, QueueStats, TaskId, Totals, MAX_QUEUE_NAME,
};
pub use crate::record::{RecordError, TaskRecord};
pub use crate::store::{
    DedupeRecord, MemoryStore, Quarantined, QueueStore, Recovered, StoreError, StoreOp,
};
