//! Stand-ins: a connection on this hub's core for an agent of another hub (transport
//! `cluster`).
//!
//! The receiving half says hello as the remote agent (MessagePack, role `cluster:HUB`), then
//! yields what the remote agent sent to agents here, subscriptions that mirror its own, and a
//! heartbeat each interval while the remote hub announces it. The sending half publishes what
//! the core hands it to the agent's hub, except what must not travel: the hub's own messages
//! (every hub makes its own `$presence` events and errors), anything that came from another
//! hub already (so nothing loops), and a second copy of one topic message or broadcast for the
//! same hub (that hub fans it out to its own subscribers). It must not decide routes.

use agentwire_sync::LockExt;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentwire::transport::{
    ConnectionStats, FrameReceiver, FrameSender, ReplySlot, SendClass, TransportError,
    TransportKind,
};
use agentwire::{ErrorCode, Priority};
use agentwire_proto::Kind;
use agentwire_proto::{
    AgentHandshake, Codec, DestinationRef, EnvelopeView, Frame, FrameDecoder, FrameType, Heartbeat,
    Hello, RawFrame,
};
use bytes::Bytes;
use tokio::sync::{mpsc, watch};

/// The NATS header naming the agent that sent a frame.
pub const FROM_HEADER: &str = "Agentwire-From";
/// The NATS header of a task the queue owner delivers: the consumer's agent id. The frame
/// goes to that agent as it is, not through the receiving hub's routing.
pub const DELIVER_HEADER: &str = "Agentwire-Deliver";
/// The NATS header of a hub's answer for a request of an agent of another hub (value `1`):
/// its error, or the queue owner's response to a queue request. The receiving hub settles
/// the request with it if it still waits there.
pub const HUB_ANSWER_HEADER: &str = "Agentwire-Hub-Answer";

/// What this hub shares among its stand-ins.
pub struct Shared {
    /// This hub's id.
    pub hub: String,
    /// The NATS client.
    pub nats: async_nats::Client,
    /// The cluster's subject prefix, `agentwire.<cluster>`.
    pub prefix: String,
    /// Agents of other hubs (their frames are never forwarded again).
    pub remote: Mutex<HashSet<String>>,
    /// The hub keeping the queues, when another one does.
    pub queue_owner: Mutex<Option<String>>,
    /// Whether this hub keeps the queues.
    pub owns_queues: std::sync::atomic::AtomicBool,
    /// Topic messages and broadcasts already published to a hub.
    sent_once: Mutex<SentOnce>,
}

/// The hub that published on `subject` (one of [`Shared::hub_subject`] or
/// [`Shared::presence_subject`]): its last token. Hub ids hold no dots
/// (`agentwire_cluster::node` checks them).
///
/// ```
/// use agentwire_cluster::link::sending_hub;
/// assert_eq!(sending_hub("agentwire.c.hub.b.from.a"), Some("a"));
/// assert_eq!(sending_hub("agentwire.c.presence.a"), Some("a"));
/// assert_eq!(sending_hub("agentwire.c.presence."), None);
/// ```
pub fn sending_hub(subject: &str) -> Option<&str> {
    subject.rsplit('.').next().filter(|hub| !hub.is_empty())
}

/// A topic message or broadcast published to a hub: (hub, sender, id).
type SentKey = (String, String, u64);

/// The last [`SENT_ONCE_MEMORY`] topic messages and broadcasts published, per hub.
#[derive(Default)]
struct SentOnce {
    seen: HashSet<SentKey>,
    order: VecDeque<SentKey>,
}

/// How many (hub, sender, id) keys the topic de-duplication remembers.
const SENT_ONCE_MEMORY: usize = 65_536;

