//! A windowed maximum over "rounds" (round trips), exact and O(1) amortised.
//!
//! This module owns the bandwidth and ack-aggregation filters' arithmetic; it must not know
//! what the values mean.

use std::collections::VecDeque;

/// The largest value seen in the last `window` rounds.
///
/// Values only expire when a newer one is recorded: a sender that stops producing samples
/// (app-limited) keeps its last estimate instead of decaying to zero.
///
/// ```
/// use agentwire_cc::WindowedMax;
/// let mut f = WindowedMax::new(3);
/// f.update(0, 10);
/// f.update(1, 5);
/// assert_eq!(f.get(), 10);
/// f.update(3, 4); // round 0 is now outside the window of 3 rounds
/// assert_eq!(f.get(), 5);
/// ```
#[derive(Debug, Clone)]
pub struct WindowedMax {
    window: u64,
    /// (round, value), values strictly decreasing from the front.
    entries: VecDeque<(u64, u64)>,
}

impl WindowedMax {
    /// A filter over the last `window` rounds (at least 1).
    pub fn new(window: u64) -> Self {
        WindowedMax {
            window: window.max(1),
            entries: VecDeque::new(),
        }
    }

    /// Records `value` measured in `round` (rounds never go backwards).
    pub fn update(&mut self, round: u64, value: u64) {
        while self.entries.back().is_some_and(|&(_, v)| v <= value) {
            self.entries.pop_back();
        }
        self.entries.push_back((round, value));
        while self
            .entries
            .front()
            .is_some_and(|&(r, _)| round.saturating_sub(r) >= self.window)
        {
            self.entries.pop_front();
        }
    }

    /// The maximum in the window (0 before any sample).
    pub fn get(&self) -> u64 {
        self.entries.front().map_or(0, |&(_, v)| v)
    }

    /// Forgets every sample.
    pub fn reset(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_naive_window_on_random_input() {
        let mut f = WindowedMax::new(10);
        let mut all: Vec<(u64, u64)> = Vec::new();
        let mut x: u64 = 12345;
        for round in 0..2000u64 {
            for _ in 0..(round % 3) {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let v = x >> 40;
                f.update(round, v);
                all.push((round, v));
                let naive = all
                    .iter()
                    .filter(|&&(r, _)| round - r < 10)
                    .map(|&(_, v)| v)
                    .max()
                    .unwrap_or(0);
                assert_eq!(f.get(), naive, "round {round}");
            }
        }
    }
}
