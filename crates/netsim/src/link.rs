//! The per-direction impairment state machine.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Error, Impairment, JitterDist, Time};

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Converts nanoseconds to a [`Duration`], saturating at [`Duration::MAX`]-ish values.
pub(crate) fn duration_from_ns(ns: u128) -> Duration {
    let secs = ns / NANOS_PER_SEC;
    if secs > u64::MAX as u128 {
        return Duration::MAX;
    }
    Duration::new(secs as u64, (ns % NANOS_PER_SEC) as u32)
}

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Random loss: Bernoulli [`loss`](Impairment::loss) or
    /// [Gilbert–Elliott](Impairment::gilbert_elliott).
    Loss,
    /// The drop-tail queue in front of the rate-limited bottleneck was full.
    QueueFull,
}

/// What [`Link::push`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The packet will depart at `departure`; if `duplicated`, a copy departs too (at
    /// `departure + duplicate_delay`).
    Queued {
        /// When the packet will be returned by [`Link::poll_departure`].
        departure: Time,
        /// Whether a duplicate copy was scheduled as well.
        duplicated: bool,
    },
    /// The packet was dropped and will never depart.
    Dropped(DropReason),
}

/// Counters of one [`Link`]. Packets are conserved:
/// `packets_in + duplicated == packets_out + dropped_loss + dropped_queue_full + in_flight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Stats {
    /// Packets pushed.
    pub packets_in: u64,
    /// Bytes pushed.
    pub bytes_in: u64,
    /// Packets returned by [`Link::poll_departure`] (duplicates included).
    pub packets_out: u64,
    /// Bytes returned by [`Link::poll_departure`] (duplicates included).
    pub bytes_out: u64,
    /// Packets dropped by random or bursty loss.
    pub dropped_loss: u64,
    /// Packets dropped because the queue was full.
    pub dropped_queue_full: u64,
    /// Bytes dropped for either reason.
    pub bytes_dropped: u64,
    /// Duplicate copies scheduled.
    pub duplicated: u64,
    /// Packets held back by the reorder delay.
    pub reordered: u64,
    /// Packets (and copies) scheduled but not yet departed.
    pub in_flight: u64,
    /// Bytes in the bottleneck queue (not fully serialized) as of the last `push`/`poll`.
    pub queue_bytes: u64,
    /// High-water mark of [`queue_bytes`](Self::queue_bytes).
    pub max_queue_bytes: u64,
}

impl Stats {
    /// Total packets dropped, for any reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_loss + self.dropped_queue_full
    }
}

struct Scheduled<P> {
    departure: Time,
    seq: u64,
    size: usize,
    packet: P,
}

impl<P> PartialEq for Scheduled<P> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<P> Eq for Scheduled<P> {}
impl<P> PartialOrd for Scheduled<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<P> Ord for Scheduled<P> {
    // Reversed so that `BinaryHeap` (a max-heap) pops the earliest departure, ties by push order.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.departure, other.seq).cmp(&(self.departure, self.seq))
    }
}

/// One direction of an emulated network path, generic over the payload type `P`.
///
/// Sans-IO: the caller passes the current [`Time`] in, pushes packets, arms a timer for
/// [`next_departure`](Self::next_departure) and drains [`poll_departure`](Self::poll_departure).
/// Randomness comes from a ChaCha8 generator seeded with [`Link::new`]'s `seed`.
///
/// ```
/// use std::time::Duration;
/// use agentwire_netsim::{Impairment, Link, Verdict};
///
/// // 10 Mbit/s: a 1500-byte packet takes 1.2 ms to serialize.
/// let imp = Impairment { rate_bps: Some(10_000_000), ..Impairment::default() };
/// let mut link = Link::new(imp, 7).unwrap();
/// let now = Duration::ZERO;
/// link.push(now, 1u32, 1500);
/// link.push(now, 2u32, 1500);
/// assert_eq!(link.next_departure(), Some(Duration::from_micros(1200)));
/// assert_eq!(link.poll_departure(Duration::from_micros(2400)), Some(1));
/// assert_eq!(link.poll_departure(Duration::from_micros(2400)), Some(2));
/// assert_eq!(link.stats().packets_out, 2);
/// ```
pub struct Link<P> {
    imp: Impairment,
    queue_limit: Option<u64>,
    rng: ChaCha8Rng,
    /// When the serializer finishes the last accepted packet.
    link_free_at: Time,
    /// Sub-nanosecond remainder of serialization times (numerator over `rate`), so that
    /// back-to-back packets keep the exact long-run rate.
    ser_remainder: u128,
    /// (serialization end, size) of packets not yet fully serialized.
    backlog: VecDeque<(Time, usize)>,
    backlog_bytes: u64,
    last_fifo_departure: Time,
    ge_bad: bool,
    scheduled: BinaryHeap<Scheduled<P>>,
    seq: u64,
    stats: Stats,
}

