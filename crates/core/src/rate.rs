//! A token bucket, for the limits the hub core and the transports' accept gates keep.
//!
//! This module owns the arithmetic only; it must not read clocks (callers pass `now`).

use std::time::Instant;

/// A token bucket: `rate` per second, holding at most `burst`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket {
    tokens: f64,
    rate: f64,
    burst: f64,
    last: Instant,
}

impl Bucket {
    pub(crate) fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Bucket {
            tokens: burst,
            rate,
            burst,
            last: now,
        }
    }

    /// Takes `n` tokens if there are that many (after refilling for the time since the last
    /// call).
    pub(crate) fn take(&mut self, n: f64, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now.max(self.last);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }
}
