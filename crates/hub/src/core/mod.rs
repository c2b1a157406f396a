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
//!
//! This file holds the state, the configuration and the events' entry points; what they do
//! is one file per concern: `handshake.rs` (admitting an agent), `routing.rs` (where an
//! envelope goes), `outbound.rs` (queueing frames within the bounds), `ending.rs` (tearing a
//! connection down once), `presence.rs` (join and leave), `queues.rs`, `queue_owner.rs` and
//! `from_cluster.rs` (work queues, here or on another hub), `hub_ops.rs`, beside the state's
//! own types (`conn.rs`, `registry.rs`, `access.rs`, `limits.rs`, `budget.rs`).

mod access;
mod budget;
mod conn;
mod ending;
mod from_cluster;
mod handshake;
mod hub_ops;
mod limits;
mod outbound;
mod presence;
mod queue_control;
mod queue_owner;
mod queues;
mod registry;
mod reserved;
mod routing;
#[cfg(test)]
mod tests;

use agentwire_sync::LockExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use agentwire_proto::{
    ErrorCode, Frame, FrameType, HubHandshake, HubPolicy, Kind, Priority, RawFrame,
};

pub use access::{token_sha256, AccessError, AccessPolicy, Grant, PolicyError};
pub use budget::DEFAULT_HUB_QUEUE_BYTES;
pub use conn::{Conn, Outbound, Peer, Registration};
pub use hub_ops::{HubOp, HubOpError, HUB_OP_HEADER};
pub use limits::AbuseLimits;
pub use queue_owner::QUEUE_OWNER_ID;
pub use queues::{
    AFTER_HEADER, ATTEMPT_HEADER, CREDIT_HEADER, DEAD_LETTER_PAGE, DELAY_HEADER, DUPLICATE_HEADER,
    NEXT_AFTER_HEADER, PRODUCER_ID_HEADER, QUEUE_OP_HEADER, TASK_ID_HEADER,
};
pub use registry::DuplicatePolicy;
pub use reserved::is_reserved;

use budget::QueueBudget;
use conn::QueueBounds;
use queue_control::QueueControl;
use queues::HubQueues;
use registry::Registry;

use crate::metrics::{outcome, HubMetrics, MessageTable};
use agentwire_transport::TransportKind;

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
}
