//! Scorecards side by side, and scorecard charts.
//!
//! [`compare_markdown`] puts several scorecards (one per server, each from
//! `agentwire scorecard --url … --label NAME --json`) into one table per protocol: a row per
//! scenario and metric, a column per server, and the first server's ratio to the best of the
//! others. [`compare_charts`] draws the same as grouped bars (one chart per protocol and kind
//! of number); [`card_charts`] draws one scorecard's protocols side by side.
//!
//! It reads scorecards through [`CardView`], the part of the JSON it needs, so that files
//! from other runs and versions of the schema with the same fields still compare. This
//! module must not measure anything, and must not panic on a file it is given: a file that
//! is not a scorecard is an error naming the file.

use std::fmt::Write as _;
use std::path::Path;

use agentwire_measure::chart::{grouped_bars_svg, BarSeries};
use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::scorecard::{fmt_value, Scorecard, SERVER_CPU_METRIC};

/// The protocols, in the order tables and charts show them.
const PROTOS: [&str; 3] = ["h3", "h2", "http1.1"];

/// What a comparison reads of a scorecard JSON.
#[derive(Debug, Clone, Deserialize)]
pub struct CardView {
    /// Schema name (`agentwire-scorecard/1`).
    pub schema: String,
    /// The server.
    pub target: TargetView,
    /// Scale name.
    pub scale: ScaleView,
    /// Every scenario × protocol.
    pub runs: Vec<RunView>,
    /// Problems in all.
    pub total_errors: u64,
    /// The machine.
    #[serde(default)]
    pub environment: EnvironmentView,
}

/// The measured server.
#[derive(Debug, Clone, Deserialize)]
pub struct TargetView {
    /// Base URL.
    pub url: String,
    /// Its name (older files have none: the URL stands in).
    #[serde(default)]
    pub label: Option<String>,
    /// Its process id, when its CPU time was measured.
    #[serde(default)]
    pub server_pid: Option<u32>,
    /// Client threads.
    #[serde(default)]
    pub client_threads: Option<usize>,
}

/// The scale of a scorecard.
#[derive(Debug, Clone, Deserialize)]
pub struct ScaleView {
    /// `full`, `quick` or `tiny`.
    pub name: String,
}

/// The machine of a scorecard.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EnvironmentView {
    /// CPU model.
    #[serde(default)]
    pub cpu_model: Option<String>,
    /// Logical cores.
    #[serde(default)]
    pub cores: usize,
    /// Git commit of the build.
    #[serde(default)]
    pub git_sha: Option<String>,
}

/// One scenario over one protocol.
#[derive(Debug, Clone, Deserialize)]
pub struct RunView {
    /// Scenario id.
    pub scenario: String,
    /// Scenario title.
    pub title: String,
    /// `h3`, `h2` or `http1.1`.
    pub proto: String,
    /// The numbers.
    pub metrics: Vec<MetricView>,
    /// Failed requests.
    pub errors: u64,
    /// Why the run could not be made at all.
    #[serde(default)]
    pub failure: Option<String>,
    /// Stopped by the time limit before its count.
    #[serde(default)]
    pub cut_short: bool,
}

/// One number of a run.
#[derive(Debug, Clone, Deserialize)]
pub struct MetricView {
    /// Name with unit.
    pub name: String,
    /// Value.
    pub value: f64,
    /// More is better.
    pub rate: bool,
}

