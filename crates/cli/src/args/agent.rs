//! The flags of the subcommands that act as an agent of a running hub: `agent`, `send`, `queue`,
//! `reload`, and `token` (which makes an agent's credential); `ConnectArgs` is how each of them
//! reaches the hub.

use std::path::PathBuf;
use std::time::Duration;

use agentwire::{AgentOptions, HubTrust, HubUrl, Kind, Priority, QuicSettings};
use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use super::*;

#[derive(Args, Debug, Clone)]
pub struct ConnectArgs {
    /// Hub address; repeat it (or use auto://HOST:PORT) to fall back in order:
    /// quic://HOST:PORT, h2://HOST:PORT, wss://HOST:PORT, ws://HOST:PORT, unix:///PATH.
    #[arg(long, required = true)]
    pub hub: Vec<String>,
    /// With several hub addresses: milliseconds one attempt may take before the next is tried.
    #[arg(long, default_value_t = 2_000)]
    pub fallback_timeout_ms: u64,
    /// CA certificate that signed the hub's certificate.
    #[arg(long, conflicts_with_all = ["pin", "insecure"])]
    pub ca: Option<PathBuf>,
    /// Pinned SHA-256 of the hub's public key (sha256:HEX, printed by `agentwire cert`).
    #[arg(long, conflicts_with = "insecure")]
    pub pin: Option<String>,
    /// Accept any hub certificate. For testing only: anyone can impersonate the hub.
    #[arg(long)]
    pub insecure: bool,
    /// TLS server name (default: the host in --hub).
    #[arg(long)]
    pub server_name: Option<String>,
    /// This agent's certificate, for hubs that require one (from `agentwire cert agent`; it
    /// must name the agent's id).
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    /// The private key of --cert.
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
    /// Token the hub requires.
    #[arg(long, env = "AGENTWIRE_AUTH_TOKEN")]
    pub auth_token: Option<String>,
    /// Codecs offered, preferred first (msgpack, json).
    #[arg(long, value_delimiter = ',', default_value = "msgpack,json")]
    pub codecs: Vec<String>,
    /// Role announced to the hub.
    #[arg(long, default_value = "agent")]
    pub role: String,
    /// Connect timeout, milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub connect_timeout_ms: u64,
    #[command(flatten)]
    pub quic: QuicArgs,
}

impl ConnectArgs {
    /// True when every hub address is a transport without TLS (unix://, ws://), so no trust
    /// option is needed; the empty trust store then refuses any TLS peer.
    fn all_plain(&self) -> Result<bool> {
        let mut plain = true;
        for hub in &self.hub {
            for url in HubUrl::parse_list(hub).map_err(anyhow::Error::msg)? {
                plain &= !url.tls;
            }
        }
        Ok(plain)
    }

    pub fn options(&self, id: &str) -> Result<AgentOptions> {
        let trust = match (&self.ca, &self.pin, self.insecure) {
            (Some(ca), _, _) => HubTrust::ca_file(ca)?,
            (None, Some(pin), _) => HubTrust::pin(pin)?,
            (None, None, true) => HubTrust::Insecure,
            (None, None, false) if self.all_plain()? => HubTrust::Ca(Vec::new()),
            (None, None, false) => bail!(
                "say how to verify the hub: --ca FILE (from `agentwire cert`), --pin sha256:HEX, \
                 or --insecure for testing"
            ),
        };
        let mut opts = AgentOptions::new(id, String::new(), trust);
        opts.hubs.clone_from(&self.hub);
        opts.fallback_timeout = Duration::from_millis(self.fallback_timeout_ms);
        opts.server_name.clone_from(&self.server_name);
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            let identity = agentwire::tls::AgentIdentity::load(cert, key)?;
            let named = identity
                .cert_chain
                .first()
                .map(|c| agentwire::tls::certified_agent_id(c.as_ref()))
                .transpose()?;
            if named.as_deref() != Some(id) {
                bail!(
                    "{} names agent {:?}, not {id:?}; the hub would refuse it",
                    cert.display(),
                    named.unwrap_or_default()
                );
            }
            opts.identity = Some(identity);
        }
        opts.auth_token.clone_from(&self.auth_token);
        opts.codecs = parse_codecs(&self.codecs)?;
        opts.role.clone_from(&self.role);
        opts.quic = self.quic.settings(&QuicSettings::for_agent());
        opts.stream_mapping = self.quic.mapping;
        opts.connect_timeout = Duration::from_millis(self.connect_timeout_ms);
        Ok(opts)
    }
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// This agent's id.
    #[arg(long)]
    pub id: String,
    /// Answer every request with its own body.
    #[arg(long)]
    pub echo: bool,
    /// Subscribe to a topic; repeatable ($presence gives join/leave events).
    #[arg(long)]
    pub subscribe: Vec<String>,
    /// Do not print received messages.
    #[arg(long)]
    pub quiet: bool,
    /// Print connection stats as JSON to stderr every N seconds.
    #[arg(long)]
    pub stats_interval: Option<u64>,
    /// Consume this work queue; repeatable. Tasks are acked once handled (see --ack-delay-ms).
    #[arg(long)]
    pub consume: Vec<String>,
    /// Tasks of each consumed queue held at once.
    #[arg(long, default_value_t = 1)]
    pub credit: u32,
    /// Print each task's body alone on its own line on stdout (other messages go to stderr).
    #[arg(long)]
    pub print: bool,
    /// Milliseconds to wait before acking each task (a stand-in for doing the work).
    #[arg(long, default_value_t = 0)]
    pub ack_delay_ms: u64,
}

