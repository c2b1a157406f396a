//! The hub-wide budget of bytes queued for agents: every connection's outbound queue takes
//! from it before it holds a message, and gives back what it sends or drops.
//!
//! Owns the count (which is the `agentwire_hub_queued_bytes` gauge itself) and the rule that
//! a message beyond the budget is refused; it must not know about connections or messages.

use prometheus_client::metrics::gauge::Gauge;

/// The default of `CoreConfig::hub_queue_bytes`: 1 GiB.
pub const DEFAULT_HUB_QUEUE_BYTES: usize = 1 << 30;

/// Bytes queued for all agents together, against a maximum.
#[derive(Debug, Clone)]
pub(crate) struct QueueBudget {
    used: Gauge,
    max: i64,
}

impl QueueBudget {
    /// A budget of `max` bytes counted in `used`.
    pub(crate) fn new(used: Gauge, max: usize) -> Self {
        QueueBudget {
            used,
            max: i64::try_from(max).unwrap_or(i64::MAX),
        }
    }

    /// Takes `n` bytes if they fit. Two takes racing at the edge may both be refused, never
    /// both granted beyond the maximum.
    pub(crate) fn try_take(&self, n: usize) -> bool {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let before = self.used.inc_by(n);
        if before.saturating_add(n) > self.max {
            self.used.dec_by(n);
            return false;
        }
        true
    }

    /// Takes `n` bytes whether or not they fit (control frames: a handful per connection).
    pub(crate) fn force_take(&self, n: usize) {
        self.used.inc_by(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Gives back `n` bytes taken before.
    pub(crate) fn give_back(&self, n: usize) {
        if n > 0 {
            self.used.dec_by(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_what_fits_and_gives_it_back() {
        let b = QueueBudget::new(Gauge::default(), 100);
        assert!(b.try_take(60));
        assert!(!b.try_take(41));
        assert!(b.try_take(40));
        assert!(!b.try_take(1));
        b.give_back(60);
        assert!(b.try_take(60));
        b.force_take(10);
        assert_eq!(b.used.get(), 110, "control frames go over the budget");
        assert!(!b.try_take(1));
        b.give_back(110);
        assert_eq!(b.used.get(), 0);
    }
}
