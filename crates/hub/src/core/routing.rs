//! Routing one envelope: checks (limits, `from`, access, reserved names), then to one agent,
//! a topic, everyone or a queue; requests remembered until their one answer, answers accepted
//! only from a connection that owes them. Frames are forwarded as read (`Forward`), re-encoded
//! only for a target with the other codec.
//!
//! This module owns where an envelope goes; it must not queue frames itself (`outbound.rs`).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use agentwire_proto::{
    Codec, DestinationRef, Envelope, EnvelopeView, ErrorCode, Frame, FrameError, FrameType, Kind,
    RawFrame,
};
use bytes::Bytes;

use super::conn::{Conn, Outbound, PushError, Registration, Waiting};
use super::limits;
use super::{reserved, Action, HubCore, Now, HUB_ID, QUEUE_OWNER_ID};
use agentwire_transport::{SendClass, TransportKind};

/// A request on its way to a target that will owe its requester the answer.
pub(super) struct Ask<'a, D, R> {
    pub(super) requester: &'a Arc<Conn<D, R>>,
    pub(super) request: u64,
    pub(super) deadline: Instant,
    /// One target, tracked in the requester's `waiting` (not a topic or broadcast copy).
    pub(super) direct: bool,
}

/// Topic and broadcast copies of a request are sent as requests (the receiver may answer on
/// the stream), but only direct requests are tracked.
pub(super) fn class_of(view: &EnvelopeView<'_>) -> SendClass {
    match view.kind {
        Kind::Request => SendClass::Request(view.priority),
        _ => SendClass::Message(view.priority),
    }
}

/// The frame to forward, per target codec: the received bytes themselves when the target
/// uses the sender's codec and the envelope needs no correction, otherwise encoded once per
/// codec from a full decode made at most once.
pub(super) struct Forward<'a> {
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
    pub(super) fn new(
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
    pub(super) fn owned(env: &'a Envelope) -> Self {
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

    pub(super) fn envelope(&self) -> Option<&Envelope> {
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

    pub(super) fn get(&self, codec: Codec) -> Option<Bytes> {
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

impl<D, R> HubCore<D, R> {
    pub(super) fn on_envelope(
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
    pub(super) fn request_deadline(&self, view: &EnvelopeView<'_>, now: Now) -> Instant {
        let wait = match view.ttl_ms {
            0 => self.config.max_request_wait,
            ms => Duration::from_millis(u64::from(ms)).min(self.config.max_request_wait),
        };
        now.instant + wait
    }

    /// A request to one agent: remembered as waiting on the requester, owed by the target.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_request(
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
    pub(super) fn forward_answer(
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
    pub(super) fn refused(
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
    pub(super) fn fan_out_ask<'a>(
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
    pub(super) fn fan_out(
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
}
