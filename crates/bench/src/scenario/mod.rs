//! One benchmark cell, end to end: an optional emulated network path ([`crate::netpath`]), the
//! server side (a hub listening only on the transport under test plus `W` echo workers,
//! [`crate::server`]) and, on its own thread and runtime, the client side this module drives:
//!
//! 1. connect `A` clients concurrently (each with its own connector and socket) and time it;
//! 2. closed loop: each client keeps `window` requests in flight; warm-up, measured window
//!    (with CPU readings of hub, agents and emulator at both ends), bounded drain;
//! 3. open loop: requests at a fixed total rate, timed from their intended send time;
//! 4. priority probe: one more client sends small requests of every priority class at a fixed
//!    rate while bulk low-priority requests share its connection;
//! 5. QUIC only: close the clients and reconnect them all with 0-RTT, timed.
//!
//! The one-way patterns (fan-out, gather, stream) replace steps 2 to 5 with their own load
//! ([`one_way`]).
//!
//! Everything goes through the public API (`Agent`, `Connector`, `AgentHandle::request`,
//! `Incoming::reply`) over real sockets; this module must not use in-process shortcuts for
//! the transport, and must not print or write files.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentwire::transport::TransportKind;
use agentwire::{
    Agent, AgentError, AgentHandle, AgentOptions, Connector, Destination, HubUrl, Kind, Priority,
};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::netpath::{self, EmulatedPath};
use crate::record::*;
use crate::resources;
use crate::resources::NetTable;
use crate::server::{close_all, HubLauncher, QuicKnobs, ServerReady, ServerSide, ServerSpec};
use crate::stats::{self, OpenLoopSchedule};

pub use crate::cell::{BenchTransport, CellConfig, Pattern};
mod readings;
pub use readings::*;
mod clients;
use clients::*;
mod assemble;
pub use assemble::*;
mod open_loop;
use open_loop::*;
mod probe;
pub use probe::*;
mod one_way;
pub use one_way::HEADER as ONE_WAY_HEADER;

/// Hard cap on requests one in-flight slot may issue in a cell (a second bound besides time).
const MAX_REQUESTS_PER_SLOT: u64 = 50_000_000;

/// At most this many distinct error messages are kept per cell.
const MAX_ERROR_SAMPLES: usize = 5;

/// Runs one cell end to end and tears everything down again. Blocks the calling thread (the
/// server and client sides run on their own threads and runtimes).
pub fn run_cell(config: &CellConfig, launcher: &HubLauncher, seed: u64) -> Result<CellResult> {
    if config.agents == 0
        || config.window == 0
        || (config.workers == 0 && !config.pattern.is_one_way())
    {
        bail!("a cell needs at least one client, a window of one, and for requests one worker");
    }
    if config.transport == BenchTransport::Unix && !config.network.is_loopback() {
        bail!(
            "unix sockets do not cross a network: no {} cell",
            config.network
        );
    }
    let path = if config.network.is_loopback() {
        None
    } else {
        Some(EmulatedPath::start(
            &config.network,
            seed,
            config.tcp_cc.as_deref(),
            config.netsim_stage,
        )?)
    };
    let me = std::process::id();
    resources::reset_peak_rss(me);
    let drops_before = path.is_none().then(resources::udp_rcvbuf_errors).flatten();
    let server = ServerSide::start(ServerSpec {
        transport: config.transport,
        workers: config.workers,
        netns: path.as_ref().map(|p| p.server_ns().to_owned()),
        host: match &path {
            Some(_) => EmulatedPath::server_addr().to_string(),
            None => "127.0.0.1".to_owned(),
        },
        launcher: launcher.clone(),
        quic: QuicKnobs::of(config),
        hub_threads: config.hub_threads,
    })
    .context("starting the hub and workers")?;
    let ready = server.ready.clone();
    let client_ns = path.as_ref().map(|p| p.client_ns().to_owned());
    let cfg = config.clone();
    let client = std::thread::Builder::new()
        .name("bench-clients".into())
        .spawn(move || client_thread(cfg, ready, client_ns))
        .context("spawning the client-side thread")?;
    let outcome = client
        .join()
        .map_err(|_| anyhow!("the client side panicked"))
        .and_then(|r| r);
    server.stop();
    let emulator = path.as_ref().map(EmulatedPath::record);
    if let Some(failure) = path.as_ref().and_then(EmulatedPath::failure) {
        bail!("the emulator failed during the cell: {failure}");
    }
    let outcome = outcome?;
    let mut result = assemble(config, launcher, &path, outcome, emulator);
    result.udp_rcvbuf_errors = drops_before
        .zip(resources::udp_rcvbuf_errors())
        .map(|(before, after)| after.saturating_sub(before));
    Ok(result)
}
