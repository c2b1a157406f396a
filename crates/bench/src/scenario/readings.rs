//! CPU and socket-memory readings of the hub, the agents and the emulator during a cell's measured window.
//!
//! This module owns the readings; it must not judge them (see `assemble`).

use super::*;

/// CPU readings at one instant: this process, the emulator's threads in it, the hub process.
#[derive(Debug, Clone, Copy)]
pub(super) struct CpuSnapshot {
    pub(super) at: Instant,
    pub(super) process: f64,
    pub(super) emulator: f64,
    pub(super) hub: Option<f64>,
}

impl CpuSnapshot {
    pub(super) fn take(hub_pid: Option<u32>) -> Self {
        CpuSnapshot {
            at: Instant::now(),
            process: resources::self_cpu_seconds().unwrap_or(0.0),
            emulator: resources::self_threads_cpu_seconds(netpath::EMULATOR_THREAD_PREFIX),
            hub: hub_pid.and_then(resources::process_cpu_seconds),
        }
    }
}

/// The closed-loop window's CPU use: wall seconds and CPU seconds per side.
#[derive(Debug, Clone, Copy)]
pub(super) struct CpuWindow {
    pub(super) wall: f64,
    pub(super) agents: f64,
    pub(super) emulator: f64,
    pub(super) hub: Option<f64>,
    /// Peak RSS of the hub process from its start to the end of the window.
    pub(super) hub_peak_rss: Option<u64>,
    /// Peak RSS of this process from the cell's start to the end of the window.
    pub(super) agents_peak_rss: Option<u64>,
    /// The hub process's socket queues, sampled up to the end of the window.
    pub(super) hub_sockets: Option<SocketMemory>,
}

impl CpuWindow {
    pub(super) fn between(a: CpuSnapshot, b: CpuSnapshot) -> Self {
        let emulator = (b.emulator - a.emulator).max(0.0);
        CpuWindow {
            wall: b.at.duration_since(a.at).as_secs_f64(),
            agents: (b.process - a.process - emulator).max(0.0),
            emulator,
            hub: a.hub.zip(b.hub).map(|(x, y)| (y - x).max(0.0)),
            hub_peak_rss: None,
            agents_peak_rss: None,
            hub_sockets: None,
        }
    }
}

/// The kernel socket tables that hold the sockets of the hub at `url`: UDP for QUIC, TCP for
/// HTTP/2 and WebSocket (Unix sockets are not counted), of the address family the URL names
/// (both when it names a host; all four when it does not parse).
///
/// ```
/// use agentwire_bench::scenario::hub_socket_tables;
/// use agentwire_measure::resources::NetTable;
/// assert_eq!(hub_socket_tables("quic://127.0.0.1:4433"), [NetTable::Udp]);
/// assert_eq!(hub_socket_tables("wss://[::1]:4433/agentwire/v1"), [NetTable::Tcp6]);
/// assert_eq!(hub_socket_tables("h2://localhost:4433"), [NetTable::Tcp, NetTable::Tcp6]);
/// assert!(hub_socket_tables("unix:///tmp/hub.sock").is_empty());
/// ```
pub fn hub_socket_tables(url: &str) -> Vec<NetTable> {
    let Ok(url) = HubUrl::parse(url) else {
        return NetTable::ALL.to_vec();
    };
    let (v4, v6) = match url.transport {
        TransportKind::Quic | TransportKind::WebTransport => (NetTable::Udp, NetTable::Udp6),
        TransportKind::Http2 | TransportKind::WebSocket => (NetTable::Tcp, NetTable::Tcp6),
        // A hub URL never names the cluster link.
        TransportKind::Unix | TransportKind::Cluster => return Vec::new(),
    };
    match url.host().and_then(|h| h.parse::<std::net::IpAddr>().ok()) {
        Some(std::net::IpAddr::V4(_)) => vec![v4],
        Some(std::net::IpAddr::V6(_)) => vec![v6],
        None => vec![v4, v6],
    }
}

/// How often the hub's socket queues and RSS are sampled.
pub(super) const SOCKET_SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// The peaks of process `pid`'s socket queues, and of its RSS plus them, sampled every
/// [`SOCKET_SAMPLE_EVERY`] until `end`; `None` without a process or a readable `/proc`.
pub(super) async fn sample_socket_memory(
    pid: Option<u32>,
    tables: Vec<NetTable>,
    end: Instant,
) -> Option<SocketMemory> {
    let pid = pid?;
    let mut peaks: Option<SocketMemory> = None;
    let mut tick = tokio::time::interval(SOCKET_SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while Instant::now() < end {
        tick.tick().await;
        // A few thousand lines of /proc: read off the runtime's workers.
        let tables = tables.clone();
        let sample = tokio::task::spawn_blocking(move || {
            resources::socket_queue_bytes_in(pid, &tables).zip(resources::rss_bytes(pid))
        })
        .await;
        let Ok(Some((queued, rss))) = sample else {
            continue;
        };
        let p = peaks.get_or_insert_with(SocketMemory::default);
        p.peak_queued_bytes = p.peak_queued_bytes.max(queued);
        p.peak_rss_plus_queued_bytes = p.peak_rss_plus_queued_bytes.max(rss + queued);
        p.samples += 1;
    }
    peaks
}
