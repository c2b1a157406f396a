//! A packet-level simulation of bulk flows through one bottleneck, on simulated time.
//!
//! Each flow is a QUIC-like sender (packet numbers, RFC 9002 loss detection with the packet
//! and time thresholds, a probe timeout, and quinn's pacer: a token bucket refilled at 1.25 ×
//! window per smoothed RTT) and a receiver that acknowledges every packet. The forward
//! direction of all flows shares one [`agentwire_netsim::Link`] (delay, loss, rate limit,
//! drop-tail queue); acknowledgements travel back on a second link. Nothing reads a clock or
//! touches a socket, so a run is a pure function of its [`Scenario`], its controllers and
//! its seed: tests assert on it and the `matrix` example tabulates it.
//!
//! This module owns the event loop and the per-flow measurements. It must not contain
//! congestion control of its own beyond the [`Reno`] reference flow.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentwire_netsim::{Impairment, Link, Spec};

use crate::Bbr;

/// What the simulator needs of a congestion controller: the events of quinn's `Controller`
/// trait (quinn's own controllers need quinn's private RTT estimator and cannot run here).
pub trait SimController {
    /// A short name for reports.
    fn name(&self) -> &'static str;
    /// `bytes` were sent at `now`.
    fn on_sent(&mut self, now: Instant, bytes: u64);
    /// One packet, sent at `sent`, was acknowledged.
    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        srtt: Duration,
    );
    /// The end of one acknowledgement's packets.
    fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool);
    /// Packets were declared lost.
    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool, lost: u64);
    /// The current window, bytes.
    fn window(&self) -> u64;
}

impl SimController for Bbr {
    fn name(&self) -> &'static str {
        "bbr3"
    }
    fn on_sent(&mut self, now: Instant, bytes: u64) {
        Bbr::on_sent(self, now, bytes);
    }
    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        srtt: Duration,
    ) {
        self.on_smoothed_rtt(srtt);
        Bbr::on_ack(self, now, sent, bytes, app_limited);
    }
    fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool) {
        Bbr::on_end_acks(self, now, in_flight, app_limited);
    }
    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool, lost: u64) {
        Bbr::on_congestion_event(self, now, sent, persistent, lost);
    }
    fn window(&self) -> u64 {
        Bbr::window(self)
    }
}

/// A NewReno reference flow (RFC 9002 appendix B): the loss-based behaviour of TCP Reno and,
/// roughly, CUBIC on short paths. It stands in for "the other traffic" in fairness runs.
#[derive(Debug, Clone)]
pub struct Reno {
    window: u64,
    ssthresh: u64,
    recovery_start: Option<Instant>,
    acked_in_ca: u64,
    mss: u64,
}

impl Reno {
    /// A Reno flow with a 10-packet initial window.
    pub fn new(mss: u64) -> Self {
        Reno {
            window: 10 * mss,
            ssthresh: u64::MAX,
            recovery_start: None,
            acked_in_ca: 0,
            mss,
        }
    }
}

impl SimController for Reno {
    fn name(&self) -> &'static str {
        "reno"
    }
    fn on_sent(&mut self, _: Instant, _: u64) {}
    fn on_ack(&mut self, _: Instant, sent: Instant, bytes: u64, app_limited: bool, _: Duration) {
        if app_limited || self.recovery_start.is_some_and(|r| sent <= r) {
            return;
        }
        if self.window < self.ssthresh {
            self.window += bytes;
        } else {
            self.acked_in_ca += bytes;
            if self.acked_in_ca >= self.window {
                self.acked_in_ca -= self.window;
                self.window += self.mss;
            }
        }
    }
    fn on_end_acks(&mut self, _: Instant, _: u64, _: bool) {}
    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool, _: u64) {
        if self.recovery_start.is_some_and(|r| sent <= r) {
            return;
        }
        self.recovery_start = Some(now);
        self.window = (self.window / 2).max(2 * self.mss);
        self.ssthresh = self.window;
        if persistent {
            self.window = 2 * self.mss;
        }
    }
    fn window(&self) -> u64 {
        self.window
    }
}

