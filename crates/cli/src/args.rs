//! Command-line flags, and their translation into library options.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agentwire::hub::{DuplicatePolicy, HubConfig};
use agentwire::{
    AgentOptions, Codec, CongestionControl, HubTrust, HubUrl, Kind, Priority, QuicSettings,
    StreamMapping,
};
use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

/// agentwire — a QUIC-first transport for multi-agent systems.
#[derive(Parser, Debug)]
#[command(name = "agentwire", version, about, long_about = None)]
pub struct Cli {
    /// More logging (-v info, -vv debug); AGENTWIRE_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a CA and a hub certificate signed by it; `cert agent` issues an agent's
    /// certificate (mutual TLS).
    ///
    /// Example: agentwire cert --out certs
    /// Example: agentwire cert agent --id worker-1 --ca-dir certs
    Cert(CertArgs),
    /// Run a hub.
    ///
    /// Example: agentwire hub --listen quic://127.0.0.1:4433 --cert-dir certs
    Hub(Box<HubArgs>),
    /// Run an agent that prints what it receives (and, with --echo, answers requests).
    ///
    /// Example: agentwire agent --hub quic://127.0.0.1:4433 --ca certs/ca.pem --id worker-1 --echo
    Agent(AgentArgs),
    /// Send one message or request and exit (0 on success, non-zero on any failure).
    ///
    /// Example: agentwire send --hub quic://127.0.0.1:4433 --ca certs/ca.pem --to worker-1 --request hello
    Send(SendArgs),
    /// Benchmark request/response over loopback: a real hub and real agents in this process,
    /// a grid of transports × agents × sizes; prints a table and writes JSON.
    ///
    /// Example: agentwire bench --agents 10,100 --sizes 1024 --transports quic,h2 --out target/bench-small
    Bench(BenchArgs),
    /// Serve the files of a directory over HTTP/3 (UDP) and HTTP/2 + HTTP/1.1 (TCP, TLS 1.3)
    /// on the same port, from memory; for `agentwire load` and other HTTP load tools.
    /// Runs until Ctrl-C.
    ///
    /// Example: agentwire serve --root www --listen 127.0.0.1:8443 --cert-dir certs --generate
    Serve(ServeArgs),
    /// Load an HTTP server: many connections and requests over h3, h2 or http/1.1, closed
    /// loop or at a fixed rate; reports requests/s, errors by kind and latency percentiles.
    ///
    /// Example: agentwire load https://127.0.0.1:8443/1k.bin --proto h3 --duration 3s --insecure --json
    Load(LoadArgs),
    /// A curl-scorecard style comparison of h3, h2 and http/1.1: handshakes, serial and
    /// parallel downloads, requests/s at several parallelisms, two load rounds, long and
    /// short connections. Starts its own server unless --url is given; writes scorecard.json
    /// and scorecard.md into --out and prints the table; exits non-zero if any scenario had
    /// errors.
    ///
    /// Example: agentwire scorecard --quick --out scorecard-out
    Scorecard(ScorecardArgs),
    /// Network emulation between real agentwire endpoints (delay, jitter, loss, rate …).
    ///
    /// Example: agentwire netsim relay --listen 127.0.0.1:4434 --to 127.0.0.1:4433 --udp --spec "delay=25ms,loss=1%"
    #[command(subcommand)]
    Netsim(NetsimCommand),
    /// Zentinel Agent Protocol v2 over Unix sockets (a reverse proxy's external agents): run
    /// an agent, or benchmark any agent through the pool.
    ///
    /// Example: agentwire agent-protocol serve --socket /tmp/agent.sock
    #[command(subcommand)]
    AgentProtocol(AgentProtocolCommand),
    /// Make an agent token for a hub's access file: prints a new random token and the SHA-256
    /// the file holds (or, with --hash, the SHA-256 of a token you have).
    ///
    /// Example: agentwire token
    Token(TokenArgs),
    /// Look at and repair a hub's work queues: counts, dead letters, replay, discard. Prints
    /// the hub's JSON answer.
    ///
    /// Example: agentwire queue --hub unix:///tmp/hub.sock dead-letters jobs
    Queue(QueueArgs),
    /// Ask a running hub to read its files again (access file, client CA, revoked serials,
    /// hub certificate), as SIGHUP does; the agent's credential must say "admin": true.
    /// Prints the hub's JSON answer.
    ///
    /// Example: agentwire reload --hub unix:///tmp/hub.sock --id ops --auth-token "$OPS_TOKEN"
    Reload(ReloadArgs),
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

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct CertArgs {
    #[command(subcommand)]
    pub issue: Option<CertCommand>,
    /// Directory to write ca.pem, ca.key, hub.pem and hub.key into.
    #[arg(long, required = true)]
    pub out: Option<PathBuf>,
    /// Names the hub certificate is valid for (DNS names or IPs); repeatable.
    /// Default: localhost, 127.0.0.1, ::1.
    #[arg(long = "name")]
    pub names: Vec<String>,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

#[derive(Subcommand, Debug)]
pub enum CertCommand {
    /// Issue a client certificate whose name is an agent id, signed by the CA of
    /// `agentwire cert`, for hubs run with --client-ca. Writes ID.pem and ID.key.
    ///
    /// Example: agentwire cert agent --id worker-1 --ca-dir certs
    Agent(CertAgentArgs),
}

#[derive(Args, Debug)]
pub struct CertAgentArgs {
    /// The agent id the certificate names (the only id its holder may take).
    #[arg(long)]
    pub id: String,
    /// Directory holding the CA's ca.pem and ca.key (from `agentwire cert --out DIR`).
    #[arg(long)]
    pub ca_dir: PathBuf,
    /// Directory to write ID.pem and ID.key into (default: --ca-dir).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Days the certificate stays valid.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug, Clone)]
pub struct QuicArgs {
    /// QUIC idle timeout in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub idle_timeout_ms: u64,
    /// QUIC keep-alive interval in milliseconds (0 = off).
    #[arg(long, default_value_t = 10_000)]
    pub keep_alive_ms: u64,
    /// Streams the peer may have open at once, for each type (unidirectional and
    /// bidirectional); more wait for credit. quinn allocates their state up front, so this
    /// sets the memory per connection.
    #[arg(long, default_value_t = 256)]
    pub max_streams: u32,
    /// Per-stream flow-control window, bytes.
    #[arg(long, default_value_t = 2 * 1024 * 1024)]
    pub stream_window: u32,
    /// Connection flow-control window, bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    pub conn_window: u64,
    /// Send window (unacknowledged bytes in flight), bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    pub send_window: u64,
    /// Hub: a QUIC connection's window, and the bytes of its partly received frames, until
    /// its hello is accepted (then --conn-window); partial frames beyond it close the
    /// connection with frame-too-large.
    #[arg(long, default_value_t = agentwire::transport::quic::PRE_HELLO_WINDOW,
          value_parser = clap::value_parser!(u64).range(16_384..))]
    pub pre_hello_window: u64,
    /// Bytes one QUIC connection may have read and not yet handed on (a hub or an agent busy
    /// elsewhere) before it reads no further: the peer then waits within its windows.
    #[arg(long, default_value_t = agentwire::transport::quic_backlog::DEFAULT_MAX_UNREAD_BYTES,
          value_parser = parse_at_least_64k)]
    pub max_unread_bytes: usize,
    /// Congestion control: bbr3 (agentwire-cc, the default), cubic, newreno or bbr (quinn's
    /// BBRv1).
    #[arg(long, default_value = "bbr3")]
    pub cc: CongestionControl,
    /// UDP socket send buffer, bytes.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub udp_sndbuf: usize,
    /// UDP socket receive buffer, bytes (capped by net.core.rmem_max unless the process may
    /// force it).
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    pub udp_rcvbuf: usize,
    /// Initial QUIC packet size.
    #[arg(long, default_value_t = 1200)]
    pub initial_mtu: u16,
    /// Upper bound for MTU discovery, bytes of UDP payload (1200..=65527). Discovery finds
    /// what the path carries up to this bound; loopback peers use `--loopback-mtu` instead.
    #[arg(long, default_value_t = 1452)]
    pub max_mtu: u16,
    /// Datagram size of connections with a peer on a loopback address: they start at it and
    /// stay there (1200..=65527; 0 = treat loopback like any path, `--initial-mtu`/`--max-mtu`).
    #[arg(long, default_value_t = agentwire::settings::MAX_UDP_PAYLOAD_V4)]
    pub loopback_mtu: u16,
    /// Hub: stream bytes all QUIC connections together may have in flight toward it (each
    /// connection's window is this divided by the connections open, at least 16 KiB, at most
    /// `--conn-window`); fewer UDP drops and a lower tail, less throughput. 0 (the default) =
    /// every connection gets `--conn-window`.
    #[arg(long, default_value_t = 0)]
    pub receive_budget: u64,
    /// Hub: UDP sockets on the listening address (SO_REUSEPORT), each with a QUIC endpoint of
    /// its own, so that the handshakes and packets of different agents run on different
    /// cores. Agents that change address (migration, NAT rebinding) need 1, the default.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub endpoints: u32,
    /// Do not use QUIC datagrams (heartbeats then use the control stream).
    #[arg(long)]
    pub no_datagrams: bool,
    /// Ack-eliciting packets the peer may receive before it must acknowledge (QUIC ACK
    /// frequency extension; 1 = every other packet; gaps are acknowledged at once).
    #[arg(long, default_value_t = 9)]
    pub ack_threshold: u32,
    /// Stream mapping: per-message (one stream per message) or lanes (one per priority).
    #[arg(long, default_value = "per-message")]
    pub mapping: StreamMapping,
    /// Write one qlog trace per QUIC connection into DIR (`hub-<cid>.sqlog`,
    /// `agent-<id>-<pid>-<n>.sqlog`; open them in qvis). Each file is complete when its
    /// connection closes.
    #[arg(long, value_name = "DIR")]
    pub qlog: Option<PathBuf>,
}

