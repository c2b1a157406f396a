//! The hub core's durable work queues: envelopes to `queue:NAME`, `Consume`, `Ack` and `Nack`
//! frames, and what a closed connection or a timeout means for them.
//!
//! The queue logic itself is `agentwire_queue::QueueCore`'s; this module owns only the glue:
//! which connection a consumer is, the producer's receipt, the delivery envelope, and the rule
//! that nothing leaves the hub before the writes that record it are durable. Every step that
//! changes a queue ends in [`HubCore::queue_step`]: with a store, its writes go to the driver
//! as [`Action::Persist`] and what they carry (receipts, deliveries) waits in `pending` until
//! the driver calls [`HubCore::on_persisted`]; without one (queues in memory), it goes out at
//! once. It must not do I/O: the driver owns the store.

use agentwire_sync::LockExt;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, MutexGuard, Weak};

use agentwire_proto::{
    Consume, Destination, Envelope, ErrorCode, Frame, Kind, Nack, Priority, RawFrame,
};
use agentwire_queue::{
    ConsumerId, Delivery, Enqueue, Enqueued, FailReason, QueueAction, QueueConfig, QueueCore,
    QueueError, QueueStats, Recovered, StoreOp, TaskId,
};

use super::conn::{Conn, Outbound, Registration};
use super::queue_control::{control_op, AgentConsumers, QueueControl};
use super::{Action, HubCore, Now};
use agentwire_transport::SendClass;

pub use agentwire_proto::names::{
    AFTER_HEADER, ATTEMPT_HEADER, CREDIT_HEADER, DEAD_LETTER_PAGE, DELAY_HEADER, DUPLICATE_HEADER,
    NEXT_AFTER_HEADER, PRODUCER_ID_HEADER, QUEUE_OP_HEADER, TASK_ID_HEADER,
};

/// The queues' state inside the hub core.
pub(crate) struct HubQueues<D, R> {
    core: QueueCore,
    /// Whether writes must be made durable before what they record goes out.
    durable: bool,
    /// Writes handed to the driver and not yet confirmed, oldest first, with what waits on
    /// each.
    pending: VecDeque<(u64, Vec<Deferred<D, R>>)>,
    next_token: u64,
    consumers: HashMap<ConsumerId, Weak<Conn<D, R>>>,
    /// Each connection's consumers, by queue name.
    by_conn: HashMap<u64, HashMap<String, ConsumerId>>,
    next_consumer: u64,
    /// Set while the store refuses writes: new work is refused (what waits on writes already
    /// made in memory waits on: the driver tries them again).
    failed: Option<String>,
    /// Each local agent's consumers, whoever keeps the queues: named to a new owner, or
    /// consuming here when this hub takes a cluster's queues over.
    pub(super) agent_consumers: HashMap<u64, AgentConsumers<D, R>>,
    /// This hub took the queues over ([`HubCore::take_over_queues`]).
    pub(super) taken_over: bool,
}

impl<D, R> HubQueues<D, R> {
    pub(crate) fn in_memory(config: QueueConfig, now: Now) -> Self {
        HubQueues::new(
            QueueCore::recover(config, Recovered::default(), qnow(now)),
            false,
        )
    }

    /// Becomes `next`, keeping the local agents' consumers (they follow the queues wherever
    /// they are kept).
    pub(super) fn replace(&mut self, next: HubQueues<D, R>) {
        let named = std::mem::take(&mut self.agent_consumers);
        *self = next;
        self.agent_consumers = named;
    }

    /// Everything waiting on writes, oldest first.
    pub(super) fn take_pending(&mut self) -> Vec<Deferred<D, R>> {
        self.pending
            .drain(..)
            .flat_map(|(_, batch)| batch)
            .collect()
    }

    fn new(core: QueueCore, durable: bool) -> Self {
        HubQueues {
            core,
            durable,
            pending: VecDeque::new(),
            next_token: 1,
            consumers: HashMap::new(),
            by_conn: HashMap::new(),
            next_consumer: 1,
            failed: None,
            agent_consumers: HashMap::new(),
            taken_over: false,
        }
    }
}