impl Shared {
    /// The shared state of hub `hub` on `nats`, under `prefix`.
    pub fn new(hub: String, nats: async_nats::Client, prefix: String) -> Self {
        Shared {
            hub,
            nats,
            prefix,
            remote: Mutex::new(HashSet::new()),
            queue_owner: Mutex::new(None),
            owns_queues: std::sync::atomic::AtomicBool::new(false),
            sent_once: Mutex::new(SentOnce::default()),
        }
    }

    /// The subject this hub publishes frames for hub `to` on: `<prefix>.hub.<to>.from.<this
    /// hub>`. The receiver takes the sending hub from the subject's last token, never from a
    /// header, so NATS permissions that let each hub's user publish only on subjects ending in
    /// its own id make the sending hub unforgeable (docs/book/security.md).
    pub fn hub_subject(&self, to: &str) -> String {
        format!("{}.hub.{to}.from.{}", self.prefix, self.hub)
    }

    /// The subjects this hub receives frames on, from every hub.
    pub fn inbox_subject(&self) -> String {
        format!("{}.hub.{}.from.*", self.prefix, self.hub)
    }

    /// The subject this hub publishes its presence on: `<prefix>.presence.<this hub>`.
    pub fn presence_subject(&self) -> String {
        format!("{}.presence.{}", self.prefix, self.hub)
    }

    /// The presence subjects of every hub.
    pub fn presence_wildcard(&self) -> String {
        format!("{}.presence.*", self.prefix)
    }

    fn is_remote(&self, agent: &str) -> bool {
        self.remote.lock_or_recover().contains(agent)
    }

    /// True the first time (hub, sender, id) is seen.
    fn first_time(&self, hub: &str, from: &str, id: u64) -> bool {
        let key = (hub.to_owned(), from.to_owned(), id);
        let mut sent = self.sent_once.lock_or_recover();
        if !sent.seen.insert(key.clone()) {
            return false;
        }
        sent.order.push_back(key);
        if sent.order.len() > SENT_ONCE_MEMORY {
            if let Some(old) = sent.order.pop_front() {
                sent.seen.remove(&old);
            }
        }
        true
    }
}

/// The sending half of a stand-in for agent `agent` of hub `hub`.
#[derive(Clone)]
pub struct StandInSender {
    shared: Arc<Shared>,
    target: Target,
    closed: watch::Sender<Option<TransportError>>,
}

/// Where a stand-in's frames go.
#[derive(Clone)]
enum Target {
    /// An agent of this hub.
    Agent { hub: Arc<str>, agent: Arc<str> },
    /// Whichever hub keeps the queues ([`Shared::queue_owner`]).
    QueueOwner,
}

/// The receiving half of a stand-in.
pub struct StandInReceiver {
    first: Option<Bytes>,
    inbound: mpsc::Receiver<Bytes>,
    heartbeat: tokio::time::Interval,
    seq: u64,
    closed: watch::Receiver<Option<TransportError>>,
    max_frame_size: u32,
}

/// What feeds a stand-in: frames its remote agent sent here, and mirrored subscriptions.
#[derive(Clone)]
pub struct StandInFeed {
    tx: mpsc::Sender<Bytes>,
}

/// Frames waiting for the core, per stand-in, before the NATS reader waits.
const STAND_IN_QUEUE: usize = 1024;

/// A stand-in for `agent` of `hub`, beating every `heartbeat` (the hub's interval).
pub fn stand_in(
    shared: Arc<Shared>,
    hub: &str,
    agent: &str,
    heartbeat: Duration,
) -> Result<(StandInSender, StandInReceiver, StandInFeed), TransportError> {
    let target = Target::Agent {
        hub: Arc::from(hub),
        agent: Arc::from(agent),
    };
    make(
        shared,
        target,
        Hello::new(agent, format!("cluster:{hub}")),
        heartbeat,
    )
}