/// A message kind given on the command line.
#[derive(Debug, Clone, Copy)]
pub struct KindArg(pub Kind);

impl std::str::FromStr for KindArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Kind::from_name(s)
            .map(KindArg)
            .ok_or_else(|| format!("unknown kind {s:?}"))
    }
}

/// A priority given on the command line.
#[derive(Debug, Clone, Copy)]
pub struct PriorityArg(pub Priority);

impl std::str::FromStr for PriorityArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Priority::from_name(s)
            .map(PriorityArg)
            .ok_or_else(|| format!("unknown priority {s:?} (critical, high, medium, low)"))
    }
}

pub(crate) fn parse_header(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("header {s:?} is not KEY=VALUE"))
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("payload").required(true).args(["request", "message"])))]
pub struct SendArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Destination: an agent id, agent:ID, topic:NAME, queue:NAME (a durable work queue: exits 0
    /// once the hub has stored the task) or * (broadcast; not with --request).
    #[arg(long)]
    pub to: String,
    /// Send a request with this body and print the reply's body.
    #[arg(long)]
    pub request: Option<String>,
    /// Send a one-way message with this body.
    #[arg(long)]
    pub message: Option<String>,
    /// Kind of a one-way message.
    #[arg(long, default_value = "task")]
    pub kind: KindArg,
    /// Priority: critical, high, medium or low.
    #[arg(long, default_value = "medium")]
    pub priority: PriorityArg,
    /// Header KEY=VALUE; repeatable.
    #[arg(long = "header", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// Request timeout, milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub timeout_ms: u64,
    /// Sender id (default: send-PID).
    #[arg(long)]
    pub id: Option<String>,
    /// Print connection stats (RTT, cwnd, losses, bytes) as JSON to stderr.
    #[arg(long)]
    pub stats: bool,
    /// For queue:NAME: the task's producer id; the hub stores a task re-sent with the same id
    /// within its duplicate window only once.
    #[arg(long)]
    pub producer_id: Option<String>,
}

impl SendArgs {
    pub fn body(&self) -> Vec<u8> {
        self.request
            .as_deref()
            .or(self.message.as_deref())
            .unwrap_or_default()
            .as_bytes()
            .to_vec()
    }
}

#[derive(Args, Debug)]
pub struct QueueArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Agent id to connect as (default: queue-PID).
    #[arg(long)]
    pub id: Option<String>,
    /// Answer timeout, milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub timeout_ms: u64,
    #[command(subcommand)]
    pub op: QueueCommand,
}

#[derive(Subcommand, Debug)]
pub enum QueueCommand {
    /// Tasks ready, waiting for a retry, in flight and dead; consumers.
    Stats {
        /// The queue.
        queue: String,
    },
    /// The queue's dead letters (tasks that ran out of attempts), oldest first.
    DeadLetters {
        /// The queue.
        queue: String,
    },
    /// Puts dead letters back in line with a fresh count of attempts.
    Replay {
        /// The queue.
        queue: String,
        /// Only this task (default: every dead letter).
        #[arg(long)]
        task: Option<u64>,
    },
    /// Deletes dead letters.
    Discard {
        /// The queue.
        queue: String,
        /// Only this task (default: every dead letter).
        #[arg(long)]
        task: Option<u64>,
    },
    /// Durable-queue throughput: producers keep enqueues in flight (each waits for the hub's
    /// receipt), consumers ack what they get; prints tasks/s and the receipt latency. Use a
    /// queue nothing else uses: tasks still queued at the end stay there.
    ///
    /// Example: agentwire queue --hub unix:///tmp/hub.sock bench qbench --producers 4 --window 16
    #[cfg(feature = "bench")]
    Bench {
        /// The queue.
        queue: String,
        /// Producer connections.
        #[arg(long, default_value_t = 4)]
        producers: usize,
        /// Enqueues in flight per producer.
        #[arg(long, default_value_t = 16)]
        window: usize,
        /// Consumer connections.
        #[arg(long, default_value_t = 2)]
        consumers: usize,
        /// Tasks each consumer holds at once.
        #[arg(long, default_value_t = 64)]
        credit: u32,
        /// Task body, bytes.
        #[arg(long, default_value_t = 1024)]
        size: usize,
        /// Warm-up before measuring, milliseconds.
        #[arg(long, default_value_t = 1_000)]
        warmup_ms: u64,
        /// Measured window, milliseconds.
        #[arg(long, default_value_t = 5_000)]
        duration_ms: u64,
    },
}

#[derive(Args, Debug)]
pub struct ReloadArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Agent id to connect as (default: reload-PID).
    #[arg(long)]
    pub id: Option<String>,
    /// Answer timeout, milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub timeout_ms: u64,
}

#[derive(Args, Debug)]
pub struct TokenArgs {
    /// Print the SHA-256 of this token instead of making a new one.
    #[arg(long)]
    pub hash: Option<String>,
}
