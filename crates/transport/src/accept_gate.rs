//! The gate in front of a TCP listener's set-ups: how many connections may be in their TLS and
//! transport handshake at once, in all and from one address, before any cryptography is spent.
//!
//! A connection takes a [`Pass`] when it is accepted and gives it back when its set-up ends
//! (ready for the agentwire hello, or failed). At the total limit the listener stops accepting
//! until a pass comes back (the kernel's backlog holds the rest: legitimate bursts wait, they
//! are not refused); past the per-address limit a new connection is closed at once, so that one
//! address holding idle handshakes cannot take every place. Idle handshakes end at the hub's
//! handshake timeout. With a rate of set-ups per second the listener also waits for its
//! [`turn`](AcceptGate::turn) before it takes the next connection: the rest wait in the
//! kernel's backlog or quinn's incoming queue (both bounded), and a flooder that is closed at
//! once cannot come straight back for another handshake.
//!
//! This module owns the counts; it must not read or write sockets.

use agentwire_sync::LockExt;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default of [`AcceptLimits::max_pending`]: the listen backlog's size.
pub const DEFAULT_MAX_PENDING: usize = 4096;
/// The default of [`AcceptLimits::max_pending_per_address`].
pub const DEFAULT_MAX_PENDING_PER_ADDRESS: usize = 2048;

/// Connections in their set-up (TLS, HTTP/2 or WebSocket handshake) at once.
///
/// ```
/// use agentwire_transport::accept_gate::AcceptLimits;
/// let l = AcceptLimits::default();
/// assert!(l.max_pending_per_address <= l.max_pending);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptLimits {
    /// In all (the listener waits beyond it).
    pub max_pending: usize,
    /// From one IP address (a connection beyond it is closed at once).
    pub max_pending_per_address: usize,
    /// New set-ups per second, all addresses together, bursts of one second's worth (the
    /// listener takes no connection beyond it until the next one's turn: the rest wait in the
    /// kernel's backlog or quinn's incoming queue); off by default.
    pub handshakes_per_sec: Option<u32>,
}

impl Default for AcceptLimits {
    fn default() -> Self {
        AcceptLimits {
            max_pending: DEFAULT_MAX_PENDING,
            max_pending_per_address: DEFAULT_MAX_PENDING_PER_ADDRESS,
            handshakes_per_sec: None,
        }
    }
}

/// The counts one listener shares with the set-ups it started.
#[derive(Debug, Clone)]
pub struct AcceptGate {
    slots: Arc<Semaphore>,
    per_address: Arc<Mutex<HashMap<IpAddr, usize>>>,
    limits: AcceptLimits,
    /// New set-ups per second ([`AcceptLimits::handshakes_per_sec`]).
    rate: Option<Arc<Mutex<crate::rate::Bucket>>>,
}

/// A place taken by one connection in its set-up; given back when dropped.
#[derive(Debug)]
pub struct Pass {
    _slot: OwnedSemaphorePermit,
    address: IpAddr,
    per_address: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// A place in the set-up, not yet tied to an address (the listener holds it while it waits
/// for the next connection).
#[derive(Debug)]
pub struct Slot(OwnedSemaphorePermit);

/// Why the gate turns a connection away before any cryptography.
///
/// ```
/// use agentwire_transport::accept_gate::Refused;
/// let why = Refused::Rate { per_sec: 10 };
/// assert_eq!(why.to_string(), "the hub sets up at most 10 connections per second");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// This second's set-ups are used up ([`AcceptLimits::handshakes_per_sec`]).
    #[error("the hub sets up at most {per_sec} connections per second")]
    Rate {
        /// The limit.
        per_sec: u32,
    },
    /// The address has [`AcceptLimits::max_pending_per_address`] set-ups going already.
    #[error("too many handshakes going on from {address} (at most {limit} at once)")]
    FromAddress {
        /// The peer's address.
        address: IpAddr,
        /// The limit.
        limit: usize,
    },
}

impl AcceptGate {
    /// A gate with `limits` (zero counts as one).
    pub fn new(limits: AcceptLimits) -> Self {
        AcceptGate {
            slots: Arc::new(Semaphore::new(limits.max_pending.max(1))),
            per_address: Arc::default(),
            limits,
            rate: limits.handshakes_per_sec.map(|r| {
                let rate = f64::from(r.max(1));
                Arc::new(Mutex::new(crate::rate::Bucket::new(
                    rate,
                    rate,
                    std::time::Instant::now(),
                )))
            }),
        }
    }

