//! The flags of `agentwire serve`, `load` and `scorecard` (feature `load`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Directory whose files are served (all loaded into memory at start; up to 4 GiB).
    #[arg(long)]
    pub root: PathBuf,
    /// Address for both listeners: UDP for HTTP/3, TCP (same port) for HTTP/2 and HTTP/1.1.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// Directory holding hub.pem and hub.key (see `agentwire cert`).
    #[arg(long)]
    pub cert_dir: PathBuf,
    /// First write the standard benchmark files into --root: 630b.bin, 1k.bin, 5k.bin,
    /// 10k.bin, 15k.bin, 100k.bin, 1m.bin, 2m.bin, 10m.bin (deterministic content).
    #[arg(long)]
    pub generate: bool,
    /// Runtime worker threads: 1 = a single-threaded runtime (for per-core comparisons);
    /// 0 = one per CPU.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

impl ServeArgs {
    pub fn config(&self) -> agentwire_load::serve::ServeConfig {
        let mut c =
            agentwire_load::serve::ServeConfig::new(self.root.clone(), self.cert_dir.clone());
        c.listen = self.listen;
        c.threads = self.threads;
        c.generate = self.generate;
        c
    }
}

pub(crate) fn parse_duration_arg(s: &str) -> Result<Duration, agentwire_load::DurationError> {
    agentwire_load::parse_duration(s)
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// https:// URLs to request, in turn (all on the same server).
    #[arg(required = true)]
    pub urls: Vec<String>,
    /// Protocol: h3, h2 or http1.1.
    #[arg(long, default_value = "h3")]
    pub proto: agentwire_load::Proto,
    /// Client threads, each with its own single-threaded runtime (and, for h3, UDP socket).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Connections per thread.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Requests in flight per connection (http1.1: must be 1; use more --connections).
    #[arg(long, default_value_t = 1)]
    pub streams: usize,
    /// Requests per connection before it is replaced by a new one; 0 = unlimited, 1 = every
    /// request pays a handshake (a full one unless --resume).
    #[arg(long, default_value_t = 0)]
    pub max_requests_per_conn: u64,
    /// Keep the TLS session tickets servers send and resume sessions with them on new
    /// connections (the report counts full and resumed handshakes).
    #[arg(long)]
    pub resume: bool,
    /// h3 only: send the first requests of a new connection as 0-RTT data when a ticket
    /// allows it (implies --resume; the report counts accepted and rejected 0-RTT). Requests
    /// in rejected 0-RTT data are sent again, not counted as errors.
    #[arg(long = "0rtt")]
    pub zero_rtt: bool,
    /// Stop after this many requests (default: --duration 10s).
    #[arg(long, conflicts_with = "duration")]
    pub requests: Option<u64>,
    /// Stop after this long, e.g. 3s, 500ms, 1m (default: 10s).
    #[arg(long, value_parser = parse_duration_arg)]
    pub duration: Option<Duration>,
    /// Run this long before measuring (not counted, not part of --requests).
    #[arg(long, value_parser = parse_duration_arg, default_value = "0s")]
    pub warmup: Duration,
    /// Open loop: this many requests per second in all, latency timed from each request's
    /// intended send time. Without it: closed loop.
    #[arg(long)]
    pub rate: Option<f64>,
    /// CA certificate that signed the server's certificate (e.g. CERTS/ca.pem).
    #[arg(long, conflicts_with = "insecure")]
    pub ca: Option<PathBuf>,
    /// Accept any server certificate. For testing only.
    #[arg(long)]
    pub insecure: bool,
    /// TLS server name (default: the URL's host).
    #[arg(long)]
    pub server_name: Option<String>,
    /// Most time a connection may take (TCP + TLS, or the QUIC handshake).
    #[arg(long, value_parser = parse_duration_arg, default_value = "5s")]
    pub connect_timeout: Duration,
    /// Most time a request may take, body included.
    #[arg(long, value_parser = parse_duration_arg, default_value = "10s")]
    pub timeout: Duration,
    /// Per-stream flow-control window for h2 and h3, bytes.
    #[arg(long, default_value_t = 2 * 1024 * 1024)]
    pub stream_window: u32,
    /// Per-connection flow-control window for h2 and h3, bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    pub conn_window: u32,
    /// Print one JSON object (schema agentwire-load/2) on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// No progress bar (there is none anyway when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
}