impl CardView {
    /// Reads a scorecard JSON file.
    pub fn load(path: &Path) -> Result<CardView> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let card: CardView = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a scorecard JSON", path.display()))?;
        if !card.schema.starts_with("agentwire-scorecard/") {
            bail!(
                "{}: schema {:?} is not an agentwire scorecard",
                path.display(),
                card.schema
            );
        }
        Ok(card)
    }

    /// The view of a scorecard made in this process.
    pub fn of(card: &Scorecard) -> Result<CardView> {
        let value = serde_json::to_value(card).context("encoding the scorecard")?;
        serde_json::from_value(value).context("reading back the scorecard")
    }

    /// The server's name.
    pub fn label(&self) -> &str {
        self.target.label.as_deref().unwrap_or(&self.target.url)
    }

    fn value(&self, proto: &str, scenario: &str, metric: &str) -> Option<Cell> {
        let run = self
            .runs
            .iter()
            .find(|r| r.proto == proto && r.scenario == scenario)?;
        if run.failure.is_some() {
            return Some(Cell::Failed);
        }
        let m = run.metrics.iter().find(|m| m.name == metric)?;
        let problems = run.errors + u64::from(run.cut_short);
        Some(Cell::Value(m.value, problems))
    }

    fn speaks(&self, proto: &str) -> bool {
        self.runs.iter().any(|r| r.proto == proto)
    }
}

#[derive(Debug, Clone, Copy)]
enum Cell {
    Value(f64, u64),
    Failed,
}

impl Cell {
    fn number(self) -> Option<f64> {
        match self {
            Cell::Value(v, _) => Some(v),
            Cell::Failed => None,
        }
    }
}

/// Rows in order of first appearance over all cards: (scenario, title, metric, rate).
fn rows<'a>(cards: &'a [CardView], proto: &str) -> Vec<(&'a str, &'a str, &'a str, bool)> {
    let mut out: Vec<(&str, &str, &str, bool)> = Vec::new();
    for card in cards {
        for r in card.runs.iter().filter(|r| r.proto == proto) {
            for m in &r.metrics {
                if !out
                    .iter()
                    .any(|(s, _, name, _)| *s == r.scenario && *name == m.name)
                {
                    out.push((&r.scenario, &r.title, &m.name, m.rate));
                }
            }
        }
    }
    out
}

/// The first value's ratio to the best of the others: the highest for a rate, the lowest
/// for a time or a cost. `None` when either side is missing or the best is zero.
///
/// ```
/// use agentwire_load::compare::ratio_to_best;
/// assert_eq!(ratio_to_best(Some(50.0), &[Some(100.0), Some(25.0)], true), Some(0.5));
/// assert_eq!(ratio_to_best(Some(50.0), &[Some(100.0), Some(25.0)], false), Some(2.0));
/// assert_eq!(ratio_to_best(Some(1.0), &[None], true), None);
/// ```
pub fn ratio_to_best(first: Option<f64>, others: &[Option<f64>], rate: bool) -> Option<f64> {
    let first = first?;
    let values = others.iter().flatten().copied().filter(|v| v.is_finite());
    let best = if rate {
        values.fold(None, |b: Option<f64>, v| Some(b.map_or(v, |b| b.max(v))))
    } else {
        values.fold(None, |b: Option<f64>, v| Some(b.map_or(v, |b| b.min(v))))
    }?;
    (best > 0.0).then(|| first / best)
}