impl QuicArgs {
    pub fn settings(&self) -> QuicSettings {
        QuicSettings {
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            keep_alive: (self.keep_alive_ms > 0).then(|| Duration::from_millis(self.keep_alive_ms)),
            max_concurrent_uni_streams: self.max_streams,
            max_concurrent_bidi_streams: self.max_streams,
            stream_receive_window: self.stream_window,
            receive_window: self.conn_window,
            pre_hello_window: self.pre_hello_window,
            max_unread_bytes: self.max_unread_bytes,
            send_window: self.send_window,
            congestion: self.cc,
            socket_send_buffer: self.udp_sndbuf,
            socket_recv_buffer: self.udp_rcvbuf,
            initial_mtu: self.initial_mtu,
            max_mtu: self.max_mtu,
            loopback_mtu: self.loopback_mtu,
            receive_budget: self.receive_budget,
            server_endpoints: self.endpoints as usize,
            retry_above_per_sec: None,
            datagrams: !self.no_datagrams,
            ack_eliciting_threshold: self.ack_threshold,
            qlog_dir: self.qlog.clone(),
        }
    }
}

#[derive(Args, Debug)]
pub struct HubArgs {
    /// Address to listen on; repeatable: quic://HOST:PORT, h2://HOST:PORT, wss://HOST:PORT,
    /// ws://HOST:PORT, unix:///PATH.
    #[arg(long, required = true)]
    pub listen: Vec<String>,
    /// Directory holding hub.pem and hub.key (see `agentwire cert`); needed for quic, h2
    /// and wss listeners.
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// Require every agent on quic, h2 and wss to show a certificate signed by this CA (from
    /// `agentwire cert agent`; usually CERT_DIR/ca.pem), and let it take only the id the
    /// certificate names. Plain ws:// agents are then refused; Unix-socket agents need none.
    #[arg(long)]
    pub client_ca: Option<PathBuf>,
    /// Agent certificates revoked although the client CA signed them: a text file of serials,
    /// one per line in hexadecimal (as `agentwire cert agent` prints them), `#` for comments.
    /// Checked at the TLS handshake and again before the hello; SIGHUP reloads it, the client
    /// CA and the hub certificate, and closes agents whose certificate is no longer accepted.
    #[arg(long, requires = "client_ca")]
    pub revoked_serials: Option<PathBuf>,
    /// Join a cluster of hubs through NATS: agents of every hub reach each other, topics and
    /// `$presence` span them (comma-separated or repeated: nats://HOST:PORT).
    #[arg(long, value_delimiter = ',')]
    pub cluster: Vec<String>,
    /// The cluster's name (hubs with the same name on the same NATS form one agent space).
    #[arg(long, default_value = "default")]
    pub cluster_name: String,
    /// This hub's id in the cluster (letters, digits, '-', '_'; default: hub- and random hex).
    #[arg(long)]
    pub hub_id: Option<String>,
    /// Talk to NATS over TLS, trusting this CA certificate (PEM). A user and password or a token
    /// go in the --cluster URL (nats://user:pass@host:4222).
    #[arg(long)]
    pub cluster_ca: Option<PathBuf>,
    /// A NATS credentials file (.creds) for the cluster connection.
    #[arg(long)]
    pub cluster_creds: Option<PathBuf>,
    /// When NATS cannot be reached at start, serve this hub's agents alone instead of exiting.
    #[arg(long)]
    pub cluster_optional: bool,
    /// Where a cluster's work queues live: `jetstream` (one hub at a time keeps them all in a
    /// JetStream stream, any hub's consumers compete for their tasks, another hub takes over
    /// when it stops; nats-server must run with -js) or `per-hub` (each hub its own, in
    /// memory or its --store).
    #[arg(long, default_value = "jetstream", value_parser = ["jetstream", "per-hub"])]
    pub cluster_queues: String,
    /// A hub not heard from for this long is taken as gone (its agents leave the other hubs),
    /// and the queue keeper's lease lasts this long without renewal: how long a failover takes.
    /// Hubs announce themselves every 2/7 of it (1 s at the default).
    #[arg(long, default_value_t = 3500, value_parser = clap::value_parser!(u64).range(700..=600_000))]
    pub cluster_expiry_ms: u64,
    /// JetStream replicas of the queues' stream: exactly this many on a NATS cluster (the hub
    /// does not start when JetStream cannot place them within 30 s; ask for fewer to allow
    /// fewer); a NATS server that is not clustered keeps one copy, with a warning.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=5))]
    pub cluster_replicas: u64,
    /// Permission bits of Unix socket files, in octal.
    #[arg(long, default_value = "600", value_parser = parse_octal)]
    pub socket_mode: u32,
    /// Serve Prometheus metrics on this address, e.g. 127.0.0.1:9100.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Require agents to present this token. On the command line it shows in the process
    /// list: prefer --auth-token-file or the environment variable.
    #[arg(long, env = "AGENTWIRE_AUTH_TOKEN", conflicts_with = "auth_token_file")]
    pub auth_token: Option<String>,
    /// Require agents to present the token this file holds (its first line; surrounding
    /// whitespace ignored). The hub warns when others than its owner may read it.
    #[arg(long)]
    pub auth_token_file: Option<PathBuf>,
    /// Refuse to start unless agents must show a credential (a token, an access file or a
    /// client CA) and no token would travel unencrypted (plain ws://). Without it the hub
    /// warns when it listens beyond loopback without credentials, and when tokens would
    /// cross ws://.
    #[arg(long)]
    pub require_auth: bool,
    /// Requests one agent may have waiting for answers at once, and requests sent to it
    /// that it has not answered yet (beyond: limit-exceeded for its requests, queue-full for
    /// requests to it).
    #[arg(long, default_value_t = agentwire::hub::DEFAULT_MAX_OPEN_REQUESTS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_open_requests: u64,
    /// Heartbeat interval told to agents, milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub heartbeat_ms: u32,
    /// Remove an agent after this many missed heartbeats.
    #[arg(long, default_value_t = 3)]
    pub miss_limit: u32,
    /// Milliseconds a new connection may take to complete the agentwire handshake (hello →
    /// welcome) before the hub closes it with `handshake-timeout`.
    #[arg(long, default_value_t = 10_000)]
    pub handshake_timeout_ms: u64,
    /// Frames each agent's send queue holds before senders get queue-full.
    #[arg(long, default_value_t = 4096)]
    pub queue_capacity: usize,
    /// Bytes each agent's send queue holds before senders get queue-full (one message of
    /// any size fits an empty queue).
    #[arg(long, default_value_t = agentwire::hub::DEFAULT_AGENT_QUEUE_BYTES as u64)]
    pub queue_bytes: u64,
    /// Bytes all agents' send queues hold together before senders get queue-full: the most
    /// the hub keeps for agents that do not read.
    #[arg(long, default_value_t = agentwire::hub::DEFAULT_HUB_QUEUE_BYTES as u64)]
    pub hub_queue_bytes: u64,
    /// Topics one agent may subscribe to (beyond: limit-exceeded).
    #[arg(long, default_value_t = agentwire::hub::DEFAULT_MAX_SUBSCRIPTIONS as u64)]
    pub max_subscriptions: u64,
    /// Largest frame accepted, bytes.
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    pub max_frame_size: u32,
    /// Codecs accepted, most preferred first (msgpack, json).
    #[arg(long, value_delimiter = ',', default_value = "msgpack,json")]
    pub codecs: Vec<String>,
    /// What to do when an agent id is already connected: reject (the newcomer) or replace.
    #[arg(long, default_value = "reject")]
    pub on_duplicate: DuplicatePolicy,
    /// Print every connected agent's stats as JSON lines every N seconds.
    #[arg(long)]
    pub stats_interval: Option<u64>,
    /// Per-agent credentials and permissions (JSON; see `agentwire token` and the README):
    /// agents must present a token whose credential names their id, and may only send,
    /// subscribe and consume what it allows.
    #[arg(long)]
    pub access_file: Option<PathBuf>,
    /// Keep work queues (destinations queue:NAME) in this directory (file queues.redb),
    /// so that stored tasks survive a restart; without it they live in memory.
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Envelopes one agent may send per second (excess: a limit-exceeded error; off by default).
    #[arg(long)]
    pub agent_max_msgs_per_sec: Option<u32>,
    /// Envelope bytes one agent may send per second (off by default).
    #[arg(long)]
    pub agent_max_bytes_per_sec: Option<u64>,
    /// Connections open at once from one IP address (off by default).
    #[arg(long)]
    pub max_connections_per_address: Option<usize>,
    /// Connections in their TLS (or QUIC) and transport handshake at once, per listener;
    /// beyond, the hub accepts no more until one finishes (the kernel's backlog, or quinn,
    /// holds them).
    #[arg(long, default_value_t = agentwire::transport::accept_gate::DEFAULT_MAX_PENDING)]
    pub max_pending_handshakes: usize,
    /// Connections from one IP address in their handshake at once; beyond, a new one is
    /// closed before TLS (QUIC: refused before its handshake).
    #[arg(long, default_value_t = agentwire::transport::accept_gate::DEFAULT_MAX_PENDING_PER_ADDRESS)]
    pub max_pending_per_address: usize,
    /// New connections accepted per second, all addresses together, bursts of one second's
    /// worth (off by default): beyond it the listeners wait for the next turn before they take
    /// a connection (the rest wait in the kernel's backlog or QUIC's incoming queue, 4,096
    /// each), so that a flood of handshakes takes a bounded share of the CPU. It also paces
    /// honest reconnections: 1,000 agents take 50 s at 20/s.
    #[arg(long)]
    pub max_handshakes_per_sec: Option<u32>,
    /// QUIC: above this many connection attempts per second, validate new peers' addresses
    /// with a Retry first (0: always; off by default: connects take one round trip).
    #[arg(long)]
    pub quic_retry_above_per_sec: Option<u32>,
    /// Milliseconds a consumer has to ack a task before it goes to a consumer again.
    #[arg(long, default_value_t = 30_000)]
    pub queue_ack_wait_ms: u64,
    /// Deliveries of one task before it becomes a dead letter.
    #[arg(long, default_value_t = 5)]
    pub queue_max_deliver: u32,
    /// Tasks one work queue may hold (ready, waiting, in flight and dead); beyond it producers
    /// get queue-full.
    #[arg(long, default_value_t = 1_000_000)]
    pub queue_max_tasks: usize,
    /// Bytes of task bodies one work queue may hold (an empty queue takes one task of any
    /// allowed size); beyond it producers get queue-full.
    #[arg(long, default_value_t = 256 << 20)]
    pub queue_max_bytes: usize,
    /// Bytes of task bodies all work queues together may hold (tasks are kept in memory, and
    /// on disk with --store).
    #[arg(long, default_value_t = 1 << 30)]
    pub queue_total_bytes: usize,
    /// Work queues holding tasks or consumers at once; a task or consumer for one more gets
    /// queue-full.
    #[arg(long, default_value_t = 10_000)]
    pub max_queues: usize,
    #[command(flatten)]
    pub quic: QuicArgs,
}

