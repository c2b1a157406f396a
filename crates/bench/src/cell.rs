//! What one benchmark cell is: the transport under test ([`BenchTransport`]) and the cell's whole configuration ([`CellConfig`]), as data.
//!
//! This module owns the cell's description and its parsing; it must not run anything.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use agentwire::transport::TransportKind;
use agentwire::{CongestionControl, StreamMapping};
use anyhow::Result;
use serde::Serialize;

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
    /// WebTransport sessions on the hub's QUIC port (`wt://`), as agents in web pages use;
    /// hub and echo workers on it too, frames mapped as on QUIC. Not in the presets yet.
    Wt,
}

impl BenchTransport {
    /// Every benchmarked transport, in the default order.
    pub const ALL: [BenchTransport; 6] = [
        BenchTransport::Quic,
        BenchTransport::QuicLanes,
        BenchTransport::H2,
        BenchTransport::Wss,
        BenchTransport::Unix,
        BenchTransport::Wt,
    ];

    /// The transports the presets run (every one but [`BenchTransport::Wt`], for now).
    pub const PRESET: [BenchTransport; 5] = [
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
            BenchTransport::Wt => "wt",
        }
    }

    /// The transport agents must end up connected over.
    pub fn kind(self) -> TransportKind {
        match self {
            BenchTransport::Quic | BenchTransport::QuicLanes => TransportKind::Quic,
            BenchTransport::H2 => TransportKind::Http2,
            BenchTransport::Wss => TransportKind::WebSocket,
            BenchTransport::Unix => TransportKind::Unix,
            BenchTransport::Wt => TransportKind::WebTransport,
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
    type Err = agentwire_proto::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "quic" | "per-message" => Ok(BenchTransport::Quic),
            "quic-lanes" | "lanes" => Ok(BenchTransport::QuicLanes),
            "h2" => Ok(BenchTransport::H2),
            "wss" => Ok(BenchTransport::Wss),
            "unix" => Ok(BenchTransport::Unix),
            "wt" => Ok(BenchTransport::Wt),
            other => Err(agentwire_proto::UnknownName::new(
                "bench transport",
                other,
                "quic, quic-lanes, h2, wss, unix or wt",
            )),
        }
    }
}

impl fmt::Display for BenchTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the agents of a cell do.
///
/// ```
/// use agentwire_bench::Pattern;
/// assert_eq!("fanout".parse::<Pattern>().unwrap(), Pattern::Fanout);
/// assert_eq!(Pattern::Gather.to_string(), "gather");
/// assert!("broadcast".parse::<Pattern>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Pattern {
    /// Request/reply: each client keeps `window` requests in flight to the echo workers.
    #[default]
    Request,
    /// One publisher → `agents` subscribers of one topic; the publisher keeps `window`
    /// messages not yet delivered to the first subscriber.
    Fanout,
    /// `agents` senders → one aggregator; each sender keeps `window` messages not yet
    /// delivered.
    Gather,
    /// `agents` pairs, each a sender streaming small messages to its receiver, `window` not
    /// yet delivered.
    Stream,
    /// `agents` producers → `agents` competing consumers of one work queue (the hub's, in
    /// memory), each consumer holding `window` tasks and acking every one; each producer keeps
    /// `window` tasks not yet delivered.
    Queue,
}

impl Pattern {
    /// Every pattern, in the order `--patterns` runs them.
    pub const ALL: [Pattern; 5] = [
        Pattern::Request,
        Pattern::Fanout,
        Pattern::Gather,
        Pattern::Stream,
        Pattern::Queue,
    ];

    /// The name used on the command line, in the table and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Request => "request",
            Pattern::Fanout => "fanout",
            Pattern::Gather => "gather",
            Pattern::Stream => "stream",
            Pattern::Queue => "queue",
        }
    }

    /// One-way messages (sent as events or tasks, counted where they are delivered), not
    /// requests.
    pub fn is_one_way(self) -> bool {
        matches!(
            self,
            Pattern::Fanout | Pattern::Gather | Pattern::Stream | Pattern::Queue
        )
    }
}

