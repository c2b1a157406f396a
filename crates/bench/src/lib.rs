//! # agentwire-bench — the agent scenario matrix, measured honestly
//!
//! `agentwire bench` runs *cells* (transport × agents × message size × network): for each it
//! generates certificates, starts a real hub listening only on the transport under test (as
//! its own `agentwire hub` process, so its CPU and memory are measured apart), connects echo
//! workers next to it and clients across the network path (loopback, or an emulated link in
//! network namespaces through `agentwire netsim`'s packet mode), and measures connection
//! establishment (and QUIC 0-RTT reconnects), closed-loop throughput and latency, open-loop
//! latency timed from intended send times, per-priority latency with bulk traffic sharing the
//! connection, and CPU and peak memory per side. Each cell runs several times; the report
//! gives medians, the spread, noisy cells and bottleneck warnings, as JSON (schema
//! [`SCHEMA`], raw histograms included), Markdown, SVG charts and an HTML page.
//!
//! Presets: [`BenchConfig::quick`] (the default), [`BenchConfig::report_matrix`] (the nine
//! scenarios of the published agent-transport report × QUIC, HTTP/2, WebSocket, 60 s per
//! cell) and [`BenchConfig::single_cell`].
//!
//! This crate measures; it must not change how agentwire behaves (no private hooks, no
//! in-process transport) and it must not hide failures: every request started in a measured
//! window is reported as answered or as an error, and a run that fails is recorded with its
//! reason.
//!
//! ```no_run
//! # fn demo() -> anyhow::Result<()> {
//! use agentwire_bench::{server::HubLauncher, BenchConfig};
//! let config = BenchConfig::quick();
//! let report = agentwire_bench::run(&config, &HubLauncher::InProcess, vec!["demo".into()],
//!     &mut |p| eprintln!("{}", p.label))?;
//! print!("{}", agentwire_bench::render_table(&report));
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod cell;
mod format;
pub mod netpath;
pub mod queue_load;
pub mod record;
pub mod report;
pub mod scenario;
pub mod server;
mod summary;
pub mod verdict;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use agentwire::transport::TransportKind;
use std::time::{SystemTime, UNIX_EPOCH};

use agentwire::{CongestionControl, QuicSettings};
use anyhow::{bail, Context, Result};
use serde::Serialize;

// The shared measurement modules, still reachable here under their old paths.
pub use agentwire_measure::{environment, resources, stats};
pub use cell::{BenchTransport, CellConfig, NetworkError, NetworkProfile, Pattern};
pub use environment::{build_profile, Environment};
pub use record::*;
pub use scenario::run_cell;
pub use server::HubLauncher;
pub use stats::LatencySummary;
pub use summary::{CellSummary, ClassSummary, Report};

/// The `schema` field of the JSON report.
pub const SCHEMA: &str = "agentwire-bench/3";

/// A cell whose throughput varies more than this across repetitions (coefficient of
/// variation) is flagged as noisy.
pub const NOISY_COV: f64 = 0.10;

/// Room left in a frame for the envelope around the body.
const ENVELOPE_OVERHEAD: usize = 4096;

/// One scenario: what the agents do, how many, how large their messages, over which network.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    /// What the agents do (request/reply unless said otherwise).
    pub pattern: Pattern,
    /// Client agents: requesters, subscribers, senders or pairs ([`CellConfig::agents`]).
    pub agents: usize,
    /// Request body size in bytes; responses carry the same body.
    pub size: usize,
    /// The network between clients and hub.
    pub network: NetworkProfile,
    /// Whether this scenario's cells run the priority / head-of-line probe.
    pub priority_probe: bool,
    /// Requests each client keeps in flight in this scenario (`None`: [`auto_window`]);
    /// `--window` overrides it.
    pub window: Option<usize>,
}

