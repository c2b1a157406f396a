//! The reference implementation (`zentinel-agent-protocol` 0.6.45, its UDS client and agent
//! server) driven the way `agentwire agent-protocol bench|serve` drive ours, so the two can be
//! measured side by side (`scripts/peers/zentinel.sh`).
//!
//! ```text
//! cargo run --release --example zentinel_reference (in crates/zap/interop) -- agent --socket /tmp/ref.sock \
//!     [--slow-every N --slow-ms M]
//! cargo run --release --example zentinel_reference (in crates/zap/interop) -- bench --socket /tmp/ref.sock \
//!     --requests 20000 --concurrency 16 [--agent-pid PID]
//! ```
//!
//! `bench` uses one `AgentClientV2Uds` (one connection, as the reference's published numbers
//! do) shared by `concurrency` tasks, each sending the same request-headers event
//! `agentwire_zap::bench::event` builds, and prints a JSON report with the fields of
//! `agentwire agent-protocol bench --json`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentwire_measure::resources::{process_cpu_seconds, self_cpu_seconds};
use agentwire_measure::stats::{new_histogram, record_us, summarize};
use agentwire_zap::proto::messages::Text;
use agentwire_zap::proto::Event;
use zentinel_agent_protocol as zen;
use zentinel_agent_protocol::v2::{
    AgentCapabilities, AgentClientV2Uds, AgentHandlerV2, UdsAgentServerV2,
};

/// Allows everything; every `slow_every`-th request headers event takes `slow` (as
/// `agentwire agent-protocol serve --slow-every N --slow-ms M`).
struct Allow {
    slow_every: u64,
    slow: Duration,
    seen: AtomicU64,
}

