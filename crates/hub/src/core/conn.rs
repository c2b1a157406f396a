//! One connection as the hub core sees it: its phase (handshake, registered, closed), its
//! bounded outbound queue, its topics and the requests it waits on or owes.
//!
//! This module owns per-connection state and its lock; it must not route (that is the core's)
//! or do I/O (the driver's, through the opaque `D` each connection carries).

use agentwire_sync::LockExt;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Instant;

use agentwire_proto::{Codec, Kind};
use bytes::Bytes;

use super::budget::{QueueBudget, Share};
use agentwire_transport::{SendClass, TransportKind};

/// A frame waiting to go to one connection, taken by its driver with
/// [`HubCore::poll_outbound`](super::HubCore::poll_outbound).
#[derive(Debug)]
pub struct Outbound<R> {
    /// The encoded frame, length prefix included.
    pub frame: Bytes,
    /// How it travels (control, message or request of a priority class).
    pub class: SendClass,
    /// The kind of the envelope it carries (`None` for control frames), for metrics.
    pub kind: Option<Kind>,
    /// For the answer to a request this connection made: the transport's reply handle that
    /// arrived with the request (the request's own stream on QUIC).
    pub reply: Option<R>,
}

/// What the hub learnt of an agent at its handshake.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The agent's id.
    pub agent_id: Arc<str>,
    /// Its role.
    pub role: String,
    /// Its envelope codec.
    pub codec: Codec,
    /// The frame limit agreed both ways.
    pub max_frame_size: u32,
    /// Both sides offered counted goodbyes (`agentwire_proto::counted_goodbye`).
    pub counted_goodbye: bool,
    /// What its credential allows (`None`: the hub has no access file, everything is allowed).
    pub grant: Option<Arc<super::access::Grant>>,
    /// The SHA-256 of the token it showed, when an access file admitted it by token: kept (the
    /// token itself never is) to check the credential again when the access file is reloaded.
    pub token_sha256: Option<[u8; 32]>,
}

/// A direct request this connection sent that waits for its one answer.
pub(super) struct Waiting<R> {
    /// The target connection's id.
    pub target: u64,
    /// The target is a connection of transport `cluster` (an agent of another hub, or the
    /// hub keeping the queues): that hub's own errors may settle the request.
    pub remote: bool,
    /// When the hub stops waiting and answers with `cancelled` itself.
    pub deadline: Instant,
    /// When it arrived (request latency).
    pub started: Instant,
    /// Where the answer goes (the request's own stream), if the transport has such a thing.
    pub reply: Option<R>,
}

/// A request a connection was sent and may answer once.
pub(super) struct Owed<D, R> {
    /// Who asked.
    pub requester: Weak<Conn<D, R>>,
    /// After this the hub no longer waits for the answer; the entry is forgotten (a late
    /// answer is then recognised by the requester's settled ids).
    pub deadline: Instant,
    /// A direct request, which the requester's `waiting` tracks; `false` for a copy of a
    /// topic or broadcast request, whose answers go to the requester untracked.
    pub direct: bool,
}

/// The outbound queue: control frames first, then four priority classes, FIFO within each.
/// Bounded in envelope frames and in their bytes (one frame of any size fits an empty
/// queue), and together with every other queue by the hub's [`QueueBudget`] (its [`Share`]
/// gives everything back when the connection is dropped); control frames (a handful per
/// connection) are counted in bytes but never refused.
pub(super) struct OutQueue<R> {
    control: VecDeque<Outbound<R>>,
    classes: [VecDeque<Outbound<R>>; 4],
    len: usize,
    capacity: usize,
    /// Bytes of every frame queued, control frames included, and of the frames the driver
    /// took and has not written yet (`in_flight`).
    bytes: usize,
    /// Bytes of the frames the driver took since it last said it wrote everything: a writer
    /// blocked on a peer that does not read still holds them.
    in_flight: usize,
    max_bytes: usize,
    /// Its part of the hub's budget.
    share: Share,
    closed: bool,
}

/// How big one connection's outbound queue may grow.
#[derive(Debug, Clone)]
pub(super) struct QueueBounds {
    /// Envelope frames.
    pub frames: usize,
    /// Bytes of envelope frames.
    pub bytes: usize,
    /// The hub-wide budget it shares with every other queue.
    pub budget: QueueBudget,
}

/// Why a frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PushError {
    /// The connection's own queue is full (frames or bytes).
    Full,
    /// The hub's budget for all queues together is spent.
    HubFull,
    Closed,
}

/// A frame the queue did not take, handed back.
pub(super) struct Refused<R> {
    pub error: PushError,
    pub outbound: Outbound<R>,
}

