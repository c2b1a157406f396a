//! Where queues are kept: the [`QueueStore`] trait, the writes it takes, what it gives back
//! after a restart, and [`MemoryStore`].
//!
//! Owns the contract between [`QueueCore`](crate::QueueCore) and any store: a store applies a
//! batch of [`StoreOp`]s atomically (all or none) and durably before `apply` returns, and
//! `load` returns exactly what the applied batches left. It must not interpret tasks: the core
//! decides, the store keeps. A later store (NATS JetStream, for several hubs) implements the
//! same trait.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use crate::model::{QueueName, TaskId};
use crate::record::{RecordError, TaskRecord};

/// One write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreOp {
    /// Store a task, or replace the stored one with the same id.
    Put(TaskRecord),
    /// Forget a task (acked).
    Delete(TaskId),
    /// Remember a producer id until `expires_unix_ms`.
    PutDedupe(DedupeRecord),
    /// Forget a producer id (its window ended).
    DeleteDedupe {
        /// Its queue.
        queue: QueueName,
        /// The producer id.
        producer_id: String,
    },
}

/// A remembered producer id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupeRecord {
    /// Its queue.
    pub queue: QueueName,
    /// The producer id.
    pub producer_id: String,
    /// The task it named.
    pub task: TaskId,
    /// When the duplicate window ends (Unix ms).
    pub expires_unix_ms: u64,
}

/// What a store holds, read back at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Every stored task, in id order.
    pub tasks: Vec<TaskRecord>,
    /// Every remembered producer id.
    pub dedupe: Vec<DedupeRecord>,
    /// The lowest id never given out.
    pub next_id: u64,
    /// Records that could not be read, left out of `tasks` (and moved aside where the store
    /// can): one bad record must not stop a hub from serving every other task.
    pub quarantined: Vec<Quarantined>,
}

/// A stored record that could not be read, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// Where it is (the task's key).
    pub key: String,
    /// Why it could not be read.
    pub reason: String,
}

/// A store that failed. Every variant names the store's file where there is one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be opened or created.
    #[error("cannot open the queue store {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A stored task cannot be read.
    #[error("the queue store {path} is damaged: task {task}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The task.
        task: TaskId,
        /// Why.
        #[source]
        source: RecordError,
    },
    /// Reading failed.
    #[error("cannot read the queue store {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A write failed: nothing of its batch was kept.
    #[error("cannot write to the queue store {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// The error and every cause after it, as one line (`Display` shows this error alone and
    /// keeps the causes in `source()`, as the Rust API guidelines ask).
    ///
    /// ```
    /// use agentwire_queue::FileStore;
    /// let dir = tempfile::tempdir().unwrap();
    /// std::fs::write(dir.path().join("queues.redb"), [7u8; 4096]).unwrap();
    /// let e = FileStore::open(dir.path()).err().unwrap();
    /// assert!(e.to_string().ends_with("queues.redb"));
    /// assert!(e.with_causes().len() > e.to_string().len());
    /// ```
    pub fn with_causes(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            let next = c.to_string();
            // Some errors repeat their source's text in their own.
            if !text.ends_with(&next) {
                text.push_str(": ");
                text.push_str(&next);
            }
            cause = c.source();
        }
        text
    }
}

/// Keeps queues. See the module doc for the contract.
pub trait QueueStore: Send {
    /// Everything stored.
    fn load(&mut self) -> Result<Recovered, StoreError>;
    /// Applies `ops` in order, all or none, durably.
    fn apply(&mut self, ops: &[StoreOp]) -> Result<(), StoreError>;
}

/// A store in memory: queues that live as long as the process (the hub's default when no
/// store directory is given), and a store that tests can "restart" from.
///
/// ```
/// use agentwire_queue::{MemoryStore, QueueStore};
/// let mut s = MemoryStore::default();
/// s.apply(&[]).unwrap();
/// assert!(s.load().unwrap().tasks.is_empty());
/// ```
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    tasks: BTreeMap<TaskId, TaskRecord>,
    dedupe: HashMap<(QueueName, String), DedupeRecord>,
    next_id: u64,
}

impl QueueStore for MemoryStore {
    fn load(&mut self) -> Result<Recovered, StoreError> {
        Ok(Recovered {
            tasks: self.tasks.values().cloned().collect(),
            dedupe: self.dedupe.values().cloned().collect(),
            next_id: self.next_id,
            quarantined: Vec::new(),
        })
    }

    fn apply(&mut self, ops: &[StoreOp]) -> Result<(), StoreError> {
        for op in ops {
            match op {
                StoreOp::Put(r) => {
                    self.next_id = self.next_id.max(r.id.0.saturating_add(1));
                    self.tasks.insert(r.id, r.clone());
                }
                StoreOp::Delete(id) => {
                    self.tasks.remove(id);
                }
                StoreOp::PutDedupe(d) => {
                    self.dedupe
                        .insert((d.queue.clone(), d.producer_id.clone()), d.clone());
                }
                StoreOp::DeleteDedupe { queue, producer_id } => {
                    self.dedupe.remove(&(queue.clone(), producer_id.clone()));
                }
            }
        }
        Ok(())
    }
}
