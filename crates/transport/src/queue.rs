//! A bounded send queue with four priority classes.
//!
//! Every connection's outgoing frames wait here before a writer task hands them to the
//! transport, so a critical frame queued after bulk frames is taken first on every transport.
//! The queue is bounded in items: [`PriorityQueue::try_push`] fails when full (the hub uses it,
//! and tells the sender), [`PriorityQueue::push`] waits for room (agents use it: backpressure).
//!
//! This module owns ordering and bounds only; it must not know about frames or sockets.

use agentwire_sync::LockExt;
use std::collections::VecDeque;
use std::sync::Mutex;

use agentwire_proto::Priority;
use tokio::sync::Notify;

/// Why an item was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The queue holds `capacity` items already.
    #[error("queue full ({0} items)")]
    Full(usize),
    /// The queue was closed (its connection is gone).
    #[error("queue closed")]
    Closed,
}

/// A bounded multi-producer, single-consumer queue that pops the most urgent class first and
/// keeps FIFO order within a class.
///
/// ```
/// # tokio_test_block_on(async {
/// use agentwire_transport::queue::PriorityQueue;
/// use agentwire_proto::Priority;
/// let q = PriorityQueue::new(8);
/// q.try_push("bulk-1", Priority::Low).unwrap();
/// q.try_push("bulk-2", Priority::Low).unwrap();
/// q.try_push("urgent", Priority::Critical).unwrap();
/// assert_eq!(q.pop().await, Some("urgent"));
/// assert_eq!(q.pop().await, Some("bulk-1"));
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Debug)]
pub struct PriorityQueue<T> {
    state: Mutex<QueueState<T>>,
    capacity: usize,
    readable: Notify,
    writable: Notify,
}

#[derive(Debug)]
struct QueueState<T> {
    classes: [VecDeque<T>; 4],
    len: usize,
    closed: bool,
}

impl<T> PriorityQueue<T> {
    /// A queue holding at most `capacity` items (at least 1).
    pub fn new(capacity: usize) -> Self {
        PriorityQueue {
            state: Mutex::new(QueueState {
                classes: Default::default(),
                len: 0,
                closed: false,
            }),
            capacity: capacity.max(1),
            readable: Notify::new(),
            writable: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState<T>> {
        // A panic while holding this lock cannot leave the deques inconsistent, so a
        // poisoned lock is still safe to use.
        self.state.lock_or_recover()
    }

    /// Queues `item` if there is room.
    pub fn try_push(&self, item: T, priority: Priority) -> Result<(), QueueError> {
        let mut s = self.lock();
        if s.closed {
            return Err(QueueError::Closed);
        }
        if s.len >= self.capacity {
            return Err(QueueError::Full(self.capacity));
        }
        s.classes[priority.index()].push_back(item);
        s.len += 1;
        drop(s);
        self.readable.notify_one();
        Ok(())
    }

    /// Queues `item`, waiting while the queue is full.
    pub async fn push(&self, item: T, priority: Priority) -> Result<(), QueueError> {
        self.push_all(std::iter::once((item, priority)))
            .await
            .map_err(|(_, e)| e)
    }

    /// Queues every item, each in its class, in as few steps as the room allows: all at once
    /// when they fit (so that a consumer finds them together), otherwise as many as fit each
    /// time room appears. On an error the items not yet queued are dropped; the count of
    /// those queued comes with it.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use agentwire_proto::Priority;
    /// use agentwire_transport::queue::PriorityQueue;
    /// let q = PriorityQueue::new(8);
    /// q.push_all(vec![("a", Priority::Low), ("b", Priority::Low), ("!", Priority::Critical)])
    ///     .await
    ///     .unwrap();
    /// assert_eq!(q.len(), 3);
    /// assert_eq!(q.pop().await, Some("!"));
    /// assert_eq!(q.pop().await, Some("a"));
    /// # });
    /// ```
    pub async fn push_all(
        &self,
        items: impl IntoIterator<Item = (T, Priority)>,
    ) -> Result<(), (usize, QueueError)> {
        let mut items = items.into_iter().peekable();
        let mut queued = 0;
        while items.peek().is_some() {
            let notified = self.writable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let added = {
                let mut s = self.lock();
                if s.closed {
                    return Err((queued, QueueError::Closed));
                }
                let mut added = 0;
                while s.len < self.capacity {
                    let Some((item, priority)) = items.next() else {
                        break;
                    };
                    s.classes[priority.index()].push_back(item);
                    s.len += 1;
                    added += 1;
                }
                added
            };
            if added > 0 {
                queued += added;
                self.readable.notify_one();
                continue;
            }
            notified.await;
        }
        Ok(())
    }

    /// Takes the most urgent item, waiting while the queue is empty; `None` once closed and
    /// drained.
    pub async fn pop(&self) -> Option<T> {
        loop {
            let notified = self.readable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                if let Some(item) = s.classes.iter_mut().find_map(VecDeque::pop_front) {
                    s.len -= 1;
                    drop(s);
                    self.writable.notify_one();
                    return Some(item);
                }
                if s.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Items queued now.
    pub fn len(&self) -> usize {
        self.lock().len
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most items the queue holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Closes the queue: pushes fail, pops drain what is left then return `None`. Returns the
    /// number of items that were still queued.
    pub fn close(&self) -> usize {
        let len = {
            let mut s = self.lock();
            s.closed = true;
            s.len
        };
        self.readable.notify_waiters();
        self.writable.notify_waiters();
        len
    }

    /// True once [`close`](PriorityQueue::close) was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn pops_by_class_then_fifo() {
        let q = PriorityQueue::new(16);
        for (i, p) in [
            Priority::Low,
            Priority::Medium,
            Priority::Low,
            Priority::Critical,
            Priority::High,
        ]
        .into_iter()
        .enumerate()
        {
            q.try_push(i, p).unwrap();
        }
        let mut out = Vec::new();
        for _ in 0..5 {
            out.push(q.pop().await.unwrap());
        }
        assert_eq!(out, vec![3, 4, 1, 0, 2]);
    }

    #[tokio::test]
    async fn try_push_fails_when_full_and_push_waits() {
        let q = Arc::new(PriorityQueue::new(2));
        q.try_push(1, Priority::Low).unwrap();
        q.try_push(2, Priority::Low).unwrap();
        assert_eq!(q.try_push(3, Priority::Low), Err(QueueError::Full(2)));
        let q2 = q.clone();
        let waiter = tokio::spawn(async move { q2.push(3, Priority::Low).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert_eq!(q.pop().await, Some(1));
        waiter.await.unwrap().unwrap();
        assert_eq!(q.len(), 2);
    }

    #[tokio::test]
    async fn close_drains_then_ends() {
        let q = PriorityQueue::new(4);
        q.try_push("a", Priority::Medium).unwrap();
        assert_eq!(q.close(), 1);
        assert_eq!(q.try_push("b", Priority::Medium), Err(QueueError::Closed));
        assert_eq!(q.pop().await, Some("a"));
        assert_eq!(q.pop().await, None);
    }
}
