//! # agentwire-bench — a loopback benchmark of the real hub and agents
//!
//! `agentwire bench` runs a grid of *cells* (transport × clients × body size) in one
//! process: for each cell it generates certificates in memory, starts a real [`Hub`] listening
//! only on the transport under test (`quic://127.0.0.1:0` per-message or lanes, `h2://` and
//! `wss://` on `127.0.0.1:0`, or `unix://` in a temporary directory), connects echo workers and
//! clients through the public [`Agent`] API (each must end up on that transport) and drives a
//! closed-loop request/response load. It reports connect time,
//! responses per second, payload throughput, an HDR latency histogram and every error, plus
//! the machine and build it ran on, as a table and as JSON (schema [`SCHEMA`]).
//!
//! This crate measures; it must not change how agentwire behaves (no private hooks, no
//! in-process transport) and it must not hide failures: every request started in the
//! measured window is reported as answered or as an error.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let mut config = agentwire_bench::BenchConfig::default();
//! config.agents = vec![10];
//! let report = agentwire_bench::run(&config, std::env::args().collect(), &mut |line| {
//!     eprintln!("{line}")
//! })
//! .await?;
//! print!("{}", agentwire_bench::render_table(&report));
//! # Ok(()) }
//! ```
//!
//! [`Hub`]: agentwire::hub::Hub
//! [`Agent`]: agentwire::Agent

#![warn(missing_docs)]

pub mod environment;
pub mod record;
pub mod scenario;
pub mod stats;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde::Serialize;

pub use environment::{build_profile, Environment};
pub use record::*;
pub use scenario::{run_cell, BenchTransport, CellConfig};
pub use stats::LatencySummary;

/// The `schema` field of the JSON report.
pub const SCHEMA: &str = "agentwire-bench/3";

/// A cell whose throughput varies more than this across repetitions (coefficient of
/// variation) is flagged as noisy.
pub const NOISY_COV: f64 = 0.10;

/// Room left in a frame for the envelope around the body.
const ENVELOPE_OVERHEAD: usize = 4096;

/// The grid of cells to run and the load each cell gets.
#[derive(Debug, Clone, Serialize)]
pub struct BenchConfig {
    /// Transports to compare.
    pub transports: Vec<BenchTransport>,
    /// Client counts (workers are one per ten clients, at least one).
    pub agents: Vec<usize>,
    /// Body sizes in bytes.
    pub sizes: Vec<usize>,
    /// Requests each client keeps in flight.
    pub window: usize,
    /// Warm-up per cell, milliseconds.
    pub warmup_ms: u64,
    /// Measured window per cell, milliseconds.
    pub duration_ms: u64,
    /// Per-request timeout, milliseconds; also bounds each cell's drain.
    pub request_timeout_ms: u64,
    /// Times each cell is run; the report gives the median and the spread.
    pub repetitions: usize,
}

impl Default for BenchConfig {
    /// The quick preset: {quic, quic-lanes, h2, wss, unix} × {10, 100} agents ×
    /// {1 KiB, 10 KiB}, window 4, 0.5 s warm-up, 2 s measured, 3 repetitions — about three
    /// minutes on two cores.
    fn default() -> Self {
        BenchConfig {
            transports: BenchTransport::ALL.to_vec(),
            agents: vec![10, 100],
            sizes: vec![1024, 10240],
            window: 4,
            warmup_ms: 500,
            duration_ms: 2000,
            request_timeout_ms: 5000,
            repetitions: 3,
        }
    }
}