/// What to run: the transports, the scenarios, and the load and timing of every cell.
#[derive(Debug, Clone, Serialize)]
pub struct BenchConfig {
    /// `quick`, `report-matrix`, `cell` or `custom`.
    pub preset: String,
    /// Transports to compare.
    pub transports: Vec<BenchTransport>,
    /// Scenarios; every transport runs every scenario (Unix sockets only on loopback).
    pub scenarios: Vec<Scenario>,
    /// Requests each client keeps in flight; `None` picks per cell ([`auto_window`]).
    pub window: Option<usize>,
    /// Warm-up per run, milliseconds.
    pub warmup_ms: u64,
    /// Measured closed-loop window per run, milliseconds.
    pub duration_ms: u64,
    /// Cap on the closed loop's requests per second over all clients (`None`: as fast as
    /// answers come). See [`CellConfig::rate`].
    pub rate: Option<f64>,
    /// Open-loop phase per run, milliseconds (0 = none).
    pub open_loop_ms: u64,
    /// Priority probe per run in scenarios that have it, milliseconds (0 = none).
    pub priority_probe_ms: u64,
    /// Per-request timeout, milliseconds; also bounds each phase's drain.
    pub request_timeout_ms: u64,
    /// Times each cell is run; the report gives the median and the spread.
    pub repetitions: usize,
    /// Seed of the emulated links.
    pub seed: u64,
    /// Congestion control of QUIC connections.
    pub quic_cc: CongestionControl,
    /// Concurrent QUIC streams each side lets its peer open (per direction type).
    pub quic_max_streams: u32,
    /// Upper bound of QUIC path MTU discovery, bytes of UDP payload (hub and agents).
    pub quic_max_mtu: u16,
    /// QUIC datagram size on loopback paths (hub and agents; 0 = discovered as on any path).
    pub quic_loopback_mtu: u16,
    /// The hub's QUIC receive budget, bytes (0 = off).
    pub quic_receive_budget: u64,
    /// UDP sockets and quinn endpoints the hub's QUIC listener uses (`SO_REUSEPORT`).
    pub quic_endpoints: usize,
    /// Runtime threads of a hub run as its own process (its `--threads`; 1 = single-threaded).
    /// By default half of this machine's cores ([`default_hub_threads`]): the clients are on
    /// the same machine.
    pub hub_threads: usize,
    /// Worker threads of the clients' runtime (a multi-threaded one, even with one thread). By
    /// default one per core ([`default_client_threads`]).
    pub client_threads: usize,
    /// TCP congestion control inside emulated paths (`None`: the kernel's default).
    pub tcp_cc: Option<String>,
    /// The netsim packet stage of emulated paths (`--netsim-stage`; the bridge by default).
    pub netsim_stage: agentwire_netsim::StageKind,
    /// Write qlog traces of every QUIC connection under this directory, one subdirectory per
    /// run (see [`qlog_run_dir`]).
    pub qlog_dir: Option<PathBuf>,
}

/// In-flight bytes a cell aims for when the window is picked automatically.
pub const AUTO_WINDOW_BYTES: usize = 16 * 1024 * 1024;
/// Largest automatic window.
pub const AUTO_WINDOW_MAX: usize = 16;

/// The window picked for `agents` clients sending `size`-byte requests: as many requests in
/// flight as keep about [`AUTO_WINDOW_BYTES`] queued over all clients, between 1 and
/// [`AUTO_WINDOW_MAX`]. Beyond that, latency would only measure queueing.
///
/// ```
/// use agentwire_bench::auto_window;
/// assert_eq!(auto_window(10, 1024), 16);
/// assert_eq!(auto_window(100, 10 * 1024), 16);
/// assert_eq!(auto_window(1000, 100 * 1024), 1);
/// assert_eq!(auto_window(1000, 1024), 16);
/// assert_eq!(auto_window(100, 100 * 1024), 1);
/// ```
pub fn auto_window(agents: usize, size: usize) -> usize {
    let per_request = agents.max(1).saturating_mul(size.max(1));
    (AUTO_WINDOW_BYTES / per_request).clamp(1, AUTO_WINDOW_MAX)
}

/// The hub's runtime threads when none are asked for: half of `cores`, at least one, as the
/// hub and its clients run on the same machine. On the 2-core machine of the committed runs
/// one thread spent a third less hub CPU per message than two, at every transport
/// (docs/benchmarks/notes/hub-cpu.md). The clients keep a thread per core
/// ([`default_client_threads`]).
///
/// ```
/// use agentwire_bench::hub_threads_for;
/// assert_eq!(hub_threads_for(1), 1);
/// assert_eq!(hub_threads_for(2), 1);
/// assert_eq!(hub_threads_for(8), 4);
/// ```
pub fn hub_threads_for(cores: usize) -> usize {
    (cores / 2).max(1)
}

