//! The verdict that opens every report: per network profile and cell shape, QUIC against the
//! best TCP transport (HTTP/2 or WebSocket; Unix sockets cross no network and are left out),
//! who won, and where QUIC loses, why in one phrase, read from the same cells' CPU per
//! message and bottleneck marks.
//!
//! This module owns the comparison and its wording only; it must not measure, and it reads
//! nothing but the [`Report`]'s medians.

use crate::scenario::BenchTransport;
use crate::{CellSummary, Report};

/// Within this factor either way, a comparison is called even (the quick preset's spread).
pub const EVEN_WITHIN: f64 = 1.05;

/// Who carried more messages per second in one comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Winner {
    /// QUIC, by more than [`EVEN_WITHIN`].
    Quic,
    /// The best TCP transport (its name), by more than [`EVEN_WITHIN`].
    Tcp(&'static str),
    /// Within [`EVEN_WITHIN`] of each other.
    Even,
}

/// QUIC against the best TCP transport in one network and cell shape.
#[derive(Debug, Clone)]
pub struct VerdictLine {
    /// What the agents did.
    pub pattern: crate::Pattern,
    /// The network profile's name (`loopback`, `50ms+1%`, ...).
    pub network: String,
    /// Agents of the cell.
    pub agents: usize,
    /// Message size, bytes.
    pub size: usize,
    /// QUIC's median msg/s.
    pub quic_msgs: f64,
    /// The QUIC cell's transport name (`quic`, or `quic-lanes` when that mapping did better).
    pub quic: &'static str,
    /// The best TCP transport's name (by msg/s).
    pub tcp: &'static str,
    /// Its median msg/s.
    pub tcp_msgs: f64,
    /// QUIC's msg/s over the TCP transport's.
    pub msgs_ratio: f64,
    /// QUIC's p90 over the TCP transport's (lower is better for QUIC).
    pub p90_ratio: Option<f64>,
    /// QUIC's p99 over the TCP transport's.
    pub p99_ratio: Option<f64>,
    /// Who won.
    pub winner: Winner,
    /// Where QUIC loses: why, in one phrase.
    pub why: Option<String>,
}

/// One line per pattern, network profile and cell shape that has a measured QUIC cell and a
/// measured TCP cell (same agents, size and window), in the report's order.
pub fn verdict(report: &Report) -> Vec<VerdictLine> {
    let measured = |c: &&CellSummary| c.skipped.is_none() && !c.runs.is_empty();
    let mut lines: Vec<VerdictLine> = Vec::new();
    let mut seen: Vec<(crate::Pattern, String, usize, usize, usize)> = Vec::new();
    for c in report.cells.iter().filter(measured) {
        let key = (
            c.config.pattern,
            c.config.network.name.clone(),
            c.config.agents,
            c.config.size,
            c.config.window,
        );
        if seen.contains(&key) {
            continue;
        }
        seen.push(key.clone());
        let same = |t: &&CellSummary| {
            (
                t.config.pattern,
                t.config.network.name.clone(),
                t.config.agents,
                t.config.size,
                t.config.window,
            ) == key
        };
        let best = |quic: bool| {
            report
                .cells
                .iter()
                .filter(measured)
                .filter(same)
                .filter(|t| match t.config.transport {
                    BenchTransport::Quic | BenchTransport::QuicLanes => quic,
                    BenchTransport::H2 | BenchTransport::Wss => !quic,
                    _ => false,
                })
                .max_by(|a, b| a.responses_per_sec.total_cmp(&b.responses_per_sec))
        };
        let (Some(q), Some(t)) = (best(true), best(false)) else {
            continue;
        };
        lines.push(compare(q, t));
    }
    lines
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (a > 0.0 && b > 0.0).then(|| a / b)
}

/// Agent-side CPU per answered request, microseconds.
fn agents_us_per_msg(c: &CellSummary) -> Option<f64> {
    let answered = c.responses_per_sec * c.config.duration_ms as f64 / 1000.0;
    (answered > 0.0 && c.agents_cpu_seconds > 0.0).then(|| c.agents_cpu_seconds * 1e6 / answered)
}

fn compare(q: &CellSummary, t: &CellSummary) -> VerdictLine {
    let msgs_ratio = ratio(q.responses_per_sec, t.responses_per_sec).unwrap_or(0.0);
    let tcp = t.config.transport.name();
    let winner = if msgs_ratio > EVEN_WITHIN {
        Winner::Quic
    } else if msgs_ratio < 1.0 / EVEN_WITHIN {
        Winner::Tcp(tcp)
    } else {
        Winner::Even
    };
    let why = (winner == Winner::Tcp(tcp)).then(|| why_quic_loses(q, t));
    VerdictLine {
        pattern: q.config.pattern,
        network: q.config.network.name.clone(),
        agents: q.config.agents,
        size: q.config.size,
        quic_msgs: q.responses_per_sec,
        quic: q.config.transport.name(),
        tcp,
        tcp_msgs: t.responses_per_sec,
        msgs_ratio,
        p90_ratio: ratio(q.p90_us, t.p90_us),
        p99_ratio: ratio(q.p99_us, t.p99_us),
        winner,
        why,
    }
}

