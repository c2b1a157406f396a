//! Abuse: many connections at once, each sending one huge frame before any hello, against a hub
//! in another process. Measures the hub's peak memory (its RSS, from /proc), and what two honest
//! agents get done (request/reply, 16 in flight, 1 KiB) in interleaved rounds: for SECONDS
//! without the flood, then for SECONDS while waves of it (CONNECTIONS at once each) come back
//! to back, a new wave as soon as the last one ended, so that the window does not shrink as
//! the hub's defence gets better. `WAVES=1` measures while one wave lasts instead (the first
//! version of this measurement). Flood connections still going at the end of the window are
//! dropped.
//!
//! Run by `scripts/faults/pre-hello-flood.sh`, which starts the hub; by hand:
//!
//!     agentwire cert --out /tmp/aw-certs
//!     agentwire hub --listen quic://127.0.0.1:4433 --cert-dir /tmp/aw-certs &
//!     cargo run --release -p agentwire --example pre_hello_flood -- \
//!         quic://127.0.0.1:4433 /tmp/aw-certs/ca.pem $(pgrep -f 'agentwire hub') 500 16777216 5 3
//!
//! Arguments: hub URL (quic://, h2:// or wss://), CA file, hub PID, connections, frame bytes,
//! seconds per measurement, rounds. Prints one JSON object.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire::transport::dial::{Dial, DialTarget, H2Dial, WsDial};
use agentwire::transport::quic::QuicDial;
use agentwire::transport::TransportKind;
use agentwire::{tls, Agent, AgentOptions, HubTrust, HubUrl, Kind, QuicSettings};
use bytes::Bytes;

#[path = "support/rss.rs"]
mod rss;
use rss::rss;
#[path = "support/honest.rs"]
mod honest;
use honest::honest;

/// How one connection's attempt ended.
enum Outcome {
    /// Connected, sent (part of) the frame, and the hub ended the connection.
    Refused(String),
    /// The hub welcomed it, or did not end it within a minute.
    Taken,
}

/// One connection's attempt: connects and sends `frame` as its first (hello) frame, then waits
/// for the hub to end the connection.
async fn flood_one(dial: Arc<Flood>, target: DialTarget, frame: Bytes) -> Outcome {
    let attempt = async {
        let dialed = match &*dial {
            Flood::Quic(d) => d.dial(&target, frame).await,
            Flood::H2(d) => d.dial(&target, frame).await,
            Flood::Ws(d) => d.dial(&target, frame).await,
        };
        let mut dialed = match dialed {
            Ok(d) => d,
            // Ended by the hub while sending.
            Err(e) => return Outcome::Refused(e.to_string()),
        };
        use agentwire::transport::FrameReceiver;
        // Whatever comes back, the connection should end: a welcome would be a failure.
        loop {
            match dialed.receiver.recv_frame().await {
                Ok(Some(f)) if f.type_byte == agentwire_proto::FrameType::Welcome as u8 => {
                    return Outcome::Taken
                }
                Ok(Some(_)) => continue,
                Ok(None) => return Outcome::Refused("closed".into()),
                Err(e) => return Outcome::Refused(e.to_string()),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), attempt)
        .await
        .unwrap_or(Outcome::Taken)
}

enum Flood {
    Quic(Box<QuicDial>),
    H2(H2Dial),
    Ws(WsDial),
}

/// Waves of `connections` attempts at once, one after another until `until` (or one wave, if
/// `until` is `None`); the attempts started, the number refused in the waves that ended, and
/// why. Attempts still going at `until` are dropped (their connections close).
async fn waves(
    dial: &Arc<Flood>,
    addr: std::net::SocketAddr,
    connections: usize,
    frame: &Bytes,
    until: Option<Instant>,
    reasons: &mut std::collections::BTreeMap<String, usize>,
) -> (usize, usize) {
    let (mut attempts, mut refused) = (0, 0);
    // Bounded in count too: at most 1,000 waves.
    for _ in 0..1000 {
        attempts += connections;
        let wave = wave(dial, addr, connections, frame, reasons);
        let r = match until {
            None => wave.await,
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, wave).await {
                    Ok(done) => done,
                    // Cut at the end of the window: this wave's refusals are not counted.
                    Err(_) => break,
                }
            }
        };
        refused += r;
        if until.is_none_or(|u| Instant::now() >= u) {
            break;
        }
    }
    (attempts, refused)
}

