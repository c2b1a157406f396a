//! The inbound queue of one QUIC connection: frames read concurrently from many streams,
//! handed to the consumer in the order the peer opened their streams.
//!
//! Every stream is read by a task of its own, and a stream's credit goes back to the peer as
//! soon as its last byte is read, so when the consumer is slower than the peer, finished
//! frames wait for room in this queue. A bounded FIFO channel admits waiting frames in the
//! order their reader tasks happened to run, and with several streams arriving in one
//! datagram that order is the scheduler's: a critical message the hub sent right after a
//! backlog of bulk could wait behind a dozen bulk messages the hub sent *after* it
//! (`critical_overtakes_bulk` failed 8 runs in 25 with 16 KiB datagrams). The hub already
//! sends in priority order and quinn accepts streams in the order the peer opened them, so
//! this queue admits waiting frames by [`Ticket`] (a stream's place in that order) instead:
//! the sender's decision survives the receiver's scheduling, and no frame waits for a stream
//! whose bytes have not arrived (no head-of-line blocking).
//!
//! This module owns that ordering and the bound (`capacity` frames queued, plus at most one
//! waiting frame per reader task). It must not read streams or look inside frames.

use agentwire_sync::LockExt;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, Notify};

/// A frame's place in the admission order: lower goes first among frames waiting for room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

/// Why [`InboundSender::try_send`] gave its item back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrySendError<T> {
    /// No room without waiting (the queue is full or senders are waiting).
    Full(T),
    /// The receiver is gone.
    Closed(T),
}

/// The queue was closed by its receiver; the frame was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiverGone;

/// A bounded queue of `capacity` frames whose waiting senders are admitted by ticket.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use agentwire_transport::quic_inbound::channel;
/// let (tx, mut rx) = channel::<&str>(1);
/// let (first, second, third) = (tx.ticket(), tx.ticket(), tx.ticket());
/// tx.send(first, "queued").await.unwrap();
/// // The queue is full: later senders wait, and the lower ticket is admitted first even
/// // though it arrived last.
/// let late = tokio::spawn({ let tx = tx.clone(); async move { tx.send(third, "opened third").await } });
/// tokio::task::yield_now().await;
/// let early = tokio::spawn({ let tx = tx.clone(); async move { tx.send(second, "opened second").await } });
/// tokio::task::yield_now().await;
/// drop(tx);
/// assert_eq!(rx.recv().await, Some("queued"));
/// assert_eq!(rx.recv().await, Some("opened second"));
/// assert_eq!(rx.recv().await, Some("opened third"));
/// early.await.unwrap().unwrap();
/// late.await.unwrap().unwrap();
/// assert_eq!(rx.recv().await, None);
/// # });
/// ```
pub fn channel<T>(capacity: usize) -> (InboundSender<T>, InboundReceiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            // Grows with use: an idle connection's queue holds nothing (reserved up front,
            // 3.4 KiB per connection).
            ready: VecDeque::new(),
            waiting: BTreeMap::new(),
            capacity: capacity.max(1),
            next_ticket: 0,
            senders: 1,
            closed: false,
        }),
        readable: Notify::new(),
    });
    (
        InboundSender {
            shared: shared.clone(),
        },
        InboundReceiver { shared },
    )
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Wakes the receiver: a frame was queued or the last sender left.
    readable: Notify,
}

impl<T> Shared<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        // No code below panics while holding the lock; a poisoned state is still consistent.
        self.state.lock_or_recover()
    }
}

struct State<T> {
    ready: VecDeque<T>,
    /// Frames waiting for room, by ticket, each with the signal that admits its sender.
    waiting: BTreeMap<Ticket, (T, oneshot::Sender<()>)>,
    capacity: usize,
    next_ticket: u64,
    senders: usize,
    closed: bool,
}

/// The sending side: one clone per stream reader.
pub struct InboundSender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for InboundSender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        InboundSender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for InboundSender<T> {
    fn drop(&mut self) {
        let last = {
            let mut state = self.shared.lock();
            state.senders -= 1;
            state.senders == 0
        };
        if last {
            self.shared.readable.notify_one();
        }
    }
}

impl<T> InboundSender<T> {
    /// The next place in the admission order. Take it when the stream is accepted (quinn
    /// accepts streams in the order the peer opened them), or when a frame of a long-lived
    /// stream is ready.
    pub fn ticket(&self) -> Ticket {
        let mut state = self.shared.lock();
        let ticket = Ticket(state.next_ticket);
        state.next_ticket += 1;
        ticket
    }

    /// Queues `item` if that needs no wait: there is room and no sender is waiting (so the
    /// admission order is the same as [`send`](Self::send)'s). Otherwise gives it back.
    ///
    /// ```
    /// use agentwire_transport::quic_inbound::{channel, TrySendError};
    /// let (tx, mut rx) = channel::<u8>(1);
    /// assert!(tx.try_send(tx.ticket(), 1).is_ok());
    /// assert_eq!(tx.try_send(tx.ticket(), 2), Err(TrySendError::Full(2)));
    /// drop(rx);
    /// assert_eq!(tx.try_send(tx.ticket(), 3), Err(TrySendError::Closed(3)));
    /// ```
    pub fn try_send(&self, _ticket: Ticket, item: T) -> Result<(), TrySendError<T>> {
        {
            let mut state = self.shared.lock();
            if state.closed {
                return Err(TrySendError::Closed(item));
            }
            if !state.waiting.is_empty() || state.ready.len() >= state.capacity {
                return Err(TrySendError::Full(item));
            }
            state.ready.push_back(item);
        }
        self.shared.readable.notify_one();
        Ok(())
    }

