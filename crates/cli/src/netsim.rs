//! `agentwire netsim up` (packet-level mode) and `agentwire netsim check` (measures the
//! emulator itself). The impairment logic lives in `agentwire_netsim`; this module only wires
//! sockets, namespaces and output.

use crate::args::RelayArgs;
use crate::until_stopped;
use agentwire_sync::LockExt;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use agentwire_netsim::relay::UdpRelay;
use agentwire_netsim::{Impairment, Spec, Stats};
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::args::{CheckArgs, CheckMode, UpArgs};

// ---------------------------------------------------------------------------------------------
// Bounds (pure; unit-tested below)
// ---------------------------------------------------------------------------------------------

/// z of the two-sided 99 % normal interval.
pub const Z99: f64 = 2.576;
/// One-way delay of the RTT check.
pub const RTT_DELAY_MS: f64 = 25.0;
/// Allowed |median − baseline − 2 × delay| of the RTT check.
pub const RTT_TOLERANCE_MS: f64 = 1.0;
/// Loss probability (each way) of the loss check.
pub const LOSS_P: f64 = 0.01;
/// Bottleneck rate of the rate check.
pub const RATE_BPS: f64 = 20_000_000.0;
/// Allowed relative error of the rate check.
pub const RATE_TOLERANCE: f64 = 0.05;

/// The binomial 99 % interval of the number of successes in `n` trials of probability `p`
/// (normal approximation: `n·p ± 2.576·sqrt(n·p·(1−p))`).
pub fn binomial_interval(n: u64, p: f64) -> (f64, f64) {
    let n = n as f64;
    let mean = n * p;
    let half = Z99 * (n * p * (1.0 - p)).sqrt();
    (mean - half, mean + half)
}

/// Whether `lost` of `n` is within the 99 % interval for loss probability `p`.
pub fn loss_pass(lost: u64, n: u64, p: f64) -> bool {
    let (lo, hi) = binomial_interval(n, p);
    (lo..=hi).contains(&(lost as f64))
}

/// Whether the delay added on top of the baseline is `expected_ms` within `tolerance_ms`.
pub fn rtt_pass(median_ms: f64, baseline_ms: f64, expected_ms: f64, tolerance_ms: f64) -> bool {
    (median_ms - baseline_ms - expected_ms).abs() <= tolerance_ms
}

/// Whether `measured` is within `tolerance` (relative) of `target`.
pub fn rate_pass(measured_bps: f64, target_bps: f64, tolerance: f64) -> bool {
    (measured_bps - target_bps).abs() <= tolerance * target_bps
}

/// Median of samples (mean of the middle two for an even count); 0 when empty.
pub fn median(samples: &[f64]) -> f64 {
    agentwire_measure::stats::median(samples).unwrap_or(0.0)
}

/// Nearest-rank percentile `q` (0..=1) of sorted samples; 0 when empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Rate over the steady part of a receive trace `(seconds since start, bytes)` sorted by time:
/// the bytes of arrivals after the 10 % mark up to the 90 % mark, over the time between them.
/// `None` with fewer than 20 arrivals or no time elapsed.
pub fn steady_rate_bps(arrivals: &[(f64, u64)]) -> Option<f64> {
    let k = arrivals.len();
    if k < 20 {
        return None;
    }
    let (a, b) = (k / 10, k * 9 / 10);
    let dt = arrivals[b].0 - arrivals[a].0;
    if dt <= 0.0 {
        return None;
    }
    let bytes: u64 = arrivals[a + 1..=b].iter().map(|x| x.1).sum();
    Some(bytes as f64 * 8.0 / dt)
}

// ---------------------------------------------------------------------------------------------
// Emulator instances
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Packet,
    Socket,
}

impl Mode {
    fn describe(self, stage: agentwire_netsim::StageKind) -> &'static str {
        match (self, stage) {
            (Mode::Socket, _) => "socket mode: UDP relay on 127.0.0.1, no privileges",
            (Mode::Packet, agentwire_netsim::StageKind::Nfqueue) => {
                "packet mode: 2 namespaces + veth, NFQUEUE stage, 198.18.0.1 -> 198.18.0.2"
            }
            (Mode::Packet, _) => {
                "packet mode: 2 namespaces + veth into a middle one, bridge stage (AF_PACKET), \
                 198.18.0.1 -> 198.18.0.2"
            }
        }
    }
}

/// Keeps the emulator alive; dropping it stops the relay, or removes the stage's rules and
/// then the namespaces (fields drop in order).
#[allow(dead_code)]
enum Guard {
    Socket(UdpRelay),
    #[cfg(target_os = "linux")]
    Packet(
        agentwire_netsim::stage::Stage,
        agentwire_netsim::packet::Topology,
    ),
}