/// The path of a simulation.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Data direction: the bottleneck (netsim spec syntax, e.g.
    /// `delay=25ms,loss=1%,rate=20mbit,queue=1bdp`).
    pub forward: Impairment,
    /// Acknowledgement direction.
    pub reverse: Impairment,
    /// Simulated time.
    pub duration: Duration,
    /// Measurements start after this (the flows' start-up is excluded).
    pub warmup: Duration,
    /// Payload per packet, bytes.
    pub mss: u64,
    /// Seed of the links' random loss.
    pub seed: u64,
}

/// A [`Scenario`] direction whose netsim spec does not parse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{direction} {spec:?}: {source}")]
pub struct ScenarioError {
    /// `forward` or `reverse`.
    pub direction: &'static str,
    /// The spec as given.
    pub spec: String,
    /// What netsim says of it.
    #[source]
    pub source: agentwire_netsim::Error,
}

impl Scenario {
    /// A scenario from netsim spec strings for both directions.
    pub fn parse(forward: &str, reverse: &str, duration: Duration) -> Result<Self, ScenarioError> {
        let f = Spec::parse(forward).map_err(|source| ScenarioError {
            direction: "forward",
            spec: forward.to_owned(),
            source,
        })?;
        let r = Spec::parse(reverse).map_err(|source| ScenarioError {
            direction: "reverse",
            spec: reverse.to_owned(),
            source,
        })?;
        Ok(Scenario {
            forward: f.impairment,
            reverse: r.impairment,
            duration,
            warmup: duration / 5,
            mss: 1200,
            seed: 1,
        })
    }
}

/// One flow of a simulation.
pub struct FlowSpec {
    /// Its congestion controller.
    pub controller: Box<dyn SimController>,
    /// When it starts sending.
    pub start: Duration,
    /// `Some(rate)`: the application offers only this many bytes per second (app-limited).
    pub app_rate: Option<u64>,
}

impl FlowSpec {
    /// A bulk flow from time zero.
    pub fn bulk(controller: Box<dyn SimController>) -> Self {
        FlowSpec {
            controller,
            start: Duration::ZERO,
            app_rate: None,
        }
    }
}

/// What one flow achieved after the warm-up.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FlowResult {
    /// The controller's name.
    pub controller: String,
    /// Acknowledged bytes per second, as bits per second.
    pub goodput_bps: f64,
    /// Packets sent (all of the run).
    pub sent_packets: u64,
    /// Packets declared lost (all of the run).
    pub lost_packets: u64,
    /// Median RTT sample minus the path's base RTT (queueing), milliseconds.
    pub queue_delay_p50_ms: f64,
    /// 95th percentile of the same.
    pub queue_delay_p95_ms: f64,
    /// The window at the end, bytes.
    pub final_window: u64,
}

/// The outcome of a run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SimResult {
    /// Per flow, in the order given.
    pub flows: Vec<FlowResult>,
    /// The bottleneck's counters.
    pub bottleneck: agentwire_netsim::Stats,
    /// The bottleneck's rate, bits per second (`None`: unlimited).
    pub rate_bps: Option<u64>,
}

impl SimResult {
    /// Sum of the flows' goodput over the bottleneck rate (`None` without a rate limit).
    pub fn utilisation(&self) -> Option<f64> {
        let total: f64 = self.flows.iter().map(|f| f.goodput_bps).sum();
        self.rate_bps.map(|r| total / r as f64)
    }
}

#[derive(Debug, Clone, Copy)]
struct Data {
    flow: usize,
    pn: u64,
}

#[derive(Debug, Clone, Copy)]
struct Ack {
    flow: usize,
    /// How many entries of the receiver's log this acknowledgement covers (ACK ranges carry
    /// everything received so far, so a lost acknowledgement is covered by the next).
    upto: usize,
}

struct Sent {
    at: Duration,
    size: u64,
}