/// The stand-in for the hub that keeps the queues (agent id
/// [`QUEUE_OWNER_ID`](agentwire::hub::QUEUE_OWNER_ID)): the hub core sends it the queue work
/// of this hub's agents, and it publishes that to the owner named in
/// [`Shared::queue_owner`] (to none while there is none: requests then time out).
pub fn queue_owner_stand_in(
    shared: Arc<Shared>,
    heartbeat: Duration,
) -> Result<(StandInSender, StandInReceiver, StandInFeed), TransportError> {
    let hello = Hello::new(agentwire::hub::QUEUE_OWNER_ID, "cluster:queues");
    make(shared, Target::QueueOwner, hello, heartbeat)
}

fn make(
    shared: Arc<Shared>,
    target: Target,
    mut hello: Hello,
    heartbeat: Duration,
) -> Result<(StandInSender, StandInReceiver, StandInFeed), TransportError> {
    hello.codecs = vec![Codec::MsgPack.name().to_owned()];
    let first = AgentHandshake::new(hello)
        .hello_frame()
        .map_err(|e| TransportError::io("cannot encode a stand-in's hello", e))?;
    let (tx, inbound) = mpsc::channel(STAND_IN_QUEUE);
    let (closed_tx, closed_rx) = watch::channel(None);
    let mut beat = tokio::time::interval(heartbeat.max(Duration::from_millis(10)));
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    Ok((
        StandInSender {
            shared,
            target,
            closed: closed_tx,
        },
        StandInReceiver {
            first: Some(first),
            inbound,
            heartbeat: beat,
            seq: 0,
            closed: closed_rx,
            max_frame_size: u32::MAX,
        },
        StandInFeed { tx },
    ))
}

impl StandInFeed {
    /// Hands the core a frame the remote agent sent; `false` once the stand-in is gone.
    pub async fn frame(&self, frame: Bytes) -> bool {
        self.tx.send(frame).await.is_ok()
    }

    /// Mirrors a subscription (or, with `subscribe` false, its end) of the remote agent.
    pub async fn subscription(&self, topic: &str, subscribe: bool) -> bool {
        let frame = if subscribe {
            Frame::Subscribe(topic.to_owned())
        } else {
            Frame::Unsubscribe(topic.to_owned())
        };
        match frame.encode(Codec::MsgPack) {
            Ok(bytes) => self.frame(bytes).await,
            Err(_) => false,
        }
    }
}

impl StandInSender {
    async fn publish(&self, frame: Bytes) -> Result<(), TransportError> {
        let raw = match FrameDecoder::decode_one(frame.clone(), u32::MAX) {
            Ok(raw) if raw.type_byte == FrameType::Envelope as u8 => raw,
            _ => return Ok(()), // the welcome and other control frames stay here
        };
        let Some(view) = EnvelopeView::parse_with(Codec::MsgPack, &raw.payload) else {
            return Ok(());
        };
        let (hub, agent) = match &self.target {
            Target::QueueOwner => {
                // Queue work of this hub's agents; nothing else (broadcasts) goes there.
                if !matches!(view.to, DestinationRef::Queue(_)) {
                    return Ok(());
                }
                let owner = self.shared.queue_owner.lock_or_recover().clone();
                return match owner {
                    Some(owner) => self.send(&owner, view.from, None, frame).await,
                    None => Ok(()),
                };
            }
            Target::Agent { hub, agent } => (hub, agent),
        };
        if let DestinationRef::Queue(_) = view.to {
            // A task this hub's queues deliver to a consumer on that hub.
            return self
                .send(hub, view.from, Some((DELIVER_HEADER, agent)), frame)
                .await;
        }
        if view.from == agentwire::hub::HUB_ID {
            // Every hub makes its own `$presence` events. An error for a request travels back
            // to the requester's hub (it settles the request there, if it still waits); an
            // answer only the queue owner makes (a receipt, a queue operation's result).
            let to_request =
                view.correlation.is_some() && matches!(view.to, DestinationRef::Agent(_));
            let answer = match view.kind {
                Kind::Error => to_request,
                Kind::Response => to_request && self.shared.owns_queues.load(Ordering::Relaxed),
                _ => false,
            };
            if !answer {
                return Ok(());
            }
            return self
                .send(hub, view.from, Some((HUB_ANSWER_HEADER, "1")), frame)
                .await;
        }
        if self.shared.is_remote(view.from) {
            return Ok(());
        }
        if matches!(
            view.to,
            DestinationRef::Topic(_) | DestinationRef::Broadcast
        ) && !self.shared.first_time(hub, view.from, view.id)
        {
            return Ok(());
        }
        self.send(hub, view.from, None, frame).await
    }

