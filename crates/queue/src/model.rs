//! The queue's vocabulary: names, ids, time, configuration, what goes in and what comes out.
//!
//! Owns plain data and validation only; no behaviour beyond checking a name.

use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// Longest queue name, in bytes.
pub const MAX_QUEUE_NAME: usize = 128;

/// A task's id: unique in one store for its whole life (ids are never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u64);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Who consumes: the driver's handle for one consumer (one agent connection's subscription).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConsumerId(pub u64);

/// A checked queue name: 1 to [`MAX_QUEUE_NAME`] bytes, no control characters, no spaces.
///
/// ```
/// use agentwire_queue::QueueName;
/// assert!(QueueName::new("jobs.resize").is_ok());
/// assert!(QueueName::new("").is_err());
/// assert!(QueueName::new("two words").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueName(Box<str>);

impl QueueName {
    /// Checks `name`.
    pub fn new(name: &str) -> Result<Self, QueueError> {
        let bad = name.is_empty()
            || name.len() > MAX_QUEUE_NAME
            || name.chars().any(|c| c.is_control() || c.is_whitespace());
        if bad {
            return Err(QueueError::BadName(
                name.chars().take(MAX_QUEUE_NAME).collect(),
            ));
        }
        Ok(QueueName(name.into()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The time of an event, on both clocks: the monotonic one for deadlines and backoff, the wall
/// clock for what must mean the same after a restart (when a task was enqueued, when a
/// producer id's duplicate window ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time.
    pub instant: Instant,
    /// Milliseconds since the Unix epoch.
    pub unix_ms: u64,
}

impl Now {
    /// Both clocks' readings.
    pub fn new(instant: Instant, unix_ms: u64) -> Self {
        Now { instant, unix_ms }
    }

    /// The same moment `d` later on both clocks (for tests and simulations).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use agentwire_queue::Now;
    /// let t = Now::new(Instant::now(), 1_000);
    /// assert_eq!(t.plus(Duration::from_secs(2)).unix_ms, 3_000);
    /// ```
    pub fn plus(self, d: Duration) -> Self {
        Now {
            instant: self.instant + d,
            unix_ms: self
                .unix_ms
                .saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// How queues behave. The defaults follow NATS JetStream's consumers where they have one
/// (ack wait 30 s, duplicate window 2 minutes); JetStream redelivers forever by default, these
/// queues give up after 5 attempts and keep the task as a dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// How long a consumer has to ack a delivered task before it is handed out again.
    pub ack_wait: Duration,
    /// Deliveries of one task before it becomes a dead letter (at least 1).
    pub max_deliver: u32,
    /// Waits before the next attempt after a failed one: the n-th failure waits `backoff[n-1]`
    /// (the last entry for every later one); empty means at once. A nack with a delay of its own
    /// uses that delay instead.
    pub backoff: Vec<Duration>,
    /// How long a producer id is remembered, so that the same task sent again is dropped.
    pub duplicate_window: Duration,
    /// Tasks one queue may hold (ready, waiting, in flight and dead together).
    pub max_tasks_per_queue: usize,
    /// Bytes of task bodies one queue may hold (ready, waiting, in flight and dead together).
    pub max_queue_bytes: usize,
    /// Bytes of task bodies all queues together may hold (every task is in memory).
    pub max_total_bytes: usize,
    /// Queues holding tasks or consumers at once.
    pub max_queues: usize,
    /// Largest task body, in bytes.
    pub max_task_bytes: usize,
    /// Longest producer id, in bytes.
    pub max_producer_id: usize,
    /// Producer ids remembered at most (all queues together): beyond it, the oldest are
    /// forgotten before their window ends, so that memory stays bounded under any rate
    /// (a task re-sent after its id was forgotten is stored again).
    pub max_producer_ids: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            backoff: vec![
                Duration::from_millis(100),
                Duration::from_secs(1),
                Duration::from_secs(5),
                Duration::from_secs(30),
            ],
            duplicate_window: Duration::from_secs(120),
            max_tasks_per_queue: 1_000_000,
            max_queue_bytes: 256 << 20,
            max_total_bytes: 1 << 30,
            max_queues: 10_000,
            max_task_bytes: 1 << 20,
            max_producer_id: 256,
            max_producer_ids: 1_000_000,
        }
    }
}

/// A task to enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueue {
    /// The queue.
    pub queue: String,
    /// Who sends it (an agent id, handed to the consumer with the task).
    pub sender: String,
    /// The producer's own id for this task: a second task with the same id in the same queue
    /// within the duplicate window is dropped (and answered with the first one's id).
    pub producer_id: Option<String>,
    /// The task's bytes, delivered untouched.
    pub body: Bytes,
}

impl Enqueue {
    /// A task without a producer id.
    pub fn new(queue: impl Into<String>, body: impl Into<Bytes>) -> Self {
        Enqueue {
            queue: queue.into(),
            sender: String::new(),
            producer_id: None,
            body: body.into(),
        }
    }

    /// The same task from `sender`.
    pub fn from_sender(mut self, sender: impl Into<String>) -> Self {
        self.sender = sender.into();
        self
    }

    /// The same task with a producer id.
    pub fn with_producer_id(mut self, id: impl Into<String>) -> Self {
        self.producer_id = Some(id.into());
        self
    }
}

/// What became of an enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    /// The task's id (for a duplicate, the first task's).
    pub task: TaskId,
    /// The producer id was seen within the window: nothing was stored.
    pub duplicate: bool,
}

/// One task handed to one consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// To whom.
    pub consumer: ConsumerId,
    /// Which task (the consumer acks it by this id).
    pub task: TaskId,
    /// Its queue.
    pub queue: QueueName,
    /// Who sent it.
    pub sender: String,
    /// Its bytes.
    pub body: Bytes,
    /// 1 for the first delivery, 2 for the first redelivery, and so on.
    pub attempt: u32,
}

