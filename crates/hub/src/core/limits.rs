//! Limits that hold under abuse: per-agent message and byte rates, connections per source
//! address, handshakes per second.
//!
//! Owns the token buckets and the per-address counts, on explicit time; the hub core asks it
//! when a connection opens ([`HubCore::open_from`]) and for every envelope. It must not do
//! I/O or read a clock. Every limit is off unless configured; each refusal is a clear error
//! with code `limit-exceeded` and a count in `agentwire_hub_dropped_messages_total` (messages)
//! or `agentwire_hub_errors_total` (connections).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

/// The limits (each `None` = off).
///
/// ```
/// use agentwire_hub::AbuseLimits;
/// let l = AbuseLimits { agent_messages_per_sec: Some(1000), ..AbuseLimits::default() };
/// assert!(l.agent_bytes_per_sec.is_none());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AbuseLimits {
    /// Envelopes one agent may send per second (bursts of one second's worth).
    pub agent_messages_per_sec: Option<u32>,
    /// Envelope bytes one agent may send per second (bursts of one second's worth, and at
    /// least one frame's worth).
    pub agent_bytes_per_sec: Option<u64>,
    /// Connections open at once from one IP address (Unix sockets have none and are not
    /// counted).
    pub connections_per_address: Option<usize>,
    /// New connections the hub accepts per second, all addresses together (bursts of one
    /// second's worth).
    pub handshakes_per_sec: Option<u32>,
}

pub(crate) use agentwire_transport::rate::Bucket;

/// One agent's buckets.
#[derive(Debug, Clone, Copy)]
pub(super) struct AgentRate {
    messages: Option<Bucket>,
    bytes: Option<Bucket>,
}

impl AgentRate {
    pub(super) fn new(limits: &AbuseLimits, max_frame: u32, now: Instant) -> Self {
        AgentRate {
            messages: limits
                .agent_messages_per_sec
                .map(|r| Bucket::new(f64::from(r), f64::from(r.max(1)), now)),
            bytes: limits.agent_bytes_per_sec.map(|r| {
                let burst = (r as f64).max(f64::from(max_frame));
                Bucket::new(r as f64, burst, now)
            }),
        }
    }

    /// Whether one more envelope of `len` bytes fits; a refusal names the limit.
    pub(super) fn admit(
        &mut self,
        len: usize,
        limits: &AbuseLimits,
        now: Instant,
    ) -> Result<(), String> {
        if let Some(b) = &mut self.messages {
            if !b.take(1.0, now) {
                let r = limits.agent_messages_per_sec.unwrap_or_default();
                return Err(format!("rate limit: {r} messages per second per agent"));
            }
        }
        if let Some(b) = &mut self.bytes {
            if !b.take(len as f64, now) {
                let r = limits.agent_bytes_per_sec.unwrap_or_default();
                return Err(format!("rate limit: {r} bytes per second per agent"));
            }
        }
        Ok(())
    }
}

/// Connections per address and the hub-wide handshake bucket.
#[derive(Debug, Default)]
pub(super) struct Admission {
    per_address: HashMap<IpAddr, usize>,
    handshakes: Option<Bucket>,
}

impl Admission {
    /// Counts a new connection from `remote`, or says why it is refused (and counts nothing).
    pub(super) fn open(
        &mut self,
        limits: &AbuseLimits,
        remote: Option<IpAddr>,
        now: Instant,
    ) -> Result<(), String> {
        if let Some(rate) = limits.handshakes_per_sec {
            let bucket = self
                .handshakes
                .get_or_insert_with(|| Bucket::new(f64::from(rate), f64::from(rate.max(1)), now));
            if !bucket.take(1.0, now) {
                return Err(format!(
                    "the hub accepts at most {rate} new connections per second"
                ));
            }
        }
        if let (Some(max), Some(ip)) = (limits.connections_per_address, remote) {
            let n = self.per_address.entry(ip).or_default();
            if *n >= max {
                return Err(format!("at most {max} connections from one address ({ip})"));
            }
            *n += 1;
        }
        Ok(())
    }

    /// A counted connection from `remote` ended.
    pub(super) fn close(&mut self, remote: IpAddr) {
        if let Some(n) = self.per_address.get_mut(&remote) {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&remote);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst() {
        let t0 = Instant::now();
        let mut b = Bucket::new(10.0, 10.0, t0);
        for _ in 0..10 {
            assert!(b.take(1.0, t0));
        }
        assert!(!b.take(1.0, t0));
        assert!(b.take(1.0, t0 + Duration::from_millis(100)));
        assert!(!b.take(1.0, t0 + Duration::from_millis(100)));
        // A long pause refills only the burst.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..10 {
            assert!(b.take(1.0, later));
        }
        assert!(!b.take(1.0, later));
    }

    #[test]
    fn addresses_are_counted_until_their_connections_end() {
        let limits = AbuseLimits {
            connections_per_address: Some(2),
            ..AbuseLimits::default()
        };
        let mut a = Admission::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let other: IpAddr = "127.0.0.2".parse().unwrap();
        let now = Instant::now();
        assert!(a.open(&limits, Some(ip), now).is_ok());
        assert!(a.open(&limits, Some(ip), now).is_ok());
        assert!(a
            .open(&limits, Some(ip), now)
            .unwrap_err()
            .contains("at most 2"));
        assert!(a.open(&limits, Some(other), now).is_ok());
        assert!(
            a.open(&limits, None, now).is_ok(),
            "Unix sockets are not counted"
        );
        a.close(ip);
        assert!(a.open(&limits, Some(ip), now).is_ok());
    }
}