    /// Queues `item`, waiting while the queue is full; among waiting senders the lowest
    /// ticket is admitted first.
    pub async fn send(&self, ticket: Ticket, item: T) -> Result<(), ReceiverGone> {
        let admitted = {
            let mut state = self.shared.lock();
            if state.closed {
                return Err(ReceiverGone);
            }
            if state.waiting.is_empty() && state.ready.len() < state.capacity {
                state.ready.push_back(item);
                None
            } else {
                let (admit, admitted) = oneshot::channel();
                state.waiting.insert(ticket, (item, admit));
                Some(admitted)
            }
        };
        match admitted {
            None => {
                self.shared.readable.notify_one();
                Ok(())
            }
            Some(admitted) => admitted.await.map_err(|_| ReceiverGone),
        }
    }
}

/// The receiving side (the connection's consumer).
pub struct InboundReceiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> InboundReceiver<T> {
    /// The next frame; `None` once every sender is gone and nothing is left.
    pub async fn recv(&mut self) -> Option<T> {
        loop {
            {
                let mut state = self.shared.lock();
                if let Some(item) = state.pop() {
                    return Some(item);
                }
                if state.senders == 0 {
                    return None;
                }
            }
            self.shared.readable.notified().await;
        }
    }

    /// The next frame if one is queued (admitted), without waiting.
    ///
    /// ```
    /// use agentwire_transport::quic_inbound::channel;
    /// let (tx, mut rx) = channel::<u8>(4);
    /// assert_eq!(rx.try_recv(), None);
    /// tx.try_send(tx.ticket(), 7).unwrap();
    /// assert_eq!(rx.try_recv(), Some(7));
    /// ```
    pub fn try_recv(&mut self) -> Option<T> {
        self.shared.lock().pop()
    }
}

impl<T> State<T> {
    /// Takes the first queued frame and admits waiting ones, lowest ticket first, into the
    /// room it leaves.
    fn pop(&mut self) -> Option<T> {
        let item = self.ready.pop_front()?;
        while self.ready.len() < self.capacity {
            let Some((_, (waiting, admit))) = self.waiting.pop_first() else {
                break;
            };
            self.ready.push_back(waiting);
            // A sender that stopped waiting still has its frame delivered.
            let _ = admit.send(());
        }
        Some(item)
    }
}

impl<T> Drop for InboundReceiver<T> {
    fn drop(&mut self) {
        let waiting = {
            let mut state = self.shared.lock();
            state.closed = true;
            state.ready.clear();
            std::mem::take(&mut state.waiting)
        };
        // Dropping the admit signals tells every waiting sender the receiver is gone.
        drop(waiting);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn frames_within_capacity_pass_in_arrival_order() {
        let (tx, mut rx) = channel(4);
        let (a, b) = (tx.ticket(), tx.ticket());
        tx.send(b, 2).await.unwrap();
        tx.send(a, 1).await.unwrap();
        assert_eq!(rx.recv().await, Some(2));
        assert_eq!(rx.recv().await, Some(1));
    }

    #[tokio::test]
    async fn waiting_senders_are_admitted_by_ticket_not_by_arrival() {
        let (tx, mut rx) = channel(2);
        let tickets: Vec<Ticket> = (0..6).map(|_| tx.ticket()).collect();
        tx.send(tickets[0], 0).await.unwrap();
        tx.send(tickets[1], 1).await.unwrap();
        // Four more wait, arriving in the order 5, 3, 2, 4.
        let mut tasks = Vec::new();
        for i in [5usize, 3, 2, 4] {
            let tx = tx.clone();
            let ticket = tickets[i];
            tasks.push(tokio::spawn(async move { tx.send(ticket, i).await }));
            settle().await;
        }
        drop(tx);
        let mut got = Vec::new();
        while let Some(v) = rx.recv().await {
            got.push(v);
        }
        assert_eq!(got, vec![0, 1, 2, 3, 4, 5]);
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(()));
        }
    }

    /// Queues 1 in a queue of one, then starts a sender of 2 that has to wait.
    async fn fill_then_block(
        tx: &InboundSender<i32>,
    ) -> tokio::task::JoinHandle<Result<(), ReceiverGone>> {
        tx.send(tx.ticket(), 1).await.unwrap();
        let ticket = tx.ticket();
        let blocked = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(ticket, 2).await }
        });
        settle().await;
        blocked
    }

    #[tokio::test]
    async fn a_full_queue_holds_its_sender_until_room_is_made() {
        let (tx, mut rx) = channel(1);
        let blocked = fill_then_block(&tx).await;
        assert!(
            !blocked.is_finished(),
            "the sender waits while the queue is full"
        );
        assert_eq!(rx.recv().await, Some(1));
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), blocked)
                .await
                .unwrap()
                .unwrap(),
            Ok(())
        );
        assert_eq!(rx.recv().await, Some(2));
    }

    #[tokio::test]
    async fn dropping_the_receiver_releases_waiting_senders_with_an_error() {
        let (tx, rx) = channel(1);
        let blocked = fill_then_block(&tx).await;
        drop(rx);
        assert_eq!(blocked.await.unwrap(), Err(ReceiverGone));
        assert_eq!(tx.send(tx.ticket(), 3).await, Err(ReceiverGone));
    }

    #[tokio::test]
    async fn the_receiver_ends_when_every_sender_is_gone() {
        let (tx, mut rx) = channel::<u8>(1);
        let other = tx.clone();
        let waiter = tokio::spawn(async move { rx.recv().await });
        settle().await;
        drop(tx);
        settle().await;
        assert!(!waiter.is_finished(), "one sender is left");
        drop(other);
        assert_eq!(waiter.await.unwrap(), None);
    }
}
