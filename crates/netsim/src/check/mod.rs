//! `agentwire netsim check`: measures the emulator itself through real sockets and holds it to
//! its accuracy bounds — added RTT, loss and rate — and reports its ceiling. In socket mode
//! through the UDP relay on loopback; in packet mode through a packet stage between two
//! network namespaces.
//!
//! This module owns the measurement and its report (the CLI only turns flags into
//! [`CheckOptions`] and prints); every loop in it is bounded in count and time.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use agentwire_measure::stats;
use agentwire_sync::LockExt;
use serde::Serialize;

use crate::relay::UdpRelay;
use crate::{Impairment, Spec, StageKind, Stats};

/// The check's results, or why it could not run.
type Result<T, E = CheckError> = std::result::Result<T, E>;

mod bounds;
mod emulator;
mod probes;
mod report;
mod run;

pub use bounds::*;
pub use emulator::Mode;
use emulator::*;
use probes::*;
pub use report::*;
use run::*;

/// What one check measures with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// The packet stage (packet mode only).
    pub stage: StageKind,
    /// Datagrams of the loss check.
    pub packets: u32,
    /// The impairment model's seed.
    pub seed: u64,
}

/// Why a check could not be run (a failed bound is not an error: see
/// [`CheckReport::passed`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// A socket operation failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The packet stage or its namespaces could not be set up.
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    Packet(#[from] crate::packet::PacketError),
    /// An impairment spec did not parse.
    #[error(transparent)]
    Spec(#[from] crate::Error),
    /// A measurement could not be completed (no echo in time, a thread that died, a check
    /// that ran out of time).
    #[error("{0}")]
    Failed(String),
}

impl CheckError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        CheckError::Io {
            what: what.into(),
            source,
        }
    }
}

impl From<std::io::Error> for CheckError {
    fn from(source: std::io::Error) -> Self {
        CheckError::io("socket I/O of the check", source)
    }
}

impl From<tokio::task::JoinError> for CheckError {
    fn from(e: tokio::task::JoinError) -> Self {
        CheckError::Failed(format!("a measurement thread failed: {e}"))
    }
}

/// Runs the check through an emulator in `mode`, bounded to 90 s. `auto_fallback` is why
/// packet mode was not used when it was asked for with `auto`, for the report.
pub async fn check(
    mode: Mode,
    options: CheckOptions,
    auto_fallback: Option<String>,
) -> Result<CheckReport, CheckError> {
    let started = Instant::now();
    let (rtt, loss, rate, ceiling) =
        tokio::time::timeout(Duration::from_secs(90), run_check(mode, &options))
            .await
            .map_err(|_| CheckError::Failed("netsim check did not finish within 90 s".into()))??;
    let passed = rtt.pass && loss.pass && rate.pass;
    Ok(CheckReport {
        mode,
        stage: (mode == Mode::Packet).then_some(options.stage),
        mode_description: mode.describe(options.stage),
        auto_fallback,
        seed: options.seed,
        rtt,
        loss,
        rate,
        ceiling,
        passed,
        total_seconds: started.elapsed().as_secs_f64(),
    })
}
