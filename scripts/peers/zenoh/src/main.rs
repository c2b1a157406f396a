//! zenohbench: Zenoh in agentwire bench's shapes, for scripts/peers/zenoh.sh.
//!
//! `zenohbench router --listen ENDPOINT... [--cert PEM --key PEM]` runs the zenoh crate's
//! router (the runtime `zenohd` runs, without its plugins) until it is killed: the hub's
//! counterpart. `zenohbench run --connect ENDPOINT --pattern P ...` opens client sessions to it
//! (one per agent, each its own connection) and drives one of the bench's patterns:
//!
//! - request: N clients each keep W gets in flight on `bench/echo`; echo queryables (one session
//!   each, one per ten clients) answer with the query's payload.
//! - fanout: one publisher, N subscribers of `bench/fanout`.
//! - gather: N publishers, one subscriber of `bench/gather`.
//! - stream: N pairs, publisher i to its subscriber on `bench/stream/i`.
//!
//! In the one-way patterns each sender keeps at most W messages its pacing receiver (the first
//! subscriber, the aggregator, its own receiver) has not yet received, and each body starts
//! with its sender (u32), sequence (u64) and send time (u64, ns), big-endian, as in agentwire
//! bench and natsbench. Puts use congestion control `Block` (the default, `Drop`, would drop
//! what agentwire and NATS deliver). After a warm-up it counts deliveries (round trips) of the
//! measured window and prints one JSON line; every loop stops by itself at the window's end.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use zenoh::qos::CongestionControl;
use zenoh::query::{ConsolidationMode, QueryTarget};
use zenoh::{Session, Wait};

const HEADER: usize = 20;
/// The sender index of the probes that check every subscription is in place.
const PROBE: u32 = u32::MAX;

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("zenohbench: {message}");
    std::process::exit(1)
}

/// A flag's value: `--name value`.
fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Every value of a repeated flag.
fn flags(args: &[String], name: &str) -> Vec<String> {
    args.windows(2)
        .filter(|w| w[0] == name)
        .map(|w| w[1].clone())
        .collect()
}

fn number(args: &[String], name: &str, default: u64) -> u64 {
    match flag(args, name) {
        None => default,
        Some(v) => v
            .parse()
            .unwrap_or_else(|_| fail(format!("{name} {v:?}: not a number"))),
    }
}

fn config(mode: &str, args: &[String]) -> zenoh::Config {
    let mut c = zenoh::Config::default();
    let mut set = |key: &str, value: String| {
        if let Err(e) = c.insert_json5(key, &value) {
            fail(format!("config {key}: {e}"));
        }
    };
    set("mode", format!("{mode:?}"));
    set("scouting/multicast/enabled", "false".into());
    let quote = |v: Vec<String>| format!("{v:?}");
    if mode == "router" {
        set("listen/endpoints", quote(flags(args, "--listen")));
        if let (Some(cert), Some(key)) = (flag(args, "--cert"), flag(args, "--key")) {
            set("transport/link/tls/listen_certificate", format!("{cert:?}"));
            set("transport/link/tls/listen_private_key", format!("{key:?}"));
        }
    } else {
        set("connect/endpoints", quote(flags(args, "--connect")));
        if let Some(ca) = flag(args, "--ca") {
            set("transport/link/tls/root_ca_certificate", format!("{ca:?}"));
        }
    }
    c
}

/// This process's user and system CPU so far, seconds (from /proc/self/stat).
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

#[derive(Default)]
struct Latencies(Mutex<Vec<u64>>);

impl Latencies {
    fn add(&self, us: u64) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(us);
    }
    fn percentiles(&self) -> (f64, f64, f64) {
        let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        v.sort_unstable();
        let p = |q: f64| {
            if v.is_empty() {
                0.0
            } else {
                v[(q * (v.len() - 1) as f64) as usize] as f64 / 1000.0
            }
        };
        (p(0.5), p(0.9), p(0.99))
    }
}

