//! Abuse: many connections at once, each sending one huge frame before any hello, against a hub
//! in another process. Measures the hub's peak memory (its RSS, from /proc) and checks that an
//! honest agent is served afterwards.
//!
//! Run by `scripts/faults/pre-hello-flood.sh`, which starts the hub; by hand:
//!
//!     agentwire cert --out /tmp/aw-certs
//!     agentwire hub --listen quic://127.0.0.1:4433 --cert-dir /tmp/aw-certs &
//!     cargo run --release -p agentwire --example pre_hello_flood -- \
//!         quic://127.0.0.1:4433 /tmp/aw-certs/ca.pem $(pgrep -f 'agentwire hub') 500 16777216
//!
//! Arguments: hub URL (quic://, h2:// or wss://), CA file, hub PID, connections, frame bytes.
//! Prints one JSON object.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire::transport::dial::{Dial, DialTarget, H2Dial, WsDial};
use agentwire::transport::quic::QuicDial;
use agentwire::transport::TransportKind;
use agentwire::{tls, Agent, AgentOptions, HubTrust, HubUrl, QuicSettings};
use bytes::Bytes;

/// The hub's resident set now, bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

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

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, ca, pid, connections, frame_bytes] = args.as_slice() else {
        eprintln!("usage: pre_hello_flood HUB_URL CA_FILE HUB_PID CONNECTIONS FRAME_BYTES");
        std::process::exit(2);
    };
    let hub_url = HubUrl::parse(url).expect("a hub URL");
    let pid: u32 = pid.parse().unwrap();
    let connections: usize = connections.parse().unwrap();
    let frame_bytes: usize = frame_bytes.parse().unwrap();
    let trust = HubTrust::ca_file(std::path::Path::new(ca)).unwrap();
    let addr = hub_url.resolve().await.unwrap();
    let dial = Arc::new(match hub_url.transport {
        TransportKind::Quic => Flood::Quic(Box::new(
            QuicDial::new(
                "127.0.0.1:0".parse().unwrap(),
                &QuicSettings::default(),
                tls::server_verifier(&trust).unwrap(),
            )
            .unwrap(),
        )),
        TransportKind::Http2 => Flood::H2(H2Dial {
            tls: Arc::new(
                tls::client_config(&trust, &[agentwire::transport::h2::ALPN_H2]).unwrap(),
            ),
        }),
        TransportKind::WebSocket => Flood::Ws(WsDial {
            tls: Some(Arc::new(
                tls::client_config(&trust, &[agentwire::transport::ws::ALPN_HTTP11]).unwrap(),
            )),
            options: Default::default(),
        }),
        other => panic!("{other:?} is not flooded here"),
    });
    // One frame shared by every connection: a hello-typed frame of `frame_bytes`.
    let mut frame = Vec::with_capacity(frame_bytes);
    frame.extend_from_slice(&u32::try_from(frame_bytes - 4).unwrap().to_be_bytes());
    frame.push(agentwire_proto::FrameType::Hello as u8);
    frame.resize(frame_bytes, 0);
    let frame = Bytes::from(frame);

    let idle = rss(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = std::thread::spawn({
        let stop = stop.clone();
        move || {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(rss(pid));
                std::thread::sleep(Duration::from_millis(10));
            }
            peak.max(rss(pid))
        }
    });
    let started = Instant::now();
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
            tokio::spawn(flood_one(dial.clone(), target, frame.clone()))
        })
        .collect();
    let mut refused = 0;
    let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
    for t in tasks {
        if let Ok(Outcome::Refused(why)) = t.await {
            refused += 1;
            *reasons.entry(why).or_default() += 1;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let peak = watcher.join().unwrap();
    // The hub still serves an honest agent.
    let mut opts = AgentOptions::new("honest", url.clone(), trust);
    opts.connect_timeout = Duration::from_secs(10);
    // (Connected means the hub read its hello and welcomed it.)
    let honest = match Agent::connect(opts).await {
        Ok(agent) => {
            agent.close().await;
            true
        }
        Err(_) => false,
    };
    println!(
        "{}",
        serde_json::json!({
            "url": url,
            "connections": connections,
            "frame_bytes": frame_bytes,
            "refused": refused,
            "refused_with": reasons,
            "hub_idle_rss_bytes": idle,
            "hub_peak_rss_bytes": peak,
            "seconds": seconds,
            "honest_agent_served": honest,
        })
    );
}
