//! `HubCore`: the hub as a state machine, sans IO, like quinn-proto under quinn.
//!
//! It owns the registry (unique ids, [`DuplicatePolicy`]), the handshake, routing (direct,
//! topic, broadcast), request/reply tracking with deadlines, the bounded per-connection
//! outbound queues with their priority classes, liveness and the join/leave events on
//! [`PRESENCE_TOPIC`](super::PRESENCE_TOPIC). It takes events — [`open`](HubCore::open),
//! [`on_frame`](HubCore::on_frame), [`on_closed`](HubCore::on_closed),
//! [`on_timeout`](HubCore::on_timeout) — each with the time as an argument, and answers with
//! [`Action`]s; frames wait in the connection's queue until its driver takes them with
//! [`poll_outbound`](HubCore::poll_outbound).
//!
//! It must not do I/O, spawn, sleep or read a clock: the driver (`hub::Hub`) owns sockets,
//! tasks and timers and passes time in, so every rule here is tested in memory on explicit
//! time (`tests.rs`). Its methods take `&self`: connections are served concurrently, each
//! connection's state behind its own lock (never two held at once), the registry behind a
//! read-mostly lock; there is no hub-wide lock on the message path.
//!
//! Forwarding does not re-encode: the routing header is read in place
//! ([`EnvelopeView`]) and the frame's own bytes go to every target that uses the sender's
//! codec; an envelope is decoded and encoded only for a target with the other codec, or when
//! the hub must correct its `from`.
//!
//! Requests to one agent get exactly one answer or one error: the requester's connection
//! keeps each waiting request until its answer arrives, its ttl runs out (the hub answers
//! `cancelled`), its target leaves (`unknown-agent`) or it cannot be queued (`queue-full`).
//! An answer for a request the hub already settled is dropped.
//!
//! Nobody answers for another agent: each connection keeps the requests it was sent and has
//! not answered (`owed`), and an answer is delivered only from a connection that owes it,
//! once; anything else is refused with `unauthorized` and counted (`not-asked`). Copies of a
//! topic or broadcast request are owed too, one answer per copy. Names beginning with `$` are
//! the hub's (`reserved`).

mod access;
mod budget;
mod conn;
mod from_cluster;
mod hub_ops;
mod limits;
mod queue_control;
mod queue_owner;
mod queues;
mod registry;
mod reserved;
#[cfg(test)]
mod tests;

use agentwire_sync::{LockExt, RwLockExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use agentwire_proto::{
    Codec, Destination, DestinationRef, Envelope, EnvelopeView, ErrorCode, Frame, FrameError,
    FrameType, HubDecision, HubHandshake, HubPolicy, Kind, Priority, RawFrame,
};
use bytes::Bytes;

pub use access::{token_sha256, AccessError, AccessPolicy, Grant, PolicyError};
pub use budget::DEFAULT_HUB_QUEUE_BYTES;
pub use conn::{Conn, Outbound, Peer, Registration};
pub use hub_ops::{HubOp, HUB_OP_HEADER};
pub use limits::AbuseLimits;
pub use queue_owner::QUEUE_OWNER_ID;
pub use queues::{
    AFTER_HEADER, ATTEMPT_HEADER, CREDIT_HEADER, DEAD_LETTER_PAGE, DELAY_HEADER, DUPLICATE_HEADER,
    NEXT_AFTER_HEADER, PRODUCER_ID_HEADER, QUEUE_OP_HEADER, TASK_ID_HEADER,
};
pub use registry::DuplicatePolicy;
pub use reserved::is_reserved;

use budget::QueueBudget;
use conn::{Owed, PushError, QueueBounds, Waiting};
use queue_control::QueueControl;
use queues::HubQueues;
use registry::{Registered, Registry};

use crate::metrics::{outcome, HubMetrics, MessageTable};
use agentwire_transport::{SendClass, TransportKind};

pub use agentwire_proto::names::{HUB_ID, PRESENCE_TOPIC};

/// The default of [`CoreConfig::agent_queue_bytes`]: 64 MiB.
pub const DEFAULT_AGENT_QUEUE_BYTES: usize = 64 << 20;

/// The default of [`CoreConfig::max_subscriptions`].
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 10_000;

/// The default of [`CoreConfig::max_open_requests`].
pub const DEFAULT_MAX_OPEN_REQUESTS: usize = 65_536;

/// What the core needs of the hub's configuration.
///
/// ```
/// use agentwire_hub::CoreConfig;
/// let c = CoreConfig::default();
/// assert_eq!(c.max_request_wait.as_secs(), 60);
/// ```
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Versions, codecs, auth token, limits and heartbeat interval.
    pub policy: HubPolicy,
    /// An agent silent for this many heartbeat intervals is removed.
    pub heartbeat_miss_limit: u32,
    /// Envelope frames each connection's outbound queue holds before senders get
    /// `queue-full`.
    pub agent_queue_capacity: usize,
    /// Bytes of envelope frames each connection's outbound queue holds before senders get
    /// `queue-full` (a frame of any size fits an empty queue).
    pub agent_queue_bytes: usize,
    /// Bytes queued for all connections together before senders get `queue-full` (topic
    /// copies are dropped and counted as `hub-queue-budget`): what a hub holds for agents
    /// that do not read, at most.
    pub hub_queue_bytes: usize,
    /// Time allowed from [`HubCore::open`] to a valid hello.
    pub handshake_timeout: Duration,
    /// What to do with a second agent using a connected id.
    pub duplicate_policy: DuplicatePolicy,
    /// Longest the hub waits for an answer to a request (also for requests without a ttl).
    pub max_request_wait: Duration,
    /// How long a connection remembers the requests the hub answered itself (at their
    /// deadline, or because their target left), so that their real answers, arriving late,
    /// are dropped instead of delivered as a second answer. At most 4,096 ids per connection.
    pub settled_memory: Duration,
    /// Topics one agent may subscribe to at once; a subscribe beyond gets `limit-exceeded`
    /// (the connection stays).
    pub max_subscriptions: usize,
    /// Requests one agent may have waiting for answers at once, and requests it may have
    /// been sent and not yet answered: beyond, its requests get `limit-exceeded` and requests
    /// to it `queue-full` (topic and broadcast copies are dropped for it).
    pub max_open_requests: usize,
    /// Work queues: ack wait, attempts, backoff, duplicate window, limits.
    pub queue: agentwire_queue::QueueConfig,
    /// Per-agent credentials and permissions; `None`: any agent may take any id (subject to
    /// the policy's shared token) and do anything.
    pub access: Option<Arc<AccessPolicy>>,
    /// Rates and counts that hold under abuse (all off by default).
    pub limits: AbuseLimits,
    /// Every connection except over a Unix socket must show an agent certificate (mutual
    /// TLS) naming the id its hello claims. A certificate, when shown, always binds the id,
    /// required or not.
    pub require_client_cert: bool,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            policy: HubPolicy::default(),
            heartbeat_miss_limit: 3,
            agent_queue_capacity: 4096,
            agent_queue_bytes: DEFAULT_AGENT_QUEUE_BYTES,
            hub_queue_bytes: DEFAULT_HUB_QUEUE_BYTES,
            handshake_timeout: Duration::from_secs(10),
            duplicate_policy: DuplicatePolicy::RejectNew,
            max_request_wait: Duration::from_secs(60),
            settled_memory: Duration::from_secs(600),
            max_open_requests: DEFAULT_MAX_OPEN_REQUESTS,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            queue: agentwire_queue::QueueConfig::default(),
            access: None,
            limits: AbuseLimits::default(),
            require_client_cert: false,
        }
    }
}

