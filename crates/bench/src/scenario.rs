//! One benchmark cell, end to end: an optional emulated network path ([`crate::netpath`]), the
//! server side (a hub listening only on the transport under test plus `W` echo workers,
//! [`crate::server`]) and, on its own thread and runtime, the client side this module drives:
//!
//! 1. connect `A` clients concurrently (each with its own connector and socket) and time it;
//! 2. closed loop: each client keeps `window` requests in flight; warm-up, measured window
//!    (with CPU readings of hub, agents and emulator at both ends), bounded drain;
//! 3. open loop: requests at a fixed total rate, timed from their intended send time;
//! 4. priority probe: one more client sends small requests of every priority class at a fixed
//!    rate while bulk low-priority requests share its connection;
//! 5. QUIC only: close the clients and reconnect them all with 0-RTT, timed.
//!
//! Everything goes through the public API (`Agent`, `Connector`, `AgentHandle::request`,
//! `Incoming::reply`) over real sockets; this module must not use in-process shortcuts for
//! the transport, and must not print or write files.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentwire::transport::TransportKind;
use agentwire::{
    Agent, AgentError, AgentHandle, AgentOptions, CongestionControl, Connector, Destination,
    HubUrl, Kind, Priority, StreamMapping,
};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::netpath::{self, EmulatedPath};
use crate::record::*;
use crate::resources;
use crate::resources::NetTable;
use crate::server::{HubLauncher, QuicKnobs, ServerReady, ServerSide, ServerSpec};
use crate::stats::{self, OpenLoopSchedule};

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
    /// Cap on the closed loop's requests per second over all clients (`None`: none). Each
    /// of the `agents × window` slots sends at most one request per `slots / rate` seconds,
    /// the slots' turns spread evenly over that interval; a slot whose answer comes later
    /// sends at once (no catching up). Latency still runs from the actual send.
    pub rate: Option<f64>,
    /// Per-request timeout, milliseconds; also bounds the drain after the measured window.
    pub request_timeout_ms: u64,
    /// The emulated network between the clients and the hub.
    pub network: NetworkProfile,
    /// Length of the open-loop phase after the closed-loop window, milliseconds (0 = none).
    pub open_loop_ms: u64,
    /// Length of the priority / head-of-line probe, milliseconds (0 = none).
    pub priority_probe_ms: u64,
    /// Congestion control of QUIC connections (hub and agents).
    pub quic_cc: CongestionControl,
    /// Concurrent QUIC streams each side lets its peer open, per direction type.
    pub quic_max_streams: u32,
    /// Upper bound of QUIC path MTU discovery (hub and agents), bytes of UDP payload.
    pub quic_max_mtu: u16,
    /// QUIC datagram size on loopback paths (hub and agents; 0 = discovered as on any path).
    pub quic_loopback_mtu: u16,
    /// The hub's QUIC receive budget, bytes (0 = off).
    pub quic_receive_budget: u64,
    /// UDP sockets and quinn endpoints the hub's QUIC listener uses (`SO_REUSEPORT`).
    pub quic_endpoints: usize,
    /// TCP congestion control set inside the emulated path's namespaces (`None`: the
    /// kernel's default; loopback cells always use the host's setting).
    pub tcp_cc: Option<String>,
    /// The netsim packet stage of emulated paths (the bridge by default).
    pub netsim_stage: agentwire_netsim::StageKind,
    /// Directory for this run's qlog traces (hub and agents), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qlog_dir: Option<PathBuf>,
}

impl CellConfig {
    /// Workers used for `agents` clients: one per ten clients, at least one.
    pub fn workers_for(agents: usize) -> usize {
        (agents / 10).max(1)
    }

