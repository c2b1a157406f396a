//! What a load run measured: the counters and histograms each connection slot fills in
//! ([`Stats`]), the kinds of error ([`ErrorKind`]), and the final [`LoadReport`] with its
//! JSON schema ([`SCHEMA`]) and text rendering.
//!
//! This module only counts and does arithmetic; it must not time anything, touch the network
//! or print.

use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;

use agentwire_measure::stats::{new_histogram, record_us, summarize, LatencySummary};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::Proto;

/// Schema name of the JSON report.
pub const SCHEMA: &str = "agentwire-load/2";

/// What became of a connection's 0-RTT data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EarlyData {
    /// None was sent (0-RTT off, or no ticket that allows it).
    NotTried,
    /// Sent, and the server accepted it.
    Accepted,
    /// Sent, and the server refused it: requests sent in it were sent again.
    Rejected,
}

/// The run's TLS handshakes by kind, counted over every connection of the run (warm-up
/// included; connection attempts that failed are not connections).
///
/// A full handshake carries the server's certificate, which the client verifies; a resumed
/// one does not. So `full` is the number of certificates verified and `resumed` the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HandshakeCounts {
    /// Connections established.
    pub connections: u64,
    /// Full handshakes (certificate sent and verified).
    pub full: u64,
    /// Resumed handshakes (session ticket accepted, no certificate).
    pub resumed: u64,
    /// Connections whose 0-RTT data the server accepted.
    pub zero_rtt_accepted: u64,
    /// Connections whose 0-RTT data the server rejected.
    pub zero_rtt_rejected: u64,
}

impl HandshakeCounts {
    /// From the run's counters: connections established, certificates verified, and 0-RTT
    /// answers. A certificate verified on an attempt that failed afterwards is not a
    /// connection, so `full` never exceeds `connections`.
    ///
    /// ```
    /// use agentwire_load::report::HandshakeCounts;
    /// let c = HandshakeCounts::tally(10, 3, 6, 1);
    /// assert_eq!((c.full, c.resumed), (3, 7));
    /// assert_eq!((c.zero_rtt_accepted, c.zero_rtt_rejected), (6, 1));
    /// assert_eq!(HandshakeCounts::tally(2, 5, 0, 0).full, 2);
    /// ```
    pub fn tally(connections: u64, verified: u64, accepted: u64, rejected: u64) -> Self {
        let full = verified.min(connections);
        HandshakeCounts {
            connections,
            full,
            resumed: connections - full,
            zero_rtt_accepted: accepted,
            zero_rtt_rejected: rejected,
        }
    }
}

