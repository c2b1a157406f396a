//! What a benchmark cell records: the serialisable result types of one run of one cell
//! ([`CellResult`]) and their parts (network path, connection establishment, open-loop
//! latency, per-priority latency, resources).
//!
//! These are plain data written into the JSON report (schema [`crate::SCHEMA`]) and read by
//! the report renderer. This module must not measure, time or print anything.

use serde::Serialize;

use crate::cell::CellConfig;
use crate::stats::LatencySummary;

/// How a cell's traffic crossed the network.
#[derive(Debug, Clone, Serialize)]
pub struct NetworkPath {
    /// `loopback` (no emulator), `packet` (agentwire netsim packet mode: two network
    /// namespaces, veth, NFQUEUE stage, TCP and UDP impaired alike).
    pub mode: &'static str,
    /// The netsim spec applied in each direction, if any.
    pub spec: Option<String>,
    /// The address the hub listened on.
    pub hub_url: String,
    /// Counters of the emulator, when one was used.
    pub emulator: Option<EmulatorRecord>,
}

/// What the emulator saw during a cell (both directions added up).
#[derive(Debug, Clone, Default, Serialize)]
pub struct EmulatorRecord {
    /// Packets handled.
    pub packets: u64,
    /// Packets dropped by the loss model.
    pub dropped_loss: u64,
    /// Packets dropped because the rate-limit queue was full.
    pub dropped_queue: u64,
    /// Packets the kernel dropped before the emulator read them (its NFQUEUE or the
    /// emulator's socket full): loss outside the loss model, so a cell with any is flagged.
    pub dropped_kernel: u64,
    /// Highest number of packets held at once in one direction.
    pub max_held: usize,
    /// Verdicts the kernel refused.
    pub verdict_errors: u64,
    /// CPU seconds the emulator's threads used during the cell.
    pub cpu_seconds: f64,
    /// TCP congestion control in effect in the client and server namespaces (read back).
    pub tcp_cc: Option<String>,
    /// The packet stage that ran (`bridge` or `nfqueue`).
    pub stage: String,
    /// Frames over the MTU the bridge stage dropped (an offload left on; 0 on NFQUEUE).
    pub oversize: u64,
}

/// Connection establishment of all agents of a cell.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectRecord {
    /// Agents connected (clients and workers).
    pub agents: usize,
    /// From the first connect starting to every agent connected, milliseconds.
    pub all_connected_ms: f64,
    /// Each client's own time from that common start to its welcome: the median,
    /// milliseconds (steadier than the last one's, `all_connected_ms`).
    pub p50_ms: f64,
    /// The same, 99th percentile.
    pub p99_ms: f64,
    /// Agents divided by that time: full handshakes per second.
    pub handshakes_per_sec: f64,
    /// QUIC only: the clients closed and connected again with 0-RTT resumption.
    pub resumed: Option<ResumedConnect>,
}

/// Reconnecting the clients of a QUIC cell with 0-RTT.
#[derive(Debug, Clone, Serialize)]
pub struct ResumedConnect {
    /// Clients reconnected.
    pub agents: usize,
    /// From the first reconnect starting to all reconnected, milliseconds.
    pub all_connected_ms: f64,
    /// Reconnects per second.
    pub handshakes_per_sec: f64,
    /// Connections whose 0-RTT data the hub accepted.
    pub zero_rtt_accepted: u64,
    /// Connections whose 0-RTT data the hub rejected (they fell back to 1-RTT).
    pub zero_rtt_rejected: u64,
}

/// The open-loop phase: requests at a fixed total arrival rate, each timed from its
/// *intended* send time, so a stall delays every later request's latency instead of hiding.
#[derive(Debug, Clone, Serialize)]
pub struct OpenLoopRecord {
    /// Target arrival rate over all clients, requests per second.
    pub rate_per_sec: f64,
    /// How the rate was chosen (e.g. `50% of this run's closed-loop rate`).
    pub rate_basis: String,
    /// Length of the phase, milliseconds.
    pub duration_ms: u64,
    /// Requests scheduled in the phase.
    pub scheduled: u64,
    /// Requests answered with the right body.
    pub answered: u64,
    /// Requests that failed or were abandoned at the drain deadline.
    pub errors: u64,
    /// Requests sent later than their intended time by more than 5 ms (the generator fell
    /// behind); their latency still counts from the intended time.
    pub late_sends: u64,
    /// Latency from intended send time to answer, microseconds.
    pub latency: LatencySummary,
    /// The raw histogram, `(value_us, count)` pairs.
    pub histogram: Vec<(u64, u64)>,
}

/// Latency of one priority class in the priority probe.
#[derive(Debug, Clone, Serialize)]
pub struct ClassLatency {
    /// `critical`, `high`, `medium` or `low`.
    pub class: &'static str,
    /// Probe requests of this class sent.
    pub sent: u64,
    /// Of those, answered.
    pub answered: u64,
    /// Round trip of answered probe requests, microseconds.
    pub latency: LatencySummary,
}