/// One wave: `connections` attempts at once; the number refused (and why). Dropping it
/// mid-way aborts the attempts still going.
async fn wave(
    dial: &Arc<Flood>,
    addr: std::net::SocketAddr,
    connections: usize,
    frame: &Bytes,
    reasons: &mut std::collections::BTreeMap<String, usize>,
) -> usize {
    let tasks: Vec<_> = (0..connections)
        .map(|i| {
            let target = DialTarget {
                addr: Some(addr),
                path: None,
                host: "localhost".into(),
                server_name: "localhost".into(),
                agent_id: format!("flood-{i}"),
                zero_rtt: false,
                mapping: Default::default(),
            };
            AbortOnDrop(tokio::spawn(flood_one(dial.clone(), target, frame.clone())))
        })
        .collect();
    let mut refused = 0;
    for mut t in tasks {
        if let Ok(Outcome::Refused(why)) = (&mut t.0).await {
            refused += 1;
            *reasons.entry(why).or_default() += 1;
        }
    }
    refused
}

/// A flood attempt's task, aborted when the wave is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<Outcome>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn watch_rss(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    rss::watch_rss(pid, stop, Duration::from_millis(10))
}

/// The dialer of `transport`, trusting `trust`. (Made on the runtime the flood runs on: a QUIC
/// endpoint's driver runs where it was made.)
fn dialer(transport: TransportKind, trust: &HubTrust) -> Flood {
    match transport {
        TransportKind::Quic => Flood::Quic(Box::new(
            QuicDial::new(
                "127.0.0.1:0".parse().unwrap(),
                &QuicSettings::default(),
                tls::server_verifier(trust).unwrap(),
            )
            .unwrap(),
        )),
        TransportKind::Http2 => Flood::H2(H2Dial {
            tls: Arc::new(tls::client_config(trust, &[agentwire::transport::h2::ALPN_H2]).unwrap()),
        }),
        TransportKind::WebSocket => Flood::Ws(WsDial {
            tls: Some(Arc::new(
                tls::client_config(trust, &[agentwire::transport::ws::ALPN_HTTP11]).unwrap(),
            )),
            options: Default::default(),
        }),
        other => panic!("{other:?} is not flooded here"),
    }
}

