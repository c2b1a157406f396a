//! `Bbr`: a BBR-class congestion controller (after BBRv3) as a sans-IO state machine.
//!
//! It models the path from what acknowledgements show (the bottleneck bandwidth, a windowed
//! maximum of delivery-rate samples; the minimum RTT), and keeps about 1.5 bandwidth-delay
//! products in flight. Unlike quinn's BBRv1 it bounds what it sends by loss, as BBRv3 does
//! (`inflight_hi`, cut by 30 % after a round with more than 2 % loss, but not below 0.7
//! bandwidth-delay products) — but only when at least half of that round's RTT samples
//! show a queue (`BbrConfig::queue_quantile`). Loss at the base RTT is noise on the path
//! (radio, a lossy link), not a full buffer, and costs nothing; loss with a queue is
//! congestion, and gives way to other flows and keeps shallow buffers from overflowing.
//!
//! It probes for more bandwidth after cruising one round per 8 packets the path holds (at
//! least 6 rounds, at most 63: `BbrConfig::cruise_rounds_per_packet`), so that on long fat
//! paths it leaves a loss-based flow time to regrow its window. BBRv3 waits 2 to 3 s between
//! probes (or one round per packet, at most 63); `BbrConfig::probe_wait` does that, and
//! `BbrConfig::short_term` adds BBRv3's short-term bounds (`bw_lo`, `inflight_lo`). Both are
//! off by default: measured, they left bbr3 under half of cubic's share at 20 Mbit/s, and the
//! wait stalled bulk behind a loss bound that only regrows when a probe comes.
//!
//! quinn paces at 1.25 × window / smoothed RTT, so the window is this controller's only lever:
//! each phase has a window gain instead of a pacing gain.
//!
//! This module owns the model and the window. It must not do I/O or read a clock: every event
//! carries `now`. The [`quinn_proto::congestion::Controller`] implementation is in
//! `crate::quinn`.

use std::time::{Duration, Instant};

mod config;
mod state;

pub use config::BbrConfig;
pub use state::{BbrState, Mode, Phase};

use crate::filter::WindowedMax;
use crate::rate::{DeliveryRate, RateSample};

/// Rounds the bandwidth filter remembers when every ProbeBW cycle is 8 rounds (a cycle and
/// then some); otherwise it remembers two probe cycles.
const BW_WINDOW_ROUNDS: u64 = 10;
/// How long a minimum RTT stays valid before it must be measured again (ProbeRTT).
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// Time spent at the reduced ProbeRTT window.
const PROBE_RTT_DURATION: Duration = Duration::from_millis(200);
/// Startup ends when the bandwidth grew less than this factor in `FULL_BW_ROUNDS` rounds.
const FULL_BW_GROWTH: f64 = 1.25;
const FULL_BW_ROUNDS: u32 = 3;
/// BBRv3's loss threshold: more than 2 % of a round's bytes lost.
const LOSS_THRESHOLD: f64 = 0.02;
/// BBRv3's multiplicative decrease of `inflight_hi`.
const BETA: f64 = 0.7;
/// The ack-aggregation allowance covers at most this much time at the estimated bandwidth
/// (Linux BBR's `bbr_extra_acked_max_us`).
const MAX_EXTRA_ACKED: Duration = Duration::from_millis(100);
/// Minimum window, in packets.
const MIN_WINDOW_PACKETS: u64 = 4;

/// Cruising lasts at least this many rounds between two bandwidth probes (on short paths
/// exactly this many: a probe every 8 rounds).
const MIN_CRUISE_ROUNDS: u64 = 6;
/// BBRv3's "Reno coexistence" bound: a probe comes at the latest after as many rounds as the
/// bandwidth-delay product has packets, but never more than this many.
const MAX_CRUISE_ROUNDS: u64 = 63;
/// With `BbrConfig::probe_wait`, a random share of this is added to each wait, so that flows
/// sharing a bottleneck do not probe in step.
const PROBE_WAIT_JITTER: Duration = Duration::from_secs(1);

/// Per-round loss and delay accounting.
#[derive(Debug, Clone, Copy, Default)]
struct RoundStats {
    delivered: u64,
    lost: u64,
    ecn: bool,
    /// RTT samples taken in the round.
    samples: u32,
    /// Of those, the samples that showed a queue.
    queued: u32,
    /// The largest delivery rate sampled in the round, bytes per second.
    max_rate: u64,
}

