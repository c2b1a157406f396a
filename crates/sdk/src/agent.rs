//! A connected agent for bindings: every call takes `&self` and returns an owned future, so
//! a binding may share one agent between many of its callers at once.

use agentwire_sync::LockExt;
use std::str::FromStr;
use std::time::Duration;

use agentwire::agent_queues::{QueueOp, TaskReceipt};
use agentwire::{Agent, AgentHandle, Destination, Inbox, Kind, Priority};
use bytes::Bytes;

use crate::{ConnectConfig, Message, SdkError};

/// A connected agent: the sending handle, and the inbox behind a lock that one receiver at a
/// time holds.
pub struct SdkAgent {
    handle: AgentHandle,
    inbox: tokio::sync::Mutex<Inbox>,
    /// Messages received for a caller that had stopped waiting ([`unrecv`](Self::unrecv)),
    /// handed out again before the inbox.
    returned: std::sync::Mutex<std::collections::VecDeque<Message>>,
}

/// The longest wait a binding may ask for (a year): longer ones are treated as this.
const LONGEST_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

impl SdkAgent {
    /// Connects (all fallbacks included) and runs the handshake.
    pub async fn connect(config: ConnectConfig) -> Result<SdkAgent, SdkError> {
        let options = config.options()?;
        let agent = Agent::connect(options).await?;
        let (handle, inbox) = agent.split();
        Ok(SdkAgent {
            handle,
            inbox: tokio::sync::Mutex::new(inbox),
            returned: std::sync::Mutex::new(std::collections::VecDeque::new()),
        })
    }

    /// A timeout given in seconds, checked: positive and finite.
    ///
    /// ```
    /// use agentwire_sdk::SdkAgent;
    /// assert_eq!(SdkAgent::timeout(1.5)?.as_millis(), 1500);
    /// assert!(SdkAgent::timeout(-1.0).is_err());
    /// assert!(SdkAgent::timeout(f64::NAN).is_err());
    /// # Ok::<(), agentwire_sdk::SdkError>(())
    /// ```
    pub fn timeout(seconds: f64) -> Result<Duration, SdkError> {
        if !seconds.is_finite() || seconds <= 0.0 {
            return Err(SdkError::config(format!(
                "a timeout is a positive number of seconds, not {seconds}"
            )));
        }
        Ok(Duration::try_from_secs_f64(seconds)
            .unwrap_or(LONGEST_WAIT)
            .min(LONGEST_WAIT))
    }

    /// A delay given in seconds, checked: zero or positive, and finite.
    ///
    /// ```
    /// use agentwire_sdk::SdkAgent;
    /// assert!(SdkAgent::delay(0.0)?.is_zero());
    /// assert!(SdkAgent::delay(-0.5).is_err());
    /// # Ok::<(), agentwire_sdk::SdkError>(())
    /// ```
    pub fn delay(seconds: f64) -> Result<Duration, SdkError> {
        if seconds == 0.0 {
            return Ok(Duration::ZERO);
        }
        Self::timeout(seconds)
    }

    /// The agent's id.
    pub fn id(&self) -> &str {
        self.handle.id()
    }