/// This machine's cores, as the standard library counts them (1 if it cannot tell).
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// [`hub_threads_for`] this machine's cores.
pub fn default_hub_threads() -> usize {
    hub_threads_for(cores())
}

/// The clients' worker threads when none are asked for: one per core. One thread on this
/// 2-core machine carried more on loopback but made the TCP transports' round trips over an
/// emulated 50 ms path 25-35 ms longer: the kernel's BBR, app-limited, settled at a lower
/// pacing rate when the clients' bursts were smaller (notes/hub-cpu.md).
pub fn default_client_threads() -> usize {
    cores()
}

impl Default for BenchConfig {
    /// The quick preset.
    fn default() -> Self {
        BenchConfig::quick()
    }
}

fn scenario(agents: usize, size: usize, network: &str, priority_probe: bool) -> Scenario {
    Scenario {
        pattern: Pattern::Request,
        agents,
        size,
        network: NetworkProfile::parse(network).unwrap_or_else(|_| NetworkProfile::loopback()),
        priority_probe,
        window: None,
    }
}

impl BenchConfig {
    /// The quick preset (the README's default, about four minutes on two cores): every
    /// transport on 10 agents × 1 KiB and 100 agents × 10 KiB over loopback, QUIC,
    /// HTTP/2 and WebSocket on 10 agents × 1 KiB over a 50 ms path with 1 % loss each way
    /// with 64 requests in flight per client, and every transport on a fan-out of one
    /// publisher to 10 subscribers × 1 KiB over loopback (16 in flight);
    /// 3 repetitions of 0.5 s warm-up, 1.5 s closed loop, 1 s open loop, and a 1.5 s
    /// priority probe in the 10-agent cells.
    pub fn quick() -> Self {
        BenchConfig {
            preset: "quick".into(),
            transports: BenchTransport::PRESET.to_vec(),
            scenarios: vec![
                scenario(10, 1024, "0ms", true),
                scenario(100, 10240, "0ms", false),
                // 64 requests in flight per client: enough that one lost packet would hold
                // up the messages behind it on a single ordered stream (head-of-line).
                Scenario {
                    window: Some(64),
                    ..scenario(10, 1024, "50ms+1%", true)
                },
                // One publisher to 10 subscribers of a topic, 16 messages in flight.
                Scenario {
                    pattern: Pattern::Fanout,
                    window: Some(16),
                    ..scenario(10, 1024, "0ms", false)
                },
            ],
            window: None,
            warmup_ms: 500,
            duration_ms: 1500,
            rate: None,
            open_loop_ms: 1000,
            priority_probe_ms: 1500,
            request_timeout_ms: 10_000,
            repetitions: 3,
            seed: 1,
            quic_cc: CongestionControl::default(),
            quic_max_streams: QuicSettings::default().max_concurrent_uni_streams,
            quic_max_mtu: QuicSettings::default().max_mtu,
            quic_loopback_mtu: QuicSettings::default().loopback_mtu,
            quic_receive_budget: QuicSettings::default().receive_budget,
            quic_endpoints: QuicSettings::default().server_endpoints,
            hub_threads: default_hub_threads(),
            client_threads: default_client_threads(),
            tcp_cc: None,
            netsim_stage: Default::default(),
            qlog_dir: None,
        }
    }

    /// The nine scenarios of the published agent-transport report ({10 × 1 KB, 100 × 10 KB,
    /// 1000 × 100 KB} × {0, 50, 100 ms}) × QUIC, HTTP/2 and WebSocket. Each cell measures
    /// 60 s in total, as in that report, split into 5 repetitions of 12 s (plus warm-up, 4 s
    /// open loop, and a 4 s priority probe in the 10-agent scenarios).
    pub fn report_matrix() -> Self {
        let mut scenarios = Vec::new();
        for (agents, size) in [(10, 1024), (100, 10240), (1000, 102_400)] {
            for net in ["0ms", "50ms", "100ms"] {
                scenarios.push(scenario(agents, size, net, agents == 10));
            }
        }
        BenchConfig {
            preset: "report-matrix".into(),
            transports: vec![
                BenchTransport::Quic,
                BenchTransport::H2,
                BenchTransport::Wss,
            ],
            scenarios,
            window: None,
            warmup_ms: 1000,
            duration_ms: 12_000,
            open_loop_ms: 4000,
            priority_probe_ms: 4000,
            request_timeout_ms: 30_000,
            repetitions: 5,
            // Seed, congestion control and stream limits as in the quick preset.
            ..BenchConfig::quick()
        }
    }