impl<P> std::fmt::Debug for Link<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("impairment", &self.imp)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<P> Link<P> {
    /// Creates a link applying `impairment`, with all randomness drawn from
    /// `ChaCha8Rng::seed_from_u64(seed)`. Fails if the impairment does not
    /// [validate](Impairment::validate).
    pub fn new(impairment: Impairment, seed: u64) -> Result<Self, Error> {
        impairment.validate()?;
        Ok(Self {
            queue_limit: impairment.queue_limit_bytes(),
            imp: impairment,
            rng: ChaCha8Rng::seed_from_u64(seed),
            link_free_at: Duration::ZERO,
            ser_remainder: 0,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            last_fifo_departure: Duration::ZERO,
            ge_bad: false,
            scheduled: BinaryHeap::new(),
            seq: 0,
            stats: Stats::default(),
        })
    }

    /// The impairment this link applies.
    pub fn impairment(&self) -> &Impairment {
        &self.imp
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The earliest scheduled departure, if any packet is in flight: the I/O layer's next
    /// timer deadline.
    pub fn next_departure(&self) -> Option<Time> {
        self.scheduled.peek().map(|s| s.departure)
    }

    /// Returns the next packet whose departure time is `<= now`, in departure order (ties in
    /// push order), or `None` if nothing is due yet. Call repeatedly until `None`.
    pub fn poll_departure(&mut self, now: Time) -> Option<P> {
        self.drain_backlog(now);
        if self.scheduled.peek()?.departure > now {
            return None;
        }
        let s = self.scheduled.pop()?;
        self.stats.packets_out += 1;
        self.stats.bytes_out += s.size as u64;
        self.stats.in_flight -= 1;
        Some(s.packet)
    }

    /// Removes packets whose serialization finished by `now` from the queue accounting.
    fn drain_backlog(&mut self, now: Time) {
        while let Some(&(end, size)) = self.backlog.front() {
            if end > now {
                break;
            }
            self.backlog.pop_front();
            self.backlog_bytes -= size as u64;
        }
        self.stats.queue_bytes = self.backlog_bytes;
    }

    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            false
        } else if p >= 1.0 {
            true
        } else {
            self.rng.gen::<f64>() < p
        }
    }

    /// Random and bursty loss decision for one packet.
    fn lost(&mut self) -> bool {
        let mut lost = self.chance(self.imp.loss);
        if let Some(ge) = self.imp.gilbert_elliott {
            let p_loss = if self.ge_bad {
                ge.loss_bad
            } else {
                ge.loss_good
            };
            // Always evaluate the GE chain so its state evolves independently of Bernoulli loss.
            lost |= self.chance(p_loss);
            self.ge_bad = if self.ge_bad {
                !self.chance(ge.r)
            } else {
                self.chance(ge.p)
            };
        }
        lost
    }

    /// Signed jitter offset in nanoseconds.
    fn jitter_ns(&mut self) -> f64 {
        let j = self.imp.jitter.as_nanos() as f64;
        if j == 0.0 {
            return 0.0;
        }
        match self.imp.jitter_dist {
            JitterDist::Uniform => (self.rng.gen::<f64>() * 2.0 - 1.0) * j,
            JitterDist::Normal => {
                // Box–Muller; u1 in (0, 1] so ln(u1) is finite.
                let u1 = 1.0 - self.rng.gen::<f64>();
                let u2 = self.rng.gen::<f64>();
                (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos() * j
            }
        }
    }

    /// Departure of the last bit from the bottleneck for a packet arriving at `now`, or `None`
    /// if the drop-tail queue is full.
    fn serialize(&mut self, now: Time, size: usize) -> Option<Time> {
        let Some(rate) = self.imp.rate_bps else {
            return Some(now);
        };
        self.drain_backlog(now);
        if let Some(limit) = self.queue_limit {
            if self.backlog_bytes > 0 && self.backlog_bytes.saturating_add(size as u64) > limit {
                return None;
            }
        }
        let start = if self.link_free_at > now {
            self.link_free_at
        } else {
            self.ser_remainder = 0; // link was idle: start a fresh serialization phase
            now
        };
        let num = size as u128 * 8 * NANOS_PER_SEC + self.ser_remainder;
        let rate = rate as u128;
        self.ser_remainder = num % rate;
        let end = start.saturating_add(duration_from_ns(num / rate));
        self.link_free_at = end;
        self.backlog.push_back((end, size));
        self.backlog_bytes += size as u64;
        self.stats.queue_bytes = self.backlog_bytes;
        self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(self.backlog_bytes);
        Some(end)
    }

    fn schedule(&mut self, departure: Time, size: usize, packet: P) {
        self.scheduled.push(Scheduled {
            departure,
            seq: self.seq,
            size,
            packet,
        });
        self.seq += 1;
        self.stats.in_flight += 1;
    }
}

