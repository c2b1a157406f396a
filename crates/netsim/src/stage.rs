//! Which packet stage impairs an emulated path, behind one type: the [bridge](crate::bridge)
//! (the default: no netfilter, runs as root or in a user namespace of our own) or the
//! [NFQUEUE](crate::packet::PacketStage) stage (root and iptables).
//!
//! This module owns the choice and nothing else: it starts the stage the caller names on a
//! topology wired for it and hands back the stage's counters.

use crate::bridge::{BridgeOptions, BridgeStage};
use crate::packet::{
    check_namespaces, check_privileges, PacketError, PacketStage, StageOptions, StageStats,
    Topology, Wiring,
};
use crate::Impairment;

pub use crate::StageKind;

impl StageKind {
    /// How the stage needs the namespaces joined.
    pub fn wiring(self) -> Wiring {
        match self {
            StageKind::Bridge => Wiring::Bridged,
            StageKind::Nfqueue => Wiring::Direct,
        }
    }

    /// Whether the stage can run here; the error says why not.
    pub fn check(self) -> Result<(), PacketError> {
        match self {
            StageKind::Bridge => check_namespaces(),
            StageKind::Nfqueue => check_privileges(),
        }
    }
}

/// A running packet stage of either kind; dropping it stops it.
#[derive(Debug)]
pub enum Stage {
    /// The bridge stage.
    Bridge(BridgeStage),
    /// The NFQUEUE stage.
    Nfqueue(PacketStage),
}

impl Stage {
    /// Starts a stage of `kind` on `topology` (made with [`StageKind::wiring`]), the links
    /// seeded with `seed` (client→server) and `seed + 1`.
    pub fn start(
        kind: StageKind,
        topology: &Topology,
        client_to_server: Impairment,
        server_to_client: Impairment,
        seed: u64,
    ) -> Result<Self, PacketError> {
        if topology.wiring() != kind.wiring() {
            return Err(PacketError::Unsupported(format!(
                "the {kind} stage needs a topology wired as {:?}",
                kind.wiring()
            )));
        }
        Ok(match kind {
            StageKind::Bridge => Stage::Bridge(BridgeStage::start(
                topology,
                client_to_server,
                server_to_client,
                BridgeOptions {
                    seed,
                    ..BridgeOptions::default()
                },
            )?),
            StageKind::Nfqueue => Stage::Nfqueue(PacketStage::start(
                topology,
                client_to_server,
                server_to_client,
                StageOptions {
                    seed,
                    ..StageOptions::default()
                },
            )?),
        })
    }

    /// Which stage this is.
    pub fn kind(&self) -> StageKind {
        match self {
            Stage::Bridge(_) => StageKind::Bridge,
            Stage::Nfqueue(_) => StageKind::Nfqueue,
        }
    }

    /// Counters of both directions so far.
    pub fn stats(&self) -> StageStats {
        match self {
            Stage::Bridge(s) => s.stats(),
            Stage::Nfqueue(s) => s.stats(),
        }
    }
}
