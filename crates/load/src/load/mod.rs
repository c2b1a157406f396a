//! The load generator: `--threads` OS threads, each running its own single-threaded tokio
//! runtime (like h2load's one event loop per thread), each opening `--connections`
//! connections, each keeping `--streams` requests in flight (HTTP/1.1: exactly one).
//!
//! * Closed loop (the default): every stream sends its next request as soon as the previous
//!   one has been answered, until `--requests` have been sent or `--duration` is over.
//! * Open loop (`--rate R`): R requests per second in all, split evenly over every stream of
//!   every connection ([`agentwire_measure::stats::OpenLoopSchedule`]); a request's time is
//!   measured from when it was *due*, so a stall shows up in the latencies instead of
//!   silently lowering the rate (no coordinated omission). Time to first byte is measured
//!   from the actual send.
//! * `--max-requests-per-conn M` closes a connection after M requests and opens a new one
//!   (M = 1: every request pays a handshake). With `--warmup`, requests and connections started during the
//!   warm-up are not counted, and do not count against `--requests`.
//! * A failed connection attempt counts as one failed request (of kind `connect-refused`,
//!   `connect-timeout`, `tls` …); a closed-loop connection slot then waits (10 ms doubling
//!   to 200 ms) before trying again. Every connect is bounded by the connect timeout and
//!   every request by the request timeout, so a run ends at most that long after its
//!   duration, and a run limited by `--requests` ends after that many attempts.
//!
//! * TLS session resumption is off unless asked for: every handshake is a full one. With
//!   `--resume` the run keeps the session tickets servers send (one store for all threads)
//!   and offers them on new connections; with `--0rtt` (HTTP/3) a new connection sends its
//!   first requests as 0-RTT data when a ticket allows it. The report counts full and
//!   resumed handshakes and accepted and rejected 0-RTT ([`crate::report::HandshakeCounts`]).
//! * A request the server cannot have processed is sent again on a new connection and counted
//!   as `retried`, not as a request or an error: requests in rejected 0-RTT data, HTTP/2
//!   requests above a graceful GOAWAY's last stream or refused with REFUSED_STREAM, and
//!   requests the connection closed before sending (an HTTP/1.1 server that closes after its
//!   keep-alive limit). A slot sends again at most 8 times in a row without a
//!   response in between; then the request fails, so a server that turns everything away
//!   still ends the run.
//!
//! Response bodies are read completely and counted; a body whose length differs from the
//! response's Content-Length is a `wrong-size` error.
//!
//! This module must not print (the caller renders the [`LoadReport`]), and nothing it starts
//! outlives [`run`].

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::Uri;
use rustls_pki_types::ServerName;

use crate::client::{self, ClientSetup, Target, H3_NO_ERROR};
use crate::report::{HandshakeCounts, LoadReport, RunSettings, Stats};
use crate::session::TlsSetup;
pub use crate::session::Trust;
use crate::Proto;

mod slot;
use slot::run_slot;

/// When a run stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// After this many measured requests (attempts) in all.
    Requests(u64),
    /// After this long measured (after the warm-up).
    Duration(Duration),
}

/// Everything a load run needs.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// `https://` URLs, requested in turn; all must name the same server.
    pub urls: Vec<String>,
    /// The protocol to speak.
    pub proto: Proto,
    /// OS threads, each with a single-threaded runtime.
    pub threads: usize,
    /// Connections per thread.
    pub connections: usize,
    /// Requests in flight per connection (must be 1 for HTTP/1.1).
    pub streams: usize,
    /// Requests per connection before it is replaced by a new one (0 = unlimited).
    pub max_requests_per_conn: u64,
    /// Keep session tickets and resume TLS sessions on new connections.
    pub resume: bool,
    /// HTTP/3: send the first requests of a connection as 0-RTT data when possible (needs
    /// [`LoadConfig::resume`]).
    pub zero_rtt: bool,
    /// When to stop.
    pub limit: Limit,
    /// Time before measuring starts.
    pub warmup: Duration,
    /// Open loop: requests per second over all connections. `None`: closed loop.
    pub rate: Option<f64>,
    /// Certificate verification.
    pub trust: Trust,
    /// TLS server name (default: the URL's host).
    pub server_name: Option<String>,
    /// Most time a connection (TCP + TLS, or the QUIC handshake) may take.
    pub connect_timeout: Duration,
    /// Most time a request may take, body included.
    pub request_timeout: Duration,
    /// Per-stream flow-control window (HTTP/2 and QUIC), bytes.
    pub stream_window: u32,
    /// Per-connection flow-control window (HTTP/2 and QUIC), bytes.
    pub conn_window: u32,
    /// Counters the caller can read while the run goes on (for a progress bar); `None`: none
    /// are kept.
    pub live: Option<Arc<LiveCounts>>,
    /// Closed loop: no request starts after this long measured, whatever [`LoadConfig::limit`]
    /// says (a cap on a run limited by a request count; `None`: no cap). A run cut short
    /// by it reports fewer requests than asked for.
    pub deadline: Option<Duration>,
}