impl<R> OutQueue<R> {
    fn new(bounds: QueueBounds) -> Self {
        OutQueue {
            control: VecDeque::new(),
            classes: Default::default(),
            len: 0,
            capacity: bounds.frames.max(1),
            bytes: 0,
            in_flight: 0,
            max_bytes: bounds.bytes,
            share: Share::new(bounds.budget),
            closed: false,
        }
    }

    /// Queues `out`; `Ok(true)` when the queue was empty before (the driver needs a wake-up).
    pub fn push(&mut self, out: Outbound<R>) -> Result<bool, Refused<R>> {
        let refuse = |error, outbound| Err(Refused { error, outbound });
        if self.closed {
            return refuse(PushError::Closed, out);
        }
        let was_empty = self.is_empty();
        let n = out.frame.len();
        match out.class {
            SendClass::Control | SendClass::Heartbeat => {
                self.share.cover_anyway(self.bytes + n);
                self.control.push_back(out);
            }
            SendClass::Message(p) | SendClass::Request(p) => {
                if self.len >= self.capacity || (self.len > 0 && self.bytes + n > self.max_bytes) {
                    return refuse(PushError::Full, out);
                }
                if !self.share.cover(self.bytes + n) {
                    return refuse(PushError::HubFull, out);
                }
                self.classes[p.index()].push_back(out);
                self.len += 1;
            }
        }
        self.bytes += n;
        Ok(was_empty)
    }

    pub fn pop(&mut self) -> Option<Outbound<R>> {
        let out = match self.control.pop_front() {
            Some(out) => out,
            None => {
                let out = self.classes.iter_mut().find_map(VecDeque::pop_front)?;
                self.len -= 1;
                out
            }
        };
        // Still held until the driver has written it.
        self.in_flight += out.frame.len();
        Some(out)
    }

    /// The driver wrote every frame it took: their bytes leave the bounds.
    pub fn written(&mut self) {
        self.bytes -= std::mem::take(&mut self.in_flight);
        self.share.shrink_to(self.bytes);
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0 && self.control.is_empty()
    }

    /// Envelope frames queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Refuses further frames; what is queued can still be taken.
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Drops everything queued; returns how many envelope frames that was.
    pub fn clear(&mut self) -> usize {
        let n = self.len;
        self.control.clear();
        self.classes.iter_mut().for_each(VecDeque::clear);
        self.len = 0;
        self.bytes = 0;
        self.in_flight = 0;
        self.share.release();
        n
    }
}

/// Per-connection state behind the connection's own lock (the core never holds two of
/// these at once).
pub(super) struct ConnState<D, R> {
    pub queue: OutQueue<R>,
    pub topics: HashSet<Arc<str>>,
    /// This agent's direct requests waiting for an answer, by request id.
    pub waiting: HashMap<u64, Waiting<R>>,
    /// Requests this agent was sent and has not answered: (requester's connection id,
    /// request id) → what the hub knows of it. The only answers this agent may send: an
    /// answer to a request not in here is refused (nobody answers for another agent). Also
    /// the index for failing direct requests when this agent leaves; the requester's
    /// `waiting` decides whether an answer is still due.
    pub owed: HashMap<(u64, u64), Owed<D, R>>,
    /// Request ids the hub settled itself (cancelled at the deadline, failed because the
    /// target left), oldest first: an answer arriving for one of them is late and dropped.
    pub settled: VecDeque<(u64, Instant)>,
    pub settled_ids: HashSet<u64>,
    /// The agent's send-rate buckets (set at registration when rate limits are on).
    pub rate: Option<super::limits::AgentRate>,
    /// The earliest deadline in `owed` (when to look for entries to forget).
    pub owed_earliest: Option<Instant>,
}

/// Most request ids one connection remembers as settled by the hub.
const MAX_SETTLED: usize = 4096;

impl<D, R> ConnState<D, R> {
    /// Remembers that the hub answered request `id` itself.
    pub fn settle(&mut self, id: u64, now: Instant) {
        if self.settled_ids.insert(id) {
            self.settled.push_back((id, now));
            if self.settled.len() > MAX_SETTLED {
                if let Some((old, _)) = self.settled.pop_front() {
                    self.settled_ids.remove(&old);
                }
            }
        }
    }

    /// Remembers that this connection was sent request `key` and may answer it.
    pub fn owe(&mut self, key: (u64, u64), owed: Owed<D, R>) {
        self.owed_earliest = Some(
            self.owed_earliest
                .map_or(owed.deadline, |e| e.min(owed.deadline)),
        );
        self.owed.insert(key, owed);
    }

