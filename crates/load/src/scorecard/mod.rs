//! `agentwire scorecard`: the same fixed set of HTTP scenarios over h3, h2 and http/1.1 side
//! by side, in the spirit of curl's scorecard, built entirely from [`crate::load::run`] runs
//! against our own in-process [`crate::serve`] server (or another server that serves the
//! standard files, see [`crate::files::STANDARD_FILES`]).
//!
//! The scenarios, each run once per protocol (interleaved: scenario by scenario, so slow
//! drift of the machine hits every protocol alike):
//!
//! 1. handshakes: short connections, one 1 KB request each (connect p50/p99, handshakes/s);
//! 2. serial downloads of 10 KB, 100 KB, 1 MB and 10 MB on one connection, one stream;
//! 3. the same downloads all in parallel on one connection (http/1.1: one connection each);
//! 4. requests/s for 10 KB at several parallelisms (streams on one connection; http/1.1:
//!    connections);
//! 5. round 1, many 630-byte requests over many connections × streams; round 2, 10 MB
//!    requests over fewer connections × streams;
//! 6. long-connection requests/s for 5 KB, 15 KB and 2 MB, and short connections (one request
//!    each) for 1 KB.
//!
//! With [`ScorecardConfig::server_pid`] (a server on this machine) every run also records
//! the server's CPU time, shown as server CPU microseconds per request: it ranks servers even
//! when the client, not the server, limits requests per second. Scenarios with several
//! connections can spread them over [`ScorecardConfig::threads`] client threads. The
//! [`crate::compare`] module puts the scorecards of several servers side by side.
//!
//! How many of everything is a [`Scale`] ([`Scale::full`], [`Scale::quick`], [`Scale::tiny`]),
//! recorded in the result. Every scenario is bounded in count and in time
//! ([`Scale::scenario_timeout`]); a run cut short, a run that could not start and every
//! failed request are counted in [`Scorecard::total_errors`] and shown in the Markdown
//! ([`render_markdown`]) — never dropped.
//!
//! This module must not print (progress goes through a callback, rendering is the caller's),
//! must not write a second HTTP client (it only configures `load::run`), and must not leave
//! anything behind: the in-process server and its temporary directory end with [`run`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde::{Serialize, Serializer};

use agentwire_measure::resources;

use crate::load::{self, Limit, LoadConfig, Trust};
use crate::report::LoadReport;
use crate::serve::{self, ServeConfig};
use crate::Proto;

/// Schema name of the JSON scorecard.
pub const SCHEMA: &str = "agentwire-scorecard/1";

mod render;
mod specs;

pub use render::{render_markdown, to_json};
use specs::{specs, spread, Spec};

fn ser_secs<S: Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// How many of everything the scorecard runs.
#[derive(Debug, Clone, Serialize)]
pub struct Scale {
    /// `full`, `quick`, `tiny` or a caller's name.
    pub name: String,
    /// Scenario 1: short connections (1 request of 1 KB each).
    pub handshakes: u64,
    /// Scenarios 2 and 3: downloads of each size (serially; then all in parallel).
    pub downloads: u64,
    /// Scenarios 2 and 3: the files downloaded.
    pub download_files: Vec<String>,
    /// Scenario 4: parallelisms measured for 10 KB.
    pub parallelism: Vec<usize>,
    /// Scenarios 4 and 6: length of each requests/s measurement, seconds.
    #[serde(rename = "rps_window_s", serialize_with = "ser_secs")]
    pub rps_window: Duration,
    /// Scenario 5, round 1: 630-byte requests in all.
    pub round1_requests: u64,
    /// Scenario 5, round 1: connections.
    pub round1_connections: usize,
    /// Scenario 5, round 1: streams per connection.
    pub round1_streams: usize,
    /// Scenario 5, round 2: 10 MB requests in all.
    pub round2_requests: u64,
    /// Scenario 5, round 2: connections.
    pub round2_connections: usize,
    /// Scenario 5, round 2: streams per connection.
    pub round2_streams: usize,
    /// Most time any one scenario run may take measuring, seconds; a run cut short by it
    /// counts as an error.
    #[serde(rename = "scenario_timeout_s", serialize_with = "ser_secs")]
    pub scenario_timeout: Duration,
    /// Most time one request may take, seconds.
    #[serde(rename = "request_timeout_s", serialize_with = "ser_secs")]
    pub request_timeout: Duration,
}