/// One emulator with a client socket and a server socket on either side of it.
struct Emulator {
    client: UdpSocket,
    server: UdpSocket,
    /// Where the client sends to reach the server through the emulator.
    target: SocketAddr,
    /// Bytes the emulator's link counts per datagram beyond the UDP payload (IPv4 + UDP
    /// headers in packet mode, none in socket mode).
    overhead: u64,
    guard: Guard,
}

impl Emulator {
    async fn start(
        mode: Mode,
        stage: agentwire_netsim::StageKind,
        forward: Impairment,
        reverse: Impairment,
        seed: u64,
    ) -> Result<Self> {
        match mode {
            Mode::Socket => {
                let _ = stage;
                let lo: SocketAddr = "127.0.0.1:0".parse()?;
                let server = UdpSocket::bind(lo)?;
                let relay = UdpRelay::start(lo, server.local_addr()?, forward, reverse, seed)
                    .await
                    .context("starting the UDP relay")?;
                Ok(Emulator {
                    client: UdpSocket::bind(lo)?,
                    server,
                    target: relay.local_addr(),
                    overhead: 0,
                    guard: Guard::Socket(relay),
                })
            }
            #[cfg(target_os = "linux")]
            Mode::Packet => {
                use agentwire_netsim::packet::{Topology, CLIENT_ADDR, SERVER_ADDR};
                use agentwire_netsim::stage::Stage;
                tokio::task::spawn_blocking(move || -> Result<Emulator> {
                    let topo = Topology::with_wiring(stage.wiring())?;
                    let stage = Stage::start(stage, &topo, forward, reverse, seed)?;
                    let server = bind_in(topo.server_ns(), (SERVER_ADDR, 0).into())?;
                    let client = bind_in(topo.client_ns(), (CLIENT_ADDR, 0).into())?;
                    Ok(Emulator {
                        target: server.local_addr()?,
                        client,
                        server,
                        overhead: 28,
                        guard: Guard::Packet(stage, topo),
                    })
                })
                .await?
            }
            #[cfg(not(target_os = "linux"))]
            Mode::Packet => bail!("packet mode is Linux only; use --mode socket"),
        }
    }

    /// The client → server link's counters.
    fn forward_stats(&self) -> Stats {
        match &self.guard {
            Guard::Socket(r) => r.stats().forward,
            #[cfg(target_os = "linux")]
            Guard::Packet(s, _) => s.stats().client_to_server.link,
        }
    }
}

/// Binds a UDP socket inside namespace `ns` (from a helper thread; the socket stays there).
#[cfg(target_os = "linux")]
fn bind_in(ns: &str, addr: SocketAddr) -> Result<UdpSocket> {
    let ns = ns.to_string();
    thread::spawn(move || -> Result<UdpSocket> {
        agentwire_netsim::packet::enter_netns(&ns)?;
        Ok(UdpSocket::bind(addr)?)
    })
    .join()
    .map_err(|_| anyhow!("bind thread panicked"))?
}

/// Runs blocking measurement `f` off the async workers (the socket relay needs them).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await?
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------------------------
// Measurements (blocking; every loop bounded in count and time)
// ---------------------------------------------------------------------------------------------

/// `n` sequential UDP ping-pongs (after 5 warm-ups); RTTs in ms, sorted.
fn ping_pong(client: UdpSocket, server: UdpSocket, target: SocketAddr, n: u32) -> Result<Vec<f64>> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    server.set_read_timeout(Some(Duration::from_millis(20)))?;
    let echo = thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !stop2.load(Ordering::Relaxed) {
            if let Ok((len, from)) = server.recv_from(&mut buf) {
                let _ = server.send_to(&buf[..len], from);
            }
        }
    });
    let result = (|| {
        client.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut rtts = Vec::with_capacity(n as usize);
        let mut buf = [0u8; 2048];
        for i in 0..n + 5 {
            let mut msg = [0u8; 16];
            msg[..4].copy_from_slice(&i.to_be_bytes());
            let t = Instant::now();
            client.send_to(&msg, target)?;
            loop {
                let (len, _) = client
                    .recv_from(&mut buf)
                    .with_context(|| format!("ping {i}: no echo within 2 s"))?;
                if len == 16 && buf[..4] == i.to_be_bytes() {
                    break;
                }
            }
            if i >= 5 {
                rtts.push(ms(t.elapsed()));
            }
        }
        rtts.sort_by(f64::total_cmp);
        Ok(rtts)
    })();
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    result
}