impl BenchConfig {
    /// Checks the values are usable (non-empty lists, sane bounds).
    pub fn validate(&self) -> Result<()> {
        let max_size = (agentwire_proto::Limits::default().max_frame_size as usize)
            .saturating_sub(ENVELOPE_OVERHEAD);
        if self.transports.is_empty() || self.agents.is_empty() || self.sizes.is_empty() {
            bail!("need at least one transport, one agent count and one size");
        }
        if let Some(a) = self.agents.iter().find(|&&a| a == 0 || a > 10_000) {
            bail!("agent count {a} is out of range (1..=10000)");
        }
        if let Some(s) = self.sizes.iter().find(|&&s| s > max_size) {
            bail!("size {s} is larger than the {max_size}-byte limit");
        }
        if self.window == 0 || self.window > 1024 {
            bail!("window {} is out of range (1..=1024)", self.window);
        }
        if self.duration_ms == 0 || self.duration_ms > 3_600_000 {
            bail!(
                "duration {} ms is out of range (1..=3600000)",
                self.duration_ms
            );
        }
        if self.warmup_ms > 600_000 {
            bail!("warm-up {} ms is out of range (0..=600000)", self.warmup_ms);
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

    /// The cells in run order: transport, then agents, then size.
    pub fn cells(&self) -> Vec<CellConfig> {
        let mut cells = Vec::new();
        for &transport in &self.transports {
            for &agents in &self.agents {
                for &size in &self.sizes {
                    cells.push(CellConfig {
                        transport,
                        agents,
                        workers: CellConfig::workers_for(agents),
                        size,
                        window: self.window,
                        warmup_ms: self.warmup_ms,
                        duration_ms: self.duration_ms,
                        request_timeout_ms: self.request_timeout_ms,
                        network: NetworkProfile::loopback(),
                        open_loop_ms: 0,
                        priority_probe_ms: 0,
                    });
                }
            }
        }
        cells
    }
}

/// A whole run: what was asked, where it ran, and every cell's result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The exact command line (`std::env::args`).
    pub command_line: Vec<String>,
    /// When the run started, Unix seconds.
    pub started_unix: u64,
    /// Machine and build.
    pub environment: Environment,
    /// The grid asked for.
    pub config: BenchConfig,
    /// One summary per cell, in run order, each with all its repetitions.
    pub cells: Vec<CellSummary>,
}

/// One cell over all its repetitions: medians, spread, and every run's full result.
#[derive(Debug, Clone, Serialize)]
pub struct CellSummary {
    /// The cell's parameters.
    pub config: CellConfig,
    /// Why the cell was not run (for example: packet mode needs root), if it was not.
    pub skipped: Option<String>,
    /// How traffic crossed the network (`loopback` or `packet`), from the first run.
    pub network_mode: Option<&'static str>,
    /// Median responses per second (closed loop).
    pub responses_per_sec: f64,
    /// Coefficient of variation of responses per second across repetitions (null with one).
    pub responses_per_sec_cov: Option<f64>,
    /// True when that spread exceeds [`NOISY_COV`].
    pub noisy: bool,
    /// Median payload throughput, megabits per second.
    pub payload_mbit_per_sec: f64,
    /// Median time to connect every agent, milliseconds.
    pub connect_ms: f64,
    /// Median full handshakes per second while connecting.
    pub handshakes_per_sec: f64,
    /// QUIC: median time to reconnect every client with 0-RTT, milliseconds.
    pub resumed_connect_ms: Option<f64>,
    /// QUIC: 0-RTT accepted over all runs' reconnects.
    pub zero_rtt_accepted: Option<u64>,
    /// Closed loop: median of the runs' p50 latencies, microseconds.
    pub p50_us: f64,
    /// Closed loop: median of the runs' p90 latencies, microseconds.
    pub p90_us: f64,
    /// Closed loop: median of the runs' p99 latencies, microseconds.
    pub p99_us: f64,
    /// Closed loop: median of the runs' p99.9 latencies, microseconds.
    pub p999_us: f64,
    /// Largest closed-loop latency seen in any run, microseconds.
    pub max_us: u64,
    /// Open loop: median target rate, requests per second.
    pub open_loop_rate: Option<f64>,
    /// Open loop: median of the runs' p50 latencies (from intended send time), microseconds.
    pub open_loop_p50_us: Option<f64>,
    /// Open loop: median of the runs' p99 latencies, microseconds.
    pub open_loop_p99_us: Option<f64>,
    /// Open loop: median of the runs' p99.9 latencies, microseconds.
    pub open_loop_p999_us: Option<f64>,
    /// Priority probe: per class, median of the runs' p50 and p99, microseconds.
    pub priority: Vec<ClassSummary>,
    /// Median hub CPU seconds over the closed-loop window (hub as its own process only).
    pub hub_cpu_seconds: Option<f64>,
    /// Median hub peak RSS, bytes (hub as its own process only).
    pub hub_peak_rss_bytes: Option<f64>,
    /// Median agent-side CPU seconds over the closed-loop window.
    pub agents_cpu_seconds: f64,
    /// Median agent-side peak RSS, bytes.
    pub agents_peak_rss_bytes: f64,
    /// Median hub CPU per answered request, microseconds.
    pub hub_cpu_us_per_response: Option<f64>,
    /// Distinct bottleneck warnings of the runs.
    pub bottlenecks: Vec<String>,
    /// Errors over all runs (closed loop, open loop and probe).
    pub errors: u64,
    /// Whether every run accounted for every request.
    pub consistent: bool,
    /// Every repetition, in run order.
    pub runs: Vec<CellResult>,
}

/// Medians of one priority class over a cell's runs.
#[derive(Debug, Clone, Serialize)]
pub struct ClassSummary {
    /// `critical`, `high`, `medium` or `low`.
    pub class: &'static str,
    /// Median of the runs' p50, microseconds.
    pub p50_us: f64,
    /// Median of the runs' p99, microseconds.
    pub p99_us: f64,
}

impl CellSummary {
    /// Summarises the repetitions of one cell.
    pub fn from_runs(config: CellConfig, runs: Vec<CellResult>) -> Self {
        let of = |f: &dyn Fn(&CellResult) -> f64| -> Vec<f64> { runs.iter().map(f).collect() };
        let med = |f: &dyn Fn(&CellResult) -> f64| stats::median(&of(f)).unwrap_or(0.0);
        let med_opt = |f: &dyn Fn(&CellResult) -> Option<f64>| {
            let v: Vec<f64> = runs.iter().filter_map(f).collect();
            stats::median(&v)
        };
        let rps = of(&|r| r.responses_per_sec);
        let cov = stats::coefficient_of_variation(&rps);
        let classes: Vec<&'static str> = runs
            .first()
            .and_then(|r| r.priority.as_ref())
            .map(|p| p.classes.iter().map(|c| c.class).collect())
            .unwrap_or_default();
        let priority = classes
            .into_iter()
            .map(|class| {
                let pick = |f: fn(&ClassLatency) -> u64| {
                    med_opt(&|r: &CellResult| {
                        r.priority
                            .as_ref()
                            .and_then(|p| p.classes.iter().find(|c| c.class == class))
                            .map(|c| f(c) as f64)
                    })
                    .unwrap_or(0.0)
                };
                ClassSummary {
                    class,
                    p50_us: pick(|c| c.latency.p50_us),
                    p99_us: pick(|c| c.latency.p99_us),
                }
            })
            .collect();
        let mut bottlenecks: Vec<String> = Vec::new();
        for b in runs.iter().filter_map(|r| r.bottleneck.clone()) {
            if !bottlenecks.contains(&b) {
                bottlenecks.push(b);
            }
        }
        let zero_rtt_accepted = runs
            .iter()
            .filter_map(|r| r.connect.resumed.as_ref())
            .map(|z| z.zero_rtt_accepted)
            .reduce(|a, b| a + b);
        CellSummary {
            skipped: None,
            network_mode: runs.first().map(|r| r.network.mode),
            responses_per_sec: stats::median(&rps).unwrap_or(0.0),
            responses_per_sec_cov: cov,
            noisy: cov.is_some_and(|c| c > NOISY_COV),
            payload_mbit_per_sec: med(&|r| r.payload_mbit_per_sec),
            connect_ms: med(&|r| r.connect_ms),
            handshakes_per_sec: med(&|r| r.connect.handshakes_per_sec),
            resumed_connect_ms: med_opt(&|r| {
                r.connect.resumed.as_ref().map(|z| z.all_connected_ms)
            }),
            zero_rtt_accepted,
            p50_us: med(&|r| r.latency.p50_us as f64),
            p90_us: med(&|r| r.latency.p90_us as f64),
            p99_us: med(&|r| r.latency.p99_us as f64),
            p999_us: med(&|r| r.latency.p999_us as f64),
            max_us: runs.iter().map(|r| r.latency.max_us).max().unwrap_or(0),
            open_loop_rate: med_opt(&|r| r.open_loop.as_ref().map(|o| o.rate_per_sec)),
            open_loop_p50_us: med_opt(&|r| r.open_loop.as_ref().map(|o| o.latency.p50_us as f64)),
            open_loop_p99_us: med_opt(&|r| r.open_loop.as_ref().map(|o| o.latency.p99_us as f64)),
            open_loop_p999_us: med_opt(&|r| r.open_loop.as_ref().map(|o| o.latency.p999_us as f64)),
            priority,
            hub_cpu_seconds: med_opt(&|r| r.resources.hub.map(|h| h.cpu_seconds)),
            hub_peak_rss_bytes: med_opt(&|r| r.resources.hub.map(|h| h.peak_rss_bytes as f64)),
            agents_cpu_seconds: med(&|r| r.resources.agents.cpu_seconds),
            agents_peak_rss_bytes: med(&|r| r.resources.agents.peak_rss_bytes as f64),
            hub_cpu_us_per_response: med_opt(&|r| r.resources.hub_cpu_us_per_response),
            bottlenecks,
            errors: runs
                .iter()
                .map(|r| r.errors + r.open_loop.as_ref().map_or(0, |o| o.errors))
                .sum(),
            consistent: runs.iter().all(|r| r.consistent),
            config,
            runs,
        }
    }