    /// The transport it is connected over (`quic`, `http2`, `websocket`, `unix`).
    pub fn transport(&self) -> &'static str {
        self.handle.transport().name()
    }

    /// Sends `body` to `to` (`agent:ID` or a bare id, `topic:NAME`, `queue:NAME`, `*`) as a
    /// message of `kind` at `priority`; returns its id.
    pub async fn send(
        &self,
        to: &str,
        body: Bytes,
        kind: &str,
        priority: &str,
        headers: Vec<(String, String)>,
    ) -> Result<u64, SdkError> {
        let to = destination(to)?;
        let mut env = self
            .handle
            .envelope(to, parse_kind(kind)?)
            .with_priority(parse_priority(priority)?)
            .with_body(body);
        for (name, value) in headers {
            env = env.with_header(name, value);
        }
        Ok(self.handle.send_envelope(env).await?)
    }

    /// Sends a request to agent `to` and waits up to `timeout` for its answer.
    pub async fn request(
        &self,
        to: &str,
        body: Bytes,
        timeout: Duration,
        priority: &str,
        headers: Vec<(String, String)>,
    ) -> Result<Message, SdkError> {
        let Destination::Agent(agent) = destination(to)? else {
            return Err(SdkError::config(format!(
                "a request goes to one agent, not {to:?}"
            )));
        };
        let mut env = self
            .handle
            .envelope(Destination::agent(agent), Kind::Request)
            .with_priority(parse_priority(priority)?)
            .with_ttl_ms(u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX))
            .with_body(body);
        for (name, value) in headers {
            env = env.with_header(name, value);
        }
        let answer = self.handle.request_envelope(env, timeout).await?;
        Ok(Message::from_envelope(&answer))
    }

    /// The next received message; `None` once the connection has ended and everything
    /// received was taken. Callers waiting at once are served one after another.
    pub async fn recv(&self) -> Option<Message> {
        if let Some(m) = self.lock_returned().pop_front() {
            return Some(m);
        }
        let mut inbox = self.inbox.lock().await;
        if let Some(m) = self.lock_returned().pop_front() {
            return Some(m);
        }
        inbox.recv().await.map(Message::from_incoming)
    }

    /// Gives back a message [`recv`](Self::recv) returned to a caller that had stopped
    /// waiting (a cancelled task): `recv` returns it before anything still in the inbox, so
    /// nothing is lost. Messages given back in the order they were received keep that order.
    pub fn unrecv(&self, message: Message) {
        self.lock_returned().push_back(message);
    }

    fn lock_returned(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<Message>> {
        self.returned.lock_or_recover()
    }

    /// Subscribes to `topic`.
    pub async fn subscribe(&self, topic: &str) -> Result<(), SdkError> {
        Ok(self.handle.subscribe(non_empty("topic", topic)?).await?)
    }

    /// Unsubscribes from `topic`.
    pub async fn unsubscribe(&self, topic: &str) -> Result<(), SdkError> {
        Ok(self.handle.unsubscribe(non_empty("topic", topic)?).await?)
    }

    /// Publishes `body` as an event to `topic`'s subscribers; returns its id.
    pub async fn publish(&self, topic: &str, body: Bytes) -> Result<u64, SdkError> {
        let topic = non_empty("topic", topic)?;
        Ok(self.handle.publish(topic, Kind::Event, body).await?)
    }

    /// Publishes every body as an event to `topic`, queued in one step so that the transport
    /// writes them together (several to a QUIC stream, one TLS record over TCP); returns
    /// their ids in order. Nothing is queued when one body is over the hub's frame limit.
    pub async fn publish_many(
        &self,
        topic: &str,
        bodies: Vec<Bytes>,
    ) -> Result<Vec<u64>, SdkError> {
        let topic = non_empty("topic", topic)?;
        Ok(self.handle.publish_many(topic, Kind::Event, bodies).await?)
    }

    /// Stores a task in work queue `queue` (waits for the hub's receipt).
    pub async fn enqueue(
        &self,
        queue: &str,
        body: Bytes,
        producer_id: Option<&str>,
        timeout: Duration,
    ) -> Result<TaskReceipt, SdkError> {
        let queue = non_empty("queue", queue)?;
        Ok(self
            .handle
            .enqueue(queue, body, producer_id, timeout)
            .await?)
    }

    /// Starts taking tasks from `queue`, `credit` at a time (0 stops).
    pub async fn consume(&self, queue: &str, credit: u32) -> Result<(), SdkError> {
        Ok(self
            .handle
            .consume(non_empty("queue", queue)?, credit)
            .await?)
    }

    /// Takes no more tasks from `queue` (those held stay held until acked or nacked).
    pub async fn stop_consuming(&self, queue: &str) -> Result<(), SdkError> {
        Ok(self
            .handle
            .stop_consuming(non_empty("queue", queue)?)
            .await?)
    }

    /// Acknowledges task `task`: done, never delivered again.
    pub async fn ack(&self, task: u64) -> Result<(), SdkError> {
        Ok(self.handle.ack(task).await?)
    }

    /// Gives task `task` back, to be delivered again after `delay` (the queue's backoff when
    /// `None`).
    pub async fn nack(&self, task: u64, delay: Option<Duration>) -> Result<(), SdkError> {
        Ok(self.handle.nack(task, delay).await?)
    }

    /// A queue's counts (`ready`, `in_flight`, `dead`, …) as JSON text.
    pub async fn queue_stats(&self, queue: &str, timeout: Duration) -> Result<String, SdkError> {
        let queue = non_empty("queue", queue)?;
        let answer = self.handle.queue_op(queue, QueueOp::Stats, timeout).await?;
        Ok(answer.to_string())
    }

    /// The agent's counters and its connection's, as JSON text.
    pub fn stats_json(&self) -> String {
        serde_json::to_string(&self.handle.stats()).unwrap_or_else(|_| "{}".into())
    }

    /// Says goodbye and closes the connection.
    pub async fn close(&self) {
        self.handle.close().await
    }

    /// Why the connection ended, if it has.
    pub fn closed_reason(&self) -> Option<String> {
        self.handle.closed_reason()
    }
}

fn destination(to: &str) -> Result<Destination, SdkError> {
    Destination::from_str(to).map_err(|e| SdkError::config(e.to_string()))
}

fn non_empty<'a>(what: &str, name: &'a str) -> Result<&'a str, SdkError> {
    if name.is_empty() {
        return Err(SdkError::config(format!(
            "the {what} name must not be empty"
        )));
    }
    Ok(name)
}

fn parse_kind(name: &str) -> Result<Kind, SdkError> {
    Kind::from_name(name).ok_or_else(|| {
        SdkError::config(format!(
            "unknown kind {name:?} (event, request, task, response, error, …)"
        ))
    })
}

fn parse_priority(name: &str) -> Result<Priority, SdkError> {
    Priority::from_name(name).ok_or_else(|| {
        SdkError::config(format!(
            "unknown priority {name:?} (critical, high, medium or low)"
        ))
    })
}