    /// One cell: `transport` with `agents` × `size` over `network`, 5 repetitions of 5 s.
    pub fn single_cell(transport: BenchTransport, scenario: Scenario) -> Self {
        BenchConfig {
            preset: "cell".into(),
            transports: vec![transport],
            scenarios: vec![scenario],
            window: None,
            warmup_ms: 1000,
            duration_ms: 5000,
            open_loop_ms: 2000,
            priority_probe_ms: 2000,
            request_timeout_ms: 30_000,
            repetitions: 5,
            // Seed, congestion control and stream limits as in the quick preset.
            ..BenchConfig::quick()
        }
    }

    /// Checks the values are usable (non-empty lists, sane bounds).
    pub fn validate(&self) -> Result<()> {
        let max_size = (agentwire_proto::Limits::default().max_frame_size as usize)
            .saturating_sub(ENVELOPE_OVERHEAD);
        if self.transports.is_empty() || self.scenarios.is_empty() {
            bail!("need at least one transport and one scenario");
        }
        for s in &self.scenarios {
            if s.agents == 0 || s.agents > 10_000 {
                bail!("agent count {} is out of range (1..=10000)", s.agents);
            }
            if s.pattern.is_one_way() && s.size < scenario::ONE_WAY_HEADER {
                bail!(
                    "size {} is too small for the {} pattern: each message carries a {}-byte \
                     header (sender, sequence, send time)",
                    s.size,
                    s.pattern,
                    scenario::ONE_WAY_HEADER
                );
            }
            if s.size > max_size {
                bail!("size {} is larger than the {max_size}-byte limit", s.size);
            }
        }
        if let Some(w) = self.window {
            if w == 0 || w > 1024 {
                bail!("window {w} is out of range (1..=1024)");
            }
        }
        for (name, v, max) in [
            ("duration", self.duration_ms, 3_600_000),
            ("open-loop phase", self.open_loop_ms, 3_600_000),
            ("priority probe", self.priority_probe_ms, 3_600_000),
            ("warm-up", self.warmup_ms, 600_000),
        ] {
            if v > max {
                bail!("{name} {v} ms is out of range (0..={max})");
            }
        }
        if self.duration_ms == 0 {
            bail!("duration must be at least 1 ms");
        }
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && (1.0..=10_000_000.0).contains(&rate)) {
                bail!("rate {rate} is out of range (1..=10000000 requests per second)");
            }
        }
        if self.quic_max_streams == 0 {
            bail!("QUIC concurrent streams must be at least 1");
        }
        for (name, n) in [("hub", self.hub_threads), ("client", self.client_threads)] {
            if !(1..=1024).contains(&n) {
                bail!("{name} threads {n} is out of range (1..=1024)");
            }
        }
        if !(1200..=65_527).contains(&self.quic_max_mtu) {
            bail!(
                "QUIC max MTU {} is out of range (1200..=65527)",
                self.quic_max_mtu
            );
        }
        if self.quic_loopback_mtu != 0 && !(1200..=65_527).contains(&self.quic_loopback_mtu) {
            bail!(
                "QUIC loopback MTU {} is out of range (0, or 1200..=65527)",
                self.quic_loopback_mtu
            );
        }
        if self.repetitions == 0 || self.repetitions > 100 {
            bail!("repetitions {} is out of range (1..=100)", self.repetitions);
        }
        if self.request_timeout_ms == 0 || self.request_timeout_ms > 600_000 {
            bail!(
                "request timeout {} ms is out of range (1..=600000)",
                self.request_timeout_ms
            );
        }
        Ok(())
    }

    /// The cells in run order: scenario, then transport, so the transports of one scenario
    /// run side by side in time (fairer on a noisy machine).
    pub fn cells(&self) -> Vec<CellConfig> {
        let mut cells = Vec::new();
        for s in &self.scenarios {
            for &transport in &self.transports {
                let one_way = s.pattern.is_one_way();
                cells.push(CellConfig {
                    pattern: s.pattern,
                    transport,
                    agents: s.agents,
                    workers: CellConfig::workers_for_pattern(s.pattern, s.agents),
                    size: s.size,
                    window: self
                        .window
                        .or(s.window)
                        .unwrap_or_else(|| auto_window(s.agents, s.size)),
                    warmup_ms: self.warmup_ms,
                    duration_ms: self.duration_ms,
                    rate: self.rate,
                    request_timeout_ms: self.request_timeout_ms,
                    network: s.network.clone(),
                    // The open loop and the probe are request/reply phases.
                    open_loop_ms: if one_way { 0 } else { self.open_loop_ms },
                    priority_probe_ms: if s.priority_probe && !one_way {
                        self.priority_probe_ms
                    } else {
                        0
                    },
                    quic_cc: self.quic_cc,
                    quic_max_streams: self.quic_max_streams,
                    quic_max_mtu: self.quic_max_mtu,
                    quic_loopback_mtu: self.quic_loopback_mtu,
                    quic_receive_budget: self.quic_receive_budget,
                    quic_endpoints: self.quic_endpoints,
                    hub_threads: self.hub_threads,
                    client_threads: self.client_threads,
                    tcp_cc: self.tcp_cc.clone(),
                    netsim_stage: self.netsim_stage,
                    qlog_dir: None,
                });
            }
        }
        cells
    }
}