fn parse_at_least_64k(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 65_536 => Ok(n),
        Ok(n) => Err(format!("{n} is below 65536")),
        Err(e) => Err(format!("{s:?} is not a number of bytes: {e}")),
    }
}

fn parse_octal(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .map_err(|_| format!("{s:?} is not an octal mode"))
}

fn parse_codecs(names: &[String]) -> Result<Vec<Codec>> {
    names
        .iter()
        .map(|n| match Codec::from_name(n.trim()) {
            Some(c) => Ok(c),
            None => bail!("unknown codec {n:?} (expected msgpack or json)"),
        })
        .collect()
}

impl HubArgs {
    pub fn hub_config(&self) -> Result<HubConfig> {
        let mut config = HubConfig::default();
        config.policy.auth_token = match &self.auth_token_file {
            Some(path) => Some(read_token_file(path)?),
            None => self.auth_token.clone(),
        };
        if config.policy.auth_token.as_deref() == Some("") {
            bail!("the auth token is empty");
        }
        config.max_open_requests = usize::try_from(self.max_open_requests).unwrap_or(usize::MAX);
        config.policy.heartbeat_interval_ms = self.heartbeat_ms.max(10);
        config.policy.limits.max_frame_size = self.max_frame_size;
        config.policy.codecs = parse_codecs(&self.codecs)?;
        if self.quic.no_datagrams {
            config.policy.capabilities.retain(|c| c != "datagrams");
        }
        config.heartbeat_miss_limit = self.miss_limit.max(1);
        config.handshake_timeout = Duration::from_millis(self.handshake_timeout_ms.max(1));
        config.agent_queue_capacity = self.queue_capacity.max(1);
        config.agent_queue_bytes = usize::try_from(self.queue_bytes).unwrap_or(usize::MAX);
        config.hub_queue_bytes = usize::try_from(self.hub_queue_bytes).unwrap_or(usize::MAX);
        config.max_subscriptions = usize::try_from(self.max_subscriptions).unwrap_or(usize::MAX);
        config.duplicate_policy = self.on_duplicate;
        config.quic = self.quic.settings();
        config.stream_mapping = self.quic.mapping;
        config.unix_socket_mode = self.socket_mode;
        if let Some(path) = &self.access_file {
            let policy = agentwire::hub::AccessPolicy::from_file(path)?;
            config.access = Some(std::sync::Arc::new(policy));
        }
        if let Some(path) = &self.client_ca {
            let ca = agentwire::tls::ClientCa::from_file(path)?;
            if let Some(revoked) = &self.revoked_serials {
                ca.set_revoked(agentwire::tls::RevokedSerials::from_file(revoked)?);
            }
            config.client_ca = Some(ca);
        }
        config.quic.retry_above_per_sec = self.quic_retry_above_per_sec;
        config.limits = agentwire::hub::AbuseLimits {
            agent_messages_per_sec: self.agent_max_msgs_per_sec,
            agent_bytes_per_sec: self.agent_max_bytes_per_sec,
            connections_per_address: self.max_connections_per_address,
            handshakes_per_sec: self.max_handshakes_per_sec,
        };
        config.accept = agentwire::transport::accept_gate::AcceptLimits {
            max_pending: self.max_pending_handshakes.max(1),
            max_pending_per_address: self.max_pending_per_address.max(1),
            handshakes_per_sec: self.max_handshakes_per_sec,
        };
        config.queue.ack_wait = Duration::from_millis(self.queue_ack_wait_ms.max(1));
        config.queue.max_deliver = self.queue_max_deliver.max(1);
        config.queue.max_tasks_per_queue = self.queue_max_tasks.max(1);
        config.queue.max_queue_bytes = self.queue_max_bytes;
        config.queue.max_total_bytes = self.queue_total_bytes;
        config.queue.max_queues = self.max_queues.max(1);
        Ok(config)
    }
}

