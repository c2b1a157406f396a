//! The server side of a cell: a hub listening only on the transport under test and the echo
//! workers that answer the clients' requests, on their own OS thread and Tokio runtime (inside
//! the emulated path's server namespace when there is one).
//!
//! The hub runs as its own `agentwire hub` process ([`HubLauncher::Process`], what
//! `agentwire bench` uses) so that its CPU and memory can be measured apart from the agents,
//! or inside this process ([`HubLauncher::InProcess`], for library tests that have no
//! `agentwire` binary at hand). Either way it is the real hub on real sockets.
//!
//! This module must not drive load or measure requests; it reports only the hub's process id,
//! which the client side reads CPU and peak memory from.

use agentwire_sync::LockExt;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use agentwire::hub::{Hub, HubConfig, Listener};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, HubIdentity};
use agentwire::{
    Agent, AgentHandle, AgentOptions, CongestionControl, HubTrust, HubUrl, Kind, QuicSettings,
};
use anyhow::{anyhow, bail, Context, Result};
use tokio::task::JoinSet;

use crate::cell::{BenchTransport, CellConfig};

/// Time allowed for the hub to start listening and the workers to connect.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Lines of the hub process's stderr kept for error messages.
const STDERR_LINES: usize = 20;

/// How the hub is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubLauncher {
    /// Inside the bench process, on the server side's runtime. Its CPU and memory are then
    /// part of the bench process and cannot be told apart from the agents'.
    InProcess,
    /// As `<exe> hub --listen … --cert-dir …` (the `agentwire` binary), its own process.
    Process(PathBuf),
}

impl HubLauncher {
    /// `process` or `in-process`, as recorded in the results.
    pub fn mode(&self) -> &'static str {
        match self {
            HubLauncher::InProcess => "in-process",
            HubLauncher::Process(_) => "process",
        }
    }
}

/// What the server side needs to start.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// The transport the hub listens on (nothing else).
    pub transport: BenchTransport,
    /// Echo workers to connect, named `worker-0` ….
    pub workers: usize,
    /// Network namespace to run in, if any.
    pub netns: Option<String>,
    /// IP address the hub listens on (`127.0.0.1`, or the server namespace's address).
    pub host: String,
    /// How to run the hub.
    pub launcher: HubLauncher,
    /// The QUIC settings of the hub and the workers.
    pub quic: QuicKnobs,
    /// Runtime threads of a hub run as its own process (`--threads`); an in-process hub runs
    /// on the server side's one thread.
    pub hub_threads: usize,
}

/// The QUIC settings a cell varies, applied alike to the hub, the workers and the clients.
#[derive(Debug, Clone)]
pub struct QuicKnobs {
    /// Congestion control.
    pub cc: CongestionControl,
    /// Concurrent streams each side lets its peer open, per direction type (agents let their
    /// hub open at least their default of unidirectional ones: [`QuicKnobs::apply_to_agent`]).
    pub max_streams: u32,
    /// Upper bound of path MTU discovery, bytes of UDP payload.
    pub max_mtu: u16,
    /// Datagram size on loopback paths (0 = discovered as on any path).
    pub loopback_mtu: u16,
    /// The hub's receive budget, bytes (0 = off).
    pub receive_budget: u64,
    /// UDP sockets and endpoints of the hub's QUIC listener.
    pub endpoints: usize,
    /// Directory for qlog traces, if any.
    pub qlog_dir: Option<PathBuf>,
}

impl QuicKnobs {
    /// The QUIC settings this cell gives the hub, the workers and the clients.
    pub fn of(config: &CellConfig) -> QuicKnobs {
        QuicKnobs {
            cc: config.quic_cc,
            max_streams: config.quic_max_streams,
            max_mtu: config.quic_max_mtu,
            loopback_mtu: config.quic_loopback_mtu,
            receive_budget: config.quic_receive_budget,
            endpoints: config.quic_endpoints,
            qlog_dir: config.qlog_dir.clone(),
        }
    }
}

