//! One emulator instance for a check: the socket relay, or the packet stage between two namespaces, with a client and a server socket on either side of it.
//!
//! This module owns setting an instance up and down; it must not measure.

use super::*;

/// Where the check measures the emulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Real kernel packets through a packet stage between two network namespaces.
    Packet,
    /// The UDP relay on loopback (no privileges).
    Socket,
}

impl Mode {
    /// The mode and `stage` in one line, for the report.
    pub fn describe(self, stage: crate::StageKind) -> &'static str {
        match (self, stage) {
            (Mode::Socket, _) => "socket mode: UDP relay on 127.0.0.1, no privileges",
            (Mode::Packet, crate::StageKind::Nfqueue) => {
                "packet mode: 2 namespaces + veth, NFQUEUE stage, 198.18.0.1 -> 198.18.0.2"
            }
            (Mode::Packet, _) => {
                "packet mode: 2 namespaces + veth into a middle one, bridge stage (AF_PACKET), \
                 198.18.0.1 -> 198.18.0.2"
            }
        }
    }
}

/// Keeps the emulator alive; dropping it stops the relay, or removes the stage's rules and
/// then the namespaces (fields drop in order).
#[allow(dead_code)]
pub enum Guard {
    Socket(UdpRelay),
    #[cfg(target_os = "linux")]
    Packet(crate::stage::Stage, crate::packet::Topology),
}

/// One emulator with a client socket and a server socket on either side of it.
pub struct Emulator {
    pub(super) client: UdpSocket,
    pub(super) server: UdpSocket,
    /// Where the client sends to reach the server through the emulator.
    pub(super) target: SocketAddr,
    /// Bytes the emulator's link counts per datagram beyond the UDP payload (IPv4 + UDP
    /// headers in packet mode, none in socket mode).
    pub(super) overhead: u64,
    pub(super) guard: Guard,
}

impl Emulator {
    pub async fn start(
        mode: Mode,
        stage: crate::StageKind,
        forward: Impairment,
        reverse: Impairment,
        seed: u64,
    ) -> Result<Self> {
        match mode {
            Mode::Socket => {
                let _ = stage;
                let lo = SocketAddr::from(([127, 0, 0, 1], 0));
                let server = UdpSocket::bind(lo)?;
                let relay = UdpRelay::start(lo, server.local_addr()?, forward, reverse, seed)
                    .await
                    .map_err(|e| CheckError::io("starting the UDP relay", e))?;
                Ok(Emulator {
                    client: UdpSocket::bind(lo)?,
                    server,
                    target: relay.local_addr(),
                    overhead: 0,
                    guard: Guard::Socket(relay),
                })
            }
            #[cfg(target_os = "linux")]
            Mode::Packet => {
                use crate::packet::{Topology, CLIENT_ADDR, SERVER_ADDR};
                use crate::stage::Stage;
                tokio::task::spawn_blocking(move || -> Result<Emulator> {
                    let topo = Topology::with_wiring(stage.wiring())?;
                    let stage = Stage::start(stage, &topo, forward, reverse, seed)?;
                    let server = bind_in(topo.server_ns(), (SERVER_ADDR, 0).into())?;
                    let client = bind_in(topo.client_ns(), (CLIENT_ADDR, 0).into())?;
                    Ok(Emulator {
                        target: server.local_addr()?,
                        client,
                        server,
                        overhead: 28,
                        guard: Guard::Packet(stage, topo),
                    })
                })
                .await?
            }
            #[cfg(not(target_os = "linux"))]
            Mode::Packet => Err(CheckError::Failed(
                "packet mode is Linux only; use --mode socket".into(),
            )),
        }
    }

    /// The client → server link's counters.
    pub fn forward_stats(&self) -> Stats {
        match &self.guard {
            Guard::Socket(r) => r.stats().forward,
            #[cfg(target_os = "linux")]
            Guard::Packet(s, _) => s.stats().client_to_server.link,
        }
    }
}

/// Binds a UDP socket inside namespace `ns` (from a helper thread; the socket stays there).
#[cfg(target_os = "linux")]
pub fn bind_in(ns: &str, addr: SocketAddr) -> Result<UdpSocket> {
    let ns = ns.to_string();
    thread::spawn(move || -> Result<UdpSocket> {
        crate::packet::enter_netns(&ns)?;
        Ok(UdpSocket::bind(addr)?)
    })
    .join()
    .map_err(|_| CheckError::Failed("a bind thread panicked".into()))?
}

/// Runs blocking measurement `f` off the async workers (the socket relay needs them).
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f).await?
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------------------------
// Measurements (blocking; every loop bounded in count and time)
// ---------------------------------------------------------------------------------------------
