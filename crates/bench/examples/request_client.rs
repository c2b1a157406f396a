//! The Rust client of `scripts/sdk-bench.sh`: the same closed loop as the Python and Node
//! clients (bindings/python/bench/request_client.py, bindings/node/bench/request_client.js),
//! through agentwire's Rust API, so the three are compared on one hub in one run.
//!
//! usage: request_client HUB_URL CA_PEM AGENTS WINDOW SIZE SECONDS WARMUP_SECONDS TARGETS
//!        [TARGET_PREFIX]
//!
//! AGENTS agents each keep WINDOW requests of SIZE bytes in flight to the echo agents
//! (`{TARGET_PREFIX}{k % TARGETS}`, prefix `echo-` by default), for WARMUP_SECONDS unmeasured and then SECONDS measured; prints
//! one JSON line: requests, errors, msg/s, latency percentiles (µs) and the process's CPU
//! seconds (and µs of CPU per request) over the measured part.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentwire::{Agent, AgentOptions, HubTrust};
use agentwire_measure::resources::self_cpu_seconds;
use agentwire_measure::stats::{new_histogram, record_us, summarize};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if !(9..=10).contains(&args.len()) {
        anyhow::bail!(
            "usage: request_client HUB_URL CA_PEM AGENTS WINDOW SIZE SECONDS WARMUP_SECONDS TARGETS [TARGET_PREFIX]"
        );
    }
    let prefix = args.get(9).cloned().unwrap_or_else(|| "echo-".into());
    let trust = HubTrust::ca_file(std::path::Path::new(&args[2]))?;
    let [agents, window, size, seconds, warmup, targets]: [u64; 6] = [
        args[3].parse()?,
        args[4].parse()?,
        args[5].parse()?,
        args[6].parse()?,
        args[7].parse()?,
        args[8].parse()?,
    ];
    let mut handles = Vec::new();
    for a in 0..agents {
        let mut opts =
            AgentOptions::new(format!("rust-client-{a}"), args[1].clone(), trust.clone());
        opts.connect_timeout = Duration::from_secs(30);
        handles.push(Agent::connect(opts).await?.split().0);
    }
    let body = bytes::Bytes::from(vec![b'x'; size as usize]);
    let start = Instant::now();
    let measure_from = start + Duration::from_secs(warmup);
    let stop = measure_from + Duration::from_secs(seconds);
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let hist = Arc::new(Mutex::new(new_histogram()));
    let mut loops = Vec::new();
    for (a, handle) in handles.iter().enumerate() {
        for w in 0..window {
            let target = format!("{prefix}{}", (a as u64 * window + w) % targets);
            let (handle, body) = (handle.clone(), body.clone());
            let (done, errors, hist) = (done.clone(), errors.clone(), hist.clone());
            loops.push(tokio::spawn(async move {
                let mut local = new_histogram();
                while Instant::now() < stop {
                    let t0 = Instant::now();
                    let ok = handle
                        .request(&target, body.clone(), Duration::from_secs(10))
                        .await
                        .is_ok();
                    if t0 >= measure_from && Instant::now() <= stop {
                        if ok {
                            done.fetch_add(1, Ordering::Relaxed);
                            record_us(&mut local, t0.elapsed().as_micros() as u64);
                        } else {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                if let Ok(mut h) = hist.lock() {
                    let _ = h.add(&local);
                }
            }));
        }
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let cpu0 = self_cpu_seconds().unwrap_or(0.0);
    tokio::time::sleep_until(stop.into()).await;
    let cpu = self_cpu_seconds().unwrap_or(0.0) - cpu0;
    for l in loops {
        let _ = l.await;
    }
    let requests = done.load(Ordering::Relaxed);
    let latency = {
        let merged = hist
            .lock()
            .map_err(|_| anyhow::anyhow!("a request loop panicked"))?;
        summarize(&merged)
    };
    let line = serde_json::json!({
        "client": "rust",
        "agents": agents, "window": window, "size": size, "seconds": seconds,
        "target_prefix": prefix,
        "requests": requests,
        "errors": errors.load(Ordering::Relaxed),
        "msg_per_s": requests as f64 / seconds as f64,
        "p50_us": latency.p50_us, "p90_us": latency.p90_us, "p99_us": latency.p99_us,
        "cpu_s": cpu,
        "cpu_us_per_msg": if requests > 0 { cpu * 1e6 / requests as f64 } else { 0.0 },
    });
    println!("{line}");
    for h in handles {
        h.close().await;
    }
    Ok(())
}