/// Parses a `--cell` value: `TRANSPORT:AGENTSxSIZE[@NETWORK]`.
///
/// ```
/// use agentwire_bench::{parse_cell, BenchTransport};
/// let (t, s) = parse_cell("quic:100x10240@50ms+1%").unwrap();
/// assert_eq!(t, BenchTransport::Quic);
/// assert_eq!((s.agents, s.size, s.network.name.as_str()), (100, 10240, "50ms+1%"));
/// let (t, s) = parse_cell("wss:10x1024").unwrap();
/// assert_eq!((t, s.network.rtt_ms), (BenchTransport::Wss, 0));
/// assert!(parse_cell("quic:100").is_err());
/// ```
pub fn parse_cell(spec: &str) -> Result<(BenchTransport, Scenario)> {
    let usage = "expected TRANSPORT:AGENTSxSIZE[@NETWORK], e.g. quic:100x10240@50ms+1%";
    let (transport, rest) = spec
        .split_once(':')
        .with_context(|| format!("--cell {spec:?}: {usage}"))?;
    let transport: BenchTransport = transport.parse().map_err(anyhow::Error::msg)?;
    let (grid, network) = match rest.split_once('@') {
        Some((g, n)) => (g, NetworkProfile::parse(n)?),
        None => (rest, NetworkProfile::loopback()),
    };
    let (agents, size) = grid
        .split_once('x')
        .and_then(|(a, s)| Some((a.parse().ok()?, s.parse().ok()?)))
        .with_context(|| format!("--cell {spec:?}: {usage}"))?;
    Ok((
        transport,
        Scenario {
            pattern: Pattern::Request,
            agents,
            size,
            network,
            priority_probe: true,
            window: None,
        },
    ))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Where a run is, for progress displays.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Runs finished so far (over all cells).
    pub finished_runs: usize,
    /// Runs in total.
    pub total_runs: usize,
    /// Cell number, from 1.
    pub cell: usize,
    /// Cells in total.
    pub cells: usize,
    /// Repetition of this cell, from 1.
    pub repetition: usize,
    /// Repetitions per cell.
    pub repetitions: usize,
    /// What is running now, or what just finished, in words.
    pub label: String,
}

/// A short name for a cell, e.g. `quic 10×1024 B @ 50ms+1% (window 16)`; other patterns
/// than request/reply name theirs first: `fanout quic 1→10×1024 B @ 0ms (window 16)`.
pub fn cell_label(c: &CellConfig) -> String {
    let shape = match c.pattern {
        Pattern::Fanout => format!("fanout {} 1→{}", c.transport, c.agents),
        Pattern::Gather => format!("gather {} {}→1", c.transport, c.agents),
        Pattern::Stream => format!("stream {} {}×1→1", c.transport, c.agents),
        Pattern::Queue => format!("queue {} {}→{}", c.transport, c.agents, c.agents),
        _ => format!("{} {}", c.transport, c.agents),
    };
    format!("{shape}×{} B @ {} (window {})", c.size, c.network, c.window)
}

