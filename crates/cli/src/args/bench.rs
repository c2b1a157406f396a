//! The flags of `agentwire bench` (feature `bench`).

use std::path::PathBuf;

use agentwire::CongestionControl;
use anyhow::Result;
use clap::Args;

use super::*;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The quick preset (the default): every transport on 10 agents × 1 KiB and 100 × 10 KiB
    /// over loopback, quic/h2/wss on 10 × 1 KiB over 50 ms + 1 % loss (packet mode, in a
    /// user namespace of its own without root), and every transport on a fan-out of one
    /// publisher to 10 subscribers × 1 KiB over loopback; 3 repetitions. About four minutes
    /// on two cores.
    #[arg(long, conflicts_with_all = ["report_matrix", "cell"])]
    pub quick: bool,
    /// The nine scenarios of the published agent-transport report ({10×1 KB, 100×10 KB,
    /// 1000×100 KB} × {0, 50, 100 ms}) × quic, h2, wss; 60 s measured per cell (5 × 12 s).
    /// About 45 minutes.
    #[arg(long, conflicts_with = "cell")]
    pub report_matrix: bool,
    /// One cell: TRANSPORT:AGENTSxSIZE[@NETWORK], e.g. quic:100x10240@50ms+1%.
    #[arg(long, conflicts_with_all = ["transports", "agents", "sizes", "networks"])]
    pub cell: Option<String>,
    /// Custom grid: client agent counts (workers: one per ten clients, at least one).
    #[arg(long, value_delimiter = ',')]
    pub agents: Option<Vec<usize>>,
    /// Custom grid: request/response body sizes in bytes.
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<usize>>,
    /// Custom grid: networks, RTTms or RTTms+LOSS% (e.g. 0ms,50ms,50ms+1%); anything but
    /// 0ms runs through netsim packet mode (root).
    #[arg(long, value_delimiter = ',')]
    pub networks: Option<Vec<String>>,
    /// Transports to compare: quic (one QUIC stream per message), quic-lanes (QUIC lanes),
    /// h2 (HTTP/2 over TLS), wss (WebSocket over TLS), unix (Unix socket in a temporary
    /// directory), wt (a WebTransport session on the hub's QUIC port, as browsers open one).
    /// `--mappings` is an old alias (per-message = quic, lanes = quic-lanes).
    #[arg(long, alias = "mappings", value_delimiter = ',')]
    pub transports: Option<Vec<agentwire_bench::BenchTransport>>,
    /// What the agents do in every scenario: request (request/reply with echo workers, the
    /// default), fanout (one publisher, AGENTS subscribers of a topic), gather (AGENTS
    /// senders, one aggregator), stream (AGENTS sender-receiver pairs, small messages one
    /// way), queue (AGENTS producers, AGENTS consumers of one work queue, every task acked).
    /// All but request measure deliveries per second and latency from send to delivery.
    #[arg(long, conflicts_with = "patterns")]
    pub pattern: Option<agentwire_bench::Pattern>,
    /// Every scenario with every pattern (request, fanout, gather, stream, queue).
    #[arg(long)]
    pub patterns: bool,
    /// Requests each client keeps in flight (default: per cell, about 16 MiB in flight
    /// over all clients, 1 to 16 per client).
    #[arg(long)]
    pub window: Option<usize>,
    /// Measured closed-loop window per run, milliseconds.
    #[arg(long)]
    pub duration_ms: Option<u64>,
    /// Cap on the closed loop's requests per second over all clients (default: none, as
    /// fast as answers come). Below every transport's capacity all of them carry the same
    /// load, so hub CPU, memory and latency compare at equal msg/s.
    #[arg(long, value_name = "PER_SEC")]
    pub rate: Option<f64>,
    /// Warm-up per run (not counted), milliseconds.
    #[arg(long)]
    pub warmup_ms: Option<u64>,
    /// Open-loop phase per run (0 = none), milliseconds.
    #[arg(long)]
    pub open_loop_ms: Option<u64>,
    /// Priority / head-of-line probe per run in the 10-agent cells (0 = none), milliseconds.
    #[arg(long)]
    pub probe_ms: Option<u64>,
    /// Per-request timeout, milliseconds (a timed-out request counts as an error).
    #[arg(long)]
    pub request_timeout_ms: Option<u64>,
    /// Runs of each cell; the report shows medians and the spread (cov%).
    #[arg(long)]
    pub repetitions: Option<usize>,
    /// Seed of the emulated links' loss.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Congestion control of the QUIC cells (hub and agents): bbr3 (the default), cubic,
    /// newreno or bbr.
    #[arg(long, default_value = "bbr3")]
    pub quic_cc: CongestionControl,
    /// Concurrent QUIC streams of each type the hub lets each agent open, and the agents their
    /// hub (default: the library's, 256; agents let their hub open at least 1,024
    /// unidirectional streams, as an agent does by default).
    #[arg(long)]
    pub quic_max_streams: Option<u32>,
    /// Upper bound of QUIC path MTU discovery, bytes of UDP payload (hub and agents; default:
    /// the library's default, 1452).
    #[arg(long)]
    pub quic_max_mtu: Option<u16>,
    /// QUIC datagram size on loopback paths (hub and agents; 0 = discover as on any path;
    /// default: the library's default, 65507). Cells over an emulated path are not loopback.
    #[arg(long)]
    pub quic_loopback_mtu: Option<u16>,
    /// The hub's QUIC receive budget, bytes (its connections' windows share it; 0 = every
    /// connection gets the full window; default: the library's default).
    #[arg(long)]
    pub quic_receive_budget: Option<u64>,
    /// UDP sockets and QUIC endpoints of the hub's listener (its `--endpoints`; default 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub quic_endpoints: Option<u32>,
    /// Runtime threads of the hub's process (its `--threads`; 1 = single-threaded; default:
    /// half of this machine's cores, at least 1: the clients share the machine).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub hub_threads: Option<u32>,
    /// Worker threads of the clients' runtime (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub client_threads: Option<u32>,
    /// TCP congestion control inside the emulated paths' namespaces (default: the kernel's).
    #[arg(long, value_parser = ["bbr", "cubic", "reno"])]
    pub tcp_cc: Option<String>,
    /// The netsim packet stage of the emulated networks: `bridge` (the default: a user-space
    /// bridge in a namespace of its own, no iptables; as any user, through a user namespace)
    /// or `nfqueue` (root and iptables).
    #[arg(long, default_value = "bridge", value_parser = parse_stage)]
    pub netsim_stage: agentwire_netsim::StageKind,
    /// Write one qlog trace per QUIC connection (hub and agents) under DIR, one directory per
    /// run: DIR/<transport>-<agents>x<size>-<network>-r<run>/ (open them in qvis).
    #[arg(long, value_name = "DIR")]
    pub qlog: Option<PathBuf>,
    /// Directory for the results: bench-<unix-seconds>.json, report.md, report.html, charts/.
    #[arg(long, default_value = "target/bench-out")]
    pub out: PathBuf,
    /// Print the report JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// No progress bar (one line per run on stderr instead).
    #[arg(long)]
    pub no_progress: bool,
    /// Run even from a debug build (its numbers are meaningless; for tests only).
    #[arg(long)]
    pub allow_debug: bool,
}