/// What waits for a write.
pub(super) enum Deferred<D, R> {
    /// The hub's answer to a request (a receipt, an operation's result).
    Answer {
        conn: Arc<Conn<D, R>>,
        request: u64,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
        reply: Option<R>,
    },
    Deliver {
        conn: Weak<Conn<D, R>>,
        delivery: Delivery,
    },
    Dead {
        task: TaskId,
        queue: String,
        reason: FailReason,
    },
}

fn receipt_headers(e: Enqueued) -> Vec<(&'static str, String)> {
    vec![
        (TASK_ID_HEADER, e.task.to_string()),
        (DUPLICATE_HEADER, e.duplicate.to_string()),
    ]
}

fn qnow(now: Now) -> agentwire_queue::Now {
    agentwire_queue::Now::new(now.instant, now.unix_us / 1000)
}

/// The headers of a queue operation, as received.
struct OpArgs {
    task: Option<Result<u64, std::num::ParseIntError>>,
    after: Option<Result<u64, std::num::ParseIntError>>,
    /// Body bytes one page of dead letters may hold.
    page_bytes: usize,
}

fn error_code(e: &QueueError) -> ErrorCode {
    match e {
        QueueError::Full { .. }
        | QueueError::FullBytes { .. }
        | QueueError::AllFull { .. }
        | QueueError::TooManyQueues { .. } => ErrorCode::QueueFull,
        QueueError::NotInFlight { .. } | QueueError::AlreadyConsuming(_) => {
            ErrorCode::ProtocolViolation
        }
        QueueError::BadName(_)
        | QueueError::TooLarge { .. }
        | QueueError::ProducerIdTooLong { .. }
        | QueueError::NoCredit => ErrorCode::LimitExceeded,
        // A refusal added to the queue core later is the agent's limit until named here.
        _ => ErrorCode::LimitExceeded,
    }
}

impl<D, R> HubCore<D, R> {
    /// Replaces the in-memory queues with what a store gave back: from now on every queue
    /// change comes out as an [`Action::Persist`] first. Call before the first connection.
    ///
    /// ```
    /// use agentwire_hub::{CoreConfig, HubCore, Now};
    /// use agentwire_hub::metrics::HubMetrics;
    /// use agentwire_queue::Recovered;
    /// let now = Now::system();
    /// let core: HubCore<(), ()> = HubCore::new(CoreConfig::default(), HubMetrics::new(), now);
    /// core.restore_queues(Recovered::default(), now);
    /// assert!(core.queue_stats("jobs").is_none());
    /// ```
    pub fn restore_queues(&self, recovered: Recovered, now: Now) {
        self.note_quarantined(&recovered);
        // Writes of the recovery itself (producer ids whose window ended meanwhile) stay in
        // the queue core and go out with the first step's.
        let core = QueueCore::recover(self.config.queue.clone(), recovered, qnow(now));
        *self.lock_queues() = HubQueues::new(core, true);
    }

    /// Logs and counts (`dropped_messages_total{reason="quarantined-record"}`) the records
    /// the store could not read: the queues serve every other task.
    fn note_quarantined(&self, recovered: &Recovered) {
        for q in &recovered.quarantined {
            self.metrics.dropped("quarantined-record");
            tracing::warn!(key = %q.key, reason = %q.reason, "an unreadable queue record was set aside");
        }
    }

    /// This hub keeps the queues from now on (a cluster's new queue owner): like
    /// [`restore_queues`](Self::restore_queues), and the consumers of agents here that were
    /// named to the previous owner consume here now. Queue work no longer goes to a
    /// [`QUEUE_OWNER_ID`](super::QUEUE_OWNER_ID) connection, even while one is registered.
    pub fn take_over_queues(&self, recovered: Recovered, now: Now, out: &mut Vec<Action<D, R>>) {
        self.note_quarantined(&recovered);
        let core = QueueCore::recover(self.config.queue.clone(), recovered, qnow(now));
        let consumers = self.agent_consumers();
        {
            let mut q = self.lock_queues();
            q.replace(HubQueues::new(core, true));
            q.taken_over = true;
        }
        for c in consumers {
            let consume = Consume {
                queue: c.queue,
                credit: c.credit,
            };
            self.on_consume(&c.conn, consume, now, out);
        }
    }