/// Why QUIC carried less: a bottleneck that voids the cell, else what it spends per message
/// beyond TCP, else its latency.
fn why_quic_loses(q: &CellSummary, t: &CellSummary) -> String {
    if let Some(kind) = q.bottlenecks.iter().find_map(|b| bound_kind(b)) {
        if kind == "emulator" {
            return "the emulator limited QUIC's cell, not the protocol".into();
        }
    }
    let hub = ratio(
        q.hub_cpu_us_per_response.unwrap_or(0.0),
        t.hub_cpu_us_per_response.unwrap_or(0.0),
    );
    let agents = ratio(
        agents_us_per_msg(q).unwrap_or(0.0),
        agents_us_per_msg(t).unwrap_or(0.0),
    );
    let costlier = |r: Option<f64>| r.filter(|r| *r > 1.1);
    match (costlier(hub), costlier(agents)) {
        (Some(h), Some(a)) => format!(
            "CPU per message: hub {h:.1}x, agents {a:.1}x {}'s (the machine's cores are the limit)",
            t.config.transport.name()
        ),
        (Some(h), None) => format!(
            "CPU per message in the hub: {h:.1}x {}'s",
            t.config.transport.name()
        ),
        (None, Some(a)) => format!(
            "CPU per message in the agents: {a:.1}x {}'s",
            t.config.transport.name()
        ),
        (None, None) => match ratio(q.p50_us, t.p50_us) {
            Some(r) if r > 1.1 => format!("round trips {r:.1}x longer at the median"),
            _ => "no single cause in this run's counters".into(),
        },
    }
}

/// The kind of a bottleneck mark: the words before its first `:` without " bound"
/// (`emulator`, `load generator`).
pub fn bound_kind(mark: &str) -> Option<&str> {
    let head = mark.split(':').next()?.trim();
    Some(head.strip_suffix(" bound").unwrap_or(head)).filter(|k| !k.is_empty())
}

/// A message size as people write it: `1 KiB`, `64 B`.
fn size_text(bytes: usize) -> String {
    crate::format::size_label(bytes)
}

fn thousands(v: f64) -> String {
    let n = v.round().max(0.0) as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn ratio_text(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}x"))
}

impl VerdictLine {
    /// The line as the terminal, `report.md` and `report.html` show it.
    pub fn text(&self) -> String {
        let who = match &self.winner {
            Winner::Quic => "QUIC wins".to_owned(),
            Winner::Tcp(t) => format!("{t} wins"),
            Winner::Even => "even".to_owned(),
        };
        let mapping = if self.quic == "quic" {
            String::new()
        } else {
            format!(" ({})", self.quic)
        };
        let shape = match self.pattern {
            crate::Pattern::Fanout => format!("fan-out 1 → {} agents", self.agents),
            crate::Pattern::Gather => format!("gather {} agents → 1", self.agents),
            crate::Pattern::Stream => format!("stream, {} pairs", self.agents),
            crate::Pattern::Queue => format!("queue, {0} producers → {0} consumers", self.agents),
            _ => format!("{} agents", self.agents),
        };
        let mut s = format!(
            "{} · {shape} × {}: QUIC{mapping} vs best TCP ({}) {} msg/s, p90 {}, p99 {} → {} \
             ({} vs {} msg/s)",
            self.network,
            size_text(self.size),
            self.tcp,
            ratio_text(Some(self.msgs_ratio)),
            ratio_text(self.p90_ratio),
            ratio_text(self.p99_ratio),
            who,
            thousands(self.quic_msgs),
            thousands(self.tcp_msgs),
        );
        if let Some(why) = &self.why {
            s.push_str(&format!("; why: {why}"));
        }
        s
    }
}

/// The verdict as the terminal shows it first: a heading line, then one line per comparison
/// (or why there is none).
pub fn render_text(report: &Report) -> String {
    let lines = verdict(report);
    let mut out = String::from("verdict (QUIC vs the best TCP transport, medians; >1x msg/s and <1x p90/p99 favour QUIC):\n");
    if lines.is_empty() {
        out.push_str("  no network had both a QUIC and a TCP cell measured\n");
    }
    for l in &lines {
        out.push_str("  ");
        out.push_str(&l.text());
        out.push('\n');
    }
    let skipped: Vec<String> = skipped_networks(report);
    for s in skipped {
        out.push_str(&format!("  {s}\n"));
    }
    out
}

/// Networks none of whose QUIC cells ran, with the reason (the first cell's).
pub fn skipped_networks(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for c in &report.cells {
        let net = &c.config.network.name;
        if seen.contains(net) {
            continue;
        }
        let all_skipped = report
            .cells
            .iter()
            .filter(|x| {
                &x.config.network.name == net
                    && matches!(
                        x.config.transport,
                        BenchTransport::Quic | BenchTransport::QuicLanes
                    )
            })
            .all(|x| x.skipped.is_some());
        if all_skipped {
            if let Some(why) = c.skipped.as_ref() {
                seen.push(net.clone());
                out.push(format!("{net}: not measured ({why})"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_kinds_are_the_words_before_the_colon() {
        assert_eq!(
            bound_kind("load generator bound: the machine was 99% busy"),
            Some("load generator")
        );
        assert_eq!(bound_kind("emulator bound: 90% busy"), Some("emulator"));
        assert_eq!(bound_kind(""), None);
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(12205.4), "12,205");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
    }
}
