//! Taking a `std::sync` lock whose previous holder panicked.
//!
//! A `Mutex` or `RwLock` is *poisoned* when a thread panics while holding it; `lock()` then
//! returns an error carrying the guard. agentwire's locks guard tables and counters whose
//! every update is complete before the guard drops (no invariant spans a panic point), and a
//! panic in one connection's task must not take the hub down with it. So every agentwire lock
//! is taken the same way: recover the guard and go on. [`LockExt`] and [`RwLockExt`] are that
//! one way, instead of
//! a hand-written `unwrap_or_else(PoisonError::into_inner)` at each call.
//!
//! This crate owns that policy only; it must not hold locks itself.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use agentwire_sync::LockExt;
//!
//! let counter = Arc::new(Mutex::new(0));
//! let c = counter.clone();
//! let _ = std::thread::spawn(move || {
//!     let _guard = c.lock_or_recover();
//!     panic!("a task panics while holding the lock");
//! })
//! .join();
//! assert!(counter.is_poisoned());
//! *counter.lock_or_recover() += 1; // still usable
//! assert_eq!(*counter.lock_or_recover(), 1);
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Taking a `std::sync::Mutex` regardless of poisoning (see the crate's documentation).
pub trait LockExt<T: ?Sized> {
    /// `Mutex::lock`, recovering the guard if the lock is poisoned.
    fn lock_or_recover(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    fn lock_or_recover(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Taking a `std::sync::RwLock` regardless of poisoning (see the crate's documentation).
pub trait RwLockExt<T: ?Sized> {
    /// `RwLock::read`, recovering the guard if the lock is poisoned.
    fn read_or_recover(&self) -> RwLockReadGuard<'_, T>;

    /// `RwLock::write`, recovering the guard if the lock is poisoned.
    fn write_or_recover(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_or_recover(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_or_recover(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_rwlock_is_read_and_written() {
        let lock = Arc::new(RwLock::new(vec![1]));
        let l = lock.clone();
        let _ = std::thread::spawn(move || {
            let mut g = l.write_or_recover();
            g.push(2);
            panic!("poison it");
        })
        .join();
        assert!(lock.is_poisoned());
        assert_eq!(*lock.read_or_recover(), vec![1, 2]);
        lock.write_or_recover().push(3);
        assert_eq!(lock.read_or_recover().len(), 3);
    }
}