/// Where the qlog traces of run `rep` of `cell` go under `dir`:
/// `<transport>-<agents>x<size>-<network>-r<rep>` (characters other than letters, digits,
/// `.`, `_` and `-` become `_`).
///
/// ```
/// # use agentwire_bench::*;
/// let (t, s) = parse_cell("quic:10x1024@50ms+1%").unwrap();
/// let cell = &BenchConfig::single_cell(t, s).cells()[0];
/// assert_eq!(
///     qlog_run_dir("q".as_ref(), cell, 2),
///     std::path::Path::new("q/quic-10x1024-50ms_1_-r2")
/// );
/// ```
pub fn qlog_run_dir(dir: &Path, cell: &CellConfig, rep: usize) -> PathBuf {
    let pattern = match cell.pattern {
        Pattern::Request => String::new(),
        other => format!("{other}-"),
    };
    dir.join(agentwire::qlog::file_safe(&format!(
        "{pattern}{}-{}x{}-{}-r{rep}",
        cell.transport, cell.agents, cell.size, cell.network
    )))
}

/// Runs every cell of `config` in order with the hub started by `launcher`, reporting progress
/// before and after each run. Blocks; creates its own threads and runtimes (call it outside
/// an async context, or from `spawn_blocking`).
///
/// A cell that cannot run here (an emulated network without the privileges for packet mode,
/// Unix sockets across a network) is recorded as skipped with the reason; a run that fails
/// is recorded in the cell's `failures` and the run goes on.
pub fn run(
    config: &BenchConfig,
    launcher: &server::HubLauncher,
    command_line: Vec<String>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Report> {
    config.validate()?;
    let started_unix = unix_now();
    let udp = agentwire::transport::quic::probe_udp(&QuicSettings::default()).map(|u| {
        environment::UdpProbe {
            buffers: (u.buffers.send, u.buffers.recv),
            gso_segments: u.gso_segments,
            gro_segments: u.gro_segments,
        }
    });
    let mut environment = Environment::detect(udp);
    // Which library did the cryptography (a build-time choice: the `aws-lc-rs` feature).
    environment.crate_versions.insert(
        "crypto provider".into(),
        agentwire::tls::crypto_library().into(),
    );
    let cells = config.cells();
    let total = cells.len();
    let reps = config.repetitions;
    let packet_mode = netpath::EmulatedPath::available(config.netsim_stage);
    let mut results = Vec::with_capacity(total);
    let mut p = Progress {
        finished_runs: 0,
        total_runs: total * reps,
        cell: 0,
        cells: total,
        repetition: 0,
        repetitions: reps,
        label: String::new(),
    };
    for (i, cell) in cells.iter().enumerate() {
        p.cell = i + 1;
        let skip = if cell.transport == BenchTransport::Unix && !cell.network.is_loopback() {
            Some("unix sockets do not cross a network".to_owned())
        } else if !cell.network.is_loopback() {
            packet_mode
                .as_ref()
                .err()
                .map(|why| format!("the emulated network needs netsim packet mode: {why}"))
        } else {
            None
        };
        if let Some(reason) = skip {
            p.finished_runs += reps;
            p.label = format!("skipped {}: {reason}", cell_label(cell));
            progress(&p);
            results.push(CellSummary::skipped(cell.clone(), reason));
            continue;
        }
        let mut runs = Vec::with_capacity(reps);
        let mut failures = Vec::new();
        for rep in 1..=reps {
            p.repetition = rep;
            p.label = cell_label(cell);
            progress(&p);
            let seed = config.seed.wrapping_add(rep as u64);
            let mut run = cell.clone();
            run.qlog_dir = config
                .qlog_dir
                .as_deref()
                .filter(|_| cell.transport.kind() == TransportKind::Quic)
                .map(|dir| qlog_run_dir(dir, cell, rep));
            match run_cell(&run, launcher, seed) {
                Ok(r) => {
                    p.label = format!(
                        "{}: {:.0} msg/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
                        cell_label(cell),
                        r.responses_per_sec,
                        r.latency.p50_us as f64 / 1000.0,
                        r.latency.p99_us as f64 / 1000.0,
                        r.errors
                    );
                    runs.push(r);
                }
                Err(e) => {
                    p.label = format!("{} run {rep} failed: {e:#}", cell_label(cell));
                    failures.push(format!("run {rep}: {e:#}"));
                }
            }
            p.finished_runs += 1;
            progress(&p);
        }
        let mut summary = CellSummary::from_runs(cell.clone(), runs);
        summary.failures = failures;
        results.push(summary);
    }
    Ok(Report {
        schema: SCHEMA,
        command_line,
        started_unix,
        environment,
        hub_mode: launcher.mode(),
        config: config.clone(),
        cells: results,
    })
}

/// The human table: a header and one line per cell (medians over the repetitions; `msg/s` is
/// responses for request/reply and deliveries for the one-way patterns; `cov%` is the spread
/// of msg/s; `ol_p99` is the open-loop p99; flags after the numbers mark noisy
/// cells, bottlenecks, failed runs and skipped cells).
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    // The pattern column only when some cell is not request/reply (the table keeps its
    // shape for the request-only runs scripts read).
    let patterns = report
        .cells
        .iter()
        .any(|c| c.config.pattern != Pattern::Request);
    let pattern = |p: Pattern| {
        if patterns {
            format!("{:<7} ", p.name())
        } else {
            String::new()
        }
    };
    let _ = writeln!(
        out,
        "{}{:<10} {:<8} {:>6} {:>7} {:>3} {:>4} {:>9} {:>9} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>6}",
        if patterns { "pattern " } else { "" },
        "transport",
        "network",
        "agents",
        "size",
        "win",
        "runs",
        "connectms",
        "msg/s",
        "cov%",
        "Mbit/s",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "ol_p99",
        "hub_cpu",
        "hub_MiB",
        "errors"
    );
    let opt = |v: Option<f64>, scale: f64, prec: usize| {
        v.map(|v| format!("{:.*}", prec, v / scale))
            .unwrap_or_else(|| "-".into())
    };
    for c in &report.cells {
        let cov = c
            .responses_per_sec_cov
            .map(|v| format!("{:.1}", v * 100.0))
            .unwrap_or_else(|| "-".into());
        let mut flags = String::new();
        if c.noisy {
            flags.push_str("  noisy");
        }
        if !c.bottlenecks.is_empty() {
            flags.push_str("  bottleneck");
        }
        if !c.failures.is_empty() {
            let _ = write!(flags, "  {} failed", c.failures.len());
        }
        if let Some(why) = &c.skipped {
            let _ = write!(flags, "  skipped: {why}");
        }
        let _ = writeln!(
            out,
            "{}{:<10} {:<8} {:>6} {:>7} {:>3} {:>4} {:>9.1} {:>9.0} {:>5} {:>8.1} {:>8.2} {:>8.2} {:>8.2} {:>8} {:>7} {:>7} {:>6}{}",
            pattern(c.config.pattern),
            c.config.transport.name(),
            c.config.network.name,
            c.config.agents,
            c.config.size,
            c.config.window,
            c.runs.len(),
            c.connect_ms,
            c.responses_per_sec,
            cov,
            c.payload_mbit_per_sec,
            c.p50_us / 1000.0,
            c.p90_us / 1000.0,
            c.p99_us / 1000.0,
            opt(c.open_loop_p99_us, 1000.0, 2),
            opt(c.hub_cpu_seconds, 1.0, 2),
            opt(c.hub_peak_rss_bytes, 1024.0 * 1024.0, 1),
            c.errors,
            flags
        );
    }
    out
}

