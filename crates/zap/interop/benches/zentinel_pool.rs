//! The proxy pool's hot path, ours beside the reference crate's (`zentinel-agent-protocol`
//! 0.6.45) in one run, on pools that hold real connections.
//!
//! - `health`: the check a proxy makes before it routes a request to an agent
//!   (ours `AgentPool::is_healthy`, theirs `AgentPool::is_agent_healthy`), each pool with four
//!   live Unix-socket connections to one of our agents.
//! - `metrics_export`: the pool's Prometheus text after 1,000 answered requests (ours: the
//!   registry the pool registered in; theirs: `protocol_metrics().to_prometheus` plus
//!   `export_prometheus`, the two texts its pool offers).
//! - `selection`: choosing one of four connections by each strategy (ours
//!   `select::Strategy::pick` on their loads). The reference's `select_connection` is private,
//!   so it has no counterpart here.
//!
//! `cargo bench --bench zentinel_pool` in crates/zap/interop; CI runs each routine once as a build
//! check (`cargo test --all-targets` there), never as a timing.

use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use agentwire_zap::pool::{AgentPool, PoolConfig};
use agentwire_zap::select::{Load, Strategy};
use agentwire_zap::server::{AgentServer, Handler, ServerConfig};
use agentwire_zap_proto::agent::AgentConfig;
use agentwire_zap_proto::messages::{RequestHeadersEvent, RequestMetadata};
use agentwire_zap_proto::{Capabilities, Event, Features, Limits};
use criterion::{criterion_group, criterion_main, Criterion};
use prometheus_client::registry::Registry;
use zentinel_agent_protocol as zen;

const CONNECTIONS: usize = 4;
const REQUESTS: usize = 1000;

/// Answers `allow` to everything (the handler's defaults).
struct AllowAll;
impl Handler for AllowAll {}

fn our_event(i: usize) -> Event {
    Event::RequestHeaders(RequestHeadersEvent {
        metadata: RequestMetadata::new(&format!("b{i}"), "127.0.0.1"),
        method: "GET".into(),
        uri: "/".into(),
        headers: Default::default(),
    })
}

fn their_event(i: usize) -> zen::RequestHeadersEvent {
    zen::RequestHeadersEvent {
        metadata: zen::RequestMetadata {
            correlation_id: format!("b{i}"),
            request_id: format!("b{i}"),
            client_ip: "127.0.0.1".into(),
            client_port: 0,
            server_name: None,
            protocol: "HTTP/1.1".into(),
            tls_version: None,
            tls_cipher: None,
            route_id: None,
            upstream_id: None,
            timestamp: "2026-11-25T00:00:00Z".into(),
            traceparent: None,
        },
        method: "GET".into(),
        uri: "/".into(),
        headers: Default::default(),
    }
}

async fn agent(path: &Path) {
    let caps = Capabilities {
        agent_id: "bench".into(),
        name: "bench agent".into(),
        version: "0".into(),
        supported_events: vec![1],
        features: Features::default(),
        limits: Limits::default(),
    };
    let server = AgentServer::bind(path, ServerConfig::new(AgentConfig::new(caps)), AllowAll)
        .await
        .expect("bind the bench agent");
    tokio::spawn(server.run(std::future::pending()));
}

struct Pools {
    ours: AgentPool,
    registry: Registry,
    theirs: zen::v2::AgentPool,
}

async fn pools(path: &Path) -> Pools {
    agent(path).await;
    let ours = AgentPool::new(PoolConfig {
        connections_per_agent: CONNECTIONS,
        ..PoolConfig::default()
    });
    let mut registry = Registry::default();
    ours.register_metrics(&mut registry);
    assert_eq!(ours.add_agent("waf", path).await, CONNECTIONS);
    let theirs = zen::v2::AgentPool::with_config(zen::v2::AgentPoolConfig {
        connections_per_agent: CONNECTIONS,
        ..Default::default()
    });
    theirs
        .add_agent("waf", format!("unix:{}", path.display()))
        .await
        .expect("the reference pool connects");
    for i in 0..REQUESTS {
        ours.send("waf", our_event(i)).await.expect("ours answers");
        theirs
            .send_request_headers("waf", &format!("b{i}"), &their_event(i))
            .await
            .expect("theirs answers");
    }
    Pools {
        ours,
        registry,
        theirs,
    }
}

fn pool_hot_path(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("agent.sock");
    let p = rt.block_on(pools(&path));

    let mut g = c.benchmark_group("health");
    g.bench_function("ours", |b| b.iter(|| black_box(p.ours.is_healthy("waf"))));
    g.bench_function("reference", |b| {
        b.iter(|| black_box(p.theirs.is_agent_healthy("waf")))
    });
    g.finish();

    let mut g = c.benchmark_group("metrics_export");
    g.bench_function("ours", |b| {
        b.iter(|| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &p.registry)
                .expect("encode the registry");
            black_box(text)
        })
    });
    g.bench_function("reference", |b| {
        b.iter(|| {
            let mut text = p.theirs.protocol_metrics().to_prometheus("zentinel_agent");
            text.push_str(&p.theirs.export_prometheus());
            black_box(text)
        })
    });
    g.finish();

    let loads: Vec<Load> = (0..CONNECTIONS)
        .map(|i| Load {
            in_flight: (i * 7 + 3) % 5,
            requests: 1000,
            errors: (i as u64 * 3) % 4,
        })
        .collect();
    let turn = AtomicUsize::new(0);
    let mut g = c.benchmark_group("selection");
    for (name, strategy) in [
        ("round_robin", Strategy::RoundRobin),
        ("least_connections", Strategy::LeastConnections),
        ("health_based", Strategy::HealthBased),
        ("random", Strategy::Random),
    ] {
        g.bench_function(format!("ours/{name}"), |b| {
            b.iter(|| black_box(strategy.pick(black_box(&loads), &turn)))
        });
    }
    g.finish();

    rt.block_on(async {
        let _ = p.ours.drain("waf", Duration::from_millis(100)).await;
        let _ = p.theirs.shutdown().await;
    });
}

criterion_group!(benches, pool_hot_path);
criterion_main!(benches);
