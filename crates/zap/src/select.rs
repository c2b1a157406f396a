//! The choice of a connection for a request, as a pure function of each candidate's load.
//!
//! This module owns [`Strategy`] and [`Strategy::pick`]; it reads no connection, clock or lock
//! itself, so the pool's choice can be tested and benchmarked on its own. Which connections
//! are candidates (live, not paused, not the one that just failed) is [`crate::pool`]'s call.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How a connection is chosen for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// In turn.
    #[default]
    RoundRobin,
    /// The one with the fewest requests in flight.
    LeastConnections,
    /// The one with the lowest error rate (then the fewest in flight).
    HealthBased,
    /// Any.
    Random,
}

/// What the choice knows of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Load {
    /// Requests in flight on it now.
    pub in_flight: usize,
    /// Requests sent on it so far.
    pub requests: u64,
    /// Of those, the ones that failed.
    pub errors: u64,
}

impl Load {
    /// Errors per thousand requests (0 before the first request).
    pub fn error_permille(&self) -> u64 {
        self.errors.saturating_mul(1000) / self.requests.max(1)
    }
}

impl Strategy {
    /// The index in `candidates` of the connection to use, or `None` when there is none.
    /// `turn` is the round-robin counter shared by the requests to one agent.
    ///
    /// ```
    /// use std::sync::atomic::AtomicUsize;
    /// use agentwire_zap::select::{Load, Strategy};
    ///
    /// let loads = [
    ///     Load { in_flight: 3, requests: 100, errors: 0 },
    ///     Load { in_flight: 1, requests: 100, errors: 9 },
    ///     Load { in_flight: 2, requests: 100, errors: 0 },
    /// ];
    /// let turn = AtomicUsize::new(0);
    /// assert_eq!(Strategy::LeastConnections.pick(&loads, &turn), Some(1));
    /// assert_eq!(Strategy::HealthBased.pick(&loads, &turn), Some(2));
    /// assert_eq!(Strategy::RoundRobin.pick(&loads, &turn), Some(0));
    /// assert_eq!(Strategy::RoundRobin.pick(&loads, &turn), Some(1));
    /// assert_eq!(Strategy::Random.pick(&[], &turn), None);
    /// ```
    pub fn pick(self, candidates: &[Load], turn: &AtomicUsize) -> Option<usize> {
        if candidates.is_empty() {
            return None;
        }
        let index = match self {
            Strategy::RoundRobin => turn.fetch_add(1, Ordering::Relaxed) % candidates.len(),
            Strategy::LeastConnections => min_index_by_key(candidates, |l| l.in_flight as u64),
            Strategy::HealthBased => {
                min_index_by_key(candidates, |l| (l.error_permille(), l.in_flight as u64))
            }
            Strategy::Random => random_below(candidates.len()),
        };
        Some(index)
    }
}

/// The first index with the smallest key.
fn min_index_by_key<K: Ord>(loads: &[Load], key: impl Fn(&Load) -> K) -> usize {
    loads
        .iter()
        .enumerate()
        .min_by_key(|(_, l)| key(l))
        .map(|(i, _)| i)
        .unwrap_or(0)
}

/// A number below `n` from a per-thread xorshift (no lock, no dependency).
fn random_below(n: usize) -> usize {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64 | 1)
                .unwrap_or(0x9E37_79B9_7F4A_7C15),
        );
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x % n.max(1) as u64) as usize
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(in_flight: usize, requests: u64, errors: u64) -> Load {
        Load {
            in_flight,
            requests,
            errors,
        }
    }

    #[test]
    fn round_robin_goes_round() {
        let loads = [load(0, 0, 0); 3];
        let turn = AtomicUsize::new(0);
        let picks: Vec<_> = (0..6)
            .filter_map(|_| Strategy::RoundRobin.pick(&loads, &turn))
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn least_connections_takes_the_first_of_the_least_loaded() {
        let loads = [load(2, 0, 0), load(1, 0, 0), load(1, 0, 0)];
        let turn = AtomicUsize::new(0);
        assert_eq!(Strategy::LeastConnections.pick(&loads, &turn), Some(1));
    }

    #[test]
    fn health_based_prefers_fewer_errors_then_less_load() {
        let turn = AtomicUsize::new(0);
        let loads = [load(0, 10, 5), load(9, 10, 0), load(3, 10, 0)];
        assert_eq!(Strategy::HealthBased.pick(&loads, &turn), Some(2));
        // No requests yet counts as no errors.
        let fresh = [load(1, 10, 1), load(4, 0, 0)];
        assert_eq!(Strategy::HealthBased.pick(&fresh, &turn), Some(1));
    }

    #[test]
    fn random_stays_in_range_and_reaches_every_candidate() {
        let loads = [load(0, 0, 0); 4];
        let turn = AtomicUsize::new(0);
        let mut seen = [false; 4];
        for _ in 0..1000 {
            let i = Strategy::Random.pick(&loads, &turn).unwrap_or(99);
            assert!(i < 4);
            seen[i] = true;
        }
        assert_eq!(seen, [true; 4]);
    }

    #[test]
    fn no_candidate_no_pick() {
        let turn = AtomicUsize::new(0);
        for s in [
            Strategy::RoundRobin,
            Strategy::LeastConnections,
            Strategy::HealthBased,
            Strategy::Random,
        ] {
            assert_eq!(s.pick(&[], &turn), None);
        }
    }
}
