//! Transport settings (QUIC's, and WebSocket's liveness): the user-facing knobs (idle timeout, windows, congestion control,
//! socket buffers, MTU), their defaults and the reasons behind them.
//!
//! This module owns the knobs as data, so that the agent API and the CLI can carry them
//! whichever transports are built in; turning them into quinn's configuration and bound UDP
//! sockets is the QUIC transport's (`quic::config`, `quic::udp`, feature `quic`). It must not
//! open sockets or connections.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// A hub's connection window until the connection's hello is accepted: room for a hello (at
/// most `agentwire_proto::MAX_HELLO_FRAME`) and the control stream's first frames, so that a
/// peer that has not said who it is makes quinn buffer no more than this. Every connection is
/// accepted with it (the same transport parameters for all, as 0-RTT resumption needs); the
/// window is raised to its full size (or its share of a receive budget) once the hello is
/// accepted (`FrameSender::hello_accepted`).
pub const PRE_HELLO_WINDOW: u64 = 128 * 1024;

/// Congestion controller for QUIC connections.
///
/// ```
/// use agentwire_transport::CongestionControl;
/// assert_eq!("bbr".parse::<CongestionControl>().unwrap(), CongestionControl::Bbr);
/// assert_eq!("bbr3".parse::<CongestionControl>().unwrap(), CongestionControl::Bbr3);
/// assert!("vegas".parse::<CongestionControl>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CongestionControl {
    /// CUBIC (quinn's default).
    Cubic,
    /// NewReno.
    NewReno,
    /// BBR (quinn's experimental BBRv1).
    Bbr,
    /// agentwire's BBR-class controller after BBRv3 (crate `agentwire-cc`): model-based like
    /// BBR, shrugs off loss at the base RTT, backs off on loss with a queue. The
    /// default: it wins the bench's lossy cell and the simulated matrix (README, "Congestion
    /// control").
    #[default]
    Bbr3,
}

impl FromStr for CongestionControl {
    type Err = agentwire_proto::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "cubic" => Ok(CongestionControl::Cubic),
            "newreno" | "new-reno" | "reno" => Ok(CongestionControl::NewReno),
            "bbr" | "bbr1" => Ok(CongestionControl::Bbr),
            "bbr3" => Ok(CongestionControl::Bbr3),
            other => Err(agentwire_proto::UnknownName::new(
                "congestion control",
                other,
                "cubic, newreno, bbr or bbr3",
            )),
        }
    }
}

impl fmt::Display for CongestionControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CongestionControl::Cubic => "cubic",
            CongestionControl::NewReno => "newreno",
            CongestionControl::Bbr => "bbr",
            CongestionControl::Bbr3 => "bbr3",
        })
    }
}

/// How envelopes map onto QUIC streams.
///
/// ```
/// use agentwire_transport::StreamMapping;
/// assert_eq!("lanes".parse::<StreamMapping>().unwrap(), StreamMapping::Lanes);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamMapping {
    /// Every message on its own unidirectional stream: a lost packet stalls only its own
    /// message; no ordering between messages.
    #[default]
    PerMessage,
    /// One long-lived unidirectional stream per priority class, frames pipelined: cheaper per
    /// message, FIFO within a class, but a loss stalls the whole class.
    Lanes,
}

impl FromStr for StreamMapping {
    type Err = agentwire_proto::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "stream" | "per-message" | "streams" => Ok(StreamMapping::PerMessage),
            "lanes" | "lane" => Ok(StreamMapping::Lanes),
            other => Err(agentwire_proto::UnknownName::new(
                "stream mapping",
                other,
                "per-message or lanes",
            )),
        }
    }
}

impl fmt::Display for StreamMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StreamMapping::PerMessage => "per-message",
            StreamMapping::Lanes => "lanes",
        })
    }
}

/// Default time between two WebSocket Pings.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(10);

/// Default time without any message from the peer after which the connection is dead.
pub const DEFAULT_PONG_TIMEOUT: Duration = Duration::from_secs(30);