/// The time an event happens: the monotonic clock for deadlines and liveness, the wall clock
/// (microseconds since the Unix epoch) for envelope ttls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time.
    pub instant: Instant,
    /// Wall-clock time, microseconds since the Unix epoch.
    pub unix_us: u64,
}

impl Now {
    /// The system's clocks now (drivers use this; tests make their own).
    pub fn system() -> Now {
        Now {
            instant: Instant::now(),
            unix_us: agentwire_transport::clock::now_us(),
        }
    }

    /// `d` later on both clocks.
    pub fn after(self, d: Duration) -> Now {
        Now {
            instant: self.instant + d,
            unix_us: self
                .unix_us
                .saturating_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
        }
    }
}

/// What the driver must do after an event.
#[derive(Debug)]
pub enum Action<D, R> {
    /// The connection's outbound queue was empty and now holds frames: its writer should
    /// take them with [`HubCore::poll_outbound`].
    Wake(Arc<Conn<D, R>>),
    /// An agent here (not a cluster's stand-in) joined, left, subscribed or unsubscribed: the
    /// set a cluster announces to its other hubs changed. A driver that is part of a cluster
    /// tells it; others ignore it.
    AgentsChanged,
    /// The handshake succeeded: apply the agreed frame limit
    /// ([`Registration::max_frame_size`]) to both directions of the transport.
    Registered(Arc<Conn<D, R>>),
    /// Make `writes` durable (in token order, after every earlier `Persist`), then call
    /// [`HubCore::on_persisted`] with `token`. A write that fails is tried again until it is
    /// made (tell the core with [`HubCore::on_store_failed`], then
    /// [`HubCore::on_store_recovered`]). Only hubs with a queue store
    /// ([`HubCore::restore_queues`]) ask for this.
    Persist {
        /// Increases by one per `Persist`.
        token: u64,
        /// The writes, in order, to apply as one batch (or with neighbours, in order).
        writes: Vec<agentwire_queue::StoreOp>,
    },
    /// Close the connection with `code`. With `linger`, first let its writer send what is
    /// queued (a reject) and give the peer a moment to close by itself.
    Close {
        /// The connection.
        conn: Arc<Conn<D, R>>,
        /// The close code.
        code: ErrorCode,
        /// Why, for the peer and the logs.
        reason: String,
        /// Send what is queued first.
        linger: bool,
    },
    /// An agent allowed to asked the hub for `op` ([`HubOp`]): do it, then answer with
    /// [`HubCore::answer_hub_op`].
    HubOp {
        /// Who asked.
        conn: Arc<Conn<D, R>>,
        /// The request's id.
        request: u64,
        /// What to do.
        op: HubOp,
        /// Where the answer goes (the request's own stream), if anywhere.
        reply: Option<R>,
    },
}

fn snapshot<D, R>(conn: Arc<Conn<D, R>>) -> Option<AgentSnapshot<D, R>> {
    let registration = conn.registration()?.clone();
    let (queued, mut topics) = {
        let st = conn.lock();
        let topics: Vec<String> = st.topics.iter().map(|t| t.to_string()).collect();
        (st.queue.len(), topics)
    };
    topics.sort();
    Some(AgentSnapshot {
        conn,
        registration,
        queued,
        topics,
    })
}

/// A snapshot of one registered agent.
#[derive(Debug, Clone)]
pub struct AgentSnapshot<D, R> {
    /// The connection (for the driver's own counters).
    pub conn: Arc<Conn<D, R>>,
    /// What the handshake agreed.
    pub registration: Registration,
    /// Envelope frames waiting in its queue.
    pub queued: usize,
    /// Topics it subscribes to, sorted.
    pub topics: Vec<String>,
}

/// The hub's routing core. `D` is the driver's per-connection data, `R` a transport's reply
/// handle; both are opaque to the core.
///
/// ```
/// use agentwire_hub::{CoreConfig, HubCore, Now};
/// use agentwire_hub::metrics::HubMetrics;
/// use agentwire_transport::TransportKind;
/// let now = Now::system();
/// let core: HubCore<(), ()> = HubCore::new(CoreConfig::default(), HubMetrics::new(), now);
/// let conn = core.open(TransportKind::Unix, (), now);
/// let mut actions = Vec::new();
/// // No hello within the handshake timeout: the core closes the connection.
/// core.on_timeout(now.after(std::time::Duration::from_secs(11)), &mut actions);
/// assert!(conn.is_closed());
/// ```
pub struct HubCore<D, R> {
    config: CoreConfig,
    handshake: HubHandshake,
    registry: Registry<D, R>,
    /// Connections still in the handshake, for its timeout (touched at open and hello only).
    handshaking: Mutex<HashMap<u64, Weak<Conn<D, R>>>>,
    metrics: HubMetrics,
    messages_in: MessageTable,
    epoch: Instant,
    next_conn: AtomicU64,
    next_id: AtomicU64,
    queues: Mutex<HubQueues<D, R>>,
    admission: Mutex<limits::Admission>,
    /// Bytes queued for all connections together.
    budget: QueueBudget,
    /// The access policy in force (the configuration's, until [`HubCore::reload_access`]).
    access: std::sync::RwLock<Option<Arc<AccessPolicy>>>,
}