/// Why a request (or the connection attempt that was to carry it) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// Nothing listens at the address (TCP RST on connect).
    ConnectRefused,
    /// The connection (TCP connect plus TLS, or the QUIC handshake) did not complete within
    /// the connect timeout. An HTTP/3 server that is not running shows up here: QUIC over
    /// UDP gets no "refused".
    ConnectTimeout,
    /// Another failure to connect (unreachable, bad address …).
    Connect,
    /// The TLS handshake failed (certificate not trusted, no common ALPN …).
    Tls,
    /// A request got no complete response within the request timeout.
    Timeout,
    /// The body's length differs from the response's Content-Length.
    WrongSize,
    /// The server reset the stream or the connection.
    Reset,
    /// The connection closed (or was shut down, GOAWAY) while a request was in flight.
    Closed,
    /// The server broke the HTTP rules (malformed response, wrong ALPN …).
    Protocol,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// Every kind, in report order.
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::ConnectRefused,
        ErrorKind::ConnectTimeout,
        ErrorKind::Connect,
        ErrorKind::Tls,
        ErrorKind::Timeout,
        ErrorKind::WrongSize,
        ErrorKind::Reset,
        ErrorKind::Closed,
        ErrorKind::Protocol,
        ErrorKind::Other,
    ];

    /// The kebab-case name used in reports (`connect-refused`, `wrong-size` …).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::ConnectRefused => "connect-refused",
            ErrorKind::ConnectTimeout => "connect-timeout",
            ErrorKind::Connect => "connect",
            ErrorKind::Tls => "tls",
            ErrorKind::Timeout => "timeout",
            ErrorKind::WrongSize => "wrong-size",
            ErrorKind::Reset => "reset",
            ErrorKind::Closed => "closed",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Other => "other",
        }
    }

    /// True for failures to establish a connection (as opposed to failures of a request on
    /// an established one).
    pub fn is_connect(self) -> bool {
        matches!(
            self,
            ErrorKind::ConnectRefused
                | ErrorKind::ConnectTimeout
                | ErrorKind::Connect
                | ErrorKind::Tls
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed request or connection attempt: its kind and a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What happened, for the report's examples.
    pub message: String,
}

impl LoadError {
    /// A new error.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        LoadError {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// Counters and histograms of part of a run (one connection slot); merged with
/// [`Stats::merge`]. Latencies are in microseconds.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Responses received completely, by status code.
    pub statuses: BTreeMap<u16, u64>,
    /// Failed requests (and connection attempts), by kind.
    pub errors: BTreeMap<ErrorKind, u64>,
    /// The first message seen for each error kind.
    pub error_examples: BTreeMap<ErrorKind, String>,
    /// Response body bytes received (of complete responses).
    pub body_bytes: u64,
    /// Connections established (TLS or QUIC handshake completed).
    pub connections: u64,
    /// Request time: from the send (open loop: the intended send time) to the body's last byte.
    pub request_us: Histogram<u64>,
    /// Time to first byte: from the send to the response's headers.
    pub ttfb_us: Histogram<u64>,
    /// Connect time: from starting to connect to the end of the TLS or QUIC handshake (with
    /// 0-RTT: until requests may be sent, which is at once).
    pub connect_us: Histogram<u64>,
    /// Requests sent again on a new connection because the server cannot have processed
    /// them (rejected 0-RTT, a graceful GOAWAY, a connection closed before sending); not
    /// counted as requests or errors.
    pub retried: u64,
    /// Why the first retried request had to be sent again.
    pub retry_example: Option<String>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            statuses: BTreeMap::new(),
            errors: BTreeMap::new(),
            error_examples: BTreeMap::new(),
            body_bytes: 0,
            connections: 0,
            request_us: new_histogram(),
            ttfb_us: new_histogram(),
            connect_us: new_histogram(),
            retried: 0,
            retry_example: None,
        }
    }
}

impl Stats {
    /// Counts one complete response.
    pub fn record_response(&mut self, status: u16, body_bytes: u64, ttfb_us: u64, total_us: u64) {
        *self.statuses.entry(status).or_insert(0) += 1;
        self.body_bytes += body_bytes;
        record_us(&mut self.ttfb_us, ttfb_us);
        record_us(&mut self.request_us, total_us);
    }

    /// Counts one failure.
    pub fn record_error(&mut self, err: &LoadError) {
        *self.errors.entry(err.kind).or_insert(0) += 1;
        self.error_examples
            .entry(err.kind)
            .or_insert_with(|| err.message.clone());
    }

    /// Counts one request that goes again because the server cannot have processed it.
    pub fn record_retry(&mut self, why: &LoadError) {
        self.retried += 1;
        self.retry_example.get_or_insert_with(|| why.to_string());
    }

    /// Counts one established connection and its connect time.
    pub fn record_connect(&mut self, us: u64) {
        self.connections += 1;
        record_us(&mut self.connect_us, us);
    }

    /// Responses received completely.
    pub fn responses(&self) -> u64 {
        self.statuses.values().sum()
    }

    /// Failures of every kind.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Stats) {
        for (k, v) in &other.statuses {
            *self.statuses.entry(*k).or_insert(0) += v;
        }
        for (k, v) in &other.errors {
            *self.errors.entry(*k).or_insert(0) += v;
        }
        for (k, v) in &other.error_examples {
            self.error_examples.entry(*k).or_insert_with(|| v.clone());
        }
        self.body_bytes += other.body_bytes;
        self.connections += other.connections;
        self.retried += other.retried;
        if self.retry_example.is_none() {
            self.retry_example.clone_from(&other.retry_example);
        }
        // Same bounds on both sides: adding cannot fail; saturate rather than panic anyway.
        let _ = self.request_us.add(&other.request_us);
        let _ = self.ttfb_us.add(&other.ttfb_us);
        let _ = self.connect_us.add(&other.connect_us);
    }
}