/// Liveness settings of a WebSocket connection, and the pages a hub lets upgrade.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsOptions {
    /// Time between two Pings this side sends; zero disables pings.
    pub ping_interval: Duration,
    /// The connection ends if no message at all (Pong included) arrives for this long.
    /// Must be comfortably larger than the peer's and our `ping_interval`.
    pub pong_timeout: Duration,
    /// Server side: the pages (by the upgrade's `Origin` header) that may upgrade; any other
    /// is answered 403. `None`: any page. A request without an `Origin` (not from a browser)
    /// always goes on to its hello's credentials.
    pub origins: Option<std::sync::Arc<crate::origin::OriginPolicy>>,
}

impl Default for WsOptions {
    fn default() -> Self {
        WsOptions {
            ping_interval: DEFAULT_PING_INTERVAL,
            pong_timeout: DEFAULT_PONG_TIMEOUT,
            origins: None,
        }
    }
}

/// Bytes a QUIC connection has read and not yet handed on, by default, before it takes no
/// new stream ([`QuicSettings::max_unread_bytes`]).
pub const DEFAULT_MAX_UNREAD_BYTES: usize = 16 * 1024 * 1024;

/// QUIC transport settings. Every field is applied to the connection or its socket.
///
/// ```
/// use agentwire_transport::QuicSettings;
/// let s = QuicSettings::default();
/// assert!(s.transport_config().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QuicSettings {
    /// Close the connection after this long without any packet.
    pub idle_timeout: Duration,
    /// Send a QUIC PING after this long without sending, to keep the path open.
    pub keep_alive: Option<Duration>,
    /// Unidirectional streams the peer may have open at once.
    pub max_concurrent_uni_streams: u32,
    /// Bidirectional streams the peer may have open at once.
    pub max_concurrent_bidi_streams: u32,
    /// Flow-control window per stream, bytes.
    pub stream_receive_window: u32,
    /// Flow-control window for the whole connection, bytes.
    pub receive_window: u64,
    /// Hub: the connection window, and the bytes of partly received frames, of a connection
    /// whose hello is not accepted yet (see `transport::quic::PRE_HELLO_WINDOW`, the default).
    pub pre_hello_window: u64,
    /// Bytes a connection may have read from its peer's streams and not yet handed on before
    /// it reads no further (see `transport::quic_backlog`); the peer's bytes then wait within
    /// its flow-control windows.
    pub max_unread_bytes: usize,
    /// Most unacknowledged bytes in flight from this side, bytes.
    pub send_window: u64,
    /// Congestion controller.
    pub congestion: CongestionControl,
    /// Requested UDP socket send buffer (SO_SNDBUF), bytes.
    pub socket_send_buffer: usize,
    /// Requested UDP socket receive buffer (SO_RCVBUF), bytes.
    pub socket_recv_buffer: usize,
    /// First packet size tried.
    pub initial_mtu: u16,
    /// Upper bound for path MTU discovery (loopback allows much more than Ethernet's 1500).
    pub max_mtu: u16,
    /// Datagram size of connections whose peer is on a loopback address: they start at it
    /// (no discovery round trips) and stay there. 0 treats loopback like any other path
    /// (`initial_mtu`, `max_mtu`). See [`QuicSettings::for_peer`].
    pub loopback_mtu: u16,
    /// Server endpoints (the hub): the stream bytes all connections of the endpoint may have
    /// in flight toward it together, about what its UDP socket holds. Each connection's window
    /// is this divided by the connections open, at least 16 KiB, at most `receive_window`
    /// (see [`crate::quic_budget`]). 0 (the default) gives every connection
    /// `receive_window`. A budget trades throughput for fewer socket drops and a lower tail:
    /// 16 MiB in the 1000 × 100 KiB cell had no drops and p99 1.0–1.1 s against 1.2–1.5 s, but
    /// 0.6x the msg/s (docs/benchmarks/2026-11-24-hub-decode).
    pub receive_budget: u64,
    /// Offer and accept QUIC datagrams (heartbeats ride them).
    pub datagrams: bool,
    /// Ack-eliciting packets the peer may receive before it must send an ACK (QUIC's ACK
    /// frequency extension; 1 is QUIC's every other packet). Out-of-order packets are still
    /// acknowledged at once.
    pub ack_eliciting_threshold: u32,
    /// The longest the peer may wait before acknowledging (QUIC's ACK frequency extension asks
    /// it; QUIC's own default is 25 ms). At most 16,383 ms (2^14 - 1, the largest QUIC can
    /// announce); the peer raises it to its own minimum (quinn's: 1 ms).
    pub max_ack_delay: Duration,
    /// Write one qlog trace per connection into this directory (see [`crate::qlog`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qlog_dir: Option<PathBuf>,
    /// Listeners (the hub): UDP sockets on the one address (`SO_REUSEPORT`), each with a quinn
    /// endpoint of its own. quinn drives an endpoint, and sends every new connection's first
    /// handshake flight, under one lock, so one endpoint keeps one core busy with that while
    /// the other waits; the kernel spreads peers over the sockets by address. A peer whose
    /// address changes (connection migration, a NAT rebinding) lands on another socket, whose
    /// endpoint does not know the connection: use more than 1 only where peers keep their
    /// address. 1 (the default) is one socket without `SO_REUSEPORT`.
    pub server_endpoints: usize,
    /// Listeners (the hub): once more than this many connection attempts arrive within one
    /// second, answer those from unvalidated addresses with a QUIC Retry (address validation:
    /// a spoofed source cannot complete it, and each attempt costs the sender a round trip
    /// before the hub does any cryptography). `Some(0)`: always. `None` (the default): never,
    /// keeping connects at one round trip.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_above_per_sec: Option<u32>,
}

