//! The network path of a cell: plain loopback, or an emulated link through `agentwire netsim`'s
//! packet mode (client and server network namespaces joined through a packet stage, every TCP
//! and UDP packet delayed and dropped by the same model), so that QUIC, HTTP/2 and WebSocket
//! cross the same impaired link. The stage is the bridge by default (no netfilter; root or a
//! user namespace of our own), or NFQUEUE.
//!
//! The hub and the echo workers live in the *server* namespace, the measured clients in the
//! *client* namespace: each round trip crosses the emulated link once in each direction.
//! There is deliberately no socket-relay fallback here: a TCP relay cannot drop packets, so it
//! would give TCP transports an unfair advantage under loss. Without namespaces, impaired
//! cells are skipped with the reason.
//!
//! This module sets up and tears down the path; it must not run agents or measure requests.

use agentwire_netsim::packet::{self, StageOptions, Topology};
use agentwire_netsim::stage::{Stage, StageKind};
use agentwire_netsim::Spec;
use anyhow::{anyhow, Context, Result};

use crate::cell::NetworkProfile;
use crate::record::EmulatorRecord;
use crate::resources;

/// Prefix of the emulator's thread names, either stage's (their CPU is taken out of the agent
/// side).
pub const EMULATOR_THREAD_PREFIX: &str = "netsim-";

/// An emulated link for one cell; dropping it removes the namespaces and rules.
pub struct EmulatedPath {
    // Field order matters: the stage (rules, threads) goes before the namespaces.
    stage: Stage,
    topology: Topology,
    spec: String,
    cpu_at_start: f64,
    /// TCP congestion control in effect on both ends, read once after set-up.
    tcp_cc: Option<String>,
}

impl EmulatedPath {
    /// Whether packet `stage` can run here; `Err` says why not.
    pub fn available(stage: StageKind) -> Result<(), agentwire_netsim::packet::PacketError> {
        stage.check()
    }

    /// Creates the namespaces (with TCP congestion control `tcp_cc` in both, if given) and
    /// starts impairing both directions with `profile` through packet stage `kind`.
    pub fn start(
        profile: &NetworkProfile,
        seed: u64,
        tcp_cc: Option<&str>,
        kind: StageKind,
    ) -> Result<Self> {
        let spec = profile
            .one_way_spec()
            .ok_or_else(|| anyhow!("network {profile} needs no emulator"))?;
        let parsed = Spec::parse(&spec).map_err(|e| anyhow!("netsim spec {spec:?}: {e}"))?;
        kind.check()
            .with_context(|| format!("netsim packet mode ({kind} stage)"))?;
        let topology =
            Topology::with_wiring(kind.wiring()).context("creating the network namespaces")?;
        if let Some(cc) = tcp_cc {
            for ns in [topology.client_ns(), topology.server_ns()] {
                topology
                    .set_tcp_congestion_control(ns, cc)
                    .with_context(|| format!("setting TCP congestion control {cc} in {ns}"))?;
            }
        }
        let stage = Stage::start(
            kind,
            &topology,
            parsed.impairment.clone(),
            parsed.impairment,
            seed,
        )
        .with_context(|| format!("starting the netsim {kind} stage"))?;
        let tcp_cc = read_tcp_congestion_control(&topology);
        Ok(EmulatedPath {
            stage,
            topology,
            spec,
            cpu_at_start: resources::self_threads_cpu_seconds(EMULATOR_THREAD_PREFIX),
            tcp_cc,
        })
    }

    /// The namespace of the measured clients.
    pub fn client_ns(&self) -> &str {
        self.topology.client_ns()
    }

    /// The namespace of the hub and the workers.
    pub fn server_ns(&self) -> &str {
        self.topology.server_ns()
    }

    /// The address the hub listens on inside the server namespace.
    pub fn server_addr() -> std::net::Ipv4Addr {
        packet::SERVER_ADDR
    }

    /// The spec applied in each direction.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// CPU seconds the emulator's threads used since [`start`](Self::start).
    pub fn cpu_seconds(&self) -> f64 {
        resources::self_threads_cpu_seconds(EMULATOR_THREAD_PREFIX) - self.cpu_at_start
    }

    /// The emulator's counters so far, both directions added up.
    pub fn record(&self) -> EmulatorRecord {
        let st = self.stage.stats();
        let mut r = EmulatorRecord::default();
        for d in [&st.client_to_server, &st.server_to_client] {
            r.packets += d.packets_handled;
            r.dropped_loss += d.link.dropped_loss;
            r.dropped_queue += d.link.dropped_queue_full;
            r.dropped_kernel += d.kernel_dropped;
            r.max_held = r.max_held.max(d.max_held);
            r.verdict_errors += d.verdict_errors;
            r.oversize += d.oversize;
        }
        r.stage = self.stage.kind().name().to_owned();
        r.cpu_seconds = self.cpu_seconds();
        r.tcp_cc.clone_from(&self.tcp_cc);
        r
    }

    /// An error that stopped the stage, if any (the cell's numbers are then void).
    pub fn failure(&self) -> Option<String> {
        let st = self.stage.stats();
        st.client_to_server.error.or(st.server_to_client.error)
    }

    /// Packets the stage may hold per direction before the kernel queue is full.
    pub fn queue_limit() -> usize {
        StageOptions::default().queue_max_len as usize
    }
}

/// The TCP congestion control in effect on both ends of `topology` (`client/server` when they
/// differ), `None` when it cannot be read.
fn read_tcp_congestion_control(topology: &Topology) -> Option<String> {
    let client = topology.tcp_congestion_control(topology.client_ns()).ok()?;
    let server = topology.tcp_congestion_control(topology.server_ns()).ok()?;
    Some(if client == server {
        client
    } else {
        format!("{client}/{server}")
    })
}

/// Moves the calling thread into network namespace `ns` (threads it spawns afterwards, and
/// processes it starts, inherit it).
pub fn enter(ns: &str) -> Result<()> {
    packet::enter_netns(ns).with_context(|| format!("entering network namespace {ns}"))
}

/// Removes the namespaces this process created (`aw-<pid>-…`), for a bench interrupted by a
/// signal, when their owners' destructors will not run. Returns how many were removed.
pub fn remove_own_namespaces() -> usize {
    let prefix = format!("{}{}-", packet::NS_PREFIX, std::process::id());
    let Ok(names) = packet::list_namespaces() else {
        return 0;
    };
    names
        .iter()
        .filter(|n| n.starts_with(&prefix))
        .filter(|n| packet::delete_namespace(n).is_ok())
        .count()
}

/// Removes namespaces left behind by benches or netsim runs that were killed (their pid is
/// gone). Best effort: without the privileges it does nothing.
pub fn remove_stale_namespaces() -> Vec<String> {
    packet::cleanup_stale(packet::NS_PREFIX).unwrap_or_default()
}
