//! Results handed back to a single-threaded host in batches.
//!
//! A binding's host (an asyncio event loop, Node's main thread) waits for many calls at once.
//! Handing each result over on its own costs a wake-up of the host thread and, in Python, the
//! interpreter lock taken from a runtime thread, which stalls that thread while the host holds
//! it. Instead, each finished call appends `(ticket, result)` here, and only the append that
//! finds the queue empty wakes the host; the host then takes everything that has finished in
//! one call and settles its own futures. No runtime thread ever waits for the host.
//!
//! This module owns the queue and the wake-up rule; it must not know what a result is, nor how
//! the host is woken (the binding passes that in: a byte on a socket for asyncio, a
//! thread-safe function call for Node).

use agentwire_sync::LockExt;
use std::sync::Mutex;

/// Finished calls waiting for the host, each with the ticket the host gave when it called.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// let wakes = Arc::new(AtomicUsize::new(0));
/// let w = wakes.clone();
/// let queue = agentwire_sdk::CompletionQueue::new(move || { w.fetch_add(1, Ordering::Relaxed); });
/// queue.complete(1, "a");
/// queue.complete(2, "b"); // the host is already woken: no second wake-up
/// assert_eq!(wakes.load(Ordering::Relaxed), 1);
/// assert_eq!(queue.take(), vec![(1, "a"), (2, "b")]);
/// queue.complete(3, "c"); // empty again: wakes
/// assert_eq!(wakes.load(Ordering::Relaxed), 2);
/// ```
pub struct CompletionQueue<T> {
    done: Mutex<Vec<(u64, T)>>,
    wake: Box<dyn Fn() + Send + Sync>,
}

impl<T> CompletionQueue<T> {
    /// A queue that calls `wake` whenever a result arrives to an empty queue.
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Self {
        CompletionQueue {
            done: Mutex::new(Vec::new()),
            wake: Box::new(wake),
        }
    }

    /// Records the result of call `ticket`; wakes the host if nothing else was waiting.
    pub fn complete(&self, ticket: u64, result: T) {
        let was_empty = {
            let mut done = self.done.lock_or_recover();
            done.push((ticket, result));
            done.len() == 1
        };
        if was_empty {
            (self.wake)();
        }
    }

    /// Everything finished since the last call, oldest first.
    pub fn take(&self) -> Vec<(u64, T)> {
        std::mem::take(&mut *self.done.lock_or_recover())
    }
}