/// Unidirectional streams an agent lets its hub have open at once
/// ([`QuicSettings::for_agent`]).
pub const AGENT_MAX_UNI_STREAMS: u32 = 1024;

impl QuicSettings {
    /// An agent's settings: the defaults, except that the agent lets its hub open
    /// [`AGENT_MAX_UNI_STREAMS`] unidirectional streams at once instead of 256. Everything the
    /// agent receives comes over that one connection, one stream per message, so 256 bounded
    /// what a hub could deliver to it to 256 messages a round trip: gathering from 10 agents
    /// with 64 in flight each over 50 ms + 1 %, 4,700 messages/s, against 11,700-12,100 with
    /// 1,024 (docs/benchmarks/notes/cc.md). The hub keeps granting each agent 256: quinn
    /// keeps state for each stream a peer has open, and a hub has many peers.
    pub fn for_agent() -> Self {
        QuicSettings {
            max_concurrent_uni_streams: AGENT_MAX_UNI_STREAMS,
            ..QuicSettings::default()
        }
    }
}

impl Default for QuicSettings {
    fn default() -> Self {
        QuicSettings {
            idle_timeout: Duration::from_secs(30),
            keep_alive: Some(Duration::from_secs(10)),
            // quinn-proto allocated state for every stream a peer may open up front: at 4096
            // per direction type a hub with 1000 agents held 677 MiB, at 256 it held 131 MiB
            // (`agentwire bench --cell quic:1000x1024 --quic-max-streams N`). Our vendored copy
            // builds it as streams are used (vendor/README.md). 256 concurrent messages or
            // requests per agent are plenty; more wait for stream credit.
            max_concurrent_uni_streams: 256,
            max_concurrent_bidi_streams: 256,
            stream_receive_window: 2 * 1024 * 1024,
            receive_window: 32 * 1024 * 1024,
            pre_hello_window: PRE_HELLO_WINDOW,
            max_unread_bytes: DEFAULT_MAX_UNREAD_BYTES,
            send_window: 32 * 1024 * 1024,
            congestion: CongestionControl::Bbr3,
            socket_send_buffer: 4 * 1024 * 1024,
            // A busy receiver on loopback overflowed 4 MiB (8 MiB granted) in the 100 × 10 KiB
            // cell with 16 KiB datagrams (726 drops a run); 16 MiB had none. The kernel charges
            // only what is queued.
            socket_recv_buffer: 16 * 1024 * 1024,
            initial_mtu: 1200,
            // Path MTU discovery probes up to this on paths other than loopback (Ethernet's
            // 1,500 less IP and UDP headers, with room for a tunnel header).
            max_mtu: 1452,
            // Loopback carries 64 KiB datagrams, like TCP's 64 KiB segments there. Starting at
            // 16 KiB cut the hub's CPU per 100 KiB message to about half in the 1000 × 100 KiB
            // cell (path MTU discovery rarely got there under load: each probe waits behind
            // the queue); 65,507 (IPv4's largest) then gave 0.49–1.23x WebSocket's msg/s
            // against 0.64–0.79x at 16 KiB, and a lower p99 at 100 × 10 KiB.
            // docs/benchmarks/2026-11-24-loopback-mtu.
            loopback_mtu: MAX_UDP_PAYLOAD_V4,
            receive_budget: 0,
            datagrams: true,
            // Every tenth packet, as TCP stacks' and Chromium's ACK decimation: an ACK is a
            // datagram of its own each way, and ACK handling was a fifth of the hub's QUIC CPU.
            // 100 x 10 KiB at 0 ms, 3 interleaved rounds: QUIC's share of WebSocket's msg/s
            // 0.59 / 0.58 / 0.73 at 1, 0.76 / 0.63 / 0.77 at 9; the 50 ms + 1 % cell unchanged
            // (docs/benchmarks/2026-11-23-quic-clean-link).
            ack_eliciting_threshold: 9,
            // A sparse flow (a message every few milliseconds) rarely reaches the threshold
            // above, so its ACKs waited for the timer: on a 50 ms path the acknowledged RTT
            // was up to 75 ms, which the controller read as a queue (a lossy round then counted
            // as congestion) and which delayed loss recovery. At 5 ms, 50 ms + 1 %, the stream
            // pattern went from 2,567 to 3,051 msg/s and p90 79 to 51 ms
            // (docs/benchmarks/notes/cc.md, 2026-11-28 ACK delay).
            max_ack_delay: Duration::from_millis(5),
            qlog_dir: None,
            server_endpoints: 1,
            retry_above_per_sec: None,
        }
    }
}

