//! One benchmark cell: a fresh hub listening only on the transport under test (loopback QUIC,
//! HTTP/2 or WebSocket over TLS, or a Unix socket in a fresh temporary directory), `W` echo
//! workers and `A` clients that each keep `window` requests in flight, a warm-up, a measured
//! window and a bounded drain.
//!
//! Everything goes through the public API (`Hub::listen`, `Agent::connect`,
//! `AgentHandle::request`, `Incoming::reply`) over real sockets; this module must not use
//! in-process shortcuts for the transport, and must not print or write files (apart from the
//! Unix socket's temporary directory, removed at the end of the cell).

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentwire::hub::{Hub, HubConfig, Listener};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, HubIdentity};
use agentwire::transport::TransportKind;
use agentwire::{
    Agent, AgentError, AgentHandle, AgentOptions, HubTrust, HubUrl, Kind, StreamMapping,
};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::record::*;
use crate::stats;

/// Hard cap on requests one in-flight slot may issue in a cell (a second bound besides time).
const MAX_REQUESTS_PER_SLOT: u64 = 50_000_000;
/// At most this many distinct error messages are kept per cell.
const MAX_ERROR_SAMPLES: usize = 5;
/// Time allowed for closing all agents at the end of a cell.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The transport a cell runs over (for QUIC, with its stream mapping).
///
/// ```
/// use agentwire_bench::BenchTransport;
/// assert_eq!("quic-lanes".parse::<BenchTransport>().unwrap(), BenchTransport::QuicLanes);
/// // The old `--mappings` values still work.
/// assert_eq!("per-message".parse::<BenchTransport>().unwrap(), BenchTransport::Quic);
/// assert_eq!(BenchTransport::Wss.to_string(), "wss");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BenchTransport {
    /// QUIC, one stream per message (`StreamMapping::PerMessage`).
    Quic,
    /// QUIC, one stream per priority lane (`StreamMapping::Lanes`) on hub and agents.
    QuicLanes,
    /// HTTP/2 over TLS (`h2://`).
    H2,
    /// WebSocket over TLS (`wss://`).
    Wss,
    /// Unix domain socket in a temporary directory (`unix://`).
    Unix,
}

impl BenchTransport {
    /// Every benchmarked transport, in the default order.
    pub const ALL: [BenchTransport; 5] = [
        BenchTransport::Quic,
        BenchTransport::QuicLanes,
        BenchTransport::H2,
        BenchTransport::Wss,
        BenchTransport::Unix,
    ];

    /// The name used on the command line, in the table and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            BenchTransport::Quic => "quic",
            BenchTransport::QuicLanes => "quic-lanes",
            BenchTransport::H2 => "h2",
            BenchTransport::Wss => "wss",
            BenchTransport::Unix => "unix",
        }
    }

    /// The transport agents must end up connected over.
    pub fn kind(self) -> TransportKind {
        match self {
            BenchTransport::Quic | BenchTransport::QuicLanes => TransportKind::Quic,
            BenchTransport::H2 => TransportKind::Http2,
            BenchTransport::Wss => TransportKind::WebSocket,
            BenchTransport::Unix => TransportKind::Unix,
        }
    }

    /// The stream mapping given to hub and agents (only QUIC uses it).
    pub fn mapping(self) -> StreamMapping {
        match self {
            BenchTransport::QuicLanes => StreamMapping::Lanes,
            _ => StreamMapping::PerMessage,
        }
    }
}

impl FromStr for BenchTransport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "quic" | "per-message" => Ok(BenchTransport::Quic),
            "quic-lanes" | "lanes" => Ok(BenchTransport::QuicLanes),
            "h2" => Ok(BenchTransport::H2),
            "wss" => Ok(BenchTransport::Wss),
            "unix" => Ok(BenchTransport::Unix),
            other => Err(format!(
                "unknown bench transport {other:?} (expected quic, quic-lanes, h2, wss or unix)"
            )),
        }
    }
}

