//! [`Lease`]: this hub's right to write the cluster's queues, as this hub knows it.
//!
//! The lease itself lives in JetStream (see the owner module) and expires there a fixed time
//! after its last renewal was stored. This hub cannot see that clock, so it counts from the
//! moment it *sent* each renewal (never later than the server stored it) and stops writing
//! once the time given to [`Lease::new`] has gone by: well before another hub can take the
//! queues over.
//! It owns that rule and nothing else.

use agentwire_sync::LockExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Held or not, and since when renewed.
///
/// ```
/// use std::time::{Duration, Instant};
/// use agentwire_cluster::lease::Lease;
/// let lease = Lease::new(Duration::from_secs(3));
/// assert!(!lease.valid());
/// let t = Instant::now();
/// lease.granted(t);
/// assert!(lease.valid_at(t + Duration::from_secs(2)));
/// assert!(!lease.valid_at(t + Duration::from_secs(3)));
/// lease.revoke();
/// assert!(!lease.valid_at(t));
/// ```
#[derive(Debug)]
pub struct Lease {
    held: AtomicBool,
    renewed: Mutex<Instant>,
    valid_for: Duration,
}

impl Lease {
    /// A lease not held, valid for `valid_for` after each renewal once granted.
    pub fn new(valid_for: Duration) -> Self {
        Lease {
            held: AtomicBool::new(false),
            renewed: Mutex::new(Instant::now()),
            valid_for,
        }
    }

    /// Granted by a request sent at `sent`.
    pub fn granted(&self, sent: Instant) {
        self.renewed(sent);
        self.held.store(true, Ordering::Release);
    }

    /// Renewed by a request sent at `sent`.
    pub fn renewed(&self, sent: Instant) {
        *self.renewed.lock_or_recover() = sent;
    }

    /// Lost or given up: no more writes.
    pub fn revoke(&self) {
        self.held.store(false, Ordering::Release);
    }

    /// Revokes; whether it was held.
    pub fn take(&self) -> bool {
        self.held.swap(false, Ordering::AcqRel)
    }

    /// Whether this hub believes it holds the lease (renewed in time or not).
    pub fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// Time since the last renewal was sent.
    pub fn since_renewal(&self) -> Duration {
        self.renewed.lock_or_recover().elapsed()
    }

    /// Whether writes may go out now.
    pub fn valid(&self) -> bool {
        self.valid_at(Instant::now())
    }

    /// Whether writes may go out at `now`.
    pub fn valid_at(&self, now: Instant) -> bool {
        let renewed = *self.renewed.lock_or_recover();
        self.held() && now.saturating_duration_since(renewed) < self.valid_for
    }
}