impl<D, R> HubCore<D, R> {
    /// A core with `config`, recording into `metrics`, started at `now`.
    pub fn new(config: CoreConfig, metrics: HubMetrics, now: Now) -> Self {
        let kinds = Kind::ALL.map(Kind::name);
        let priorities = Priority::ALL.map(Priority::name);
        let config_queue = config.queue.clone();
        let budget = QueueBudget::new(metrics.queued_bytes(), config.hub_queue_bytes);
        let access = config.access.clone();
        HubCore {
            handshake: HubHandshake::new(config.policy.clone()),
            messages_in: metrics.message_table(crate::metrics::direction::IN, &kinds, &priorities),
            config,
            registry: Registry::default(),
            handshaking: Mutex::new(HashMap::new()),
            metrics,
            epoch: now.instant,
            next_conn: AtomicU64::new(1),
            next_id: AtomicU64::new(1),
            queues: Mutex::new(HubQueues::in_memory(config_queue, now)),
            admission: Mutex::new(limits::Admission::default()),
            budget,
            access: std::sync::RwLock::new(access),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// The metrics it records into.
    pub fn metrics(&self) -> &HubMetrics {
        &self.metrics
    }

    /// Pre-resolved `messages_total{direction="out"}` counters (kinds and priorities in
    /// code order), for the driver's writers.
    pub fn message_out_table(&self) -> MessageTable {
        self.metrics.message_table(
            crate::metrics::direction::OUT,
            &Kind::ALL.map(Kind::name),
            &Priority::ALL.map(Priority::name),
        )
    }

    /// Agents registered now.
    pub fn agent_count(&self) -> usize {
        self.registry.len()
    }

    /// How often the driver should call [`on_timeout`](HubCore::on_timeout): half a
    /// heartbeat interval, at most 100 ms (request deadlines), at least 10 ms.
    pub fn timer_period(&self) -> Duration {
        let half_beat = u64::from(self.config.policy.heartbeat_interval_ms) / 2;
        Duration::from_millis(half_beat.clamp(10, 100))
    }

    fn ms(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    /// A new connection, in the handshake until its hello arrives.
    pub fn open(&self, transport: TransportKind, driver: D, now: Now) -> Arc<Conn<D, R>> {
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn::new(
            id,
            transport,
            driver,
            QueueBounds {
                frames: self.config.agent_queue_capacity,
                bytes: self.config.agent_queue_bytes,
                budget: self.budget.clone(),
            },
            now,
            self.ms(now.instant),
        ));
        self.lock_handshaking().insert(id, Arc::downgrade(&conn));
        conn
    }

    /// [`open`](Self::open) for `peer`, under the per-address and handshake-rate limits: a
    /// connection over a limit is closed at once with `limit-exceeded` (its driver sees it
    /// closed and drops the transport). A certified id binds the agent id its hello may claim.
    pub fn open_from(
        &self,
        transport: TransportKind,
        peer: Peer,
        driver: D,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) -> Arc<Conn<D, R>> {
        let conn = self.open(transport, driver, now);
        let remote = peer.remote;
        if let Some(id) = peer.certified_id {
            let _ = conn.certified_id.set(id);
        }
        let admitted =
            self.admission
                .lock_or_recover()
                .open(&self.config.limits, remote, now.instant);
        match admitted {
            Ok(()) => {
                if let (Some(ip), Some(_)) = (remote, self.config.limits.connections_per_address) {
                    let _ = conn.remote.set(ip);
                }
            }
            Err(why) => {
                self.metrics
                    .handshake(conn.transport().name(), outcome::FAILED);
                self.end(&conn, ErrorCode::LimitExceeded, &why, now, out);
            }
        }
        conn
    }

    fn lock_handshaking(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Weak<Conn<D, R>>>> {
        self.handshaking.lock_or_recover()
    }

    /// One frame from `conn`. `reply` is the transport's reply handle when the frame
    /// arrived as a request on a stream that can carry its answer.
    pub fn on_frame(
        &self,
        conn: &Arc<Conn<D, R>>,
        raw: RawFrame,
        reply: Option<R>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        if conn.is_closed() {
            return;
        }
        conn.touch(self.ms(now.instant));
        let Some(reg) = conn.registration() else {
            self.on_hello(conn, &raw, now, out);
            return;
        };
        if raw.type_byte == FrameType::Envelope as u8 {
            self.on_envelope(conn, reg, &raw, reply, now, out);
            return;
        }
        match Frame::decode(&raw, reg.codec) {
            Err(e) => self.end(conn, e.close_code(), &e.to_string(), now, out),
            Ok(Frame::Subscribe(topic)) => self.on_subscribe(conn, reg, topic, now, out),
            Ok(Frame::Unsubscribe(topic)) => {
                let taken = conn.lock().topics.take(topic.as_str());
                if let Some(topic) = taken {
                    self.registry.unsubscribe([&topic], conn);
                    self.agents_changed(conn, out);
                }
            }
            Ok(Frame::Consume(c)) => {
                let control = QueueControl::Consume {
                    queue: c.queue,
                    credit: c.credit,
                };
                self.on_control(conn, reg, control, now, out)
            }
            Ok(Frame::Ack(task)) => {
                let control = QueueControl::Settle { task, nack: None };
                self.on_control(conn, reg, control, now, out)
            }
            Ok(Frame::Nack(n)) => {
                let control = QueueControl::Settle {
                    task: n.task,
                    nack: Some(n),
                };
                self.on_control(conn, reg, control, now, out)
            }
            Ok(Frame::Heartbeat(_)) => {}
            Ok(Frame::Goodbye(g)) => self.end(
                conn,
                ErrorCode::Normal,
                &format!("goodbye: {}", g.reason),
                now,
                out,
            ),
            Ok(Frame::Envelope(_)) => {} // not reached: envelopes are handled above
            Ok(Frame::Hello(_) | Frame::Welcome(_) | Frame::Reject(_)) => self.end(
                conn,
                ErrorCode::ProtocolViolation,
                "handshake frame after the handshake",
                now,
                out,
            ),
        }
    }

    /// A subscribe: refused (the connection stays) when the topic is the hub's or the
    /// agent's grant does not name it; a name over the limits closes the connection.
    fn on_subscribe(
        &self,
        conn: &Arc<Conn<D, R>>,
        reg: &Registration,
        topic: String,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let refusal = reserved::subscribe_refusal(&topic).or_else(|| {
            (!reg.grant.as_ref().is_none_or(|g| g.may_subscribe(&topic)))
                .then(|| format!("not allowed to subscribe to {topic:?}"))
        });
        if let Some(why) = refusal {
            self.denied(conn, &why, None, now, out);
            return;
        }
        if let Err(e) = self.config.policy.limits.check_name(&topic) {
            self.end(conn, ErrorCode::LimitExceeded, &e.to_string(), now, out);
            return;
        }
        let topic: Arc<str> = Arc::from(topic);
        let fresh = {
            let mut st = conn.lock();
            if st.topics.len() >= self.config.max_subscriptions && !st.topics.contains(&topic) {
                drop(st);
                self.metrics.dropped("subscription-limit");
                let why = format!(
                    "this agent already subscribes to {} topics (the hub's limit)",
                    self.config.max_subscriptions
                );
                self.send_error(conn, 0, ErrorCode::LimitExceeded, &why, None, now, out);
                return;
            }
            st.topics.insert(topic.clone())
        };
        // The closed check after the insert pairs with `close`, which marks the connection
        // closed before it takes its topics: one of the two removes it.
        if fresh && !conn.is_closed() {
            self.registry.subscribe(&topic, conn);
            self.agents_changed(conn, out);
        }
    }

    /// The transport of `conn` ended (`Normal` for an orderly end).
    pub fn on_closed(
        &self,
        conn: &Arc<Conn<D, R>>,
        code: ErrorCode,
        reason: &str,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        if conn.registration().is_none() && !conn.is_closed() {
            self.metrics
                .handshake(conn.transport().name(), outcome::FAILED);
        }
        self.end(conn, code, reason, now, out);
    }

    /// Deadlines: handshakes not done in time, agents that missed their heartbeats,
    /// requests whose ttl ran out.
    pub fn on_timeout(&self, now: Now, out: &mut Vec<Action<D, R>>) {
        self.queues_on_timeout(now, out);
        let late: Vec<Arc<Conn<D, R>>> = self
            .lock_handshaking()
            .values()
            .filter_map(Weak::upgrade)
            .filter(|c| {
                now.instant.saturating_duration_since(c.opened()) >= self.config.handshake_timeout
            })
            .collect();
        for conn in late {
            self.metrics
                .handshake(conn.transport().name(), outcome::FAILED);
            self.end(
                &conn,
                ErrorCode::HandshakeTimeout,
                "no hello in time",
                now,
                out,
            );
        }
        let limit_ms = u64::from(self.config.policy.heartbeat_interval_ms)
            * u64::from(self.config.heartbeat_miss_limit.max(1));
        let now_ms = self.ms(now.instant);
        let forget_before = now.instant.checked_sub(self.config.settled_memory);
        for conn in self.registry.all() {
            let silent_ms = now_ms.saturating_sub(conn.last_seen_ms());
            if silent_ms > limit_ms {
                tracing::info!(agent = ?conn.registration().map(|r| &r.agent_id), silent_ms, "agent missed its heartbeats; removing");
                self.end(
                    &conn,
                    ErrorCode::LivenessTimeout,
                    "missed heartbeats",
                    now,
                    out,
                );
                continue;
            }
            let expired: Vec<(u64, Option<R>)> = {
                let mut st = conn.lock();
                if let Some(before) = forget_before {
                    st.forget_settled(before);
                }
                st.forget_owed(now.instant);
                let ids: Vec<u64> = st
                    .waiting
                    .iter()
                    .filter(|(_, w)| w.deadline <= now.instant)
                    .map(|(id, _)| *id)
                    .collect();
                ids.into_iter()
                    .filter_map(|id| {
                        let w = st.waiting.remove(&id)?;
                        st.settle(id, now.instant);
                        Some((id, w.reply))
                    })
                    .collect()
            };
            for (id, reply) in expired {
                self.metrics.dropped("request-timeout");
                self.send_error(
                    &conn,
                    id,
                    ErrorCode::Cancelled,
                    "no answer within the request's ttl",
                    reply,
                    now,
                    out,
                );
            }
        }
    }

    /// The next frame for `conn`'s transport, most urgent first.
    pub fn poll_outbound(&self, conn: &Conn<D, R>) -> Option<Outbound<R>> {
        let out = conn.lock().queue.pop()?;
        if out.kind.is_some() {
            self.metrics.queue_depth_add(-1);
        }
        Some(out)
    }

    /// The driver wrote (flushed) every frame it took from `conn` with
    /// [`poll_outbound`](HubCore::poll_outbound): their bytes stop counting against the
    /// connection's queue and the hub's budget. Until then a writer blocked on a peer that
    /// does not read keeps them counted.
    pub fn written(&self, conn: &Conn<D, R>) {
        conn.lock().queue.written();
    }

    /// Closes the connection of agent `agent_id` with `code` and `reason` (sent to the agent
    /// first); `false` when no such agent is connected. For operators, and for a cluster
    /// that finds the id taken on another hub.
    ///
    /// ```
    /// use agentwire_hub::{CoreConfig, HubCore, Now};
    /// use agentwire_hub::metrics::HubMetrics;
    /// use agentwire_proto::ErrorCode;
    /// let core: HubCore<(), ()> = HubCore::new(CoreConfig::default(), HubMetrics::new(), Now::system());
    /// let mut out = Vec::new();
    /// assert!(!core.disconnect("nobody", ErrorCode::Normal, "bye", Now::system(), &mut out));
    /// ```
    pub fn disconnect(
        &self,
        agent_id: &str,
        code: ErrorCode,
        reason: &str,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) -> bool {
        let Some(conn) = self.registry.get(agent_id) else {
            return false;
        };
        self.close(&conn, code, reason, false, now, out);
        true
    }

    /// Closes every connection with `shutting-down`.
    pub fn shutdown(&self, now: Now, out: &mut Vec<Action<D, R>>) {
        for conn in self.registry.all() {
            self.end(
                &conn,
                ErrorCode::ShuttingDown,
                "hub shutting down",
                now,
                out,
            );
        }
        let waiting: Vec<_> = self
            .lock_handshaking()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for conn in waiting {
            self.end(
                &conn,
                ErrorCode::ShuttingDown,
                "hub shutting down",
                now,
                out,
            );
        }
    }

    /// Every registered agent, sorted by id.
    pub fn agents(&self) -> Vec<AgentSnapshot<D, R>> {
        let mut v: Vec<AgentSnapshot<D, R>> = self
            .registry
            .all()
            .into_iter()
            .filter_map(snapshot)
            .collect();
        v.sort_by(|a, b| a.registration.agent_id.cmp(&b.registration.agent_id));
        v
    }

    /// A snapshot of agent `agent_id`, if it is connected.
    pub fn agent(&self, agent_id: &str) -> Option<AgentSnapshot<D, R>> {
        self.registry.get(agent_id).and_then(snapshot)
    }

    // ---- handshake ---------------------------------------------------------------------

    fn on_hello(
        &self,
        conn: &Arc<Conn<D, R>>,
        raw: &RawFrame,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        self.lock_handshaking().remove(&conn.id());
        let transport = conn.transport().name();
        let (welcome, session) = match self.handshake.on_frame(raw, conn.id()) {
            HubDecision::Accept { reply, session } => (reply, session),
            HubDecision::Reject { reply, code } => {
                self.reject(conn, reply, code, now, out);
                return;
            }
        };
        if let Some(why) = reserved::id_refusal(&session.agent_id, conn.transport()) {
            let code = ErrorCode::Unauthorized;
            let reply = agentwire_proto::Reject::new(code, why).to_frame();
            self.reject(conn, reply, code, now, out);
            return;
        }
        let Admitted {
            grant,
            token_sha256,
        } = match self.authorize(conn, raw, &session.agent_id) {
            Ok(admitted) => admitted,
            Err(why) => {
                let reply = agentwire_proto::Reject::new(ErrorCode::Unauthorized, why).to_frame();
                self.reject(conn, reply, ErrorCode::Unauthorized, now, out);
                return;
            }
        };
        let agent_id: Arc<str> = Arc::from(session.agent_id.as_str());
        conn.register(Registration {
            agent_id: agent_id.clone(),
            role: session.role.clone(),
            codec: session.codec,
            max_frame_size: session.max_frame_size,
            counted_goodbye: session.has_capability(agentwire_proto::counted_goodbye::CAPABILITY),
            grant,
            token_sha256,
        });
        // The welcome is queued before the id becomes reachable, so that it leaves before any
        // message routed to this agent (the driver's writer takes nothing until woken).
        self.push(conn, control(welcome), out);
        match self
            .registry
            .register(&agent_id, conn, self.config.duplicate_policy)
        {
            Ok(Registered::Fresh) => {}
            Ok(Registered::Replaced(old)) => {
                self.close_as(
                    &old,
                    ErrorCode::Replaced,
                    "replaced by a newer connection",
                    false,
                    true,
                    now,
                    out,
                );
            }
            Err(code) => {
                conn.lock().queue.clear();
                let reply = agentwire_proto::Reject::new(
                    code,
                    format!("agent id {:?} is already connected", session.agent_id),
                )
                .to_frame();
                self.reject(conn, reply, code, now, out);
                return;
            }
        }
        out.push(Action::Registered(conn.clone()));
        self.agents_changed(conn, out);
        self.metrics.handshake(transport, outcome::ACCEPTED);
        self.metrics.agent_registered(transport);
        tracing::debug!(agent = %session.agent_id, session_id = conn.id(), codec = %session.codec, transport, "agent joined");
        self.publish_presence(conn, "join", None, now, out);
        // A close that raced with the registration (a handshake timeout, a shutdown) still
        // unregisters it: closing again looks the id up.
        if conn.is_closed() {
            self.close(
                conn,
                ErrorCode::Normal,
                "closed during the handshake",
                false,
                now,
                out,
            );
        }
    }

    /// Whether `conn` may take `agent_id` (its certificate, the hub's rule on certificates and
    /// the access policy decide), and with which grant; `Err` says why not.
    fn authorize(
        &self,
        conn: &Conn<D, R>,
        raw: &RawFrame,
        agent_id: &str,
    ) -> Result<Admitted, String> {
        if conn.transport() == TransportKind::Cluster {
            // An agent of another hub: that hub checked its credential and its sends; here it
            // is held to what this hub's access file grants its id at most (hubs of a cluster
            // share their access file). The queue keeper is the hubs' own.
            let policy = match self.access_policy() {
                Some(policy) if agent_id != QUEUE_OWNER_ID => policy,
                _ => return Ok(Admitted::default()),
            };
            return policy
                .grant_for_remote(agent_id)
                .map(|grant| Admitted {
                    grant: Some(grant),
                    token_sha256: None,
                })
                .ok_or_else(|| {
                    format!("no credential here names {agent_id:?}, an agent of another hub")
                });
        }
        let certified = conn.certified_id.get();
        match certified {
            Some(id) if **id != *agent_id => {
                return Err(format!(
                    "the agent certificate names {id:?}, not {agent_id:?}"
                ))
            }
            None if self.config.require_client_cert && conn.transport() != TransportKind::Unix => {
                return Err("this hub requires an agent certificate (mutual TLS)".into())
            }
            _ => {}
        }
        let Some(policy) = self.access_policy() else {
            return Ok(Admitted::default());
        };
        let token = match Frame::decode(raw, Codec::MsgPack) {
            Ok(Frame::Hello(h)) => h.auth_token.as_deref().map(access::token_digest),
            _ => None,
        };
        policy
            .admit_digest(agent_id, token.as_ref(), certified.is_some())
            .map(|grant| Admitted {
                grant: Some(grant),
                token_sha256: token,
            })
            .ok_or_else(|| match certified {
                Some(_) => format!("no credential for the certified agent id {agent_id:?}"),
                None => format!("no credential for agent id {agent_id:?} with this token"),
            })
    }

    /// The access policy in force.
    fn access_policy(&self) -> Option<Arc<AccessPolicy>> {
        self.access.read_or_recover().clone()
    }

    /// Puts `policy` in force (a reloaded access file) and checks every connected agent
    /// against it: an agent whose credential no longer names its id, or whose permissions
    /// changed, is closed with `unauthorized` (it may connect again under the new rules);
    /// the others keep their connections. Agents of other hubs are their hub's to check.
    /// Returns how many were closed.
    pub fn reload_access(
        &self,
        policy: Arc<AccessPolicy>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) -> usize {
        *self.access.write_or_recover() = Some(policy.clone());
        let mut closed = 0;
        for conn in self.registry.all() {
            let Some(reg) = conn.registration() else {
                continue;
            };
            if conn.transport() == TransportKind::Cluster {
                continue;
            }
            let certified = conn.certified_id.get().is_some();
            let now_granted =
                policy.admit_digest(&reg.agent_id, reg.token_sha256.as_ref(), certified);
            let why = match (&now_granted, &reg.grant) {
                (None, _) => "its credential was removed from the access file",
                (Some(new), Some(old)) if new == old => continue,
                (Some(_), _) => "its permissions changed; connect again",
            };
            tracing::info!(agent = %reg.agent_id, why, "closing an agent after an access reload");
            self.metrics.dropped("credential-revoked");
            self.close(&conn, ErrorCode::Unauthorized, why, false, now, out);
            closed += 1;
        }
        closed
    }

    /// Closes `conn` with `unauthorized` because its credential is no longer good (`why`),
    /// counted as `dropped{reason="credential-revoked"}`.
    pub fn revoke(&self, conn: &Arc<Conn<D, R>>, why: &str, now: Now, out: &mut Vec<Action<D, R>>) {
        self.metrics.dropped("credential-revoked");
        self.close(conn, ErrorCode::Unauthorized, why, false, now, out);
    }

    /// Sends a reject, then closes once it is out.
    fn reject(
        &self,
        conn: &Arc<Conn<D, R>>,
        reply: Bytes,
        code: ErrorCode,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        self.metrics
            .handshake(conn.transport().name(), outcome::REJECTED);
        self.metrics.error(code.name());
        self.push(conn, control(reply), out);
        self.close(conn, code, code.name(), true, now, out);
    }

    // ---- closing -----------------------------------------------------------------------

    /// Ends `conn`: counts and logs an abnormal code, then closes it.
    fn end(
        &self,
        conn: &Arc<Conn<D, R>>,
        code: ErrorCode,
        reason: &str,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        if code != ErrorCode::Normal && !conn.is_closed() {
            tracing::warn!(agent = ?conn.registration().map(|r| &r.agent_id), %code, reason, "closing agent connection");
            self.metrics.error(code.name());
        }
        self.close(conn, code, reason, false, now, out);
    }

    fn close(
        &self,
        conn: &Arc<Conn<D, R>>,
        code: ErrorCode,
        reason: &str,
        linger: bool,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        self.close_as(conn, code, reason, linger, false, now, out);
    }

    /// Closes `conn`; `unregistered` when the caller already took it out of the registry
    /// (a replaced connection).
    #[allow(clippy::too_many_arguments)]
    fn close_as(
        &self,
        conn: &Arc<Conn<D, R>>,
        code: ErrorCode,
        reason: &str,
        linger: bool,
        unregistered: bool,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let first = conn.mark_closed();
        if first {
            if let Some(ip) = conn.remote.get() {
                self.admission.lock_or_recover().close(*ip);
            }
        }
        let reg = conn.registration();
        // Unregister even when already closed: a hello that raced with the close may have
        // registered the connection after the first close ran.
        let was_registered =
            unregistered || reg.is_some_and(|r| self.registry.unregister(&r.agent_id, conn));
        if !first && !was_registered {
            return;
        }
        self.lock_handshaking().remove(&conn.id());
        let (topics, owed, dropped) = {
            let mut st = conn.lock();
            st.queue.close();
            let dropped = if linger { 0 } else { st.queue.clear() };
            st.waiting.clear();
            let topics: Vec<Arc<str>> = st.topics.drain().collect();
            let owed: Vec<_> = st.owed.drain().collect();
            (topics, owed, dropped)
        };
        if dropped > 0 {
            self.metrics.queue_depth_add(-(dropped as i64));
        }
        self.registry.unsubscribe(topics.iter(), conn);
        self.queues_conn_closed(conn, now, out);
        let who = reg.map(|r| r.agent_id.to_string()).unwrap_or_default();
        let (fail, why) = if who == QUEUE_OWNER_ID {
            (ErrorCode::Cancelled, queue_owner::OWNER_CHANGED.to_owned())
        } else {
            (
                ErrorCode::UnknownAgent,
                format!("agent {who:?} left before answering"),
            )
        };
        for ((_, request), owed) in owed {
            if let Some(requester) = owed.requester.upgrade().filter(|_| owed.direct) {
                let target = Some(conn.id());
                self.fail_request(&requester, request, target, fail, &why, now, out);
            }
        }
        if was_registered {
            self.metrics
                .agent_removed(conn.transport().name(), code.name());
            tracing::debug!(agent = %who, reason = %code, "agent left");
            self.publish_presence(conn, "leave", Some(code), now, out);
            self.agents_changed(conn, out);
        }
        if first {
            out.push(Action::Close {
                conn: conn.clone(),
                code,
                reason: reason.to_owned(),
                linger,
            });
        }
    }

    // ---- routing -----------------------------------------------------------------------

    fn on_envelope(
        &self,
        conn: &Arc<Conn<D, R>>,
        reg: &Registration,
        raw: &RawFrame,
        reply: Option<R>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let in_place = EnvelopeView::parse_with(reg.codec, &raw.payload);
        // The full decode, only when the header could not be read in place; `Forward` reuses
        // it rather than decoding again.
        let decoded = match in_place {
            Some(_) => None,
            None => match reg.codec.decode_envelope(&raw.payload) {
                Ok(env) => Some(env),
                Err(e) => {
                    let e = FrameError::Malformed {
                        frame: FrameType::Envelope,
                        message: e.to_string(),
                    };
                    self.end(conn, e.close_code(), &e.to_string(), now, out);
                    return;
                }
            },
        };
        let Some(view) = in_place.or_else(|| decoded.as_ref().map(EnvelopeView::of)) else {
            return;
        };
        if let Err(e) = view.check(&self.config.policy.limits) {
            self.end(conn, ErrorCode::LimitExceeded, &e.to_string(), now, out);
            return;
        }
        let reply = reply.filter(|_| view.kind == Kind::Request);
        let limits = &self.config.limits;
        if limits.agent_messages_per_sec.is_some() || limits.agent_bytes_per_sec.is_some() {
            let admitted = {
                let mut st = conn.lock();
                let rate = st.rate.get_or_insert_with(|| {
                    limits::AgentRate::new(limits, reg.max_frame_size, now.instant)
                });
                rate.admit(raw.payload.len(), limits, now.instant)
            };
            if let Err(why) = admitted {
                self.metrics.dropped("rate-limited");
                self.send_error(
                    conn,
                    view.id,
                    ErrorCode::LimitExceeded,
                    &why,
                    reply,
                    now,
                    out,
                );
                return;
            }
        }
        if view.to == DestinationRef::Agent(HUB_ID) && view.kind == Kind::Request {
            self.on_hub_op(conn, reg, raw, (view.id, reply), now, out);
            return;
        }
        if let Some(why) = reserved::send_refusal(&view.to) {
            self.denied(conn, &why, Some((view.id, reply)), now, out);
            return;
        }
        if let Some(grant) = &reg.grant {
            if !grant.may_send(&view.to, view.kind, view.correlation) {
                let why = format!("not allowed to send to {}", view.to.to_owned());
                self.denied(conn, &why, Some((view.id, reply)), now, out);
                return;
            }
        }
        self.messages_in.record(
            usize::from(view.kind.code()),
            view.priority.index(),
            view.body.len() as u64,
        );
        if view.is_expired(now.unix_us) {
            self.metrics.dropped("expired");
            self.send_error(
                conn,
                view.id,
                ErrorCode::Expired,
                "ttl ran out before delivery",
                reply,
                now,
                out,
            );
            return;
        }
        let frames = Forward::new(raw, &view, reg, decoded.as_ref());
        if let DestinationRef::Queue(_) = view.to {
            match self.queue_owner() {
                // Another hub keeps the queues: to it, as to an agent.
                Some(owner) if view.kind == Kind::Request => {
                    self.forward_request(conn, &owner, &view, &frames, reply, now, out)
                }
                Some(owner) => {
                    let class = SendClass::Message(view.priority);
                    if let Err(e) = self.push_envelope(&owner, &frames, class, view.kind, None, out)
                    {
                        self.refused(conn, &view, QUEUE_OWNER_ID, e, None, now, out);
                    }
                }
                None => self.on_enqueue(conn, reg, raw, decoded, reply, now, out),
            }
            return;
        }
        match view.to {
            DestinationRef::Agent(id) => {
                let Some(target) = self.registry.get(id) else {
                    self.refused(conn, &view, id, PushError::Closed, reply, now, out);
                    return;
                };
                match (view.kind, view.correlation) {
                    (Kind::Request, _) => {
                        self.forward_request(conn, &target, &view, &frames, reply, now, out)
                    }
                    (Kind::Response | Kind::Error, Some(request)) => {
                        self.forward_answer(conn, &target, request, &view, &frames, now, out)
                    }
                    _ => {
                        let class = SendClass::Message(view.priority);
                        if let Err(e) =
                            self.push_envelope(&target, &frames, class, view.kind, None, out)
                        {
                            self.refused(conn, &view, id, e, None, now, out);
                        }
                    }
                }
            }
            DestinationRef::Topic(topic) => {
                let class = class_of(&view);
                let ask = self.fan_out_ask(conn, &view, now);
                self.registry
                    .for_each_subscriber(topic, Some(conn), |target| {
                        self.fan_out(target, &frames, class, view.kind, ask.as_ref(), out);
                    });
            }
            DestinationRef::Broadcast => {
                let class = class_of(&view);
                let ask = self.fan_out_ask(conn, &view, now);
                self.registry.for_each_other(conn, |target| {
                    self.fan_out(target, &frames, class, view.kind, ask.as_ref(), out);
                });
            }
            DestinationRef::Queue(_) => {} // handled above
        }
    }

    /// When the hub stops waiting for answers to the request `view`: its ttl, at most
    /// [`CoreConfig::max_request_wait`].
    fn request_deadline(&self, view: &EnvelopeView<'_>, now: Now) -> Instant {
        let wait = match view.ttl_ms {
            0 => self.config.max_request_wait,
            ms => Duration::from_millis(u64::from(ms)).min(self.config.max_request_wait),
        };
        now.instant + wait
    }

    /// A request to one agent: remembered as waiting on the requester, owed by the target.
    #[allow(clippy::too_many_arguments)]
    fn forward_request(
        &self,
        conn: &Arc<Conn<D, R>>,
        target: &Arc<Conn<D, R>>,
        view: &EnvelopeView<'_>,
        frames: &Forward<'_>,
        reply: Option<R>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let deadline = self.request_deadline(view, now);
        {
            let mut st = conn.lock();
            let refusal = if st.waiting.contains_key(&view.id) {
                Some((
                    ErrorCode::ProtocolViolation,
                    "a request with this id is already waiting for its answer".to_owned(),
                ))
            } else if st.waiting.len() >= self.config.max_open_requests {
                Some((
                    ErrorCode::LimitExceeded,
                    format!(
                        "{} requests of this agent already wait for answers (the hub's limit)",
                        st.waiting.len()
                    ),
                ))
            } else {
                None
            };
            if let Some((code, why)) = refusal {
                drop(st);
                if code == ErrorCode::LimitExceeded {
                    self.metrics.dropped("open-requests");
                }
                self.send_error(conn, view.id, code, &why, reply, now, out);
                return;
            }
            st.waiting.insert(
                view.id,
                Waiting {
                    target: target.id(),
                    remote: target.transport() == TransportKind::Cluster,
                    deadline,
                    started: now.instant,
                    reply,
                },
            );
        }
        let Some(frame) = frames.get(target.registration().map_or(Codec::MsgPack, |r| r.codec))
        else {
            self.metrics.dropped("encode-failed");
            self.fail_request(
                conn,
                view.id,
                None,
                ErrorCode::Internal,
                "could not encode the request",
                now,
                out,
            );
            return;
        };
        let ask = Ask {
            requester: conn,
            request: view.id,
            deadline,
            direct: true,
        };
        let class = SendClass::Request(view.priority);
        match self.push_frame(target, frame, class, Kind::Request, Some(&ask), out) {
            Ok(()) => {}
            Err(e) => {
                let Some(w) = conn.lock().waiting.remove(&view.id) else {
                    return;
                };
                let id = target
                    .registration()
                    .map(|r| r.agent_id.to_string())
                    .unwrap_or_default();
                self.refused(conn, view, &id, e, w.reply, now, out);
            }
        }
    }

    /// A response or error to agent `target` answering its request `request`: delivered only
    /// when `conn` was asked (it owes the answer), and for a direct request only while the
    /// requester still waits for it. An answer nobody asked `conn` for is refused and
    /// counted; one the hub already settled (deadline, target gone) is dropped.
    #[allow(clippy::too_many_arguments)]
    fn forward_answer(
        &self,
        conn: &Arc<Conn<D, R>>,
        target: &Arc<Conn<D, R>>,
        request: u64,
        view: &EnvelopeView<'_>,
        frames: &Forward<'_>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let key = (target.id(), request);
        let Some(owed) = conn.lock().owed.remove(&key) else {
            if target.lock().settled_ids.contains(&request) {
                // Asked, but the hub answered it itself already and forgot the debt.
                self.metrics.dropped("late-answer");
                return;
            }
            self.metrics.dropped("not-asked");
            let who = target.registration().map(|r| r.agent_id.clone());
            tracing::info!(agent = ?conn.registration().map(|r| r.agent_id.clone()), to = ?who, request, "refused an answer to a request this agent was not asked");
            let why = format!(
                "no request {request} of {} waits for an answer from you",
                who.as_deref().unwrap_or("?")
            );
            self.send_error(conn, view.id, ErrorCode::Unauthorized, &why, None, now, out);
            return;
        };
        let codec = target.registration().map_or(Codec::MsgPack, |r| r.codec);
        let Some(frame) = frames.get(codec) else {
            self.metrics.dropped("encode-failed");
            return;
        };
        let class = SendClass::Message(view.priority);
        let (pushed, started) = {
            let mut st = target.lock();
            let mut waiting = match st.waiting.remove(&request) {
                Some(w) if owed.direct && w.target == conn.id() => Some(w),
                other => {
                    if let Some(w) = other {
                        // Waiting on another agent: not this one's to answer.
                        st.waiting.insert(request, w);
                    }
                    if owed.direct {
                        drop(st);
                        // The hub answered this request itself already (deadline, target
                        // gone), or its id now names a later request.
                        self.metrics.dropped("late-answer");
                        return;
                    }
                    None
                }
            };
            let started = waiting.as_ref().map(|w| w.started);
            let answer = Outbound {
                frame,
                class,
                kind: Some(view.kind),
                reply: waiting.as_mut().and_then(|w| w.reply.take()),
            };
            match st.queue.push(answer) {
                Ok(was_empty) => (Ok(was_empty), started),
                Err(refused) => {
                    // Not delivered: a direct request keeps waiting (its deadline answers),
                    // and the answer may come again.
                    if let Some(mut w) = waiting {
                        w.reply = refused.outbound.reply;
                        st.waiting.insert(request, w);
                    }
                    drop(st);
                    conn.lock().owe(key, owed);
                    (Err(refused.error), None)
                }
            }
        };
        match pushed {
            Ok(was_empty) => {
                self.metrics.queue_depth_add(1);
                if let Some(started) = started {
                    self.metrics.request_latency(
                        now.instant.saturating_duration_since(started).as_secs_f64(),
                    );
                }
                if was_empty {
                    out.push(Action::Wake(target.clone()));
                }
            }
            Err(e) => {
                let id = target
                    .registration()
                    .map(|r| r.agent_id.to_string())
                    .unwrap_or_default();
                self.refused(conn, view, &id, e, None, now, out);
            }
        }
    }

    /// Tells the sender its message to `id` could not be queued: the queue is full, or there
    /// is no open connection for `id` (none registered, or its queue already closed).
    #[allow(clippy::too_many_arguments)]
    fn refused(
        &self,
        conn: &Arc<Conn<D, R>>,
        view: &EnvelopeView<'_>,
        id: &str,
        e: PushError,
        reply: Option<R>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        match e {
            PushError::Full => {
                self.metrics.dropped("queue-full");
                self.send_error(
                    conn,
                    view.id,
                    ErrorCode::QueueFull,
                    &format!("agent {id:?} is not keeping up (queue full)"),
                    reply,
                    now,
                    out,
                );
            }
            PushError::HubFull => {
                self.metrics.dropped("hub-queue-budget");
                let why = "the hub's budget for queued messages is spent; try again later";
                self.send_error(conn, view.id, ErrorCode::QueueFull, why, reply, now, out);
            }
            PushError::Closed => {
                self.send_error(
                    conn,
                    view.id,
                    ErrorCode::UnknownAgent,
                    &format!("no agent {id:?} is connected"),
                    reply,
                    now,
                    out,
                );
            }
        }
    }

    /// For a topic or broadcast request: what makes each copy's target owe an answer
    /// (untracked by the requester, which may get one answer per copy).
    fn fan_out_ask<'a>(
        &self,
        conn: &'a Arc<Conn<D, R>>,
        view: &EnvelopeView<'_>,
        now: Now,
    ) -> Option<Ask<'a, D, R>> {
        (view.kind == Kind::Request).then(|| Ask {
            requester: conn,
            request: view.id,
            deadline: self.request_deadline(view, now),
            direct: false,
        })
    }

    /// A topic or broadcast copy: dropped and counted when the target's queue is full. A copy
    /// of a request (`ask`) makes the target owe its requester an answer.
    fn fan_out(
        &self,
        target: &Arc<Conn<D, R>>,
        frames: &Forward<'_>,
        class: SendClass,
        kind: Kind,
        ask: Option<&Ask<'_, D, R>>,
        out: &mut Vec<Action<D, R>>,
    ) {
        match self.push_envelope(target, frames, class, kind, ask, out) {
            Ok(()) => {}
            Err(e) => self.metrics_dropped(e),
        }
    }

    /// Counts a copy or hub message that could not be queued.
    fn metrics_dropped(&self, e: PushError) {
        match e {
            PushError::Full => self.metrics.dropped("queue-full"),
            PushError::HubFull => self.metrics.dropped("hub-queue-budget"),
            PushError::Closed => {}
        }
    }

    fn push_envelope(
        &self,
        target: &Arc<Conn<D, R>>,
        frames: &Forward<'_>,
        class: SendClass,
        kind: Kind,
        ask: Option<&Ask<'_, D, R>>,
        out: &mut Vec<Action<D, R>>,
    ) -> Result<(), PushError> {
        let codec = target.registration().map_or(Codec::MsgPack, |r| r.codec);
        let Some(frame) = frames.get(codec) else {
            self.metrics.dropped("encode-failed");
            return Ok(());
        };
        self.push_frame(target, frame, class, kind, ask, out)
    }

    /// Queues `frame` for `target`; for a request (`ask`), `target` owes its requester an
    /// answer from then on, and is refused (`Full`) while it owes
    /// [`CoreConfig::max_open_requests`] answers.
    fn push_frame(
        &self,
        target: &Arc<Conn<D, R>>,
        frame: Bytes,
        class: SendClass,
        kind: Kind,
        ask: Option<&Ask<'_, D, R>>,
        out: &mut Vec<Action<D, R>>,
    ) -> Result<(), PushError> {
        let was_empty = {
            let mut st = target.lock();
            if ask.is_some() && st.owed.len() >= self.config.max_open_requests {
                return Err(PushError::Full);
            }
            let outbound = Outbound {
                frame,
                class,
                kind: Some(kind),
                reply: None,
            };
            let was_empty = st.queue.push(outbound).map_err(|r| r.error)?;
            if let Some(ask) = ask {
                let owed = Owed {
                    requester: Arc::downgrade(ask.requester),
                    deadline: ask.deadline,
                    direct: ask.direct,
                };
                st.owe((ask.requester.id(), ask.request), owed);
            }
            was_empty
        };
        self.metrics.queue_depth_add(1);
        if was_empty {
            out.push(Action::Wake(target.clone()));
        }
        Ok(())
    }

    /// Queues a control frame (welcome, reject); they are not bounded by the queue's size.
    fn push(&self, conn: &Arc<Conn<D, R>>, outbound: Outbound<R>, out: &mut Vec<Action<D, R>>) {
        if let Ok(true) = conn.lock().queue.push(outbound) {
            out.push(Action::Wake(conn.clone()));
        }
    }

    /// Settles `requester`'s waiting request `id` with an error, if it still waits (on the
    /// connection `target`, when given).
    #[allow(clippy::too_many_arguments)]
    fn fail_request(
        &self,
        requester: &Arc<Conn<D, R>>,
        id: u64,
        target: Option<u64>,
        code: ErrorCode,
        reason: &str,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let reply = {
            let mut st = requester.lock();
            let Some(w) = st.waiting.remove(&id) else {
                return;
            };
            if target.is_some_and(|t| w.target != t) {
                // Waiting on another connection now (the id was used again).
                st.waiting.insert(id, w);
                return;
            }
            st.settle(id, now.instant);
            w.reply
        };
        self.send_error(requester, id, code, reason, reply, now, out);
    }

    fn hub_envelope(&self, to: Destination, kind: Kind, now: Now) -> Envelope {
        Envelope::new(
            self.next_id.fetch_add(1, Ordering::Relaxed),
            HUB_ID,
            to,
            kind,
        )
        .with_timestamp_us(now.unix_us)
    }

    /// A refusal by the access policy: counted, and told to the agent as an `unauthorized`
    /// error (correlation = the refused message's id, or 0 for a frame without one); the
    /// connection stays open and nothing of the refused message goes anywhere.
    fn denied(
        &self,
        conn: &Arc<Conn<D, R>>,
        why: &str,
        message: Option<(u64, Option<R>)>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        self.metrics.dropped("permission-denied");
        tracing::info!(agent = ?conn.registration().map(|r| r.agent_id.clone()), why, "refused by the access policy");
        let (id, reply) = message.unwrap_or((0, None));
        self.send_error(conn, id, ErrorCode::Unauthorized, why, reply, now, out);
    }

    /// Tells `to` that its message `correlation` failed (on the request's own stream when
    /// `reply` is given).
    #[allow(clippy::too_many_arguments)]
    fn send_error(
        &self,
        to: &Arc<Conn<D, R>>,
        correlation: u64,
        code: ErrorCode,
        reason: &str,
        reply: Option<R>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        self.metrics.error(code.name());
        let Some(reg) = to.registration() else {
            return;
        };
        let env = self
            .hub_envelope(
                Destination::Agent(reg.agent_id.to_string()),
                Kind::Error,
                now,
            )
            .with_correlation(correlation)
            .with_priority(Priority::High)
            .with_header("code", code.name())
            .with_body(reason.as_bytes().to_vec());
        self.push_hub_envelope(to, &env, Priority::High, reply, out);
    }

    /// [`Action::AgentsChanged`], unless `conn` is a cluster's own (a stand-in or the queue
    /// owner's connection: the cluster announces only this hub's agents).
    fn agents_changed(&self, conn: &Arc<Conn<D, R>>, out: &mut Vec<Action<D, R>>) {
        if conn.transport() != TransportKind::Cluster {
            out.push(Action::AgentsChanged);
        }
    }

    fn publish_presence(
        &self,
        conn: &Arc<Conn<D, R>>,
        event: &str,
        reason: Option<ErrorCode>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let Some(reg) = conn.registration() else {
            return;
        };
        if &*reg.agent_id == QUEUE_OWNER_ID {
            return; // the cluster's own connection, not an agent
        }
        let mut env = self
            .hub_envelope(Destination::topic(PRESENCE_TOPIC), Kind::Event, now)
            .with_priority(Priority::High)
            .with_header("event", event)
            .with_header("agent", reg.agent_id.to_string())
            .with_header("role", reg.role.clone());
        if let Some(code) = reason {
            env = env.with_header("reason", code.name());
        }
        let frames = Forward::owned(&env);
        self.registry
            .for_each_subscriber(PRESENCE_TOPIC, Some(conn), |target| {
                self.fan_out(
                    target,
                    &frames,
                    SendClass::Message(Priority::High),
                    Kind::Event,
                    None,
                    out,
                );
            });
    }
}

/// What the hub knows of an agent's credential once it is admitted.
#[derive(Default)]
struct Admitted {
    /// What it may do (`None`: no access file, anything).
    grant: Option<Arc<Grant>>,
    /// The SHA-256 of the token it showed to the access file.
    token_sha256: Option<[u8; 32]>,
}

/// A request on its way to a target that will owe its requester the answer.
struct Ask<'a, D, R> {
    requester: &'a Arc<Conn<D, R>>,
    request: u64,
    deadline: Instant,
    /// One target, tracked in the requester's `waiting` (not a topic or broadcast copy).
    direct: bool,
}