/// Measured responses and failures so far, counted as they happen, for showing progress
/// while [`run`] works (the report's numbers come from its own counts).
///
/// ```
/// use agentwire_load::load::LiveCounts;
/// let live = LiveCounts::default();
/// assert_eq!(live.snapshot(), (0, 0));
/// ```
#[derive(Debug, Default)]
pub struct LiveCounts {
    responses: AtomicU64,
    errors: AtomicU64,
}

impl LiveCounts {
    /// (responses, failures) so far.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.responses.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }
}

/// Most threads a run may use.
pub const MAX_THREADS: usize = 1024;
/// Most connections a run may open at once (threads × connections).
pub const MAX_CONNECTIONS: usize = 100_000;
/// Most requests in flight per connection.
pub const MAX_STREAMS: usize = 10_000;

impl LoadConfig {
    /// A closed-loop HTTP/3 run of 10 s over one connection with one stream, verification
    /// with no trusted CA (set [`LoadConfig::trust`]).
    pub fn new(urls: Vec<String>) -> Self {
        LoadConfig {
            urls,
            proto: Proto::H3,
            threads: 1,
            connections: 1,
            streams: 1,
            max_requests_per_conn: 0,
            resume: false,
            zero_rtt: false,
            limit: Limit::Duration(Duration::from_secs(10)),
            warmup: Duration::ZERO,
            rate: None,
            trust: Trust::NoCa,
            server_name: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            live: None,
            stream_window: 2 * 1024 * 1024,
            conn_window: 32 * 1024 * 1024,
            deadline: None,
        }
    }

    /// Checks the numbers; the error says which flag is wrong.
    pub fn validate(&self) -> Result<()> {
        if self.urls.is_empty() {
            bail!("give at least one https:// URL");
        }
        if self.threads == 0 || self.threads > MAX_THREADS {
            bail!("--threads must be 1..={MAX_THREADS}");
        }
        if self.connections == 0 || self.threads.saturating_mul(self.connections) > MAX_CONNECTIONS
        {
            bail!("--connections must be at least 1, and threads x connections at most {MAX_CONNECTIONS}");
        }
        if self.streams == 0 || self.streams > MAX_STREAMS {
            bail!("--streams must be 1..={MAX_STREAMS}");
        }
        if self.proto == Proto::Http11 && self.streams != 1 {
            bail!(
                "HTTP/1.1 carries one request at a time per connection: use --streams 1 \
                 (and more --connections for more requests in flight)"
            );
        }
        match self.limit {
            Limit::Requests(0) => bail!("--requests must be at least 1"),
            Limit::Duration(d) if d.is_zero() => bail!("--duration must be more than zero"),
            _ => {}
        }
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && rate > 0.0) {
                bail!("--rate must be a positive number of requests per second");
            }
        }
        if self.zero_rtt && self.proto != Proto::H3 {
            bail!("--0rtt works with --proto h3 only (for h2 and http1.1 use --resume)");
        }
        if self.zero_rtt && !self.resume {
            bail!("0-RTT needs session resumption (--resume)");
        }
        if self.connect_timeout.is_zero() || self.request_timeout.is_zero() {
            bail!("timeouts must be more than zero");
        }
        if self.deadline.is_some_and(|d| d.is_zero()) {
            bail!("the deadline must be more than zero");
        }
        if self.stream_window == 0 || self.conn_window == 0 || self.conn_window > i32::MAX as u32 {
            bail!("flow-control windows must be 1..=2147483647 bytes");
        }
        Ok(())
    }

    fn settings(&self) -> RunSettings {
        RunSettings {
            urls: self.urls.clone(),
            proto: self.proto,
            threads: self.threads,
            connections: self.connections,
            streams: self.streams,
            max_requests_per_conn: self.max_requests_per_conn,
            mode: if self.rate.is_some() {
                "open-loop"
            } else {
                "closed-loop"
            },
            rate: self.rate,
            requests_limit: match self.limit {
                Limit::Requests(n) => Some(n),
                Limit::Duration(_) => None,
            },
            duration_s: match self.limit {
                Limit::Requests(_) => None,
                Limit::Duration(d) => Some(d.as_secs_f64()),
            },
            warmup_s: self.warmup.as_secs_f64(),
            verification: match self.trust {
                Trust::Ca(_) => "ca",
                Trust::Insecure => "insecure",
                Trust::NoCa => "none",
            },
            resume: self.resume,
            zero_rtt: self.zero_rtt,
        }
    }
}

