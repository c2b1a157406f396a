//! The `agentwire` command: parses flags and calls the library crates, nothing more.
//!
//! One file per subcommand family; the families other than the hub's are cargo features
//! (`bench`, `load`, `netsim`, `agent-protocol`, `cluster`), all on by default, so that
//! `--no-default-features --features hub` builds a lean hub binary.

#![warn(missing_docs)]

mod agent_cmd;
#[cfg(feature = "agent-protocol")]
mod agent_protocol;
mod args;
#[cfg(feature = "bench")]
mod bench_cmd;
mod cert_cmd;
mod hub_cmd;
#[cfg(feature = "netsim")]
mod netsim;
mod reload;
#[cfg(feature = "load")]
mod serve_load;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;

use args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    #[cfg(all(target_os = "linux", feature = "netsim"))]
    own_network_if_needed(&cli.command);
    let result = match cli.command {
        // These build their own runtimes (thread counts are part of what they measure).
        #[cfg(feature = "load")]
        Command::Serve(a) => serve_load::serve(a),
        #[cfg(feature = "load")]
        Command::Load(a) => serve_load::load(a),
        #[cfg(feature = "load")]
        Command::Scorecard(a) => serve_load::scorecard(a),
        command => run_async(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", agentwire::error_chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Without root, `bench` (with emulated networks on the bridge stage) and `netsim check` (packet
/// mode on the bridge stage) become root of a user namespace of their own (user, mount and
/// network), as rootless containers do, where the bridge stage's namespaces can be made. Done
/// first, while the process still has one thread; where it fails, the emulated networks are
/// skipped with the reason, as before.
#[cfg(all(target_os = "linux", feature = "netsim"))]
fn own_network_if_needed(command: &Command) {
    use agentwire_netsim::{userns, StageKind};
    if userns::is_root() {
        return;
    }
    let wants = match command {
        #[cfg(feature = "bench")]
        Command::Bench(a) => {
            a.netsim_stage == StageKind::Bridge
                && a.config()
                    .is_ok_and(|c| c.cells().iter().any(|c| !c.network.is_loopback()))
        }
        Command::Netsim(args::NetsimCommand::Check(a)) => {
            a.stage == StageKind::Bridge && a.mode != args::CheckMode::Socket
        }
        _ => false,
    };
    if !wants {
        return;
    }
    match userns::enter() {
        Ok(()) => eprintln!(
            "not root: running in a user namespace of our own (user, mount and network), where \
             the emulated networks can be made"
        ),
        Err(e) => eprintln!("not root, and {e}"),
    }
}

/// Runs the subcommands that share one multi-threaded runtime (the hub's has `--threads`).
fn run_async(command: Command) -> Result<()> {
    let threads = match &command {
        Command::Hub(a) => usize::try_from(a.threads).unwrap_or(0),
        _ => 0,
    };
    let mut builder = match threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    if threads > 1 {
        builder.worker_threads(threads);
    }
    let runtime = builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        match command {
            Command::Cert(a) => cert_cmd::cert(a),
            Command::Hub(a) => hub_cmd::hub(*a).await,
            Command::Agent(a) => agent_cmd::agent(a).await,
            Command::Send(a) => agent_cmd::send(a).await,
            #[cfg(feature = "bench")]
            Command::Bench(a) => bench_cmd::bench(a).await,
            #[cfg(feature = "netsim")]
            Command::Netsim(args::NetsimCommand::Relay(a)) => netsim::relay(a).await,
            #[cfg(feature = "netsim")]
            Command::Netsim(args::NetsimCommand::Up(a)) => netsim::up(a).await,
            #[cfg(feature = "netsim")]
            Command::Netsim(args::NetsimCommand::Check(a)) => netsim::check(a).await,
            #[cfg(feature = "agent-protocol")]
            Command::AgentProtocol(c) => agent_protocol::run(c).await,
            Command::Queue(a) => agent_cmd::queue(a).await,
            Command::Reload(a) => agent_cmd::reload_hub(a).await,
            Command::Token(a) => agent_cmd::token(a),
            #[cfg(feature = "load")]
            Command::Serve(_) | Command::Load(_) | Command::Scorecard(_) => {
                anyhow::bail!(
                    "serve, load and scorecard start their own runtimes; they are run from main"
                )
            }
        }
    })
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info,agentwire=info",
        2 => "info,agentwire=debug",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTWIRE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Runs `tick` every `interval` (never when `None`) until Ctrl-C or SIGTERM arrives.
pub(crate) async fn until_stopped(
    interval: Option<Duration>,
    mut tick: impl FnMut() -> Result<()>,
) -> Result<()> {
    let mut ticker = tokio::time::interval(interval.unwrap_or(Duration::from_secs(3600)));
    ticker.tick().await;
    let stop = wait_for_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = ticker.tick(), if interval.is_some() => tick()?,
        }
    }
}

/// Waits for Ctrl-C or SIGTERM (forever if the handlers cannot be installed).
pub(crate) async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