struct Flow {
    cc: Box<dyn SimController>,
    start: Duration,
    app_rate: Option<u64>,
    app_sent: u64,
    app_limited: bool,
    next_pn: u64,
    in_flight: u64,
    outstanding: BTreeMap<u64, Sent>,
    largest_acked: Option<u64>,
    srtt: Option<Duration>,
    rttvar: Duration,
    latest_rtt: Duration,
    last_ack_at: Duration,
    pto_count: u32,
    probes: u32,
    /// quinn's pacer tokens (fractional here, so that frequent refills are not lost).
    tokens: f64,
    tokens_at: Duration,
    /// Receiver side: packet numbers in arrival order.
    received: Vec<u64>,
    acked_upto: usize,
    // Measurements.
    acked_bytes: u64,
    sent_packets: u64,
    lost_packets: u64,
    queue_samples_us: Vec<u64>,
}

/// quinn's defaults.
const INITIAL_RTT: Duration = Duration::from_millis(333);
const MAX_ACK_DELAY: Duration = Duration::from_millis(25);
const PACKET_THRESHOLD: u64 = 3;
const BURST_INTERVAL: Duration = Duration::from_millis(2);
/// The sender's own limit on unacknowledged bytes (agentwire's QUIC `send_window`).
const MAX_IN_FLIGHT: u64 = 32 * 1024 * 1024;

impl Flow {
    fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(INITIAL_RTT)
    }

    fn pto(&self) -> Duration {
        let base = self.srtt() + (4 * self.rttvar).max(Duration::from_millis(1)) + MAX_ACK_DELAY;
        base * 2u32.saturating_pow(self.pto_count.min(10))
    }

    fn loss_delay(&self) -> Duration {
        (self.srtt().max(self.latest_rtt) * 9 / 8).max(Duration::from_millis(1))
    }

    fn has_app_data(&self, now: Duration, mss: u64) -> bool {
        match self.app_rate {
            None => true,
            Some(rate) => {
                let offered = (rate as f64 * now.saturating_sub(self.start).as_secs_f64()) as u64;
                offered >= self.app_sent + mss
            }
        }
    }

    fn pacer_capacity(&self, mss: u64) -> u64 {
        let window = self.cc.window();
        let rtt = self.srtt().as_nanos().max(1);
        let cap = (u128::from(window) * BURST_INTERVAL.as_nanos() / rtt) as u64;
        cap.clamp(10 * mss, 256 * mss)
    }

    /// When the pacer allows the next `mss` bytes (quinn's token bucket).
    fn pacer_ready_at(&mut self, now: Duration, mss: u64) -> Duration {
        let window = self.cc.window().max(1);
        let capacity = self.pacer_capacity(mss);
        let elapsed = now.saturating_sub(self.tokens_at).as_secs_f64();
        let refill = window as f64 * 1.25 * elapsed / self.srtt().as_secs_f64();
        self.tokens = (self.tokens + refill).min(capacity as f64);
        self.tokens_at = now;
        if self.tokens >= mss as f64 {
            return now;
        }
        let missing = mss as f64 - self.tokens;
        let secs = missing * self.srtt().as_secs_f64() / (window as f64 * 1.25);
        now + Duration::from_secs_f64(secs)
    }

    /// The next time this flow wants to send, if it is not blocked on acknowledgements.
    fn next_send(&mut self, now: Duration, mss: u64) -> Option<Duration> {
        if now < self.start {
            return Some(self.start);
        }
        let probing = self.probes > 0;
        let window = self.cc.window().min(MAX_IN_FLIGHT);
        if !probing && self.in_flight + mss > window {
            return None;
        }
        if !self.has_app_data(now, mss) {
            self.app_limited = true;
            let rate = self.app_rate.unwrap_or(1).max(1);
            let offered_at = (self.app_sent + mss) as f64 / rate as f64;
            return Some(self.start + Duration::from_secs_f64(offered_at));
        }
        if probing {
            return Some(now);
        }
        Some(self.pacer_ready_at(now, mss))
    }

    fn loss_timer(&self) -> Option<Duration> {
        let largest = self.largest_acked?;
        let (_, first) = self.outstanding.range(..largest).next()?;
        Some(first.at + self.loss_delay())
    }

    fn pto_timer(&self) -> Option<Duration> {
        if self.outstanding.is_empty() {
            return None;
        }
        Some(self.last_ack_at.max(self.start) + self.pto())
    }
}

