//! # agentwire-load — an HTTP/3 + HTTP/2 + HTTP/1.1 file server and load generator
//!
//! Two halves, meant to be run against each other (or against other servers and clients of
//! the same class, such as h2load or the TQUIC tools):
//!
//! * [`serve`]: a static file server for one directory, loaded into memory once at start,
//!   speaking HTTP/3 on UDP and HTTP/2 and HTTP/1.1 (TLS 1.3, ALPN) on TCP, both on the same
//!   port number. [`files`] writes the standard benchmark files (`630b.bin` … `10m.bin`) and
//!   maps request paths to files without ever leaving the root.
//! * [`load`]: a load generator that opens connections over one protocol, keeps a number of
//!   requests in flight on each (closed loop) or sends at a fixed rate timed from intended
//!   send times (open loop), reads and counts every response body, and reports requests,
//!   statuses, errors by kind, throughput, HDR percentiles of connect time, time to first byte
//!   and request time, handshakes per second, CPU seconds and peak memory ([`report`]).
//!
//! [`scorecard`] puts the two together: a fixed set of scenarios over h3, h2 and http/1.1
//! side by side (curl-scorecard style), each a [`load::run`], as JSON, a Markdown table and
//! charts; [`compare`] puts the scorecards of several servers side by side.
//!
//! This crate must not print on its hot paths, must not panic on anything that comes from the
//! network, a file or a flag, and must not leave anything running: every loop it starts is
//! bounded in time and in count and stops by itself. Parsing command lines is the `agentwire`
//! CLI's job; this crate takes typed configurations.
//!
//! ```no_run
//! # fn demo() -> anyhow::Result<()> {
//! use agentwire_load::{load, serve, Proto};
//! let server = serve::start(serve::ServeConfig::new("www".into(), "certs".into()))?;
//! let mut config = load::LoadConfig::new(vec![format!("https://{}/1k.bin", server.local_addr())]);
//! config.proto = Proto::H3;
//! config.trust = load::Trust::Insecure;
//! config.limit = load::Limit::Requests(1000);
//! let report = load::run(&config)?;
//! println!("{}", agentwire_load::report::render_text(&report));
//! server.stop();
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod compare;
pub mod files;
pub mod load;
pub mod report;
pub mod scorecard;
pub mod serve;

mod client;
mod h2conn;
mod response;
mod session;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// ALPN identifier of HTTP/3.
pub const ALPN_H3: &[u8] = b"h3";
/// ALPN identifier of HTTP/2 over TLS.
pub const ALPN_H2: &[u8] = b"h2";
/// ALPN identifier of HTTP/1.1.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// The HTTP version a load run speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum Proto {
    /// HTTP/3 over QUIC (UDP).
    #[default]
    #[serde(rename = "h3")]
    H3,
    /// HTTP/2 over TLS 1.3 over TCP.
    #[serde(rename = "h2")]
    H2,
    /// HTTP/1.1 over TLS 1.3 over TCP, one request at a time per connection.
    #[serde(rename = "http1.1")]
    Http11,
}

impl Proto {
    /// The name used on the command line and in reports: `h3`, `h2` or `http1.1`.
    pub fn name(self) -> &'static str {
        match self {
            Proto::H3 => "h3",
            Proto::H2 => "h2",
            Proto::Http11 => "http1.1",
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A protocol name that is not h3, h2 or http1.1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown protocol {0:?} (expected h3, h2 or http1.1)")]
pub struct UnknownProtocol(pub String);

impl FromStr for Proto {
    type Err = UnknownProtocol;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "h3" | "http3" | "http/3" => Ok(Proto::H3),
            "h2" | "http2" | "http/2" => Ok(Proto::H2),
            "http1.1" | "http/1.1" | "h1" | "http1" => Ok(Proto::Http11),
            other => Err(UnknownProtocol(other.to_owned())),
        }
    }
}

/// Why a duration flag (`--duration 3s`) does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// No number at its start.
    #[error("{0:?} is not a duration (examples: 3s, 300ms, 1.5s, 2m)")]
    NotADuration(String),
    /// A unit other than h, m, s, ms, us or ns.
    #[error("{given:?}: unknown unit {unit:?} (use h, m, s, ms, us or ns)")]
    UnknownUnit {
        /// The duration as given.
        given: String,
        /// Its unit.
        unit: String,
    },
    /// Negative, not finite, or above 10^9 seconds.
    #[error("{0:?} is out of range")]
    OutOfRange(String),
}

/// Parses a duration such as `3s`, `1.5s`, `300ms`, `2m`, `100us` or a bare number of seconds.
///
/// ```
/// use std::time::Duration;
/// use agentwire_load::parse_duration;
/// assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
/// assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
/// assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
/// assert!(parse_duration("soon").is_err());
/// assert!(parse_duration("-1s").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| DurationError::NotADuration(s.to_owned()))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(DurationError::UnknownUnit {
                given: s.to_owned(),
                unit: other.to_owned(),
            })
        }
    };
    let secs = value * scale;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(DurationError::OutOfRange(s.to_owned()));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proto_names_round_trip() {
        for p in [Proto::H3, Proto::H2, Proto::Http11] {
            assert_eq!(p.name().parse::<Proto>(), Ok(p));
        }
        assert!("spdy".parse::<Proto>().is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_duration(" 1h "), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("3 parsecs").is_err());
        assert!(parse_duration("1e99s").is_err());
    }
}
