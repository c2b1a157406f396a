//! A worker for the browser demo (examples/browser): answers each request `{"n": N}` with the
//! number of primes up to N (at most 10,000,000), its own id and the microseconds it worked;
//! stops when the hub goes away or after an hour.
//!
//!     cargo run -p agentwire --example browser_worker -- HUB_URL CA_PEM ID

use std::time::{Duration, Instant};

use agentwire::{Agent, AgentOptions, HubTrust, Kind};

const MAX_N: u64 = 10_000_000;
const LIFETIME: Duration = Duration::from_secs(3600);

fn primes_up_to(n: u64) -> u64 {
    let n = n.min(MAX_N) as usize;
    if n < 2 {
        return 0;
    }
    let mut composite = vec![false; n + 1];
    let mut count = 0;
    for i in 2..=n {
        if !composite[i] {
            count += 1;
            let mut j = i * i;
            while j <= n {
                composite[j] = true;
                j += i;
            }
        }
    }
    count
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, hub, ca, id] = args.as_slice() else {
        return Err("usage: browser_worker HUB_URL CA_PEM ID".into());
    };
    let trust = HubTrust::ca_file(std::path::Path::new(ca))?;
    let mut agent = Agent::connect(AgentOptions::new(id.as_str(), hub.as_str(), trust)).await?;
    println!("{id} connected over {}", agent.transport().name());
    let started = Instant::now();
    while let Ok(Some(msg)) =
        tokio::time::timeout(LIFETIME.saturating_sub(started.elapsed()), agent.recv()).await
    {
        if msg.envelope.kind != Kind::Request {
            continue;
        }
        let job: serde_json::Value = serde_json::from_slice(&msg.envelope.body).unwrap_or_default();
        let Some(n) = job["n"].as_u64() else {
            msg.reply(r#"{"error": "send {\"n\": N}"}"#).await?;
            continue;
        };
        let work = Instant::now();
        let primes = primes_up_to(n);
        let answer = serde_json::json!({
            "n": n.min(MAX_N),
            "primes": primes,
            "worker": id,
            "work_us": work.elapsed().as_micros() as u64,
        });
        msg.reply(answer.to_string()).await?;
    }
    agent.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_primes() {
        assert_eq!(super::primes_up_to(1), 0);
        assert_eq!(super::primes_up_to(10), 4);
        assert_eq!(super::primes_up_to(100_000), 9592);
    }
}