    /// The driver made the writes of every [`Action::Persist`] up to `token` durable: what
    /// waited on them goes out.
    pub fn on_persisted(&self, token: u64, now: Now, out: &mut Vec<Action<D, R>>) {
        let mut ready = Vec::new();
        {
            let mut q = self.lock_queues();
            while q.pending.front().is_some_and(|(t, _)| *t <= token) {
                if let Some((_, items)) = q.pending.pop_front() {
                    ready.extend(items);
                }
            }
        }
        self.release(ready, now, out);
    }

    /// The driver could not make a batch of writes durable and will try it again: new work
    /// (enqueues) is refused with an `internal` error naming `reason` until a write succeeds
    /// ([`on_store_recovered`](HubCore::on_store_recovered)). Producers waiting on writes
    /// already made keep waiting: their tasks are in what the driver tries again, so an error
    /// now would tell them to send again what will be stored. The hub keeps routing everything
    /// else.
    pub fn on_store_failed(&self, reason: &str) {
        self.lock_queues().failed = Some(format!(
            "the queue store cannot write ({reason}); the hub is trying again: send later"
        ));
        tracing::error!(
            reason,
            "queue store write failed; retrying, new queue work refused meanwhile"
        );
    }

    /// The store took a write again after failures: queues take new work again.
    pub fn on_store_recovered(&self) {
        if self.lock_queues().failed.take().is_some() {
            tracing::warn!("queue store writes again; queues take new work");
        }
    }

    /// Answers every request among `items` with an error (deliveries and the rest are
    /// dropped: the tasks stay in the store).
    pub(super) fn fail_deferred(
        &self,
        items: Vec<Deferred<D, R>>,
        code: ErrorCode,
        why: &str,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        for item in items {
            if let Deferred::Answer {
                conn,
                request,
                reply,
                ..
            } = item
            {
                self.send_error(&conn, request, code, why, reply, now, out);
            }
        }
    }

    /// One queue's counts (`None` for a queue unknown since start).
    pub fn queue_stats(&self, queue: &str) -> Option<QueueStats> {
        self.lock_queues().core.stats(queue)
    }

