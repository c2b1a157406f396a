//! A QUIC server endpoint's receive budget, shared among its connections.
//!
//! Every connection of an endpoint arrives through one UDP socket. Each peer may send as much
//! as its connection's flow-control window before it must wait, so with a thousand agents and
//! a 32 MiB window each, the peers together may send far more than the socket holds, and when
//! they all do (a thousand 100 KiB requests at once) the kernel drops what does not fit:
//! about 2,000 datagrams a run in the bench's 1000 × 100 KiB cell, each recovered only after a
//! loss timeout. TCP has no such cliff: every connection has its own socket buffer. Here each
//! connection's window is the budget divided among the connections open (at least one
//! [`MIN_WINDOW`], at most the configured window), so together they stay near the budget.
//!
//! Every connection is accepted with the same small window in its transport parameters
//! ([`MIN_WINDOW`]), and raised to its share (MAX_DATA, in the server's first 1-RTT packets)
//! as soon as it is accepted. The parameters must not vary: a client resuming with 0-RTT
//! refuses a server whose parameters shrank since the session it remembers ("0-RTT accepted
//! with incompatible transport parameters"), which a share computed at accept time did in the
//! bench's reconnect phase. Open connections are lowered or raised when the share has moved
//! by half since it was last applied, so a connection storm costs O(n log n) window updates,
//! not O(n²).
//!
//! This module owns that arithmetic and the set of connections it applies to. It must not
//! read or write streams.

use agentwire_sync::LockExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use quinn::VarInt;

/// The smallest window a connection gets however many share the budget (16 KiB).
pub const MIN_WINDOW: u64 = 16 * 1024;

/// Each connection's share of `budget` among `connections`, between [`MIN_WINDOW`] and
/// `max` (the configured connection window).
///
/// ```
/// use agentwire_transport::quic_budget::share;
/// let max = 32 << 20;
/// assert_eq!(share(16 << 20, 1, max), 16 << 20);
/// assert_eq!(share(16 << 20, 1024, max), 16 << 10);
/// assert_eq!(share(16 << 20, 100_000, max), 16 << 10); // never below one datagram
/// assert_eq!(share(64 << 20, 1, max), max); // never above the configured window
/// ```
pub fn share(budget: u64, connections: usize, max: u64) -> u64 {
    let n = u64::try_from(connections.max(1)).unwrap_or(u64::MAX);
    (budget / n).max(MIN_WINDOW).min(max.max(MIN_WINDOW))
}

/// The budget of one endpoint and the connections sharing it.
pub struct ReceiveBudget {
    budget: u64,
    max: u64,
    state: Mutex<State>,
}

struct State {
    connections: HashMap<usize, quinn::Connection>,
    /// Connections being accepted, counted before they are registered.
    pending: usize,
    /// The share last applied to every registered connection.
    applied: u64,
}

impl ReceiveBudget {
    /// A budget of `budget` bytes with connection windows of at most `max`.
    pub fn new(budget: u64, max: u64) -> Arc<Self> {
        Arc::new(ReceiveBudget {
            budget,
            max,
            state: Mutex::new(State {
                connections: HashMap::new(),
                pending: 0,
                applied: share(budget, 1, max),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned state is still consistent.
        self.state.lock_or_recover()
    }

    /// Counts a connection being accepted. Accept it with [`Admission::window`], then call
    /// [`Admission::register`] as soon as the connection exists (or drop the admission).
    pub fn admit(self: &Arc<Self>) -> Admission {
        let mut state = self.lock();
        state.pending += 1;
        self.rebalance(&mut state);
        Admission {
            budget: self.clone(),
            window: MIN_WINDOW.min(self.max),
            registered: None,
        }
    }

    /// The share every registered connection has now.
    pub fn applied(&self) -> u64 {
        self.lock().applied
    }

    /// Connections registered now.
    pub fn connections(&self) -> usize {
        self.lock().connections.len()
    }

    /// Applies the current share to every registered connection if it has moved by half or
    /// more since it was last applied.
    fn rebalance(&self, state: &mut State) {
        let now = share(
            self.budget,
            state.connections.len() + state.pending,
            self.max,
        );
        if now * 2 > state.applied && now < state.applied * 2 {
            return;
        }
        state.applied = now;
        let window = VarInt::from_u64(now).unwrap_or(VarInt::MAX);
        for conn in state.connections.values() {
            conn.set_receive_window(window);
        }
    }
}

/// A connection's place in a [`ReceiveBudget`], from acceptance until it is dropped.
pub struct Admission {
    budget: Arc<ReceiveBudget>,
    window: u64,
    registered: Option<usize>,
}

impl Admission {
    /// The window to accept the connection with (its transport parameters): the same for
    /// every connection, so that 0-RTT resumption always finds them compatible.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Adds the connection and raises its window to the current share; the budget adjusts
    /// it from now on.
    pub fn register(&mut self, conn: &quinn::Connection) {
        if self.registered.is_some() {
            return;
        }
        let id = conn.stable_id();
        let mut state = self.budget.lock();
        state.pending = state.pending.saturating_sub(1);
        state.connections.insert(id, conn.clone());
        self.registered = Some(id);
        self.budget.rebalance(&mut state);
        conn.set_receive_window(VarInt::from_u64(state.applied).unwrap_or(VarInt::MAX));
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut state = self.budget.lock();
        match self.registered {
            Some(id) => {
                state.connections.remove(&id);
            }
            None => state.pending = state.pending.saturating_sub(1),
        }
        self.budget.rebalance(&mut state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_shrink_with_connections_and_stay_in_bounds() {
        let max = 32 << 20;
        let budget = 16 << 20;
        let mut last = u64::MAX;
        for n in [1usize, 2, 10, 100, 1000, 10_000] {
            let s = share(budget, n, max);
            assert!(s <= last, "{n} connections");
            assert!((MIN_WINDOW..=max).contains(&s));
            if s > MIN_WINDOW {
                assert!(s * n as u64 <= budget, "{n} connections fit the budget");
            }
            last = s;
        }
        assert_eq!(share(budget, 0, max), budget, "no connection counts as one");
        assert_eq!(
            share(budget, 1, 1000),
            MIN_WINDOW,
            "a tiny max is raised to the floor"
        );
    }

    #[test]
    fn admissions_count_until_dropped_and_start_alike() {
        let budget = ReceiveBudget::new(1 << 20, 32 << 20);
        let a = budget.admit();
        assert_eq!(
            a.window(),
            MIN_WINDOW,
            "the transport parameters never vary"
        );
        assert_eq!(budget.applied(), 1 << 20);
        let b = budget.admit();
        assert_eq!(b.window(), MIN_WINDOW);
        assert_eq!(
            budget.applied(),
            512 << 10,
            "two connections share the budget"
        );
        let more: Vec<Admission> = (0..6).map(|_| budget.admit()).collect();
        assert_eq!(budget.applied(), 128 << 10, "applied when it moved by half");
        drop(more);
        drop(a);
        drop(b);
        assert_eq!(
            budget.applied(),
            1 << 20,
            "dropped admissions free their share"
        );
        assert_eq!(budget.connections(), 0);
    }
}