/// The scorecards side by side as Markdown: who was measured, then one table per protocol
/// (columns: the servers that speak it; last column: the first server's ratio to the best
/// of the others, where > 1 means the first is better for rates and worse for times and
/// costs), then every server's errors.
pub fn compare_markdown(cards: &[CardView], sources: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Scorecards side by side\n");
    out.push_str(
        "| server | URL | scale | client threads | server CPU measured | errors | file |\n",
    );
    out.push_str("|---|---|---|--:|---|--:|---|\n");
    for (i, c) in cards.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            c.label(),
            c.target.url,
            c.scale.name,
            c.target
                .client_threads
                .map_or_else(|| "?".into(), |t| t.to_string()),
            if c.target.server_pid.is_some() {
                "yes"
            } else {
                "no"
            },
            c.total_errors,
            sources.get(i).map_or("", String::as_str)
        );
    }
    if let Some(first) = cards.first() {
        let e = &first.environment;
        let _ = writeln!(
            out,
            "\nMachine: {}, {} cores{}.",
            e.cpu_model.as_deref().unwrap_or("unknown CPU"),
            e.cores,
            e.git_sha
                .as_deref()
                .map(|g| format!(", agentwire git {}", g.get(..10).unwrap_or(g)))
                .unwrap_or_default()
        );
    }
    for proto in PROTOS {
        let present: Vec<&CardView> = cards.iter().filter(|c| c.speaks(proto)).collect();
        if present.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n### {proto}\n");
        let first_label = cards.first().map_or("", CardView::label);
        let with_ratio = present.len() > 1 && cards.first().is_some_and(|c| c.speaks(proto));
        out.push_str("| scenario | metric |");
        for c in &present {
            let _ = write!(out, " {} |", c.label());
        }
        if with_ratio {
            let _ = write!(out, " {first_label} ÷ best other |");
        }
        out.push_str("\n|---|---|");
        for _ in 0..present.len() + usize::from(with_ratio) {
            out.push_str("--:|");
        }
        out.push('\n');
        let owned: Vec<CardView> = present.iter().map(|c| (*c).clone()).collect();
        let mut last_title = "";
        for (scenario, title, metric, rate) in rows(&owned, proto) {
            let shown = if title == last_title { "" } else { title };
            last_title = title;
            let _ = write!(out, "| {shown} | {metric} |");
            let cells: Vec<Option<Cell>> = present
                .iter()
                .map(|c| c.value(proto, scenario, metric))
                .collect();
            for cell in &cells {
                let text = match cell {
                    None => "-".to_string(),
                    Some(Cell::Failed) => "failed".to_string(),
                    Some(Cell::Value(v, 0)) => fmt_value(*v),
                    Some(Cell::Value(v, n)) => format!("{} ({n} err)", fmt_value(*v)),
                };
                let _ = write!(out, " {text} |");
            }
            if with_ratio {
                let numbers: Vec<Option<f64>> =
                    cells.iter().map(|c| c.and_then(Cell::number)).collect();
                let text = numbers
                    .split_first()
                    .and_then(|(first, rest)| ratio_to_best(*first, rest, rate))
                    .map_or_else(|| "-".into(), |r| format!("{r:.2}"));
                let _ = write!(out, " {text} |");
            }
            out.push('\n');
        }
    }
    out.push_str(
        "\nRatios: for rates (req/s, MB/s, handshakes/s) more than 1 means the first server is \
         ahead; for times (ms) and costs (server CPU us/req) more than 1 means it is behind.\n",
    );
    let troubled: Vec<&CardView> = cards.iter().filter(|c| c.total_errors > 0).collect();
    if troubled.is_empty() {
        out.push_str("\nErrors: none.\n");
    } else {
        out.push_str("\nErrors:\n");
        for c in troubled {
            let _ = write!(out, "- {}: {} in all;", c.label(), c.total_errors);
            for r in c
                .runs
                .iter()
                .filter(|r| r.errors > 0 || r.failure.is_some() || r.cut_short)
            {
                let _ = write!(out, " {} {}", r.scenario, r.proto);
                if let Some(f) = &r.failure {
                    let _ = write!(out, " (could not run: {f})");
                } else {
                    let _ = write!(
                        out,
                        " ({} errors{})",
                        r.errors,
                        if r.cut_short { ", cut short" } else { "" }
                    );
                }
                out.push(';');
            }
            out.push('\n');
        }
    }
    out
}

/// A chart: its file name, what it shows, and the SVG document.
#[derive(Debug, Clone)]
pub struct Chart {
    /// File name, e.g. `h3-req-per-s.svg`.
    pub file: String,
    /// What it shows.
    pub title: String,
    /// The SVG document.
    pub svg: String,
}

/// A kind of number charted: the metric, the file stem, the axis text, and which scenarios
/// (numbers of very different sizes are kept apart).
struct Family {
    metric: &'static str,
    stem: &'static str,
    axis: &'static str,
    keep: fn(&str) -> bool,
}