/// Requests left to send (`u64::MAX`: no limit).
struct Budget(AtomicU64);

impl Budget {
    fn take(&self) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| match n {
                0 => None,
                u64::MAX => Some(u64::MAX),
                n => Some(n - 1),
            })
            .is_ok()
    }

    /// Gives back a request taken for a request that will be sent again.
    fn refund(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| match n {
                u64::MAX => None,
                n => Some(n + 1),
            });
    }

    fn exhausted(&self) -> bool {
        self.0.load(Ordering::Relaxed) == 0
    }
}

/// What every thread of a run shares.
struct RunCtx {
    target: Target,
    setup: ClientSetup,
    connections: usize,
    streams: usize,
    total_lanes: usize,
    max_per_conn: u64,
    start: Instant,
    measure_start: Instant,
    /// Closed loop with a duration: no request starts after this.
    end: Option<Instant>,
    /// Open loop: requests per second and the span of the schedules (warm-up included).
    open_loop: Option<(f64, Duration)>,
    budget: Budget,
    next_url: AtomicUsize,
    connect_timeout: Duration,
    request_timeout: Duration,
    /// Connections established (warm-up included).
    established: AtomicU64,
    /// 0-RTT answers: accepted, rejected.
    zero_rtt_accepted: AtomicU64,
    zero_rtt_rejected: AtomicU64,
    live: Option<Arc<LiveCounts>>,
}