impl<P: Clone> Link<P> {
    /// Offers a packet of `size_bytes` to the link at time `now` and returns its fate.
    ///
    /// `now` should not go backwards between calls; if it does nothing panics, but the
    /// rate-limit and FIFO bookkeeping treat the earlier time as already past.
    /// `P: Clone` is needed to schedule duplicates.
    pub fn push(&mut self, now: Time, packet: P, size_bytes: usize) -> Verdict {
        self.stats.packets_in += 1;
        self.stats.bytes_in += size_bytes as u64;

        if self.lost() {
            self.stats.dropped_loss += 1;
            self.stats.bytes_dropped += size_bytes as u64;
            return Verdict::Dropped(DropReason::Loss);
        }
        let Some(serialized) = self.serialize(now, size_bytes) else {
            self.stats.dropped_queue_full += 1;
            self.stats.bytes_dropped += size_bytes as u64;
            return Verdict::Dropped(DropReason::QueueFull);
        };

        let delayed = serialized.saturating_add(self.imp.delay);
        let jitter = self.jitter_ns();
        let mut departure = if jitter >= 0.0 {
            delayed.saturating_add(duration_from_ns(jitter.round() as u128))
        } else {
            // Clamp so the total extra delay (delay + jitter) is never negative.
            delayed
                .saturating_sub(duration_from_ns((-jitter).round() as u128))
                .max(serialized)
        };
        if !self.imp.jitter_reorders {
            departure = departure.max(self.last_fifo_departure);
            self.last_fifo_departure = departure;
        }
        if self.chance(self.imp.reorder) {
            departure = departure.saturating_add(self.imp.reorder_delay);
            self.stats.reordered += 1;
        }
        let duplicated = self.chance(self.imp.duplicate);
        if duplicated {
            let copy = packet.clone();
            self.schedule(departure, size_bytes, packet);
            let dup_at = departure.saturating_add(self.imp.duplicate_delay);
            self.schedule(dup_at, size_bytes, copy);
            self.stats.duplicated += 1;
        } else {
            self.schedule(departure, size_bytes, packet);
        }
        Verdict::Queued {
            departure,
            duplicated,
        }
    }
}

/// Both directions of an emulated path: `forward` (A → B) and `reverse` (B → A), each an
/// independent [`Link`] with its own seeded generator.
///
/// ```
/// use agentwire_netsim::{Path, Spec};
///
/// let spec: Spec = "delay=10ms,loss=1%".parse().unwrap();
/// let mut path: Path<Vec<u8>> = Path::symmetric(spec.impairment, spec.seed.unwrap_or(0)).unwrap();
/// path.forward.push(std::time::Duration::ZERO, vec![1, 2, 3], 3);
/// assert_eq!(path.reverse.stats().packets_in, 0);
/// ```
#[derive(Debug)]
pub struct Path<P> {
    /// A → B.
    pub forward: Link<P>,
    /// B → A.
    pub reverse: Link<P>,
}

impl<P> Path<P> {
    /// Seed offset of the reverse direction, so both directions draw independent streams.
    const REVERSE_SEED_XOR: u64 = 0x9E37_79B9_7F4A_7C15;

    /// A path with possibly different impairments per direction. The forward link is seeded
    /// with `seed`, the reverse with a fixed derivation of it.
    pub fn new(forward: Impairment, reverse: Impairment, seed: u64) -> Result<Self, Error> {
        Ok(Self {
            forward: Link::new(forward, seed)?,
            reverse: Link::new(reverse, seed ^ Self::REVERSE_SEED_XOR)?,
        })
    }

    /// A path with the same impairment in both directions (independent randomness).
    pub fn symmetric(impairment: Impairment, seed: u64) -> Result<Self, Error> {
        Self::new(impairment.clone(), impairment, seed)
    }
}