/// Per-second rate of `count` over `seconds`; zero for an empty or non-positive window.
///
/// ```
/// use agentwire_load::report::per_second;
/// assert_eq!(per_second(500, 2.0), 250.0);
/// assert_eq!(per_second(5, 0.0), 0.0);
/// ```
pub fn per_second(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 && seconds.is_finite() {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// Latency summaries of a run, microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latencies {
    /// Request time (send, or intended send in open loop, to last body byte).
    pub request: LatencySummary,
    /// Time to first byte (send to response headers).
    pub ttfb: LatencySummary,
    /// Connect time (TCP + TLS, or the QUIC handshake).
    pub connect: LatencySummary,
}

/// What was asked of the run, echoed into the report.
#[derive(Debug, Clone, Serialize)]
pub struct RunSettings {
    /// URLs requested, in turn.
    pub urls: Vec<String>,
    /// Protocol spoken.
    pub proto: Proto,
    /// Client threads (each with its own single-threaded runtime).
    pub threads: usize,
    /// Connections per thread.
    pub connections: usize,
    /// Requests in flight per connection.
    pub streams: usize,
    /// Requests per connection before it is replaced (0 = unlimited).
    pub max_requests_per_conn: u64,
    /// `closed-loop` or `open-loop`.
    pub mode: &'static str,
    /// Open loop: requests per second over all connections.
    pub rate: Option<f64>,
    /// Requests asked for (`None` with a duration).
    pub requests_limit: Option<u64>,
    /// Measured duration asked for, seconds (`None` with a request count).
    pub duration_s: Option<f64>,
    /// Warm-up before measuring, seconds.
    pub warmup_s: f64,
    /// Certificate verification: `ca`, `insecure` or `none` (every certificate refused).
    pub verification: &'static str,
    /// TLS session resumption on (`--resume`).
    pub resume: bool,
    /// HTTP/3 0-RTT on (`--0rtt`).
    pub zero_rtt: bool,
}

/// The result of a load run (JSON schema [`SCHEMA`]).
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The run's settings.
    pub settings: RunSettings,
    /// Requests measured: every attempt started after the warm-up, answered or failed
    /// (`responses + errors`).
    pub requests: u64,
    /// Complete responses of any status.
    pub responses: u64,
    /// Complete responses with a 2xx status.
    pub succeeded: u64,
    /// Complete responses by status code.
    pub status: BTreeMap<String, u64>,
    /// Failed requests and connection attempts.
    pub errors: u64,
    /// Failures by kind (kinds with no failure are left out).
    pub errors_by_kind: BTreeMap<String, u64>,
    /// The first message seen for each kind of failure.
    pub error_examples: BTreeMap<String, String>,
    /// Length of the measured window, seconds: from the end of the warm-up until the last
    /// measured request ended.
    pub elapsed_s: f64,
    /// Complete responses per second.
    pub rps: f64,
    /// Response body bytes received (complete responses).
    pub bytes: u64,
    /// Response body bytes per second.
    pub bytes_per_s: f64,
    /// Connections established in the measured window.
    pub connections: u64,
    /// Connections established per second.
    pub handshakes_per_s: f64,
    /// Every connection's handshake by kind (warm-up included).
    pub handshakes: HandshakeCounts,
    /// Requests sent again because the server cannot have processed them (see
    /// [`Stats::retried`]); not in `requests`.
    pub retried: u64,
    /// Why the first of them had to be sent again.
    pub retry_example: Option<String>,
    /// Latency percentiles, microseconds.
    pub latency: Latencies,
    /// CPU seconds (user + system) this process used during the run, warm-up included.
    pub cpu_seconds: Option<f64>,
    /// Peak resident memory of this process (VmHWM), bytes.
    pub peak_rss_bytes: Option<u64>,
}

impl LoadReport {
    /// Builds the report from merged measured stats over `elapsed_s` seconds.
    pub fn new(
        settings: RunSettings,
        stats: &Stats,
        handshakes: HandshakeCounts,
        elapsed_s: f64,
        cpu_seconds: Option<f64>,
        peak_rss_bytes: Option<u64>,
    ) -> Self {
        let responses = stats.responses();
        let errors = stats.error_count();
        LoadReport {
            schema: SCHEMA,
            settings,
            requests: responses + errors,
            responses,
            succeeded: stats
                .statuses
                .iter()
                .filter(|(s, _)| (200..300).contains(*s))
                .map(|(_, n)| n)
                .sum(),
            status: stats
                .statuses
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            errors,
            errors_by_kind: stats
                .errors
                .iter()
                .map(|(k, v)| (k.name().to_owned(), *v))
                .collect(),
            error_examples: stats
                .error_examples
                .iter()
                .map(|(k, v)| (k.name().to_owned(), v.clone()))
                .collect(),
            elapsed_s,
            rps: per_second(responses, elapsed_s),
            bytes: stats.body_bytes,
            bytes_per_s: per_second(stats.body_bytes, elapsed_s),
            connections: stats.connections,
            handshakes_per_s: per_second(stats.connections, elapsed_s),
            handshakes,
            retried: stats.retried,
            retry_example: stats.retry_example.clone(),
            latency: Latencies {
                request: summarize(&stats.request_us),
                ttfb: summarize(&stats.ttfb_us),
                connect: summarize(&stats.connect_us),
            },
            cpu_seconds,
            peak_rss_bytes,
        }
    }