impl Scale {
    fn standard(name: &str) -> Scale {
        Scale {
            name: name.into(),
            handshakes: 1000,
            downloads: 50,
            download_files: ["10k.bin", "100k.bin", "1m.bin", "10m.bin"]
                .map(String::from)
                .to_vec(),
            parallelism: vec![1, 6, 25, 50, 100],
            rps_window: Duration::from_secs(10),
            round1_requests: 1_000_000,
            round1_connections: 100,
            round1_streams: 10,
            round2_requests: 400,
            round2_connections: 10,
            round2_streams: 10,
            scenario_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(60),
        }
    }

    /// The full scorecard: 1000 handshakes, ×50 downloads, 10 s per requests/s measurement,
    /// round 1 = 1,000,000 requests, round 2 = 400 × 10 MB.
    pub fn full() -> Scale {
        Scale::standard("full")
    }

    /// About two minutes for three protocols on two cores: 100 handshakes, ×10 downloads,
    /// 2 s per requests/s measurement, round 1 = 20,000 requests, round 2 = 40 × 10 MB.
    pub fn quick() -> Scale {
        Scale {
            handshakes: 100,
            downloads: 10,
            rps_window: Duration::from_secs(2),
            round1_requests: 20_000,
            round2_requests: 40,
            scenario_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(20),
            ..Scale::standard("quick")
        }
    }

    /// Seconds, for tests: a handful of everything, 300 ms per requests/s measurement.
    pub fn tiny() -> Scale {
        Scale {
            handshakes: 5,
            downloads: 3,
            parallelism: vec![1, 6],
            rps_window: Duration::from_millis(300),
            round1_requests: 200,
            round1_connections: 4,
            round1_streams: 5,
            round2_requests: 2,
            round2_connections: 2,
            round2_streams: 1,
            scenario_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            ..Scale::standard("tiny")
        }
    }

    /// `full`, `quick` or `tiny`.
    pub fn by_name(name: &str) -> Option<Scale> {
        match name {
            "full" => Some(Scale::full()),
            "quick" => Some(Scale::quick()),
            "tiny" => Some(Scale::tiny()),
            _ => None,
        }
    }
}

/// Which server the scorecard measures.
#[derive(Debug, Clone)]
pub enum ScorecardTarget {
    /// Our own server, started in this process on 127.0.0.1:0 with the standard files and a
    /// freshly generated certificate, trusted through its freshly generated CA.
    InProcess,
    /// Another server at this `https://HOST:PORT` base URL, serving the standard file names.
    Url {
        /// Base URL; the file names are appended to it.
        url: String,
        /// How its certificate is checked.
        trust: Trust,
    },
}

/// Everything a scorecard run needs.
#[derive(Debug, Clone)]
pub struct ScorecardConfig {
    /// The server.
    pub target: ScorecardTarget,
    /// Protocols, in column order.
    pub protos: Vec<Proto>,
    /// How many of everything.
    pub scale: Scale,
    /// Client threads for scenarios with several connections (their connections are spread
    /// over up to this many threads; a one-connection scenario always uses one thread).
    pub threads: usize,
    /// The server's process id, to measure the CPU time it spends on each scenario (a server
    /// on this machine; see [`ScenarioRun::server_cpu_s`]).
    pub server_pid: Option<u32>,
    /// A name for the server in reports and comparisons (default: `agentwire serve` for the
    /// in-process server, else the URL).
    pub label: Option<String>,
}

impl ScorecardConfig {
    /// Our in-process server, over `protos`, at `scale`, one client thread.
    pub fn in_process(protos: Vec<Proto>, scale: Scale) -> Self {
        ScorecardConfig {
            target: ScorecardTarget::InProcess,
            protos,
            scale,
            threads: 1,
            server_pid: None,
            label: None,
        }
    }
}

/// The machine the scorecard ran on (from [`agentwire_measure::environment::Environment`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct EnvironmentSummary {
    /// CPU model, if known.
    pub cpu_model: Option<String>,
    /// Logical cores.
    pub cores: usize,
    /// Kernel release, if known.
    pub kernel: Option<String>,
    /// Git commit of the build, if known.
    pub git_sha: Option<String>,
    /// `debug` or `release`.
    pub build_profile: String,
    /// Target triple / platform of the build.
    pub platform: String,
}