    /// The QUIC settings this cell gives the hub, the workers and the clients.
    pub fn quic_knobs(&self) -> QuicKnobs {
        QuicKnobs {
            cc: self.quic_cc,
            max_streams: self.quic_max_streams,
            max_mtu: self.quic_max_mtu,
            loopback_mtu: self.quic_loopback_mtu,
            receive_budget: self.quic_receive_budget,
            endpoints: self.quic_endpoints,
            qlog_dir: self.qlog_dir.clone(),
        }
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

/// How long a priority-probe bulk request body is, bytes.
pub const PROBE_BULK_SIZE: usize = 256 * 1024;
/// Bulk requests the probe keeps in flight.
pub const PROBE_BULK_WINDOW: usize = 4;
/// Body size of the probe's small requests, bytes.
pub const PROBE_SMALL_SIZE: usize = 64;
/// Small probe requests per second and priority class.
pub const PROBE_RATE_PER_CLASS: f64 = 20.0;
/// A request sent more than this after its intended time counts as a late send (Tokio's
/// timer has millisecond granularity, so up to about 1 ms late is normal).
const LATE_SEND: Duration = Duration::from_millis(5);
/// Fraction of its total time a side must be busy before the bench calls it a bottleneck.
const BUSY: f64 = 0.85;

/// Runs one cell end to end and tears everything down again. Blocks the calling thread (the
/// server and client sides run on their own threads and runtimes).
pub fn run_cell(config: &CellConfig, launcher: &HubLauncher, seed: u64) -> Result<CellResult> {
    if config.agents == 0 || config.workers == 0 || config.window == 0 {
        bail!("a cell needs at least one client, one worker and a window of one");
    }
    if config.transport == BenchTransport::Unix && !config.network.is_loopback() {
        bail!(
            "unix sockets do not cross a network: no {} cell",
            config.network
        );
    }
    let path = if config.network.is_loopback() {
        None
    } else {
        Some(EmulatedPath::start(
            &config.network,
            seed,
            config.tcp_cc.as_deref(),
            config.netsim_stage,
        )?)
    };
    let me = std::process::id();
    resources::reset_peak_rss(me);
    let drops_before = path.is_none().then(resources::udp_rcvbuf_errors).flatten();
    let server = ServerSide::start(ServerSpec {
        transport: config.transport,
        workers: config.workers,
        netns: path.as_ref().map(|p| p.server_ns().to_owned()),
        host: match &path {
            Some(_) => EmulatedPath::server_addr().to_string(),
            None => "127.0.0.1".to_owned(),
        },
        launcher: launcher.clone(),
        quic: config.quic_knobs(),
    })
    .context("starting the hub and workers")?;
    let ready = server.ready.clone();
    let client_ns = path.as_ref().map(|p| p.client_ns().to_owned());
    let cfg = config.clone();
    let client = std::thread::Builder::new()
        .name("bench-clients".into())
        .spawn(move || client_thread(cfg, ready, client_ns))
        .context("spawning the client-side thread")?;
    let outcome = client
        .join()
        .map_err(|_| anyhow!("the client side panicked"))
        .and_then(|r| r);
    server.stop();
    let emulator = path.as_ref().map(EmulatedPath::record);
    if let Some(failure) = path.as_ref().and_then(EmulatedPath::failure) {
        bail!("the emulator failed during the cell: {failure}");
    }
    let outcome = outcome?;
    let mut result = assemble(config, launcher, &path, outcome, emulator);
    result.udp_rcvbuf_errors = drops_before
        .zip(resources::udp_rcvbuf_errors())
        .map(|(before, after)| after.saturating_sub(before));
    Ok(result)
}

/// CPU readings at one instant: this process, the emulator's threads in it, the hub process.
#[derive(Debug, Clone, Copy)]
struct CpuSnapshot {
    at: Instant,
    process: f64,
    emulator: f64,
    hub: Option<f64>,
}

impl CpuSnapshot {
    fn take(hub_pid: Option<u32>) -> Self {
        CpuSnapshot {
            at: Instant::now(),
            process: resources::self_cpu_seconds().unwrap_or(0.0),
            emulator: resources::self_threads_cpu_seconds(netpath::EMULATOR_THREAD_PREFIX),
            hub: hub_pid.and_then(resources::process_cpu_seconds),
        }
    }
}

/// The closed-loop window's CPU use: wall seconds and CPU seconds per side.
#[derive(Debug, Clone, Copy)]
struct CpuWindow {
    wall: f64,
    agents: f64,
    emulator: f64,
    hub: Option<f64>,
    /// Peak RSS of the hub process from its start to the end of the window.
    hub_peak_rss: Option<u64>,
    /// Peak RSS of this process from the cell's start to the end of the window.
    agents_peak_rss: Option<u64>,
    /// The hub process's socket queues, sampled up to the end of the window.
    hub_sockets: Option<SocketMemory>,
}

impl CpuWindow {
    fn between(a: CpuSnapshot, b: CpuSnapshot) -> Self {
        let emulator = (b.emulator - a.emulator).max(0.0);
        CpuWindow {
            wall: b.at.duration_since(a.at).as_secs_f64(),
            agents: (b.process - a.process - emulator).max(0.0),
            emulator,
            hub: a.hub.zip(b.hub).map(|(x, y)| (y - x).max(0.0)),
            hub_peak_rss: None,
            agents_peak_rss: None,
            hub_sockets: None,
        }
    }
}

/// The kernel socket tables that hold the sockets of the hub at `url`: UDP for QUIC, TCP for
/// HTTP/2 and WebSocket (Unix sockets are not counted), of the address family the URL names
/// (both when it names a host; all four when it does not parse).
///
/// ```
/// use agentwire_bench::scenario::hub_socket_tables;
/// use agentwire_measure::resources::NetTable;
/// assert_eq!(hub_socket_tables("quic://127.0.0.1:4433"), [NetTable::Udp]);
/// assert_eq!(hub_socket_tables("wss://[::1]:4433/agentwire/v1"), [NetTable::Tcp6]);
/// assert_eq!(hub_socket_tables("h2://localhost:4433"), [NetTable::Tcp, NetTable::Tcp6]);
/// assert!(hub_socket_tables("unix:///tmp/hub.sock").is_empty());
/// ```
pub fn hub_socket_tables(url: &str) -> Vec<NetTable> {
    let Ok(url) = HubUrl::parse(url) else {
        return NetTable::ALL.to_vec();
    };
    let (v4, v6) = match url.transport {
        TransportKind::Quic => (NetTable::Udp, NetTable::Udp6),
        TransportKind::Http2 | TransportKind::WebSocket => (NetTable::Tcp, NetTable::Tcp6),
        // A hub URL never names the cluster link.
        TransportKind::Unix | TransportKind::Cluster => return Vec::new(),
    };
    match url.host().and_then(|h| h.parse::<std::net::IpAddr>().ok()) {
        Some(std::net::IpAddr::V4(_)) => vec![v4],
        Some(std::net::IpAddr::V6(_)) => vec![v6],
        None => vec![v4, v6],
    }
}

/// How often the hub's socket queues and RSS are sampled.
const SOCKET_SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// The peaks of process `pid`'s socket queues, and of its RSS plus them, sampled every
/// [`SOCKET_SAMPLE_EVERY`] until `end`; `None` without a process or a readable `/proc`.
async fn sample_socket_memory(
    pid: Option<u32>,
    tables: Vec<NetTable>,
    end: Instant,
) -> Option<SocketMemory> {
    let pid = pid?;
    let mut peaks: Option<SocketMemory> = None;
    let mut tick = tokio::time::interval(SOCKET_SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while Instant::now() < end {
        tick.tick().await;
        // A few thousand lines of /proc: read off the runtime's workers.
        let tables = tables.clone();
        let sample = tokio::task::spawn_blocking(move || {
            resources::socket_queue_bytes_in(pid, &tables).zip(resources::rss_bytes(pid))
        })
        .await;
        let Ok(Some((queued, rss))) = sample else {
            continue;
        };
        let p = peaks.get_or_insert_with(SocketMemory::default);
        p.peak_queued_bytes = p.peak_queued_bytes.max(queued);
        p.peak_rss_plus_queued_bytes = p.peak_rss_plus_queued_bytes.max(rss + queued);
        p.samples += 1;
    }
    peaks
}

/// What the closed-loop phase counted.
struct ClosedLoop {
    sent: u64,
    answered: u64,
    errors: u64,
    timeouts: u64,
    abandoned: u64,
    histogram: Histogram<u64>,
    error_samples: Vec<String>,
}

/// Everything the client side measured.
struct ClientOutcome {
    hub_url: String,
    connect: ConnectRecord,
    closed: ClosedLoop,
    cpu: Option<CpuWindow>,
    open_loop: Option<OpenLoopRecord>,
    priority: Option<PriorityRecord>,
}

fn client_thread(
    config: CellConfig,
    ready: ServerReady,
    netns: Option<String>,
) -> Result<ClientOutcome> {
    if let Some(ns) = &netns {
        netpath::enter(ns)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("bench-clients-rt")
        .enable_all()
        .build()
        .context("building the client-side runtime")?;
    rt.block_on(client_side(&config, &ready))
}

fn client_options(config: &CellConfig, ready: &ServerReady, id: &str) -> AgentOptions {
    let mut o = AgentOptions::new(id, ready.url.clone(), ready.trust.clone());
    o.stream_mapping = config.transport.mapping();
    o.connect_timeout = connect_timeout(config);
    o.zero_rtt = config.transport.kind() == TransportKind::Quic;
    config.quic_knobs().apply(&mut o.quic);
    o
}

/// Generous: a thousand handshakes over a 100 ms path on two cores take a while.
fn connect_timeout(config: &CellConfig) -> Duration {
    Duration::from_secs(30) + Duration::from_millis(config.network.rtt_ms as u64 * 20)
}

/// Agents connected together: in order, the time until the last one was up, and each one's
/// own time from the common start, shortest first.
struct Connected {
    agents: Vec<Agent>,
    all: Duration,
    each: Vec<Duration>,
}

impl Connected {
    /// The `q` quantile (0..=1) of the agents' own connect times, milliseconds (exact, not
    /// bucketed as a latency histogram would: it is compared with `all`).
    fn quantile_ms(&self, q: f64) -> f64 {
        let each = &self.each;
        let at = ((each.len() as f64 - 1.0) * q).round() as usize;
        each.get(at).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    }
}

/// Connects `ids` concurrently through their connectors; every agent must land on the
/// transport under test.
async fn connect_clients(
    config: &CellConfig,
    ready: &ServerReady,
    connectors: &[Arc<Connector>],
    ids: &[String],
) -> Result<Connected> {
    let start = Instant::now();
    let mut connecting = JoinSet::new();
    for (i, (connector, id)) in connectors.iter().zip(ids).enumerate() {
        let o = client_options(config, ready, id);
        let c = connector.clone();
        connecting.spawn(async move {
            let result = c.connect(&o).await;
            (i, result.map(|agent| (agent, start.elapsed())))
        });
    }
    let mut each = Vec::with_capacity(ids.len());
    let mut agents: Vec<Option<Agent>> = (0..ids.len()).map(|_| None).collect();
    let mut first_error = None;
    let expected = config.transport.kind();
    let deadline = start + connect_timeout(config) + Duration::from_secs(5);
    while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, connecting.join_next()).await {
        match joined {
            Ok((i, Ok((agent, took)))) => {
                each.push(took);
                if agent.transport() != expected {
                    first_error.get_or_insert_with(|| {
                        anyhow!(
                            "{} connected over {}, expected {expected}",
                            ids.get(i).map_or("?", |s| s.as_str()),
                            agent.transport()
                        )
                    });
                }
                if let Some(slot) = agents.get_mut(i) {
                    *slot = Some(agent);
                }
            }
            Ok((i, Err(e))) => {
                first_error.get_or_insert_with(|| {
                    anyhow!("connecting {}: {e}", ids.get(i).map_or("?", |s| s.as_str()))
                });
            }
            Err(e) => {
                first_error.get_or_insert_with(|| anyhow!("connect task failed: {e}"));
            }
        }
    }
    connecting.abort_all();
    let elapsed = start.elapsed();
    let connected: Vec<Agent> = agents.into_iter().flatten().collect();
    if first_error.is_some() || connected.len() != ids.len() {
        close_all(connected.iter().map(|a| a.handle().clone()).collect()).await;
        return Err(first_error.unwrap_or_else(|| {
            anyhow!(
                "only {} of {} agents connected in time",
                connected.len(),
                ids.len()
            )
        }));
    }
    each.sort_unstable();
    Ok(Connected {
        agents: connected,
        all: elapsed,
        each,
    })
}

fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

async fn client_side(config: &CellConfig, ready: &ServerReady) -> Result<ClientOutcome> {
    let ids: Vec<String> = (0..config.agents).map(|i| format!("client-{i}")).collect();
    let worker_ids: Vec<String> = (0..config.workers).map(|i| format!("worker-{i}")).collect();
    let connectors = ids
        .iter()
        .map(|id| Connector::new(&client_options(config, ready, id)).map(Arc::new))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("client options: {e}"))?;
    let connected = connect_clients(config, ready, &connectors, &ids).await?;
    let mut connect = ConnectRecord {
        agents: config.agents,
        all_connected_ms: connected.all.as_secs_f64() * 1000.0,
        p50_ms: connected.quantile_ms(0.5),
        p99_ms: connected.quantile_ms(0.99),
        handshakes_per_sec: per_sec(config.agents, connected.all),
        resumed: None,
    };
    let agents = connected.agents;

    // Clients' inboxes are drained so stray messages cannot stall them.
    let mut background = JoinSet::new();
    let mut clients = Vec::with_capacity(agents.len());
    for agent in agents {
        let (handle, mut inbox) = agent.split();
        background.spawn(async move { while inbox.recv().await.is_some() {} });
        clients.push(handle);
    }

    let t0 = Instant::now();
    let measure_start = t0 + Duration::from_millis(config.warmup_ms);
    let measure_end = measure_start + Duration::from_millis(config.duration_ms);
    let hub_pid = ready.hub_pid;
    let tables = hub_socket_tables(&ready.url);
    let sockets = tokio::spawn(sample_socket_memory(hub_pid, tables, measure_end));
    let sampler = tokio::spawn(async move {
        tokio::time::sleep_until(measure_start).await;
        let a = CpuSnapshot::take(hub_pid);
        tokio::time::sleep_until(measure_end).await;
        let mut w = CpuWindow::between(a, CpuSnapshot::take(hub_pid));
        // Peak memory with every agent connected and the load running, read before the later
        // phases (the probe's bulk, the 0-RTT reconnects) can raise it.
        w.hub_peak_rss = hub_pid.and_then(resources::peak_rss_bytes);
        w.agents_peak_rss = resources::peak_rss_bytes(std::process::id());
        w.hub_sockets = sockets.await.ok().flatten();
        w
    });
    let closed = drive_load(config, &clients, &worker_ids, measure_start, measure_end).await;
    let cpu = sampler.await.ok();

    let body = Bytes::from(vec![0xA5u8; config.size]);
    let timeout = Duration::from_millis(config.request_timeout_ms.max(1));
    let open_loop = if config.open_loop_ms > 0 {
        let secs = (config.duration_ms.max(1)) as f64 / 1000.0;
        let closed_rate = closed.answered as f64 / secs;
        let rate = (closed_rate * 0.5).max(1.0);
        Some(
            open_loop(
                &clients,
                &worker_ids,
                &body,
                rate,
                format!("50% of this run's closed-loop rate ({closed_rate:.0}/s)"),
                Duration::from_millis(config.open_loop_ms),
                timeout,
            )
            .await,
        )
    } else {
        None
    };

    let priority = if config.priority_probe_ms > 0 {
        let worker = worker_ids.first().cloned().unwrap_or_default();
        Some(
            priority_probe(
                config,
                ready,
                &worker,
                Duration::from_millis(config.priority_probe_ms),
                timeout,
            )
            .await?,
        )
    } else {
        None
    };

    close_all(clients).await;
    background.abort_all();

    if config.transport.kind() == TransportKind::Quic {
        // Every connector now holds a session ticket: reconnect all clients with 0-RTT.
        let again: Vec<String> = ids.iter().map(|id| format!("{id}-0rtt")).collect();
        let Connected {
            agents, all: took, ..
        } = connect_clients(config, ready, &connectors, &again).await?;
        let (accepted, rejected) = agents.iter().fold((0, 0), |(a, r), agent| {
            let s = agent.stats();
            (
                a + u64::from(s.zero_rtt_used && s.zero_rtt_rejected == 0),
                r + u64::from(s.zero_rtt_used && s.zero_rtt_rejected > 0),
            )
        });
        connect.resumed = Some(ResumedConnect {
            agents: agents.len(),
            all_connected_ms: took.as_secs_f64() * 1000.0,
            handshakes_per_sec: per_sec(agents.len(), took),
            zero_rtt_accepted: accepted,
            zero_rtt_rejected: rejected,
        });
        close_all(agents.iter().map(|a| a.handle().clone()).collect()).await;
    }

    Ok(ClientOutcome {
        hub_url: ready.url.clone(),
        connect,
        closed,
        cpu,
        open_loop,
        priority,
    })
}

/// Builds the run's record from what both sides measured.
fn assemble(
    config: &CellConfig,
    launcher: &HubLauncher,
    path: &Option<EmulatedPath>,
    outcome: ClientOutcome,
    emulator: Option<EmulatorRecord>,
) -> CellResult {
    let c = &outcome.closed;
    let secs = (config.duration_ms.max(1)) as f64 / 1000.0;
    let payload_bits = c.answered as f64 * config.size as f64 * 2.0 * 8.0;
    let open_consistent = outcome
        .open_loop
        .as_ref()
        .is_none_or(|o| o.scheduled == o.answered + o.errors && o.latency.count == o.answered);
    let cpu = outcome.cpu;
    let wall = cpu.map_or(secs, |w| w.wall.max(1e-9));
    let usage = |cpu_s: f64, rss: u64| ProcessUsage {
        cpu_seconds: cpu_s,
        cores_busy: cpu_s / wall,
        peak_rss_bytes: rss,
    };
    let hub = match launcher {
        HubLauncher::InProcess => None,
        HubLauncher::Process(_) => cpu
            .and_then(|w| w.hub)
            .map(|h| usage(h, cpu.and_then(|w| w.hub_peak_rss).unwrap_or(0))),
    };
    let agents = usage(
        cpu.map_or(0.0, |w| w.agents),
        cpu.and_then(|w| w.agents_peak_rss).unwrap_or(0),
    );
    let per_response = |cpu_s: f64| cpu_s * 1e6 / (c.answered.max(1) as f64);
    let resources = Resources {
        hub_mode: launcher.mode(),
        hub,
        agents,
        hub_cpu_us_per_response: hub.map(|h| per_response(h.cpu_seconds)),
        agents_cpu_us_per_response: per_response(agents.cpu_seconds),
        hub_rss_bytes_per_agent: hub
            .map(|h| h.peak_rss_bytes as f64 / (config.agents + config.workers) as f64),
        // Sampled only with a hub process to sample (`ServerReady::hub_pid`).
        hub_sockets: cpu.and_then(|w| w.hub_sockets),
    };
    let bottleneck = bottleneck(
        cpu,
        emulator.as_ref(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    let spec = path.as_ref().map(|p| p.spec().to_owned());
    CellResult {
        config: config.clone(),
        hub_url: outcome.hub_url.clone(),
        network: NetworkPath {
            mode: if path.is_some() { "packet" } else { "loopback" },
            spec,
            hub_url: outcome.hub_url.clone(),
            emulator,
        },
        connect_ms: outcome.connect.all_connected_ms,
        connect: outcome.connect,
        sent: c.sent,
        answered: c.answered,
        errors: c.errors,
        timeouts: c.timeouts,
        abandoned: c.abandoned,
        consistent: c.sent == c.answered + c.errors
            && c.histogram.len() == c.answered
            && open_consistent,
        responses_per_sec: c.answered as f64 / secs,
        payload_mbit_per_sec: payload_bits / secs / 1e6,
        latency: stats::summarize(&c.histogram),
        histogram: stats::recorded_pairs(&c.histogram),
        open_loop: outcome.open_loop,
        priority: outcome.priority,
        resources,
        bottleneck,
        error_samples: c.error_samples.clone(),
        udp_rcvbuf_errors: None,
    }
}

/// Says whether the closed-loop numbers may describe the load generator or the emulator
/// rather than the hub and transport under test.
///
/// * The emulator is the bottleneck when one of its threads was busy more than 85 % of the
///   time, or its queue filled up (verdicts refused, or 75 % of the queue held).
/// * The load generator is the bottleneck when the machine was busy more than 85 % of its
///   cores and the agent side (clients and workers) used more CPU than the hub.
///
/// ```
/// # use agentwire_bench::scenario::bottleneck_rule;
/// // 2 cores, 1 s: agents 1.5 s CPU, hub 0.3 s: the generator saturates the machine.
/// assert!(bottleneck_rule(1.0, 1.5, Some(0.3), 0.0, 2, false).unwrap().contains("load generator"));
/// // Hub busier than the agents: that is the system under test working, no warning.
/// assert!(bottleneck_rule(1.0, 0.8, Some(1.1), 0.0, 2, false).is_none());
/// // An emulator thread at 95 %: the emulator limits the cell.
/// assert!(bottleneck_rule(1.0, 0.2, Some(0.2), 0.95, 2, false).unwrap().contains("emulator"));
/// ```
pub fn bottleneck_rule(
    wall_s: f64,
    agents_cpu_s: f64,
    hub_cpu_s: Option<f64>,
    emulator_busiest_thread_s: f64,
    cores: usize,
    emulator_queue_full: bool,
) -> Option<String> {
    let wall = wall_s.max(1e-9);
    if emulator_queue_full || emulator_busiest_thread_s / wall > BUSY {
        return Some(format!(
            "emulator bound: the netsim stage was {:.0}% busy{}; the numbers measure the \
             emulator, not the protocol",
            emulator_busiest_thread_s / wall * 100.0,
            if emulator_queue_full {
                " and its queue filled up or the kernel dropped packets before it saw them"
            } else {
                ""
            }
        ));
    }
    let hub = hub_cpu_s.unwrap_or(0.0);
    let busy = (agents_cpu_s + hub + emulator_busiest_thread_s) / (wall * cores as f64);
    if busy > BUSY && agents_cpu_s > hub {
        return Some(format!(
            "load generator bound: the machine was {:.0}% busy and the agent side used {:.2} \
             cores against the hub's {:.2}; a faster client would show more",
            busy * 100.0,
            agents_cpu_s / wall,
            hub / wall
        ));
    }
    None
}

fn bottleneck(
    cpu: Option<CpuWindow>,
    emulator: Option<&EmulatorRecord>,
    cores: usize,
) -> Option<String> {
    let w = cpu?;
    let queue_full = emulator.is_some_and(|e| {
        e.verdict_errors > 0
            || e.dropped_kernel > 0
            || e.oversize > 0
            || e.max_held >= EmulatedPath::queue_limit() * 3 / 4
    });
    // The stage has one thread per direction; half the total is a fair stand-in for the
    // busier one when only the total is known.
    bottleneck_rule(w.wall, w.agents, w.hub, w.emulator / 2.0, cores, queue_full)
}

/// Closes every agent concurrently, waiting at most [`CLOSE_TIMEOUT`].
pub(crate) async fn close_all(handles: Vec<AgentHandle>) {
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

/// The closed-loop load: warm-up, measured window, drain.
async fn drive_load(
    config: &CellConfig,
    clients: &[AgentHandle],
    worker_ids: &[String],
    measure_start: Instant,
    measure_end: Instant,
) -> ClosedLoop {
    let counters = Arc::new(Counters::default());
    let body = Bytes::from(vec![0xA5u8; config.size]);
    let timeout = Duration::from_millis(config.request_timeout_ms.max(1));
    let workers: Arc<[String]> = worker_ids.into();

    let histograms: Vec<Arc<Mutex<Histogram<u64>>>> = clients
        .iter()
        .map(|_| Arc::new(Mutex::new(stats::new_histogram())))
        .collect();
    let mut slots = JoinSet::new();
    let paced_from = Instant::now();
    let slot_count = clients.len() * config.window;
    for (ci, (client, hist)) in clients.iter().zip(&histograms).enumerate() {
        for slot in 0..config.window {
            let index = ci * config.window + slot;
            let slot_state = Slot {
                client: client.clone(),
                workers: workers.clone(),
                next_worker: index,
                body: body.clone(),
                size: config.size,
                timeout,
                measure_start,
                measure_end,
                counters: counters.clone(),
                hist: hist.clone(),
                pace: config
                    .rate
                    .and_then(|rate| Pace::new(rate, slot_count, index, paced_from)),
            };
            slots.spawn(slot_state.run());
        }
    }
    // Each request ends within `timeout`, so every slot ends within `timeout` of the window's
    // end; the extra second covers scheduling. Anything still running then is abandoned.
    let drain_deadline = measure_end + timeout + Duration::from_secs(1);
    join_until(&mut slots, drain_deadline).await;

    let abandoned = counters.in_flight.load(Ordering::Relaxed);
    let mut merged = stats::new_histogram();
    for h in &histograms {
        let h = h.lock().unwrap_or_else(|p| p.into_inner());
        // Same bounds on both sides, so adding cannot fail.
        let _ = merged.add(&*h);
    }
    let error_samples = counters
        .samples
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    ClosedLoop {
        sent: counters.sent.load(Ordering::Relaxed),
        answered: counters.answered.load(Ordering::Relaxed),
        errors: counters.errors.load(Ordering::Relaxed) + abandoned,
        timeouts: counters.timeouts.load(Ordering::Relaxed),
        abandoned,
        histogram: merged,
        error_samples,
    }
}

/// Waits for every task of `set` until `deadline`, then aborts the rest and waits (briefly)
/// until they really stopped, so no counter moves while being read.
async fn join_until<T: 'static>(set: &mut JoinSet<T>, deadline: Instant) {
    let _ =
        tokio::time::timeout_at(deadline, async { while set.join_next().await.is_some() {} }).await;
    set.abort_all();
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while set.join_next().await.is_some() {}
    })
    .await;
}

/// Tallies of an open-loop stream of requests.
#[derive(Default)]
struct OpenTally {
    answered: AtomicU64,
    errors: AtomicU64,
    late: AtomicU64,
    hist: Mutex<Option<Histogram<u64>>>,
}

impl OpenTally {
    fn new() -> Arc<Self> {
        Arc::new(OpenTally {
            hist: Mutex::new(Some(stats::new_histogram())),
            ..OpenTally::default()
        })
    }

    fn record(&self, us: u64) {
        let mut h = self.hist.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = h.as_mut() {
            stats::record_us(h, us);
        }
        self.answered.fetch_add(1, Ordering::Relaxed);
    }

    fn histogram(&self) -> Histogram<u64> {
        self.hist
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(stats::new_histogram)
    }
}

/// Sends requests built by `make` on `schedule`, each in its own task, timing each from its
/// intended send time. Returns the number scheduled.
fn spawn_schedule<F, Fut>(
    tasks: &mut JoinSet<()>,
    schedule: OpenLoopSchedule,
    start: Instant,
    tally: Arc<OpenTally>,
    make: F,
) -> u64
where
    F: Fn(u64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let count = schedule.count();
    let mut inner = JoinSet::new();
    tasks.spawn(async move {
        for k in 0..count {
            let Some(due) = schedule.intended(k) else {
                break;
            };
            let intended = start + due;
            tokio::time::sleep_until(intended).await;
            if Instant::now().duration_since(intended) > LATE_SEND {
                tally.late.fetch_add(1, Ordering::Relaxed);
            }
            let fut = make(k);
            let t = tally.clone();
            inner.spawn(async move {
                if fut.await {
                    let us = stats::latency_from_intended_us(due, Instant::now() - start);
                    t.record(us);
                } else {
                    t.errors.fetch_add(1, Ordering::Relaxed);
                }
            });
            // Reap finished requests as we go so the set stays small.
            while inner.try_join_next().is_some() {}
        }
        while inner.join_next().await.is_some() {}
    });
    count
}

/// The open-loop phase over the connected clients.
async fn open_loop(
    clients: &[AgentHandle],
    workers: &[String],
    body: &Bytes,
    rate: f64,
    rate_basis: String,
    duration: Duration,
    timeout: Duration,
) -> OpenLoopRecord {
    let start = Instant::now() + Duration::from_millis(20);
    let tally = OpenTally::new();
    let mut tasks = JoinSet::new();
    let mut scheduled = 0;
    let workers: Arc<[String]> = workers.into();
    for (i, client) in clients.iter().enumerate() {
        let Some(schedule) = OpenLoopSchedule::for_client(rate, clients.len(), i, duration) else {
            continue;
        };
        let client = client.clone();
        let workers = workers.clone();
        let body = body.clone();
        let size = body.len();
        scheduled += spawn_schedule(&mut tasks, schedule, start, tally.clone(), move |k| {
            let client = client.clone();
            let to = workers
                .get((i + k as usize) % workers.len().max(1))
                .cloned()
                .unwrap_or_default();
            let body = body.clone();
            async move {
                matches!(client.request(&to, body, timeout).await, Ok(env) if env.body.len() == size)
            }
        });
    }
    join_until(
        &mut tasks,
        start + duration + timeout + Duration::from_secs(1),
    )
    .await;
    let hist = tally.histogram();
    let answered = tally.answered.load(Ordering::Relaxed);
    OpenLoopRecord {
        rate_per_sec: rate,
        rate_basis,
        duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        scheduled,
        answered,
        // Failed, or never finished before the drain deadline.
        errors: scheduled.saturating_sub(answered),
        late_sends: tally.late.load(Ordering::Relaxed),
        latency: stats::summarize(&hist),
        histogram: stats::recorded_pairs(&hist),
    }
}

/// The priority / head-of-line probe on one extra client.
async fn priority_probe(
    config: &CellConfig,
    ready: &ServerReady,
    worker: &str,
    duration: Duration,
    timeout: Duration,
) -> Result<PriorityRecord> {
    let opts = client_options(config, ready, "probe");
    let agent = Agent::connect(opts)
        .await
        .map_err(|e| anyhow!("connecting the priority probe: {e}"))?;
    let (probe, mut inbox) = agent.split();
    let drain = tokio::spawn(async move { while inbox.recv().await.is_some() {} });
    let start = Instant::now() + Duration::from_millis(20);
    let end = start + duration;

    // Bulk: low-priority requests kept in flight for the whole probe.
    let bulk_answered = Arc::new(AtomicU64::new(0));
    let mut bulk = JoinSet::new();
    let bulk_body = Bytes::from(vec![0x5Au8; PROBE_BULK_SIZE]);
    for _ in 0..PROBE_BULK_WINDOW {
        let (probe, body, to, done) = (
            probe.clone(),
            bulk_body.clone(),
            worker.to_owned(),
            bulk_answered.clone(),
        );
        bulk.spawn(async move {
            while Instant::now() < end {
                let env = probe
                    .envelope(Destination::agent(&to), Kind::Request)
                    .with_priority(Priority::Low)
                    .with_body(body.clone());
                match probe.request_envelope(env, timeout).await {
                    Ok(_) => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(AgentError::Disconnected(_)) => return,
                    Err(_) => {}
                }
            }
        });
    }

    // Small requests of every class at a fixed rate each, timed from intended send time.
    let mut tasks = JoinSet::new();
    let mut per_class = Vec::new();
    let small = Bytes::from(vec![0x11u8; PROBE_SMALL_SIZE]);
    for priority in Priority::ALL {
        let tally = OpenTally::new();
        let Some(schedule) = OpenLoopSchedule::for_client(PROBE_RATE_PER_CLASS, 1, 0, duration)
        else {
            continue;
        };
        let (probe, body, to) = (probe.clone(), small.clone(), worker.to_owned());
        let sent = spawn_schedule(&mut tasks, schedule, start, tally.clone(), move |_| {
            let env = probe
                .envelope(Destination::agent(&to), Kind::Request)
                .with_priority(priority)
                .with_body(body.clone());
            let probe = probe.clone();
            async move {
                matches!(probe.request_envelope(env, timeout).await,
                    Ok(e) if e.body.len() == PROBE_SMALL_SIZE)
            }
        });
        per_class.push((priority, sent, tally));
    }
    join_until(&mut tasks, end + timeout + Duration::from_secs(1)).await;
    join_until(&mut bulk, end + timeout + Duration::from_secs(1)).await;
    probe.close().await;
    drain.abort();
    let classes = per_class
        .into_iter()
        .map(|(priority, sent, tally)| {
            let hist = tally.histogram();
            ClassLatency {
                class: priority.name(),
                sent,
                answered: tally.answered.load(Ordering::Relaxed),
                latency: stats::summarize(&hist),
            }
        })
        .collect();
    Ok(PriorityRecord {
        bulk_size: PROBE_BULK_SIZE,
        bulk_window: PROBE_BULK_WINDOW,
        bulk_answered: bulk_answered.load(Ordering::Relaxed),
        probe_size: PROBE_SMALL_SIZE,
        probe_rate_per_class: PROBE_RATE_PER_CLASS,
        classes,
    })
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
    /// `--rate`: when this slot may send next, and its interval.
    pace: Option<Pace>,
}

/// One slot's share of a rate cap ([`CellConfig::rate`]).
struct Pace {
    next: Instant,
    interval: Duration,
}

impl Pace {
    /// Slot `index` of `slots` under a cap of `rate` requests per second in all, from `start`;
    /// `None` (no cap) for a rate that is not a positive number or an interval too long to
    /// represent ([`BenchConfig::validate`](crate::BenchConfig::validate) refuses those).
    fn new(rate: f64, slots: usize, index: usize, start: Instant) -> Option<Pace> {
        let interval = Duration::try_from_secs_f64(slots as f64 / rate)
            .ok()
            .filter(|i| rate > 0.0 && !i.is_zero())?;
        let offset = interval.mul_f64(index as f64 / slots.max(1) as f64);
        Some(Pace {
            next: start.checked_add(offset)?,
            interval,
        })
    }

    /// Waits for this slot's turn; the next turn is one interval after this one, or after
    /// now if this one came late.
    async fn turn(&mut self) {
        tokio::time::sleep_until(self.next).await;
        self.next = self.next.max(Instant::now()) + self.interval;
    }
}

impl Slot {
    async fn run(mut self) {
        let c = &self.counters;
        for _ in 0..MAX_REQUESTS_PER_SLOT {
            if let Some(pace) = &mut self.pace {
                // A turn after the window's end is never waited for.
                if pace.next >= self.measure_end {
                    return;
                }
                pace.turn().await;
            }
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