impl fmt::Display for BenchTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The parameters of one cell.
#[derive(Debug, Clone, Serialize)]
pub struct CellConfig {
    /// The transport under test; the hub listens on nothing else.
    pub transport: BenchTransport,
    /// Client agents sending requests.
    pub agents: usize,
    /// Echo worker agents answering them (`max(1, agents / 10)`).
    pub workers: usize,
    /// Request body size in bytes; responses carry the same body.
    pub size: usize,
    /// Requests each client keeps in flight.
    pub window: usize,
    /// Warm-up before measuring, milliseconds (not counted).
    pub warmup_ms: u64,
    /// Measured window, milliseconds.
    pub duration_ms: u64,
    /// Per-request timeout, milliseconds; also bounds the drain after the measured window.
    pub request_timeout_ms: u64,
    /// The emulated network between the clients and the hub.
    pub network: NetworkProfile,
    /// Length of the open-loop phase after the closed-loop window, milliseconds (0 = none).
    pub open_loop_ms: u64,
    /// Length of the priority / head-of-line probe, milliseconds (0 = none).
    pub priority_probe_ms: u64,
}

impl CellConfig {
    /// Workers used for `agents` clients: one per ten clients, at least one.
    pub fn workers_for(agents: usize) -> usize {
        (agents / 10).max(1)
    }
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    answered: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    in_flight: AtomicU64,
    samples: Mutex<Vec<String>>,
}

impl Counters {
    fn sample(&self, msg: String) {
        let mut s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if s.len() < MAX_ERROR_SAMPLES && !s.contains(&msg) {
            s.push(msg);
        }
    }
}

/// A hub listening only on the transport under test, with the trust to reach it.
struct LoopbackHub {
    hub: Hub,
    listener: Listener,
    url: String,
    trust: HubTrust,
    /// The Unix socket's directory; removed when dropped (after the listener).
    _dir: Option<tempfile::TempDir>,
}

async fn start_hub(transport: BenchTransport) -> Result<LoopbackHub> {
    let bundle =
        tls::generate(&tls::default_hub_names()).context("generating in-memory certificates")?;
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem)
        .context("loading the generated hub identity")?;
    let config = HubConfig {
        stream_mapping: transport.mapping(),
        ..HubConfig::default()
    };
    let (url, dir) = match transport {
        BenchTransport::Quic | BenchTransport::QuicLanes => ("quic://127.0.0.1:0".to_owned(), None),
        BenchTransport::H2 => ("h2://127.0.0.1:0".to_owned(), None),
        BenchTransport::Wss => ("wss://127.0.0.1:0".to_owned(), None),
        BenchTransport::Unix => {
            let dir = tempfile::Builder::new()
                .prefix("agentwire-bench-")
                .tempdir_in(std::env::temp_dir())
                .context("creating a temporary directory for the Unix socket")?;
            let url = format!("unix://{}", dir.path().join("hub.sock").display());
            (url, Some(dir))
        }
    };
    let url = HubUrl::parse(&url).map_err(|e| anyhow!(e))?;
    let hub = Hub::new(config, HubMetrics::new());
    let listener = match hub.listen(&url, Some(&identity)).await {
        Ok(l) => l,
        Err(e) => {
            hub.shutdown();
            return Err(anyhow!(e).context(format!("listening on {url}")));
        }
    };
    let url = listener.url.to_string();
    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).context("trusting the generated CA")?;
    Ok(LoopbackHub {
        hub,
        listener,
        url,
        trust,
        _dir: dir,
    })
}

/// Runs one cell end to end and tears everything down again.
pub async fn run_cell(config: &CellConfig) -> Result<CellResult> {
    if config.agents == 0 || config.workers == 0 || config.window == 0 {
        bail!("a cell needs at least one client, one worker and a window of one");
    }
    let lh = start_hub(config.transport).await?;
    let result = run_on_hub(config, &lh).await;
    lh.hub.shutdown();
    lh.listener.close();
    // Dropping closes the listener (removing a Unix socket file), then its directory.
    drop(lh);
    result
}