/// Runs `flows` through `scenario`.
///
/// ```
/// use std::time::Duration;
/// use agentwire_cc::{sim, Bbr, BbrConfig};
///
/// let s = sim::Scenario::parse("delay=10ms,rate=10mbit,queue=1bdp", "delay=10ms",
///                              Duration::from_secs(3)).unwrap();
/// let r = sim::run(&s, vec![sim::FlowSpec::bulk(Box::new(Bbr::new(BbrConfig::default(), 1200)))])
///     .unwrap();
/// assert!(r.utilisation().unwrap() > 0.8);
/// ```
///
/// An impairment that does not validate (a probability above 1, say) is an error.
pub fn run(
    scenario: &Scenario,
    flows: Vec<FlowSpec>,
) -> Result<SimResult, agentwire_netsim::Error> {
    let epoch = Instant::now();
    let at = |t: Duration| epoch + t;
    let mss = scenario.mss;
    let base_rtt = scenario.forward.delay + scenario.reverse.delay;
    let mut forward: Link<Data> = Link::new(scenario.forward.clone(), scenario.seed)?;
    let mut reverse: Link<Ack> =
        Link::new(scenario.reverse.clone(), scenario.seed.wrapping_add(1))?;
    let mut flows: Vec<Flow> = flows
        .into_iter()
        .map(|f| Flow {
            cc: f.controller,
            start: f.start,
            app_rate: f.app_rate,
            app_sent: 0,
            app_limited: false,
            next_pn: 0,
            in_flight: 0,
            outstanding: BTreeMap::new(),
            largest_acked: None,
            srtt: None,
            rttvar: INITIAL_RTT / 2,
            latest_rtt: Duration::ZERO,
            last_ack_at: f.start,
            pto_count: 0,
            probes: 0,
            tokens: (10 * mss) as f64,
            tokens_at: f.start,
            received: Vec::new(),
            acked_upto: 0,
            acked_bytes: 0,
            sent_packets: 0,
            lost_packets: 0,
            queue_samples_us: Vec::new(),
        })
        .collect();

    let mut now = Duration::ZERO;
    let end = scenario.duration;
    // Bounded: every iteration advances time or moves a packet, and time ends at `end`.
    let max_steps = 200_000_000u64;
    for _ in 0..max_steps {
        // Deliver what has arrived.
        while let Some(d) = forward.poll_departure(now) {
            let f = &mut flows[d.flow];
            f.received.push(d.pn);
            let upto = f.received.len();
            reverse.push(now, Ack { flow: d.flow, upto }, 40);
        }
        while let Some(a) = reverse.poll_departure(now) {
            on_ack(
                &mut flows[a.flow],
                a.upto,
                now,
                at,
                base_rtt,
                scenario.warmup,
            );
        }
        // Timers.
        for f in flows.iter_mut() {
            if f.loss_timer().is_some_and(|t| t <= now) {
                detect_losses(f, now, at);
            }
            if f.pto_timer().is_some_and(|t| t <= now) {
                f.pto_count += 1;
                f.probes = 2;
                f.last_ack_at = now;
            }
        }
        // Sends.
        for (i, f) in flows.iter_mut().enumerate() {
            while f.next_send(now, mss) == Some(now) {
                let pn = f.next_pn;
                f.next_pn += 1;
                f.cc.on_sent(at(now), mss);
                f.in_flight += mss;
                f.app_sent += mss;
                f.sent_packets += 1;
                f.tokens = (f.tokens - mss as f64).max(0.0);
                f.probes = f.probes.saturating_sub(1);
                f.app_limited = false;
                f.outstanding.insert(pn, Sent { at: now, size: mss });
                forward.push(now, Data { flow: i, pn }, mss as usize + 50);
            }
        }
        // Next event.
        let mut next = end;
        let mut consider = |t: Option<Duration>| {
            if let Some(t) = t {
                next = next.min(t.max(now + Duration::from_micros(1)));
            }
        };
        consider(forward.next_departure());
        consider(reverse.next_departure());
        for f in flows.iter_mut() {
            consider(f.next_send(now, mss));
            consider(f.loss_timer());
            consider(f.pto_timer());
        }
        if now >= end {
            break;
        }
        now = next;
    }

    let measured = end.saturating_sub(scenario.warmup).as_secs_f64().max(1e-9);
    Ok(SimResult {
        flows: flows
            .iter_mut()
            .map(|f| {
                f.queue_samples_us.sort_unstable();
                FlowResult {
                    controller: f.cc.name().to_owned(),
                    goodput_bps: f.acked_bytes as f64 * 8.0 / measured,
                    sent_packets: f.sent_packets,
                    lost_packets: f.lost_packets,
                    queue_delay_p50_ms: percentile_ms(&f.queue_samples_us, 0.5),
                    queue_delay_p95_ms: percentile_ms(&f.queue_samples_us, 0.95),
                    final_window: f.cc.window(),
                }
            })
            .collect(),
        bottleneck: forward.stats(),
        rate_bps: scenario.forward.rate_bps,
    })
}

