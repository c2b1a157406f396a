//! The sending half of an HTTP/2 connection: control frames and small envelopes on the session stream, larger ones on message streams of their own.
//!
//! This module owns the choice of stream on the way out; it must not read.

use super::*;
use agentwire_sync::LockExt;

/// Sending half of an HTTP/2 connection (either side).
#[derive(Clone)]
pub struct H2Sender {
    pub(super) core: Arc<Core>,
    pub(super) _owner: Arc<Owner>,
}

impl H2Sender {
    /// Writes a frame on the outgoing side of the session stream.
    pub(super) async fn send_session(&self, frame: Bytes) -> Result<(), TransportError> {
        self.write_session(Some(frame)).await
    }

    /// Writes what was fed to the session stream, then `frame`, as one DATA chunk.
    pub(super) async fn write_session(&self, frame: Option<Bytes>) -> Result<(), TransportError> {
        let mut guard = self.core.session_out.lock().await;
        let Some(stream) = guard.as_mut() else {
            return Err(self.core.reason_or_closed());
        };
        let data = {
            let mut pending = self.pending();
            pending.extend(frame);
            match pending.len() {
                0 => Bytes::new(),
                1 => pending.pop().unwrap_or_default(),
                _ => {
                    // One copy, so that the batch leaves as one DATA frame.
                    let mut all =
                        bytes::BytesMut::with_capacity(pending.iter().map(Bytes::len).sum());
                    for f in pending.drain(..) {
                        all.extend_from_slice(&f);
                    }
                    all.freeze()
                }
            }
        };
        if data.is_empty() {
            return Ok(());
        }
        write_body(stream, data, false)
            .await
            .map_err(|e| self.core.write_error(&e))
    }

    pub(super) fn pending(&self) -> std::sync::MutexGuard<'_, Vec<Bytes>> {
        self.core.session_pending.lock_or_recover()
    }

    /// Agent side: opens a message stream carrying the frame.
    pub(super) async fn send_message(&self, frame: Bytes) -> Result<(), TransportError> {
        let Some(requests) = self.core.requests() else {
            return Err(self.core.reason_or_closed());
        };
        let mut requests = requests
            .ready()
            .await
            .map_err(|e| self.core.write_error(&e))?;
        let request = post(&self.core.authority, MESSAGE_PATH)
            .map_err(|e| TransportError::io("cannot build the message request", e))?;
        let (response, mut stream) = requests
            .send_request(request, false)
            .map_err(|e| self.core.write_error(&e))?;
        drop(requests);
        self.core.streams_opened.fetch_add(1, Ordering::Relaxed);
        self.core.unanswered.send_modify(|n| *n += 1);
        let core = self.core.clone();
        // Let the stream complete: read (and discard) the hub's answer.
        tokio::spawn(async move {
            let _answered = Answered(core);
            match response.await {
                Ok(response) => {
                    if !response.status().is_success() {
                        tracing::debug!(status = %response.status(), "hub refused a message stream");
                    }
                    let mut body = response.into_body();
                    while let Some(Ok(chunk)) = body.data().await {
                        let _ = body.flow_control().release_capacity(chunk.len());
                    }
                }
                Err(e) => tracing::trace!("message stream ended without an answer: {e}"),
            }
        });
        write_body(&mut stream, frame, true)
            .await
            .map_err(|e| self.core.write_error(&e))
    }
}

/// Counts a message stream as answered when its answer task ends, however it ends.
pub(super) struct Answered(Arc<Core>);

impl Drop for Answered {
    fn drop(&mut self) {
        self.0.unanswered.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl FrameSender for H2Sender {
    async fn send_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        check_outgoing(&frame, self.core.peer_max.load(Ordering::Relaxed))?;
        if let Some(why) = self.core.reason() {
            return Err(why);
        }
        let len = frame.len() as u64;
        let client = !self.core.authority.is_empty();
        if client && own_stream(&frame, class) {
            self.send_message(frame).await?;
        } else {
            self.send_session(frame).await?;
        }
        self.core.bytes_sent.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Frames for the session stream (every frame from the hub; control frames and messages
    /// up to [`SESSION_MESSAGE_MAX`] from an agent) wait to go out together in one DATA chunk
    /// at the next flush, or sooner once 64 KiB are waiting; an agent's larger messages travel
    /// on streams of their own and are sent at once.
    async fn feed_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        let client = !self.core.authority.is_empty();
        if client && own_stream(&frame, class) {
            return self.send_frame(frame, class).await;
        }
        check_outgoing(&frame, self.core.peer_max.load(Ordering::Relaxed))?;
        if let Some(why) = self.core.reason() {
            return Err(why);
        }
        let len = frame.len();
        let full = {
            let mut pending = self.pending();
            pending.push(frame);
            pending.iter().map(Bytes::len).sum::<usize>() >= SESSION_BATCH
        };
        self.core
            .bytes_sent
            .fetch_add(len as u64, Ordering::Relaxed);
        if full {
            self.write_session(None).await?;
        }
        Ok(())
    }

    async fn flush(&self) -> Result<(), TransportError> {
        self.write_session(None).await
    }

    fn set_peer_max_frame_size(&self, max: u32) {
        self.core.peer_max.store(max, Ordering::Relaxed);
    }

    fn close(&self, code: ErrorCode, reason: &str) {
        let goodbye = Frame::Goodbye(Goodbye {
            code,
            reason: reason.chars().take(256).collect(),
        })
        .encode(Codec::MsgPack)
        .ok();
        self.core.end(
            TransportError::Closed {
                code: Some(code),
                reason: format!("closed locally: {} {reason}", code.name())
                    .trim_end()
                    .to_owned(),
            },
            false,
        );
        self.core.local_close.send_replace(true);
        begin_shutdown(&self.core, goodbye);
    }

    async fn closed(&self) -> TransportError {
        let mut rx = self.core.closed.subscribe();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                return self.core.reason_or_closed();
            }
        }
    }

    fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            transport: TransportKind::Http2.name(),
            remote_addr: self.core.remote,
            bytes_sent: self.core.bytes_sent.load(Ordering::Relaxed),
            bytes_received: self.core.bytes_received.load(Ordering::Relaxed),
            streams_opened: self.core.streams_opened.load(Ordering::Relaxed),
            ..ConnectionStats::default()
        }
    }

    /// Waits until the hub has answered every message stream (it answers once it has read
    /// the frame), so that a goodbye on the session stream cannot be read before them.
    async fn delivered(&self) {
        let mut unanswered = self.core.unanswered.subscribe();
        let _ = unanswered.wait_for(|n| *n == 0).await;
    }

    fn kind(&self) -> TransportKind {
        TransportKind::Http2
    }
}
