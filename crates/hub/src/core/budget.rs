//! The hub-wide budget of bytes queued for agents: every connection's outbound queue takes
//! its [`Share`] from it before it holds a message, and gives back what it sends or drops.
//!
//! Owns the count (which is the `agentwire_hub_queued_bytes` gauge itself: bytes reserved for
//! queued frames, in [`STEP`]s per connection) and the rule that a message beyond the budget
//! is refused; it must not know about connections or messages.

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

/// How much of the budget a queue takes or gives back at once.
pub(crate) const STEP: usize = 16 * 1024;

fn round_up(n: usize) -> usize {
    n.div_ceil(STEP).saturating_mul(STEP)
}

/// One queue's share of the budget, taken and given back in [`STEP`]s: a queue whose size
/// moves within a step (request/reply traffic, mostly) leaves the shared count alone, so
/// connections on different cores do not contend for it per message. A queue holds at most
/// two steps more than its frames, so the count overstates what is queued by at most that
/// much per connection.
#[derive(Debug)]
pub(crate) struct Share {
    budget: QueueBudget,
    reserved: usize,
}

impl Share {
    pub(crate) fn new(budget: QueueBudget) -> Self {
        Share {
            budget,
            reserved: 0,
        }
    }

    /// Makes room for `total` bytes queued; false when the budget cannot.
    pub(crate) fn cover(&mut self, total: usize) -> bool {
        if total <= self.reserved {
            return true;
        }
        let need = total - self.reserved;
        for extra in [round_up(need), need] {
            if self.budget.try_take(extra) {
                self.reserved += extra;
                return true;
            }
        }
        false
    }

    /// Makes room for `total` bytes queued whether or not the budget allows (control frames).
    pub(crate) fn cover_anyway(&mut self, total: usize) {
        if total > self.reserved {
            let extra = round_up(total - self.reserved);
            self.budget.force_take(extra);
            self.reserved += extra;
        }
    }

    /// `total` bytes are queued now: gives back what is reserved beyond one step above them
    /// (once that is more than two steps, so that a queue at a step's edge does not flap).
    pub(crate) fn shrink_to(&mut self, total: usize) {
        let keep = round_up(total) + STEP;
        if self.reserved > keep + STEP {
            self.budget.give_back(self.reserved - keep);
            self.reserved = keep;
        }
    }
}

impl Share {
    /// Gives back everything (the queue is closed and emptied).
    pub(crate) fn release(&mut self) {
        self.budget.give_back(std::mem::take(&mut self.reserved));
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.budget.give_back(self.reserved);
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

    #[test]
    fn a_share_moves_in_steps_and_gives_everything_back_when_dropped() {
        let b = QueueBudget::new(Gauge::default(), 10 * STEP + 50);
        let mut s = Share::new(b.clone());
        assert!(s.cover(100));
        assert_eq!(b.used.get(), STEP as i64);
        // Small messages in and out: the shared count does not move.
        for total in [1_000, 5_000, 0, 3_000, 0] {
            assert!(s.cover(total));
            s.shrink_to(total);
            assert_eq!(b.used.get(), STEP as i64);
        }
        assert!(s.cover(5 * STEP + 1));
        assert_eq!(b.used.get(), 6 * STEP as i64);
        s.shrink_to(0);
        assert_eq!(b.used.get(), STEP as i64, "one step kept");
        // At the budget's edge it takes what is needed, not a whole step.
        let mut other = Share::new(b.clone());
        assert!(other.cover(9 * STEP));
        assert!(s.cover(STEP + 50));
        assert!(!s.cover(STEP + 51));
        assert_eq!(b.used.get(), 10 * STEP as i64 + 50);
        drop(other);
        drop(s);
        assert_eq!(b.used.get(), 0);
    }
}