    /// A cell that was not run, with the reason.
    pub fn skipped(config: CellConfig, reason: String) -> Self {
        let mut s = CellSummary::from_runs(config, Vec::new());
        s.skipped = Some(reason);
        s
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Runs every cell of `config` in order, calling `progress` with one line per cell.
/// Needs a Tokio runtime with the time and net drivers (a multi-thread one for real numbers).
pub async fn run(
    config: &BenchConfig,
    command_line: Vec<String>,
    progress: &mut dyn FnMut(&str),
) -> Result<Report> {
    config.validate()?;
    let started_unix = unix_now();
    let environment = Environment::detect();
    let cells = config.cells();
    let total = cells.len();
    let mut results = Vec::with_capacity(total);
    let reps = config.repetitions;
    for (i, cell) in cells.iter().enumerate() {
        let mut runs = Vec::with_capacity(reps);
        for rep in 1..=reps {
            progress(&format!(
                "cell {}/{}, run {rep}/{reps}: {} {} agents × {} B (window {}, {} workers) ...",
                i + 1,
                total,
                cell.transport,
                cell.agents,
                cell.size,
                cell.window,
                cell.workers
            ));
            let r = run_cell(cell).await.with_context(|| {
                format!(
                    "cell {}/{total} run {rep} ({} {} agents × {} B)",
                    i + 1,
                    cell.transport,
                    cell.agents,
                    cell.size
                )
            })?;
            runs.push(r);
        }
        results.push(CellSummary::from_runs(cell.clone(), runs));
    }
    Ok(Report {
        schema: SCHEMA,
        command_line,
        started_unix,
        environment,
        config: config.clone(),
        cells: results,
    })
}

/// The human table: a header and one line per cell (medians over the repetitions; `cov%` is
/// the spread of msg/s, and `noisy` marks cells above [`NOISY_COV`]).
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<11} {:>6} {:>7} {:>6} {:>4} {:>10} {:>10} {:>5} {:>9} {:>8} {:>8} {:>8} {:>6}",
        "transport",
        "agents",
        "size",
        "window",
        "runs",
        "connect_ms",
        "msg/s",
        "cov%",
        "Mbit/s",
        "p50_us",
        "p99_us",
        "max_us",
        "errors"
    );
    for c in &report.cells {
        let cov = c
            .responses_per_sec_cov
            .map(|v| format!("{:.1}", v * 100.0))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:<11} {:>6} {:>7} {:>6} {:>4} {:>10.1} {:>10.0} {:>5} {:>9.1} {:>8.0} {:>8.0} {:>8} {:>6}{}",
            c.config.transport.name(),
            c.config.agents,
            c.config.size,
            c.config.window,
            c.runs.len(),
            c.connect_ms,
            c.responses_per_sec,
            cov,
            c.payload_mbit_per_sec,
            c.p50_us,
            c.p99_us,
            c.max_us,
            c.errors,
            if c.noisy { "  noisy" } else { "" }
        );
    }
    out
}