/// Receives on `server` until `done` is set and nothing arrived for `quiet`, or `limit`
/// passed; calls `on` with (arrival time since `t0`, datagram).
fn receive_until(
    server: UdpSocket,
    done: Arc<AtomicBool>,
    quiet: Duration,
    limit: Duration,
    t0: Instant,
    mut on: impl FnMut(f64, &[u8]) + Send + 'static,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let _ = server.set_read_timeout(Some(Duration::from_millis(20)));
        let mut buf = vec![0u8; 2048];
        let mut last = Instant::now();
        while t0.elapsed() < limit {
            match server.recv_from(&mut buf) {
                Ok((len, _)) => {
                    last = Instant::now();
                    on(t0.elapsed().as_secs_f64(), &buf[..len]);
                }
                Err(_) => {
                    if done.load(Ordering::Relaxed) && last.elapsed() >= quiet {
                        break;
                    }
                }
            }
        }
    })
}

/// Sends `n` numbered 8-byte datagrams in bursts of 100 with a 2 ms pause; returns how many
/// distinct ones the server received.
fn one_way_count(client: UdpSocket, server: UdpSocket, target: SocketAddr, n: u32) -> Result<u64> {
    let seen = Arc::new(std::sync::Mutex::new(vec![false; n as usize]));
    let done = Arc::new(AtomicBool::new(false));
    let seen2 = seen.clone();
    let t0 = Instant::now();
    let limit = Duration::from_secs(5) + Duration::from_micros(50) * n;
    let rx = receive_until(
        server,
        done.clone(),
        Duration::from_millis(500),
        limit,
        t0,
        move |_, d| {
            if d.len() == 8 {
                let i = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
                if let Some(s) = seen2.lock_or_recover().get_mut(i) {
                    *s = true;
                }
            }
        },
    );
    let send = || -> Result<()> {
        for i in 0..n {
            let mut msg = [0u8; 8];
            msg[..4].copy_from_slice(&i.to_be_bytes());
            client.send_to(&msg, target)?;
            if i % 100 == 99 {
                thread::sleep(Duration::from_millis(2));
            }
        }
        Ok(())
    };
    let sent = send();
    done.store(true, Ordering::Relaxed);
    let _ = rx.join();
    sent?;
    let count = seen.lock_or_recover().iter().filter(|s| **s).count();
    Ok(count as u64)
}

/// A blast of 1200-byte datagrams: `count` of them, or as many as fit in `duration`.
struct Blast {
    sent: u64,
    send_secs: f64,
    /// (seconds since the first send, bytes as the emulator counts them), in arrival order.
    arrivals: Vec<(f64, u64)>,
}

const BLAST_SIZE: usize = 1200;

