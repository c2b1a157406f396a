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

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentwire::transport::{
    ConnectionStats, FrameReceiver, FrameSender, ReplySlot, SendClass, TransportError,
    TransportKind,
};
use agentwire::{ErrorCode, Priority};
use agentwire_proto::{
    AgentHandshake, Codec, DestinationRef, EnvelopeView, Frame, FrameDecoder, FrameType, Heartbeat,
    Hello, RawFrame,
};
use bytes::Bytes;
use tokio::sync::{mpsc, watch};

/// The NATS header naming the agent that sent a frame.
pub const FROM_HEADER: &str = "Agentwire-From";
/// The NATS header naming the hub that published a frame.
pub const HUB_HEADER: &str = "Agentwire-Hub";

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
    /// Topic messages and broadcasts already published to a hub.
    sent_once: Mutex<SentOnce>,
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
            sent_once: Mutex::new(SentOnce::default()),
        }
    }

    /// The subject a hub receives frames on.
    pub fn hub_subject(&self, hub: &str) -> String {
        format!("{}.hub.{hub}", self.prefix)
    }

    fn is_remote(&self, agent: &str) -> bool {
        self.remote
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(agent)
    }

    /// True the first time (hub, sender, id) is seen.
    fn first_time(&self, hub: &str, from: &str, id: u64) -> bool {
        let key = (hub.to_owned(), from.to_owned(), id);
        let mut sent = self
            .sent_once
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
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
    hub: Arc<str>,
    closed: watch::Sender<Option<TransportError>>,
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
    let mut hello = Hello::new(agent, format!("cluster:{hub}"));
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
            hub: Arc::from(hub),
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
        if view.from == agentwire::hub::HUB_ID || self.shared.is_remote(view.from) {
            return Ok(());
        }
        if matches!(
            view.to,
            DestinationRef::Topic(_) | DestinationRef::Broadcast
        ) && !self.shared.first_time(&self.hub, view.from, view.id)
        {
            return Ok(());
        }
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(FROM_HEADER, view.from);
        headers.insert(HUB_HEADER, self.shared.hub.as_str());
        self.shared
            .nats
            .publish_with_headers(self.shared.hub_subject(&self.hub), headers, frame)
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
