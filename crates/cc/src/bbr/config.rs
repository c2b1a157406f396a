//! The settings of a [`Bbr`](super::Bbr) controller and their defaults, each with the
//! measurement or the BBRv3 rule behind it.
//!
//! This module owns the knobs; it must not keep state.

use std::time::Duration;

/// Settings of a [`Bbr`] controller.
///
/// ```
/// use agentwire_cc::BbrConfig;
/// let c = BbrConfig::default();
/// assert_eq!(c.cruise_gain, 1.5);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BbrConfig {
    /// Window before any measurement, bytes.
    pub initial_window: u64,
    /// Window gain in Startup (the window also grows by every acknowledged byte).
    pub startup_gain: f64,
    /// Window gain while cruising in ProbeBW. BBRv1 keeps 2 (a standing queue of one BDP in a
    /// deep buffer); 1.5 halves that queue at the same goodput in the simulated matrix.
    pub cruise_gain: f64,
    /// Window gain of the round that probes for more bandwidth.
    pub up_gain: f64,
    /// Window gain of the round that drains the queue the probe built.
    pub down_gain: f64,
    /// Share of the bandwidth-delay product kept during ProbeRTT (BBRv3: 0.5).
    pub probe_rtt_gain: f64,
    /// An RTT sample shows a queue when it exceeds the minimum RTT by this share (or by
    /// `queue_floor`, whichever is larger).
    pub queue_share: f64,
    /// A lossy round's losses count as congestion when at least this share of its RTT
    /// samples showed a queue (see `queue_share`). 1 asks every sample (the round's smallest
    /// RTT) to show one; lower shares see a shallow buffer filling, at the risk of taking a
    /// busy host's late acknowledgements for a queue.
    pub queue_quantile: f64,
    /// See `queue_share`.
    pub queue_floor: Duration,
    /// Pacing headroom for a sender the model's window does not bind (requests and replies
    /// rather than bulk): while nothing in flight exceeded the model's window in this round and
    /// the previous one, the window quinn sees is this multiple of the largest amount in flight
    /// in the bandwidth window, if that is larger. quinn paces at 1.25 × window / smoothed RTT
    /// with bursts of 2 ms worth of window, so a window near the model's spreads a burst of
    /// requests over much of a round trip; the headroom lets it leave promptly. The first send
    /// beyond the model's window switches it off for that round and the next, so in flight
    /// stays bounded by the model (give or take one send) and the model itself never changes.
    /// 0 turns it off.
    pub app_headroom: f64,
    /// The window quinn sees is at least this multiple of (the model's pacing rate × the
    /// smoothed RTT), outside ProbeRTT. quinn has no pacing rate from its controller: it paces
    /// at 1.25 × window / smoothed RTT. The model's window is sized on the *minimum* RTT, so
    /// where the smoothed RTT is far above it for reasons the model does not own (a busy host:
    /// 0.1 ms minimum, 20 to 40 ms smoothed on a loaded loopback) the pacer ran at a fraction
    /// of the bandwidth the model measured, and connections starved one another (p99 3x
    /// cubic's in the bench's 100 × 10 KiB loopback cell). With this window the sending rate
    /// is bounded by BBR's own pacing rate (bandwidth × 1.25 in the probing round, × 1 while
    /// cruising, below 1 while draining) rather than by the inflated RTT, so it adds no queue
    /// of its own at the bottleneck. 0 turns it off.
    pub rate_window: f64,
    /// How long ProbeBW cruises between two bandwidth probes (plus up to a second of jitter;
    /// BBRv3 waits 2 to 3 s), unless the rounds of `cruise_rounds_per_packet` pass first
    /// (BBRv3: 1 per packet the bandwidth-delay product holds, at most 63). A probe raises the loss bound and takes bandwidth other flows
    /// left free; probing every 8 rounds took it from loss-based flows in shallow buffers
    /// (cubic needs seconds to regrow its window after a loss). With a wait, the bandwidth
    /// estimate is the largest of the last two probe cycles (BBRv3's `bw_hi`) instead of the
    /// last ten rounds. Zero (the default): no wait. With 2 s, beside cubic in a
    /// 0.25-BDP buffer at 50 ms bbr3's share fell from 2.4x to 1.5x at 100 Mbit/s but from
    /// 0.52x to 0.41x at 20 Mbit/s (medians of five real runs, with 1 round per packet), and
    /// the bench's priority probe stalled in two rounds of six
    /// (docs/benchmarks/2026-11-26-probe-wait).
    pub probe_wait: Duration,
    /// Cruising between two probes lasts this many rounds per packet the bandwidth-delay
    /// product holds (at least 6 rounds, at most 63; BBRv3's bound is 1 per packet). With the
    /// default, 1/8, a path of 48 packets or fewer (loopback, and most LAN paths) is probed
    /// every 8 rounds as before, 20 Mbit/s at 50 ms (86 packets of 1,452 bytes) every 12
    /// rounds and 100 Mbit/s at 50 ms (430 packets) every 55, about 2.7 s: a loss-based flow
    /// regrows its window in about as many rounds as the path holds packets, so the wait
    /// grows with the path where probing every 8 rounds crowded it out. Beside cubic in a 0.25-BDP buffer at 50 ms bbr3's share
    /// went from 2.93x to 1.10x at 100 Mbit/s and from 0.40x to 0.67x at 20 Mbit/s (medians
    /// of three interleaved rounds, docs/benchmarks/2026-11-26-probe-wait). 0: a probe every
    /// 8 rounds. Cruises longer than 6 rounds keep the bandwidth estimate over the last two
    /// probe cycles, as with `probe_wait`.
    pub cruise_rounds_per_packet: f64,
    /// BBRv3's short-term model: a round counted as congestion also lowers a bandwidth bound
    /// (`bw_lo`, to the round's largest delivery rate or 0.7 of the bound, whichever is
    /// larger) and an in-flight bound (`inflight_lo`, likewise with what the round
    /// delivered); both are forgotten when the next probe starts. They make a flow give way
    /// within a round or two of a lossy queue, where `inflight_hi` alone stops at 0.7 BDP of
    /// the bandwidth the flow once had to itself. Off by default: with a 2 s `probe_wait`,
    /// beside cubic in a 0.25-BDP buffer at 20 Mbit/s and 50 ms it left bbr3 0.27-0.29x
    /// cubic's share, and a single flow in that buffer 0.59 of the bottleneck in the
    /// simulation (docs/benchmarks/2026-11-26-probe-wait).
    pub short_term: bool,
}

impl Default for BbrConfig {
    fn default() -> Self {
        BbrConfig {
            // quinn's own default: ten packets of 1,472 bytes.
            initial_window: 14_720,
            startup_gain: 2.885,
            cruise_gain: 1.5,
            up_gain: 2.5,
            down_gain: 1.0,
            probe_rtt_gain: 0.5,
            queue_share: 0.125,
            queue_floor: Duration::from_micros(500),
            queue_quantile: 0.5,
            app_headroom: 16.0,
            rate_window: 0.9,
            probe_wait: Duration::ZERO,
            cruise_rounds_per_packet: 0.125,
            short_term: false,
        }
    }
}