fn blast(
    em_client: UdpSocket,
    server: UdpSocket,
    target: SocketAddr,
    overhead: u64,
    count: u64,
    duration: Duration,
    limit: Duration,
) -> Result<Blast> {
    let arrivals = Arc::new(std::sync::Mutex::new(Vec::with_capacity(
        count.min(1 << 22) as usize,
    )));
    let arr2 = arrivals.clone();
    let done = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let rx = receive_until(
        server,
        done.clone(),
        Duration::from_millis(500),
        limit,
        t0,
        move |t, d| {
            arr2.lock_or_recover().push((t, d.len() as u64 + overhead));
        },
    );
    let msg = [0x5au8; BLAST_SIZE];
    let mut sent = 0u64;
    let mut err = None;
    while sent < count && t0.elapsed() < duration {
        match em_client.send_to(&msg, target) {
            Ok(_) => sent += 1,
            // ENOBUFS and friends: the sender outran the kernel; try again.
            Err(e) if e.raw_os_error() == Some(105) => thread::yield_now(),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let send_secs = t0.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = rx.join();
    if let Some(e) = err {
        return Err(e.into());
    }
    let arrivals = std::mem::take(&mut *arrivals.lock_or_recover());
    Ok(Blast {
        sent,
        send_secs,
        arrivals,
    })
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Serialize)]
struct RttResult {
    setting: String,
    samples: u32,
    min_ms: f64,
    median_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    baseline_median_ms: f64,
    added_ms: f64,
    expected_added_ms: f64,
    tolerance_ms: f64,
    pass: bool,
}

#[derive(Debug, Serialize)]
struct LossResult {
    setting: String,
    packets: u64,
    received: u64,
    lost: u64,
    loss_percent: f64,
    /// Drops decided by the model (client → server link).
    model_dropped: u64,
    /// Lost datagrams the model did not drop (socket buffers, queue overflow): should be 0.
    other_lost: u64,
    expected_lost: f64,
    bound_lo: f64,
    bound_hi: f64,
    pass: bool,
}

#[derive(Debug, Serialize)]
struct RateResult {
    setting: String,
    datagram_bytes: usize,
    counted_overhead_bytes: u64,
    sent: u64,
    received: u64,
    measured_mbit: f64,
    target_mbit: f64,
    bound_lo_mbit: f64,
    bound_hi_mbit: f64,
    pass: bool,
}

#[derive(Debug, Serialize)]
struct CeilingResult {
    setting: String,
    datagram_bytes: usize,
    seconds: f64,
    sent: u64,
    received: u64,
    sent_per_sec: f64,
    packets_per_sec: f64,
    mbit: f64,
    cpu_seconds: Option<f64>,
    note: &'static str,
}

#[derive(Debug, Serialize)]
struct CheckReport {
    mode: Mode,
    /// The packet stage measured (packet mode only).
    stage: Option<agentwire_netsim::StageKind>,
    mode_description: &'static str,
    auto_fallback: Option<String>,
    seed: u64,
    rtt: RttResult,
    loss: LossResult,
    rate: RateResult,
    ceiling: CeilingResult,
    passed: bool,
    total_seconds: f64,
}

const CEILING_NOTE: &str = "the emulator, not the protocol, is the bottleneck above this rate";

fn imp(spec: &str) -> Result<Impairment> {
    Ok(Spec::parse(spec)?.impairment)
}

async fn run_check(
    mode: Mode,
    a: &CheckArgs,
) -> Result<(RttResult, LossResult, RateResult, CeilingResult)> {
    let seed = a.seed;

    // a) added RTT.
    let base = Emulator::start(
        mode,
        a.stage,
        Impairment::default(),
        Impairment::default(),
        seed,
    )
    .await?;
    let (c, s, t) = (
        base.client.try_clone()?,
        base.server.try_clone()?,
        base.target,
    );
    let baseline = blocking(move || ping_pong(c, s, t, 200)).await?;
    drop(base);
    let d = imp("delay=25ms")?;
    let em = Emulator::start(mode, a.stage, d.clone(), d, seed).await?;
    let (c, s, t) = (em.client.try_clone()?, em.server.try_clone()?, em.target);
    let rtts = blocking(move || ping_pong(c, s, t, 200)).await?;
    drop(em);
    let (med, base_med) = (median(&rtts), median(&baseline));
    let expected = 2.0 * RTT_DELAY_MS;
    let rtt = RttResult {
        setting: "delay=25ms each way".into(),
        samples: rtts.len() as u32,
        min_ms: rtts[0],
        median_ms: med,
        p99_ms: percentile(&rtts, 0.99),
        max_ms: rtts[rtts.len() - 1],
        baseline_median_ms: base_med,
        added_ms: med - base_med,
        expected_added_ms: expected,
        tolerance_ms: RTT_TOLERANCE_MS,
        pass: rtt_pass(med, base_med, expected, RTT_TOLERANCE_MS),
    };

    // b) loss.
    let l = imp("loss=1%")?;
    let em = Emulator::start(mode, a.stage, l.clone(), l, seed).await?;
    let (c, s, t, n) = (
        em.client.try_clone()?,
        em.server.try_clone()?,
        em.target,
        a.packets,
    );
    let received = blocking(move || one_way_count(c, s, t, n)).await?;
    let model_dropped = em.forward_stats().dropped_loss;
    drop(em);
    let n = u64::from(a.packets);
    // More than sent cannot arrive (no duplication is configured); stay total regardless.
    let lost = n.saturating_sub(received);
    let (lo, hi) = binomial_interval(n, LOSS_P);
    let loss = LossResult {
        setting: format!("loss=1% each way, {n} datagrams"),
        packets: n,
        received,
        lost,
        loss_percent: 100.0 * lost as f64 / n as f64,
        model_dropped,
        other_lost: lost.saturating_sub(model_dropped),
        expected_lost: n as f64 * LOSS_P,
        bound_lo: lo,
        bound_hi: hi,
        pass: loss_pass(lost, n, LOSS_P),
    };

    // c) rate.
    let r = imp("rate=20mbit")?;
    let em = Emulator::start(mode, a.stage, r.clone(), r, seed).await?;
    let (c, s, t, o) = (
        em.client.try_clone()?,
        em.server.try_clone()?,
        em.target,
        em.overhead,
    );
    let count = 5_000_000u64.div_ceil(BLAST_SIZE as u64);
    let b = blocking(move || {
        blast(
            c,
            s,
            t,
            o,
            count,
            Duration::from_secs(3),
            Duration::from_secs(8),
        )
    })
    .await?;
    drop(em);
    let measured = steady_rate_bps(&b.arrivals).unwrap_or(0.0);
    let rate = RateResult {
        setting: "rate=20mbit, unlimited queue, 5 MB".into(),
        datagram_bytes: BLAST_SIZE,
        counted_overhead_bytes: o,
        sent: b.sent,
        received: b.arrivals.len() as u64,
        measured_mbit: measured / 1e6,
        target_mbit: RATE_BPS / 1e6,
        bound_lo_mbit: RATE_BPS * (1.0 - RATE_TOLERANCE) / 1e6,
        bound_hi_mbit: RATE_BPS * (1.0 + RATE_TOLERANCE) / 1e6,
        pass: rate_pass(measured, RATE_BPS, RATE_TOLERANCE),
    };

    // d) ceiling.
    let em = Emulator::start(
        mode,
        a.stage,
        Impairment::default(),
        Impairment::default(),
        seed,
    )
    .await?;
    let (c, s, t, o) = (
        em.client.try_clone()?,
        em.server.try_clone()?,
        em.target,
        em.overhead,
    );
    let cpu0 = agentwire_measure::resources::self_cpu_seconds();
    let b = blocking(move || {
        blast(
            c,
            s,
            t,
            o,
            u64::MAX,
            Duration::from_secs(2),
            Duration::from_secs(5),
        )
    })
    .await?;
    let cpu1 = agentwire_measure::resources::self_cpu_seconds();
    drop(em);
    let received = b.arrivals.len() as u64;
    let span = match (b.arrivals.first(), b.arrivals.last()) {
        (Some(f), Some(l)) if l.0 > f.0 => l.0 - f.0,
        _ => b.send_secs,
    };
    let bytes: u64 = b.arrivals.iter().map(|x| x.1).sum();
    let ceiling = CeilingResult {
        setting: "no impairment, 1200-byte blast for 2 s".into(),
        datagram_bytes: BLAST_SIZE,
        seconds: span,
        sent: b.sent,
        received,
        sent_per_sec: b.sent as f64 / b.send_secs,
        packets_per_sec: received as f64 / span,
        mbit: bytes as f64 * 8.0 / span / 1e6,
        cpu_seconds: cpu0.zip(cpu1).map(|(a, b)| b - a),
        note: CEILING_NOTE,
    };
    Ok((rtt, loss, rate, ceiling))
}

fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}