async fn run_on_hub(config: &CellConfig, lh: &LoopbackHub) -> Result<CellResult> {
    let worker_ids: Vec<String> = (0..config.workers).map(|i| format!("worker-{i}")).collect();
    let client_ids: Vec<String> = (0..config.agents).map(|i| format!("client-{i}")).collect();
    let connect_timeout = Duration::from_secs(10);
    let opts = |id: &str| {
        let mut o = AgentOptions::new(id, lh.url.clone(), lh.trust.clone());
        o.stream_mapping = config.transport.mapping();
        o.connect_timeout = connect_timeout;
        o
    };

    // Connect every agent concurrently.
    let all_ids: Vec<&String> = worker_ids.iter().chain(client_ids.iter()).collect();
    let connect_start = Instant::now();
    let mut connecting = JoinSet::new();
    for (i, id) in all_ids.iter().enumerate() {
        let o = opts(id);
        connecting.spawn(async move { (i, Agent::connect(o).await) });
    }
    let mut agents: Vec<Option<Agent>> = (0..all_ids.len()).map(|_| None).collect();
    let mut connect_error = None;
    let expected = config.transport.kind();
    let deadline = connect_start + connect_timeout + Duration::from_secs(5);
    while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, connecting.join_next()).await {
        match joined {
            Ok((i, Ok(agent))) => {
                if agent.transport() != expected {
                    connect_error.get_or_insert_with(|| {
                        anyhow!(
                            "{} connected over {}, expected {expected}",
                            all_ids.get(i).map_or("?", |s| s.as_str()),
                            agent.transport()
                        )
                    });
                }
                if let Some(slot) = agents.get_mut(i) {
                    *slot = Some(agent);
                }
            }
            Ok((i, Err(e))) => {
                connect_error.get_or_insert_with(|| {
                    anyhow!(
                        "connecting {}: {e}",
                        all_ids.get(i).map_or("?", |s| s.as_str())
                    )
                });
            }
            Err(e) => {
                connect_error.get_or_insert_with(|| anyhow!("connect task failed: {e}"));
            }
        }
    }
    connecting.abort_all();
    let connect_ms = connect_start.elapsed().as_secs_f64() * 1000.0;
    let connected: Vec<Agent> = agents.into_iter().flatten().collect();
    if connect_error.is_some() || connected.len() != all_ids.len() {
        let handles: Vec<AgentHandle> = connected.iter().map(|a| a.handle().clone()).collect();
        close_all(handles).await;
        return Err(connect_error.unwrap_or_else(|| {
            anyhow!(
                "only {} of {} agents connected in time",
                connected.len(),
                all_ids.len()
            )
        }));
    }

    // Workers echo; clients' inboxes are drained so stray messages cannot stall them.
    let mut background = JoinSet::new();
    let mut handles = Vec::with_capacity(connected.len());
    let mut clients = Vec::with_capacity(config.agents);
    for (i, agent) in connected.into_iter().enumerate() {
        let (handle, mut inbox) = agent.split();
        handles.push(handle.clone());
        if i < config.workers {
            background.spawn(async move {
                while let Some(msg) = inbox.recv().await {
                    if msg.envelope.kind == Kind::Request {
                        let _ = msg.reply(msg.envelope.body.clone()).await;
                    }
                }
            });
        } else {
            background.spawn(async move { while inbox.recv().await.is_some() {} });
            clients.push(handle);
        }
    }

    let result = drive_load(config, &lh.url, &clients, &worker_ids, connect_ms).await;
    close_all(handles).await;
    background.abort_all();
    Ok(result)
}

/// Closes every agent concurrently, waiting at most [`CLOSE_TIMEOUT`].
async fn close_all(handles: Vec<AgentHandle>) {
    let mut closing = JoinSet::new();
    for h in handles {
        closing.spawn(async move { h.close().await });
    }
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        while closing.join_next().await.is_some() {}
    })
    .await;
    closing.abort_all();
}