/// The token in `path`: its first line, trimmed. Warns when the file is readable by others
/// than its owner.
fn read_token_file(path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the auth token file {}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.is_empty() {
        bail!("the auth token file {} is empty", path.display());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode();
        if mode & 0o077 != 0 {
            eprintln!(
                "warning: the auth token file {} may be read by others (mode {:o}): chmod 600 it",
                path.display(),
                mode & 0o777
            );
        }
    }
    Ok(token)
}

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
        opts.quic = self.quic.settings();
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

fn parse_header(s: &str) -> Result<(String, String), String> {
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
pub struct BenchArgs {
    /// The quick preset (the default): every transport on 10 agents × 1 KiB and 100 × 10 KiB
    /// over loopback, and quic/h2/wss on 10 × 1 KiB over 50 ms + 1 % loss (packet mode,
    /// needs root; skipped otherwise); 3 repetitions. About four minutes on two cores.
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
    /// directory). `--mappings` is an old alias (per-message = quic, lanes = quic-lanes).
    #[arg(long, alias = "mappings", value_delimiter = ',')]
    pub transports: Option<Vec<agentwire_bench::BenchTransport>>,
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
    /// Concurrent QUIC streams each side lets its peer open (hub and agents; default: the
    /// library's default).
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
                    .map(|s| NetworkProfile::parse(s).map_err(anyhow::Error::msg))
                    .collect::<Result<Vec<_>>>()?,
                None => vec![NetworkProfile::loopback()],
            };
            config.scenarios.clear();
            for network in &networks {
                for &a in &agents {
                    for &size in &sizes {
                        config.scenarios.push(Scenario {
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
        config.tcp_cc.clone_from(&self.tcp_cc);
        config.netsim_stage = self.netsim_stage;
        config.qlog_dir.clone_from(&self.qlog);
        config.validate()?;
        Ok(config)
    }
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Directory whose files are served (all loaded into memory at start; up to 4 GiB).
    #[arg(long)]
    pub root: PathBuf,
    /// Address for both listeners: UDP for HTTP/3, TCP (same port) for HTTP/2 and HTTP/1.1.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// Directory holding hub.pem and hub.key (see `agentwire cert`).
    #[arg(long)]
    pub cert_dir: PathBuf,
    /// First write the standard benchmark files into --root: 630b.bin, 1k.bin, 5k.bin,
    /// 10k.bin, 15k.bin, 100k.bin, 1m.bin, 2m.bin, 10m.bin (deterministic content).
    #[arg(long)]
    pub generate: bool,
    /// Runtime worker threads: 1 = a single-threaded runtime (for per-core comparisons);
    /// 0 = one per CPU.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

impl ServeArgs {
    pub fn config(&self) -> agentwire_load::serve::ServeConfig {
        let mut c =
            agentwire_load::serve::ServeConfig::new(self.root.clone(), self.cert_dir.clone());
        c.listen = self.listen;
        c.threads = self.threads;
        c.generate = self.generate;
        c
    }
}

fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    agentwire_load::parse_duration(s)
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// https:// URLs to request, in turn (all on the same server).
    #[arg(required = true)]
    pub urls: Vec<String>,
    /// Protocol: h3, h2 or http1.1.
    #[arg(long, default_value = "h3")]
    pub proto: agentwire_load::Proto,
    /// Client threads, each with its own single-threaded runtime (and, for h3, UDP socket).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Connections per thread.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Requests in flight per connection (http1.1: must be 1; use more --connections).
    #[arg(long, default_value_t = 1)]
    pub streams: usize,
    /// Requests per connection before it is replaced by a new one; 0 = unlimited, 1 = every
    /// request pays a handshake (a full one unless --resume).
    #[arg(long, default_value_t = 0)]
    pub max_requests_per_conn: u64,
    /// Keep the TLS session tickets servers send and resume sessions with them on new
    /// connections (the report counts full and resumed handshakes).
    #[arg(long)]
    pub resume: bool,
    /// h3 only: send the first requests of a new connection as 0-RTT data when a ticket
    /// allows it (implies --resume; the report counts accepted and rejected 0-RTT). Requests
    /// in rejected 0-RTT data are sent again, not counted as errors.
    #[arg(long = "0rtt")]
    pub zero_rtt: bool,
    /// Stop after this many requests (default: --duration 10s).
    #[arg(long, conflicts_with = "duration")]
    pub requests: Option<u64>,
    /// Stop after this long, e.g. 3s, 500ms, 1m (default: 10s).
    #[arg(long, value_parser = parse_duration_arg)]
    pub duration: Option<Duration>,
    /// Run this long before measuring (not counted, not part of --requests).
    #[arg(long, value_parser = parse_duration_arg, default_value = "0s")]
    pub warmup: Duration,
    /// Open loop: this many requests per second in all, latency timed from each request's
    /// intended send time. Without it: closed loop.
    #[arg(long)]
    pub rate: Option<f64>,
    /// CA certificate that signed the server's certificate (e.g. CERTS/ca.pem).
    #[arg(long, conflicts_with = "insecure")]
    pub ca: Option<PathBuf>,
    /// Accept any server certificate. For testing only.
    #[arg(long)]
    pub insecure: bool,
    /// TLS server name (default: the URL's host).
    #[arg(long)]
    pub server_name: Option<String>,
    /// Most time a connection may take (TCP + TLS, or the QUIC handshake).
    #[arg(long, value_parser = parse_duration_arg, default_value = "5s")]
    pub connect_timeout: Duration,
    /// Most time a request may take, body included.
    #[arg(long, value_parser = parse_duration_arg, default_value = "10s")]
    pub timeout: Duration,
    /// Per-stream flow-control window for h2 and h3, bytes.
    #[arg(long, default_value_t = 2 * 1024 * 1024)]
    pub stream_window: u32,
    /// Per-connection flow-control window for h2 and h3, bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    pub conn_window: u32,
    /// Print one JSON object (schema agentwire-load/2) on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// No progress bar (there is none anyway when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
}

impl LoadArgs {
    pub fn config(&self) -> Result<agentwire_load::load::LoadConfig> {
        use agentwire_load::load::{Limit, LoadConfig, Trust};
        let mut c = LoadConfig::new(self.urls.clone());
        c.proto = self.proto;
        c.threads = self.threads;
        c.connections = self.connections;
        c.streams = self.streams;
        c.max_requests_per_conn = self.max_requests_per_conn;
        c.resume = self.resume || self.zero_rtt;
        c.zero_rtt = self.zero_rtt;
        c.limit = match (self.requests, self.duration) {
            (Some(n), _) => Limit::Requests(n),
            (None, Some(d)) => Limit::Duration(d),
            (None, None) => Limit::Duration(Duration::from_secs(10)),
        };
        c.warmup = self.warmup;
        c.rate = self.rate;
        c.trust = match (&self.ca, self.insecure) {
            (Some(ca), _) => Trust::Ca(ca.clone()),
            (None, true) => Trust::Insecure,
            (None, false) => Trust::NoCa,
        };
        c.server_name.clone_from(&self.server_name);
        c.connect_timeout = self.connect_timeout;
        c.request_timeout = self.timeout;
        c.stream_window = self.stream_window;
        c.conn_window = self.conn_window;
        c.validate()?;
        Ok(c)
    }
}

fn parse_proto_arg(s: &str) -> Result<agentwire_load::Proto, String> {
    s.parse()
}

#[derive(Args, Debug)]
pub struct ScorecardArgs {
    /// Measure another server at https://HOST:PORT (it must serve the standard files, e.g.
    /// `agentwire serve --generate`). Default: start our own server in this process.
    #[arg(long)]
    pub url: Option<String>,
    /// With --url: CA certificate that signed the server's certificate.
    #[arg(long, requires = "url", conflicts_with = "insecure")]
    pub ca: Option<PathBuf>,
    /// With --url: accept any server certificate. For testing only.
    #[arg(long, requires = "url")]
    pub insecure: bool,
    /// Protocols, in column order.
    #[arg(long, value_delimiter = ',', value_parser = parse_proto_arg, default_value = "h3,h2,http1.1")]
    pub protos: Vec<agentwire_load::Proto>,
    /// Scaled-down counts (x10 downloads, 2 s windows, round 1 = 20,000 requests, round 2 =
    /// 40 requests): about two minutes for three protocols on two cores.
    #[arg(long)]
    pub quick: bool,
    /// Scale by name: full, quick or tiny (tiny is for tests: seconds, not meaningful).
    #[arg(long, hide = true, conflicts_with = "quick")]
    pub scale: Option<String>,
    /// Client threads for scenarios with several connections (spread evenly; default 1).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Process id of the server (on this machine): its CPU time per scenario is measured
    /// and shown as server CPU microseconds per request.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// The server's name in the report and in --compare tables (default: the URL, or
    /// "agentwire serve").
    #[arg(long)]
    pub label: Option<String>,
    /// Instead of measuring: put these scorecard.json files side by side (one table per
    /// protocol, a column per server, the first file's ratio to the best of the others) and
    /// write compare.md and charts into --out.
    #[arg(long, num_args = 1.., value_name = "SCORECARD_JSON", conflicts_with_all = ["url", "quick", "scale"])]
    pub compare: Vec<PathBuf>,
    /// Directory for scorecard.json, scorecard.md and the charts (or compare.md).
    #[arg(long, default_value = "scorecard-out")]
    pub out: PathBuf,
    /// Print the JSON (schema agentwire-scorecard/1) on stdout instead of the Markdown table.
    #[arg(long)]
    pub json: bool,
}

impl ScorecardArgs {
    pub fn config(&self) -> Result<agentwire_load::scorecard::ScorecardConfig> {
        use agentwire_load::load::Trust;
        use agentwire_load::scorecard::{Scale, ScorecardConfig, ScorecardTarget};
        let scale = match (&self.scale, self.quick) {
            (Some(name), _) => match Scale::by_name(name) {
                Some(s) => s,
                None => bail!("--scale must be full, quick or tiny, not {name:?}"),
            },
            (None, true) => Scale::quick(),
            (None, false) => Scale::full(),
        };
        let target = match &self.url {
            None => ScorecardTarget::InProcess,
            Some(url) => ScorecardTarget::Url {
                url: url.clone(),
                trust: match (&self.ca, self.insecure) {
                    (Some(ca), _) => Trust::Ca(ca.clone()),
                    (None, true) => Trust::Insecure,
                    (None, false) => Trust::NoCa,
                },
            },
        };
        let mut protos: Vec<agentwire_load::Proto> = Vec::new();
        for p in &self.protos {
            if !protos.contains(p) {
                protos.push(*p);
            }
        }
        if protos.is_empty() {
            bail!("--protos needs at least one of h3, h2, http1.1");
        }
        Ok(ScorecardConfig {
            target,
            protos,
            scale,
            threads: self.threads,
            server_pid: self.server_pid,
            label: self.label.clone(),
        })
    }
}

/// `--netsim-stage` / `--stage`: `bridge` or `nfqueue`.
pub fn parse_stage(s: &str) -> Result<agentwire_netsim::StageKind, String> {
    s.parse()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn hub(args: &[&str]) -> HubConfig {
        let fixed = ["agentwire", "hub", "--listen", "quic://127.0.0.1:0"];
        let cli = Cli::try_parse_from(fixed.iter().chain(args)).unwrap();
        match cli.command {
            Command::Hub(a) => a.hub_config().unwrap(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn no_datagrams_withdraws_only_that_capability() {
        let default = hub(&[]).policy.capabilities;
        assert!(default.contains(&"datagrams".to_owned()));
        assert!(default.contains(&agentwire_proto::counted_goodbye::CAPABILITY.to_owned()));
        let without = hub(&["--no-datagrams"]).policy.capabilities;
        assert!(!without.contains(&"datagrams".to_owned()));
        assert!(without.contains(&agentwire_proto::counted_goodbye::CAPABILITY.to_owned()));
    }
}