fn print_table(r: &CheckReport) {
    println!("netsim check ({}), seed {}", r.mode_description, r.seed);
    if let Some(why) = &r.auto_fallback {
        println!("auto: socket mode because packet mode is unavailable: {why}");
    }
    let rows = [
        (
            "rtt",
            r.rtt.setting.clone(),
            format!(
                "added {:.2} ms (median {:.2}, min {:.2}, p99 {:.2}; baseline median {:.3})",
                r.rtt.added_ms,
                r.rtt.median_ms,
                r.rtt.min_ms,
                r.rtt.p99_ms,
                r.rtt.baseline_median_ms
            ),
            format!("50 ± {} ms", r.rtt.tolerance_ms),
            verdict(r.rtt.pass),
        ),
        (
            "loss",
            r.loss.setting.clone(),
            format!(
                "lost {} = {:.2} % (model dropped {}, other {})",
                r.loss.lost, r.loss.loss_percent, r.loss.model_dropped, r.loss.other_lost
            ),
            format!("{:.1}..={:.1}", r.loss.bound_lo, r.loss.bound_hi),
            verdict(r.loss.pass),
        ),
        (
            "rate",
            r.rate.setting.clone(),
            format!(
                "{:.2} Mbit/s ({} of {} datagrams arrived)",
                r.rate.measured_mbit, r.rate.received, r.rate.sent
            ),
            format!(
                "{:.0}..={:.0} Mbit/s",
                r.rate.bound_lo_mbit, r.rate.bound_hi_mbit
            ),
            verdict(r.rate.pass),
        ),
        (
            "ceiling",
            r.ceiling.setting.clone(),
            format!(
                "{:.0} pkt/s = {:.0} Mbit/s ({} of {} arrived), CPU {}",
                r.ceiling.packets_per_sec,
                r.ceiling.mbit,
                r.ceiling.received,
                r.ceiling.sent,
                r.ceiling
                    .cpu_seconds
                    .map_or("n/a".into(), |c| format!("{c:.2} s"))
            ),
            "reported".into(),
            "-",
        ),
    ];
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(0);
    let w3 = rows.iter().map(|r| r.3.len()).max().unwrap_or(0);
    println!(
        "{:<8} {:<w1$} {:<w2$} {:<w3$} result",
        "check", "setting", "measured", "bound"
    );
    for (a, b, c, d, e) in &rows {
        println!("{a:<8} {b:<w1$} {c:<w2$} {d:<w3$} {e}");
    }
    println!(
        "ceiling: {:.0} pkt/s, {:.0} Mbit/s of 1200-byte datagrams: {CEILING_NOTE} \
         (CPU counts the whole process: sender, receiver and emulator)",
        r.ceiling.packets_per_sec, r.ceiling.mbit
    );
    println!(
        "{} in {:.1} s",
        if r.passed {
            "all bounds PASS"
        } else {
            "FAILED"
        },
        r.total_seconds
    );
}