/// The closed-loop load: warm-up, measured window, drain; returns the cell's numbers.
async fn drive_load(
    config: &CellConfig,
    hub_url: &str,
    clients: &[AgentHandle],
    worker_ids: &[String],
    connect_ms: f64,
) -> CellResult {
    let counters = Arc::new(Counters::default());
    let body = Bytes::from(vec![0xA5u8; config.size]);
    let timeout = Duration::from_millis(config.request_timeout_ms.max(1));
    let workers: Arc<[String]> = worker_ids.into();
    let t0 = Instant::now();
    let measure_start = t0 + Duration::from_millis(config.warmup_ms);
    let measure_end = measure_start + Duration::from_millis(config.duration_ms);

    let histograms: Vec<Arc<Mutex<Histogram<u64>>>> = clients
        .iter()
        .map(|_| Arc::new(Mutex::new(stats::new_histogram())))
        .collect();
    let mut slots = JoinSet::new();
    for (ci, (client, hist)) in clients.iter().zip(&histograms).enumerate() {
        for slot in 0..config.window {
            let slot_state = Slot {
                client: client.clone(),
                workers: workers.clone(),
                next_worker: ci * config.window + slot,
                body: body.clone(),
                size: config.size,
                timeout,
                measure_start,
                measure_end,
                counters: counters.clone(),
                hist: hist.clone(),
            };
            slots.spawn(slot_state.run());
        }
    }
    // Each request ends within `timeout`, so every slot ends within `timeout` of the window's
    // end; the extra second covers scheduling. Anything still running then is abandoned.
    let drain_deadline = measure_end + timeout + Duration::from_secs(1);
    let _ = tokio::time::timeout_at(drain_deadline, async {
        while slots.join_next().await.is_some() {}
    })
    .await;
    slots.abort_all();
    // Wait for aborted slots to really stop, so no counter moves while being read.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while slots.join_next().await.is_some() {}
    })
    .await;

    let abandoned = counters.in_flight.load(Ordering::Relaxed);
    let sent = counters.sent.load(Ordering::Relaxed);
    let answered = counters.answered.load(Ordering::Relaxed);
    let errors = counters.errors.load(Ordering::Relaxed) + abandoned;
    let timeouts = counters.timeouts.load(Ordering::Relaxed);
    let mut merged = stats::new_histogram();
    for h in &histograms {
        let h = h.lock().unwrap_or_else(|p| p.into_inner());
        // Same bounds on both sides, so adding cannot fail.
        let _ = merged.add(&*h);
    }
    let secs = (config.duration_ms.max(1)) as f64 / 1000.0;
    let payload_bits = answered as f64 * config.size as f64 * 2.0 * 8.0;
    let error_samples = counters
        .samples
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    CellResult {
        config: config.clone(),
        hub_url: hub_url.to_owned(),
        network: NetworkPath {
            mode: "loopback",
            spec: None,
            hub_url: hub_url.to_owned(),
            emulator: None,
        },
        connect_ms,
        connect: ConnectRecord {
            agents: config.agents + config.workers,
            all_connected_ms: connect_ms,
            handshakes_per_sec: (config.agents + config.workers) as f64
                / (connect_ms / 1000.0).max(1e-9),
            resumed: None,
        },
        open_loop: None,
        priority: None,
        resources: Resources {
            hub_mode: "in-process",
            hub: None,
            agents: ProcessUsage::default(),
            hub_cpu_us_per_response: None,
            agents_cpu_us_per_response: 0.0,
            hub_rss_bytes_per_agent: None,
        },
        bottleneck: None,
        sent,
        answered,
        errors,
        timeouts,
        abandoned,
        consistent: sent == answered + errors && merged.len() == answered,
        responses_per_sec: answered as f64 / secs,
        payload_mbit_per_sec: payload_bits / secs / 1e6,
        latency: stats::summarize(&merged),
        histogram: stats::recorded_pairs(&merged),
        error_samples,
    }
}

/// One in-flight slot of one client: issues a request, waits for it, repeats.
struct Slot {
    client: AgentHandle,
    workers: Arc<[String]>,
    next_worker: usize,
    body: Bytes,
    size: usize,
    timeout: Duration,
    measure_start: Instant,
    measure_end: Instant,
    counters: Arc<Counters>,
    hist: Arc<Mutex<Histogram<u64>>>,
}

impl Slot {
    async fn run(mut self) {
        let c = &self.counters;
        for _ in 0..MAX_REQUESTS_PER_SLOT {
            let start = Instant::now();
            if start >= self.measure_end || self.workers.is_empty() {
                return;
            }
            let measured = start >= self.measure_start;
            let to = &self.workers[self.next_worker % self.workers.len()];
            self.next_worker = self.next_worker.wrapping_add(1);
            if measured {
                c.sent.fetch_add(1, Ordering::Relaxed);
                c.in_flight.fetch_add(1, Ordering::Relaxed);
            }
            let answer = self
                .client
                .request(to, self.body.clone(), self.timeout)
                .await;
            let rtt_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
            let disconnected = matches!(answer, Err(AgentError::Disconnected(_)));
            if measured {
                match answer {
                    Ok(env) if env.body.len() == self.size => {
                        let mut h = self.hist.lock().unwrap_or_else(|p| p.into_inner());
                        stats::record_us(&mut h, rtt_us);
                        drop(h);
                        c.answered.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(env) => {
                        c.errors.fetch_add(1, Ordering::Relaxed);
                        c.sample(format!(
                            "response body of {} bytes, expected {}",
                            env.body.len(),
                            self.size
                        ));
                    }
                    Err(e) => {
                        if matches!(e, AgentError::Timeout(_)) {
                            c.timeouts.fetch_add(1, Ordering::Relaxed);
                        }
                        c.errors.fetch_add(1, Ordering::Relaxed);
                        c.sample(e.to_string());
                    }
                }
                c.in_flight.fetch_sub(1, Ordering::Relaxed);
            }
            if disconnected {
                // This client's connection is gone; further requests would fail at once.
                return;
            }
        }
    }
}
