//! The flags of `agentwire netsim` (feature `netsim`).

use std::net::SocketAddr;

use anyhow::Result;
use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
pub enum NetsimCommand {
    /// Socket relay mode (needs no privileges): listen on --listen, forward to --to through
    /// the impairment model; UDP (for QUIC) and/or TCP (for h2/ws). TCP relays apply delay,
    /// jitter and rate only: a TCP relay cannot drop, reorder or duplicate bytes.
    ///
    /// Example: agentwire netsim relay --listen 127.0.0.1:0 --to 127.0.0.1:4433 --udp --tcp --spec "delay=25ms,loss=1%"
    Relay(RelayArgs),
    /// Packet-level mode (Linux, root or CAP_NET_ADMIN): two network namespaces joined by a
    /// veth pair, every IP packet (TCP and UDP alike) impaired through an NFQUEUE stage.
    /// Prints how to run a hub and agents inside them; Ctrl-C removes everything.
    ///
    /// Example: sudo agentwire netsim up --name demo --spec "delay=25ms,loss=1%" --tcp-cc bbr
    Up(UpArgs),
    /// Measure the emulator itself (added RTT, loss rate, rate limit, ceiling); exits
    /// non-zero when a bound fails.
    ///
    /// Example: agentwire netsim check --mode auto --json
    Check(CheckArgs),
}

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Impairment of the client → server direction, e.g. "delay=25ms,loss=1%,rate=100mbit".
    #[arg(long, default_value = "")]
    pub spec: String,
    /// Impairment of the server → client direction (default: the same as --spec).
    #[arg(long)]
    pub reverse_spec: Option<String>,
    /// Stable namespace names aw-NAME-c / aw-NAME-s (default: aw-PID-N-c / aw-PID-N-s).
    #[arg(long)]
    pub name: Option<String>,
    /// Random seed (default: the spec's seed=, else 0).
    #[arg(long)]
    pub seed: Option<u64>,
    /// TCP congestion control to set in both namespaces (default: leave the kernel's).
    #[arg(long, value_parser = ["bbr", "cubic", "reno"])]
    pub tcp_cc: Option<String>,
    /// Print stage counters as one JSON line to stderr every this many seconds (0 = never).
    #[arg(long, default_value_t = 5)]
    pub stats_interval: u64,
    /// The packet stage: `bridge` (the default: a middle namespace aw-NAME-m forwards frames;
    /// no iptables) or `nfqueue` (iptables and the NFQUEUE target). Both need root here, since
    /// other processes must reach the namespaces.
    #[arg(long, default_value = "bridge", value_parser = parse_stage)]
    pub stage: agentwire_netsim::StageKind,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckMode {
    /// Packet mode when privileged, else socket mode.
    Auto,
    /// Packet-level mode (namespaces and the --stage packet stage).
    Packet,
    /// Socket relay mode (UDP relay on loopback; no privileges).
    Socket,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Which emulator to measure.
    #[arg(long, value_enum, default_value_t = CheckMode::Auto)]
    pub mode: CheckMode,
    /// The packet stage of packet mode: `bridge` (the default; root, or any user through a
    /// user namespace of its own) or `nfqueue` (root and iptables).
    #[arg(long, default_value = "bridge", value_parser = parse_stage)]
    pub stage: agentwire_netsim::StageKind,
    /// Datagrams of the loss check (100..=1000000).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(100..=1_000_000))]
    pub packets: u32,
    /// Seed of the emulator's links.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RelayArgs {
    /// Address to listen on; UDP and TCP relays use the same port number when it is fixed.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Address to forward to (the hub's listener).
    #[arg(long)]
    pub to: SocketAddr,
    /// Relay UDP datagrams (QUIC). With neither --udp nor --tcp, both are relayed.
    #[arg(long)]
    pub udp: bool,
    /// Relay TCP connections (HTTP/2, WebSocket).
    #[arg(long)]
    pub tcp: bool,
    /// Impairment of the client → target direction, e.g. "delay=25ms,jitter=2ms,loss=1%,rate=100mbit".
    #[arg(long, default_value = "")]
    pub spec: String,
    /// Impairment of the target → client direction (default: the same as --spec).
    #[arg(long)]
    pub reverse_spec: Option<String>,
    /// Random seed (default: the spec's seed=, else 0).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print relay counters as one JSON line to stderr every this many seconds (0 = never).
    #[arg(long, default_value_t = 5)]
    pub stats_interval: u64,
}

/// `--netsim-stage` / `--stage`: `bridge` or `nfqueue`.
pub fn parse_stage(s: &str) -> Result<agentwire_netsim::StageKind, agentwire_netsim::UnknownStage> {
    s.parse()
}