const FAMILIES: [Family; 3] = [
    Family {
        metric: "req/s",
        stem: "req-per-s",
        axis: "requests per second",
        keep: |s: &str| !s.starts_with("serial") && !s.starts_with("parallel") && s != "round2-10m",
    },
    Family {
        metric: "MB/s",
        stem: "mb-per-s",
        axis: "MB per second",
        keep: |_: &str| true,
    },
    Family {
        metric: SERVER_CPU_METRIC,
        stem: "server-cpu",
        axis: "server CPU us per request",
        keep: |s: &str| {
            s.starts_with("rps")
                || s.starts_with("long")
                || s.starts_with("short")
                || s == "round1-630b"
        },
    },
];

/// Scenarios (in order of first appearance) that have `metric` for `proto` in any card.
fn scenarios_with(
    cards: &[CardView],
    proto: Option<&str>,
    metric: &str,
    keep: fn(&str) -> bool,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in cards {
        for r in &c.runs {
            if proto.is_some_and(|p| p != r.proto) || !keep(&r.scenario) {
                continue;
            }
            if r.metrics.iter().any(|m| m.name == metric) && !out.contains(&r.scenario) {
                out.push(r.scenario.clone());
            }
        }
    }
    out
}

/// One family's bars as a chart, if there is anything to draw.
fn chart(
    file: String,
    title: String,
    family: &Family,
    groups: &[String],
    series: &[BarSeries],
) -> Option<Chart> {
    let svg = grouped_bars_svg(&title, "scenario", family.axis, groups, series)?;
    Some(Chart { file, title, svg })
}

/// The bars of `cards` for one family: one series per card (labelled by `name`), one value per
/// scenario in `groups`, all for protocol `proto`.
fn series_of<'a>(
    cards: impl Iterator<Item = (&'a CardView, &'a str)>,
    name: impl Fn(&'a CardView, &'a str) -> String,
    groups: &[String],
    metric: &str,
) -> Vec<BarSeries> {
    cards
        .map(|(c, proto)| BarSeries {
            label: name(c, proto),
            values: groups
                .iter()
                .map(|g| c.value(proto, g, metric).and_then(Cell::number))
                .collect(),
        })
        .collect()
}

/// Charts of several servers side by side: for each protocol and kind of number (req/s,
/// MB/s, server CPU per request), one bar per server in each scenario.
pub fn compare_charts(cards: &[CardView]) -> Vec<Chart> {
    let mut out = Vec::new();
    for proto in PROTOS {
        for family in &FAMILIES {
            let groups = scenarios_with(cards, Some(proto), family.metric, family.keep);
            let speaking = cards.iter().filter(|c| c.speaks(proto)).map(|c| (c, proto));
            let series = series_of(
                speaking,
                |c, _| c.label().to_owned(),
                &groups,
                family.metric,
            );
            let file = format!("{}-{}.svg", proto.replace('.', ""), family.stem);
            let title = format!("{proto}: {} by server", family.metric);
            out.extend(chart(file, title, family, &groups, &series));
        }
    }
    out
}

