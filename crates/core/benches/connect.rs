//! What one agent's connect costs, per transport: a fresh agent (its own endpoint or socket,
//! its own TLS configuration, as a new agent process has) connects to a hub in this process
//! over loopback, runs the agentwire handshake, and closes.
//!
//! Measures per transport:
//! - `connect_wall/<transport>`: the time from starting to connect until the hub's welcome
//!   (closing is not counted), one agent at a time (loopback: no network delay, so this is
//!   CPU and wake-ups);
//! - `connect_cpu/<transport>`: the CPU time this process (agent and hub together) spent per
//!   connect, read with `getrusage` around a loop that connects agents and keeps them (they
//!   are closed after the count). With many agents connecting at once on few cores, this is
//!   what decides how long they all take;
//! - `connect_burst_wall/<transport>` and `connect_burst_cpu/<transport>`: the same for a
//!   burst of agents connecting at once, until all are welcomed.
//!
//! `cargo bench -p agentwire --bench connect` measures; CI builds and runs each routine once
//! (`cargo test -p agentwire --benches`), as a build check, never as a timing test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentwire::hub::{Hub, HubConfig, Listener};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, HubIdentity};
use agentwire::{Agent, AgentOptions, HubTrust, HubUrl};
use criterion::{criterion_group, criterion_main, Criterion};

/// The CPU time (user and system) this process has used so far.
fn process_cpu() -> Duration {
    // SAFETY: getrusage writes into the struct it is given and reads nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is a valid `who`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

struct Target {
    name: &'static str,
    /// Kept so the hub and its listener live as long as the bench.
    _hub: Hub,
    _listener: Listener,
    url: String,
    trust: HubTrust,
}

async fn target(name: &'static str, scheme: &str) -> Target {
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    let identity = HubIdentity::from_pem(&certs.hub_cert_pem, &certs.hub_key_pem).unwrap();
    let hub = Hub::new(HubConfig::default(), HubMetrics::new());
    let url = HubUrl::parse(&format!("{scheme}://127.0.0.1:0")).unwrap();
    let listener = hub.listen(&url, Some(&identity)).await.unwrap();
    Target {
        name,
        _hub: hub,
        url: listener.url.to_string(),
        _listener: listener,
        trust: HubTrust::ca_pem(&certs.ca_cert_pem).unwrap(),
    }
}

/// A runtime, and a hub on it for each transport.
fn hubs() -> (tokio::runtime::Runtime, Vec<Target>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let targets = rt.block_on(async {
        vec![
            target("quic", "quic").await,
            target("h2", "h2").await,
            target("wss", "wss").await,
        ]
    });
    (rt, targets)
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// One fresh agent, connected and through the handshake.
async fn connect_one(t: &Target) -> Agent {
    connect_to(t.url.clone(), t.trust.clone()).await
}

/// [`connect_one`], owning what it needs (to be spawned).
async fn connect_to(url: String, trust: HubTrust) -> Agent {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    Agent::connect(AgentOptions::new(format!("bench-{id}"), url, trust))
        .await
        .unwrap()
}

fn connect(c: &mut Criterion) {
    let (rt, targets) = hubs();
    let mut g = c.benchmark_group("connect_wall");
    g.sample_size(20);
    for t in &targets {
        g.bench_function(t.name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut connecting = Duration::ZERO;
                    for _ in 0..iters {
                        let started = Instant::now();
                        let agent = connect_one(t).await;
                        connecting += started.elapsed();
                        agent.close().await;
                    }
                    connecting
                })
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("connect_cpu");
    g.sample_size(20);
    for t in &targets {
        g.bench_function(t.name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    // Let the last iteration's closes finish before counting.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let cpu = process_cpu();
                    let mut agents = Vec::new();
                    for _ in 0..iters {
                        agents.push(connect_one(t).await);
                    }
                    let used = process_cpu().saturating_sub(cpu);
                    for agent in agents {
                        agent.close().await;
                    }
                    used
                })
            })
        });
    }
    g.finish();
}

/// Agents in one burst of `connect_burst`.
const BURST: usize = 200;

/// `BURST` fresh agents connecting at once: the wall time until all are through the
/// handshake (`connect_burst_wall`) and the CPU time the process spent on it
/// (`connect_burst_cpu`), both per burst.
fn connect_burst(c: &mut Criterion) {
    let (rt, targets) = hubs();
    for measure in ["connect_burst_wall", "connect_burst_cpu"] {
        let mut g = c.benchmark_group(measure);
        g.sample_size(10);
        for t in &targets {
            g.bench_function(t.name, |b| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            let cpu = process_cpu();
                            let wall = Instant::now();
                            let tasks: Vec<_> = (0..BURST)
                                .map(|_| {
                                    let url = t.url.clone();
                                    let trust = t.trust.clone();
                                    tokio::spawn(connect_to(url, trust))
                                })
                                .collect();
                            let mut agents = Vec::with_capacity(BURST);
                            for task in tasks {
                                agents.push(task.await.unwrap());
                            }
                            total += if measure == "connect_burst_cpu" {
                                process_cpu().saturating_sub(cpu)
                            } else {
                                wall.elapsed()
                            };
                            // Closed together: a QUIC close waits out its draining period.
                            let closes: Vec<_> = agents
                                .into_iter()
                                .map(|agent| tokio::spawn(async move { agent.close().await }))
                                .collect();
                            for close in closes {
                                close.await.unwrap();
                            }
                        }
                        total
                    })
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, connect, connect_burst);
criterion_main!(benches);