async fn open(args: &[String], name: &str) -> Session {
    zenoh::open(config("client", args))
        .await
        .unwrap_or_else(|e| fail(format!("opening {name}'s session: {e}")))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("router") => {
            let _router = zenoh::open(config("router", &args))
                .await
                .unwrap_or_else(|e| fail(format!("starting the router: {e}")));
            println!("router up");
            let _ = tokio::signal::ctrl_c().await;
        }
        Some("run") => run(&args).await,
        _ => fail("usage: zenohbench router --listen ENDPOINT... [--cert PEM --key PEM] | run --connect ENDPOINT [--ca PEM] --pattern request|fanout|gather|stream --clients N --window W --size BYTES --warmup-ms MS --duration-ms MS"),
    }
}

async fn run(args: &[String]) {
    let pattern = flag(args, "--pattern").unwrap_or_else(|| "request".into());
    let n = number(args, "--clients", 10) as usize;
    let window = number(args, "--window", 16);
    let size = number(args, "--size", 1024) as usize;
    let warmup = Duration::from_millis(number(args, "--warmup-ms", 1000));
    let duration = Duration::from_millis(number(args, "--duration-ms", 5000));
    let (completed, errors, lat, elapsed, client_cpu) = match pattern.as_str() {
        "request" => request(args, n, window as usize, size, warmup, duration).await,
        "fanout" | "gather" | "stream" => {
            one_way(args, &pattern, n, window, size, warmup, duration).await
        }
        p => fail(format!(
            "--pattern {p:?}: request, fanout, gather or stream"
        )),
    };
    let (p50, p90, p99) = lat.percentiles();
    let endpoint = flags(args, "--connect").join(",");
    let out = serde_json::json!({
        "pattern": pattern, "server": endpoint, "clients": n, "window": window, "size": size,
        "duration_ms": elapsed.as_millis() as u64, "completed": completed, "errors": errors,
        "msg_per_sec": completed as f64 / elapsed.as_secs_f64(),
        "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "client_cpu_secs": client_cpu,
    });
    println!("{out}");
    std::process::exit(0);
}

type Outcome = (u64, u64, Arc<Latencies>, Duration, f64);