/// Where ProbeBW's cruise stands: when it started, how many rounds it has lasted and how long
/// it waits before the next probe.
#[derive(Debug, Clone, Copy, Default)]
struct Cruise {
    start: Option<Instant>,
    rounds: u64,
    wait: Duration,
}

/// Whether ProbeBW cycles may last longer than 8 rounds (`BbrConfig::probe_wait`,
/// `BbrConfig::cruise_rounds_per_packet`): then the bandwidth filter spans two cycles.
fn long_cycles(config: &BbrConfig) -> bool {
    !config.probe_wait.is_zero() || config.cruise_rounds_per_packet > 0.0
}

/// A BBR-class congestion controller.
///
/// Feed it the events of a connection (in the order they happen, each with its time) and
/// ask for the [`window`](Bbr::window).
///
/// ```
/// use std::time::{Duration, Instant};
/// use agentwire_cc::{Bbr, BbrConfig, Mode};
///
/// let t0 = Instant::now();
/// let mut bbr = Bbr::new(BbrConfig::default(), 1200);
/// assert_eq!(bbr.state().mode, Mode::Startup);
/// bbr.on_sent(t0, 1200);
/// let t1 = t0 + Duration::from_millis(20);
/// bbr.on_ack(t1, t0, 1200, false);
/// bbr.on_end_acks(t1, 0, false);
/// assert_eq!(bbr.state().min_rtt, Some(Duration::from_millis(20)));
/// assert!(bbr.window() > BbrConfig::default().initial_window); // slow-start growth
/// ```
#[derive(Debug, Clone)]
pub struct Bbr {
    config: BbrConfig,
    mtu: u64,
    mode: Mode,
    cruise: Cruise,
    /// Probes started (the bandwidth filter's clock when `probe_wait` is set).
    probes: u64,
    /// The short-term bounds (`BbrConfig::short_term`; `u64::MAX` when none).
    bw_lo: u64,
    inflight_lo: u64,
    window: u64,
    in_flight: u64,
    rate: DeliveryRate,
    bandwidth: WindowedMax,
    /// The sample of the newest packet acknowledged in the current batch.
    batch_sample: Option<RateSample>,
    batch_acked: u64,
    min_rtt: Option<Duration>,
    min_rtt_stamp: Option<Instant>,
    /// The connection's smoothed RTT, as its pacer uses it (for `rate_window`).
    smoothed_rtt: Option<Duration>,
    round_count: u64,
    next_round_delivered: u64,
    round_start: bool,
    round: RoundStats,
    full_bw: u64,
    full_bw_rounds: u32,
    filled_pipe: bool,
    inflight_hi: u64,
    probe_growth: u64,
    probe_rtt_done: Option<Instant>,
    probe_rtt_round_done: bool,
    /// Ack aggregation: bytes acknowledged beyond what the bandwidth explains.
    extra_acked: WindowedMax,
    ack_epoch_start: Option<Instant>,
    ack_epoch_acked: u64,
    /// The largest amount in flight right after a send, per round (for `app_headroom`).
    peak_in_flight: WindowedMax,
    /// The last round in which something sent took in flight beyond the model's window.
    window_bound_round: Option<u64>,
}

impl Bbr {
    /// A controller for a path whose current MTU is `mtu` bytes.
    pub fn new(config: BbrConfig, mtu: u16) -> Self {
        let mtu = u64::from(mtu).max(1200);
        let window = config.initial_window.max(MIN_WINDOW_PACKETS * mtu);
        let bw_window = if long_cycles(&config) {
            2
        } else {
            BW_WINDOW_ROUNDS
        };
        Bbr {
            config,
            mtu,
            mode: Mode::Startup,
            cruise: Cruise::default(),
            probes: 0,
            bw_lo: u64::MAX,
            inflight_lo: u64::MAX,
            window,
            in_flight: 0,
            rate: DeliveryRate::default(),
            bandwidth: WindowedMax::new(bw_window),
            batch_sample: None,
            batch_acked: 0,
            min_rtt: None,
            min_rtt_stamp: None,
            smoothed_rtt: None,
            round_count: 0,
            next_round_delivered: 0,
            round_start: false,
            round: RoundStats::default(),
            full_bw: 0,
            full_bw_rounds: 0,
            filled_pipe: false,
            inflight_hi: u64::MAX,
            probe_growth: 0,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            extra_acked: WindowedMax::new(BW_WINDOW_ROUNDS),
            ack_epoch_start: None,
            ack_epoch_acked: 0,
            peak_in_flight: WindowedMax::new(BW_WINDOW_ROUNDS),
            window_bound_round: None,
        }
    }

