//! The NFQUEUE packet stage: iptables rules in both namespaces send every packet between them
//! to a netfilter queue, and a worker thread per direction takes each one, runs it through the
//! impairment model and gives the verdict (accept, drop, hold back and reinject).
//!
//! This module owns the stage, its workers and their counters; it must not make namespaces
//! (`packet`'s [`Topology`](super::Topology) does).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{
    enter_netns, io_err, namespace_exists, run_in, PacketError, Topology, CLIENT_DEV, SERVER_DEV,
};
use crate::{Impairment, Link, Stats, Verdict};

/// Bytes of each packet copied to user space (headers only; the full length comes with it).
const COPY_RANGE: u16 = 128;

/// Receive buffer of the stage's NFQUEUE socket, bytes.
const SOCKET_BUFFER: usize = 64 << 20;

/// How often a worker reads the kernel's drop counters.
const KERNEL_STATS_EVERY: Duration = Duration::from_millis(100);

/// Checks that `imp` validates and can be expressed with NFQUEUE verdicts (no duplication).
pub fn check_impairment(imp: &Impairment) -> Result<(), PacketError> {
    imp.validate()?;
    if imp.duplicate > 0.0 {
        return Err(PacketError::Unsupported(
            "duplication (`dup`): an NFQUEUE packet can be accepted only once; use the socket \
             relay mode for duplication"
                .into(),
        ));
    }
    Ok(())
}

/// Tuning of a [`PacketStage`].
#[derive(Debug, Clone)]
pub struct StageOptions {
    /// NFQUEUE number used in both namespaces (queues are per namespace, so one number serves
    /// both directions).
    pub queue_num: u16,
    /// Kernel limit of packets queued or awaiting a verdict, per direction.
    pub queue_max_len: u32,
    /// Longest sleep between two polls of the queue socket.
    pub poll_interval: Duration,
    /// Seed of the client→server link; the server→client link uses `seed + 1`.
    pub seed: u64,
}

impl Default for StageOptions {
    fn default() -> Self {
        Self {
            queue_num: 7,
            queue_max_len: 16_384,
            poll_interval: Duration::from_micros(100),
            seed: 0,
        }
    }
}

/// Counters of one direction of a [`PacketStage`].
#[derive(Debug, Clone, Default)]
pub struct DirectionStats {
    /// The [`Link`]'s own counters.
    pub link: Stats,
    /// Packets read from the queue.
    pub packets_handled: u64,
    /// Packets currently held (read, verdict pending).
    pub held: usize,
    /// High-water mark of [`held`](Self::held).
    pub max_held: usize,
    /// Verdicts the kernel refused.
    pub verdict_errors: u64,
    /// Packets the kernel dropped before the stage read them: its queue full
    /// (`queue_dropped`) or the stage's socket full (`user_dropped`), from
    /// `/proc/net/netfilter/nfnetlink_queue`. These escape the [`Link`]'s loss model, so a
    /// run with any is not the path it claims to be.
    pub kernel_dropped: u64,
    /// Frames longer than the MTU (an offload left on), dropped by the bridge stage without
    /// entering the link. Always 0 on the NFQUEUE stage, where the kernel segments first.
    pub oversize: u64,
    /// Time since the direction's thread started.
    pub elapsed: Duration,
    /// The error that stopped the thread, if any.
    pub error: Option<String>,
}

impl DirectionStats {
    /// Average packets handled per second since the thread started.
    pub fn packets_per_sec(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.packets_handled as f64 / s
        } else {
            0.0
        }
    }
}

/// Counters of both directions of a [`PacketStage`].
#[derive(Debug, Clone, Default)]
pub struct StageStats {
    /// Packets arriving at the server namespace.
    pub client_to_server: DirectionStats,
    /// Packets arriving at the client namespace.
    pub server_to_client: DirectionStats,
}

struct Direction {
    ns: String,
    dev: &'static str,
    rule_installed: bool,
    stats: Arc<Mutex<DirectionStats>>,
    thread: Option<JoinHandle<()>>,
}

/// The NFQUEUE impairment stage on a [`Topology`]. See the [module docs](self).
///
/// Dropping it removes the iptables rules first (traffic then flows unimpaired), then stops
/// the threads, which accept every packet still held.
pub struct PacketStage {
    queue_num: u16,
    stop: Arc<AtomicBool>,
    dirs: Vec<Direction>,
}