fn percentile_ms(sorted_us: &[u64], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() - 1) as f64 * q).round() as usize;
    sorted_us[i.min(sorted_us.len() - 1)] as f64 / 1000.0
}

fn on_ack(
    f: &mut Flow,
    upto: usize,
    now: Duration,
    at: impl Fn(Duration) -> Instant + Copy,
    base_rtt: Duration,
    warmup: Duration,
) {
    if upto <= f.acked_upto {
        return; // an older acknowledgement overtaken by a newer one
    }
    let mut newly: Vec<u64> = f.received[f.acked_upto..upto].to_vec();
    f.acked_upto = upto;
    newly.sort_unstable();
    let mut newest: Option<(u64, Duration)> = None;
    let app_limited = f.app_limited;
    let srtt = f.srtt();
    for pn in newly {
        let Some(sent) = f.outstanding.remove(&pn) else {
            continue; // already declared lost
        };
        f.in_flight = f.in_flight.saturating_sub(sent.size);
        f.cc.on_ack(at(now), at(sent.at), sent.size, app_limited, srtt);
        if now >= warmup {
            f.acked_bytes += sent.size;
        }
        if newest.is_none_or(|(p, _)| pn > p) {
            newest = Some((pn, sent.at));
        }
    }
    f.cc.on_end_acks(at(now), f.in_flight, app_limited);
    if let Some((pn, sent_at)) = newest {
        if f.largest_acked.is_none_or(|l| pn > l) {
            f.largest_acked = Some(pn);
            let rtt = now.saturating_sub(sent_at);
            f.latest_rtt = rtt;
            match f.srtt {
                None => {
                    f.srtt = Some(rtt);
                    f.rttvar = rtt / 2;
                }
                Some(s) => {
                    let diff = s.abs_diff(rtt);
                    f.rttvar = (f.rttvar * 3 + diff) / 4;
                    f.srtt = Some((s * 7 + rtt) / 8);
                }
            }
            if now >= warmup {
                let queue = rtt.saturating_sub(base_rtt);
                f.queue_samples_us
                    .push(u64::try_from(queue.as_micros()).unwrap_or(u64::MAX));
            }
        }
        f.pto_count = 0;
        f.probes = 0;
        f.last_ack_at = now;
    }
    detect_losses(f, now, at);
}

fn detect_losses(f: &mut Flow, now: Duration, at: impl Fn(Duration) -> Instant) {
    let Some(largest) = f.largest_acked else {
        return;
    };
    let loss_delay = f.loss_delay();
    let lost: Vec<u64> = f
        .outstanding
        .range(..largest)
        .filter(|(pn, s)| largest - **pn >= PACKET_THRESHOLD || s.at + loss_delay <= now)
        .map(|(pn, _)| *pn)
        .collect();
    if lost.is_empty() {
        return;
    }
    let mut bytes = 0;
    let mut first_sent = Duration::MAX;
    let mut last_sent = Duration::ZERO;
    for pn in &lost {
        if let Some(s) = f.outstanding.remove(pn) {
            bytes += s.size;
            first_sent = first_sent.min(s.at);
            last_sent = last_sent.max(s.at);
        }
    }
    f.in_flight = f.in_flight.saturating_sub(bytes);
    f.lost_packets += lost.len() as u64;
    let persistent = last_sent.saturating_sub(first_sent) > f.pto() * 3;
    f.cc.on_congestion_event(at(now), at(last_sent), persistent, bytes);
}