    /// The number of bytes that may be in flight: the model's window, or the burst headroom
    /// of an application-limited sender where that is larger (see
    /// [`BbrConfig::app_headroom`]; it never changes the model's own window).
    pub fn window(&self) -> u64 {
        let extra = self.app_headroom().max(self.rate_window());
        self.window
            .max(extra.min(self.inflight_hi).min(self.inflight_lo))
    }

    /// The connection's pacer now uses `srtt` as its smoothed RTT (quinn paces at 1.25 ×
    /// window / smoothed RTT; see [`BbrConfig::rate_window`]).
    pub fn on_smoothed_rtt(&mut self, srtt: Duration) {
        self.smoothed_rtt = Some(srtt);
    }

    /// The window the controller started with.
    pub fn initial_window(&self) -> u64 {
        self.config.initial_window.max(self.min_window())
    }

    /// The pacing rate the model implies, bytes per second: the bandwidth estimate times the
    /// mode's pacing gain (`None` before a measurement).
    pub fn pacing_rate(&self) -> Option<u64> {
        let bw = self.bw();
        (bw > 0).then(|| (bw as f64 * self.pacing_gain()) as u64)
    }

    /// What the controller believes now.
    pub fn state(&self) -> BbrState {
        BbrState {
            mode: self.mode,
            bandwidth: self.bw(),
            min_rtt: self.min_rtt,
            window: self.window(),
            model_window: self.window,
            inflight_hi: self.inflight_hi,
            rounds: self.round_count,
        }
    }

    /// `bytes` were sent at `now`.
    pub fn on_sent(&mut self, now: Instant, bytes: u64) {
        self.rate.on_sent(now, self.in_flight);
        self.in_flight = self.in_flight.saturating_add(bytes);
        self.peak_in_flight.update(self.round_count, self.in_flight);
        if self.in_flight > self.window {
            self.window_bound_round = Some(self.round_count);
        }
    }