impl std::fmt::Debug for PacketStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketStage")
            .field("queue_num", &self.queue_num)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl PacketStage {
    /// Starts impairing `topology`: `client_to_server` applies to packets arriving at the
    /// server namespace, `server_to_client` to packets arriving at the client namespace.
    pub fn start(
        topology: &Topology,
        client_to_server: Impairment,
        server_to_client: Impairment,
        options: StageOptions,
    ) -> Result<Self, PacketError> {
        check_impairment(&client_to_server)?;
        check_impairment(&server_to_client)?;
        let mut stage = PacketStage {
            queue_num: options.queue_num,
            stop: Arc::new(AtomicBool::new(false)),
            dirs: Vec::new(),
        };
        let plan = [
            (
                topology.server_ns(),
                SERVER_DEV,
                client_to_server,
                options.seed,
            ),
            (
                topology.client_ns(),
                CLIENT_DEV,
                server_to_client,
                options.seed.wrapping_add(1),
            ),
        ];
        for (ns, dev, imp, seed) in plan {
            let link = Link::new(imp, seed)?;
            let stats = Arc::new(Mutex::new(DirectionStats::default()));
            let (ready_tx, ready_rx) = mpsc::sync_channel(1);
            let worker = Worker {
                ns: ns.to_string(),
                options: options.clone(),
                link,
                stop: stage.stop.clone(),
                stats: stats.clone(),
                held: HashMap::new(),
            };
            let thread = std::thread::Builder::new()
                .name(format!("netsim-nfq-{ns}"))
                .spawn(move || worker.run(ready_tx))
                .map_err(io_err("spawn packet stage thread"))?;
            stage.dirs.push(Direction {
                ns: ns.to_string(),
                dev,
                rule_installed: false,
                stats,
                thread: Some(thread),
            });
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(PacketError::Thread(e)),
                Err(_) => return Err(PacketError::Thread("exited before it was ready".into())),
            }
        }
        // Both queues are bound: only now divert traffic to them.
        let q = options.queue_num.to_string();
        for dir in &mut stage.dirs {
            run_in(&dir.ns, "iptables", &nfqueue_rule("-A", dir.dev, &q))?;
            dir.rule_installed = true;
        }
        Ok(stage)
    }

    /// Counters of both directions so far.
    pub fn stats(&self) -> StageStats {
        let get = |i: usize| {
            self.dirs
                .get(i)
                .map(|d| match d.stats.lock() {
                    Ok(s) => s.clone(),
                    Err(p) => p.into_inner().clone(),
                })
                .unwrap_or_default()
        };
        StageStats {
            client_to_server: get(0),
            server_to_client: get(1),
        }
    }
}

/// iptables arguments that add (`-A`) or delete (`-D`) the rule sending packets arriving on
/// `dev` to NFQUEUE `queue`.
/// No `--queue-bypass`: if the stage dies, traffic stops rather than flowing unimpaired.
fn nfqueue_rule<'a>(action: &'a str, dev: &'a str, queue: &'a str) -> [&'a str; 9] {
    [
        "-w",
        action,
        "INPUT",
        "-i",
        dev,
        "-j",
        "NFQUEUE",
        "--queue-num",
        queue,
    ]
}

impl Drop for PacketStage {
    fn drop(&mut self) {
        let q = self.queue_num.to_string();
        for dir in &self.dirs {
            if dir.rule_installed && namespace_exists(&dir.ns) {
                let _ = run_in(&dir.ns, "iptables", &nfqueue_rule("-D", dir.dev, &q));
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        for dir in &mut self.dirs {
            if let Some(t) = dir.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// Sets `queue`'s socket receive buffer to `bytes`: `SO_RCVBUFFORCE` (packet mode runs with
/// CAP_NET_ADMIN), else as much as `SO_RCVBUF` grants.
fn set_receive_buffer(queue: &nfq::Queue, bytes: usize) -> std::io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    setsockopt(queue, sockopt::RcvBufForce, &bytes)
        .or_else(|_| setsockopt(queue, sockopt::RcvBuf, &bytes))
        .map_err(std::io::Error::from)
}

/// Packets the kernel dropped for NFQUEUE `queue` in this thread's network namespace
/// (`queue_dropped` plus `user_dropped`), or `None` when it cannot be read.
fn kernel_dropped(queue: u16) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue").ok()?;
    parse_kernel_dropped(&text, queue)
}

/// [`kernel_dropped`] from the file's text: per queue, its number, the peer's port id, packets
/// waiting, copy mode, copy range, `queue_dropped`, `user_dropped`, the last id, 1.
fn parse_kernel_dropped(text: &str, queue: u16) -> Option<u64> {
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first()?.parse::<u16>().ok()? != queue {
            return None;
        }
        let queue_dropped: u64 = fields.get(5)?.parse().ok()?;
        let user_dropped: u64 = fields.get(6)?.parse().ok()?;
        Some(queue_dropped + user_dropped)
    })
}

struct Worker {
    ns: String,
    options: StageOptions,
    link: Link<u32>,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<DirectionStats>>,
    held: HashMap<u32, nfq::Message>,
}

impl Worker {
    fn open(&self) -> Result<nfq::Queue, String> {
        let q = self.options.queue_num;
        enter_netns(&self.ns).map_err(|e| e.to_string())?;
        let ctx = |what: &str| {
            let what = format!("{what} (namespace {}, queue {q})", self.ns);
            move |e: std::io::Error| format!("{what}: {e}")
        };
        let mut queue = nfq::Queue::open().map_err(ctx("open NFQUEUE netlink socket"))?;
        queue.bind(q).map_err(ctx("bind NFQUEUE"))?;
        // The link needs only the length: copy just the headers. (With a copy range of 0 the
        // kernel reports no length at all; with a short one it adds NFQA_CAP_LEN.)
        queue
            .set_copy_range(q, COPY_RANGE)
            .map_err(ctx("set copy range"))?;
        queue
            .set_queue_max_len(q, self.options.queue_max_len)
            .map_err(ctx("set queue max len"))?;
        queue
            .set_fail_open(q, false)
            .map_err(ctx("set fail open"))?;
        queue.set_nonblocking(true);
        // The kernel drops whatever does not fit the socket while the stage sleeps or works:
        // the default (`net.core.rmem_default`, 208 KiB: a few hundred queued packets) lost
        // hundreds of the 1,000 first packets of 1,000 agents connecting at once.
        set_receive_buffer(&queue, SOCKET_BUFFER).map_err(ctx("size the NFQUEUE socket"))?;
        Ok(queue)
    }

