//! How far one QUIC connection has read the streams its peer opened, for the counted goodbye
//! (`agentwire_proto::counted_goodbye`).
//!
//! A peer's goodbye travels on the control stream; the messages it sent before travel on
//! streams of their own and may still be being read. A counted goodbye names how many message
//! streams the peer opened, and the receiver passes it on once [`StreamsRead::all_read`] says
//! that many have been read to their end, every frame of them already queued for the consumer.
//! If the connection ends first, the goodbye waits only for the streams already started: a
//! peer that names more streams than it opened cannot hold a closed connection open.
//!
//! This module owns the counts and the wake-up. It must not read streams or frames: the
//! stream readers report to it ([`started`](StreamsRead::started),
//! [`read`](StreamsRead::read), [`end`](StreamsRead::end)), the receiver asks it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::Notify;

/// Counts of one connection's peer-opened message streams.
#[derive(Debug, Default)]
pub(crate) struct StreamsRead {
    started: AtomicU64,
    read: AtomicU64,
    ended: AtomicBool,
    changed: Notify,
}

impl StreamsRead {
    /// A stream the peer opened was accepted and its reading begins.
    pub fn started(&self) {
        self.started.fetch_add(1, Ordering::AcqRel);
    }

    /// A stream was read to its end (or reset, or abandoned), and every frame read from it
    /// is already queued for the consumer.
    pub fn read(&self) {
        self.read.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
    }

    /// No stream will be accepted any more (the connection ended).
    pub fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    /// True once `named` streams were read, or, after the end, every stream started was.
    pub fn all_read(&self, named: u64) -> bool {
        // `ended` first: every `started` happens before the end, so the counts read after it
        // are complete.
        let ended = self.ended.load(Ordering::Acquire);
        let read = self.read.load(Ordering::Acquire);
        read >= named || (ended && read >= self.started.load(Ordering::Acquire))
    }

    /// Resolves after the next change (a permit is kept if nobody waits: one waiter only).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_streams_or_the_end_of_every_started_one() {
        let s = StreamsRead::default();
        assert!(s.all_read(0));
        s.started();
        s.started();
        assert!(!s.all_read(2));
        s.read();
        assert!(!s.all_read(2));
        s.read();
        assert!(s.all_read(2));
        // A peer that named more than it opened: held while the connection lives...
        assert!(!s.all_read(1_000));
        s.started();
        s.end();
        assert!(!s.all_read(1_000));
        // ...and released once the end came and every started stream was read.
        s.read();
        assert!(s.all_read(1_000));
    }

    #[tokio::test]
    async fn a_change_before_the_wait_is_not_lost() {
        let s = StreamsRead::default();
        s.read();
        tokio::time::timeout(std::time::Duration::from_secs(5), s.changed())
            .await
            .expect("the permit of the earlier change");
    }
}
