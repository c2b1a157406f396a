//! Echo agents for `scripts/sdk-bench.sh`: N agents in one process (`echo-0` … `echo-{N-1}`)
//! that answer every request with its body, until SECONDS have passed.
//!
//! usage: echo_agents HUB_URL CA_PEM N SECONDS [PREFIX [FIRST]]
//!
//! The agents are called PREFIX{FIRST} … PREFIX{FIRST+N-1} (default `echo-`, from 0). Prints
//! `ready` on stdout once every agent is connected.

use std::time::{Duration, Instant};

use agentwire::{Agent, AgentOptions, HubTrust, Kind};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if !(5..=7).contains(&args.len()) {
        anyhow::bail!("usage: echo_agents HUB_URL CA_PEM N SECONDS [PREFIX [FIRST]]");
    }
    let prefix = args.get(5).map_or("echo-", String::as_str);
    let first: usize = args.get(6).map_or(Ok(0), |f| f.parse())?;
    let trust = HubTrust::ca_file(std::path::Path::new(&args[2]))?;
    let n: usize = args[3].parse()?;
    let stop = Instant::now() + Duration::from_secs(args[4].parse()?);
    let mut tasks = Vec::new();
    for i in first..first + n {
        let mut opts = AgentOptions::new(format!("{prefix}{i}"), args[1].clone(), trust.clone());
        opts.connect_timeout = Duration::from_secs(30);
        let mut agent = Agent::connect(opts).await?;
        tasks.push(tokio::spawn(async move {
            loop {
                let left = stop.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, agent.recv()).await {
                    Ok(Some(msg)) if msg.envelope.kind == Kind::Request => {
                        let body = msg.envelope.body.clone();
                        let _ = msg.reply(body).await;
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            agent.close().await;
        }));
    }
    println!("ready");
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}
