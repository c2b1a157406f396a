//! Putting frames in a connection's outbound queue: within its bounds and the hub's byte
//! budget, counted when dropped; the hub's own envelopes (errors, refusals, request
//! failures).
//!
//! This module owns the last step before a frame waits for the connection's writer; it must
//! not decide routes.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use agentwire_proto::{Codec, Destination, Envelope, ErrorCode, Kind, Priority};
use bytes::Bytes;

use super::conn::{Conn, Outbound, Owed, PushError};
use super::routing::{Ask, Forward};
use super::{Action, HubCore, Now, HUB_ID};
use agentwire_transport::SendClass;

pub(super) fn control<R>(frame: Bytes) -> Outbound<R> {
    Outbound {
        frame,
        class: SendClass::Control,
        kind: None,
        reply: None,
    }
}

impl<D, R> HubCore<D, R> {
    /// Counts a copy or hub message that could not be queued.
    pub(super) fn metrics_dropped(&self, e: PushError) {
        match e {
            PushError::Full => self.metrics.dropped("queue-full"),
            PushError::HubFull => self.metrics.dropped("hub-queue-budget"),
            PushError::Closed => {}
        }
    }

    pub(super) fn push_envelope(
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
    pub(super) fn push_frame(
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
    pub(super) fn push(
        &self,
        conn: &Arc<Conn<D, R>>,
        outbound: Outbound<R>,
        out: &mut Vec<Action<D, R>>,
    ) {
        if let Ok(true) = conn.lock().queue.push(outbound) {
            out.push(Action::Wake(conn.clone()));
        }
    }

    /// Settles `requester`'s waiting request `id` with an error, if it still waits (on the
    /// connection `target`, when given).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fail_request(
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

    pub(super) fn hub_envelope(&self, to: Destination, kind: Kind, now: Now) -> Envelope {
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
    pub(super) fn denied(
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
    pub(super) fn send_error(
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
}