    fn run(mut self, ready: mpsc::SyncSender<Result<(), String>>) {
        let mut queue = match self.open() {
            Ok(q) => q,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        let err = self.serve(&mut queue).err();
        // Release every held packet so nothing stays stuck in the kernel.
        self.release_all(&mut queue);
        if let Ok(mut s) = self.stats.lock() {
            s.error = err;
        }
    }

    fn serve(&mut self, queue: &mut nfq::Queue) -> Result<(), String> {
        let start = Instant::now();
        let mut next_id: u32 = 0;
        let (mut handled, mut max_held, mut verdict_errors) = (0u64, 0usize, 0u64);
        let dropped_before = kernel_dropped(self.options.queue_num).unwrap_or(0);
        let mut kernel_read_at = start;
        while !self.stop.load(Ordering::Relaxed) {
            let mut changed = false;
            loop {
                match queue.recv() {
                    Ok(mut msg) => {
                        changed = true;
                        handled += 1;
                        let now = start.elapsed();
                        let len = msg.get_original_len();
                        let id = next_id;
                        next_id = next_id.wrapping_add(1);
                        match self.link.push(now, id, len) {
                            Verdict::Queued { .. } => {
                                self.held.insert(id, msg);
                                max_held = max_held.max(self.held.len());
                            }
                            Verdict::Dropped(_) => {
                                msg.set_verdict(nfq::Verdict::Drop);
                                if queue.verdict(msg).is_err() {
                                    verdict_errors += 1;
                                }
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(format!("NFQUEUE recv in {}: {e}", self.ns)),
                }
            }
            let now = start.elapsed();
            while let Some(id) = self.link.poll_departure(now) {
                changed = true;
                if let Some(mut msg) = self.held.remove(&id) {
                    msg.set_verdict(nfq::Verdict::Accept);
                    if queue.verdict(msg).is_err() {
                        verdict_errors += 1;
                    }
                }
            }
            if kernel_read_at.elapsed() >= KERNEL_STATS_EVERY {
                kernel_read_at = Instant::now();
                if let Some(now) = kernel_dropped(self.options.queue_num) {
                    if let Ok(mut s) = self.stats.lock() {
                        s.kernel_dropped = now.saturating_sub(dropped_before);
                    }
                }
            }
            if changed {
                if let Ok(mut s) = self.stats.lock() {
                    s.link = self.link.stats();
                    s.packets_handled = handled;
                    s.held = self.held.len();
                    s.max_held = max_held;
                    s.verdict_errors = verdict_errors;
                    s.elapsed = start.elapsed();
                }
            } else if let Ok(mut s) = self.stats.lock() {
                s.elapsed = start.elapsed();
            }
            let mut sleep = self.options.poll_interval;
            if let Some(due) = self.link.next_departure() {
                sleep = sleep.min(due.saturating_sub(start.elapsed()));
            }
            if !sleep.is_zero() {
                std::thread::sleep(sleep);
            }
        }
        Ok(())
    }

    fn release_all(&mut self, queue: &mut nfq::Queue) {
        for (_, mut msg) in self.held.drain() {
            msg.set_verdict(nfq::Verdict::Accept);
            let _ = queue.verdict(msg);
        }
        let _ = queue.unbind(self.options.queue_num);
    }
}

#[cfg(test)]
mod tests {
    use super::parse_kernel_dropped;

    #[test]
    fn kernel_drops_are_read_for_our_queue() {
        let text = "    7  14772   388 2   128     2   357    47897  1\n    8  1   0 2   128     5   6    1  1\n";
        assert_eq!(parse_kernel_dropped(text, 7), Some(359));
        assert_eq!(parse_kernel_dropped(text, 8), Some(11));
        assert_eq!(parse_kernel_dropped(text, 9), None);
        assert_eq!(parse_kernel_dropped("    7 garbage\n", 7), None);
    }
}
