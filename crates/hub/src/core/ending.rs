//! How a connection ends: a reject after a failed hello, an orderly or forced end, and what
//! closing leaves behind (its id freed, its requests failed for those waiting, what it owed
//! answered with an error, its queue consumers released, `leave` on the presence topic).
//!
//! This module owns tearing a connection's state down, exactly once; it must not close
//! sockets (the driver does, on `Action::Close`).

use agentwire_sync::LockExt;
use std::sync::Arc;

use agentwire_proto::ErrorCode;
use bytes::Bytes;

use super::conn::Conn;
use super::outbound::control;
use super::queue_owner;
use super::{Action, HubCore, Now, QUEUE_OWNER_ID};
use crate::metrics::outcome;

impl<D, R> HubCore<D, R> {
    /// Sends a reject, then closes once it is out.
    pub(super) fn reject(
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

    /// Ends `conn`: counts and logs an abnormal code, then closes it.
    pub(super) fn end(
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

    pub(super) fn close(
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
    pub(super) fn close_as(
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
}