    /// Publishes `frame` from `from` to hub `hub`, with one more header if given.
    async fn send(
        &self,
        hub: &str,
        from: &str,
        extra: Option<(&str, &str)>,
        frame: Bytes,
    ) -> Result<(), TransportError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(FROM_HEADER, from);
        if let Some((name, value)) = extra {
            headers.insert(name, value);
        }
        self.shared
            .nats
            .publish_with_headers(self.shared.hub_subject(hub), headers, frame)
            .await
            .map_err(|e| TransportError::io("cannot publish to NATS", e))
    }
}

impl FrameSender for StandInSender {
    async fn send_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        match class {
            SendClass::Control | SendClass::Heartbeat => Ok(()),
            SendClass::Message(_) | SendClass::Request(_) => self.publish(frame).await,
        }
    }

    async fn send_reply(
        &self,
        frame: Bytes,
        priority: Priority,
        _slot: ReplySlot,
    ) -> Result<(), TransportError> {
        self.send_frame(frame, SendClass::Message(priority)).await
    }

    async fn feed_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        self.send_frame(frame, class).await
    }

    fn set_peer_max_frame_size(&self, _max: u32) {}

    fn close(&self, code: ErrorCode, reason: &str) {
        self.closed.send_if_modified(|state| {
            if state.is_some() {
                return false;
            }
            *state = Some(TransportError::Closed {
                code: Some(code),
                reason: reason.to_owned(),
            });
            true
        });
    }

    async fn closed(&self) -> TransportError {
        let mut rx = self.closed.subscribe();
        let why = match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone(),
            Err(_) => None,
        };
        why.unwrap_or_else(gone)
    }

    fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            transport: TransportKind::Cluster.name(),
            ..ConnectionStats::default()
        }
    }

    fn kind(&self) -> TransportKind {
        TransportKind::Cluster
    }
}

fn gone() -> TransportError {
    TransportError::Closed {
        code: Some(ErrorCode::Normal),
        reason: "the agent's hub no longer announces it".into(),
    }
}

impl FrameReceiver for StandInReceiver {
    async fn recv_frame(&mut self) -> Result<Option<RawFrame>, TransportError> {
        if let Some(hello) = self.first.take() {
            return FrameDecoder::decode_one(hello, u32::MAX)
                .map(Some)
                .map_err(Into::into);
        }
        loop {
            if self.closed.borrow().is_some() {
                return Ok(None);
            }
            tokio::select! {
                frame = self.inbound.recv() => {
                    let Some(frame) = frame else { return Ok(None) };
                    match FrameDecoder::decode_one(frame, self.max_frame_size) {
                        Ok(raw) => return Ok(Some(raw)),
                        Err(e) => {
                            tracing::debug!("a frame from another hub does not decode: {e}");
                            continue;
                        }
                    }
                }
                _ = self.heartbeat.tick() => {
                    self.seq += 1;
                    let beat = Frame::Heartbeat(Heartbeat { seq: self.seq, timestamp_us: 0 });
                    if let Ok(bytes) = beat.encode(Codec::MsgPack) {
                        return FrameDecoder::decode_one(bytes, u32::MAX).map(Some).map_err(Into::into);
                    }
                }
                _ = self.closed.changed() => return Ok(None),
            }
        }
    }

    fn set_max_frame_size(&mut self, max: u32) {
        self.max_frame_size = max;
    }
}