#[async_trait::async_trait]
impl AgentHandlerV2 for Allow {
    fn capabilities(&self) -> AgentCapabilities {
        AgentCapabilities::new("reference", "Reference agent", "0.6.45")
    }
    async fn on_request_headers(&self, _e: zen::RequestHeadersEvent) -> zen::AgentResponse {
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if self.slow_every > 0 && n % self.slow_every == 0 {
            tokio::time::sleep(self.slow).await;
        }
        zen::AgentResponse::default_allow()
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// The same event as `agentwire_zap::bench::event(n, 0)` in the reference's type: `template`
/// (that event converted once) with request `n`'s ids. The bench loop makes one per request,
/// as ours does, without converting our type each time; `main` checks once that it equals
/// [`converted_event`].
fn zen_event(template: &zen::RequestHeadersEvent, n: u64) -> zen::RequestHeadersEvent {
    let mut event = template.clone();
    let cid = format!("bench-{n}");
    event.metadata.request_id.clone_from(&cid);
    event.metadata.correlation_id = cid;
    event
}

/// `agentwire_zap::bench::event(n, 0)` converted to the reference's type.
fn converted_event(n: u64) -> zen::RequestHeadersEvent {
    let Event::RequestHeaders(ours) = agentwire_zap::bench::event(n, 0) else {
        unreachable!("body size 0 makes request headers")
    };
    let m = ours.metadata;
    let s = |t: Text| String::from(t);
    let opt = |t: Option<Text>| t.map(String::from);
    zen::RequestHeadersEvent {
        metadata: zen::RequestMetadata {
            correlation_id: s(m.correlation_id),
            request_id: s(m.request_id),
            client_ip: s(m.client_ip),
            client_port: m.client_port,
            server_name: opt(m.server_name),
            protocol: s(m.protocol),
            tls_version: opt(m.tls_version),
            tls_cipher: opt(m.tls_cipher),
            route_id: opt(m.route_id),
            upstream_id: opt(m.upstream_id),
            timestamp: s(m.timestamp),
            traceparent: opt(m.traceparent),
        },
        method: s(ours.method),
        uri: s(ours.uri),
        headers: ours
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.iter().map(Text::to_string).collect()))
            .collect::<HashMap<_, _>>(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let socket = arg(&args, "--socket").ok_or("--socket PATH is required")?;
    match args.get(1).map(String::as_str) {
        Some("agent") => {
            let slow_every: u64 = arg(&args, "--slow-every").map_or(Ok(0), |v| v.parse())?;
            let slow_ms: u64 = arg(&args, "--slow-ms").map_or(Ok(10), |v| v.parse())?;
            let handler = Allow {
                slow_every,
                slow: Duration::from_millis(slow_ms),
                seen: AtomicU64::new(0),
            };
            let server = UdsAgentServerV2::new("reference", socket.as_str(), Box::new(handler));
            println!("reference agent listening on {socket}");
            tokio::select! {
                r = server.run() => r?,
                _ = tokio::signal::ctrl_c() => {}
            }
            Ok(())
        }
        Some("bench") => {
            let template = Arc::new(converted_event(0));
            if serde_json::to_value(zen_event(&template, 7))? != serde_json::to_value(converted_event(7))? {
                return Err("zen_event no longer builds agentwire's bench event".into());
            }
            let requests: u64 = arg(&args, "--requests").map_or(Ok(20_000), |v| v.parse())?;
            let concurrency: usize = arg(&args, "--concurrency").map_or(Ok(16), |v| v.parse())?;
            let agent_pid: Option<u32> = arg(&args, "--agent-pid").map(|v| v.parse()).transpose()?;
            let client = Arc::new(AgentClientV2Uds::new("reference", socket.as_str(), Duration::from_secs(30)).await?);
            client.connect().await?;
            let encoding = format!("{:?}", client.encoding().await).to_lowercase();
            let warm = zen_event(&template, u64::MAX);
            client.send_request_headers(&warm.metadata.correlation_id.clone(), &warm).await?;
            let next = Arc::new(AtomicU64::new(0));
            let errors: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
            let cpu0 = self_cpu_seconds();
            let agent0 = agent_pid.and_then(process_cpu_seconds);
            let started = Instant::now();
            let tasks: Vec<_> = (0..concurrency.max(1))
                .map(|_| {
                    let client = client.clone();
                    let next = next.clone();
                    let errors = errors.clone();
                    let template = template.clone();
                    tokio::spawn(async move {
                        let mut hist = new_histogram();
                        let mut answered = 0u64;
                        loop {
                            let n = next.fetch_add(1, Ordering::Relaxed);
                            if n >= requests {
                                break;
                            }
                            let event = zen_event(&template, n);
                            let t = Instant::now();
                            let cid = event.metadata.correlation_id.clone();
                            match client.send_request_headers(&cid, &event).await {
                                Ok(_) => {
                                    record_us(&mut hist, t.elapsed().as_micros() as u64);
                                    answered += 1;
                                }
                                Err(e) => {
                                    let kind = format!("{e:?}");
                                    let kind = kind.split(['(', ' ', '{']).next().unwrap_or("error").to_string();
                                    *errors.lock().unwrap_or_else(|p| p.into_inner()).entry(kind).or_default() += 1;
                                }
                            }
                        }
                        (hist, answered)
                    })
                })
                .collect();
            let mut hist = new_histogram();
            let mut answered = 0u64;
            for t in tasks {
                let (h, a) = t.await?;
                hist.add(&h)?;
                answered += a;
            }
            let elapsed = started.elapsed().as_secs_f64();
            let per = |s: Option<f64>| s.filter(|_| answered > 0).map(|s| s * 1e6 / answered as f64);
            let client_cpu = self_cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
            let agent_cpu = agent_pid.and_then(process_cpu_seconds).zip(agent0).map(|(b, a)| b - a);
            let report = serde_json::json!({
                "implementation": "zentinel-agent-protocol 0.6.45",
                "config": { "socket": socket, "requests": requests, "concurrency": concurrency, "connections": 1, "body_size": 0 },
                "negotiated": encoding,
                "answered": answered,
                "elapsed_secs": elapsed,
                "requests_per_sec": answered as f64 / elapsed.max(1e-9),
                "latency": summarize(&hist),
                "client_cpu_us_per_request": per(client_cpu),
                "agent_cpu_us_per_request": per(agent_cpu),
                "errors": *errors.lock().unwrap_or_else(|p| p.into_inner()),
            });
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
        _ => Err("usage: zentinel_reference agent|bench --socket PATH [--requests N] [--concurrency C] [--agent-pid PID]".into()),
    }
}