impl QuicKnobs {
    /// Sets these knobs in an agent's settings: as [`apply`](Self::apply), except that the
    /// agent lets its hub open at least its default of unidirectional streams
    /// ([`QuicSettings::for_agent`]).
    pub fn apply_to_agent(&self, quic: &mut QuicSettings) {
        let agent_uni = quic.max_concurrent_uni_streams;
        self.apply(quic);
        quic.max_concurrent_uni_streams = quic.max_concurrent_uni_streams.max(agent_uni);
    }

    /// Sets these knobs in `quic` (an in-process hub's or an agent's settings).
    pub fn apply(&self, quic: &mut QuicSettings) {
        quic.congestion = self.cc;
        quic.max_concurrent_uni_streams = self.max_streams;
        quic.max_concurrent_bidi_streams = self.max_streams;
        quic.max_mtu = self.max_mtu;
        quic.loopback_mtu = self.loopback_mtu;
        quic.receive_budget = self.receive_budget;
        quic.server_endpoints = self.endpoints;
        quic.qlog_dir.clone_from(&self.qlog_dir);
    }

    /// The same knobs as `agentwire hub` flags.
    fn hub_args(&self) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--cc".into(),
            self.cc.to_string().into(),
            "--max-streams".into(),
            self.max_streams.to_string().into(),
            "--max-mtu".into(),
            self.max_mtu.to_string().into(),
            "--loopback-mtu".into(),
            self.loopback_mtu.to_string().into(),
            "--receive-budget".into(),
            self.receive_budget.to_string().into(),
            "--endpoints".into(),
            self.endpoints.to_string().into(),
        ];
        if let Some(dir) = &self.qlog_dir {
            args.push("--qlog".into());
            args.push(dir.clone().into_os_string());
        }
        args
    }
}

/// The running server side, as the clients see it.
#[derive(Debug, Clone)]
pub struct ServerReady {
    /// The URL the hub listens on, with its real port.
    pub url: String,
    /// Trust for the hub's freshly generated CA.
    pub trust: HubTrust,
    /// The hub's process id when it runs as its own process.
    pub hub_pid: Option<u32>,
}

