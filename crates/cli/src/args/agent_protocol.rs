//! The flags of `agentwire agent-protocol` (feature `agent-protocol`).

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
pub enum AgentProtocolCommand {
    /// Run an agent that answers every event with one decision, each event in a task of its
    /// own. Runs until Ctrl-C.
    ///
    /// Example: agentwire agent-protocol serve --socket /tmp/agent.sock --encoding msgpack --decision allow
    Serve(ApServeArgs),
    /// Closed-loop benchmark of any agent (ours or another implementation) through the pool:
    /// requests/s, latency percentiles, CPU per request, errors by kind.
    ///
    /// Example: agentwire agent-protocol bench --socket /tmp/agent.sock --requests 20000 --concurrency 16
    Bench(ApBenchArgs),
}

/// A payload encoding of the agent protocol.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApEncoding {
    /// MessagePack (structs as maps).
    Msgpack,
    /// JSON.
    Json,
}

/// The decision `agent-protocol serve` answers with.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApDecision {
    /// Let every request through.
    Allow,
    /// Refuse every request (403).
    Block,
}

#[derive(Args, Debug)]
pub struct ApServeArgs {
    /// Unix socket to listen on (a stale socket file is replaced; a live one is refused).
    #[arg(long)]
    pub socket: PathBuf,
    /// Speak only this encoding (default: MessagePack and JSON, the proxy's first choice wins).
    #[arg(long, value_enum)]
    pub encoding: Option<ApEncoding>,
    /// The decision for every event.
    #[arg(long, value_enum, default_value = "allow")]
    pub decision: ApDecision,
    /// Handlers running at once on one connection before the agent pauses it (flow control).
    #[arg(long, default_value_t = 256)]
    pub max_in_flight: usize,
    /// Make every Nth event slow (0: none), by --slow-ms: shows that one slow request holds
    /// up no other.
    #[arg(long, default_value_t = 0)]
    pub slow_every: u64,
    /// How long a slow event takes, ms.
    #[arg(long, default_value_t = 10)]
    pub slow_ms: u64,
}

#[derive(Args, Debug)]
pub struct ApBenchArgs {
    /// The agent's Unix socket.
    #[arg(long)]
    pub socket: PathBuf,
    /// Requests in all.
    #[arg(long, default_value_t = 20_000)]
    pub requests: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Encoding offered.
    #[arg(long, value_enum, default_value = "msgpack")]
    pub encoding: ApEncoding,
    /// 0: request-headers events (about 300 bytes); otherwise request-body chunks of this many
    /// bytes.
    #[arg(long, default_value_t = 0)]
    pub body_size: usize,
    /// Pooled connections to the agent.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// The agent's process id: report its CPU per request too.
    #[arg(long)]
    pub agent_pid: Option<u32>,
    /// Stop after this many seconds even if requests are left.
    #[arg(long, default_value_t = 120)]
    pub max_secs: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}
