//! Socket relay mode of `agentwire netsim`: the unprivileged fallback that puts the sans-IO
//! impairment model ([`Link`]) between real sockets.
//!
//! This module owns the tokio I/O adapter: a [`UdpRelay`] that forwards datagrams to a target
//! through a forward [`Link`] and sends the target's replies back through a reverse [`Link`],
//! and a [`TcpRelay`] that copies byte streams both ways with delay, jitter (never reordering)
//! and rate applied per read chunk. It reads the clock (a monotonic origin taken at relay
//! start) and arms timers; the impairment decisions stay in [`Link`]. Departures are timed
//! to well under a millisecond: the last 3 ms before a deadline are waited out by one shared,
//! process-wide `netsim-timer` thread rather than tokio's 1 ms timer wheel (it idles when
//! nothing waits and belongs to no relay).
//!
//! It must not make impairment decisions of its own (no extra randomness, no delay arithmetic
//! beyond turning [`Time`] into a deadline), must not outlive its handle (dropping a
//! [`UdpRelay`] or [`TcpRelay`] aborts every task it started), and must not panic on anything
//! received from the network.
//!
//! ## TCP relays cannot drop bytes
//!
//! A TCP relay sits between two TCP connections: the bytes it has read were already
//! acknowledged to the sender, so it cannot lose, reorder or duplicate them without corrupting
//! the stream. [`TcpRelay`] therefore ignores `loss`, `ge` (Gilbert–Elliott), `reorder` and
//! `dup` (logging one warning per relay when they are set) and forces
//! [`jitter_reorders`](Impairment::jitter_reorders) off, so jitter never reorders bytes. Delay,
//! jitter and rate apply to each chunk read from a socket; each connection direction has its
//! own [`Link`] (the rate limit is per connection and direction). Use the UDP relay (QUIC) or a
//! privileged mode to study loss.

use agentwire_sync::LockExt;
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{Notify, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::{Impairment, Link, Path, Stats, Time};

/// At most this many UDP clients (distinct source addresses) have an upstream socket at once;
/// a new client beyond it evicts the least recently active one.
pub const MAX_UDP_CLIENTS: usize = 1024;
/// A UDP client with no traffic either way for this long loses its upstream socket.
pub const UDP_CLIENT_IDLE: Duration = Duration::from_secs(60);
/// At most this many datagrams are in flight in one direction of a [`UdpRelay`]; beyond it
/// datagrams are dropped and counted in [`RelayStats::overflow_drops`].
pub const MAX_UDP_IN_FLIGHT: u64 = 65_536;
/// At most this many concurrent TCP connections per [`TcpRelay`]; more are closed at once.
pub const MAX_TCP_CONNECTIONS: usize = 1024;
/// Bytes read but not yet written, per TCP connection direction: the relay stops reading
/// (back-pressuring the sender) when this many are in flight.
pub const TCP_WINDOW_BYTES: usize = 4 * 1024 * 1024;

const UDP_BUF: usize = 65_536;
const TCP_CHUNK: usize = 64 * 1024;
const TCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Counters of a relay: the two directions' [`Link`] [`Stats`] (summed over connections for
/// TCP) and the datagrams the relay itself had to drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct RelayStats {
    /// Client → target.
    pub forward: Stats,
    /// Target → client.
    pub reverse: Stats,
    /// Datagrams dropped by the relay (not the model) because [`MAX_UDP_IN_FLIGHT`] was
    /// reached; always 0 for TCP.
    pub overflow_drops: u64,
}

/// Adds `b` to `a` (counters summed, `max_queue_bytes` maximised).
fn add_stats(a: &mut Stats, b: &Stats) {
    a.packets_in += b.packets_in;
    a.bytes_in += b.bytes_in;
    a.packets_out += b.packets_out;
    a.bytes_out += b.bytes_out;
    a.dropped_loss += b.dropped_loss;
    a.dropped_queue_full += b.dropped_queue_full;
    a.bytes_dropped += b.bytes_dropped;
    a.duplicated += b.duplicated;
    a.reordered += b.reordered;
    a.in_flight += b.in_flight;
    a.queue_bytes += b.queue_bytes;
    a.max_queue_bytes = a.max_queue_bytes.max(b.max_queue_bytes);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock_or_recover()
}