/// A started server side; [`stop`](Self::stop) ends it.
pub struct ServerSide {
    /// How to reach it.
    pub ready: ServerReady,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerSide {
    /// Starts the hub and the workers on a new thread and waits until all are connected.
    pub fn start(spec: ServerSpec) -> Result<ServerSide> {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<ServerReady>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-server".into())
            .spawn(move || server_thread(spec, ready_tx, stop_rx))
            .context("spawning the server-side thread")?;
        let ready = match ready_rx.recv_timeout(START_TIMEOUT + Duration::from_secs(10)) {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                drop(stop_tx);
                let _ = thread.join();
                bail!("the server side did not come up in time");
            }
        };
        Ok(ServerSide {
            ready,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Closes the workers and stops the hub.
    pub fn stop(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerSide {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A hub this side started: in-process or a child process.
enum RunningHub {
    InProcess {
        hub: Hub,
        listener: Box<Listener>,
    },
    Process {
        child: Child,
        stderr: Arc<Mutex<Vec<String>>>,
        /// Started under [`HUB_WRAPPER_ENV`]: the child leads a process group (the wrapper
        /// and the hub under it), which is stopped as a whole.
        wrapped: bool,
    },
}

/// An environment variable naming a command to run the hub process under, such as a
/// profiler: `AGENTWIRE_BENCH_HUB_WRAPPER=heaptrack agentwire bench ...` (split at spaces;
/// the hub's command line follows it). The wrapper and the hub are asked to stop with SIGTERM,
/// so that a profiler can write its results, and killed after [`WRAPPED_STOP`]. The hub CPU
/// and RSS columns then measure the wrapper's process, not the hub.
pub const HUB_WRAPPER_ENV: &str = "AGENTWIRE_BENCH_HUB_WRAPPER";

/// How long a wrapped hub gets to stop after SIGTERM.
const WRAPPED_STOP: Duration = Duration::from_secs(30);

impl RunningHub {
    fn pid(&self) -> Option<u32> {
        match self {
            RunningHub::InProcess { .. } => None,
            RunningHub::Process { child, .. } => Some(child.id()),
        }
    }

    fn stop(self) {
        match self {
            RunningHub::InProcess { hub, listener } => {
                hub.shutdown();
                listener.close();
            }
            RunningHub::Process {
                mut child,
                wrapped: false,
                ..
            } => {
                let _ = child.kill();
                let _ = child.wait();
            }
            RunningHub::Process { mut child, .. } => {
                use nix::sys::signal::{killpg, Signal};
                let group = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = killpg(group, Signal::SIGTERM);
                let deadline = std::time::Instant::now() + WRAPPED_STOP;
                while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = killpg(group, Signal::SIGKILL);
                let _ = child.wait();
            }
        }
    }
}

fn server_thread(
    spec: ServerSpec,
    ready_tx: mpsc::Sender<Result<ServerReady>>,
    stop_rx: tokio::sync::oneshot::Receiver<()>,
) {
    if let Some(ns) = &spec.netns {
        if let Err(e) = crate::netpath::enter(ns) {
            let _ = ready_tx.send(Err(e));
            return;
        }
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-server-rt")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready_tx.send(Err(anyhow!(e).context("building the server-side runtime")));
            return;
        }
    };
    rt.block_on(async move {
        let dir = match tempfile::Builder::new()
            .prefix("agentwire-bench-")
            .tempdir_in(std::env::temp_dir())
        {
            Ok(d) => d,
            Err(e) => {
                let _ = ready_tx.send(Err(anyhow!(e).context("creating a temporary directory")));
                return;
            }
        };
        let (hub, ready) = match start_hub(&spec, dir.path()).await {
            Ok(v) => v,
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
        let mut echo = JoinSet::new();
        let workers = match connect_workers(&spec, &ready).await {
            Ok(w) => w,
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                hub.stop();
                return;
            }
        };
        let mut handles = Vec::new();
        for agent in workers {
            let (handle, mut inbox) = agent.split();
            handles.push(handle);
            echo.spawn(async move {
                while let Some(msg) = inbox.recv().await {
                    if msg.envelope.kind == Kind::Request {
                        let _ = msg.reply(msg.envelope.body.clone()).await;
                    }
                }
            });
        }
        if ready_tx.send(Ok(ready)).is_ok() {
            // Either a stop or the sender dropped: both end the cell.
            let _ = stop_rx.await;
        }
        close_all(handles).await;
        echo.abort_all();
        hub.stop();
        drop(dir);
    })
}

async fn start_hub(spec: &ServerSpec, dir: &std::path::Path) -> Result<(RunningHub, ServerReady)> {
    let mut names = tls::default_hub_names();
    if !names.contains(&spec.host) {
        names.push(spec.host.clone());
    }
    let bundle = tls::generate(&names).context("generating certificates")?;
    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).context("trusting the generated CA")?;
    let listen = match spec.transport {
        // WebTransport sessions come in on the QUIC port (`hub --webtransport`).
        BenchTransport::Quic | BenchTransport::QuicLanes | BenchTransport::Wt => {
            format!("quic://{}:0", spec.host)
        }
        BenchTransport::H2 => format!("h2://{}:0", spec.host),
        BenchTransport::Wss => format!("wss://{}:0", spec.host),
        BenchTransport::Unix => format!("unix://{}", dir.join("hub.sock").display()),
    };
    match &spec.launcher {
        HubLauncher::InProcess => {
            let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem)
                .context("loading the generated hub identity")?;
            let config = HubConfig {
                stream_mapping: spec.transport.mapping(),
                handshake_timeout: START_TIMEOUT,
                webtransport: (spec.transport == BenchTransport::Wt)
                    .then(agentwire::hub::WebTransportConfig::default),
                ..HubConfig::default()
            };
            let mut config = config;
            spec.quic.apply(&mut config.quic);
            let url = HubUrl::parse(&listen).map_err(|e| anyhow!(e))?;
            let hub = Hub::new(config, HubMetrics::new());
            let listener = match hub.listen(&url, Some(&identity)).await {
                Ok(l) => l,
                Err(e) => {
                    hub.shutdown();
                    return Err(anyhow!(e).context(format!("listening on {url}")));
                }
            };
            let ready = ServerReady {
                url: agent_url(spec.transport, &listener.url.to_string()),
                trust,
                hub_pid: None,
            };
            Ok((
                RunningHub::InProcess {
                    hub,
                    listener: Box::new(listener),
                },
                ready,
            ))
        }
        HubLauncher::Process(exe) => {
            let certs = dir.join("certs");
            tls::write_cert_dir(&certs, &bundle, false).context("writing the hub certificates")?;
            let mapping = match spec.transport {
                BenchTransport::QuicLanes => "lanes",
                _ => "per-message",
            };
            let wrapper = std::env::var(HUB_WRAPPER_ENV).unwrap_or_default();
            let mut words = wrapper.split_whitespace();
            let (mut command, wrapped) = match words.next() {
                Some(program) => {
                    let mut command = Command::new(program);
                    // The wrapper needs the binary's path (it starts it itself).
                    command
                        .args(words)
                        .arg(std::fs::read_link(exe).with_context(|| {
                            format!("reading {} for {HUB_WRAPPER_ENV}", exe.display())
                        })?);
                    command.process_group(0);
                    eprintln!(
                        "the hub runs under `{}` ({HUB_WRAPPER_ENV}): its CPU and RSS columns \
                         measure that process, not the hub",
                        wrapper.trim()
                    );
                    (command, true)
                }
                None => (Command::new(exe), false),
            };
            // The hub dies with the thread that started it, even if the bench is killed.
            // SAFETY: the closure runs between fork and exec and only calls prctl(2), which is
            // async-signal-safe, and allocates nothing.
            unsafe {
                command.pre_exec(|| {
                    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                        .map_err(std::io::Error::from)
                });
            }
            let mut child = command
                .arg("hub")
                .args(["--listen", &listen])
                .arg("--cert-dir")
                .arg(&certs)
                .args(["--mapping", mapping])
                .args((spec.transport == BenchTransport::Wt).then_some("--webtransport"))
                // A thousand agents connecting at once over an emulated 100 ms path on two
                // cores can take longer than the default 10 s; the bench measures how long.
                .args(["--handshake-timeout-ms", "60000"])
                .args(spec.quic.hub_args())
                .args(["--threads", &spec.hub_threads.to_string()])
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .with_context(|| format!("starting the hub process {}", exe.display()))?;
            let stderr = Arc::new(Mutex::new(Vec::new()));
            if let Some(err) = child.stderr.take() {
                let keep = stderr.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(err).lines().map_while(Result::ok) {
                        let mut k = keep.lock_or_recover();
                        if k.len() == STDERR_LINES {
                            k.remove(0);
                        }
                        k.push(line);
                    }
                });
            }
            let (url_tx, url_rx) = mpsc::channel::<String>();
            if let Some(out) = child.stdout.take() {
                std::thread::spawn(move || {
                    // Keep reading to the end so the hub never blocks on a full pipe.
                    for line in BufReader::new(out).lines().map_while(Result::ok) {
                        if let Some(rest) = line.strip_prefix("hub listening on ") {
                            let url = rest.split_whitespace().next().unwrap_or("").to_owned();
                            let _ = url_tx.send(url);
                        }
                    }
                });
            }
            let hub = RunningHub::Process {
                child,
                stderr,
                wrapped,
            };
            let url = tokio::task::spawn_blocking(move || url_rx.recv_timeout(START_TIMEOUT))
                .await
                .ok()
                .and_then(Result::ok);
            match url {
                Some(url) if !url.is_empty() => {
                    let ready = ServerReady {
                        url: agent_url(spec.transport, &url),
                        trust,
                        hub_pid: hub.pid(),
                    };
                    Ok((hub, ready))
                }
                _ => {
                    let lines = match &hub {
                        RunningHub::Process { stderr, .. } => stderr.lock_or_recover().join("\n"),
                        RunningHub::InProcess { .. } => String::new(),
                    };
                    hub.stop();
                    bail!("the hub process did not report its address; its stderr:\n{lines}")
                }
            }
        }
    }
}

/// The URL agents dial for `transport`, from the one the hub listens on (WebTransport: the
/// QUIC port, `wt://`).
fn agent_url(transport: BenchTransport, listening: &str) -> String {
    match transport {
        BenchTransport::Wt => listening.replacen("quic://", "wt://", 1),
        _ => listening.to_owned(),
    }
}

async fn connect_workers(spec: &ServerSpec, ready: &ServerReady) -> Result<Vec<Agent>> {
    let mut connecting = JoinSet::new();
    for i in 0..spec.workers {
        let mut o = AgentOptions::new(
            format!("worker-{i}"),
            ready.url.clone(),
            ready.trust.clone(),
        );
        o.stream_mapping = spec.transport.mapping();
        o.connect_timeout = START_TIMEOUT;
        spec.quic.apply_to_agent(&mut o.quic);
        connecting.spawn(async move { Agent::connect(o).await });
    }
    let mut agents = Vec::with_capacity(spec.workers);
    let mut first_error = None;
    while let Some(joined) = connecting.join_next().await {
        match joined {
            Ok(Ok(a)) if a.transport() == spec.transport.kind() => agents.push(a),
            Ok(Ok(a)) => {
                first_error.get_or_insert_with(|| {
                    anyhow!(
                        "worker connected over {}, expected {}",
                        a.transport(),
                        spec.transport.kind()
                    )
                });
            }
            Ok(Err(e)) => {
                first_error.get_or_insert_with(|| anyhow!("connecting a worker: {e}"));
            }
            Err(e) => {
                first_error.get_or_insert_with(|| anyhow!("worker connect task failed: {e}"));
            }
        }
    }
    match first_error {
        None => Ok(agents),
        Some(e) => {
            close_all(agents.iter().map(|a| a.handle().clone()).collect()).await;
            Err(e)
        }
    }
}

/// Time allowed for closing all agents at the end of a cell.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Closes every agent concurrently, waiting at most [`CLOSE_TIMEOUT`].
pub(crate) async fn close_all(handles: Vec<AgentHandle>) {
    let mut closing = JoinSet::new();
    for h in handles {
        closing.spawn(async move { h.close().await });
    }
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        while closing.join_next().await.is_some() {}
    })
    .await;
    closing.abort_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_keep_at_least_their_default_of_unidirectional_streams() {
        let mut config = crate::BenchConfig::default().cells().remove(0);
        let knobs = |config: &CellConfig| QuicKnobs::of(config);
        let (mut hub, mut agent) = (QuicSettings::default(), QuicSettings::for_agent());
        knobs(&config).apply(&mut hub);
        knobs(&config).apply_to_agent(&mut agent);
        assert_eq!(hub.max_concurrent_uni_streams, 256);
        assert_eq!(agent.max_concurrent_uni_streams, 1024);
        assert_eq!(agent.max_concurrent_bidi_streams, 256);
        config.quic_max_streams = 4096;
        let mut agent = QuicSettings::for_agent();
        knobs(&config).apply_to_agent(&mut agent);
        assert_eq!(agent.max_concurrent_uni_streams, 4096);
        assert_eq!(agent.max_concurrent_bidi_streams, 4096);
    }
}