impl EnvironmentSummary {
    /// Probes this machine (best effort).
    pub fn detect() -> Self {
        // The scorecard records no network facts, so no UDP socket is probed.
        let e = agentwire_measure::environment::Environment::detect(None);
        EnvironmentSummary {
            cpu_model: e.cpu_model,
            cores: e.cores,
            kernel: e.kernel,
            git_sha: e.git_sha,
            build_profile: e.build_profile.into(),
            platform: e.target,
        }
    }
}

/// The server that was measured.
#[derive(Debug, Clone, Serialize)]
pub struct TargetInfo {
    /// Its name in reports and comparisons.
    pub label: String,
    /// Its process id, when its CPU time was measured.
    pub server_pid: Option<u32>,
    /// Client threads for scenarios with several connections.
    pub client_threads: usize,
    /// `in-process` or `url`.
    pub kind: String,
    /// Base URL the files were requested from.
    pub url: String,
    /// Certificate verification: `ca` (the generated CA for in-process), `insecure` or `none`.
    pub verification: String,
}

/// One table line of a scenario run: a number and how to read it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metric {
    /// What it is, with its unit, e.g. `p50 ms`, `req/s`, `MB/s`.
    pub name: String,
    /// The value.
    pub value: f64,
    /// A rate (more is better): the Markdown shows h3/h2 and h3/http1.1 ratios for it.
    pub rate: bool,
}

impl Metric {
    fn new(name: &str, value: f64, rate: bool) -> Self {
        Metric {
            name: name.into(),
            value,
            rate,
        }
    }
}

/// One scenario over one protocol: what was asked, and the load report's key numbers.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioRun {
    /// Scenario id, the same for every protocol, e.g. `serial-10k.bin`, `rps-10k-p25`.
    pub scenario: String,
    /// Scenario number, 1 to 6.
    pub group: u8,
    /// What it measures, for people.
    pub title: String,
    /// Protocol.
    pub proto: Proto,
    /// File requested.
    pub file: String,
    /// Connections open at once.
    pub connections: usize,
    /// Streams (requests in flight) per connection.
    pub streams: usize,
    /// Client threads the connections were spread over.
    pub threads: usize,
    /// Requests per connection before it is replaced (0 = unlimited).
    pub max_requests_per_conn: u64,
    /// Requests asked for (count-limited runs).
    pub requests_asked: Option<u64>,
    /// Measuring window, seconds (time-limited runs).
    pub duration_s: Option<f64>,
    /// A protocol-specific change of the scenario (e.g. http/1.1 using connections for
    /// parallelism).
    pub note: Option<String>,
    /// Requests measured (answered or failed).
    pub requests: u64,
    /// 2xx responses.
    pub succeeded: u64,
    /// Failed requests and connection attempts, plus non-2xx responses.
    pub errors: u64,
    /// Failures by kind (`status-NNN` for non-2xx responses).
    pub errors_by_kind: BTreeMap<String, u64>,
    /// One message per kind of failure.
    pub error_examples: BTreeMap<String, String>,
    /// The run could not be made at all (its error).
    pub failure: Option<String>,
    /// A count-limited run stopped by [`Scale::scenario_timeout`] before its count.
    pub cut_short: bool,
    /// Measured window, seconds.
    pub elapsed_s: f64,
    /// Complete responses per second.
    pub rps: f64,
    /// Response body megabytes (10^6 bytes) per second.
    pub mb_per_s: f64,
    /// Connections established.
    pub connections_made: u64,
    /// Connections established per second.
    pub handshakes_per_s: f64,
    /// Connect time p50, milliseconds.
    pub connect_p50_ms: f64,
    /// Connect time p99, milliseconds.
    pub connect_p99_ms: f64,
    /// Request time mean, milliseconds.
    pub request_mean_ms: f64,
    /// Request time p50, milliseconds.
    pub request_p50_ms: f64,
    /// Request time p99, milliseconds.
    pub request_p99_ms: f64,
    /// Time to first byte p50, milliseconds.
    pub ttfb_p50_ms: f64,
    /// CPU seconds (user + system) the server process used during the run (with
    /// [`ScorecardConfig::server_pid`]).
    pub server_cpu_s: Option<f64>,
    /// Server CPU microseconds per successful request.
    pub server_us_per_request: Option<f64>,
    /// CPU seconds the load generator used during the run (measuring another server only:
    /// with the in-process server, the process's time is both sides').
    pub client_cpu_s: Option<f64>,
    /// The numbers shown in the Markdown table for this run.
    pub metrics: Vec<Metric>,
}