fn invalid(e: crate::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

/// Aborts the task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The relay's monotonic clock: [`Time`] since the relay started.
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn now(&self) -> Time {
        self.0.elapsed()
    }
    fn deadline(&self, t: Time) -> Instant {
        self.0 + t
    }
}

/// One direction: the model plus the notification that a packet was pushed.
struct Direction<P> {
    link: Mutex<Link<P>>,
    pushed: Notify,
}

impl<P> Direction<P> {
    fn new(link: Link<P>) -> Arc<Self> {
        Arc::new(Self {
            link: Mutex::new(link),
            pushed: Notify::new(),
        })
    }

    fn stats(&self) -> Stats {
        lock(&self.link).stats()
    }

    /// Takes every packet due now; returns them and the next deadline.
    fn due(&self, clock: Clock) -> (Vec<P>, Option<Time>) {
        let mut link = lock(&self.link);
        let now = clock.now();
        let mut out = Vec::new();
        while let Some(p) = link.poll_departure(now) {
            out.push(p);
        }
        (out, link.next_departure())
    }

    /// Waits until `next` (if any) or until a packet is pushed; whichever comes first.
    async fn wait(&self, clock: Clock, next: Option<Time>, cap: Option<Duration>) {
        let notified = self.pushed.notified();
        let deadline = match (next.map(|t| clock.deadline(t)), cap) {
            (Some(d), Some(c)) => Some(d.min(Instant::now() + c)),
            (Some(d), None) => Some(d),
            (None, Some(c)) => Some(Instant::now() + c),
            (None, None) => None,
        };
        match deadline {
            Some(d) => {
                tokio::select! {
                    _ = precise_sleep_until(d) => {}
                    _ = notified => {}
                }
            }
            None => notified.await,
        }
    }
}

/// Sleeps until `deadline` with sub-millisecond precision.
///
/// tokio's timer rounds every deadline up to its 1 ms tick and the driver's `epoll_wait`
/// timeout is in whole milliseconds too, so a plain `sleep_until` lands up to ~2 ms late: too
/// coarse for an emulated delay (`agentwire netsim check` bounds the added RTT to ±1 ms).
/// Deadlines further than [`COARSE_MARGIN`] away first sleep on tokio's timer up to that
/// margin; the rest is handed to one process-wide timer thread that waits with
/// `recv_timeout` (a high-resolution futex wait) and completes a oneshot. Works on any tokio
/// runtime flavour and never blocks a worker.
async fn precise_sleep_until(deadline: Instant) {
    if let Some(coarse) = deadline.checked_sub(COARSE_MARGIN) {
        if coarse > Instant::now() {
            tokio::time::sleep_until(coarse).await;
        }
    }
    if deadline <= Instant::now() {
        return;
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    if precise_timer().send((deadline.into_std(), tx)).is_err() {
        tokio::time::sleep_until(deadline).await;
        return;
    }
    let _ = rx.await;
}

/// How far ahead of a deadline [`precise_sleep_until`] leaves tokio's millisecond timer.
const COARSE_MARGIN: Duration = Duration::from_millis(3);

type TimerRequest = (std::time::Instant, tokio::sync::oneshot::Sender<()>);

/// The process-wide precise timer thread (started on first use).
fn precise_timer() -> &'static std::sync::mpsc::Sender<TimerRequest> {
    static TIMER: std::sync::OnceLock<std::sync::mpsc::Sender<TimerRequest>> =
        std::sync::OnceLock::new();
    TIMER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<TimerRequest>();
        let spawned = std::thread::Builder::new()
            .name("netsim-timer".into())
            .spawn(move || precise_timer_thread(rx));
        if let Err(e) = spawned {
            tracing::warn!("netsim: no precise timer thread ({e}); using tokio's timer");
        }
        tx
    })
}