/// Charts of one scorecard: for each kind of number, one bar per protocol in each scenario.
pub fn card_charts(card: &CardView) -> Vec<Chart> {
    let mut out = Vec::new();
    for family in &FAMILIES {
        let groups = scenarios_with(std::slice::from_ref(card), None, family.metric, family.keep);
        let protos = PROTOS.iter().filter(|p| card.speaks(p)).map(|p| (card, *p));
        let series = series_of(protos, |_, p| p.to_owned(), &groups, family.metric);
        let file = format!("scorecard-{}.svg", family.stem);
        let title = format!("{}: {} by protocol", card.label(), family.metric);
        out.extend(chart(file, title, family, &groups, &series));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(label: &str, runs: &[(&str, &str, f64)]) -> CardView {
        CardView {
            schema: "agentwire-scorecard/1".into(),
            target: TargetView {
                url: format!("https://{label}"),
                label: Some(label.into()),
                server_pid: Some(1),
                client_threads: Some(1),
            },
            scale: ScaleView {
                name: "tiny".into(),
            },
            runs: runs
                .iter()
                .map(|(scenario, proto, v)| RunView {
                    scenario: (*scenario).into(),
                    title: format!("title {scenario}"),
                    proto: (*proto).into(),
                    metrics: vec![
                        MetricView {
                            name: "req/s".into(),
                            value: *v,
                            rate: true,
                        },
                        MetricView {
                            name: SERVER_CPU_METRIC.into(),
                            value: 1e6 / v,
                            rate: false,
                        },
                    ],
                    errors: 0,
                    failure: None,
                    cut_short: false,
                })
                .collect(),
            total_errors: 0,
            environment: EnvironmentView::default(),
        }
    }

    #[test]
    fn tables_per_protocol_with_ratio_to_the_best_other() {
        let ours = card(
            "ours",
            &[("rps-10k-p1", "h3", 900.0), ("rps-10k-p1", "h2", 500.0)],
        );
        let a = card("a", &[("rps-10k-p1", "h3", 1000.0)]);
        let b = card(
            "b",
            &[("rps-10k-p1", "h3", 600.0), ("rps-10k-p1", "h2", 250.0)],
        );
        let md = compare_markdown(&[ours, a, b], &["x.json".into()]);
        assert!(md.contains("### h3"), "{md}");
        assert!(
            md.contains("| scenario | metric | ours | a | b | ours ÷ best other |"),
            "{md}"
        );
        // h3 req/s: 900 against the best other (1000).
        assert!(
            md.contains("| title rps-10k-p1 | req/s | 900.0 | 1000 | 600.0 | 0.90 |"),
            "{md}"
        );
        // h2 has no server "a".
        assert!(
            md.contains("| scenario | metric | ours | b | ours ÷ best other |"),
            "{md}"
        );
        assert!(md.contains("| req/s | 500.0 | 250.0 | 2.00 |"), "{md}");
        // Costs: lower is better, so the ratio is to the lowest other (1000 us for a).
        assert!(
            md.contains(&format!(
                "| {SERVER_CPU_METRIC} | 1111 | 1000 | 1667 | 1.11 |"
            )),
            "{md}"
        );
        assert!(md.contains("Errors: none."));
        assert!(!md.contains("### http1.1"));
    }

    #[test]
    fn charts_per_protocol_and_family() {
        let ours = card(
            "ours",
            &[("rps-10k-p1", "h3", 900.0), ("round1-630b", "h2", 500.0)],
        );
        let peer = card("peer", &[("rps-10k-p1", "h3", 1000.0)]);
        let charts = compare_charts(&[ours.clone(), peer]);
        let files: Vec<&str> = charts.iter().map(|c| c.file.as_str()).collect();
        assert!(files.contains(&"h3-req-per-s.svg"), "{files:?}");
        assert!(files.contains(&"h3-server-cpu.svg"), "{files:?}");
        assert!(files.contains(&"h2-req-per-s.svg"), "{files:?}");
        assert!(
            !files.iter().any(|f| f.contains("mb-per-s")),
            "no MB/s numbers: {files:?}"
        );
        assert!(charts.iter().all(|c| c.svg.contains("<rect")));
        let one = card_charts(&ours);
        assert!(one.iter().any(|c| c.file == "scorecard-req-per-s.svg"));
    }

    #[test]
    fn a_file_that_is_not_a_scorecard_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        std::fs::write(&p, "{\"schema\":\"agentwire-load/2\"}").unwrap();
        let e = format!("{:#}", CardView::load(&p).unwrap_err());
        assert!(e.contains("x.json"), "{e}");
        std::fs::write(&p, "not json").unwrap();
        assert!(CardView::load(&p).is_err());
        assert!(CardView::load(&dir.path().join("missing.json")).is_err());
    }
}