/// Keeps the calling thread on CPU `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set, CPU_SET writes within it, and
    // sched_setaffinity(0, ..) reads it for the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("cannot pin the flood to CPU {cpu}");
        }
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, ca, pid, connections, frame_bytes, secs, rounds] = args.as_slice() else {
        eprintln!(
            "usage: pre_hello_flood HUB_URL CA_FILE HUB_PID CONNECTIONS FRAME_BYTES SECONDS ROUNDS"
        );
        std::process::exit(2);
    };
    let hub_url = HubUrl::parse(url).expect("a hub URL");
    let pid: u32 = pid.parse().unwrap();
    let connections: usize = connections.parse().unwrap();
    let frame_bytes: usize = frame_bytes.parse().unwrap();
    let secs: f64 = secs.parse().unwrap();
    let rounds: usize = rounds.parse().unwrap();
    let one_wave = std::env::var("WAVES").is_ok_and(|w| w == "1");
    let trust = HubTrust::ca_file(std::path::Path::new(ca)).unwrap();
    let addr = hub_url.resolve().await.unwrap();
    // With FLOOD_CPU=N the flood runs on a runtime of its own, pinned to CPU N (the script runs
    // the hub and this process on another one), so that the honest agents' throughput shows
    // the hub's cost of the flood, not the flooder's.
    let flood_rt = std::env::var("FLOOD_CPU").ok().map(|cpu| {
        let cpu: usize = cpu.parse().expect("FLOOD_CPU is a CPU number");
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .on_thread_start(move || pin_to(cpu))
            .build()
            .unwrap()
    });
    let flood_handle = flood_rt
        .as_ref()
        .map_or_else(tokio::runtime::Handle::current, |rt| rt.handle().clone());
    let make_dial = {
        let (trust, transport) = (trust.clone(), hub_url.transport);
        async move { Arc::new(dialer(transport, &trust)) }
    };
    let dial = flood_handle.spawn(make_dial).await.unwrap();
    // One frame shared by every connection: a hello-typed frame of `frame_bytes`.
    let mut frame = Vec::with_capacity(frame_bytes);
    frame.extend_from_slice(&u32::try_from(frame_bytes - 4).unwrap().to_be_bytes());
    frame.push(agentwire_proto::FrameType::Hello as u8);
    frame.resize(frame_bytes, 0);
    let frame = Bytes::from(frame);

    // Two honest agents over the same transport: an echo and an asker.
    let opts = |id: &str| {
        let mut o = AgentOptions::new(id, url.clone(), trust.clone());
        o.connect_timeout = Duration::from_secs(10);
        o
    };
    let me = std::process::id();
    let (echo_id, asker_id) = (format!("echo-{me}"), format!("asker-{me}"));
    let mut echo = Agent::connect(opts(&echo_id))
        .await
        .expect("the echo agent connects");
    tokio::spawn(async move {
        while let Some(m) = echo.recv().await {
            if m.envelope.kind == Kind::Request {
                let body = m.envelope.body.clone();
                let _ = m.reply(body).await;
            }
        }
    });
    let asker = Agent::connect(opts(&asker_id))
        .await
        .expect("the asker connects");

    let idle = rss(pid);
    let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
    let mut out = Vec::new();
    for _ in 0..rounds {
        // Without the flood, for `secs`.
        let stop = Arc::new(AtomicBool::new(false));
        let watch = watch_rss(pid, stop.clone());
        let never = Arc::new(AtomicBool::new(true));
        let clean = honest(asker.handle().clone(), echo_id.clone(), Some(secs), never).await;
        stop.store(true, Ordering::Relaxed);
        let clean_peak = watch.join().unwrap();

        // While the flood's waves come, for `secs` (or while one wave lasts, with WAVES=1).
        let stop = Arc::new(AtomicBool::new(false));
        let watch = watch_rss(pid, stop.clone());
        let going = Arc::new(AtomicBool::new(true));
        let measuring = tokio::spawn(honest(
            asker.handle().clone(),
            echo_id.clone(),
            None,
            going.clone(),
        ));
        let started = Instant::now();
        let refused = {
            let (dial, frame) = (dial.clone(), frame.clone());
            let until = (!one_wave).then(|| started + Duration::from_secs_f64(secs));
            let (attempts, refused, wave_reasons) = flood_handle
                .spawn(async move {
                    let mut reasons = std::collections::BTreeMap::new();
                    let (attempts, refused) =
                        waves(&dial, addr, connections, &frame, until, &mut reasons).await;
                    (attempts, refused, reasons)
                })
                .await
                .unwrap();
            for (k, v) in wave_reasons {
                *reasons.entry(k).or_default() += v;
            }
            (attempts, refused)
        };
        let (attempts, refused) = refused;
        let flood_secs = started.elapsed().as_secs_f64();
        going.store(false, Ordering::Relaxed);
        let during = measuring.await.unwrap();
        stop.store(true, Ordering::Relaxed);
        let flood_peak = watch.join().unwrap();
        out.push(serde_json::json!({
            "clean_requests_per_sec": clean,
            "clean_peak_rss_bytes": clean_peak,
            "during_flood_requests_per_sec": during,
            "flood_peak_rss_bytes": flood_peak,
            "flood_connections": attempts,
            "flood_refused": refused,
            "flood_seconds": flood_secs,
        }));
    }
    // The hub still serves a newcomer: at once without a rate of set-ups, or once the
    // connections queued before it have had their turn (at most a minute).
    let asked = Instant::now();
    let mut newcomer = opts("newcomer");
    newcomer.connect_timeout = Duration::from_secs(60);
    let honest_after = match Agent::connect(newcomer).await {
        Ok(agent) => {
            agent.close().await;
            true
        }
        Err(_) => false,
    };
    let newcomer_secs = asked.elapsed().as_secs_f64();
    if let Some(rt) = flood_rt {
        rt.shutdown_background();
    }
    println!(
        "{}",
        serde_json::json!({
            "url": url,
            "connections_per_wave": connections,
            "waves": if one_wave { "one" } else { "back to back for the window" },
            "frame_bytes": frame_bytes,
            "seconds": secs,
            "hub_idle_rss_bytes": idle,
            "rounds": out,
            "refused_with": reasons,
            "newcomer_served_after": honest_after,
            "newcomer_seconds": newcomer_secs,
        })
    );
}
