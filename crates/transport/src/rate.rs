//! A token bucket, for the limits the hub core and the transports' accept gates keep.
//!
//! This module owns the arithmetic only; it must not read clocks (callers pass `now`).

use std::time::{Duration, Instant};

/// A token bucket: `rate` per second, holding at most `burst`.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens: f64,
    rate: f64,
    burst: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket at `now`.
    pub fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Bucket {
            tokens: burst,
            rate,
            burst,
            last: now,
        }
    }

    /// Takes `n` tokens if there are that many (after refilling for the time since the last
    /// call).
    pub fn take(&mut self, n: f64, now: Instant) -> bool {
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

    /// [`take`](Self::take), or how long until `n` tokens are there (at the current rate).
    pub fn take_or_wait(&mut self, n: f64, now: Instant) -> Result<(), Duration> {
        if self.take(n, now) {
            return Ok(());
        }
        let missing = (n.min(self.burst) - self.tokens).max(0.0);
        Err(
            Duration::from_secs_f64(missing / self.rate.max(f64::MIN_POSITIVE))
                .max(Duration::from_millis(1)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_the_time_the_missing_tokens_take() {
        let t0 = Instant::now();
        let mut b = Bucket::new(10.0, 2.0, t0);
        assert!(b.take_or_wait(1.0, t0).is_ok());
        assert!(b.take_or_wait(1.0, t0).is_ok());
        let wait = b.take_or_wait(1.0, t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
        assert!(b.take_or_wait(1.0, t0 + wait).is_ok());
    }
}