/// The report as pretty JSON.
pub fn to_json(report: &Report) -> Result<String> {
    serde_json::to_string_pretty(report).context("serialising the report")
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
    fn default_preset_is_twenty_cells() {
        let c = BenchConfig::default();
        c.validate().unwrap();
        let cells = c.cells();
        assert_eq!(cells.len(), 20);
        assert_eq!(cells[0].transport, BenchTransport::Quic);
        assert_eq!(cells[0].workers, 1);
        assert_eq!(cells[2].agents, 100);
        assert_eq!(cells[2].workers, 10);
        assert_eq!(cells[7].transport, BenchTransport::QuicLanes);
        assert_eq!(
            cells[7].transport.mapping(),
            agentwire::StreamMapping::Lanes
        );
        assert_eq!(cells[8].transport, BenchTransport::H2);
        assert_eq!(cells[12].transport, BenchTransport::Wss);
        assert_eq!(cells[19].transport, BenchTransport::Unix);
        assert_eq!(cells[19].size, 10240);
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
        c.agents = vec![0];
        assert!(c.validate().is_err());
        let mut c = base.clone();
        c.window = 0;
        assert!(c.validate().is_err());
        let mut c = base.clone();
        c.sizes.clear();
        assert!(c.validate().is_err());
        let mut c = base.clone();
        c.transports.clear();
        assert!(c.validate().is_err());
        let mut c = base;
        c.sizes = vec![usize::MAX];
        assert!(c.validate().is_err());
    }
}
