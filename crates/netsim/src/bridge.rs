//! The bridge stage of packet mode (Linux): a user-space bridge in a middle namespace that
//! forwards whole Ethernet frames between the client's and the server's veth pairs through the
//! sans-IO [`Link`], with no netfilter at all, so no iptables and no NFQUEUE module are needed.
//! It runs wherever network namespaces can be made: as root, or as root of a user namespace of
//! the process's own ([`crate::userns`]).
//!
//! This module owns the two forwarding threads (one per direction, each in the middle
//! namespace with an AF_PACKET socket reading one end and another sending out of the other)
//! and their counters. The topology (namespaces, veths, MAC addresses, permanent neighbours,
//! offloads off) is [`Topology::with_wiring`]'s; the system calls are `sys`'s. It must not
//! touch any namespace but the topology's middle one, nor change the calling thread's.
//!
//! Frames cross whole and in order of departure; a frame longer than the MTU (an offload that
//! could not be switched off) is dropped and counted in [`DirectionStats::oversize`], never
//! forwarded, so the link sees the packets the network would. Like the NFQUEUE stage it does
//! not duplicate ([`check_impairment`]).

use agentwire_sync::LockExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::packet::{
    check_impairment, enter_netns, DirectionStats, PacketError, StageStats, Topology,
    MIDDLE_CLIENT_DEV, MIDDLE_SERVER_DEV, MTU,
};
use crate::sys::{self, PacketSocket, VNET_GSO_TYPE, VNET_HDR_LEN};
use crate::{Impairment, Link, Verdict};

/// Bytes of an Ethernet header (the frames carry no VLAN tag).
const ETH_HLEN: usize = 14;
/// Longest wait between two looks at the stop flag.
const MAX_WAIT: Duration = Duration::from_millis(5);

/// Tuning of a [`BridgeStage`].
#[derive(Debug, Clone)]
pub struct BridgeOptions {
    /// Seed of the client→server link; the server→client link uses `seed + 1`.
    pub seed: u64,
    /// Receive buffer of each direction's socket, bytes (frames beyond it are dropped by the
    /// kernel and counted in [`DirectionStats::kernel_dropped`]).
    pub socket_buffer: usize,
}

impl Default for BridgeOptions {
    fn default() -> Self {
        BridgeOptions {
            seed: 0,
            socket_buffer: 64 << 20,
        }
    }
}

/// The bridge impairment stage on a bridged [`Topology`]. See the [module docs](self).
///
/// Dropping it stops the threads; frames still held are not sent (the link goes down with
/// them, as a cable pulled would).
pub struct BridgeStage {
    stop: Arc<AtomicBool>,
    dirs: Vec<Direction>,
}

/// One direction's counters, shared with its thread, and the thread.
type Direction = (Arc<Mutex<DirectionStats>>, Option<JoinHandle<()>>);

impl std::fmt::Debug for BridgeStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeStage")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl BridgeStage {
    /// Starts forwarding on `topology` (made with [`Wiring::Bridged`](crate::packet::Wiring)):
    /// `client_to_server` applies to frames from the client, `server_to_client` to frames from
    /// the server.
    pub fn start(
        topology: &Topology,
        client_to_server: Impairment,
        server_to_client: Impairment,
        options: BridgeOptions,
    ) -> Result<Self, PacketError> {
        check_impairment(&client_to_server)?;
        check_impairment(&server_to_client)?;
        let Some(middle) = topology.middle_ns() else {
            return Err(PacketError::Unsupported(
                "the bridge stage needs a bridged topology (Topology::with_wiring(Wiring::Bridged))"
                    .into(),
            ));
        };
        let mut stage = BridgeStage {
            stop: Arc::new(AtomicBool::new(false)),
            dirs: Vec::new(),
        };
        let plan = [
            (
                "c2s",
                MIDDLE_CLIENT_DEV,
                MIDDLE_SERVER_DEV,
                client_to_server,
                options.seed,
            ),
            (
                "s2c",
                MIDDLE_SERVER_DEV,
                MIDDLE_CLIENT_DEV,
                server_to_client,
                options.seed.wrapping_add(1),
            ),
        ];
        for (name, from, to, imp, seed) in plan {
            let link = Link::new(imp, seed)?;
            let stats = Arc::new(Mutex::new(DirectionStats::default()));
            let (ready_tx, ready_rx) = mpsc::sync_channel(1);
            let forwarder = Forwarder {
                ns: middle.to_string(),
                from,
                to,
                socket_buffer: options.socket_buffer,
                link,
                stop: stage.stop.clone(),
                stats: stats.clone(),
            };
            let thread = std::thread::Builder::new()
                .name(format!("netsim-br-{name}"))
                .spawn(move || forwarder.run(ready_tx))
                .map_err(|e| PacketError::Thread(format!("spawn the bridge thread: {e}")))?;
            stage.dirs.push((stats, Some(thread)));
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(PacketError::Thread(e)),
                Err(_) => return Err(PacketError::Thread("exited before it was ready".into())),
            }
        }
        Ok(stage)
    }

    /// Counters of both directions so far.
    pub fn stats(&self) -> StageStats {
        let get = |i: usize| {
            self.dirs
                .get(i)
                .map(|(s, _)| s.lock_or_recover().clone())
                .unwrap_or_default()
        };
        StageStats {
            client_to_server: get(0),
            server_to_client: get(1),
        }
    }
}