impl RunCtx {
    /// Counts a measured outcome for the caller's progress display.
    fn tell(&self, ok: bool) {
        if let Some(live) = &self.live {
            let counter = if ok { &live.responses } else { &live.errors };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What one connection slot (or thread, merged) measured.
struct SlotResult {
    stats: Stats,
    /// When the last measured request or attempt ended.
    last: Option<Instant>,
}

/// Runs the load and returns its report. Blocks until the run is over (it starts its own
/// threads and runtimes; call it from outside any async runtime, e.g. `spawn_blocking`).
pub fn run(config: &LoadConfig) -> Result<LoadReport> {
    config.validate()?;
    let target = resolve_target(&config.urls, config.server_name.as_deref())?;
    let setup = client_setup(config)?;
    let start = Instant::now();
    let measure_start = start + config.warmup;
    let (end, open_loop) = match (config.limit, config.rate) {
        (Limit::Duration(d), None) => (Some(measure_start + d), None),
        (Limit::Duration(d), Some(rate)) => {
            (Some(measure_start + d), Some((rate, config.warmup + d)))
        }
        (Limit::Requests(_), None) => (None, None),
        (Limit::Requests(n), Some(rate)) => {
            let span = Duration::try_from_secs_f64(n as f64 / rate)
                .map_err(|_| anyhow!("--requests / --rate is too long a run"))?;
            (None, Some((rate, config.warmup + span)))
        }
    };
    let end = match (end, config.deadline) {
        (Some(e), Some(d)) => Some(e.min(measure_start + d)),
        (None, Some(d)) => Some(measure_start + d),
        (e, None) => e,
    };
    let budget = match config.limit {
        Limit::Requests(n) => n,
        Limit::Duration(_) => u64::MAX,
    };
    let ctx = RunCtx {
        target,
        setup,
        connections: config.connections,
        streams: config.streams,
        total_lanes: config.threads * config.connections * config.streams,
        max_per_conn: config.max_requests_per_conn,
        start,
        measure_start,
        end,
        open_loop,
        budget: Budget(AtomicU64::new(budget)),
        next_url: AtomicUsize::new(0),
        connect_timeout: config.connect_timeout,
        request_timeout: config.request_timeout,
        established: AtomicU64::new(0),
        zero_rtt_accepted: AtomicU64::new(0),
        zero_rtt_rejected: AtomicU64::new(0),
        live: config.live.clone(),
    };
    let cpu_before = agentwire_measure::resources::self_cpu_seconds();
    let results: Vec<Result<SlotResult>> = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for t in 0..config.threads {
            let ctx = &ctx;
            let handle = std::thread::Builder::new()
                .name(format!("aw-load-{t}"))
                .spawn_scoped(scope, move || run_thread(ctx, t));
            handles.push(handle);
        }
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(anyhow!("a load thread panicked"))),
                Err(e) => Err(anyhow!("cannot start a load thread: {e}")),
            })
            .collect()
    });
    let cpu_after = agentwire_measure::resources::self_cpu_seconds();
    let mut stats = Stats::default();
    let mut last: Option<Instant> = None;
    for r in results {
        let r = r?;
        stats.merge(&r.stats);
        last = later(last, r.last);
    }
    let mut elapsed = last
        .map(|l| l.saturating_duration_since(measure_start))
        .unwrap_or_default();
    if let (Limit::Duration(_), Some(end), Some(_)) = (config.limit, ctx.end, last) {
        // A timed run measures its whole window, even when the thread stalled between the
        // last response and the check that ends the run, so that no request was sent late.
        elapsed = elapsed.max(end.saturating_duration_since(measure_start));
    }
    let cpu = match (cpu_before, cpu_after) {
        (Some(a), Some(b)) => Some((b - a).max(0.0)),
        _ => None,
    };
    let rss = agentwire_measure::resources::peak_rss_bytes(std::process::id());
    let handshakes = HandshakeCounts::tally(
        ctx.established.load(Ordering::Relaxed),
        ctx.setup.tls.verified(),
        ctx.zero_rtt_accepted.load(Ordering::Relaxed),
        ctx.zero_rtt_rejected.load(Ordering::Relaxed),
    );
    Ok(LoadReport::new(
        config.settings(),
        &stats,
        handshakes,
        elapsed.as_secs_f64(),
        cpu,
        rss,
    ))
}

