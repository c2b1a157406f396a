//! The flags of `agentwire hub`: listeners, TLS, limits, queues, cluster, and the QUIC settings
//! other subcommands share (`QuicArgs`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agentwire::hub::{DuplicatePolicy, HubConfig};
use agentwire::{Codec, CongestionControl, QuicSettings, StreamMapping};
use anyhow::{bail, Context, Result};
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct QuicArgs {
    /// QUIC idle timeout in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub idle_timeout_ms: u64,
    /// QUIC keep-alive interval in milliseconds (0 = off).
    #[arg(long, default_value_t = 10_000)]
    pub keep_alive_ms: u64,
    /// Streams the peer may have open at once, for each type (unidirectional and
    /// bidirectional); more wait for credit. quinn keeps state for each open stream, so this
    /// bounds the memory per connection. Default: 256 of each; an agent lets its hub open
    /// 1,024 unidirectional streams, as everything it receives comes over that connection.
    #[arg(long, value_name = "N")]
    pub max_streams: Option<u32>,
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
    #[arg(long, default_value_t = agentwire::transport::settings::DEFAULT_MAX_UNREAD_BYTES,
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
    /// The longest, in milliseconds, the peer may wait before acknowledging (QUIC ACK
    /// frequency extension; QUIC's own default is 25).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=16_383))]
    pub max_ack_delay_ms: u64,
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
    /// The settings these flags give, with `defaults`' stream limits where `--max-streams`
    /// is not given (a hub's or an agent's).
    pub fn settings(&self, defaults: &QuicSettings) -> QuicSettings {
        QuicSettings {
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            keep_alive: (self.keep_alive_ms > 0).then(|| Duration::from_millis(self.keep_alive_ms)),
            max_concurrent_uni_streams: self
                .max_streams
                .unwrap_or(defaults.max_concurrent_uni_streams),
            max_concurrent_bidi_streams: self
                .max_streams
                .unwrap_or(defaults.max_concurrent_bidi_streams),
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
            max_ack_delay: Duration::from_millis(self.max_ack_delay_ms),
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
    /// Take WebTransport sessions (agents in web pages) on every quic:// listener: ALPN h3
    /// beside agentwire/1 on the same UDP port, the session at /agentwire. Browsers are served
    /// CERT_DIR/webtransport.pem when it exists (`agentwire cert --webtransport`: a page
    /// accepts it by its SHA-256, which the hub prints); SIGHUP or a reload takes a new one.
    /// Not with --client-ca (pages show no client certificate).
    #[arg(long, conflicts_with = "client_ca")]
    pub webtransport: bool,
    /// A page allowed to reach the hub over WebTransport or WebSocket, as an origin pattern:
    /// https://app.example.com, https://*.example.com, http://localhost:* (`*` alone: any
    /// page); repeatable. A session or upgrade from any other page is answered 403; one that
    /// names no page (not from a browser) goes on to its hello's credentials. With neither
    /// this nor --webtransport, any page may upgrade to WebSocket.
    #[arg(long = "allow-origin")]
    pub allow_origin: Vec<String>,
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
    /// Runtime worker threads: 0 (the default) = one per CPU; 1 = a single-threaded runtime,
    /// for a hub that shares a small machine with its agents (on two cores with the agents
    /// beside it, one thread spent less CPU per message than two: docs/book/guide-hub.md).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1024))]
    pub threads: u64,
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

pub(crate) fn parse_at_least_64k(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 65_536 => Ok(n),
        Ok(n) => Err(format!("{n} is below 65536")),
        Err(e) => Err(format!("{s:?} is not a number of bytes: {e}")),
    }
}

pub(crate) fn parse_octal(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .map_err(|_| format!("{s:?} is not an octal mode"))
}

pub(crate) fn parse_codecs(names: &[String]) -> Result<Vec<Codec>> {
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
        config.quic = self.quic.settings(&QuicSettings::default());
        config.stream_mapping = self.quic.mapping;
        config.unix_socket_mode = self.socket_mode;
        if let Some(path) = &self.access_file {
            let policy = agentwire::hub::AccessPolicy::from_file(path)?;
            config.access = Some(std::sync::Arc::new(policy));
        }
        let origins = agentwire::transport::origin::OriginPolicy::new(self.allow_origin.clone())?;
        // The pages a hub lets in over WebTransport may not take the WebSocket fallback
        // around the policy either; a hub naming no page in either way lets any page upgrade,
        // as before.
        if self.webtransport || !self.allow_origin.is_empty() {
            config.websocket.origins = Some(std::sync::Arc::new(origins.clone()));
        }
        if self.webtransport {
            config.webtransport = Some(agentwire::hub::WebTransportConfig {
                origins,
                // The browsers' certificate is loaded with the hub's own (`hub_cmd`).
                identity: None,
            });
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
pub(crate) fn read_token_file(path: &std::path::Path) -> Result<String> {
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