/// `agentwire netsim check`.
pub async fn check(a: CheckArgs) -> Result<()> {
    let started = Instant::now();
    let (mode, auto_fallback) = match a.mode {
        CheckMode::Socket => (Mode::Socket, None),
        CheckMode::Packet => {
            privileged(a.stage).map_err(|e| anyhow!("--mode packet: {e}"))?;
            (Mode::Packet, None)
        }
        CheckMode::Auto => match privileged(a.stage) {
            Ok(()) => (Mode::Packet, None),
            Err(e) => (Mode::Socket, Some(e)),
        },
    };
    let (rtt, loss, rate, ceiling) =
        tokio::time::timeout(Duration::from_secs(90), run_check(mode, &a))
            .await
            .map_err(|_| anyhow!("netsim check did not finish within 90 s"))??;
    let passed = rtt.pass && loss.pass && rate.pass;
    let report = CheckReport {
        mode,
        stage: (mode == Mode::Packet).then_some(a.stage),
        mode_description: mode.describe(a.stage),
        auto_fallback,
        seed: a.seed,
        rtt,
        loss,
        rate,
        ceiling,
        passed,
        total_seconds: started.elapsed().as_secs_f64(),
    };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(&report);
    }
    if !passed {
        let failed: Vec<&str> = [
            ("rtt", report.rtt.pass),
            ("loss", report.loss.pass),
            ("rate", report.rate.pass),
        ]
        .iter()
        .filter(|x| !x.1)
        .map(|x| x.0)
        .collect();
        bail!("netsim check failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Whether packet mode can run here; the error says why not (and points to the relay mode).
fn privileged(stage: agentwire_netsim::StageKind) -> std::result::Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        stage.check().map_err(|e| e.to_string())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = stage;
        Err("packet mode is Linux only; use `agentwire netsim relay ...`".into())
    }
}

// ---------------------------------------------------------------------------------------------
// netsim up
// ---------------------------------------------------------------------------------------------

/// `agentwire netsim up`: packet-level mode until Ctrl-C / SIGTERM.
#[cfg(not(target_os = "linux"))]
pub async fn up(_a: UpArgs) -> Result<()> {
    bail!("packet mode is Linux only; use `agentwire netsim relay ...`")
}

