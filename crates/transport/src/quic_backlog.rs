//! Bytes one QUIC connection has read from its peer's streams and not yet handed to its
//! consumer, and the wait that bounds them.
//!
//! Every stream is read by a reader of its own, and a stream's credit goes back to the peer
//! once its last byte is read, frame complete or not taken yet. So when the consumer is slower
//! than the peer, frames of finished streams pile up, waiting for room in the inbound queue,
//! outside every flow-control window: a peer could make the receiver hold any number of them.
//! While the backlog is at its limit, the accept loop takes no new stream and no stream reader
//! reads on; the peer's bytes then wait in quinn, within the flow-control windows, until the
//! consumer catches up. What one connection holds is then this limit, plus one read (a chunk)
//! per stream being read, plus the partial-frame budget.
//!
//! This module owns the count and the wait. It must not read streams or frames: the readers
//! report [`read`](Backlog::read), the consumer [`taken`](Backlog::taken).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

pub use crate::settings::DEFAULT_MAX_UNREAD_BYTES;

/// The backlog of one connection.
#[derive(Debug)]
pub(crate) struct Backlog {
    bytes: AtomicUsize,
    limit: AtomicUsize,
    room: Notify,
    consumer_gone: AtomicBool,
}

impl Backlog {
    /// A backlog that stops new streams at `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Backlog {
            bytes: AtomicUsize::new(0),
            limit: AtomicUsize::new(limit),
            room: Notify::new(),
            consumer_gone: AtomicBool::new(false),
        }
    }

    /// Stops new reads at `limit` bytes from now on.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Release);
        self.room.notify_waiters();
    }

    /// A frame of `len` bytes was read and goes to the consumer.
    pub fn read(&self, len: usize) {
        self.bytes.fetch_add(len, Ordering::AcqRel);
    }

    /// The consumer took `len` bytes read before.
    pub fn taken(&self, len: usize) {
        let before = self.bytes.fetch_sub(len, Ordering::AcqRel);
        let limit = self.limit.load(Ordering::Acquire);
        if before >= limit && before - len < limit {
            self.room.notify_waiters();
        }
    }

    /// The consumer is gone: nothing waits for it any more.
    pub fn consumer_gone(&self) {
        self.consumer_gone.store(true, Ordering::Release);
        self.room.notify_waiters();
    }

    /// Bytes read and not consumed.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    /// Under the limit (or nobody consumes).
    pub fn has_room(&self) -> bool {
        self.consumer_gone.load(Ordering::Acquire)
            || self.bytes() < self.limit.load(Ordering::Acquire)
    }

    /// Resolves once the backlog is under its limit (or the consumer is gone).
    pub async fn room(&self) {
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.has_room() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn waits_at_the_limit_until_the_consumer_takes() {
        let b = Arc::new(Backlog::new(100));
        b.read(60);
        b.room().await;
        b.read(60);
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.room().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "room at 120 of 100");
        b.taken(60);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("room once under the limit")
            .unwrap();
        b.read(100);
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.room().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        b.consumer_gone();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("no wait once the consumer is gone")
            .unwrap();
    }
}