/// Why an attempt ended without an ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    /// The consumer did not ack within the ack wait.
    AckTimeout,
    /// The consumer said it could not do it.
    Nacked,
    /// The consumer went away (disconnected, or stopped consuming).
    ConsumerGone,
}

impl FailReason {
    /// A short stable name (kept with a dead letter, shown by the CLI, used in metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            FailReason::AckTimeout => "ack-timeout",
            FailReason::Nacked => "nacked",
            FailReason::ConsumerGone => "consumer-gone",
        }
    }
}

/// A task that ran out of attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Its id.
    pub task: TaskId,
    /// Its queue.
    pub queue: QueueName,
    /// Deliveries made.
    pub attempts: u32,
    /// How the last one ended.
    pub reason: String,
    /// When it was enqueued (Unix ms).
    pub enqueued_unix_ms: u64,
    /// Its bytes.
    pub body: Bytes,
}

/// One page of a queue's dead letters ([`QueueCore::dead_letters_page`]).
///
/// [`QueueCore::dead_letters_page`]: crate::QueueCore::dead_letters_page
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterPage {
    /// The dead letters, oldest first.
    pub letters: Vec<DeadLetter>,
    /// The last task of this page when more follow: the next page starts after it.
    pub next: Option<TaskId>,
}

/// A refused call. Each leaves the queues as they were.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The queue name is empty, too long, or has spaces or control characters.
    #[error("bad queue name {0:?}: 1 to 128 bytes, no spaces or control characters")]
    BadName(String),
    /// The body is larger than the configured maximum.
    #[error("task of {len} bytes is larger than the limit of {max}")]
    TooLarge {
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The producer id is longer than the configured maximum.
    #[error("producer id of {len} bytes is longer than the limit of {max}")]
    ProducerIdTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The queue holds as many tasks as it may.
    #[error("queue {queue} is full ({max} bytes of tasks)")]
    FullBytes {
        /// The queue.
        queue: String,
        /// The limit in bytes.
        max: usize,
    },
    /// All queues together hold as many bytes as the hub allows.
    #[error("the queues are full ({max} bytes of tasks in all)")]
    AllFull {
        /// The limit in bytes.
        max: usize,
    },
    /// As many queues hold tasks or consumers as the hub allows; this one would be new.
    #[error("too many queues in use ({max}); queue {queue} would be one more")]
    TooManyQueues {
        /// The queue.
        queue: String,
        /// The limit.
        max: usize,
    },
    /// The queue holds its most tasks already.
    #[error("queue {queue} is full ({max} tasks)")]
    Full {
        /// The queue.
        queue: String,
        /// The limit.
        max: usize,
    },
    /// The consumer already consumes another queue (one queue per consumer id).
    #[error("consumer already consumes queue {0}")]
    AlreadyConsuming(String),
    /// No such task is in flight with this consumer (never delivered to it, already acked,
    /// or handed to someone else after its ack wait).
    #[error("task {task} is not in flight with this consumer")]
    NotInFlight {
        /// The task.
        task: TaskId,
    },
    /// Credit of 0: a consumer must be able to take at least one task.
    #[error("a consumer needs room for at least one task in flight")]
    NoCredit,
}

/// Something for the driver to do once the writes before it are durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueAction {
    /// Send this task to this consumer.
    Deliver(Delivery),
    /// A task ran out of attempts and is now a dead letter (for logs and metrics).
    DeadLettered {
        /// The task.
        task: TaskId,
        /// Its queue.
        queue: QueueName,
        /// How its last attempt ended.
        reason: FailReason,
    },
}

/// One queue's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Tasks waiting for a consumer.
    pub ready: usize,
    /// Tasks waiting out a backoff before their next attempt.
    pub waiting: usize,
    /// Tasks delivered and not yet acked.
    pub in_flight: usize,
    /// Dead letters.
    pub dead: usize,
    /// Consumers.
    pub consumers: usize,
}

/// Counts since start (not stored).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Tasks stored.
    pub enqueued: u64,
    /// Enqueues dropped as duplicates of a producer id.
    pub duplicates: u64,
    /// Deliveries, first and later.
    pub delivered: u64,
    /// Deliveries after the first of their task.
    pub redelivered: u64,
    /// Acks.
    pub acked: u64,
    /// Attempts that ended without an ack.
    pub failed: u64,
    /// Tasks that became dead letters.
    pub dead_lettered: u64,
    /// Dead letters replayed.
    pub replayed: u64,
    /// Producer ids forgotten before their window ended (`max_producer_ids`).
    pub producer_ids_forgotten_early: u64,
}
