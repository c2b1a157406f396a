//! The agent's side of durable work queues: enqueue a task and wait until the hub has stored
//! it, consume a queue, ack or nack what it delivers.
//!
//! Owns only the mapping of these calls to envelopes and frames (`queue:NAME` requests, and
//! the `Consume`, `Ack`, `Nack` frames of docs/protocol.md); delivery, redelivery and dead
//! letters are the hub's (`agentwire_queue`). Tasks arrive through
//! [`Agent::recv`](crate::agent::Agent::recv) like every message: [`QueueTask::from_envelope`]
//! recognises them.

use std::time::Duration;

use agentwire_proto::{Consume, Destination, Envelope, Frame, Kind, Nack, Priority};
use bytes::Bytes;

use crate::agent::{AgentError, AgentHandle};
use agentwire_proto::names::{
    ATTEMPT_HEADER, DUPLICATE_HEADER, PRODUCER_ID_HEADER, QUEUE_OP_HEADER, TASK_ID_HEADER,
};

/// An operation on a queue, answered by the hub with JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueOp {
    /// Counts: `{"queue", "ready", "waiting", "in_flight", "dead", "consumers"}`.
    Stats,
    /// Dead letters, oldest first: `[{"task", "attempts", "reason", "enqueued_unix_ms",
    /// "body_bytes", "body"}]` (`body` as text, invalid UTF-8 replaced). The hub answers one
    /// page at a time; [`Agent::queue_op`] gathers every page ([`Agent::dead_letters_page`]
    /// takes one).
    DeadLetters,
    /// Puts dead letters (one, or all) back in line with a fresh count: `{"replayed": n}`.
    Replay(Option<u64>),
    /// Deletes dead letters (one, or all): `{"discarded": n}`.
    Discard(Option<u64>),
}

impl QueueOp {
    fn name(self) -> &'static str {
        match self {
            QueueOp::Stats => "stats",
            QueueOp::DeadLetters => "dead-letters",
            QueueOp::Replay(_) => "replay",
            QueueOp::Discard(_) => "discard",
        }
    }
}

/// The hub's word that it stored a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskReceipt {
    /// The task's id in its queue (for a duplicate, the first task's).
    pub task: u64,
    /// The producer id was seen within the queue's duplicate window: nothing new was stored.
    pub duplicate: bool,
}

/// A task a queue delivered to this agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueTask {
    /// Its queue.
    pub queue: String,
    /// Its id: ack or nack it with this.
    pub task: u64,
    /// 1 for the first delivery, more for redeliveries.
    pub attempt: u32,
    /// The agent that enqueued it.
    pub sender: String,
    /// Its bytes.
    pub body: Bytes,
}

impl QueueTask {
    /// The task in `env`, if `env` is a queue delivery.
    ///
    /// ```
    /// use agentwire::agent_queues::QueueTask;
    /// use agentwire_proto::{Destination, Envelope, Kind};
    /// let env = Envelope::new(7, "boss", Destination::queue("jobs"), Kind::Task)
    ///     .with_header("attempt", "2")
    ///     .with_body(&b"resize"[..]);
    /// let t = QueueTask::from_envelope(&env).unwrap();
    /// assert_eq!((t.queue.as_str(), t.task, t.attempt), ("jobs", 7, 2));
    /// ```
    pub fn from_envelope(env: &Envelope) -> Option<QueueTask> {
        let Destination::Queue(queue) = &env.to else {
            return None;
        };
        if env.kind != Kind::Task {
            return None;
        }
        Some(QueueTask {
            queue: queue.clone(),
            task: env.id,
            attempt: env
                .headers
                .get(ATTEMPT_HEADER)
                .and_then(|a| a.parse().ok())
                .unwrap_or(1),
            sender: env.from.clone(),
            body: env.body.clone(),
        })
    }
}