/// `agentwire netsim up`: packet-level mode until Ctrl-C / SIGTERM.
#[cfg(target_os = "linux")]
pub async fn up(a: UpArgs) -> Result<()> {
    use agentwire_netsim::packet::{
        check_impairment, DirectionStats, Offloads, StageOptions, Topology, CLIENT_ADDR,
        SERVER_ADDR,
    };
    use agentwire_netsim::stage::Stage;
    use tokio::signal::unix::{signal, SignalKind};

    // Signals first, so a Ctrl-C during setup still cleans up.
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;

    let forward = Spec::parse(&a.spec).context("--spec")?;
    let reverse = match &a.reverse_spec {
        Some(r) => Spec::parse(r).context("--reverse-spec")?,
        None => forward.clone(),
    };
    check_impairment(&forward.impairment).context("--spec")?;
    check_impairment(&reverse.impairment).context("--reverse-spec")?;
    let seed = a.seed.or(forward.seed).unwrap_or(0);
    let label = match &a.reverse_spec {
        None => format!("[{}]", a.spec.trim()),
        Some(r) => format!("[forward {}; reverse {}]", a.spec.trim(), r.trim()),
    };
    a.stage
        .check()
        .with_context(|| format!("netsim up ({} stage)", a.stage))?;

    let topo = match &a.name {
        Some(n) => Topology::named_with(n, a.stage.wiring())?,
        None => Topology::with_wiring(a.stage.wiring())?,
    };
    let (c, s) = (topo.client_ns().to_string(), topo.server_ns().to_string());
    if let Some(cc) = &a.tcp_cc {
        for ns in [&c, &s] {
            topo.set_tcp_congestion_control(ns, cc)
                .with_context(|| format!("--tcp-cc {cc} in {ns}"))?;
        }
    }
    let cc_c = topo.tcp_congestion_control(&c)?;
    let cc_s = topo.tcp_congestion_control(&s)?;
    let stage = Stage::start(
        a.stage,
        &topo,
        forward.impairment.clone(),
        reverse.impairment.clone(),
        seed,
    )?;

    println!(
        "netsim up (packet mode, {} stage): client ns {c} {CLIENT_ADDR} <-> server ns {s} \
         {SERVER_ADDR} {label}",
        a.stage
    );
    println!(
        "run the hub:   ip netns exec {s} agentwire hub --listen quic://{SERVER_ADDR}:4433 \
         --listen h2://{SERVER_ADDR}:4443 --cert-dir CERTS   \
         (make CERTS with: agentwire cert --out CERTS --name {SERVER_ADDR})"
    );
    println!(
        "run an agent:  ip netns exec {c} agentwire agent --hub quic://{SERVER_ADDR}:4433 \
         --ca CERTS/ca.pem --id a1"
    );
    println!("tcp congestion control: {c} {cc_c}, {s} {cc_s}");
    match topo.offloads() {
        Offloads::Disabled => {
            println!("offloads: segmentation and receive coalescing off on every veth end")
        }
        Offloads::Unchanged(why) => println!("offloads: left on ({why})"),
    }
    println!("Ctrl-C or SIGTERM removes the namespaces and their rules");

    fn dir_json(d: &DirectionStats) -> serde_json::Value {
        serde_json::json!({
            "link": d.link,
            "packets_handled": d.packets_handled,
            "packets_per_sec": d.packets_per_sec(),
            "held": d.held,
            "max_held": d.max_held,
            "verdict_errors": d.verdict_errors,
            "kernel_dropped": d.kernel_dropped,
            "oversize": d.oversize,
            "error": d.error,
        })
    }
    let interval = (a.stats_interval > 0).then(|| Duration::from_secs(a.stats_interval));
    let mut ticker = tokio::time::interval(interval.unwrap_or(Duration::from_secs(3600)));
    ticker.tick().await;
    let mut health = tokio::time::interval(Duration::from_secs(1));
    let queue_limit = StageOptions::default().queue_max_len as usize;
    let mut warned = false;
    let outcome: Result<()> = loop {
        tokio::select! {
            _ = interrupt.recv() => break Ok(()),
            _ = terminate.recv() => break Ok(()),
            _ = ticker.tick(), if interval.is_some() => {
                let st = stage.stats();
                let line = serde_json::json!({
                    "mode": "packet",
                    "client_to_server": dir_json(&st.client_to_server),
                    "server_to_client": dir_json(&st.server_to_client),
                });
                eprintln!("{line}");
            }
            _ = health.tick() => {
                let st = stage.stats();
                for (name, d) in [("client->server", &st.client_to_server), ("server->client", &st.server_to_client)] {
                    let overloaded = d.held >= queue_limit * 3 / 4 || d.verdict_errors > 0;
                    if overloaded && !warned {
                        eprintln!(
                            "WARNING: the emulator is the bottleneck ({name}: {} packets held of a \
                             {queue_limit}-packet queue, {} verdicts refused, {:.0} packets/s): \
                             results now measure the emulator, not the protocol",
                            d.held, d.verdict_errors, d.packets_per_sec()
                        );
                        warned = true;
                    }
                }
                if let Some(e) = st.client_to_server.error.or(st.server_to_client.error) {
                    break Err(anyhow!("packet stage stopped: {e}"));
                }
            }
        }
    };
    drop(stage);
    let middle = topo
        .middle_ns()
        .map(|m| format!(", {m}"))
        .unwrap_or_default();
    let removed = topo.remove();
    match (&outcome, removed) {
        (_, Ok(())) => println!("netsim up stopped: removed {c}, {s}{middle}"),
        (Ok(()), Err(e)) => return Err(anyhow!(e).context("removing the namespaces")),
        (Err(_), Err(e)) => eprintln!("error: removing the namespaces: {e}"),
    }
    outcome
}

