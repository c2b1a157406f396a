//! Frames from the other hubs of a cluster: another hub's answer to a request of an agent
//! here, and a task the queue owner hands to a consumer here.
//!
//! This module owns settling such a request and queueing such a delivery, as this hub's own
//! answer or delivery would; it must not talk to the cluster (agentwire-cluster brings the
//! frames, through the driver) nor trust them beyond what the connection they name may get.

use agentwire_proto::{
    Codec, Destination, Envelope, ErrorCode, FrameDecoder, FrameType, Kind, Priority,
};
use agentwire_transport::TransportKind;

use super::{Action, HubCore};

impl<D, R> HubCore<D, R> {
    /// An answer another hub of the cluster made for a request of an agent here (the
    /// envelope's `to`): its error (a target there refused the request, left, or did not
    /// answer in time), or the queue owner's response to a queue request. `frame` is that
    /// hub's envelope in MessagePack. It settles the request, as this hub's own answer would,
    /// if the request still waits on an agent of another hub or on the queue owner; otherwise
    /// it is dropped. Returns whether it settled one.
    pub fn answer_from_cluster(
        &self,
        frame: bytes::Bytes,
        now: super::Now,
        out: &mut Vec<Action<D, R>>,
    ) -> bool {
        let Some(env) = envelope_frame(frame) else {
            return false;
        };
        let (Destination::Agent(to), Kind::Error | Kind::Response, Some(request)) =
            (&env.to, env.kind, env.correlation)
        else {
            return false;
        };
        let Some(conn) = self.registry.get(to) else {
            return false;
        };
        if conn.transport() == TransportKind::Cluster {
            return false;
        }
        let reply = {
            let mut st = conn.lock();
            if !st.waiting.get(&request).is_some_and(|w| w.remote) {
                return false;
            }
            let reply = st.waiting.remove(&request).and_then(|w| w.reply);
            st.settle(request, now.instant);
            reply
        };
        if env.kind == Kind::Error {
            let code = env
                .headers
                .get("code")
                .and_then(|c| ErrorCode::from_name(c))
                .unwrap_or(ErrorCode::Internal);
            let reason = String::from_utf8_lossy(&env.body);
            self.send_error(&conn, request, code, &reason, reply, now, out);
        } else {
            self.push_hub_envelope(&conn, &env, env.priority, reply, out);
        }
        true
    }

    /// A task the owner delivers to `agent`, a consumer on this hub: `frame` is the delivery
    /// envelope's frame in MessagePack, as the owner made it. Re-encoded for the agent's codec
    /// when that differs. An agent no longer here is skipped (the owner hands the task out
    /// again once it learns the agent left). Returns whether the task was queued.
    pub fn deliver_from_owner(
        &self,
        agent: &str,
        frame: bytes::Bytes,
        out: &mut Vec<Action<D, R>>,
    ) -> bool {
        let Some(conn) = self.registry.get(agent) else {
            return false;
        };
        if conn.transport() == TransportKind::Cluster {
            return false;
        }
        let Some(env) = envelope_frame(frame) else {
            return false;
        };
        if !matches!(env.to, Destination::Queue(_)) || env.kind != Kind::Task {
            return false;
        }
        self.push_hub_envelope(&conn, &env, Priority::Medium, None, out);
        true
    }
}

/// The envelope in a frame another hub sent (MessagePack), if it is one.
fn envelope_frame(frame: bytes::Bytes) -> Option<Envelope> {
    let raw = FrameDecoder::decode_one(frame, u32::MAX).ok()?;
    if raw.type_byte != FrameType::Envelope as u8 {
        return None;
    }
    Codec::MsgPack.decode_envelope(&raw.payload).ok()
}