impl FromStr for Pattern {
    type Err = agentwire_proto::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Pattern::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                agentwire_proto::UnknownName::new(
                    "bench pattern",
                    s,
                    "request, fanout, gather, stream or queue",
                )
            })
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The parameters of one cell.
#[derive(Debug, Clone, Serialize)]
pub struct CellConfig {
    /// What the agents do.
    pub pattern: Pattern,
    /// The transport under test; the hub listens on nothing else.
    pub transport: BenchTransport,
    /// Client agents: requesters (request), subscribers (fanout), senders (gather), or
    /// sender-receiver pairs (stream).
    pub agents: usize,
    /// Echo worker agents answering them (`max(1, agents / 10)`; none for one-way patterns).
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
    /// Runtime threads of a hub run as its own process (its `--threads`).
    pub hub_threads: usize,
    /// Worker threads of the clients' (multi-threaded) runtime.
    pub client_threads: usize,
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

    /// Echo workers a cell of `pattern` needs: [`CellConfig::workers_for`] for requests,
    /// none for the one-way patterns.
    pub fn workers_for_pattern(pattern: Pattern, agents: usize) -> usize {
        if pattern.is_one_way() {
            0
        } else {
            CellConfig::workers_for(agents)
        }
    }
}

/// Why a `--network` value does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetworkError {
    /// Not `RTTms` or `RTTms+LOSS%`.
    #[error("network {0:?}: expected RTTms or RTTms+LOSS% (e.g. 50ms, 50ms+1%)")]
    Form(String),
    /// An odd RTT (each direction gets half) or one above 10 s.
    #[error("network {0:?}: RTT must be even and at most 10000 ms")]
    Rtt(String),
    /// Loss outside 0–50 %.
    #[error("network {0:?}: loss must be 0–50 %")]
    Loss(String),
}

/// The emulated network of a cell: added round-trip time and random loss per direction.
///
/// ```
/// use agentwire_bench::NetworkProfile;
/// let p = NetworkProfile::parse("50ms+1%").unwrap();
/// assert_eq!((p.rtt_ms, p.loss_percent), (50, 1.0));
/// assert_eq!(p.name, "50ms+1%");
/// assert_eq!(p.one_way_spec().as_deref(), Some("delay=25ms,loss=1%"));
/// assert!(NetworkProfile::parse("0ms").unwrap().is_loopback());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkProfile {
    /// Short name: `0ms`, `50ms`, `100ms`, `50ms+1%`.
    pub name: String,
    /// Added round-trip time, milliseconds (half of it in each direction).
    pub rtt_ms: u32,
    /// Random loss applied in each direction, percent.
    pub loss_percent: f64,
}

impl NetworkProfile {
    /// Plain loopback: nothing added.
    pub fn loopback() -> Self {
        NetworkProfile {
            name: "0ms".into(),
            rtt_ms: 0,
            loss_percent: 0.0,
        }
    }

    /// `RTTms` or `RTTms+LOSS%` (for example `50ms`, `50ms+1%`, `0ms`).
    pub fn parse(s: &str) -> Result<Self, NetworkError> {
        let bad = || NetworkError::Form(s.to_owned());
        let (rtt, loss) = match s.split_once('+') {
            Some((r, l)) => (r, Some(l)),
            None => (s, None),
        };
        let rtt_ms: u32 = rtt
            .strip_suffix("ms")
            .and_then(|v| v.parse().ok())
            .ok_or_else(bad)?;
        if rtt_ms > 10_000 || rtt_ms % 2 == 1 {
            return Err(NetworkError::Rtt(s.to_owned()));
        }
        let loss_percent = match loss {
            None => 0.0,
            Some(l) => {
                let v: f64 = l
                    .strip_suffix('%')
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(bad)?;
                if !(0.0..=50.0).contains(&v) {
                    return Err(NetworkError::Loss(s.to_owned()));
                }
                v
            }
        };
        Ok(NetworkProfile {
            name: s.to_owned(),
            rtt_ms,
            loss_percent,
        })
    }

    /// True when nothing is added (no emulator needed).
    pub fn is_loopback(&self) -> bool {
        self.rtt_ms == 0 && self.loss_percent == 0.0
    }

    /// The netsim spec for each direction, `None` for loopback.
    pub fn one_way_spec(&self) -> Option<String> {
        if self.is_loopback() {
            return None;
        }
        let mut spec = format!("delay={}ms", self.rtt_ms / 2);
        if self.loss_percent > 0.0 {
            spec.push_str(&format!(",loss={}%", self.loss_percent));
        }
        Some(spec)
    }
}

impl std::fmt::Display for NetworkProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}