fn precise_timer_thread(rx: std::sync::mpsc::Receiver<TimerRequest>) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use std::sync::mpsc::RecvTimeoutError;

    // Min-heap on (deadline, sequence); senders live in a side table keyed by sequence.
    let mut heap: BinaryHeap<Reverse<(std::time::Instant, u64)>> = BinaryHeap::new();
    let mut waiting: HashMap<u64, tokio::sync::oneshot::Sender<()>> = HashMap::new();
    let mut seq = 0u64;
    loop {
        let now = std::time::Instant::now();
        while let Some(Reverse((d, id))) = heap.peek().copied() {
            if d > now {
                break;
            }
            heap.pop();
            if let Some(tx) = waiting.remove(&id) {
                let _ = tx.send(());
            }
        }
        let msg = match heap.peek() {
            Some(Reverse((d, _))) => rx.recv_timeout(d.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match msg {
            Ok((d, tx)) => {
                seq += 1;
                heap.push(Reverse((d, seq)));
                waiting.insert(seq, tx);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// UDP
// ---------------------------------------------------------------------------------------------

/// A datagram in flight: the client it belongs to and its payload.
type Datagram = (SocketAddr, Vec<u8>);

struct UdpShared {
    forward: Arc<Direction<Datagram>>,
    reverse: Arc<Direction<Datagram>>,
    overflow_drops: AtomicU64,
}

impl UdpShared {
    fn push(&self, dir: &Direction<Datagram>, clock: Clock, d: Datagram) {
        {
            let mut link = lock(&dir.link);
            if link.stats().in_flight >= MAX_UDP_IN_FLIGHT {
                self.overflow_drops.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let size = d.1.len();
            link.push(clock.now(), d, size);
        }
        dir.pushed.notify_one();
    }
}

/// A UDP relay: datagrams from any client to the relay's address go to the target through the
/// forward [`Link`]; the target's replies go back to that client through the reverse [`Link`].
///
/// Each client address gets its own upstream socket (at most [`MAX_UDP_CLIENTS`], expiring
/// after [`UDP_CLIENT_IDLE`] without traffic), so the target sees one peer per client.
/// Dropping the relay stops it.
pub struct UdpRelay {
    local_addr: SocketAddr,
    shared: Arc<UdpShared>,
    _tasks: Vec<AbortOnDrop>,
}

impl std::fmt::Debug for UdpRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpRelay")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

struct UdpClient {
    socket: Arc<UdpSocket>,
    last_active: Arc<AtomicU64>,
    _task: AbortOnDrop,
}

fn unspecified_for(target: SocketAddr) -> SocketAddr {
    match target {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

fn millis(t: Time) -> u64 {
    u64::try_from(t.as_millis()).unwrap_or(u64::MAX)
}

impl UdpRelay {
    /// Binds `listen` and starts relaying to `target` with `forward` (client → target) and
    /// `reverse` (target → client) impairments; `seed` seeds both directions as in
    /// [`Path::new`]. Must be called within a tokio runtime.
    pub async fn start(
        listen: SocketAddr,
        target: SocketAddr,
        forward: Impairment,
        reverse: Impairment,
        seed: u64,
    ) -> io::Result<UdpRelay> {
        let path: Path<Datagram> = Path::new(forward, reverse, seed).map_err(invalid)?;
        let socket = Arc::new(UdpSocket::bind(listen).await?);
        let local_addr = socket.local_addr()?;
        let clock = Clock(Instant::now());
        let shared = Arc::new(UdpShared {
            forward: Direction::new(path.forward),
            reverse: Direction::new(path.reverse),
            overflow_drops: AtomicU64::new(0),
        });
        let tasks = vec![
            AbortOnDrop(tokio::spawn(udp_client_recv(
                socket.clone(),
                shared.clone(),
                clock,
            ))),
            AbortOnDrop(tokio::spawn(udp_forward_timer(
                target,
                shared.clone(),
                clock,
            ))),
            AbortOnDrop(tokio::spawn(udp_reverse_timer(
                socket,
                shared.clone(),
                clock,
            ))),
        ];
        tracing::debug!(%local_addr, %target, "netsim UDP relay started");
        Ok(UdpRelay {
            local_addr,
            shared,
            _tasks: tasks,
        })
    }

    /// The address clients send to (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Counters of both directions so far.
    pub fn stats(&self) -> RelayStats {
        RelayStats {
            forward: self.shared.forward.stats(),
            reverse: self.shared.reverse.stats(),
            overflow_drops: self.shared.overflow_drops.load(Ordering::Relaxed),
        }
    }
}

/// Reads datagrams from clients into the forward link.
async fn udp_client_recv(socket: Arc<UdpSocket>, shared: Arc<UdpShared>, clock: Clock) {
    let mut buf = vec![0u8; UDP_BUF];
    loop {
        match socket.recv_from(&mut buf).await {
            Ok((n, from)) => shared.push(&shared.forward, clock, (from, buf[..n].to_vec())),
            Err(e) => {
                // E.g. ICMP errors surfaced on some platforms: not fatal for a UDP relay.
                tracing::debug!("netsim UDP relay: receive error: {e}");
                tokio::task::yield_now().await;
            }
        }
    }
}

/// Sends due forward datagrams to the target, each through its client's upstream socket, and
/// expires idle clients.
async fn udp_forward_timer(target: SocketAddr, shared: Arc<UdpShared>, clock: Clock) {
    let mut clients: HashMap<SocketAddr, UdpClient> = HashMap::new();
    let mut last_sweep = clock.now();
    loop {
        let (due, next) = shared.forward.due(clock);
        let now = clock.now();
        for (client, data) in due {
            let Some(c) = upstream_for(&mut clients, client, target, &shared, clock) else {
                continue;
            };
            c.last_active.store(millis(now), Ordering::Relaxed);
            // UDP sends complete at once (or fail); awaiting only waits for socket readiness.
            if let Err(e) = c.socket.send(&data).await {
                tracing::debug!("netsim UDP relay: send to {target} failed: {e}");
            }
        }
        if now.saturating_sub(last_sweep) >= SWEEP_INTERVAL {
            last_sweep = now;
            let idle = millis(UDP_CLIENT_IDLE);
            clients.retain(|_, c| {
                millis(now).saturating_sub(c.last_active.load(Ordering::Relaxed)) < idle
            });
        }
        let cap = (!clients.is_empty()).then_some(SWEEP_INTERVAL);
        shared.forward.wait(clock, next, cap).await;
    }
}

/// The upstream socket of `client`, created (evicting the least recently active client when
/// the map is full) if needed. `None` if the socket cannot be created.
fn upstream_for<'a>(
    clients: &'a mut HashMap<SocketAddr, UdpClient>,
    client: SocketAddr,
    target: SocketAddr,
    shared: &Arc<UdpShared>,
    clock: Clock,
) -> Option<&'a UdpClient> {
    if !clients.contains_key(&client) {
        if clients.len() >= MAX_UDP_CLIENTS {
            let oldest = clients
                .iter()
                .min_by_key(|(_, c)| c.last_active.load(Ordering::Relaxed))
                .map(|(a, _)| *a);
            if let Some(a) = oldest {
                clients.remove(&a);
            }
        }
        let socket = match connect_upstream(target) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                tracing::warn!("netsim UDP relay: cannot open a socket to {target}: {e}");
                return None;
            }
        };
        let last_active = Arc::new(AtomicU64::new(millis(clock.now())));
        let task = tokio::spawn(udp_upstream_recv(
            socket.clone(),
            client,
            last_active.clone(),
            shared.clone(),
            clock,
        ));
        clients.insert(
            client,
            UdpClient {
                socket,
                last_active,
                _task: AbortOnDrop(task),
            },
        );
    }
    clients.get(&client)
}

fn connect_upstream(target: SocketAddr) -> io::Result<UdpSocket> {
    let std = std::net::UdpSocket::bind(unspecified_for(target))?;
    std.connect(target)?;
    std.set_nonblocking(true)?;
    UdpSocket::from_std(std)
}

/// Reads the target's replies for one client into the reverse link.
async fn udp_upstream_recv(
    socket: Arc<UdpSocket>,
    client: SocketAddr,
    last_active: Arc<AtomicU64>,
    shared: Arc<UdpShared>,
    clock: Clock,
) {
    let mut buf = vec![0u8; UDP_BUF];
    loop {
        match socket.recv(&mut buf).await {
            Ok(n) => {
                last_active.store(millis(clock.now()), Ordering::Relaxed);
                shared.push(&shared.reverse, clock, (client, buf[..n].to_vec()));
            }
            Err(e) => {
                // ECONNREFUSED from an ICMP port-unreachable: the target is not up (yet).
                tracing::debug!("netsim UDP relay: upstream receive error: {e}");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
}

/// Sends due reverse datagrams to their clients from the relay's listening socket.
async fn udp_reverse_timer(socket: Arc<UdpSocket>, shared: Arc<UdpShared>, clock: Clock) {
    loop {
        let (due, next) = shared.reverse.due(clock);
        for (client, data) in due {
            if let Err(e) = socket.send_to(&data, client).await {
                tracing::debug!("netsim UDP relay: send to client {client} failed: {e}");
            }
        }
        shared.reverse.wait(clock, next, None).await;
    }
}

// ---------------------------------------------------------------------------------------------
// TCP
// ---------------------------------------------------------------------------------------------

/// The impairment a TCP relay actually applies: `imp` without loss, bursty loss, reordering
/// and duplication, and with jitter that never reorders.
pub fn tcp_safe(imp: &Impairment) -> Impairment {
    Impairment {
        jitter_reorders: false,
        loss: 0.0,
        gilbert_elliott: None,
        reorder: 0.0,
        duplicate: 0.0,
        ..imp.clone()
    }
}

/// Whether `imp` has impairments a TCP relay ignores (see [`tcp_safe`]).
pub fn tcp_ignores(imp: &Impairment) -> bool {
    imp.loss > 0.0
        || imp.gilbert_elliott.is_some()
        || imp.reorder > 0.0
        || imp.duplicate > 0.0
        || imp.jitter_reorders
}

type ConnLinks = (Arc<Direction<Vec<u8>>>, Arc<Direction<Vec<u8>>>);

#[derive(Default)]
struct TcpRegistry {
    closed: RelayStats,
    live: HashMap<u64, ConnLinks>,
}

/// Moves a connection's counters to the closed totals when it ends (or is aborted).
struct ConnGuard {
    id: u64,
    registry: Arc<Mutex<TcpRegistry>>,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        let mut reg = lock(&self.registry);
        if let Some((f, r)) = reg.live.remove(&self.id) {
            let (fs, rs) = (f.stats(), r.stats());
            add_stats(&mut reg.closed.forward, &fs);
            add_stats(&mut reg.closed.reverse, &rs);
        }
    }
}

/// A TCP relay: each accepted connection gets its own connection to the target, and bytes are
/// copied both ways with delay, jitter (order-preserving) and rate applied per read chunk.
///
/// Loss, reordering and duplication are **not** applied (see the [module docs](self)).
/// Dropping the relay stops it and closes every relayed connection.
pub struct TcpRelay {
    local_addr: SocketAddr,
    registry: Arc<Mutex<TcpRegistry>>,
    _task: AbortOnDrop,
}

impl std::fmt::Debug for TcpRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpRelay")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl TcpRelay {
    /// Binds `listen` and starts relaying connections to `target`. The impairments are reduced
    /// with [`tcp_safe`] (a warning is logged once if that ignores anything); connection `n`
    /// (from 0) uses seed `seed + n` as in [`Path::new`]. Must be called within a tokio
    /// runtime.
    pub async fn start(
        listen: SocketAddr,
        target: SocketAddr,
        forward: Impairment,
        reverse: Impairment,
        seed: u64,
    ) -> io::Result<TcpRelay> {
        if tcp_ignores(&forward) || tcp_ignores(&reverse) {
            tracing::warn!(
                "netsim TCP relay {listen} -> {target}: loss, reordering and duplication are \
                 ignored (a TCP relay cannot drop or reorder bytes); delay, jitter and rate apply"
            );
        }
        let (forward, reverse) = (tcp_safe(&forward), tcp_safe(&reverse));
        // Validate once up front so that per-connection links cannot fail.
        Path::<Vec<u8>>::new(forward.clone(), reverse.clone(), seed).map_err(invalid)?;
        let listener = TcpListener::bind(listen).await?;
        let local_addr = listener.local_addr()?;
        let registry = Arc::new(Mutex::new(TcpRegistry::default()));
        let task = tokio::spawn(tcp_accept(
            listener,
            target,
            forward,
            reverse,
            seed,
            registry.clone(),
        ));
        tracing::debug!(%local_addr, %target, "netsim TCP relay started");
        Ok(TcpRelay {
            local_addr,
            registry,
            _task: AbortOnDrop(task),
        })
    }

    /// The address clients connect to (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Counters of both directions, summed over all connections so far (open and closed).
    pub fn stats(&self) -> RelayStats {
        let reg = lock(&self.registry);
        let mut s = reg.closed;
        for (f, r) in reg.live.values() {
            add_stats(&mut s.forward, &f.stats());
            add_stats(&mut s.reverse, &r.stats());
        }
        s
    }
}

async fn tcp_accept(
    listener: TcpListener,
    target: SocketAddr,
    forward: Impairment,
    reverse: Impairment,
    seed: u64,
    registry: Arc<Mutex<TcpRegistry>>,
) {
    // Owning the connection tasks here means aborting this task aborts them all.
    let mut conns = JoinSet::new();
    let mut next_id: u64 = 0;
    let clock = Clock(Instant::now());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!("netsim TCP relay: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                if conns.len() >= MAX_TCP_CONNECTIONS {
                    tracing::warn!("netsim TCP relay: {MAX_TCP_CONNECTIONS} connections open, refusing {peer}");
                    continue;
                }
                let id = next_id;
                next_id += 1;
                let Ok(path) = Path::new(forward.clone(), reverse.clone(), seed.wrapping_add(id)) else {
                    continue; // validated in start()
                };
                let links = (Direction::new(path.forward), Direction::new(path.reverse));
                lock(&registry).live.insert(id, links.clone());
                let guard = ConnGuard { id, registry: registry.clone() };
                conns.spawn(tcp_conn(stream, target, links, clock, guard));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn tcp_conn(
    client: TcpStream,
    target: SocketAddr,
    (forward, reverse): ConnLinks,
    clock: Clock,
    _guard: ConnGuard,
) {
    let upstream = match tokio::time::timeout(TCP_CONNECT_TIMEOUT, TcpStream::connect(target)).await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!("netsim TCP relay: connecting to {target} failed: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!("netsim TCP relay: connecting to {target} timed out");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    tokio::join!(
        tcp_pipe(cr, uw, forward, clock),
        tcp_pipe(ur, cw, reverse, clock)
    );
}

/// Copies one direction: reads chunks into the link, writes them out when they depart.
/// Ends after end-of-stream has been passed on (a write shutdown) or on any error.
async fn tcp_pipe<R, W>(mut reader: R, mut writer: W, dir: Arc<Direction<Vec<u8>>>, clock: Clock)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let window = Semaphore::new(TCP_WINDOW_BYTES);
    let eof = AtomicBool::new(false);
    let read = async {
        let mut buf = vec![0u8; TCP_CHUNK];
        loop {
            let n = match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // n <= TCP_CHUNK <= TCP_WINDOW_BYTES, so this always fits.
            let permits = u32::try_from(n).unwrap_or(u32::MAX);
            match window.acquire_many(permits).await {
                Ok(p) => p.forget(),
                Err(_) => break,
            }
            lock(&dir.link).push(clock.now(), buf[..n].to_vec(), n);
            dir.pushed.notify_one();
        }
        eof.store(true, Ordering::Release);
        dir.pushed.notify_one();
    };
    let write = async {
        loop {
            // Read `eof` before taking what is due: every chunk pushed before end-of-stream
            // is then seen by `due`, so nothing is cut off by the shutdown below.
            let done = eof.load(Ordering::Acquire);
            let (due, next) = dir.due(clock);
            for chunk in due {
                if writer.write_all(&chunk).await.is_err() {
                    return;
                }
                window.add_permits(chunk.len());
            }
            if done && next.is_none() {
                let _ = writer.shutdown().await;
                return;
            }
            dir.wait(clock, next, None).await;
        }
    };
    tokio::pin!(read);
    tokio::pin!(write);
    tokio::select! {
        _ = &mut read => write.await,
        _ = &mut write => {} // the writer failed: stop reading this direction
    }
}
