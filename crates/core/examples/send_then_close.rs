//! Fault: agents that close right after sending, against a hub in another process (which
//! `scripts/faults/cpu-quota-close.sh` holds to a small CPU quota). Every round, N agents connect
//! at once, each sends one event to a collector agent and closes at once; after the last round
//! the collector says how many events arrived, lost or doubled.
//!
//! Run by the script, which starts the hub; by hand:
//!
//!     agentwire cert --out /tmp/aw-certs
//!     agentwire hub --listen quic://127.0.0.1:4433 --cert-dir /tmp/aw-certs &
//!     cargo run --release -p agentwire --example send_then_close -- \
//!         quic://127.0.0.1:4433 /tmp/aw-certs/ca.pem 200 200
//!
//! Arguments: hub URL, CA file, agents per round, rounds. Prints one JSON object.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire::{Agent, AgentOptions, Destination, HubTrust, Kind};

fn options(id: &str, url: &str, ca: &str) -> AgentOptions {
    let trust = HubTrust::ca_file(std::path::Path::new(ca)).expect("the CA file");
    let mut opts = AgentOptions::new(id, url, trust);
    opts.connect_timeout = Duration::from_secs(30);
    opts
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, ca, agents, rounds] = args.as_slice() else {
        eprintln!("usage: send_then_close HUB_URL CA_FILE AGENTS ROUNDS");
        std::process::exit(2);
    };
    let (agents, rounds): (usize, usize) = (agents.parse().unwrap(), rounds.parse().unwrap());
    let mut collector = Agent::connect(options("collector", url, ca))
        .await
        .expect("the collector connects");
    let counts: Arc<std::sync::Mutex<HashMap<String, u32>>> = Arc::default();
    let counting = tokio::spawn({
        let counts = counts.clone();
        async move {
            while let Some(msg) = collector.recv().await {
                let body = String::from_utf8_lossy(&msg.envelope.body).into_owned();
                *counts.lock().unwrap().entry(body).or_default() += 1;
            }
        }
    });
    let started = Instant::now();
    let (mut sent, mut not_connected, mut send_failed) = (0u64, 0u64, 0u64);
    for round in 0..rounds {
        let mut tasks = Vec::new();
        for i in 0..agents {
            let (url, ca) = (url.clone(), ca.clone());
            tasks.push(tokio::spawn(async move {
                let Ok(agent) = Agent::connect(options(&format!("s-{i}"), &url, &ca)).await else {
                    return 0;
                };
                let body = format!("{round}:{i}");
                let ok = agent
                    .send(Destination::agent("collector"), Kind::Event, body)
                    .await
                    .is_ok();
                agent.close().await;
                if ok {
                    1
                } else {
                    2
                }
            }));
        }
        for t in tasks {
            match t.await.unwrap_or(0) {
                1 => sent += 1,
                2 => send_failed += 1,
                _ => not_connected += 1,
            }
        }
    }
    // Everything the hub took is delivered by now or soon: wait until nothing new comes for 5 s.
    let mut last = usize::MAX;
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now: usize = counts.lock().unwrap().values().map(|&n| n as usize).sum();
        if now == last {
            break;
        }
        last = now;
    }
    counting.abort();
    let counts = counts.lock().unwrap();
    let received = counts.len() as u64;
    let doubled = counts.values().filter(|&&n| n > 1).count();
    println!(
        "{}",
        serde_json::json!({
            "agents_per_round": agents,
            "rounds": rounds,
            "sent": sent,
            "not_connected": not_connected,
            "send_failed": send_failed,
            "received": received,
            "lost": sent.saturating_sub(received),
            "doubled": doubled,
            "seconds": started.elapsed().as_secs_f64(),
        })
    );
}