impl Drop for BridgeStage {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for (_, thread) in &mut self.dirs {
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// One direction: reads frames arriving on `from`, holds them in the link, sends them out of
/// `to` when they depart.
struct Forwarder {
    ns: String,
    from: &'static str,
    to: &'static str,
    socket_buffer: usize,
    link: Link<Vec<u8>>,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<DirectionStats>>,
}

impl Forwarder {
    fn open(&self) -> Result<(PacketSocket, PacketSocket), String> {
        enter_netns(&self.ns).map_err(|e| e.to_string())?;
        let open = |dev: &str, buffer: usize| {
            sys::interface_index(dev)
                .and_then(|i| PacketSocket::bind(i, buffer))
                .map_err(|e| format!("AF_PACKET socket on {dev} in {}: {e}", self.ns))
        };
        Ok((
            open(self.from, self.socket_buffer)?,
            open(self.to, 1 << 20)?,
        ))
    }

    fn run(mut self, ready: mpsc::SyncSender<Result<(), String>>) {
        let (from, to) = match self.open() {
            Ok(s) => s,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        let err = self.serve(&from, &to).err();
        let mut s = self.stats.lock_or_recover();
        s.error = err;
    }

    fn serve(&mut self, from: &PacketSocket, to: &PacketSocket) -> Result<(), String> {
        let start = Instant::now();
        let max_frame = VNET_HDR_LEN + ETH_HLEN + MTU as usize;
        let mut buf = vec![0u8; 65_536 + VNET_HDR_LEN];
        let mut st = DirectionStats::default();
        let (mut queued, mut departed) = (0u64, 0u64);
        let mut drops_read_at = start;
        while !self.stop.load(Ordering::Relaxed) {
            let mut changed = false;
            while let Some(n) = from
                .recv(&mut buf)
                .map_err(|e| format!("reading {} in {}: {e}", self.from, self.ns))?
            {
                changed = true;
                st.packets_handled += 1;
                if n > max_frame || n > buf.len() || buf[VNET_GSO_TYPE] != 0 {
                    st.oversize += 1;
                    continue;
                }
                if n < VNET_HDR_LEN + ETH_HLEN {
                    continue;
                }
                let ip_len = n - VNET_HDR_LEN - ETH_HLEN;
                let now = start.elapsed();
                if let Verdict::Queued { .. } = self.link.push(now, buf[..n].to_vec(), ip_len) {
                    queued += 1;
                }
                st.max_held = st.max_held.max((queued - departed) as usize);
            }
            let now = start.elapsed();
            while let Some(frame) = self.link.poll_departure(now) {
                changed = true;
                departed += 1;
                if to.send(&frame).is_err() {
                    st.verdict_errors += 1;
                }
            }
            if drops_read_at.elapsed() >= Duration::from_millis(100) {
                drops_read_at = Instant::now();
                st.kernel_dropped += from.take_drops().unwrap_or(0);
                changed = true;
            }
            st.elapsed = start.elapsed();
            if changed {
                st.link = self.link.stats();
                st.held = (queued - departed) as usize;
                *self.stats.lock_or_recover() = st.clone();
            }
            let mut wait = MAX_WAIT;
            if let Some(due) = self.link.next_departure() {
                wait = wait.min(due.saturating_sub(start.elapsed()));
            }
            if !wait.is_zero() {
                from.wait(wait)
                    .map_err(|e| format!("waiting on {} in {}: {e}", self.from, self.ns))?;
            }
        }
        st.kernel_dropped += from.take_drops().unwrap_or(0);
        st.link = self.link.stats();
        st.elapsed = start.elapsed();
        *self.stats.lock_or_recover() = st;
        Ok(())
    }
}
