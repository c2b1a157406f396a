//! The tasks behind a connected agent: the writer that drains its send queue into the
//! transport, the heartbeat, and the reader that settles requests and fills the inbox.
//!
//! This module owns those loops; it must not build frames for the application (the handle
//! does).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentwire_proto::frame::Heartbeat;
use agentwire_proto::{Codec, ErrorCode, Frame, Kind};
use tokio::sync::mpsc;

use agentwire_transport::clock::now_us;
use agentwire_transport::queue::PriorityQueue;
use agentwire_transport::{FrameReceiver, FrameSender, SendClass, TransportError};

use super::{is_hub_cancel, AgentHandle, AgentInner, Incoming, Outgoing};

pub(super) async fn agent_writer<S: FrameSender>(queue: Arc<PriorityQueue<Outgoing>>, sender: S) {
    while let Some(out) = queue.pop().await {
        if out.after_delivery {
            // Everything popped before was written (this loop waits for each write); wait,
            // within the close's own bound, until the peer has acknowledged it.
            let _ = tokio::time::timeout(Duration::from_secs(5), sender.delivered()).await;
        }
        let result = match out.reply {
            Some(slot) => {
                sender
                    .send_reply(out.frame, out.class.priority(), slot)
                    .await
            }
            // More queued behind it: let the transport write them together.
            None if !queue.is_empty() => sender.feed_frame(out.frame, out.class).await,
            None => match sender.feed_frame(out.frame, out.class).await {
                Ok(()) => sender.flush().await,
                Err(e) => Err(e),
            },
        };
        if let Err(e) = result {
            tracing::debug!("agent send failed: {e}");
            queue.close();
            return;
        }
    }
}

impl Drop for AgentInner {
    /// The last handle is gone: nobody can send or reply any more, so end the session.
    fn drop(&mut self) {
        self.queue.close();
        self.connection.close(ErrorCode::Normal, "agent dropped");
    }
}

pub(super) async fn agent_heartbeat<S: FrameSender>(
    inner: std::sync::Weak<AgentInner>,
    sender: S,
    period: Duration,
) {
    let mut seq = 0u64;
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.queue.is_closed() {
            return;
        }
        seq += 1;
        let beat = Frame::Heartbeat(Heartbeat {
            seq,
            timestamp_us: now_us(),
        });
        let Ok(frame) = beat.encode(inner.session.codec) else {
            return;
        };
        drop(inner);
        if sender
            .send_frame(frame, SendClass::Heartbeat)
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Reads frames from the hub: answers go to their waiting requests, everything else to the
/// inbox. Holds the agent only weakly while it waits, so dropping every handle ends the
/// session.
pub(super) async fn agent_reader<R: FrameReceiver>(
    agent: std::sync::Weak<AgentInner>,
    codec: Codec,
    queue: Arc<PriorityQueue<Outgoing>>,
    mut receiver: R,
    inbox: mpsc::Sender<Incoming>,
    closed: tokio::sync::watch::Sender<Option<TransportError>>,
) {
    let ended = |code: ErrorCode, reason: String| TransportError::Closed {
        code: Some(code),
        reason,
    };
    let reason = loop {
        let raw = match receiver.recv_frame().await {
            Ok(Some(raw)) => raw,
            Ok(None) => break ended(ErrorCode::Normal, "the hub ended the connection".into()),
            Err(e) => break e,
        };
        let reply_slot = receiver.take_reply_slot();
        let Some(inner) = agent.upgrade() else {
            break ended(ErrorCode::Normal, "agent dropped".into());
        };
        let handle = AgentHandle { inner };
        let env = match Frame::decode(&raw, codec) {
            Ok(Frame::Envelope(env)) => env,
            Ok(Frame::Goodbye(g)) => {
                break ended(g.code, format!("hub said goodbye: {} {}", g.code, g.reason))
            }
            Ok(_) => continue,
            Err(e) => {
                handle
                    .inner
                    .connection
                    .close(e.close_code(), &e.to_string());
                break TransportError::Frame(e);
            }
        };
        handle.inner.received.fetch_add(1, Ordering::Relaxed);
        if matches!(env.kind, Kind::Response | Kind::Error) {
            if let Some(corr) = env.correlation {
                let waiter = {
                    let mut pending = handle.lock_pending();
                    match pending.get(&corr) {
                        Some(p) if p.asked.may_answer(&env.from) => pending.remove(&corr),
                        Some(p) => {
                            tracing::warn!(correlation = corr, from = %env.from, asked = ?p.asked, "dropping an answer from an agent that was not asked");
                            continue;
                        }
                        None => None,
                    }
                };
                if let Some(waiter) = waiter {
                    let _ = waiter.tx.send(env);
                    continue;
                }
                // Its request timed out or was cancelled: nobody waits for it any more. The
                // hub's own `cancelled` answer to a request whose ttl ran out is just as late.
                if env.kind == Kind::Response || is_hub_cancel(&env) {
                    tracing::debug!(correlation = corr, kind = %env.kind, "discarding a late answer");
                    continue;
                }
            }
        }
        let reply_slot = reply_slot.filter(|_| env.kind == Kind::Request);
        let incoming = Incoming {
            envelope: env,
            handle,
            reply_slot: Mutex::new(reply_slot),
        };
        // If nobody reads the inbox any more, keep serving responses.
        let _ = inbox.send(incoming).await;
    };
    tracing::debug!("agent connection ended: {reason}");
    queue.close();
    if let Some(inner) = agent.upgrade() {
        AgentHandle { inner }.lock_pending().clear();
    }
    let _ = closed.send(Some(reason));
}
