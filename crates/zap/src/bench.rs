//! `agentwire agent-protocol bench`: a closed loop of requests through the pool to any agent.
//!
//! `concurrency` workers share `requests` request-headers events (or body chunks of
//! `body_size` bytes), each sending the next as soon as its previous one is answered, over
//! `connections` pooled connections. The report has requests/s, HDR percentiles of the round
//! trip, this process's CPU per request (and the agent's, given its pid), and errors by kind.
//! Bounded by the request count and a deadline; it stops by itself.
//!
//! This module owns the load loop and its report; it must not print.

use agentwire_sync::LockExt;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentwire_measure::resources::{process_cpu_seconds, self_cpu_seconds};
use agentwire_measure::stats::{new_histogram, record_us, summarize};
use agentwire_measure::LatencySummary;
use agentwire_zap_proto::messages::{
    Body, BodyChunkEvent, RequestHeadersEvent, RequestMetadata, Text,
};
use agentwire_zap_proto::{Encoding, Event};
use serde::Serialize;

use crate::pool::{AgentPool, PoolConfig};

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchConfig {
    /// The agent's socket.
    pub socket: PathBuf,
    /// Requests in all.
    pub requests: u64,
    /// Requests in flight.
    pub concurrency: usize,
    /// Pooled connections.
    pub connections: usize,
    /// Encoding offered (only this one).
    pub encoding: Encoding,
    /// 0: request-headers events; otherwise body chunks of this many bytes.
    pub body_size: usize,
    /// The agent's process id, to report its CPU per request.
    pub agent_pid: Option<u32>,
    /// The run stops at this deadline even if requests are left.
    pub max_duration: Duration,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The configuration.
    pub config: BenchConfig,
    /// The encoding the agent chose.
    pub negotiated: Encoding,
    /// Requests answered.
    pub answered: u64,
    /// Seconds from the first request to the last answer.
    pub elapsed_secs: f64,
    /// Answered requests per second.
    pub requests_per_sec: f64,
    /// Round trips, µs.
    pub latency: LatencySummary,
    /// This process's CPU per answered request, µs.
    pub client_cpu_us_per_request: Option<f64>,
    /// The agent process's CPU per answered request, µs (with `agent_pid`).
    pub agent_cpu_us_per_request: Option<f64>,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
}

/// Why the run could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// No connection to the agent.
    #[error("could not connect to the agent at {0}")]
    NoConnection(PathBuf),
}

/// The `n`-th event of the run (headers, or a body chunk of `body_size` bytes), with its own
/// correlation id.
pub fn event(n: u64, body_size: usize) -> Event {
    let cid = format!("bench-{n}");
    if body_size > 0 {
        let data: Vec<u8> = (0..body_size).map(|i| (i % 256) as u8).collect();
        return Event::RequestBodyChunk(BodyChunkEvent {
            correlation_id: cid.into(),
            data: Body(data.into()),
            is_last: true,
            total_size: Some(body_size as u64),
            chunk_index: 0,
            bytes_received: Some(body_size as u64),
            bytes_sent: None,
        });
    }
    let headers = [
        ("host", "api.example.com"),
        ("user-agent", "agentwire-bench/1.0"),
        ("accept", "*/*"),
    ]
    .into_iter()
    .map(|(k, v)| (Text::const_new(k), vec![Text::const_new(v)]))
    .collect();
    Event::RequestHeaders(RequestHeadersEvent {
        metadata: RequestMetadata {
            client_port: 40000,
            server_name: Some("api.example.com".into()),
            tls_version: Some("TLSv1.3".into()),
            timestamp: "2026-11-25T00:00:00Z".into(),
            ..RequestMetadata::new(&cid, "192.168.1.100")
        },
        method: "GET".into(),
        uri: "/api/v1/users".into(),
        headers,
    })
}

/// Runs the loop.
pub async fn run(config: BenchConfig) -> Result<BenchReport, BenchError> {
    let pool = AgentPool::new(PoolConfig {
        connections_per_agent: config.connections.max(1),
        encodings: vec![config.encoding],
        ..PoolConfig::default()
    });
    if pool.add_agent("bench", &config.socket).await == 0 {
        return Err(BenchError::NoConnection(config.socket.clone()));
    }
    let negotiated = pool.encoding("bench").unwrap_or(config.encoding);
    // Warm-up: one request per connection slot, not counted.
    for n in 0..config.connections.max(1) as u64 {
        let _ = pool
            .send("bench", event(u64::MAX - n, config.body_size))
            .await;
    }
    let next = Arc::new(AtomicU64::new(0));
    let errors: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let deadline = Instant::now() + config.max_duration;
    let cpu0 = self_cpu_seconds();
    let agent_cpu0 = config.agent_pid.and_then(process_cpu_seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..config.concurrency.max(1))
        .map(|_| {
            let pool = pool.clone();
            let next = next.clone();
            let errors = errors.clone();
            let total = config.requests;
            let body = config.body_size;
            tokio::spawn(async move {
                let mut hist = new_histogram();
                let mut answered = 0u64;
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= total || Instant::now() >= deadline {
                        break;
                    }
                    let t = Instant::now();
                    match pool.send("bench", event(n, body)).await {
                        Ok(_) => {
                            record_us(&mut hist, t.elapsed().as_micros() as u64);
                            answered += 1;
                        }
                        Err(e) => {
                            *errors
                                .lock_or_recover()
                                .entry(e.kind().to_string())
                                .or_default() += 1;
                        }
                    }
                }
                (hist, answered)
            })
        })
        .collect();
    let mut hist = new_histogram();
    let mut answered = 0;
    for w in workers {
        if let Ok((h, a)) = w.await {
            let _ = hist.add(&h);
            answered += a;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let per_request = |cpu: Option<f64>| {
        cpu.filter(|_| answered > 0)
            .map(|s| s * 1e6 / answered as f64)
    };
    let client_cpu = self_cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
    let agent_cpu = config
        .agent_pid
        .and_then(process_cpu_seconds)
        .zip(agent_cpu0)
        .map(|(b, a)| b - a);
    let _ = pool.drain("bench", Duration::from_secs(5)).await;
    let errors = errors.lock_or_recover().clone();
    Ok(BenchReport {
        negotiated,
        answered,
        elapsed_secs: elapsed,
        requests_per_sec: if elapsed > 0.0 {
            answered as f64 / elapsed
        } else {
            0.0
        },
        latency: summarize(&hist),
        client_cpu_us_per_request: per_request(client_cpu),
        agent_cpu_us_per_request: per_request(agent_cpu),
        errors,
        config,
    })
}