    pub(super) fn lock_queues(&self) -> MutexGuard<'_, HubQueues<D, R>> {
        self.queues.lock_or_recover()
    }

    /// An envelope to `queue:NAME`: stored as a task; a request gets a receipt once it is
    /// durable (its `task-id` and `duplicate` headers), anything refused gets an error.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_enqueue(
        &self,
        conn: &Arc<Conn<D, R>>,
        reg: &Registration,
        raw: &RawFrame,
        decoded: Option<Envelope>,
        reply: Option<R>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let env = match decoded {
            Some(env) => env,
            None => match reg.codec.decode_envelope(&raw.payload) {
                Ok(env) => env,
                Err(e) => {
                    self.end(conn, ErrorCode::MalformedFrame, &e.to_string(), now, out);
                    return;
                }
            },
        };
        let Destination::Queue(queue) = env.to.clone() else {
            return;
        };
        if let Some(op) = env.headers.get(QUEUE_OP_HEADER) {
            match control_op(op, &queue, &env) {
                Some(Ok(control)) => {
                    self.on_control(conn, reg, control, now, out);
                    return;
                }
                Some(Err(why)) => {
                    let code = ErrorCode::ProtocolViolation;
                    self.send_error(conn, env.id, code, &why, reply, now, out);
                    return;
                }
                None => {}
            }
            if !reg.grant.as_ref().is_none_or(|g| g.may_consume(&queue)) {
                let why = format!("not allowed to operate on queue {queue:?}");
                self.denied(conn, &why, Some((env.id, reply)), now, out);
                return;
            }
            let task = env.headers.get(TASK_ID_HEADER).map(|t| t.parse::<u64>());
            let after = env.headers.get(AFTER_HEADER).map(|t| t.parse::<u64>());
            let page_bytes = (reg.max_frame_size as usize / 8).min(1 << 20);
            let ask = OpArgs {
                task,
                after,
                page_bytes,
            };
            self.on_queue_op(conn, &queue, op, ask, env.id, reply, now, out);
            return;
        }
        let task = Enqueue {
            queue,
            sender: reg.agent_id.to_string(),
            producer_id: env.headers.get(PRODUCER_ID_HEADER).cloned(),
            body: env.body,
        };
        let mut q = self.lock_queues();
        let result = match &q.failed {
            Some(why) => Err((ErrorCode::Internal, why.clone())),
            None => q
                .core
                .enqueue(task, qnow(now))
                .map_err(|e| (error_code(&e), e.to_string())),
        };
        match result {
            Ok(enqueued) => {
                if enqueued.duplicate {
                    self.metrics.dropped("queue-duplicate");
                }
                let receipt = (env.kind == Kind::Request).then(|| Deferred::Answer {
                    conn: conn.clone(),
                    request: env.id,
                    headers: receipt_headers(enqueued),
                    body: Vec::new(),
                    reply,
                });
                self.queue_step(q, receipt.into_iter().collect(), now, out);
            }
            Err((code, why)) => {
                drop(q);
                self.metrics.dropped("queue-refused");
                self.send_error(conn, env.id, code, &why, reply, now, out);
            }
        }
    }

    /// A request for an operation on a queue ([`QUEUE_OP_HEADER`]); answered once what it
    /// changed is durable.
    #[allow(clippy::too_many_arguments)]
    fn on_queue_op(
        &self,
        conn: &Arc<Conn<D, R>>,
        queue: &str,
        op: &str,
        args: OpArgs,
        request: u64,
        reply: Option<R>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let parsed = args
            .task
            .transpose()
            .map_err(|e| format!("bad {TASK_ID_HEADER} header: {e}"))
            .and_then(|task| {
                let after = args
                    .after
                    .transpose()
                    .map_err(|e| format!("bad {AFTER_HEADER} header: {e}"))?;
                Ok((task.map(TaskId), after.map(TaskId)))
            });
        let (task, after) = match parsed {
            Ok(t) => t,
            Err(why) => {
                self.send_error(
                    conn,
                    request,
                    ErrorCode::LimitExceeded,
                    &why,
                    reply,
                    now,
                    out,
                );
                return;
            }
        };
        let mut q = self.lock_queues();
        let mut headers = Vec::new();
        let body = match op {
            "stats" => {
                let s = q.core.stats(queue).unwrap_or_default();
                serde_json::json!({
                    "queue": queue,
                    "ready": s.ready,
                    "waiting": s.waiting,
                    "in_flight": s.in_flight,
                    "dead": s.dead,
                    "consumers": s.consumers,
                })
            }
            "dead-letters" => {
                // One page: what the hub holds for the answer is bounded, whatever the queue
                // holds.
                let page =
                    q.core
                        .dead_letters_page(queue, after, args.page_bytes, DEAD_LETTER_PAGE);
                if let Some(next) = page.next {
                    headers.push((NEXT_AFTER_HEADER, next.0.to_string()));
                }
                let dead: Vec<serde_json::Value> = page
                    .letters
                    .into_iter()
                    .map(|d| {
                        serde_json::json!({
                            "task": d.task.0,
                            "attempts": d.attempts,
                            "reason": d.reason,
                            "enqueued_unix_ms": d.enqueued_unix_ms,
                            "body_bytes": d.body.len(),
                            "body": String::from_utf8_lossy(&d.body),
                        })
                    })
                    .collect();
                serde_json::Value::Array(dead)
            }
            "replay" => {
                let n = q.core.replay(queue, task, qnow(now));
                serde_json::json!({ "replayed": n })
            }
            "discard" => {
                let n = q.core.discard_dead(queue, task);
                serde_json::json!({ "discarded": n })
            }
            other => {
                drop(q);
                let why = format!(
                    "unknown {QUEUE_OP_HEADER} {other:?} (stats, dead-letters, replay, discard)"
                );
                self.send_error(
                    conn,
                    request,
                    ErrorCode::ProtocolViolation,
                    &why,
                    reply,
                    now,
                    out,
                );
                return;
            }
        };
        let answer = Deferred::Answer {
            conn: conn.clone(),
            request,
            headers,
            body: body.to_string().into_bytes(),
            reply,
        };
        self.queue_step(q, vec![answer], now, out);
    }

    /// A `Consume` frame: `conn` consumes the queue with that credit (0: stops).
    pub(super) fn on_consume(
        &self,
        conn: &Arc<Conn<D, R>>,
        c: Consume,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        // The queue's name was checked by `on_control`, the one way in.
        let mut q = self.lock_queues();
        let q_ref = &mut *q;
        let mine = q_ref.by_conn.entry(conn.id()).or_default();
        if c.credit == 0 {
            if let Some(id) = mine.remove(&c.queue) {
                q_ref.consumers.remove(&id);
                q_ref.core.consumer_gone(id, qnow(now));
            }
            self.queue_step(q, Vec::new(), now, out);
            return;
        }
        let id = *mine.entry(c.queue.clone()).or_insert_with(|| {
            let id = ConsumerId(q_ref.next_consumer);
            q_ref.next_consumer += 1;
            id
        });
        q_ref.consumers.insert(id, Arc::downgrade(conn));
        if let Err(e) = q_ref.core.consume(id, &c.queue, c.credit, qnow(now)) {
            drop(q);
            self.end(conn, error_code(&e), &e.to_string(), now, out);
            return;
        }
        self.queue_step(q, Vec::new(), now, out);
        // A close that ran before the consumer was added has not removed it.
        if conn.is_closed() {
            self.queues_conn_closed(conn, now, out);
        }
    }

    /// A `Consume`, `Ack` or `Nack`, from a frame or an operation envelope: decided here, or
    /// passed on to the hub that keeps the queues.
    pub(super) fn on_control(
        &self,
        conn: &Arc<Conn<D, R>>,
        reg: &Registration,
        control: QueueControl,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        if let QueueControl::Consume { queue, credit } = &control {
            if let Err(e) = self.config.policy.limits.check_name(queue) {
                self.end(conn, ErrorCode::LimitExceeded, &e.to_string(), now, out);
                return;
            }
            if *credit > 0 && !reg.grant.as_ref().is_none_or(|g| g.may_consume(queue)) {
                let why = format!("not allowed to consume queue {queue:?}");
                self.denied(conn, &why, None, now, out);
                return;
            }
            self.remember_consumer(conn, queue, *credit);
        }
        if let Some(owner) = self.queue_owner() {
            self.to_owner(&owner, conn, control, out);
            return;
        }
        match control {
            QueueControl::Consume { queue, credit } => {
                self.on_consume(conn, Consume { queue, credit }, now, out)
            }
            QueueControl::Settle { task, nack } => self.on_settle(conn, task, nack, now, out),
        }
    }

    /// An `Ack` or `Nack` frame. One for a task `conn` does not hold (acked already, or
    /// handed to another consumer after its ack wait) is ignored, as NATS ignores late acks.
    pub(super) fn on_settle(
        &self,
        conn: &Arc<Conn<D, R>>,
        task: u64,
        nack: Option<Nack>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let task = TaskId(task);
        let mut q = self.lock_queues();
        let holder = q.core.holder(task).filter(|id| {
            q.consumers
                .get(id)
                .and_then(Weak::upgrade)
                .is_some_and(|c| Arc::ptr_eq(&c, conn))
        });
        let Some(holder) = holder else {
            drop(q);
            self.metrics.dropped("queue-late-ack");
            return;
        };
        let t = qnow(now);
        let _ = match nack {
            None => q.core.ack(holder, task, t),
            Some(n) => {
                let delay = n
                    .delay_ms
                    .map(|ms| std::time::Duration::from_millis(ms.into()));
                q.core.nack(holder, task, delay, t)
            }
        };
        self.queue_step(q, Vec::new(), now, out);
    }

    /// `conn` is gone: its consumers' tasks go back to their queues, and its consumers are
    /// forgotten (the hub keeping a cluster's queues learns of it from the cluster, as every
    /// hub learns of an agent that leaves).
    pub(super) fn queues_conn_closed(
        &self,
        conn: &Conn<D, R>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        let mut q = self.lock_queues();
        q.agent_consumers.remove(&conn.id());
        let Some(mine) = q.by_conn.remove(&conn.id()) else {
            return;
        };
        for (_, id) in mine {
            q.consumers.remove(&id);
            q.core.consumer_gone(id, qnow(now));
        }
        self.queue_step(q, Vec::new(), now, out);
    }

    /// Ack waits and backoffs that are due.
    pub(super) fn queues_on_timeout(&self, now: Now, out: &mut Vec<Action<D, R>>) {
        let mut q = self.lock_queues();
        q.core.on_timeout(qnow(now));
        self.queue_step(q, Vec::new(), now, out);
    }

    /// Ends every step that changed the queues: collects the core's deliveries, and either
    /// hands its writes to the driver with everything waiting on them, or (nothing to make
    /// durable, and nothing older still waiting) sends it all now.
    fn queue_step(
        &self,
        mut q: MutexGuard<'_, HubQueues<D, R>>,
        mut items: Vec<Deferred<D, R>>,
        now: Now,
        out: &mut Vec<Action<D, R>>,
    ) {
        while let Some(action) = q.core.poll_action() {
            items.push(match action {
                QueueAction::Deliver(delivery) => Deferred::Deliver {
                    conn: q
                        .consumers
                        .get(&delivery.consumer)
                        .cloned()
                        .unwrap_or_default(),
                    delivery,
                },
                QueueAction::DeadLettered {
                    task,
                    queue,
                    reason,
                } => Deferred::Dead {
                    task,
                    queue: queue.to_string(),
                    reason,
                },
            });
        }
        let writes: Vec<StoreOp> = q.core.take_writes();
        if q.durable && !writes.is_empty() {
            let token = q.next_token;
            q.next_token += 1;
            q.pending.push_back((token, items));
            drop(q);
            out.push(Action::Persist { token, writes });
            return;
        }
        if let Some((_, last)) = q.pending.back_mut() {
            // Older writes are still on their way: nothing may overtake them (a delivery of
            // a task whose enqueue is not yet durable, say).
            last.extend(items);
            return;
        }
        drop(q);
        self.release(items, now, out);
    }

    /// Sends what waited (called without the queues' lock).
    fn release(&self, items: Vec<Deferred<D, R>>, now: Now, out: &mut Vec<Action<D, R>>) {
        for item in items {
            match item {
                Deferred::Answer {
                    conn,
                    request,
                    headers,
                    body,
                    reply,
                } => {
                    let Some(reg) = conn.registration() else {
                        continue;
                    };
                    let env = self
                        .hub_envelope(
                            Destination::Agent(reg.agent_id.to_string()),
                            Kind::Response,
                            now,
                        )
                        .with_correlation(request)
                        .with_body(body);
                    let env = headers
                        .into_iter()
                        .fold(env, |env, (k, v)| env.with_header(k, v));
                    self.push_hub_envelope(&conn, &env, Priority::Medium, reply, out);
                }
                Deferred::Deliver { conn, delivery } => {
                    let Some(conn) = conn.upgrade() else { continue };
                    let env = Envelope::new(
                        delivery.task.0,
                        delivery.sender,
                        Destination::Queue(delivery.queue.to_string()),
                        Kind::Task,
                    )
                    .with_timestamp_us(now.unix_us)
                    .with_header(ATTEMPT_HEADER, delivery.attempt.to_string())
                    .with_body(delivery.body);
                    // Not queued (the consumer's queue is full): the task stays in flight and
                    // goes out again after its ack wait.
                    self.push_hub_envelope(&conn, &env, Priority::Medium, None, out);
                }
                Deferred::Dead {
                    task,
                    queue,
                    reason,
                } => {
                    self.metrics.dropped("queue-dead-letter");
                    tracing::warn!(%task, queue, reason = reason.as_str(), "task is now a dead letter");
                }
            }
        }
    }

    /// Queues an envelope the hub made for `to` (counting it as dropped when its queue is full).
    pub(super) fn push_hub_envelope(
        &self,
        to: &Arc<Conn<D, R>>,
        env: &Envelope,
        priority: Priority,
        reply: Option<R>,
        out: &mut Vec<Action<D, R>>,
    ) {
        let Some(reg) = to.registration() else {
            return;
        };
        let Ok(frame) = Frame::encode_envelope(env, reg.codec) else {
            self.metrics.dropped("encode-failed");
            return;
        };
        let pushed = to.lock().queue.push(Outbound {
            frame,
            class: SendClass::Message(priority),
            kind: Some(env.kind),
            reply,
        });
        match pushed.map_err(|r| r.error) {
            Ok(was_empty) => {
                self.metrics.queue_depth_add(1);
                if was_empty {
                    out.push(Action::Wake(to.clone()));
                }
            }
            Err(e) => self.metrics_dropped(e),
        }
    }
}
