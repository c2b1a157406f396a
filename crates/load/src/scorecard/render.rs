//! A scorecard as JSON and as Markdown: one table per scenario group, the protocols side by
//! side with their ratios.
//!
//! This module owns the rendering; it must not measure.

use std::fmt::Write as _;

use super::{fmt_value, Scorecard, SCHEMA};
use crate::Proto;

/// The scorecard as one JSON object.
pub fn to_json(card: &Scorecard) -> serde_json::Result<String> {
    serde_json::to_string_pretty(card)
}

pub(super) fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => format!("{:.2}", a / b),
        _ => "-".into(),
    }
}

/// The scorecard as Markdown: a header with the machine and target, one table with a row per
/// scenario and metric and a column per protocol (plus h3/h2 and h3/http1.1 ratios on rate
/// rows, when those protocols were measured), the protocol-specific notes, and every error.
pub fn render_markdown(card: &Scorecard) -> String {
    let mut out = String::new();
    let e = &card.environment;
    let s = &card.scale;
    let _ = writeln!(out, "## agentwire scorecard ({})\n", s.name);
    let _ = writeln!(
        out,
        "{} {} ({}), {} cores{}{}, {} build; target: {} {} (verification: {}); took {:.1} s\n",
        SCHEMA,
        e.platform,
        e.cpu_model.as_deref().unwrap_or("unknown CPU"),
        e.cores,
        e.kernel
            .as_deref()
            .map(|k| format!(", kernel {k}"))
            .unwrap_or_default(),
        e.git_sha
            .as_deref()
            .map(|g| format!(", git {}", g.get(..10).unwrap_or(g)))
            .unwrap_or_default(),
        e.build_profile,
        card.target.kind,
        card.target.url,
        card.target.verification,
        card.elapsed_s,
    );
    let _ = writeln!(
        out,
        "Scale {}: {} handshakes, downloads x{}, requests/s windows of {:.1} s, round 1 = {} x 630b.bin over {}x{}, round 2 = {} x 10m.bin over {}x{}, at most {:.0} s per run.\n",
        s.name,
        s.handshakes,
        s.downloads,
        s.rps_window.as_secs_f64(),
        s.round1_requests,
        s.round1_connections,
        s.round1_streams,
        s.round2_requests,
        s.round2_connections,
        s.round2_streams,
        s.scenario_timeout.as_secs_f64(),
    );
    let has = |p: Proto| card.protos.contains(&p);
    let mut ratios: Vec<(Proto, &str)> = Vec::new();
    if has(Proto::H3) && has(Proto::H2) {
        ratios.push((Proto::H2, "h3/h2"));
    }
    if has(Proto::H3) && has(Proto::Http11) {
        ratios.push((Proto::Http11, "h3/http1.1"));
    }
    out.push_str("| scenario | metric |");
    for p in &card.protos {
        let _ = write!(out, " {p} |");
    }
    for (_, name) in &ratios {
        let _ = write!(out, " {name} |");
    }
    out.push_str("\n|---|---|");
    for _ in 0..card.protos.len() + ratios.len() {
        out.push_str("--:|");
    }
    out.push('\n');
    // Rows in order of first appearance: (scenario, metric).
    let mut rows: Vec<(&str, &str, &str, bool)> = Vec::new();
    for r in &card.runs {
        for m in &r.metrics {
            if !rows
                .iter()
                .any(|(sc, name, _, _)| *sc == r.scenario && *name == m.name)
            {
                rows.push((&r.scenario, &m.name, &r.title, m.rate));
            }
        }
    }
    let mut last_title = "";
    for (scenario, metric, title, rate) in rows {
        let value = |p: Proto| -> Option<(f64, u64, bool)> {
            let r = card
                .runs
                .iter()
                .find(|r| r.proto == p && r.scenario == scenario)?;
            let m = r.metrics.iter().find(|m| m.name == metric)?;
            Some((m.value, r.problems(), r.failure.is_some()))
        };
        let shown_title = if title == last_title { "" } else { title };
        last_title = title;
        let _ = write!(out, "| {shown_title} | {metric} |");
        for &p in &card.protos {
            let cell = match value(p) {
                None => "-".to_string(),
                Some((_, _, true)) => "failed".to_string(),
                Some((v, 0, _)) => fmt_value(v),
                Some((v, n, _)) => format!("{} ({n} err)", fmt_value(v)),
            };
            let _ = write!(out, " {cell} |");
        }
        for (other, _) in &ratios {
            let cell = if rate {
                ratio(value(Proto::H3).map(|v| v.0), value(*other).map(|v| v.0))
            } else {
                String::new()
            };
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
    let mut notes: Vec<&str> = Vec::new();
    for r in &card.runs {
        if let Some(n) = r.note.as_deref() {
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
    }
    if !notes.is_empty() {
        out.push_str("\nNotes:\n");
        for r in &card.runs {
            if let Some(n) = r.note.as_deref() {
                let _ = writeln!(out, "- {} {}: {n}", r.scenario, r.proto);
            }
        }
    }
    if card.total_errors == 0 {
        out.push_str("\nErrors: none.\n");
    } else {
        let _ = writeln!(out, "\nErrors: {} in all.", card.total_errors);
        for r in card.runs.iter().filter(|r| r.problems() > 0) {
            let _ = write!(out, "- {} {}:", r.scenario, r.proto);
            if let Some(f) = &r.failure {
                let _ = write!(out, " could not run: {f};");
            }
            if r.cut_short {
                let _ = write!(
                    out,
                    " cut short by the {:.0} s limit ({} of {} requests);",
                    s.scenario_timeout.as_secs_f64(),
                    r.requests,
                    r.requests_asked.unwrap_or(0)
                );
            }
            for (kind, n) in &r.errors_by_kind {
                let example = r
                    .error_examples
                    .get(kind)
                    .map(|e| format!(" (e.g. {e})"))
                    .unwrap_or_default();
                let _ = write!(out, " {kind}: {n}{example};");
            }
            out.push('\n');
        }
    }
    out
}