    /// Whether one more set-up fits this second's rate; why not, if it does not.
    pub fn within_rate(&self) -> Result<(), Refused> {
        let Some(rate) = &self.rate else {
            return Ok(());
        };
        let mut bucket = rate.lock_or_recover();
        match bucket.take(1.0, std::time::Instant::now()) {
            true => Ok(()),
            false => Err(Refused::Rate {
                per_sec: self.limits.handshakes_per_sec.unwrap_or(0),
            }),
        }
    }

    /// Waits until one more set-up fits the rate of set-ups per second (at once when there is
    /// none), and takes its token.
    pub async fn turn(&self) {
        let Some(rate) = &self.rate else {
            return;
        };
        loop {
            let wait = {
                let mut bucket = rate.lock_or_recover();
                match bucket.take_or_wait(1.0, std::time::Instant::now()) {
                    Ok(()) => return,
                    Err(wait) => wait,
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Waits for a free place (every other one is in a set-up). `None` only if the gate was
    /// closed, which nothing does: the listener then stops.
    pub async fn slot(&self) -> Option<Slot> {
        self.slots.clone().acquire_owned().await.ok().map(Slot)
    }

    /// Ties `slot` to a connection from `address`; `None` when that address has
    /// `max_pending_per_address` set-ups going already (the slot is given back).
    pub fn pass(&self, slot: Slot, address: IpAddr) -> Option<Pass> {
        let mut counts = self.per_address.lock_or_recover();
        let n = counts.entry(address).or_insert(0);
        if *n >= self.limits.max_pending_per_address.max(1) {
            return None;
        }
        *n += 1;
        Some(Pass {
            _slot: slot.0,
            address,
            per_address: self.per_address.clone(),
        })
    }

    /// [`pass`](Self::pass): the pass, or why the connection is turned away (before any
    /// cryptography). The rate is not checked here: the listener waits for its
    /// [`turn`](Self::turn) before it accepts.
    pub fn admit(&self, slot: Slot, address: IpAddr) -> Result<Pass, Refused> {
        self.pass(slot, address).ok_or(Refused::FromAddress {
            address,
            limit: self.limits.max_pending_per_address.max(1),
        })
    }

    /// Set-ups going on now from `address`.
    pub fn pending_from(&self, address: IpAddr) -> usize {
        let counts = self.per_address.lock_or_recover();
        counts.get(&address).copied().unwrap_or(0)
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut counts = self.per_address.lock_or_recover();
        if let Some(n) = counts.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_address_is_capped_and_places_come_back() {
        let gate = AcceptGate::new(AcceptLimits {
            max_pending: 3,
            max_pending_per_address: 2,
            handshakes_per_sec: None,
        });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let p1 = gate.pass(gate.slot().await.unwrap(), a).unwrap();
        let _p2 = gate.pass(gate.slot().await.unwrap(), a).unwrap();
        assert!(
            gate.pass(gate.slot().await.unwrap(), a).is_none(),
            "a third from a"
        );
        let _p3 = gate.pass(gate.slot().await.unwrap(), b).unwrap();
        assert_eq!(gate.pending_from(a), 2);
        // Every place is taken: the next waits until one comes back.
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.slot().await.unwrap() }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(p1);
        let slot = waiting.await.unwrap();
        assert_eq!(gate.pending_from(a), 1);
        assert!(gate.pass(slot, a).is_some());
    }

    #[tokio::test]
    async fn set_ups_beyond_the_rate_wait_for_their_turn() {
        let gate = AcceptGate::new(AcceptLimits {
            max_pending: 100,
            max_pending_per_address: 100,
            handshakes_per_sec: Some(10),
        });
        let why = gate.within_rate();
        assert!(why.is_ok());
        // The burst (one second's worth, less the token just taken) goes at once...
        let start = std::time::Instant::now();
        for _ in 0..9 {
            gate.turn().await;
        }
        assert_eq!(gate.within_rate(), Err(Refused::Rate { per_sec: 10 }));
        // ...then one turn every 100 ms: three more take at least 0.25 s.
        for _ in 0..3 {
            gate.turn().await;
        }
        assert!(
            start.elapsed() >= std::time::Duration::from_millis(250),
            "{:?}",
            start.elapsed()
        );
        // A gate with no rate never waits.
        let open = AcceptGate::new(AcceptLimits::default());
        let start = std::time::Instant::now();
        for _ in 0..1000 {
            open.turn().await;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }
}