impl BenchArgs {
    /// The configuration: the preset, then the grid and timing flags on top.
    pub fn config(&self) -> Result<agentwire_bench::BenchConfig> {
        use agentwire_bench::{BenchConfig, NetworkProfile, Scenario};
        let mut config = if self.report_matrix {
            BenchConfig::report_matrix()
        } else if let Some(cell) = &self.cell {
            let (transport, scenario) = agentwire_bench::parse_cell(cell)?;
            BenchConfig::single_cell(transport, scenario)
        } else {
            BenchConfig::quick()
        };
        if self.agents.is_some() || self.sizes.is_some() || self.networks.is_some() {
            let agents = self.agents.clone().unwrap_or_else(|| vec![10, 100]);
            let sizes = self.sizes.clone().unwrap_or_else(|| vec![1024, 10240]);
            let networks = match &self.networks {
                Some(n) => n
                    .iter()
                    .map(|s| NetworkProfile::parse(s).map_err(anyhow::Error::from))
                    .collect::<Result<Vec<_>>>()?,
                None => vec![NetworkProfile::loopback()],
            };
            config.scenarios.clear();
            for network in &networks {
                for &a in &agents {
                    for &size in &sizes {
                        config.scenarios.push(Scenario {
                            pattern: agentwire_bench::Pattern::Request,
                            agents: a,
                            size,
                            network: network.clone(),
                            priority_probe: a <= 10,
                            window: None,
                        });
                    }
                }
            }
            config.preset = "custom".into();
        }
        if let Some(t) = &self.transports {
            config.transports.clone_from(t);
        }
        if let Some(pattern) = self.pattern {
            for s in &mut config.scenarios {
                s.pattern = pattern;
            }
        }
        if self.patterns {
            use agentwire_bench::Pattern;
            let scenarios = std::mem::take(&mut config.scenarios);
            for pattern in Pattern::ALL {
                config.scenarios.extend(scenarios.iter().map(|s| Scenario {
                    pattern,
                    ..s.clone()
                }));
            }
        }
        if self.window.is_some() {
            config.window = self.window;
        }
        if self.rate.is_some() {
            config.rate = self.rate;
        }
        let set = |field: &mut u64, v: Option<u64>| {
            if let Some(v) = v {
                *field = v;
            }
        };
        set(&mut config.duration_ms, self.duration_ms);
        set(&mut config.warmup_ms, self.warmup_ms);
        set(&mut config.open_loop_ms, self.open_loop_ms);
        set(&mut config.priority_probe_ms, self.probe_ms);
        set(&mut config.request_timeout_ms, self.request_timeout_ms);
        set(&mut config.seed, self.seed);
        if let Some(r) = self.repetitions {
            config.repetitions = r;
        }
        config.quic_cc = self.quic_cc;
        if let Some(n) = self.quic_max_streams {
            config.quic_max_streams = n;
        }
        if let Some(n) = self.quic_max_mtu {
            config.quic_max_mtu = n;
        }
        if let Some(n) = self.quic_loopback_mtu {
            config.quic_loopback_mtu = n;
        }
        if let Some(n) = self.quic_receive_budget {
            config.quic_receive_budget = n;
        }
        if let Some(n) = self.quic_endpoints {
            config.quic_endpoints = n as usize;
        }
        if let Some(n) = self.hub_threads {
            config.hub_threads = n as usize;
        }
        if let Some(n) = self.client_threads {
            config.client_threads = n as usize;
        }
        config.tcp_cc.clone_from(&self.tcp_cc);
        config.netsim_stage = self.netsim_stage;
        config.qlog_dir.clone_from(&self.qlog);
        config.validate()?;
        Ok(config)
    }
}