async fn request(
    args: &[String],
    n: usize,
    window: usize,
    size: usize,
    warmup: Duration,
    duration: Duration,
) -> Outcome {
    let workers = n.div_ceil(10).max(1);
    let mut sessions = Vec::new();
    for w in 0..workers {
        let s = open(args, &format!("worker-{w}")).await;
        s.declare_queryable("bench/echo")
            .callback(|query| {
                let body = query
                    .payload()
                    .map(|p| p.to_bytes().into_owned())
                    .unwrap_or_default();
                let _ = query.reply(query.key_expr().clone(), body).wait();
            })
            .background()
            .await
            .unwrap_or_else(|e| fail(format!("declaring the queryable: {e}")));
        sessions.push(s);
    }
    // Ask until a queryable answers: a get the router routes before it knows one goes
    // unanswered.
    let probe = open(args, "probe").await;
    let probe_until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(replies) = probe
            .get("bench/echo")
            .timeout(Duration::from_millis(500))
            .await
        {
            if matches!(replies.recv_async().await, Ok(reply) if reply.result().is_ok()) {
                break;
            }
        }
        if Instant::now() > probe_until {
            fail("no queryable answered in 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sessions.push(probe);
    let measuring = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let lat = Arc::new(Latencies::default());
    let stop = Instant::now() + warmup + duration;
    let mut tasks = Vec::new();
    for c in 0..n {
        let s = open(args, &format!("client-{c}")).await;
        for _ in 0..window {
            let (s, measuring, completed, errors, lat) = (
                s.clone(),
                measuring.clone(),
                completed.clone(),
                errors.clone(),
                lat.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let body = vec![7u8; size];
                while Instant::now() < stop {
                    let start = Instant::now();
                    let ok = match s
                        .get("bench/echo")
                        .payload(body.clone())
                        .target(QueryTarget::BestMatching)
                        .consolidation(ConsolidationMode::None)
                        .congestion_control(CongestionControl::Block)
                        .timeout(Duration::from_secs(5))
                        .await
                    {
                        Ok(replies) => matches!(
                            replies.recv_async().await,
                            Ok(reply) if reply.result().is_ok()
                        ),
                        Err(_) => false,
                    };
                    if !measuring.load(Ordering::Relaxed) {
                        continue;
                    }
                    if ok {
                        completed.fetch_add(1, Ordering::Relaxed);
                        lat.add(start.elapsed().as_micros() as u64);
                    } else {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        sessions.push(s);
    }
    tokio::time::sleep(warmup).await;
    let cpu0 = cpu_secs();
    measuring.store(true, Ordering::Relaxed);
    let began = Instant::now();
    tokio::time::sleep(duration).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = began.elapsed();
    let cpu = cpu_secs() - cpu0;
    for t in tasks {
        let _ = t.await;
    }
    let done = completed.load(Ordering::Relaxed);
    (done, errors.load(Ordering::Relaxed), lat, elapsed, cpu)
}

struct Shared {
    base: Instant,
    start_ns: AtomicI64,
    end_ns: AtomicI64,
    progress: Vec<AtomicU64>,
    wake: Vec<Notify>,
    delivered: AtomicU64,
    lat: Arc<Latencies>,
    /// Receivers that have seen a probe.
    probed: Vec<AtomicBool>,
}

impl Shared {
    fn now_ns(&self) -> i64 {
        self.base.elapsed().as_nanos() as i64
    }
    fn in_window(&self, ns: i64) -> bool {
        ns >= self.start_ns.load(Ordering::Relaxed) && ns < self.end_ns.load(Ordering::Relaxed)
    }
}

async fn one_way(
    args: &[String],
    pattern: &str,
    n: usize,
    window: u64,
    size: usize,
    warmup: Duration,
    duration: Duration,
) -> Outcome {
    let size = size.max(HEADER);
    let (senders, receivers, fanout) = match pattern {
        "fanout" => (1, n, n as u64),
        "gather" => (n, 1, 1),
        _ => (n, n, 1),
    };
    let key = |i: usize| match pattern {
        "fanout" => "bench/fanout".to_string(),
        "gather" => "bench/gather".to_string(),
        _ => format!("bench/stream/{i}"),
    };
    // Sender s is paced by receiver s (stream) or by the first receiver.
    let pattern_is_stream = pattern == "stream";
    let shared = Arc::new(Shared {
        base: Instant::now(),
        start_ns: AtomicI64::new(i64::MAX),
        end_ns: AtomicI64::new(i64::MAX),
        progress: (0..senders).map(|_| AtomicU64::new(0)).collect(),
        wake: (0..senders).map(|_| Notify::new()).collect(),
        delivered: AtomicU64::new(0),
        lat: Arc::new(Latencies::default()),
        probed: (0..receivers).map(|_| AtomicBool::new(false)).collect(),
    });
    let mut sessions = Vec::new();
    for r in 0..receivers {
        let s = open(args, &format!("receiver-{r}")).await;
        let sh = shared.clone();
        s.declare_subscriber(key(r))
            .callback(move |sample| {
                let body = sample.payload().to_bytes();
                if body.len() < HEADER {
                    return;
                }
                let sender = u32::from_be_bytes(body[0..4].try_into().unwrap());
                if sender == PROBE {
                    sh.probed[r].store(true, Ordering::Relaxed);
                    return;
                }
                let sender = sender as usize;
                let sent = u64::from_be_bytes(body[12..20].try_into().unwrap()) as i64;
                let paces = if pattern_is_stream {
                    sender == r
                } else {
                    r == 0
                };
                if sender < sh.progress.len() && paces {
                    sh.progress[sender].fetch_add(1, Ordering::Release);
                    sh.wake[sender].notify_one();
                }
                if sh.in_window(sent) {
                    let us = (sh.now_ns() - sent).max(0) as u64 / 1000;
                    sh.lat.add(us);
                    sh.delivered.fetch_add(1, Ordering::Relaxed);
                }
            })
            .background()
            .await
            .unwrap_or_else(|e| fail(format!("subscribing: {e}")));
        sessions.push(s);
    }
    // Every sender probes until every receiver has seen a probe: a put the router routes before
    // it knows a subscription is not delivered, and would stall the pacing.
    let mut publishers = Vec::new();
    for s in 0..senders {
        let session = open(args, &format!("sender-{s}")).await;
        let publisher = session
            .declare_publisher(key(s))
            .congestion_control(CongestionControl::Block)
            .await
            .unwrap_or_else(|e| fail(format!("declaring the publisher: {e}")));
        publishers.push(publisher);
        sessions.push(session);
    }
    let probe_until = Instant::now() + Duration::from_secs(30);
    let mut probe = vec![0u8; HEADER];
    probe[0..4].copy_from_slice(&PROBE.to_be_bytes());
    while !shared.probed.iter().all(|p| p.load(Ordering::Relaxed)) {
        if Instant::now() > probe_until {
            fail("a receiver saw no probe in 30 s");
        }
        for publisher in &publishers {
            let _ = publisher.put(probe.clone()).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + warmup + duration;
    let mut tasks = Vec::new();
    for (s, publisher) in publishers.into_iter().enumerate() {
        let (sh, sent) = (shared.clone(), sent.clone());
        tasks.push(tokio::spawn(async move {
            let mut body = vec![0u8; size];
            body[0..4].copy_from_slice(&(s as u32).to_be_bytes());
            let mut seq: u64 = 0;
            while Instant::now() < stop {
                while seq >= sh.progress[s].load(Ordering::Acquire) + window {
                    let woken = sh.wake[s].notified();
                    if seq < sh.progress[s].load(Ordering::Acquire) + window {
                        break;
                    }
                    if tokio::time::timeout(Duration::from_secs(5), woken)
                        .await
                        .is_err()
                        || Instant::now() >= stop
                    {
                        return;
                    }
                }
                let ns = sh.now_ns();
                body[4..12].copy_from_slice(&seq.to_be_bytes());
                body[12..20].copy_from_slice(&(ns as u64).to_be_bytes());
                if publisher.put(body.clone()).await.is_err() {
                    return;
                }
                if sh.in_window(ns) {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                seq += 1;
            }
        }));
    }
    tokio::time::sleep(warmup).await;
    let start = shared.now_ns();
    shared.start_ns.store(start, Ordering::Relaxed);
    shared
        .end_ns
        .store(start + duration.as_nanos() as i64, Ordering::Relaxed);
    let cpu0 = cpu_secs();
    tokio::time::sleep(duration).await;
    let cpu = cpu_secs() - cpu0;
    for t in tasks {
        let _ = t.await;
    }
    // Drain: every message sent in the window at every receiver it is for, or a second of quiet.
    let expected = sent.load(Ordering::Relaxed) * fanout;
    let (mut last, mut quiet) = (shared.delivered.load(Ordering::Relaxed), Instant::now());
    while shared.delivered.load(Ordering::Relaxed) < expected
        && quiet.elapsed() < Duration::from_secs(1)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let d = shared.delivered.load(Ordering::Relaxed);
        if d != last {
            (last, quiet) = (d, Instant::now());
        }
    }
    let got = shared.delivered.load(Ordering::Relaxed);
    (
        got,
        expected.saturating_sub(got),
        shared.lat.clone(),
        duration,
        cpu,
    )
}
