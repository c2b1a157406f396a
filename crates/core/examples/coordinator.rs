//! A coordinator hands tasks to N workers over a real hub and collects their results.
//!
//! Everything runs in this process on loopback QUIC with freshly generated certificates:
//!
//!     cargo run --release -p agentwire --example coordinator -- 8 200
//!
//! (8 workers, 200 tasks). Each task is a `task` envelope carrying a number; a worker answers
//! with a `result` envelope correlated to the task's id, carrying the number squared.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use agentwire::hub::{Hub, HubConfig};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, HubIdentity};
use agentwire::{Agent, AgentOptions, Destination, HubTrust, Kind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let workers: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(4);
    let tasks: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(100);

    // A hub with a CA and a hub certificate made on the spot.
    let certs = tls::generate(&tls::default_hub_names())?;
    let identity = HubIdentity::from_pem(&certs.hub_cert_pem, &certs.hub_key_pem)?;
    let hub = Hub::new(HubConfig::default(), HubMetrics::new());
    let listener = hub.listen_quic("127.0.0.1:0".parse()?, &identity)?;
    let url = format!("quic://127.0.0.1:{}", listener.local_addr.port());
    let trust = HubTrust::ca_pem(&certs.ca_cert_pem)?;

    // Workers: square the number in each task and send the result back.
    for w in 0..workers {
        let mut opts = AgentOptions::new(format!("worker-{w}"), url.clone(), trust.clone());
        opts.role = "worker".into();
        let mut worker = Agent::connect(opts).await?;
        tokio::spawn(async move {
            while let Some(msg) = worker.recv().await {
                let task = &msg.envelope;
                if task.kind != Kind::Task {
                    continue;
                }
                let n: u64 = std::str::from_utf8(&task.body)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let result = worker
                    .envelope(Destination::agent(task.from.clone()), Kind::Result)
                    .with_correlation(task.id)
                    .with_body((n * n).to_string());
                if worker.send_envelope(result).await.is_err() {
                    return;
                }
            }
        });
    }

    let mut opts = AgentOptions::new("coordinator", url, trust);
    opts.role = "coordinator".into();
    let mut coordinator = Agent::connect(opts).await?;
    let started = Instant::now();
    let mut expected = HashMap::new();
    for n in 0..tasks {
        let worker = format!("worker-{}", n as usize % workers.max(1));
        let id = coordinator
            .send(Destination::agent(worker), Kind::Task, n.to_string())
            .await?;
        expected.insert(id, n * n);
    }
    let mut collected = 0u64;
    while !expected.is_empty() {
        let msg = tokio::time::timeout(Duration::from_secs(10), coordinator.recv())
            .await?
            .ok_or("connection to the hub ended")?;
        let env = msg.envelope;
        if env.kind == Kind::Error {
            return Err(format!("task failed: {}", String::from_utf8_lossy(&env.body)).into());
        }
        let Some(want) = env.correlation.and_then(|id| expected.remove(&id)) else {
            continue;
        };
        let got: u64 = std::str::from_utf8(&env.body)?.parse()?;
        assert_eq!(got, want, "worker {} answered wrongly", env.from);
        collected += 1;
    }
    println!(
        "{collected} results from {workers} workers in {:.1} ms over {}",
        started.elapsed().as_secs_f64() * 1000.0,
        coordinator.transport()
    );
    coordinator.close().await;
    Ok(())
}
