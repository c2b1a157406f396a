//! A run's results as data: the whole [`Report`], and each cell over its repetitions
//! ([`CellSummary`]: medians and spread of every figure, per priority class too), from which
//! the verdict, the tables and the JSON are made.
//!
//! This module owns summarising runs; it must not run them or render them.

use serde::Serialize;

use agentwire_measure::stats;

use crate::{BenchConfig, CellConfig, CellResult, ClassLatency, Environment, NOISY_COV};

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
    /// How the hub ran: `process` (its own process) or `in-process`.
    pub hub_mode: &'static str,
    /// What was asked for.
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
    /// Runs that failed, with the reason (they have no entry in `runs`).
    pub failures: Vec<String>,
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
    /// Median over the runs of each client's own connect time's median, milliseconds.
    pub connect_p50_ms: f64,
    /// Median over the runs of each client's own connect time's 99th percentile, milliseconds.
    pub connect_p99_ms: f64,
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
    /// Median of the runs' peak kernel socket queues of the hub, bytes
    /// ([`SocketMemory`](record::SocketMemory); hub as its own process only).
    pub hub_peak_socket_queued_bytes: Option<f64>,
    /// Median of the runs' peak RSS plus socket queues of the hub, bytes.
    pub hub_peak_rss_plus_queued_bytes: Option<f64>,
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
    /// Loopback cells: UDP receive-buffer drops over all runs (host-wide; see
    /// [`CellResult::udp_rcvbuf_errors`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_rcvbuf_errors: Option<u64>,
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
            failures: Vec::new(),
            network_mode: runs.first().map(|r| r.network.mode),
            responses_per_sec: stats::median(&rps).unwrap_or(0.0),
            responses_per_sec_cov: cov,
            noisy: cov.is_some_and(|c| c > NOISY_COV),
            payload_mbit_per_sec: med(&|r| r.payload_mbit_per_sec),
            connect_ms: med(&|r| r.connect_ms),
            connect_p50_ms: med(&|r| r.connect.p50_ms),
            connect_p99_ms: med(&|r| r.connect.p99_ms),
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
            hub_peak_socket_queued_bytes: med_opt(&|r| {
                r.resources.hub_sockets.map(|m| m.peak_queued_bytes as f64)
            }),
            hub_peak_rss_plus_queued_bytes: med_opt(&|r| {
                r.resources
                    .hub_sockets
                    .map(|m| m.peak_rss_plus_queued_bytes as f64)
            }),
            agents_cpu_seconds: med(&|r| r.resources.agents.cpu_seconds),
            agents_peak_rss_bytes: med(&|r| r.resources.agents.peak_rss_bytes as f64),
            hub_cpu_us_per_response: med_opt(&|r| r.resources.hub_cpu_us_per_response),
            bottlenecks,
            errors: runs
                .iter()
                .map(|r| r.errors + r.open_loop.as_ref().map_or(0, |o| o.errors))
                .sum(),
            udp_rcvbuf_errors: runs
                .iter()
                .filter_map(|r| r.udp_rcvbuf_errors)
                .reduce(|a, b| a + b),
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
