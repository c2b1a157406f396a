//! Delivery-rate sampling (the method of draft-cheng-iccrg-delivery-rate-estimation) from the
//! events quinn's controller trait provides: a send time per acknowledged packet, no packet
//! number.
//!
//! This module owns the per-send records and turns each acknowledgement into a
//! [`RateSample`]. It must not decide what to do with a sample (that is the controller's).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// At most this many send instants are remembered; the oldest go first (their packets were
/// lost, or acknowledged so late that their sample no longer matters).
const MAX_RECORDS: usize = 16 * 1024;

/// What the connection had delivered when a packet (or a burst sent at one instant) left.
#[derive(Debug, Clone, Copy)]
struct SendRecord {
    sent: Instant,
    delivered: u64,
    delivered_time: Instant,
    first_sent_time: Instant,
}

/// One delivery-rate measurement: `delivered` bytes were acknowledged over `interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSample {
    /// Bytes acknowledged between the acknowledged packet's send and now.
    pub delivered: u64,
    /// The longer of the send and the acknowledgement intervals.
    pub interval: Duration,
    /// Round-trip time of the acknowledged packet (send to acknowledgement).
    pub rtt: Duration,
    /// Bytes the connection had delivered when the packet was sent (rounds are counted on it).
    pub prior_delivered: u64,
}

impl RateSample {
    /// The rate in bytes per second (0 for an empty interval).
    ///
    /// ```
    /// use std::time::Duration;
    /// use agentwire_cc::RateSample;
    /// let s = RateSample { delivered: 1_000, interval: Duration::from_millis(10),
    ///                      rtt: Duration::from_millis(10), prior_delivered: 0 };
    /// assert_eq!(s.bytes_per_sec(), 100_000);
    /// ```
    pub fn bytes_per_sec(&self) -> u64 {
        let nanos = self.interval.as_nanos();
        if nanos == 0 {
            return 0;
        }
        u64::try_from(u128::from(self.delivered) * 1_000_000_000 / nanos).unwrap_or(u64::MAX)
    }
}

/// Per-connection delivery-rate state.
#[derive(Debug, Clone, Default)]
pub struct DeliveryRate {
    records: VecDeque<SendRecord>,
    delivered: u64,
    delivered_time: Option<Instant>,
    first_sent_time: Option<Instant>,
}

impl DeliveryRate {
    /// A packet left at `now`; `in_flight_before` is what was outstanding just before it.
    pub fn on_sent(&mut self, now: Instant, in_flight_before: u64) {
        if in_flight_before == 0 {
            // Restarting from idle: the interval starts now, not at the last acknowledgement.
            self.first_sent_time = Some(now);
            self.delivered_time = Some(now);
        }
        let first_sent_time = *self.first_sent_time.get_or_insert(now);
        let delivered_time = *self.delivered_time.get_or_insert(now);
        if self.records.back().is_some_and(|r| r.sent >= now) {
            // Same instant (a GSO batch): one record serves all of its packets.
            return;
        }
        if self.records.len() == MAX_RECORDS {
            self.records.pop_front();
        }
        self.records.push_back(SendRecord {
            sent: now,
            delivered: self.delivered,
            delivered_time,
            first_sent_time,
        });
    }

    /// `bytes` of a packet sent at `sent` were acknowledged at `now`. Returns a sample when the
    /// packet's send record is still known.
    pub fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64) -> Option<RateSample> {
        self.delivered = self.delivered.saturating_add(bytes);
        self.delivered_time = Some(now);
        let idx = self.records.partition_point(|r| r.sent < sent);
        let record = *self.records.get(idx).filter(|r| r.sent == sent)?;
        // Older records belong to packets acknowledged before or lost: drop them.
        self.records.drain(..idx);
        self.first_sent_time = Some(record.sent);
        let send_elapsed = record
            .sent
            .saturating_duration_since(record.first_sent_time);
        let ack_elapsed = now.saturating_duration_since(record.delivered_time);
        Some(RateSample {
            delivered: self.delivered.saturating_sub(record.delivered),
            interval: send_elapsed.max(ack_elapsed),
            rtt: now.saturating_duration_since(sent),
            prior_delivered: record.delivered,
        })
    }

    /// Bytes acknowledged so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_sending_measures_the_ack_rate() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = DeliveryRate::default();
        // One 1000-byte packet per ms, each acknowledged 10 ms later.
        let mut last = None;
        for i in 0..100u64 {
            let now = t0 + ms(i);
            if i >= 10 {
                last = d.on_ack(now, t0 + ms(i - 10), 1000);
            }
            d.on_sent(now, if i == 0 { 0 } else { 1000 });
        }
        let s = last.unwrap();
        assert_eq!(s.rtt, ms(10));
        // 1000 bytes per ms = 1 MB/s.
        assert!((990_000..=1_010_000).contains(&s.bytes_per_sec()), "{s:?}");
    }

    #[test]
    fn unknown_send_times_give_no_sample_but_count() {
        let t0 = Instant::now();
        let mut d = DeliveryRate::default();
        assert!(d.on_ack(t0 + Duration::from_millis(5), t0, 100).is_none());
        assert_eq!(d.delivered(), 100);
    }
}