fn control<R>(frame: Bytes) -> Outbound<R> {
    Outbound {
        frame,
        class: SendClass::Control,
        kind: None,
        reply: None,
    }
}

/// Topic and broadcast copies of a request are sent as requests (the receiver may answer on
/// the stream), but only direct requests are tracked.
fn class_of(view: &EnvelopeView<'_>) -> SendClass {
    match view.kind {
        Kind::Request => SendClass::Request(view.priority),
        _ => SendClass::Message(view.priority),
    }
}

/// The frame to forward, per target codec: the received bytes themselves when the target
/// uses the sender's codec and the envelope needs no correction, otherwise encoded once per
/// codec from a full decode made at most once.
struct Forward<'a> {
    raw: Option<&'a RawFrame>,
    source: Codec,
    /// The sender's id, when the envelope's `from` must be replaced by it.
    fix_from: Option<&'a str>,
    /// The sender's envelope, when the hub already decoded it fully (JSON, map layouts).
    full: Option<&'a Envelope>,
    decoded: OnceLock<Option<Envelope>>,
    borrowed: Option<&'a Envelope>,
    msgpack: OnceLock<Option<Bytes>>,
    json: OnceLock<Option<Bytes>>,
}

impl<'a> Forward<'a> {
    fn new(
        raw: &'a RawFrame,
        view: &EnvelopeView<'_>,
        reg: &'a Registration,
        full: Option<&'a Envelope>,
    ) -> Self {
        let fix_from = (view.from != &*reg.agent_id).then_some(&*reg.agent_id);
        Forward {
            raw: Some(raw),
            source: reg.codec,
            fix_from,
            full,
            decoded: OnceLock::new(),
            // A full decode with the right sender needs no copy.
            borrowed: full.filter(|_| fix_from.is_none()),
            msgpack: OnceLock::new(),
            json: OnceLock::new(),
        }
    }

    /// An envelope the hub made itself.
    fn owned(env: &'a Envelope) -> Self {
        Forward {
            raw: None,
            source: Codec::MsgPack,
            fix_from: None,
            full: None,
            decoded: OnceLock::new(),
            borrowed: Some(env),
            msgpack: OnceLock::new(),
            json: OnceLock::new(),
        }
    }

    fn envelope(&self) -> Option<&Envelope> {
        if let Some(env) = self.borrowed {
            return Some(env);
        }
        self.decoded
            .get_or_init(|| {
                let mut env = match self.full {
                    Some(env) => env.clone(),
                    None => self.source.decode_envelope(&self.raw?.payload).ok()?,
                };
                if let Some(from) = self.fix_from {
                    env.from = from.to_owned();
                }
                Some(env)
            })
            .as_ref()
    }

    fn get(&self, codec: Codec) -> Option<Bytes> {
        if let Some(raw) = self.raw {
            if codec == self.source && self.fix_from.is_none() {
                return Some(raw.to_wire());
            }
        }
        let cell = match codec {
            Codec::MsgPack => &self.msgpack,
            Codec::Json => &self.json,
        };
        cell.get_or_init(|| Frame::encode_envelope(self.envelope()?, codec).ok())
            .clone()
    }
}