/// The report as compact JSON (one line: the raw histograms make pretty-printed reports six
/// times larger; `jq .` pretty-prints it).
pub fn to_json(report: &Report) -> Result<String> {
    serde_json::to_string(report).context("serialising the report")
}

/// Writes the report to `dir/bench-<unix-seconds>.json` (creating `dir`) and returns the path.
pub fn write_report(report: &Report, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("bench-{}.json", report.started_unix));
    let json = to_json(report)?;
    std::fs::write(&path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_preset_cells() {
        let c = BenchConfig::quick();
        c.validate().unwrap();
        let cells = c.cells();
        // Four scenarios × five transports (the Unix cell of the lossy one is skipped at
        // run time).
        assert_eq!(cells.len(), 20);
        assert_eq!(cells[0].transport, BenchTransport::Quic);
        assert_eq!(
            (cells[0].agents, cells[0].size, cells[0].window),
            (10, 1024, 16)
        );
        assert_eq!(cells[0].workers, 1);
        assert!(cells[0].priority_probe_ms > 0);
        assert_eq!(cells[1].transport, BenchTransport::QuicLanes);
        assert_eq!(
            cells[1].transport.mapping(),
            agentwire::StreamMapping::Lanes
        );
        assert_eq!(cells[5].agents, 100);
        assert_eq!(cells[5].workers, 10);
        assert_eq!(cells[5].priority_probe_ms, 0);
        assert_eq!(cells[10].network.name, "50ms+1%");
        assert_eq!(
            cells[10].window, 64,
            "the lossy cell shows head-of-line blocking"
        );
        assert_eq!(
            cells[10].network.one_way_spec().unwrap(),
            "delay=25ms,loss=1%"
        );
        assert!(cells[..15].iter().all(|c| c.open_loop_ms > 0));
        let fanout = &cells[15];
        assert_eq!(fanout.pattern, Pattern::Fanout);
        assert_eq!((fanout.agents, fanout.size, fanout.window), (10, 1024, 16));
        assert_eq!(
            (
                fanout.workers,
                fanout.open_loop_ms,
                fanout.priority_probe_ms
            ),
            (0, 0, 0)
        );
    }

    #[test]
    fn report_matrix_is_the_nine_scenarios_times_three() {
        let c = BenchConfig::report_matrix();
        c.validate().unwrap();
        let cells = c.cells();
        assert_eq!(cells.len(), 27);
        assert_eq!(c.repetitions as u64 * c.duration_ms, 60_000);
        let big = cells.iter().find(|c| c.agents == 1000).unwrap();
        assert_eq!((big.size, big.window, big.workers), (102_400, 1, 100));
        let rtts: Vec<u32> = cells.iter().map(|c| c.network.rtt_ms).collect();
        assert_eq!(&rtts[..9], &[0, 0, 0, 50, 50, 50, 100, 100, 100]);
        assert!(cells.iter().all(|c| c.transport != BenchTransport::Unix));
    }

    #[test]
    fn network_profiles_parse_or_explain() {
        assert!(NetworkProfile::parse("50").is_err());
        assert!(NetworkProfile::parse("51ms").is_err());
        assert!(NetworkProfile::parse("50ms+x%").is_err());
        assert!(NetworkProfile::parse("50ms+60%").is_err());
        let p = NetworkProfile::parse("100ms").unwrap();
        assert_eq!(p.one_way_spec().unwrap(), "delay=50ms");
        assert!(NetworkProfile::loopback().one_way_spec().is_none());
    }

    #[test]
    fn transport_names_round_trip() {
        for t in BenchTransport::ALL {
            assert_eq!(t.name().parse::<BenchTransport>().unwrap(), t);
            assert_eq!(
                serde_json::to_value(t).unwrap(),
                serde_json::Value::from(t.name())
            );
        }
        assert!("tcp".parse::<BenchTransport>().is_err());
    }

    #[test]
    fn bad_configs_are_rejected() {
        let base = BenchConfig::default();
        let mut c = base.clone();
        c.scenarios[0].agents = 0;
        assert!(c.validate().is_err());
        let mut c = base.clone();
        c.window = Some(0);
        assert!(c.validate().is_err());
        let mut c = base.clone();
        c.scenarios.clear();
        assert!(c.validate().is_err());
        let mut c = base.clone();
        c.duration_ms = 0;
        assert!(c.validate().is_err());
        let mut c = base.clone();
        c.transports.clear();
        assert!(c.validate().is_err());
        let mut c = base;
        c.scenarios[0].size = usize::MAX;
        assert!(c.validate().is_err());
    }
}