impl LoadArgs {
    pub fn config(&self) -> Result<agentwire_load::load::LoadConfig> {
        use agentwire_load::load::{Limit, LoadConfig, Trust};
        let mut c = LoadConfig::new(self.urls.clone());
        c.proto = self.proto;
        c.threads = self.threads;
        c.connections = self.connections;
        c.streams = self.streams;
        c.max_requests_per_conn = self.max_requests_per_conn;
        c.resume = self.resume || self.zero_rtt;
        c.zero_rtt = self.zero_rtt;
        c.limit = match (self.requests, self.duration) {
            (Some(n), _) => Limit::Requests(n),
            (None, Some(d)) => Limit::Duration(d),
            (None, None) => Limit::Duration(Duration::from_secs(10)),
        };
        c.warmup = self.warmup;
        c.rate = self.rate;
        c.trust = match (&self.ca, self.insecure) {
            (Some(ca), _) => Trust::Ca(ca.clone()),
            (None, true) => Trust::Insecure,
            (None, false) => Trust::NoCa,
        };
        c.server_name.clone_from(&self.server_name);
        c.connect_timeout = self.connect_timeout;
        c.request_timeout = self.timeout;
        c.stream_window = self.stream_window;
        c.conn_window = self.conn_window;
        c.validate()?;
        Ok(c)
    }
}

pub(crate) fn parse_proto_arg(
    s: &str,
) -> Result<agentwire_load::Proto, agentwire_load::UnknownProtocol> {
    s.parse()
}

#[derive(Args, Debug)]
pub struct ScorecardArgs {
    /// Measure another server at https://HOST:PORT (it must serve the standard files, e.g.
    /// `agentwire serve --generate`). Default: start our own server in this process.
    #[arg(long)]
    pub url: Option<String>,
    /// With --url: CA certificate that signed the server's certificate.
    #[arg(long, requires = "url", conflicts_with = "insecure")]
    pub ca: Option<PathBuf>,
    /// With --url: accept any server certificate. For testing only.
    #[arg(long, requires = "url")]
    pub insecure: bool,
    /// Protocols, in column order.
    #[arg(long, value_delimiter = ',', value_parser = parse_proto_arg, default_value = "h3,h2,http1.1")]
    pub protos: Vec<agentwire_load::Proto>,
    /// Scaled-down counts (x10 downloads, 2 s windows, round 1 = 20,000 requests, round 2 =
    /// 40 requests): about two minutes for three protocols on two cores.
    #[arg(long)]
    pub quick: bool,
    /// Scale by name: full, quick or tiny (tiny is for tests: seconds, not meaningful).
    #[arg(long, hide = true, conflicts_with = "quick")]
    pub scale: Option<String>,
    /// Client threads for scenarios with several connections (spread evenly; default 1).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Process id of the server (on this machine): its CPU time per scenario is measured
    /// and shown as server CPU microseconds per request.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// The server's name in the report and in --compare tables (default: the URL, or
    /// "agentwire serve").
    #[arg(long)]
    pub label: Option<String>,
    /// Instead of measuring: put these scorecard.json files side by side (one table per
    /// protocol, a column per server, the first file's ratio to the best of the others) and
    /// write compare.md and charts into --out.
    #[arg(long, num_args = 1.., value_name = "SCORECARD_JSON", conflicts_with_all = ["url", "quick", "scale"])]
    pub compare: Vec<PathBuf>,
    /// Directory for scorecard.json, scorecard.md and the charts (or compare.md).
    #[arg(long, default_value = "scorecard-out")]
    pub out: PathBuf,
    /// Print the JSON (schema agentwire-scorecard/1) on stdout instead of the Markdown table.
    #[arg(long)]
    pub json: bool,
}

impl ScorecardArgs {
    pub fn config(&self) -> Result<agentwire_load::scorecard::ScorecardConfig> {
        use agentwire_load::load::Trust;
        use agentwire_load::scorecard::{Scale, ScorecardConfig, ScorecardTarget};
        let scale = match (&self.scale, self.quick) {
            (Some(name), _) => match Scale::by_name(name) {
                Some(s) => s,
                None => bail!("--scale must be full, quick or tiny, not {name:?}"),
            },
            (None, true) => Scale::quick(),
            (None, false) => Scale::full(),
        };
        let target = match &self.url {
            None => ScorecardTarget::InProcess,
            Some(url) => ScorecardTarget::Url {
                url: url.clone(),
                trust: match (&self.ca, self.insecure) {
                    (Some(ca), _) => Trust::Ca(ca.clone()),
                    (None, true) => Trust::Insecure,
                    (None, false) => Trust::NoCa,
                },
            },
        };
        let mut protos: Vec<agentwire_load::Proto> = Vec::new();
        for p in &self.protos {
            if !protos.contains(p) {
                protos.push(*p);
            }
        }
        if protos.is_empty() {
            bail!("--protos needs at least one of h3, h2, http1.1");
        }
        Ok(ScorecardConfig {
            target,
            protos,
            scale,
            threads: self.threads,
            server_pid: self.server_pid,
            label: self.label.clone(),
        })
    }
}