impl ScenarioRun {
    /// Everything that went wrong: failed requests, a failed start, a cut-short run.
    pub fn problems(&self) -> u64 {
        self.errors + u64::from(self.failure.is_some()) + u64::from(self.cut_short)
    }
}

/// A whole scorecard (JSON schema [`SCHEMA`]).
#[derive(Debug, Clone, Serialize)]
pub struct Scorecard {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// When it was made, seconds since the Unix epoch.
    pub generated_unix_s: u64,
    /// The machine.
    pub environment: EnvironmentSummary,
    /// The server.
    pub target: TargetInfo,
    /// How many of everything.
    pub scale: Scale,
    /// Protocols, in column order.
    pub protos: Vec<Proto>,
    /// Every scenario × protocol, in the order run.
    pub runs: Vec<ScenarioRun>,
    /// Sum of [`ScenarioRun::problems`] over every run.
    pub total_errors: u64,
    /// Wall time of the whole scorecard, seconds.
    pub elapsed_s: f64,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Runs one scenario over one protocol. Never fails: a run that cannot be made is recorded
/// as such.
fn measure(
    spec: &Spec,
    proto: Proto,
    base: &str,
    trust: &Trust,
    config: &ScorecardConfig,
) -> ScenarioRun {
    let scale = &config.scale;
    let load_config_threads = config.threads;
    let (connections, streams, note) = if proto == Proto::Http11 && spec.streams > 1 {
        let c = spec.connections.saturating_mul(spec.streams);
        (
            c,
            1,
            Some(format!(
                "http/1.1 has no multiplexing: {c} connections x 1 stream instead of {} x {}",
                spec.connections, spec.streams
            )),
        )
    } else {
        (spec.connections, spec.streams, None)
    };
    let threads = spread(connections, load_config_threads);
    let mut load = LoadConfig::new(vec![format!("{base}/{}", spec.file)]);
    load.proto = proto;
    load.threads = threads;
    load.connections = connections / threads;
    load.streams = streams;
    load.max_requests_per_conn = spec.max_per_conn;
    load.limit = spec.limit;
    load.trust = trust.clone();
    load.request_timeout = scale.request_timeout;
    load.deadline = Some(scale.scenario_timeout);
    let requests_asked = match spec.limit {
        Limit::Requests(n) => Some(n),
        Limit::Duration(_) => None,
    };
    let mut run = ScenarioRun {
        scenario: spec.scenario.clone(),
        group: spec.group,
        title: spec.title.clone(),
        proto,
        file: spec.file.into(),
        connections,
        streams,
        threads,
        max_requests_per_conn: spec.max_per_conn,
        requests_asked,
        duration_s: match spec.limit {
            Limit::Duration(d) => Some(d.as_secs_f64()),
            Limit::Requests(_) => None,
        },
        note,
        requests: 0,
        succeeded: 0,
        errors: 0,
        errors_by_kind: BTreeMap::new(),
        error_examples: BTreeMap::new(),
        failure: None,
        cut_short: false,
        elapsed_s: 0.0,
        rps: 0.0,
        mb_per_s: 0.0,
        connections_made: 0,
        handshakes_per_s: 0.0,
        connect_p50_ms: 0.0,
        connect_p99_ms: 0.0,
        request_mean_ms: 0.0,
        request_p50_ms: 0.0,
        request_p99_ms: 0.0,
        ttfb_p50_ms: 0.0,
        server_cpu_s: None,
        server_us_per_request: None,
        client_cpu_s: None,
        metrics: Vec::new(),
    };
    let server_cpu = || config.server_pid.and_then(resources::process_cpu_seconds);
    let before = server_cpu();
    let outcome = load::run(&load);
    let after = server_cpu();
    match outcome {
        Ok(report) => {
            fill(&mut run, &report);
            if matches!(config.target, ScorecardTarget::Url { .. }) {
                run.client_cpu_s = report.cpu_seconds;
            }
        }
        Err(e) => run.failure = Some(format!("{e:#}")),
    }
    if let (Some(a), Some(b)) = (before, after) {
        let cpu = (b - a).max(0.0);
        run.server_cpu_s = Some(cpu);
        run.server_us_per_request = (run.succeeded > 0).then(|| cpu * 1e6 / run.succeeded as f64);
    }
    run.metrics = (spec.metrics)(&run);
    if let Some(us) = run.server_us_per_request {
        run.metrics.push(Metric::new(SERVER_CPU_METRIC, us, false));
    }
    run
}

/// The metric name of the server's CPU time per request.
pub const SERVER_CPU_METRIC: &str = "server CPU us/req";

fn fill(run: &mut ScenarioRun, r: &LoadReport) {
    run.requests = r.requests;
    run.succeeded = r.succeeded;
    run.errors_by_kind.clone_from(&r.errors_by_kind);
    run.error_examples.clone_from(&r.error_examples);
    let mut non_2xx = 0;
    for (status, n) in &r.status {
        if !status.starts_with('2') {
            non_2xx += n;
            run.errors_by_kind.insert(format!("status-{status}"), *n);
        }
    }
    run.errors = r.errors + non_2xx;
    run.cut_short = run.requests_asked.is_some_and(|n| r.requests < n);
    run.elapsed_s = r.elapsed_s;
    run.rps = r.rps;
    run.mb_per_s = r.bytes_per_s / 1e6;
    run.connections_made = r.connections;
    run.handshakes_per_s = r.handshakes_per_s;
    run.connect_p50_ms = ms(r.latency.connect.p50_us);
    run.connect_p99_ms = ms(r.latency.connect.p99_us);
    run.request_mean_ms = r.latency.request.mean_us / 1000.0;
    run.request_p50_ms = ms(r.latency.request.p50_us);
    run.request_p99_ms = ms(r.latency.request.p99_us);
    run.ttfb_p50_ms = ms(r.latency.ttfb.p50_us);
}

/// Checks, before any scenario, that every protocol reaches the server (one request; TCP
/// protocols first, as refusals there are immediate) and then that it serves every file the
/// scorecard asks for (one request per file on one connection). A failed connection stops the
/// check at once, so an unreachable server costs at most one connect timeout.
fn preflight(protos: &[Proto], base: &str, trust: &Trust, files: &[&str]) -> Result<()> {
    let mut order: Vec<Proto> = protos.to_vec();
    order.sort_by_key(|p| *p == Proto::H3);
    for proto in order {
        let first = files.first().copied().unwrap_or("1k.bin");
        for check in [&[first][..], files] {
            let mut config = LoadConfig::new(check.iter().map(|f| format!("{base}/{f}")).collect());
            config.proto = proto;
            config.limit = Limit::Requests(check.len() as u64);
            config.trust = trust.clone();
            config.connect_timeout = Duration::from_secs(3);
            config.request_timeout = Duration::from_secs(30);
            config.deadline = Some(Duration::from_secs(30));
            let report = load::run(&config).with_context(|| format!("{base} over {proto}"))?;
            let wanted = check.len() as u64;
            if report.succeeded != wanted {
                let why = report
                    .error_examples
                    .iter()
                    .next()
                    .map(|(k, e)| format!("{k}: {e}"))
                    .or_else(|| {
                        report
                            .status
                            .iter()
                            .find(|(s, _)| !s.starts_with('2'))
                            .map(|(s, _)| {
                                format!(
                                    "HTTP status {s} (does it serve the standard files {}?)",
                                    files.join(" ")
                                )
                            })
                    })
                    .unwrap_or_else(|| "no answer".into());
                bail!(
                    "cannot use {base} over {proto}: {} of {wanted} check request(s) failed: {why}",
                    wanted - report.succeeded
                );
            }
        }
    }
    Ok(())
}

/// Runs the scorecard: starts the in-process server if asked, checks the target, runs every
/// scenario for every protocol, calls `progress` after each run, and stops the server.
/// Errors only when nothing can be measured (bad configuration, server unreachable or not
/// serving the standard files); errors inside scenarios are recorded in the result.
pub fn run(config: &ScorecardConfig, progress: &mut dyn FnMut(&ScenarioRun)) -> Result<Scorecard> {
    if config.protos.is_empty() {
        bail!("give at least one protocol (h3, h2, http1.1)");
    }
    if config.threads == 0 || config.threads > load::MAX_THREADS {
        bail!("--threads must be 1..={}", load::MAX_THREADS);
    }
    if let Some(pid) = config.server_pid {
        if resources::process_cpu_seconds(pid).is_none() {
            bail!("--server-pid {pid}: no such process to measure (/proc/{pid}/stat)");
        }
    }
    let started = Instant::now();
    let scale = &config.scale;
    if scale.handshakes == 0
        || scale.downloads == 0
        || scale.round1_requests == 0
        || scale.round2_requests == 0
        || scale.rps_window.is_zero()
        || scale.scenario_timeout.is_zero()
    {
        bail!("every count and time of the scale must be more than zero");
    }
    // Keep the temporary directory and server alive until the end of the run.
    let mut _dir: Option<tempfile::TempDir> = None;
    let mut server: Option<serve::ServerHandle> = None;
    let (base, trust, target) = match &config.target {
        ScorecardTarget::InProcess => {
            let dir = tempfile::tempdir().context("creating a temporary directory")?;
            let certs: PathBuf = dir.path().join("certs");
            let bundle = agentwire_tls::generate(&agentwire_tls::default_hub_names())
                .context("generating a certificate")?;
            agentwire_tls::write_cert_dir(&certs, &bundle, false)
                .with_context(|| format!("writing certificates into {}", certs.display()))?;
            let mut sc = ServeConfig::new(dir.path().join("www"), certs.clone());
            sc.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            sc.generate = true;
            let handle = serve::start(sc).context("starting the in-process server")?;
            let base = format!("https://{}", handle.local_addr());
            server = Some(handle);
            _dir = Some(dir);
            (
                base.clone(),
                Trust::Ca(certs.join("ca.pem")),
                TargetInfo {
                    label: config
                        .label
                        .clone()
                        .unwrap_or_else(|| "agentwire serve".into()),
                    server_pid: None,
                    client_threads: config.threads,
                    kind: "in-process".into(),
                    url: base,
                    verification: "ca".into(),
                },
            )
        }
        ScorecardTarget::Url { url, trust } => {
            let base = url.trim_end_matches('/').to_owned();
            if !base.starts_with("https://") {
                bail!("{url}: the scorecard needs an https://HOST:PORT URL");
            }
            let verification = match trust {
                Trust::Ca(_) => "ca",
                Trust::Insecure => "insecure",
                Trust::NoCa => "none",
            };
            (
                base.clone(),
                trust.clone(),
                TargetInfo {
                    label: config.label.clone().unwrap_or_else(|| base.clone()),
                    server_pid: config.server_pid,
                    client_threads: config.threads,
                    kind: "url".into(),
                    url: base,
                    verification: verification.into(),
                },
            )
        }
    };
    let specs = specs(scale);
    let mut files: Vec<&str> = specs.iter().map(|s| s.file).collect();
    files.sort_unstable();
    files.dedup();
    preflight(&config.protos, &base, &trust, &files)?;
    let mut runs = Vec::new();
    for spec in &specs {
        for &proto in &config.protos {
            let r = measure(spec, proto, &base, &trust, config);
            progress(&r);
            runs.push(r);
        }
    }
    if let Some(s) = server {
        s.stop();
    }
    let total_errors = runs.iter().map(ScenarioRun::problems).sum();
    Ok(Scorecard {
        schema: SCHEMA,
        generated_unix_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        environment: EnvironmentSummary::detect(),
        target,
        scale: scale.clone(),
        protos: config.protos.clone(),
        runs,
        total_errors,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// A number for a table: no decimals from 1000 up, one from 100, else two.
pub(crate) fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::render::ratio;
    use super::*;

    fn run_of(scenario: &str, proto: Proto, metrics: Vec<Metric>) -> ScenarioRun {
        ScenarioRun {
            scenario: scenario.into(),
            group: 4,
            title: format!("title of {scenario}"),
            proto,
            file: "10k.bin".into(),
            connections: 1,
            streams: 1,
            threads: 1,
            max_requests_per_conn: 0,
            requests_asked: None,
            duration_s: Some(1.0),
            note: None,
            requests: 10,
            succeeded: 10,
            errors: 0,
            errors_by_kind: BTreeMap::new(),
            error_examples: BTreeMap::new(),
            failure: None,
            cut_short: false,
            elapsed_s: 1.0,
            rps: 10.0,
            mb_per_s: 0.1,
            connections_made: 1,
            handshakes_per_s: 1.0,
            connect_p50_ms: 1.0,
            connect_p99_ms: 1.0,
            request_mean_ms: 1.0,
            request_p50_ms: 1.0,
            request_p99_ms: 1.0,
            ttfb_p50_ms: 1.0,
            server_cpu_s: None,
            server_us_per_request: None,
            client_cpu_s: None,
            metrics,
        }
    }

    #[test]
    fn connections_spread_evenly_over_threads() {
        assert_eq!(spread(100, 2), 2);
        assert_eq!(spread(1, 4), 1);
        assert_eq!(spread(10, 4), 2);
        assert_eq!(spread(7, 4), 1);
        assert_eq!(spread(1000, 0), 1);
    }

    #[test]
    fn markdown_has_a_column_per_protocol_and_ratios_on_rates() {
        let mut h1 = run_of(
            "rps",
            Proto::Http11,
            vec![
                Metric::new("req/s", 500.0, true),
                Metric::new("p99 ms", 4.0, false),
            ],
        );
        h1.note = Some("http/1.1 has no multiplexing".into());
        h1.errors = 2;
        h1.errors_by_kind.insert("timeout".into(), 2);
        h1.error_examples
            .insert("timeout".into(), "no complete response".into());
        let runs = vec![
            run_of(
                "rps",
                Proto::H3,
                vec![
                    Metric::new("req/s", 1500.0, true),
                    Metric::new("p99 ms", 2.0, false),
                ],
            ),
            run_of(
                "rps",
                Proto::H2,
                vec![
                    Metric::new("req/s", 1000.0, true),
                    Metric::new("p99 ms", 3.0, false),
                ],
            ),
            h1,
        ];
        let card = Scorecard {
            schema: SCHEMA,
            generated_unix_s: 0,
            environment: EnvironmentSummary {
                cores: 2,
                build_profile: "debug".into(),
                platform: "x86_64-linux".into(),
                ..Default::default()
            },
            target: TargetInfo {
                label: "agentwire serve".into(),
                server_pid: None,
                client_threads: 1,
                kind: "in-process".into(),
                url: "https://127.0.0.1:1".into(),
                verification: "ca".into(),
            },
            scale: Scale::tiny(),
            protos: vec![Proto::H3, Proto::H2, Proto::Http11],
            total_errors: runs.iter().map(ScenarioRun::problems).sum(),
            runs,
            elapsed_s: 1.0,
        };
        let md = render_markdown(&card);
        assert!(
            md.contains("| scenario | metric | h3 | h2 | http1.1 | h3/h2 | h3/http1.1 |"),
            "{md}"
        );
        assert!(
            md.contains("| title of rps | req/s | 1500 | 1000 | 500.0 (2 err) | 1.50 | 3.00 |"),
            "{md}"
        );
        // Latency rows get no ratio, and the title is not repeated.
        assert!(
            md.contains("|  | p99 ms | 2.00 | 3.00 | 4.00 (2 err) |  |  |"),
            "{md}"
        );
        assert!(
            md.contains("- rps http1.1: http/1.1 has no multiplexing"),
            "{md}"
        );
        assert!(md.contains("Errors: 2 in all."), "{md}");
        assert!(
            md.contains("timeout: 2 (e.g. no complete response)"),
            "{md}"
        );

        // Without h3 there are no ratio columns; a failed run says so.
        let mut two = card.clone();
        two.protos = vec![Proto::H2, Proto::Http11];
        two.runs.retain(|r| r.proto != Proto::H3);
        two.runs[0].failure = Some("boom".into());
        let md = render_markdown(&two);
        assert!(
            md.contains("| scenario | metric | h2 | http1.1 |\n"),
            "{md}"
        );
        assert!(
            md.contains("| title of rps | req/s | failed | 500.0 (2 err) |"),
            "{md}"
        );
        assert!(md.contains("could not run: boom"), "{md}");
    }

    #[test]
    fn ratios_handle_zero_and_missing() {
        assert_eq!(ratio(Some(3.0), Some(0.0)), "-");
        assert_eq!(ratio(None, Some(1.0)), "-");
        assert_eq!(ratio(Some(1.0), Some(4.0)), "0.25");
    }

    #[test]
    fn every_scale_has_every_scenario() {
        for scale in [Scale::full(), Scale::quick(), Scale::tiny()] {
            let specs = specs(&scale);
            for group in 1..=6 {
                assert!(specs.iter().any(|s| s.group == group), "{}", scale.name);
            }
            assert_eq!(
                specs.len(),
                1 + 2 * scale.download_files.len() + scale.parallelism.len() + 2 + 4
            );
        }
        assert_eq!(Scale::full().round1_requests, 1_000_000);
        assert_eq!(Scale::quick().round1_requests, 20_000);
        assert!(Scale::by_name("nope").is_none());
    }
}
