//! Abuse: agents that say hello and never read, while large events queue for them at a hub
//! running in another process. Measures the hub's memory (its RSS, from /proc) and what two
//! honest agents get done meanwhile, in interleaved rounds with and without the abusers.
//!
//! Run by `scripts/faults/slow-reader.sh`, which starts the hub; by hand:
//!
//!     agentwire hub --listen unix:///tmp/aw.sock --hub-queue-bytes 268435456 &
//!     cargo run --release -p agentwire --example slow_reader -- \
//!         unix:///tmp/aw.sock $(pgrep -f 'agentwire hub') 4 200 8388608 5 3
//!
//! Arguments: hub URL (unix://), hub PID, abusers, events per round, event bytes, seconds per
//! measurement, rounds. Prints one JSON object.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire::{Agent, AgentOptions, Connector, Destination, HubTrust, HubUrl, Kind};
use agentwire_proto::{Codec, Frame, Hello};

#[path = "support/rss.rs"]
mod rss;
use rss::rss;
#[path = "support/honest.rs"]
mod honest;

/// Highest RSS of `pid` seen until `stop` is set, sampled every 20 ms.
fn watch_rss(pid: u32, stop: Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<u64> {
    rss::watch_rss(pid, stop, Duration::from_millis(20))
}

/// Requests from `asker` to `echo` with 16 in flight for `secs`: completed per second.
async fn honest(asker: &Agent, secs: f64) -> f64 {
    let always = Arc::new(std::sync::atomic::AtomicBool::new(true));
    honest::honest(asker.handle().clone(), "echo".into(), Some(secs), always).await
}

/// Options for a Unix-socket hub (no TLS, so no CA to trust).
fn opts(url: &str, id: &str) -> AgentOptions {
    AgentOptions::new(id, url, HubTrust::Ca(Vec::new()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() != 7 {
        eprintln!("usage: slow_reader HUB_URL HUB_PID ABUSERS EVENTS EVENT_BYTES SECONDS ROUNDS");
        std::process::exit(2);
    }
    let url = a[0].clone();
    let pid: u32 = a[1].parse()?;
    let abusers: usize = a[2].parse()?;
    let events: usize = a[3].parse()?;
    let event_bytes: usize = a[4].parse()?;
    let secs: f64 = a[5].parse()?;
    let rounds: usize = a[6].parse()?;

    let mut echo = Agent::connect(opts(&url, "echo")).await?;
    tokio::spawn(async move {
        while let Some(m) = echo.recv().await {
            if m.envelope.kind == Kind::Request {
                let body = m.envelope.body.clone();
                let _ = m.reply(body).await;
            }
        }
    });
    let asker = Agent::connect(opts(&url, "asker")).await?;
    // The flooder's refusals (queue-full) come back to its inbox: counted by a task of its own.
    let mut flooder_inbox = Agent::connect(opts(&url, "flooder")).await?;
    let flooder = flooder_inbox.handle().clone();
    let refused = Arc::new(AtomicU64::new(0));
    {
        let refused = refused.clone();
        tokio::spawn(async move {
            while let Some(m) = flooder_inbox.recv().await {
                if m.envelope.kind == Kind::Error {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    let idle_rss = rss(pid);
    let mut out = Vec::new();
    for round in 1..=rounds {
        // Without abusers.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = watch_rss(pid, stop.clone());
        let clean = honest(&asker, secs).await;
        stop.store(true, Ordering::Relaxed);
        let clean_peak = watch.join().unwrap_or(0);

        // With abusers: each says hello and never reads.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = watch_rss(pid, stop.clone());
        let hub_url = HubUrl::parse(&url)?;
        let mut raw = Vec::new();
        for i in 0..abusers {
            let id = format!("sink-{round}-{i}");
            let o = opts(&url, &id);
            let hello =
                Frame::Hello(Hello::new(id.as_str(), "never-reads")).encode(Codec::MsgPack)?;
            raw.push(Connector::new(&o)?.open(&o, &hub_url, hello).await?);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let refused_before = refused.load(Ordering::Relaxed);
        let flood_started = Instant::now();
        let during = {
            let flood = async {
                for n in 0..events {
                    let to = format!("sink-{round}-{}", n % abusers);
                    let env = flooder
                        .envelope(Destination::agent(to), Kind::Event)
                        .with_body(vec![0x5au8; event_bytes]);
                    if flooder.send_envelope(env).await.is_err() {
                        break;
                    }
                }
            };
            let (_, rate) = tokio::join!(flood, honest(&asker, secs));
            rate
        };
        let flood_secs = flood_started.elapsed().as_secs_f64();
        // The abusers stay, their queues full: honest agents once more.
        let after = honest(&asker, secs).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let refused_now = refused.load(Ordering::Relaxed) - refused_before;
        drop(raw);
        stop.store(true, Ordering::Relaxed);
        let abuse_peak = watch.join().unwrap_or(0);
        out.push(serde_json::json!({
            "round": round,
            "clean_requests_per_sec": clean,
            "during_flood_requests_per_sec": during,
            "after_flood_requests_per_sec": after,
            "clean_peak_rss_bytes": clean_peak,
            "abuse_peak_rss_bytes": abuse_peak,
            "events_sent": events,
            "events_refused": refused_now,
            "flood_seconds": flood_secs,
        }));
        eprintln!(
            "round {round}: clean {clean:.0} req/s, during flood {during:.0}, after {after:.0}; hub peak RSS clean {} MiB, abuse {} MiB; {refused_now}/{events} events refused",
            clean_peak >> 20,
            abuse_peak >> 20
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let report = serde_json::json!({
        "hub_url": url,
        "abusers": abusers,
        "events_per_round": events,
        "event_bytes": event_bytes,
        "seconds_per_measurement": secs,
        "hub_idle_rss_bytes": idle_rss,
        "rounds": out,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