    /// Forgets the requests whose deadline has passed: the hub answered them already (direct
    /// requests), or stopped waiting for answers (copies of topic and broadcast requests).
    pub fn forget_owed(&mut self, now: Instant) {
        if self.owed_earliest.is_none_or(|e| e > now) {
            return;
        }
        self.owed.retain(|_, o| o.deadline > now);
        self.owed_earliest = self.owed.values().map(|o| o.deadline).min();
    }

    /// Forgets settled ids older than `before`.
    pub fn forget_settled(&mut self, before: Instant) {
        while let Some(&(id, at)) = self.settled.front() {
            if at >= before {
                break;
            }
            self.settled.pop_front();
            self.settled_ids.remove(&id);
        }
    }
}

/// What the transport knows of a new connection's peer, for [`super::HubCore::open_from`].
///
/// ```
/// use agentwire_hub::Peer;
/// let peer = Peer { remote: "127.0.0.1".parse().ok(), certified_id: Some("worker-1".into()) };
/// assert_eq!(peer.certified_id.as_deref(), Some("worker-1"));
/// assert_eq!(Peer::default().remote, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peer {
    /// Its IP address (`None`: a Unix socket, or unknown).
    pub remote: Option<std::net::IpAddr>,
    /// The agent id its verified client certificate names (mutual TLS), if it showed one.
    pub certified_id: Option<Arc<str>>,
}

/// A connection in the hub core: what the core keeps of it, and the driver's own `D` (how
/// the driver reaches the connection's writer and transport; opaque to the core). `R` is the
/// transport's reply handle, which the core carries from a request to its answer.
pub struct Conn<D, R> {
    id: u64,
    transport: TransportKind,
    opened: Instant,
    /// When it was opened, Unix ms.
    opened_unix_ms: u64,
    registration: OnceLock<Registration>,
    closed: AtomicBool,
    /// Milliseconds since the core's epoch when a frame last arrived.
    last_seen_ms: AtomicU64,
    pub(super) state: Mutex<ConnState<D, R>>,
    driver: D,
    /// The peer's IP address, when it was counted against the per-address limit.
    pub(super) remote: OnceLock<std::net::IpAddr>,
    /// The agent id the peer's verified client certificate names (mutual TLS).
    pub(super) certified_id: OnceLock<Arc<str>>,
}

impl<D, R> Conn<D, R> {
    pub(super) fn new(
        id: u64,
        transport: TransportKind,
        driver: D,
        bounds: QueueBounds,
        now: super::Now,
        now_ms: u64,
    ) -> Self {
        Conn {
            id,
            transport,
            opened: now.instant,
            opened_unix_ms: now.unix_us / 1000,
            registration: OnceLock::new(),
            closed: AtomicBool::new(false),
            last_seen_ms: AtomicU64::new(now_ms),
            state: Mutex::new(ConnState {
                queue: OutQueue::new(bounds),
                topics: HashSet::new(),
                waiting: HashMap::new(),
                owed: HashMap::new(),
                settled: VecDeque::new(),
                settled_ids: HashSet::new(),
                rate: None,
                owed_earliest: None,
            }),
            remote: OnceLock::new(),
            certified_id: OnceLock::new(),
            driver,
        }
    }

    /// The hub's id for this connection (the session id it announces in the welcome).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The transport it arrived on.
    pub fn transport(&self) -> TransportKind {
        self.transport
    }

    /// When it was opened.
    pub fn opened(&self) -> Instant {
        self.opened
    }

    /// When it was opened, Unix ms (by the `now` the core was given).
    pub fn opened_unix_ms(&self) -> u64 {
        self.opened_unix_ms
    }

    /// What the handshake agreed, once it has.
    pub fn registration(&self) -> Option<&Registration> {
        self.registration.get()
    }

    /// The driver's data for this connection.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// True once the core closed it (it takes no frames and routes nothing to it).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(super) fn register(&self, registration: Registration) -> bool {
        self.registration.set(registration).is_ok()
    }

    /// Marks it closed; true the first time.
    pub(super) fn mark_closed(&self) -> bool {
        !self.closed.swap(true, Ordering::AcqRel)
    }

    pub(super) fn touch(&self, now_ms: u64) {
        self.last_seen_ms.store(now_ms, Ordering::Relaxed);
    }

    pub(super) fn last_seen_ms(&self) -> u64 {
        self.last_seen_ms.load(Ordering::Relaxed)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, ConnState<D, R>> {
        // Every update under this lock leaves the state consistent, so a poisoned lock is
        // still safe to use.
        self.state.lock_or_recover()
    }
}

impl<D, R> std::fmt::Debug for Conn<D, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("id", &self.id)
            .field("transport", &self.transport)
            .field("agent", &self.registration.get().map(|r| &r.agent_id))
            .field("closed", &self.is_closed())
            .finish()
    }
}