    /// Failures of `kind`.
    pub fn errors_of(&self, kind: ErrorKind) -> u64 {
        self.errors_by_kind.get(kind.name()).copied().unwrap_or(0)
    }

    /// Responses with status `status`.
    pub fn status_count(&self, status: u16) -> u64 {
        self.status.get(&status.to_string()).copied().unwrap_or(0)
    }
}

/// The report as one JSON object.
pub fn to_json(report: &LoadReport) -> serde_json::Result<String> {
    serde_json::to_string(report)
}

fn fmt_us(us: u64) -> String {
    if us >= 10_000_000 {
        format!("{:.1}s", us as f64 / 1e6)
    } else if us >= 10_000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else {
        format!("{us}us")
    }
}

fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2} {}", UNITS[i])
}

/// The report as a few lines for people, in the spirit of h2load's summary.
pub fn render_text(r: &LoadReport) -> String {
    let mut out = String::new();
    let s = &r.settings;
    let _ = writeln!(
        out,
        "{} {} over {} thread(s) x {} connection(s) x {} stream(s), {}",
        s.proto,
        s.urls.join(" "),
        s.threads,
        s.connections,
        s.streams,
        match s.rate {
            Some(rate) => format!("open loop at {rate} req/s"),
            None => "closed loop".into(),
        }
    );
    let _ = writeln!(
        out,
        "finished in {:.2}s, {:.2} req/s, {}/s",
        r.elapsed_s,
        r.rps,
        fmt_bytes(r.bytes_per_s)
    );
    let statuses: Vec<String> = r.status.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let _ = writeln!(
        out,
        "requests: {} total, {} responses ({} 2xx), {} errors; status [{}]",
        r.requests,
        r.responses,
        r.succeeded,
        r.errors,
        statuses.join(", ")
    );
    for (kind, n) in &r.errors_by_kind {
        let example = r.error_examples.get(kind).map(String::as_str).unwrap_or("");
        let _ = writeln!(out, "  {kind}: {n} (e.g. {example})");
    }
    let _ = writeln!(
        out,
        "traffic: {} body bytes; {} connections, {:.2} handshakes/s",
        r.bytes, r.connections, r.handshakes_per_s
    );
    if s.resume || r.retried > 0 {
        let h = &r.handshakes;
        let mut line = format!(
            "tls (all {} connections): {} full, {} resumed handshakes",
            h.connections, h.full, h.resumed
        );
        if s.zero_rtt {
            let _ = write!(
                line,
                "; 0-RTT {} accepted, {} rejected",
                h.zero_rtt_accepted, h.zero_rtt_rejected
            );
        }
        if r.retried > 0 {
            let _ = write!(
                line,
                "; {} requests sent again, never processed (e.g. {})",
                r.retried,
                r.retry_example.as_deref().unwrap_or("?")
            );
        }
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(
        out,
        "{:<14}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "", "min", "p50", "p90", "p99", "p99.9", "max"
    );
    for (name, l) in [
        ("request", &r.latency.request),
        ("first byte", &r.latency.ttfb),
        ("connect", &r.latency.connect),
    ] {
        let _ = writeln!(
            out,
            "{:<14}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
            name,
            fmt_us(l.min_us),
            fmt_us(l.p50_us),
            fmt_us(l.p90_us),
            fmt_us(l.p99_us),
            fmt_us(l.p999_us),
            fmt_us(l.max_us)
        );
    }
    let cpu = r
        .cpu_seconds
        .map(|c| format!("{c:.2}s"))
        .unwrap_or_else(|| "unknown".into());
    let rss = r
        .peak_rss_bytes
        .map(|b| fmt_bytes(b as f64))
        .unwrap_or_else(|| "unknown".into());
    let _ = writeln!(out, "client: {cpu} CPU, peak RSS {rss}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RunSettings {
        RunSettings {
            urls: vec!["https://127.0.0.1:1/x".into()],
            proto: Proto::H2,
            threads: 1,
            connections: 1,
            streams: 1,
            max_requests_per_conn: 0,
            mode: "closed-loop",
            rate: None,
            requests_limit: Some(10),
            duration_s: None,
            warmup_s: 0.0,
            verification: "insecure",
            resume: false,
            zero_rtt: false,
        }
    }

    #[test]
    fn merged_stats_give_exact_counts_rates_and_percentiles() {
        let mut a = Stats::default();
        let mut b = Stats::default();
        // 1..=1000 µs request times, split over two slots.
        for v in 1..=1000u64 {
            let s = if v % 2 == 0 { &mut a } else { &mut b };
            s.record_response(if v <= 990 { 200 } else { 404 }, 100, v / 2, v);
        }
        a.record_error(&LoadError::new(ErrorKind::Timeout, "first"));
        b.record_error(&LoadError::new(ErrorKind::Timeout, "second"));
        b.record_error(&LoadError::new(ErrorKind::WrongSize, "short"));
        a.record_connect(250);
        b.record_connect(750);
        let mut all = Stats::default();
        all.merge(&a);
        all.merge(&b);
        let r = LoadReport::new(
            settings(),
            &all,
            HandshakeCounts::tally(1, 1, 0, 0),
            2.0,
            Some(0.5),
            Some(1 << 20),
        );
        assert_eq!(r.schema, SCHEMA);
        assert_eq!(r.responses, 1000);
        assert_eq!(r.succeeded, 990);
        assert_eq!(r.status_count(200), 990);
        assert_eq!(r.status_count(404), 10);
        assert_eq!(r.errors, 3);
        assert_eq!(r.requests, 1003);
        assert_eq!(r.errors_of(ErrorKind::Timeout), 2);
        assert_eq!(r.errors_of(ErrorKind::WrongSize), 1);
        assert_eq!(r.errors_of(ErrorKind::Reset), 0);
        assert_eq!(
            r.error_examples.get("timeout").map(String::as_str),
            Some("first")
        );
        assert_eq!(r.bytes, 100_000);
        assert_eq!(r.rps, 500.0);
        assert_eq!(r.bytes_per_s, 50_000.0);
        assert_eq!(r.connections, 2);
        assert_eq!(r.handshakes_per_s, 1.0);
        let l = &r.latency.request;
        assert_eq!((l.count, l.min_us, l.max_us), (1000, 1, 1000));
        assert_eq!(
            (l.p50_us, l.p90_us, l.p99_us, l.p999_us),
            (500, 900, 990, 999)
        );
        assert_eq!(r.latency.ttfb.p50_us, 250);
        assert_eq!(r.latency.connect.count, 2);
        assert_eq!(r.latency.connect.max_us, 750);

        let json: serde_json::Value = serde_json::from_str(&to_json(&r).unwrap()).unwrap();
        assert_eq!(json["schema"], "agentwire-load/2");
        assert_eq!(json["requests"], 1003);
        assert_eq!(json["errors"], 3);
        assert_eq!(json["rps"], 500.0);
        assert_eq!(json["status"]["200"], 990);
        assert_eq!(json["errors_by_kind"]["wrong-size"], 1);
        assert_eq!(json["latency"]["request"]["p99_us"], 990);
        assert_eq!(json["settings"]["proto"], "h2");
        let text = render_text(&r);
        assert!(text.contains("500.00 req/s"), "{text}");
        assert!(text.contains("wrong-size: 1 (e.g. short)"), "{text}");
    }

    #[test]
    fn an_empty_run_reports_zeros_not_nonsense() {
        let r = LoadReport::new(
            settings(),
            &Stats::default(),
            HandshakeCounts::default(),
            0.0,
            None,
            None,
        );
        assert_eq!((r.requests, r.responses, r.errors), (0, 0, 0));
        assert_eq!(r.rps, 0.0);
        assert_eq!(r.handshakes_per_s, 0.0);
        assert_eq!(r.latency.request.p99_us, 0);
        assert!(render_text(&r).contains("unknown"));
    }

    #[test]
    fn error_kind_names_are_stable() {
        let names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            [
                "connect-refused",
                "connect-timeout",
                "connect",
                "tls",
                "timeout",
                "wrong-size",
                "reset",
                "closed",
                "protocol",
                "other"
            ]
        );
        for k in ErrorKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.name());
        }
        assert!(ErrorKind::Tls.is_connect() && !ErrorKind::Reset.is_connect());
    }
}