/// The socket buffer sizes the kernel granted (Linux reports double the usable size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct SocketBuffers {
    /// SO_SNDBUF as read back.
    pub send: usize,
    /// SO_RCVBUF as read back.
    pub recv: usize,
}

/// The most UDP payload one IPv4 datagram carries (65,535 less the IPv4 and UDP headers).
pub const MAX_UDP_PAYLOAD_V4: u16 = 65_507;

/// The most UDP payload one IPv6 datagram carries without jumbograms (65,535 less the UDP
/// header).
pub const MAX_UDP_PAYLOAD_V6: u16 = 65_527;

/// RFC 9002's initial congestion window for datagrams of `mtu` bytes: ten datagrams, at most
/// max(14,720, two datagrams).
///
/// ```
/// use agentwire_transport::settings::initial_window;
/// assert_eq!(initial_window(1200), 12_000);
/// assert_eq!(initial_window(1452), 14_520);
/// assert_eq!(initial_window(16_384), 32_768);
/// ```
pub fn initial_window(mtu: u16) -> u64 {
    let mtu = u64::from(mtu);
    (10 * mtu).min(14_720.max(2 * mtu))
}

/// QUIC settings quinn cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// The idle timeout is beyond what QUIC can announce (2^62 ms).
    #[error("idle timeout {0:?} is too large")]
    IdleTimeout(Duration),
    /// The connection receive window is beyond a QUIC variable-length integer.
    #[error("receive window {0} is too large")]
    ReceiveWindow(u64),
    /// The initial MTU is below QUIC's 1200 bytes, or above the largest.
    #[error("MTU settings invalid: initial {initial} (min 1200), max {max}")]
    Mtu {
        /// `initial_mtu`.
        initial: u16,
        /// `max_mtu`.
        max: u16,
    },
    /// The ACK delay asked of the peer is beyond what QUIC can announce (2^14 - 1 ms).
    #[error("max ACK delay {0:?} is above 16,383 ms")]
    MaxAckDelay(Duration),
    /// The largest UDP payload the endpoint would accept is out of quinn's range.
    #[error("MTU {0} is out of range (1200..=65527)")]
    Payload(u16),
}