impl AgentHandle {
    /// Sends a task to the work queue `queue` and waits until the hub has stored it (with a
    /// store, on disk). `producer_id`, when given, makes a second task with the same id within
    /// the queue's duplicate window a duplicate that the hub drops: re-send with the same id
    /// after a timeout, and the task is stored once.
    pub async fn enqueue(
        &self,
        queue: &str,
        body: impl Into<Bytes>,
        producer_id: Option<&str>,
        timeout: Duration,
    ) -> Result<TaskReceipt, AgentError> {
        let mut env = self
            .envelope(Destination::queue(queue), Kind::Request)
            .with_body(body);
        if let Some(p) = producer_id {
            env = env.with_header(PRODUCER_ID_HEADER, p);
        }
        let answer = self.request_envelope(env, timeout).await?;
        let task = answer
            .headers
            .get(TASK_ID_HEADER)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| AgentError::Config("the hub's receipt has no task id".into()))?;
        Ok(TaskReceipt {
            task,
            duplicate: answer.headers.get(DUPLICATE_HEADER).map(String::as_str) == Some("true"),
        })
    }

    /// Runs an operation on `queue` at the hub and returns its JSON answer (changes are
    /// durable when it returns).
    pub async fn queue_op(
        &self,
        queue: &str,
        op: QueueOp,
        timeout: Duration,
    ) -> Result<serde_json::Value, AgentError> {
        let mut env = self
            .envelope(Destination::queue(queue), Kind::Request)
            .with_header(QUEUE_OP_HEADER, op.name());
        if let QueueOp::Replay(Some(task)) | QueueOp::Discard(Some(task)) = op {
            env = env.with_header(TASK_ID_HEADER, task.to_string());
        }
        if op == QueueOp::DeadLetters {
            let mut all = Vec::new();
            let mut after = None;
            loop {
                let (page, next) = self.dead_letters_page(queue, after, timeout).await?;
                all.extend(page);
                match next {
                    Some(next) => after = Some(next),
                    None => return Ok(serde_json::Value::Array(all)),
                }
            }
        }
        let answer = self.request_envelope(env, timeout).await?;
        serde_json::from_slice(&answer.body)
            .map_err(|e| AgentError::Config(format!("the hub's answer is not JSON: {e}")))
    }

    /// One page of `queue`'s dead letters, after task `after` (from the first without it), as
    /// [`QueueOp::DeadLetters`] describes them, and the task to ask after for the next page
    /// when more follow. A page holds at most [`DEAD_LETTER_PAGE`](agentwire_proto::names::DEAD_LETTER_PAGE)
    /// letters, and their bodies at most an eighth of this agent's frame limit (1 MiB at most;
    /// one letter always).
    pub async fn dead_letters_page(
        &self,
        queue: &str,
        after: Option<u64>,
        timeout: Duration,
    ) -> Result<(Vec<serde_json::Value>, Option<u64>), AgentError> {
        let mut env = self
            .envelope(Destination::queue(queue), Kind::Request)
            .with_header(QUEUE_OP_HEADER, QueueOp::DeadLetters.name());
        if let Some(after) = after {
            env = env.with_header(agentwire_proto::names::AFTER_HEADER, after.to_string());
        }
        let answer = self.request_envelope(env, timeout).await?;
        let next = answer
            .headers
            .get(agentwire_proto::names::NEXT_AFTER_HEADER)
            .map(|n| n.parse::<u64>())
            .transpose()
            .map_err(|e| {
                AgentError::Config(format!("the hub's next-after is not a task id: {e}"))
            })?;
        match serde_json::from_slice(&answer.body) {
            Ok(serde_json::Value::Array(page)) => Ok((page, next)),
            Ok(other) => Err(AgentError::Config(format!(
                "the hub's dead letters are not a list: {other}"
            ))),
            Err(e) => Err(AgentError::Config(format!(
                "the hub's answer is not JSON: {e}"
            ))),
        }
    }

    /// Starts consuming the work queue `queue`: the hub delivers its tasks to this agent, at
    /// most `credit` at a time (called again, it changes the credit). Each task arrives
    /// through `recv` ([`QueueTask::from_envelope`]) and stays this agent's until it is acked
    /// or nacked, its ack wait runs out, or the agent disconnects.
    pub async fn consume(&self, queue: &str, credit: u32) -> Result<(), AgentError> {
        if credit == 0 {
            return Err(AgentError::Config(
                "a consumer needs a credit of at least 1 (stop_consuming stops)".into(),
            ));
        }
        self.control_at(
            Frame::Consume(Consume {
                queue: queue.to_owned(),
                credit,
            }),
            Priority::Critical,
        )
        .await
    }

    /// Stops consuming `queue`; tasks this agent holds go back to the queue.
    pub async fn stop_consuming(&self, queue: &str) -> Result<(), AgentError> {
        self.control_at(
            Frame::Consume(Consume {
                queue: queue.to_owned(),
                credit: 0,
            }),
            Priority::Critical,
        )
        .await
    }

    /// The task is done: the hub forgets it.
    pub async fn ack(&self, task: u64) -> Result<(), AgentError> {
        self.control_at(Frame::Ack(task), Priority::High).await
    }

    /// The task could not be done: the hub hands it out again after `delay` (`None`: the
    /// queue's backoff), or makes it a dead letter after its last attempt.
    pub async fn nack(&self, task: u64, delay: Option<Duration>) -> Result<(), AgentError> {
        let delay_ms = delay.map(|d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX - 1));
        self.control_at(Frame::Nack(Nack { task, delay_ms }), Priority::High)
            .await
    }
}