fn later(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Parses the URLs: `https://` only, all on the same server; resolves the host once.
fn resolve_target(urls: &[String], server_name: Option<&str>) -> Result<Target> {
    let mut uris = Vec::new();
    let mut paths = Vec::new();
    let mut h2_heads = Vec::new();
    let mut first: Option<(String, u16)> = None;
    for url in urls {
        let uri: Uri = url
            .parse()
            .with_context(|| format!("{url:?} is not a URL"))?;
        match uri.scheme_str() {
            Some("https") => {}
            Some(other) => bail!("{url}: only https:// URLs are supported, not {other}://"),
            None => bail!("{url}: give a full URL such as https://127.0.0.1:8443/1k.bin"),
        }
        let host = uri
            .host()
            .ok_or_else(|| anyhow!("{url}: the URL has no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(443);
        match &first {
            None => first = Some((host, port)),
            Some((h, p)) if *h == host && *p == port => {}
            Some((h, p)) => {
                bail!("{url}: every URL must name the same server as the first ({h}:{p})")
            }
        }
        let path_and_query = uri
            .path_and_query()
            .map(|p| p.as_str())
            .filter(|p| !p.is_empty())
            .unwrap_or("/");
        let path: Uri = path_and_query
            .parse()
            .with_context(|| format!("{url}: bad path"))?;
        h2_heads.push(agentwire_h2wire::RequestHead::get(
            "https",
            uri.authority().map_or("", |a| a.as_str()),
            path_and_query,
        ));
        paths.push(path);
        uris.push(uri);
    }
    let (host, port) = first.ok_or_else(|| anyhow!("give at least one https:// URL"))?;
    let addr: SocketAddr = (host.as_str(), port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .next()
        .ok_or_else(|| anyhow!("{host} resolves to no address"))?;
    let name = server_name.unwrap_or(&host).to_owned();
    let server_name = ServerName::try_from(name.clone())
        .map_err(|_| anyhow!("{name:?} is not a valid TLS server name"))?;
    let authority = match uris.first().and_then(|u| u.authority()) {
        Some(a) => a.as_str().to_owned(),
        None => host,
    };
    Ok(Target {
        addr,
        server_name,
        authority,
        uris,
        paths,
        h2_heads,
    })
}

fn client_setup(config: &LoadConfig) -> Result<ClientSetup> {
    let alpn = match config.proto {
        Proto::H3 => crate::ALPN_H3,
        Proto::H2 => crate::ALPN_H2,
        Proto::Http11 => crate::ALPN_HTTP11,
    };
    ClientSetup::new(
        config.proto,
        TlsSetup::new(&config.trust, alpn, config.resume, config.zero_rtt)?,
        config.zero_rtt,
        config.stream_window,
        config.conn_window,
    )
}

/// One thread: its own current-thread runtime (and, for HTTP/3, its own UDP socket), its
/// connection slots polled together.
fn run_thread(ctx: &RunCtx, thread: usize) -> Result<SlotResult> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start a runtime for a load thread")?;
    let result = rt.block_on(async {
        let endpoint = match ctx.setup.proto {
            Proto::H3 => Some(client_endpoint(ctx.target.addr)?),
            Proto::H2 | Proto::Http11 => None,
        };
        let mut slots: FuturesUnordered<_> = (0..ctx.connections)
            .map(|c| run_slot(ctx, endpoint.as_ref(), thread * ctx.connections + c))
            .collect();
        let mut total = SlotResult {
            stats: Stats::default(),
            last: None,
        };
        while let Some(r) = slots.next().await {
            total.stats.merge(&r.stats);
            total.last = later(total.last, r.last);
        }
        drop(slots);
        if let Some(endpoint) = endpoint {
            endpoint.close(H3_NO_ERROR.into(), b"");
            let _ = tokio::time::timeout(Duration::from_millis(500), endpoint.wait_idle()).await;
        }
        Ok::<_, anyhow::Error>(total)
    });
    rt.shutdown_timeout(Duration::from_millis(200));
    result
}

fn client_endpoint(server: SocketAddr) -> Result<quinn::Endpoint> {
    let local: SocketAddr = if server.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let settings = client::quic_settings(2 * 1024 * 1024, 32 * 1024 * 1024);
    let (socket, _) = settings
        .bind_udp(local)
        .with_context(|| format!("binding a UDP socket on {local}"))?;
    agentwire_transport::quic::endpoint_on(socket, &settings, None)
        .context("creating the QUIC client endpoint")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_counts_down_and_unlimited_stays_unlimited() {
        let b = Budget(AtomicU64::new(2));
        assert!(b.take() && b.take());
        assert!(!b.take());
        assert!(b.exhausted());
        let u = Budget(AtomicU64::new(u64::MAX));
        for _ in 0..1000 {
            assert!(u.take());
        }
        assert!(!u.exhausted());
    }

    #[test]
    fn urls_must_be_https_on_one_server() {
        let t = resolve_target(
            &[
                "https://127.0.0.1:8443/1k.bin".to_string(),
                "https://127.0.0.1:8443/a?b=c".to_string(),
            ],
            None,
        )
        .unwrap();
        assert_eq!(t.addr, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(t.authority, "127.0.0.1:8443");
        assert_eq!(t.paths[1].to_string(), "/a?b=c");
        let v6 = resolve_target(&["https://[::1]:9/x".to_string()], None).unwrap();
        assert_eq!(v6.addr, "[::1]:9".parse().unwrap());
        for bad in [
            vec!["http://127.0.0.1:1/x"],
            vec!["127.0.0.1:1/x"],
            vec!["https://127.0.0.1:1/x", "https://127.0.0.1:2/x"],
            vec!["not a url"],
        ] {
            let urls: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert!(resolve_target(&urls, None).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn validation_names_the_flag() {
        let ok = LoadConfig::new(vec!["https://127.0.0.1:1/".into()]);
        assert!(ok.validate().is_ok());
        let mut h1 = ok.clone();
        h1.proto = Proto::Http11;
        h1.streams = 4;
        assert!(h1
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--streams 1"));
        let mut zero = ok.clone();
        zero.limit = Limit::Requests(0);
        assert!(zero.validate().is_err());
        let mut rate = ok.clone();
        rate.rate = Some(f64::NAN);
        assert!(rate.validate().unwrap_err().to_string().contains("--rate"));
        let mut none = ok;
        none.urls.clear();
        assert!(none.validate().is_err());
    }
}
