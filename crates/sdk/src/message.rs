//! A received message as plain data, with the means to answer it.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentwire::agent_queues::QueueTask;
use agentwire::{Incoming, Kind};
use bytes::Bytes;

use crate::SdkError;

/// A message the agent received: what a binding turns into its language's message object.
#[derive(Debug, Clone)]
pub struct Message {
    /// The sender's id for it (unique among the sender's messages).
    pub id: u64,
    /// The sending agent (`$hub` for the hub's own messages).
    pub sender: String,
    /// Where it was sent: `agent:ID`, `topic:NAME`, `queue:NAME` or `*`.
    pub to: String,
    /// `request`, `response`, `event`, `task`, `error`, …
    pub kind: &'static str,
    /// `critical`, `high`, `medium` or `low`.
    pub priority: &'static str,
    /// For a response or an error: the id of the request it answers.
    pub correlation: Option<u64>,
    /// Its headers.
    pub headers: BTreeMap<String, String>,
    /// Its bytes.
    pub body: Bytes,
    /// For a queue task: its queue, to ack or nack it with its id.
    pub queue: Option<String>,
    /// For a queue task: 1 for the first delivery, more for redeliveries.
    pub attempt: Option<u32>,
    incoming: Option<Arc<Incoming>>,
}

impl Message {
    pub(crate) fn from_incoming(incoming: Incoming) -> Message {
        let task = QueueTask::from_envelope(&incoming.envelope);
        let mut message = Message::from_envelope(&incoming.envelope);
        message.queue = task.as_ref().map(|t| t.queue.clone());
        message.attempt = task.map(|t| t.attempt);
        message.incoming = Some(Arc::new(incoming));
        message
    }

    pub(crate) fn from_envelope(env: &agentwire::Envelope) -> Message {
        Message {
            id: env.id,
            sender: env.from.clone(),
            to: env.to.to_string(),
            kind: env.kind.name(),
            priority: env.priority.name(),
            correlation: env.correlation,
            headers: env.headers.clone(),
            body: env.body.clone(),
            queue: None,
            attempt: None,
            incoming: None,
        }
    }

    /// Whether it is a request (it expects [`reply`](Self::reply)).
    pub fn is_request(&self) -> bool {
        self.kind == Kind::Request.name()
    }

    /// Answers this request with `body`.
    pub async fn reply(&self, body: Bytes) -> Result<(), SdkError> {
        let incoming = match (&self.incoming, self.is_request()) {
            (Some(incoming), true) => incoming.clone(),
            _ => {
                return Err(SdkError::config(format!(
                    "only a request can be answered; this message is a {}",
                    self.kind
                )))
            }
        };
        Ok(incoming.reply(body).await?)
    }
}