    /// A packet of `bytes`, sent at `sent`, was acknowledged at `now`. `app_limited`: the
    /// sender had nothing more to send before this acknowledgement.
    pub fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool) {
        let _ = app_limited; // used once per batch, in on_end_acks
        self.in_flight = self.in_flight.saturating_sub(bytes);
        self.batch_acked = self.batch_acked.saturating_add(bytes);
        self.round.delivered = self.round.delivered.saturating_add(bytes);
        let Some(sample) = self.rate.on_ack(now, sent, bytes) else {
            return;
        };
        self.round.samples = self.round.samples.saturating_add(1);
        if self.shows_queue(sample.rtt) {
            self.round.queued = self.round.queued.saturating_add(1);
        }
        if sample.prior_delivered >= self.next_round_delivered {
            self.next_round_delivered = self.rate.delivered();
            self.round_start = true;
        }
        self.batch_sample = Some(sample);
    }

    /// The acknowledgements of one ACK frame have all been passed; `in_flight` is what the
    /// connection still has outstanding.
    pub fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool) {
        self.in_flight = in_flight;
        let acked = std::mem::take(&mut self.batch_acked);
        if let Some(sample) = self.batch_sample.take() {
            self.update_min_rtt(now, sample.rtt);
            // A sample over less than a minimum RTT comes from ack compression: too high.
            let valid = self.min_rtt.is_none_or(|m| sample.interval >= m);
            let bw = sample.bytes_per_sec();
            if valid && (!app_limited || bw >= self.bandwidth.get()) {
                self.bandwidth.update(self.bw_clock(), bw);
            }
            if valid {
                self.round.max_rate = self.round.max_rate.max(bw);
            }
        }
        if std::mem::take(&mut self.round_start) {
            self.end_round(now, app_limited);
        }
        self.update_ack_aggregation(now, acked);
        self.update_probe_rtt(now);
        if self.mode == Mode::Drain && self.in_flight <= self.bdp(1.0) {
            self.start_cruise(now);
        }
        self.update_window(acked, app_limited);
    }

    /// Packets were declared lost (`lost_bytes`, 0 for an ECN congestion mark); the newest
    /// was sent at `sent`. `persistent`: everything sent over a period was lost.
    pub fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent: bool,
        lost_bytes: u64,
    ) {
        let _ = (now, sent);
        self.in_flight = self.in_flight.saturating_sub(lost_bytes);
        self.round.lost = self.round.lost.saturating_add(lost_bytes);
        if lost_bytes == 0 {
            self.round.ecn = true;
        }
        if persistent {
            // The path went away (or everything queued was dropped): restart from the floor
            // and let the model regrow the window.
            self.window = self.min_window();
            self.probe_growth = 0;
            self.peak_in_flight.reset();
            self.window_bound_round = Some(self.round_count);
        }
    }

    /// The path MTU changed.
    pub fn on_mtu_update(&mut self, mtu: u16) {
        self.mtu = u64::from(mtu).max(1200);
        self.window = self.window.max(self.min_window());
    }

    fn min_window(&self) -> u64 {
        MIN_WINDOW_PACKETS * self.mtu
    }

    fn update_min_rtt(&mut self, now: Instant, rtt: Duration) {
        let expired = self
            .min_rtt_stamp
            .is_some_and(|t| now.saturating_duration_since(t) > MIN_RTT_WINDOW);
        if self.min_rtt.is_none_or(|m| rtt <= m) || expired {
            self.min_rtt = Some(rtt);
            self.min_rtt_stamp = Some(now);
        }
        if expired && self.mode != Mode::ProbeRtt {
            self.mode = Mode::ProbeRtt;
            self.probe_rtt_done = None;
            self.probe_rtt_round_done = false;
        }
    }

    fn update_probe_rtt(&mut self, now: Instant) {
        if self.mode != Mode::ProbeRtt {
            return;
        }
        match self.probe_rtt_done {
            None if self.in_flight <= self.probe_rtt_window() => {
                self.probe_rtt_done = Some(now + PROBE_RTT_DURATION);
                self.probe_rtt_round_done = false;
                self.next_round_delivered = self.rate.delivered();
            }
            Some(done) if self.probe_rtt_round_done && now >= done => {
                self.min_rtt_stamp = Some(now);
                if self.filled_pipe {
                    self.start_cruise(now);
                } else {
                    self.mode = Mode::Startup;
                }
            }
            _ => {}
        }
    }

    /// What a round just ended tells: loss, bandwidth growth, the next phase.
    fn end_round(&mut self, now: Instant, app_limited: bool) {
        self.round_count += 1;
        if self.mode == Mode::ProbeRtt && self.probe_rtt_done.is_some() {
            self.probe_rtt_round_done = true;
        }
        let round = std::mem::take(&mut self.round);
        let congested = self.round_was_congested(&round);
        if congested {
            if self.mode == Mode::Startup {
                // The pipe is full: remember what it held, and drain.
                self.inflight_hi = self.bdp(1.0).max(round.delivered).max(self.min_window());
                self.enter_drain();
            } else {
                if self.config.short_term {
                    self.lower_short_term_bounds(&round);
                }
                // BBRv3: cut by beta, but never below beta times the model's BDP, so
                // repeated lossy rounds in a shallow buffer do not spiral the bound down.
                let base = self.inflight_hi.min(self.window);
                self.inflight_hi = ((base as f64 * BETA) as u64)
                    .max(self.bdp(BETA))
                    .max(self.min_window());
                if let Mode::ProbeBw(Phase::Up) = self.mode {
                    self.advance_cycle(now);
                }
            }
            self.probe_growth = 0;
        } else if self.inflight_hi != u64::MAX && self.mode == Mode::ProbeBw(Phase::Up) {
            // A probe without congestion: raise the bound, faster each time (BBRv3).
            self.probe_growth = (self.probe_growth * 2).max(self.mtu);
            self.inflight_hi = self.inflight_hi.saturating_add(self.probe_growth);
        }
        if self.mode == Mode::Startup && !app_limited {
            let bw = self.bandwidth.get();
            if bw as f64 >= self.full_bw as f64 * FULL_BW_GROWTH {
                self.full_bw = bw;
                self.full_bw_rounds = 0;
            } else {
                self.full_bw_rounds += 1;
                if self.full_bw_rounds >= FULL_BW_ROUNDS {
                    self.enter_drain();
                }
            }
        }
        if let Mode::ProbeBw(_) = self.mode {
            if !congested {
                self.advance_cycle(now);
            }
        }
    }

    /// BBRv3's short-term model after a round counted as congestion (see
    /// `BbrConfig::short_term`).
    fn lower_short_term_bounds(&mut self, round: &RoundStats) {
        let bw_lo = match self.bw_lo {
            u64::MAX => self.bandwidth.get(),
            lo => lo,
        };
        self.bw_lo = ((bw_lo as f64 * BETA) as u64).max(round.max_rate);
        let inflight_lo = match self.inflight_lo {
            u64::MAX => self.window,
            lo => lo,
        };
        self.inflight_lo = ((inflight_lo as f64 * BETA) as u64)
            .max(round.delivered)
            .max(self.min_window());
    }

    /// The bandwidth filter's clock: rounds, or probe cycles where they are long.
    fn bw_clock(&self) -> u64 {
        if long_cycles(&self.config) {
            self.probes
        } else {
            self.round_count
        }
    }

    /// The model's bandwidth: the filter's maximum, bounded by `bw_lo`.
    fn bw(&self) -> u64 {
        self.bandwidth.get().min(self.bw_lo)
    }

    /// More than 2 % of the round lost (or an ECN mark) while enough of its RTT samples
    /// showed a queue (`queue_quantile`).
    fn round_was_congested(&self, round: &RoundStats) -> bool {
        let total = round.delivered + round.lost;
        let lossy = round.lost > 0 && round.lost as f64 > LOSS_THRESHOLD * total as f64;
        if !(lossy || round.ecn) {
            return false;
        }
        if round.samples == 0 {
            // No RTT seen this round (every packet lost): the path is overloaded.
            return true;
        }
        let needed = (self.config.queue_quantile * f64::from(round.samples))
            .ceil()
            .max(1.0);
        f64::from(round.queued) >= needed
    }

    /// Whether an RTT sample is far enough above the minimum RTT to show a queue.
    fn shows_queue(&self, rtt: Duration) -> bool {
        match self.min_rtt {
            Some(base) => {
                let margin = base
                    .mul_f64(self.config.queue_share)
                    .max(self.config.queue_floor);
                rtt > base + margin
            }
            None => false,
        }
    }

    fn enter_drain(&mut self) {
        // In Startup the bandwidth estimate lags what is acknowledged by design: what the
        // aggregation filter saw there was growth, not aggregation.
        self.extra_acked.reset();
        self.ack_epoch_start = None;
        self.ack_epoch_acked = 0;
        self.filled_pipe = true;
        self.mode = Mode::Drain;
    }

    /// The next phase of ProbeBW at the end of a round: a probe lasts one round, draining
    /// after it one round, and cruising until the wait is over.
    fn advance_cycle(&mut self, now: Instant) {
        match self.mode {
            Mode::ProbeBw(Phase::Up) => self.mode = Mode::ProbeBw(Phase::Down),
            Mode::ProbeBw(Phase::Down) => self.start_cruise(now),
            Mode::ProbeBw(Phase::Cruise) => {
                self.cruise.rounds += 1;
                if self.cruise_is_over(now) {
                    self.start_probe();
                }
            }
            _ => {}
        }
    }

    fn start_cruise(&mut self, now: Instant) {
        self.mode = Mode::ProbeBw(Phase::Cruise);
        let wait = match self.config.probe_wait {
            Duration::ZERO => Duration::ZERO,
            wait => wait + PROBE_WAIT_JITTER.mul_f64(self.random_share()),
        };
        self.cruise = Cruise {
            start: Some(now),
            rounds: 0,
            wait,
        };
    }

    fn cruise_is_over(&self, now: Instant) -> bool {
        if self.cruise.rounds < MIN_CRUISE_ROUNDS {
            return false;
        }
        let bdp_packets = (self.bdp(1.0) / self.mtu) as f64;
        let rounds = ((bdp_packets * self.config.cruise_rounds_per_packet) as u64)
            .clamp(MIN_CRUISE_ROUNDS, MAX_CRUISE_ROUNDS);
        let waited = !self.config.probe_wait.is_zero()
            && self
                .cruise
                .start
                .is_none_or(|t| now.saturating_duration_since(t) >= self.cruise.wait);
        self.cruise.rounds >= rounds || waited
    }

    fn start_probe(&mut self) {
        self.mode = Mode::ProbeBw(Phase::Up);
        self.probes += 1;
        self.bw_lo = u64::MAX;
        self.inflight_lo = u64::MAX;
    }

    /// A number in [0, 1) from what this connection has seen (its delivered bytes, minimum
    /// RTT and rounds): deterministic for a given history, as the simulation needs, and
    /// different between flows.
    fn random_share(&self) -> f64 {
        let rtt = self.min_rtt.map_or(0, |r| r.as_nanos() as u64);
        let mut x = self.rate.delivered() ^ rtt.rotate_left(32) ^ self.round_count;
        // splitmix64's finaliser
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// BBRv3's pacing gain of the current mode: the sending rate as a multiple of the
    /// bandwidth estimate.
    fn pacing_gain(&self) -> f64 {
        match self.mode {
            Mode::Startup => self.config.startup_gain,
            Mode::Drain => 1.0 / self.config.startup_gain,
            Mode::ProbeBw(Phase::Up) => 1.25,
            Mode::ProbeBw(Phase::Down) => 0.9,
            Mode::ProbeBw(Phase::Cruise) | Mode::ProbeRtt => 1.0,
        }
    }

    /// The window that lets quinn's pacer send at the model's pacing rate over the smoothed
    /// RTT (see [`BbrConfig::rate_window`]); 0 in ProbeRTT, before a bandwidth sample or when
    /// turned off.
    fn rate_window(&self) -> u64 {
        match (self.smoothed_rtt, self.pacing_rate()) {
            (Some(srtt), Some(rate)) if self.mode != Mode::ProbeRtt => {
                (rate as f64 * srtt.as_secs_f64() * self.config.rate_window) as u64
            }
            _ => 0,
        }
    }

    fn gain(&self) -> f64 {
        match self.mode {
            Mode::Startup => self.config.startup_gain,
            Mode::Drain => 1.0,
            Mode::ProbeBw(Phase::Up) => self.config.up_gain,
            Mode::ProbeBw(Phase::Down) => self.config.down_gain,
            Mode::ProbeBw(Phase::Cruise) => self.config.cruise_gain,
            Mode::ProbeRtt => self.config.probe_rtt_gain,
        }
    }

    /// `gain` bandwidth-delay products, in bytes (the initial window before a measurement).
    fn bdp(&self, gain: f64) -> u64 {
        match (self.bw(), self.min_rtt) {
            (bw, Some(rtt)) if bw > 0 => (bw as f64 * rtt.as_secs_f64() * gain) as u64,
            _ => self.initial_window(),
        }
    }

    fn probe_rtt_window(&self) -> u64 {
        self.bdp(self.config.probe_rtt_gain).max(self.min_window())
    }

    /// BBR's ack-aggregation estimate: acknowledgements often arrive in bursts (delayed
    /// ACKs, a busy receiver), and the window must cover what the bandwidth alone does not.
    fn update_ack_aggregation(&mut self, now: Instant, acked: u64) {
        let bw = self.bw();
        if bw == 0 || acked == 0 {
            return;
        }
        let start = *self.ack_epoch_start.get_or_insert(now);
        let expected = (bw as f64 * now.saturating_duration_since(start).as_secs_f64()) as u64;
        if self.ack_epoch_acked <= expected {
            self.ack_epoch_start = Some(now);
            self.ack_epoch_acked = 0;
        }
        self.ack_epoch_acked = self.ack_epoch_acked.saturating_add(acked);
        let start = self.ack_epoch_start.unwrap_or(now);
        let expected = (bw as f64 * now.saturating_duration_since(start).as_secs_f64()) as u64;
        let cap = (bw as f64 * MAX_EXTRA_ACKED.as_secs_f64()) as u64;
        let extra = self
            .ack_epoch_acked
            .saturating_sub(expected)
            .min(self.window)
            .min(cap);
        self.extra_acked.update(self.round_count, extra);
    }

    /// The pacing headroom of a sender the model's window does not bind (see
    /// [`BbrConfig::app_headroom`]); 0 when something sent in this round or the previous one
    /// went beyond the model's window.
    fn app_headroom(&self) -> u64 {
        let bound = self
            .window_bound_round
            .is_some_and(|r| self.round_count.saturating_sub(r) <= 1);
        if bound {
            return 0;
        }
        (self.peak_in_flight.get() as f64 * self.config.app_headroom) as u64
    }

    fn update_window(&mut self, acked: u64, app_limited: bool) {
        let floor = self.min_window();
        if self.mode == Mode::ProbeRtt {
            self.window = self.window.min(self.probe_rtt_window()).max(floor);
            return;
        }
        let target = self
            .bdp(self.gain())
            .saturating_add(self.extra_acked.get())
            .min(self.inflight_hi)
            .min(self.inflight_lo)
            .max(floor);
        self.window = if self.filled_pipe {
            self.window.saturating_add(acked).min(target)
        } else if app_limited && self.window >= target {
            // Window validation (RFC 7661): a window the application does not fill is not
            // evidence the path can take more; grow only up to what the model supports.
            self.window
        } else {
            // Startup: grow by every acknowledged byte, like slow start, up to the bound.
            self.window
                .saturating_add(acked)
                .max(target)
                .min(self.inflight_hi)
        };
        self.window = self.window.max(floor);
    }
}