/// The multiplexing / head-of-line probe: one extra client keeps bulk low-priority requests
/// in flight while sending small requests of every priority class at a fixed rate on the same
/// connection. Under loss, a transport with head-of-line blocking delays the small ones.
#[derive(Debug, Clone, Serialize)]
pub struct PriorityRecord {
    /// Body size of the bulk requests, bytes.
    pub bulk_size: usize,
    /// Bulk requests kept in flight.
    pub bulk_window: usize,
    /// Bulk requests answered during the probe.
    pub bulk_answered: u64,
    /// Body size of the small probe requests, bytes.
    pub probe_size: usize,
    /// Small requests per second per class.
    pub probe_rate_per_class: f64,
    /// One entry per class, critical first.
    pub classes: Vec<ClassLatency>,
}

/// CPU and memory of one process (or one side) over a measured phase.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ProcessUsage {
    /// User plus system CPU seconds used during the phase.
    pub cpu_seconds: f64,
    /// CPU seconds divided by wall seconds (1.0 = one core busy).
    pub cores_busy: f64,
    /// Peak resident set size from the start of the cell (for the hub: of its process) to the
    /// end of the closed-loop window, bytes; later phases (open loop, probe, 0-RTT
    /// reconnects) are not included.
    pub peak_rss_bytes: u64,
}

/// Resources of a cell's run, hub and agent side measured separately.
#[derive(Debug, Clone, Serialize)]
pub struct Resources {
    /// How the hub ran: `process` (its own `agentwire hub` process) or `in-process`
    /// (inside the bench process; its usage is then part of the agent side).
    pub hub_mode: &'static str,
    /// The hub process, when it ran as one.
    pub hub: Option<ProcessUsage>,
    /// The bench process (all clients and workers), without the emulator's threads.
    pub agents: ProcessUsage,
    /// Hub CPU per answered request, microseconds.
    pub hub_cpu_us_per_response: Option<f64>,
    /// Agent-side CPU per answered request, microseconds.
    pub agents_cpu_us_per_response: f64,
    /// Hub peak RSS divided by agents connected, bytes.
    pub hub_rss_bytes_per_agent: Option<f64>,
    /// The hub's memory outside its RSS: the kernel's queues of its sockets, sampled from the
    /// start of the load (every agent connected) to the end of the closed-loop window (hub as
    /// its own process only).
    pub hub_sockets: Option<SocketMemory>,
}

/// Memory the kernel holds for a process's TCP and UDP sockets (data unread, unacknowledged
/// or unsent; see `agentwire_measure::resources::socket_queue_bytes`), sampled. A TCP hub's
/// backlog sits there, where a QUIC hub holds it in its own heap, so the two compare whole
/// only with it added to the RSS.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SocketMemory {
    /// Largest sum of the socket queues seen, bytes.
    pub peak_queued_bytes: u64,
    /// Largest RSS plus socket queues seen in one sample, bytes.
    pub peak_rss_plus_queued_bytes: u64,
    /// Samples taken.
    pub samples: u32,
}

/// What one run of one cell measured. Only requests *started* inside the measured window
/// count; each of them ends as exactly one of answered or error (`sent == answered + errors`).
#[derive(Debug, Clone, Serialize)]
pub struct CellResult {
    /// The cell's parameters.
    pub config: CellConfig,
    /// The URL agents connected to (the hub's real port, or the Unix socket path, which no
    /// longer exists once the cell is done).
    pub hub_url: String,
    /// How traffic crossed the network.
    pub network: NetworkPath,
    /// From the first connect starting to every agent connected, milliseconds.
    pub connect_ms: f64,
    /// Connection establishment in detail.
    pub connect: ConnectRecord,
    /// Requests started in the measured (closed-loop) window.
    pub sent: u64,
    /// Of those, answered with the right body.
    pub answered: u64,
    /// Of those, failed: timeouts, remote errors, disconnects, wrong bodies, or still
    /// unresolved when the drain deadline passed.
    pub errors: u64,
    /// Of the errors, request timeouts.
    pub timeouts: u64,
    /// Of the errors, requests abandoned at the drain deadline.
    pub abandoned: u64,
    /// Whether `sent == answered + errors` and the histogram holds `answered` values (and
    /// the same for the open-loop phase).
    pub consistent: bool,
    /// Responses per second over the measured window (closed loop).
    pub responses_per_sec: f64,
    /// Payload throughput (request plus response bodies), megabits per second.
    pub payload_mbit_per_sec: f64,
    /// Closed-loop round-trip latency of answered requests, microseconds.
    pub latency: LatencySummary,
    /// The raw closed-loop histogram: `(value_us, count)` for every recorded bucket.
    pub histogram: Vec<(u64, u64)>,
    /// The open-loop phase, if the cell has one.
    pub open_loop: Option<OpenLoopRecord>,
    /// The priority / head-of-line probe, if the cell has one.
    pub priority: Option<PriorityRecord>,
    /// CPU and memory, hub and agents separately (closed-loop window).
    pub resources: Resources,
    /// Why this run's numbers may describe the load generator or the emulator rather than
    /// the system under test, if they may.
    pub bottleneck: Option<String>,
    /// Up to five distinct error messages seen.
    pub error_samples: Vec<String>,
    /// Loopback cells: datagrams the kernel dropped for full UDP receive buffers during the
    /// run (connect to stop; counted for the whole host namespace, so other UDP traffic on the
    /// machine counts too). Absent for cells over an emulated path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_rcvbuf_errors: Option<u64>,
}