impl QuicSettings {
    /// The largest datagram a connection of this endpoint may use: `max_mtu`, or
    /// `loopback_mtu` if larger.
    ///
    /// ```
    /// use agentwire_transport::settings::QuicSettings;
    /// let mut s = QuicSettings::default();
    /// s.max_mtu = 1452;
    /// s.loopback_mtu = 16_384;
    /// assert_eq!(s.largest_datagram(), 16_384);
    /// s.loopback_mtu = 0;
    /// assert_eq!(s.largest_datagram(), 1452);
    /// ```
    pub fn largest_datagram(&self) -> u16 {
        self.max_mtu.max(self.loopback_mtu)
    }

    /// The largest UDP payload an endpoint with these settings accepts: the
    /// [largest datagram](Self::largest_datagram), at least quinn's default of 1,472.
    ///
    /// ```
    /// use agentwire_transport::settings::QuicSettings;
    /// let mut s = QuicSettings::default();
    /// s.max_mtu = 1452;
    /// s.loopback_mtu = 0;
    /// assert_eq!(s.endpoint_payload(), 1472);
    /// s.loopback_mtu = 65_507;
    /// assert_eq!(s.endpoint_payload(), 65_507);
    /// ```
    pub fn endpoint_payload(&self) -> u16 {
        self.largest_datagram().max(1472)
    }

    /// The settings of one connection to or from `peer`: on a loopback address (IPv4, IPv6 or
    /// IPv4-mapped), datagrams start and stay at `loopback_mtu` when it is set; elsewhere
    /// these settings unchanged.
    ///
    /// ```
    /// use agentwire_transport::settings::QuicSettings;
    /// let s = QuicSettings::default();
    /// let local = s.for_peer("127.0.0.1".parse().unwrap());
    /// assert_eq!((local.initial_mtu, local.max_mtu), (s.loopback_mtu, s.loopback_mtu));
    /// let mapped = s.for_peer("::ffff:127.0.0.1".parse().unwrap());
    /// assert_eq!(mapped.initial_mtu, s.loopback_mtu);
    /// let mut big = QuicSettings::default();
    /// big.loopback_mtu = 65_527;
    /// assert_eq!(big.for_peer("127.0.0.1".parse().unwrap()).initial_mtu, 65_507);
    /// assert_eq!(big.for_peer("::1".parse().unwrap()).initial_mtu, 65_527);
    /// let remote = s.for_peer("192.0.2.7".parse().unwrap());
    /// assert_eq!((remote.initial_mtu, remote.max_mtu), (s.initial_mtu, s.max_mtu));
    /// ```
    pub fn for_peer(&self, peer: std::net::IpAddr) -> std::borrow::Cow<'_, QuicSettings> {
        let peer = peer.to_canonical();
        if self.loopback_mtu == 0 || !peer.is_loopback() {
            return std::borrow::Cow::Borrowed(self);
        }
        // An IPv4 datagram carries at most 65,507 bytes of UDP payload (IPv6: 65,527); a
        // larger size fails every send (`EMSGSIZE`) and the connection stalls.
        let size = match peer {
            std::net::IpAddr::V4(_) => self.loopback_mtu.min(MAX_UDP_PAYLOAD_V4),
            std::net::IpAddr::V6(_) => self.loopback_mtu,
        };
        let mut local = self.clone();
        local.initial_mtu = size;
        local.max_mtu = size;
        std::borrow::Cow::Owned(local)
    }
}