/// `agentwire netsim relay`: socket relay mode (see `agentwire_netsim::relay`).
pub(crate) async fn relay(a: RelayArgs) -> Result<()> {
    use agentwire_netsim::relay::{tcp_ignores, TcpRelay, UdpRelay};
    use agentwire_netsim::Spec;

    let forward = Spec::parse(&a.spec).context("--spec")?;
    let reverse = match &a.reverse_spec {
        Some(r) => Spec::parse(r).context("--reverse-spec")?,
        None => forward.clone(),
    };
    let seed = a.seed.or(forward.seed).unwrap_or(0);
    let (want_udp, want_tcp) = if a.udp || a.tcp {
        (a.udp, a.tcp)
    } else {
        (true, true)
    };
    let label = match &a.reverse_spec {
        None => format!("[{}]", a.spec.trim()),
        Some(r) => format!("[forward {}; reverse {}]", a.spec.trim(), r.trim()),
    };

    let udp = if want_udp {
        let relay = UdpRelay::start(
            a.listen,
            a.to,
            forward.impairment.clone(),
            reverse.impairment.clone(),
            seed,
        )
        .await
        .with_context(|| format!("starting the UDP relay on {}", a.listen))?;
        println!(
            "netsim relay (socket mode) udp {} -> {} {label}",
            relay.local_addr(),
            a.to
        );
        Some(relay)
    } else {
        None
    };
    let tcp = if want_tcp {
        // With port 0, try the UDP relay's port first so both share one port number.
        let mut listen = a.listen;
        if let (0, Some(u)) = (listen.port(), &udp) {
            listen.set_port(u.local_addr().port());
        }
        let start = |l| {
            TcpRelay::start(
                l,
                a.to,
                forward.impairment.clone(),
                reverse.impairment.clone(),
                seed,
            )
        };
        let relay = match start(listen).await {
            Ok(r) => Ok(r),
            Err(_) if a.listen.port() == 0 => start(a.listen).await,
            Err(e) => Err(e),
        }
        .with_context(|| format!("starting the TCP relay on {listen}"))?;
        let ignored = if tcp_ignores(&forward.impairment) || tcp_ignores(&reverse.impairment) {
            " (loss/reorder/dup ignored on TCP)"
        } else {
            ""
        };
        println!(
            "netsim relay (socket mode) tcp {} -> {} {label}{ignored}",
            relay.local_addr(),
            a.to
        );
        Some(relay)
    } else {
        None
    };

    let interval = (a.stats_interval > 0).then(|| Duration::from_secs(a.stats_interval));
    until_stopped(interval, || {
        let line = serde_json::json!({
            "mode": "socket",
            "udp": udp.as_ref().map(|r| r.stats()),
            "tcp": tcp.as_ref().map(|r| r.stats()),
        });
        eprintln!("{line}");
        Ok(())
    })
    .await?;
    println!("netsim relay stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_interval_known_numbers() {
        // n = 10000, p = 0.01: mean 100, sd sqrt(99) = 9.9499, half 25.631.
        let (lo, hi) = binomial_interval(10_000, 0.01);
        assert!((lo - 74.369).abs() < 1e-3, "{lo}");
        assert!((hi - 125.631).abs() < 1e-3, "{hi}");
        // n = 2000: mean 20, half 2.576 × sqrt(19.8) = 11.4625.
        let (lo, hi) = binomial_interval(2_000, 0.01);
        assert!((lo - 8.5375).abs() < 1e-3 && (hi - 31.4625).abs() < 1e-3);
        assert_eq!(binomial_interval(100, 0.0), (0.0, 0.0));
    }

    #[test]
    fn loss_pass_and_fail() {
        assert!(loss_pass(100, 10_000, 0.01));
        assert!(loss_pass(75, 10_000, 0.01));
        assert!(loss_pass(125, 10_000, 0.01));
        assert!(!loss_pass(74, 10_000, 0.01));
        assert!(!loss_pass(126, 10_000, 0.01));
        assert!(!loss_pass(0, 10_000, 0.01));
        assert!(loss_pass(9, 2_000, 0.01) && !loss_pass(8, 2_000, 0.01));
        assert!(loss_pass(31, 2_000, 0.01) && !loss_pass(32, 2_000, 0.01));
    }

    #[test]
    fn rtt_pass_and_fail() {
        assert!(rtt_pass(50.3, 0.05, 50.0, 1.0));
        assert!(rtt_pass(51.0, 0.0, 50.0, 1.0));
        assert!(rtt_pass(49.0, 0.0, 50.0, 1.0));
        assert!(!rtt_pass(51.2, 0.1, 50.0, 1.0));
        assert!(!rtt_pass(48.9, 0.0, 50.0, 1.0));
    }

    #[test]
    fn rate_pass_and_fail() {
        assert!(rate_pass(20e6, 20e6, 0.05));
        assert!(rate_pass(19.0e6, 20e6, 0.05) && rate_pass(21.0e6, 20e6, 0.05));
        assert!(!rate_pass(18.9e6, 20e6, 0.05) && !rate_pass(21.1e6, 20e6, 0.05));
        assert!(!rate_pass(0.0, 20e6, 0.05));
    }

    #[test]
    fn median_and_percentile() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(median(&v), 100.5);
        assert_eq!(percentile(&v, 0.99), 198.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 1.0), 200.0);
        assert_eq!(median(&[3.0]), 3.0);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn steady_rate_of_a_uniform_trace() {
        // 1000 arrivals of 1250 bytes every 0.5 ms = 20 Mbit/s; a slow start is cut off.
        let mut trace: Vec<(f64, u64)> =
            (0..1000).map(|i| (1.0 + i as f64 * 0.0005, 1250)).collect();
        trace[0].0 = 0.0;
        let r = steady_rate_bps(&trace).unwrap();
        assert!((r - 20e6).abs() < 1.0, "{r}");
        assert_eq!(steady_rate_bps(&trace[..10]), None);
    }
}
