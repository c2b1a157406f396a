//! The bench report renderer: turns a finished [`Report`] into files a person reads — a
//! Markdown report (`report.md`), SVG charts (`charts/<name>.svg`, drawn with `plotters`) and
//! one self-contained HTML page (`report.html`, all CSS and SVG inline, no external resource,
//! no network) — next to the JSON written by [`crate::write_report`].
//!
//! This module only renders: it must not measure, time or run anything, and it must not
//! invent numbers. Every number shown is a field of the report (or, where a chart needs one
//! value per point, the median of the cell medians it stands for, as its axis says); a value
//! the report does not have is shown as "–", and a chart without data is left out.
//!
//! ```no_run
//! # fn demo(report: &agentwire_bench::Report) -> anyhow::Result<()> {
//! let files = agentwire_bench::report::write_all(report, std::path::Path::new("bench-out"))?;
//! println!("open {}", files.html.display());
//! # Ok(()) }
//! ```

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use agentwire_measure::chart::{bar_chart, line_chart, palette, BarSeriesSpec, LineSeriesSpec};
use anyhow::{Context, Result};
use plotters::prelude::*;

use crate::scenario::{BenchTransport, CellConfig};
use crate::{stats, CellResult, CellSummary, Report};

/// At most this many latency CDF charts are drawn; the other groups are named in the report.
pub const MAX_LATENCY_CHARTS: usize = 12;

/// Shown where the report has no value.
const NONE: &str = "–";

const MIB: f64 = 1024.0 * 1024.0;

/// Paths of everything written for one run.
#[derive(Debug, Clone)]
pub struct ReportFiles {
    /// The full data, `bench-<unix>.json`.
    pub json: PathBuf,
    /// `report.md`.
    pub markdown: PathBuf,
    /// `report.html`, self-contained.
    pub html: PathBuf,
    /// `charts/<name>.svg`, one per chart, in the order of [`charts`].
    pub charts: Vec<PathBuf>,
}

/// One chart, rendered.
#[derive(Debug, Clone)]
pub struct Chart {
    /// File stem, e.g. `throughput-0ms` (only ASCII letters, digits, `-`, `_` and `.`).
    pub name: String,
    /// What the chart shows, for captions.
    pub title: String,
    /// The whole SVG document.
    pub svg: String,
}

/// Writes into `dir` (created if missing): the JSON (`bench-<unix>.json`, by
/// [`crate::write_report`]), `report.md`, `charts/<name>.svg` for each chart and a
/// self-contained `report.html`.
pub fn write_all(report: &Report, dir: &Path) -> Result<ReportFiles> {
    let json = crate::write_report(report, dir)?;
    let charts = charts(report);
    let mut chart_paths = Vec::with_capacity(charts.len());
    if !charts.is_empty() {
        let chart_dir = dir.join("charts");
        std::fs::create_dir_all(&chart_dir)
            .with_context(|| format!("creating {}", chart_dir.display()))?;
        for chart in &charts {
            let path = chart_dir.join(format!("{}.svg", chart.name));
            std::fs::write(&path, &chart.svg)
                .with_context(|| format!("writing {}", path.display()))?;
            chart_paths.push(path);
        }
    }
    let markdown = dir.join("report.md");
    std::fs::write(&markdown, render_markdown(report, &charts))
        .with_context(|| format!("writing {}", markdown.display()))?;
    let html = dir.join("report.html");
    std::fs::write(&html, render_html(report, &charts))
        .with_context(|| format!("writing {}", html.display()))?;
    Ok(ReportFiles {
        json,
        markdown,
        html,
        charts: chart_paths,
    })
}

/// The report as Markdown; each chart is referenced as `![title](charts/name.svg)`.
pub fn render_markdown(report: &Report, charts: &[Chart]) -> String {
    let mut out = String::new();
    for block in document(report, charts) {
        match block {
            Block::Heading(level, text) => {
                let _ = writeln!(out, "{} {}\n", "#".repeat(level), md_escape(&text));
            }
            Block::Para(text) => {
                let _ = writeln!(out, "{}\n", md_escape(&text));
            }
            Block::Code(text) => {
                let fence = "`".repeat(longest_backtick_run(&text).max(2) + 1);
                let _ = writeln!(out, "{fence}\n{text}\n{fence}\n");
            }
            Block::Table(table) => {
                let cells = |row: &[String]| {
                    row.iter()
                        .map(|c| md_escape(c))
                        .collect::<Vec<_>>()
                        .join(" | ")
                };
                let _ = writeln!(out, "| {} |", cells(&table.head));
                let align: Vec<&str> = (0..table.head.len())
                    .map(|i| if table.is_text(i) { "---" } else { "---:" })
                    .collect();
                let _ = writeln!(out, "| {} |", align.join(" | "));
                for row in &table.rows {
                    let _ = writeln!(out, "| {} |", cells(row));
                }
                out.push('\n');
            }
            Block::List(items) => {
                for item in items {
                    let _ = writeln!(out, "- {}", md_escape(&item));
                }
                out.push('\n');
            }
            Block::Figure(chart) => {
                let _ = writeln!(
                    out,
                    "![{}](charts/{}.svg)\n",
                    md_escape(&chart.title),
                    chart.name
                );
            }
        }
    }
    out
}

/// The report as one self-contained HTML page: the same content as the Markdown, every chart's
/// SVG inline in a `<figure>`, inline CSS, and a small inline script that checks on load that
/// every chart has a non-empty box and draws something, recording the result as
/// `data-charts` (the number of charts) and `data-check` (`ok` or `fail: <reason>`) on `<body>`.
pub fn render_html(report: &Report, charts: &[Chart]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>agentwire bench report {}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n<main>\n",
        report.started_unix
    );
    for block in document(report, charts) {
        match block {
            Block::Heading(level, text) => {
                let _ = writeln!(out, "<h{level}>{}</h{level}>", html_escape(&text));
            }
            Block::Para(text) => {
                let _ = writeln!(out, "<p>{}</p>", html_escape(&text));
            }
            Block::Code(text) => {
                let _ = writeln!(out, "<pre><code>{}</code></pre>", html_escape(&text));
            }
            Block::Table(table) => {
                out.push_str("<div class=\"table\"><table>\n<thead><tr>");
                for (i, h) in table.head.iter().enumerate() {
                    let class = if table.is_text(i) {
                        ""
                    } else {
                        " class=\"num\""
                    };
                    let _ = write!(out, "<th{class}>{}</th>", html_escape(h));
                }
                out.push_str("</tr></thead>\n<tbody>\n");
                for row in &table.rows {
                    out.push_str("<tr>");
                    for (i, c) in row.iter().enumerate() {
                        let class = if table.is_text(i) {
                            ""
                        } else {
                            " class=\"num\""
                        };
                        let _ = write!(out, "<td{class}>{}</td>", html_escape(c));
                    }
                    out.push_str("</tr>\n");
                }
                out.push_str("</tbody>\n</table></div>\n");
            }
            Block::List(items) => {
                out.push_str("<ul>\n");
                for item in items {
                    let _ = writeln!(out, "<li>{}</li>", html_escape(&item));
                }
                out.push_str("</ul>\n");
            }
            Block::Figure(chart) => {
                let _ = write!(
                    out,
                    "<figure id=\"chart-{}\">\n{}\n<figcaption>{}</figcaption>\n</figure>\n",
                    html_escape(&chart.name),
                    chart.svg.trim(),
                    html_escape(&chart.title)
                );
            }
        }
    }
    let _ = write!(
        out,
        "</main>\n<script>\n{CHECK_SCRIPT}</script>\n</body>\n</html>\n"
    );
    out
}

/// Builds every chart as an SVG string: throughput per network profile, latency CDFs (at most
/// [`MAX_LATENCY_CHARTS`]), connect time and peak RSS against agents per network profile, and
/// priority-class p99 per network profile. Charts without data are left out. Pure: reads the
/// report only.
pub fn charts(report: &Report) -> Vec<Chart> {
    let mut out: Vec<Chart> = Vec::new();
    let mut push = |name: String, title: String, svg: Option<String>| {
        let Some(svg) = svg else { return };
        let mut unique = name.clone();
        let mut n = 2;
        while out.iter().any(|c| c.name == unique) {
            unique = format!("{name}-{n}");
            n += 1;
        }
        out.push(Chart {
            name: unique,
            title,
            svg,
        });
    };
    let networks = networks(report);
    for net in &networks {
        if let Some((title, svg)) = throughput_chart(report, net) {
            push(format!("throughput-{}", slug(net)), title, Some(svg));
        }
    }
    for group in latency_groups(report).iter().take(MAX_LATENCY_CHARTS) {
        if let Some((title, svg)) = latency_chart(report, group) {
            let name = format!(
                "latency-{}-{}x{}",
                slug(&group.network),
                group.agents,
                group.size
            );
            push(name, title, Some(svg));
        }
    }
    for net in &networks {
        if let Some((title, svg)) = connect_chart(report, net) {
            push(format!("connect-{}", slug(net)), title, Some(svg));
        }
    }
    for net in &networks {
        if let Some((title, svg)) = rss_chart(report, net) {
            push(format!("rss-{}", slug(net)), title, Some(svg));
        }
    }
    for net in &networks {
        if let Some((title, svg)) = priority_chart(report, net) {
            push(format!("priority-{}", slug(net)), title, Some(svg));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The document: one list of blocks, rendered as Markdown or HTML.

enum Block<'a> {
    Heading(usize, String),
    Para(String),
    Code(String),
    Table(Table),
    List(Vec<String>),
    Figure(&'a Chart),
}

struct Table {
    head: Vec<String>,
    /// Per column: true for text (left-aligned), false for numbers (right-aligned).
    text: Vec<bool>,
    rows: Vec<Vec<String>>,
}

/// Columns that hold text; every other column holds numbers.
const TEXT_COLUMNS: [&str; 9] = [
    "field",
    "value",
    "setting",
    "transport",
    "network",
    "noisy",
    "class",
    "hub mode",
    "reason",
];

impl Table {
    fn new(head: &[&str]) -> Self {
        Table {
            head: head.iter().map(|h| (*h).to_owned()).collect(),
            text: head.iter().map(|h| TEXT_COLUMNS.contains(h)).collect(),
            rows: Vec::new(),
        }
    }

    fn is_text(&self, col: usize) -> bool {
        self.text.get(col).copied().unwrap_or(true)
    }
}

fn opt_int(v: Option<u64>) -> String {
    v.map_or(NONE.to_owned(), |v| v.to_string())
}

/// Cells that were asked to run (not skipped), in run order.
fn measured(report: &Report) -> impl Iterator<Item = &CellSummary> {
    report.cells.iter().filter(|c| c.skipped.is_none())
}

/// Cells with at least one run.
fn with_runs(report: &Report) -> impl Iterator<Item = &CellSummary> {
    measured(report).filter(|c| !c.runs.is_empty())
}

/// transport, network, agents, size: the first columns of every per-cell table.
const CELL_HEAD: [&str; 4] = ["transport", "network", "agents", "size B"];

fn cell_cols(c: &CellConfig) -> Vec<String> {
    vec![
        c.transport.name().to_owned(),
        c.network.name.clone(),
        c.agents.to_string(),
        c.size.to_string(),
    ]
}

/// A cell as a chart or table caption, e.g. `quic, network 0ms, 10 agents × 1 KiB` (the
/// progress line uses [`crate::cell_label`]).
fn cell_caption(c: &CellConfig) -> String {
    format!(
        "{}, network {}, {} agents × {}",
        c.transport.name(),
        c.network.name,
        c.agents,
        size_label(c.size)
    )
}

fn head(cols: &[&'static str]) -> Vec<&'static str> {
    let mut h: Vec<&'static str> = CELL_HEAD.to_vec();
    h.extend_from_slice(cols);
    h
}

fn document<'a>(report: &Report, charts: &'a [Chart]) -> Vec<Block<'a>> {
    let mut doc = vec![Block::Heading(1, "agentwire bench report".into())];
    doc.push(Block::Para(format!(
        "Schema {}, started {} (Unix {}). Every number below is taken from the JSON report \
         bench-{}.json written next to this file; tables show the median over a cell's \
         repetitions, latencies in milliseconds.",
        report.schema,
        utc_time(report.started_unix),
        report.started_unix,
        report.started_unix
    )));

    doc.push(Block::Heading(2, "Verdict".into()));
    let lines = crate::verdict::verdict(report);
    let mut verdict: Vec<String> = lines.iter().map(|l| l.text()).collect();
    verdict.extend(crate::verdict::skipped_networks(report));
    if verdict.is_empty() {
        verdict.push("No network had both a QUIC and a TCP cell measured.".into());
    }
    doc.push(Block::Para(
        "QUIC against the best TCP transport (HTTP/2 or WebSocket) per network and cell \
         shape, medians: above 1x msg/s and below 1x p90/p99 favour QUIC; within 5 % is even."
            .into(),
    ));
    doc.push(Block::List(verdict));

    doc.push(Block::Heading(2, "Command line".into()));
    doc.push(Block::Code(shell_join(&report.command_line)));

    doc.push(Block::Heading(2, "Environment".into()));
    let env = &report.environment;
    let mut t = Table::new(&["field", "value"]);
    for (k, v) in [
        ("CPU model", opt_str(&env.cpu_model)),
        ("cores", env.cores.to_string()),
        ("kernel", opt_str(&env.kernel)),
        ("git commit", opt_str(&env.git_sha)),
        ("rustc", opt_str(&env.rustc)),
        ("build profile", env.build_profile.to_owned()),
        ("target", env.target.clone()),
        (
            "crate versions",
            env.crate_versions
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            "net.core.rmem_max / wmem_max",
            format!(
                "{} / {}",
                opt_int(env.network.rmem_max),
                opt_int(env.network.wmem_max)
            ),
        ),
        (
            "QUIC UDP buffers granted (send / recv)",
            env.network
                .quic_udp_buffers
                .map_or(NONE.to_owned(), |(s, r)| format!("{s} / {r}")),
        ),
        (
            "UDP GSO / GRO segments",
            format!(
                "{} / {}",
                opt_int(env.network.udp_gso_segments.map(|v| v as u64)),
                opt_int(env.network.udp_gro_segments.map(|v| v as u64))
            ),
        ),
        (
            "TCP congestion control",
            opt_str(&env.network.tcp_congestion_control),
        ),
    ] {
        t.rows.push(vec![k.to_owned(), v]);
    }
    doc.push(Block::Table(t));

    doc.push(Block::Heading(2, "Configuration".into()));
    doc.push(Block::Table(config_table(report)));

    throughput_section(report, &mut doc);
    open_loop_section(report, &mut doc);
    connect_section(report, &mut doc);
    priority_section(report, &mut doc);
    resources_section(report, &mut doc);

    doc.push(Block::Heading(2, "Skipped cells".into()));
    let mut t = Table::new(&head(&["reason"]));
    for c in &report.cells {
        if let Some(reason) = &c.skipped {
            let mut row = cell_cols(&c.config);
            row.push(reason.clone());
            t.rows.push(row);
        }
    }
    if t.rows.is_empty() {
        doc.push(Block::Para("None.".into()));
    } else {
        doc.push(Block::Table(t));
    }

    doc.push(Block::Heading(2, "Charts".into()));
    if charts.is_empty() {
        doc.push(Block::Para("No charts: no cell has data to draw.".into()));
    }
    for chart in charts {
        doc.push(Block::Figure(chart));
    }
    let groups = latency_groups(report);
    if groups.len() > MAX_LATENCY_CHARTS {
        let rest: Vec<String> = groups[MAX_LATENCY_CHARTS..]
            .iter()
            .map(|g| {
                format!(
                    "network {}, {} agents × {}",
                    g.network,
                    g.agents,
                    size_label(g.size)
                )
            })
            .collect();
        doc.push(Block::Para(format!(
            "Latency CDFs are drawn for the first {MAX_LATENCY_CHARTS} groups only; {} more \
             groups are in the tables and the JSON but not drawn: {}.",
            rest.len(),
            rest.join("; ")
        )));
    }
    doc
}

/// The distinct values of `values`, in the order they first appear.
fn first_seen(values: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for v in values {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen
}

fn config_table(report: &Report) -> Table {
    let c = &report.config;
    let mut t = Table::new(&["setting", "value"]);
    let join = |v: Vec<String>| {
        if v.is_empty() {
            NONE.to_owned()
        } else {
            v.join(", ")
        }
    };
    let distinct = |f: &dyn Fn(&CellConfig) -> String| -> Vec<String> {
        first_seen(report.cells.iter().map(|cell| f(&cell.config)))
    };
    let ms_or_none = |ms: u64| {
        if ms == 0 {
            "none".to_owned()
        } else {
            format!("{ms} ms")
        }
    };
    let rows: Vec<(&str, String)> = vec![
        ("preset", c.preset.clone()),
        ("hub", report.hub_mode.to_owned()),
        (
            "transports",
            join(c.transports.iter().map(|t| t.name().to_owned()).collect()),
        ),
        (
            "scenarios (agents × bytes @ network)",
            join(
                c.scenarios
                    .iter()
                    .map(|s| format!("{} × {} @ {}", s.agents, s.size, s.network))
                    .collect(),
            ),
        ),
        ("repetitions", c.repetitions.to_string()),
        ("warm-up", format!("{} ms", c.warmup_ms)),
        (
            "measured window (duration)",
            format!("{} ms", c.duration_ms),
        ),
        ("request timeout", format!("{} ms", c.request_timeout_ms)),
        (
            "window (requests in flight per client)",
            c.window.map_or_else(
                || "auto (about 16 MiB in flight over all clients, 1 to 16 each)".to_owned(),
                |w| w.to_string(),
            ),
        ),
        ("emulated-loss seed", c.seed.to_string()),
        ("QUIC congestion control", c.quic_cc.to_string()),
        (
            "QUIC concurrent streams per peer",
            c.quic_max_streams.to_string(),
        ),
        ("QUIC max MTU", c.quic_max_mtu.to_string()),
        ("QUIC hub endpoints", c.quic_endpoints.to_string()),
        (
            "QUIC hub receive budget",
            match c.quic_receive_budget {
                0 => "off".to_owned(),
                n => format!("{} KiB", n / 1024),
            },
        ),
        (
            "QUIC loopback MTU",
            match c.quic_loopback_mtu {
                0 => "discovered".to_owned(),
                n => n.to_string(),
            },
        ),
        ("netsim stage of emulated paths", {
            let ran = first_seen(
                report
                    .cells
                    .iter()
                    .flat_map(|cell| &cell.runs)
                    .filter_map(|r| r.network.emulator.as_ref().map(|e| e.stage.clone())),
            );
            if ran.is_empty() {
                format!("{} (no emulated path ran)", c.netsim_stage)
            } else {
                join(ran)
            }
        }),
        (
            "TCP congestion control in emulated paths",
            c.tcp_cc
                .clone()
                .unwrap_or_else(|| "the kernel's default".to_owned()),
        ),
        ("TCP congestion control that ran (read back)", {
            let ran = first_seen(
                report
                    .cells
                    .iter()
                    .flat_map(|cell| &cell.runs)
                    .filter_map(|r| r.network.emulator.as_ref()?.tcp_cc.clone()),
            );
            if ran.is_empty() {
                "no emulated path".to_owned()
            } else {
                join(ran)
            }
        }),
        (
            "windows of the cells",
            join(distinct(&|cc| cc.window.to_string())),
        ),
        (
            "closed loop's rate cap (`--rate`)",
            join(distinct(&|cc| match cc.rate {
                Some(rate) => format!("{rate} requests/s"),
                None => "none".to_owned(),
            })),
        ),
        (
            "network profiles",
            join(distinct(&|cc| cc.network.name.clone())),
        ),
        (
            "open-loop phase",
            join(distinct(&|cc| ms_or_none(cc.open_loop_ms))),
        ),
        (
            "priority probe",
            join(distinct(&|cc| ms_or_none(cc.priority_probe_ms))),
        ),
        ("cells", report.cells.len().to_string()),
    ];
    for (k, v) in rows {
        t.rows.push(vec![k.to_owned(), v]);
    }
    t
}

fn throughput_section<'a>(report: &Report, doc: &mut Vec<Block<'a>>) {
    doc.push(Block::Heading(
        2,
        "Throughput and latency (closed loop)".into(),
    ));
    let mut t = Table::new(&head(&[
        "window", "runs", "msg/s", "cov %", "noisy", "Mbit/s", "p50 ms", "p90 ms", "p99 ms",
        "p99.9 ms", "max ms", "errors", "bound",
    ]));
    let mut notes = Vec::new();
    // One footnote per kind of bottleneck (the first cell's wording), not one per cell.
    let mut bounds: Vec<(String, String)> = Vec::new();
    for c in measured(report) {
        let has = !c.runs.is_empty();
        let mut row = cell_cols(&c.config);
        row.push(c.config.window.to_string());
        row.push(c.runs.len().to_string());
        let num = |v: f64, digits: usize| {
            if has {
                fmt_num(v, digits)
            } else {
                NONE.to_owned()
            }
        };
        row.push(num(c.responses_per_sec, 0));
        row.push(
            c.responses_per_sec_cov
                .map_or(NONE.to_owned(), |v| fmt_num(v * 100.0, 1)),
        );
        row.push(match (c.noisy, c.responses_per_sec_cov) {
            (true, _) => "noisy".to_owned(),
            (false, Some(_)) => "no".to_owned(),
            (false, None) => NONE.to_owned(),
        });
        row.push(num(c.payload_mbit_per_sec, 1));
        for us in [c.p50_us, c.p90_us, c.p99_us, c.p999_us, c.max_us as f64] {
            row.push(num(us / 1000.0, 2));
        }
        row.push(if has {
            c.errors.to_string()
        } else {
            NONE.to_owned()
        });
        let mut kinds = Vec::new();
        for b in &c.bottlenecks {
            let kind = crate::verdict::bound_kind(b).unwrap_or("other").to_owned();
            if !bounds.iter().any(|(k, _)| *k == kind) {
                bounds.push((kind.clone(), b.clone()));
            }
            let n = bounds.iter().position(|(k, _)| *k == kind).unwrap_or(0) + 1;
            kinds.push(format!("{kind} ({n})"));
        }
        row.push(kinds.join(", "));
        t.rows.push(row);

        let label = cell_caption(&c.config);
        if c.noisy {
            notes.push(format!(
                "noisy: {label}: msg/s varies {} % across its {} runs (more than {} %).",
                c.responses_per_sec_cov
                    .map_or(NONE.to_owned(), |v| fmt_num(v * 100.0, 1)),
                c.runs.len(),
                fmt_num(crate::NOISY_COV * 100.0, 0)
            ));
        }
        for f in &c.failures {
            notes.push(format!("failed: {label}: {f}"));
        }
        if has && !c.consistent {
            notes.push(format!(
                "inconsistent: {label}: at least one run did not account for every request."
            ));
        }
        if has && c.errors > 0 {
            let samples: Vec<&str> = c
                .runs
                .iter()
                .flat_map(|r| r.error_samples.iter().map(String::as_str))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if !samples.is_empty() {
                notes.push(format!("errors: {label}: {}", samples.join("; ")));
            }
        }
    }
    if t.rows.is_empty() {
        doc.push(Block::Para("No cell was run.".into()));
        return;
    }
    doc.push(Block::Para(
        "msg/s is the median of the repetitions' responses per second; cov % is their \
         spread (coefficient of variation), and cells above the noise threshold are marked \
         noisy. Latencies are closed-loop round trips, medians of the runs' percentiles (max \
         is the largest of any run)."
            .into(),
    ));
    doc.push(Block::Table(t));
    if !bounds.is_empty() {
        doc.push(Block::List(
            bounds
                .iter()
                .enumerate()
                .map(|(i, (kind, text))| match text.split_once(": ") {
                    Some((_, why)) => format!("({}) {kind}: {why}", i + 1),
                    None => format!("({}) {text}", i + 1),
                })
                .collect(),
        ));
    }
    if !notes.is_empty() {
        doc.push(Block::List(notes));
    }
}

fn open_loop_section<'a>(report: &Report, doc: &mut Vec<Block<'a>>) {
    doc.push(Block::Heading(2, "Open loop".into()));
    let mut t = Table::new(&head(&["rate req/s", "p50 ms", "p99 ms", "p99.9 ms"]));
    for c in with_runs(report) {
        if c.open_loop_rate.is_none()
            && c.open_loop_p50_us.is_none()
            && c.open_loop_p99_us.is_none()
            && c.open_loop_p999_us.is_none()
        {
            continue;
        }
        let mut row = cell_cols(&c.config);
        row.push(opt_num(c.open_loop_rate, 0));
        for us in [c.open_loop_p50_us, c.open_loop_p99_us, c.open_loop_p999_us] {
            row.push(opt_num(us.map(|v| v / 1000.0), 2));
        }
        t.rows.push(row);
    }
    if t.rows.is_empty() {
        doc.push(Block::Para("No cell has an open-loop phase.".into()));
    } else {
        doc.push(Block::Para(
            "Requests at a fixed arrival rate, each timed from its intended send time.".into(),
        ));
        doc.push(Block::Table(t));
    }
}

fn connect_section<'a>(report: &Report, doc: &mut Vec<Block<'a>>) {
    doc.push(Block::Heading(2, "Connection establishment".into()));
    let mut t = Table::new(&head(&[
        "connect ms",
        "each p50 ms",
        "each p99 ms",
        "handshakes/s",
        "0-RTT reconnect ms",
        "0-RTT accepted",
    ]));
    for c in with_runs(report) {
        let mut row = cell_cols(&c.config);
        row.push(fmt_num(c.connect_ms, 2));
        row.push(fmt_num(c.connect_p50_ms, 2));
        row.push(fmt_num(c.connect_p99_ms, 2));
        row.push(fmt_num(c.handshakes_per_sec, 0));
        row.push(opt_num(c.resumed_connect_ms, 2));
        row.push(
            c.zero_rtt_accepted
                .map_or(NONE.to_owned(), |v| v.to_string()),
        );
        t.rows.push(row);
    }
    if t.rows.is_empty() {
        doc.push(Block::Para("No cell was run.".into()));
    } else {
        doc.push(Block::Para(
            "Time from the first connect to every agent connected; each client's own time \
             from that common start to its welcome (median and 99th percentile); full \
             handshakes per second; for QUIC, the clients' reconnect with 0-RTT resumption \
             when measured."
                .into(),
        ));
        doc.push(Block::Table(t));
    }
}

fn priority_section<'a>(report: &Report, doc: &mut Vec<Block<'a>>) {
    doc.push(Block::Heading(2, "Priority / head-of-line".into()));
    let mut t = Table::new(&head(&["class", "p50 ms", "p99 ms"]));
    for c in with_runs(report) {
        for class in &c.priority {
            let mut row = cell_cols(&c.config);
            row.push(class.class.to_owned());
            row.push(fmt_num(class.p50_us / 1000.0, 2));
            row.push(fmt_num(class.p99_us / 1000.0, 2));
            t.rows.push(row);
        }
    }
    if t.rows.is_empty() {
        doc.push(Block::Para("No cell has priority probe data.".into()));
    } else {
        doc.push(Block::Para(
            "Small requests of each priority class sent while bulk low-priority requests \
             share the connection: medians of the runs' p50 and p99."
                .into(),
        ));
        doc.push(Block::Table(t));
    }
}

fn resources_section<'a>(report: &Report, doc: &mut Vec<Block<'a>>) {
    doc.push(Block::Heading(2, "Resources".into()));
    let mut t = Table::new(&head(&[
        "hub mode",
        "hub CPU s",
        "hub peak RSS MiB",
        "hub socket queues MiB",
        "hub RSS + queues MiB",
        "agents CPU s",
        "agents peak RSS MiB",
        "hub CPU µs/response",
    ]));
    for c in with_runs(report) {
        let mut row = cell_cols(&c.config);
        let mut modes: Vec<&str> = Vec::new();
        for r in &c.runs {
            if !modes.contains(&r.resources.hub_mode) {
                modes.push(r.resources.hub_mode);
            }
        }
        row.push(if modes.is_empty() {
            NONE.to_owned()
        } else {
            modes.join(" / ")
        });
        row.push(opt_num(c.hub_cpu_seconds, 2));
        row.push(opt_num(c.hub_peak_rss_bytes.map(|b| b / MIB), 1));
        row.push(opt_num(c.hub_peak_socket_queued_bytes.map(|b| b / MIB), 1));
        row.push(opt_num(
            c.hub_peak_rss_plus_queued_bytes.map(|b| b / MIB),
            1,
        ));
        // A process always has some resident memory: a zero peak means the agent side was
        // not measured, so neither number is shown.
        let agents_measured = c.agents_peak_rss_bytes > 0.0;
        row.push(opt_num(agents_measured.then_some(c.agents_cpu_seconds), 2));
        row.push(opt_num(
            agents_measured.then_some(c.agents_peak_rss_bytes / MIB),
            1,
        ));
        row.push(opt_num(c.hub_cpu_us_per_response, 1));
        t.rows.push(row);
    }
    if t.rows.is_empty() {
        doc.push(Block::Para("No cell was run.".into()));
    } else {
        doc.push(Block::Para(
            "CPU over the closed-loop window and peak resident memory, hub and agent side \
             separately (the hub only when it ran as its own process; – where not measured). \
             The hub's socket queues are what the kernel holds for its TCP and UDP sockets \
             (unread, unacknowledged or unsent data), sampled while the load runs; RSS + \
             queues is the largest sum in one sample. A TCP hub keeps its backlog there, a \
             QUIC hub in its RSS."
                .into(),
        ));
        doc.push(Block::Table(t));
    }
}

// ---------------------------------------------------------------------------------------------
// Chart data.

/// Network profile names of cells with runs, in order of first appearance.
fn networks(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in with_runs(report) {
        if !out.contains(&c.config.network.name) {
            out.push(c.config.network.name.clone());
        }
    }
    out
}

/// Transports of the given cells, in [`BenchTransport::ALL`] order.
fn transports_of<'a>(cells: impl Iterator<Item = &'a CellSummary>) -> Vec<BenchTransport> {
    let present: Vec<BenchTransport> = cells.map(|c| c.config.transport).collect();
    BenchTransport::ALL
        .into_iter()
        .filter(|t| present.contains(t))
        .collect()
}

/// A fixed colour per transport, so every chart uses the same one.
fn transport_color(t: BenchTransport) -> RGBColor {
    let i = BenchTransport::ALL
        .iter()
        .position(|x| *x == t)
        .unwrap_or(0);
    palette(i)
}

/// The run whose responses per second is closest to the cell's median (the first on a tie).
fn median_run(runs: &[CellResult]) -> Option<&CellResult> {
    let rps: Vec<f64> = runs.iter().map(|r| r.responses_per_sec).collect();
    let med = stats::median(&rps)?;
    runs.iter().min_by(|a, b| {
        (a.responses_per_sec - med)
            .abs()
            .total_cmp(&(b.responses_per_sec - med).abs())
    })
}

/// One latency CDF chart's cells: same network, agents and size.
struct LatencyGroup {
    network: String,
    agents: usize,
    size: usize,
}

/// Groups (network, agents, size) whose cells have a closed-loop histogram, in run order.
fn latency_groups(report: &Report) -> Vec<LatencyGroup> {
    let mut out: Vec<LatencyGroup> = Vec::new();
    for c in with_runs(report) {
        let has_data = median_run(&c.runs).is_some_and(|r| !r.histogram.is_empty());
        let cc = &c.config;
        if has_data
            && !out
                .iter()
                .any(|g| g.network == cc.network.name && g.agents == cc.agents && g.size == cc.size)
        {
            out.push(LatencyGroup {
                network: cc.network.name.clone(),
                agents: cc.agents,
                size: cc.size,
            });
        }
    }
    out
}

/// `(latency ms, cumulative fraction)` of a `(value_us, count)` histogram, starting at 0.
fn cdf_points(hist: &[(u64, u64)]) -> Vec<(f64, f64)> {
    let total: u64 = hist.iter().map(|p| p.1).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(hist.len() + 1);
    let mut cum = 0u64;
    for &(v, n) in hist {
        let ms = (v.max(1)) as f64 / 1000.0;
        if out.is_empty() {
            out.push((ms, 0.0));
        }
        cum += n;
        out.push((ms, cum as f64 / total as f64));
    }
    out
}

fn throughput_chart(report: &Report, net: &str) -> Option<(String, String)> {
    let cells: Vec<&CellSummary> = with_runs(report)
        .filter(|c| c.config.network.name == net)
        .collect();
    let mut groups: Vec<(usize, usize)> = cells
        .iter()
        .map(|c| (c.config.agents, c.config.size))
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let series: Vec<BarSeriesSpec> = transports_of(cells.iter().copied())
        .into_iter()
        .map(|t| BarSeriesSpec {
            label: t.name().to_owned(),
            color: transport_color(t),
            values: groups
                .iter()
                .map(|&(a, s)| {
                    cells
                        .iter()
                        .find(|c| {
                            c.config.transport == t && c.config.agents == a && c.config.size == s
                        })
                        .map(|c| c.responses_per_sec)
                })
                .collect(),
        })
        .collect();
    let labels: Vec<String> = groups
        .iter()
        .map(|&(a, s)| format!("{a} × {}", size_label(s)))
        .collect();
    let title = format!("Throughput, network {net}: median responses/s by agents × size");
    let svg = bar_chart(
        &title,
        "agents × body size",
        "responses/s (median)",
        &labels,
        &series,
    )?;
    Some((title, svg))
}

fn latency_chart(report: &Report, g: &LatencyGroup) -> Option<(String, String)> {
    let cells: Vec<&CellSummary> = with_runs(report)
        .filter(|c| {
            c.config.network.name == g.network
                && c.config.agents == g.agents
                && c.config.size == g.size
        })
        .collect();
    let mut series = Vec::new();
    for t in transports_of(cells.iter().copied()) {
        let Some(cell) = cells.iter().find(|c| c.config.transport == t) else {
            continue;
        };
        let Some(run) = median_run(&cell.runs) else {
            continue;
        };
        let color = transport_color(t);
        let closed = cdf_points(&run.histogram);
        if !closed.is_empty() {
            series.push(LineSeriesSpec {
                label: t.name().to_owned(),
                color,
                dashed: false,
                points: closed,
            });
        }
        if let Some(open) = &run.open_loop {
            let points = cdf_points(&open.histogram);
            if !points.is_empty() {
                series.push(LineSeriesSpec {
                    label: format!("{} open-loop", t.name()),
                    color,
                    dashed: true,
                    points,
                });
            }
        }
    }
    let title = format!(
        "Latency CDF, network {}, {} agents × {} (median run)",
        g.network,
        g.agents,
        size_label(g.size)
    );
    let svg = line_chart(
        &title,
        "latency ms (log scale)",
        "cumulative fraction",
        None,
        Some(1.0),
        &series,
        false,
    )?;
    Some((title, svg))
}

/// Per transport: `(agents, median over the cells of value)` for cells of network `net` where
/// `value` gives a number.
fn per_agents(
    cells: &[&CellSummary],
    t: BenchTransport,
    value: &dyn Fn(&CellSummary) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let mut agents: Vec<usize> = cells
        .iter()
        .filter(|c| c.config.transport == t)
        .map(|c| c.config.agents)
        .collect();
    agents.sort_unstable();
    agents.dedup();
    agents
        .into_iter()
        .filter_map(|a| {
            let vals: Vec<f64> = cells
                .iter()
                .filter(|c| c.config.transport == t && c.config.agents == a)
                .filter_map(|c| value(c))
                .filter(|v| v.is_finite())
                .collect();
            stats::median(&vals).map(|m| (a as f64, m))
        })
        .collect()
}

fn agent_ticks(series: &[LineSeriesSpec]) -> Vec<f64> {
    let mut ticks: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    ticks
}

fn connect_chart(report: &Report, net: &str) -> Option<(String, String)> {
    let cells: Vec<&CellSummary> = with_runs(report)
        .filter(|c| c.config.network.name == net)
        .collect();
    let series: Vec<LineSeriesSpec> = transports_of(cells.iter().copied())
        .into_iter()
        .map(|t| LineSeriesSpec {
            label: t.name().to_owned(),
            color: transport_color(t),
            dashed: false,
            points: per_agents(&cells, t, &|c| Some(c.connect_ms)),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let title = format!("Connect time vs agents, network {net} (all agents connected)");
    let ticks = agent_ticks(&series);
    let svg = line_chart(
        &title,
        "agents (log scale)",
        "connect ms (median)",
        Some(ticks),
        None,
        &series,
        true,
    )?;
    Some((title, svg))
}

fn rss_chart(report: &Report, net: &str) -> Option<(String, String)> {
    let cells: Vec<&CellSummary> = with_runs(report)
        .filter(|c| c.config.network.name == net)
        .collect();
    let mut series = Vec::new();
    for t in transports_of(cells.iter().copied()) {
        let color = transport_color(t);
        let hub = per_agents(&cells, t, &|c| c.hub_peak_rss_bytes.map(|b| b / MIB));
        if !hub.is_empty() {
            series.push(LineSeriesSpec {
                label: format!("{} hub", t.name()),
                color,
                dashed: false,
                points: hub,
            });
        }
        let agents = per_agents(&cells, t, &|c| {
            (c.agents_peak_rss_bytes > 0.0).then_some(c.agents_peak_rss_bytes / MIB)
        });
        if !agents.is_empty() {
            series.push(LineSeriesSpec {
                label: format!("{} agents", t.name()),
                color,
                dashed: true,
                points: agents,
            });
        }
    }
    let title = format!("Peak RSS vs agents, network {net} (solid: hub, dashed: agent side)");
    let ticks = agent_ticks(&series);
    let svg = line_chart(
        &title,
        "agents (log scale)",
        "peak RSS MiB (median)",
        Some(ticks),
        None,
        &series,
        true,
    )?;
    Some((title, svg))
}

fn priority_chart(report: &Report, net: &str) -> Option<(String, String)> {
    let cells: Vec<&CellSummary> = with_runs(report)
        .filter(|c| c.config.network.name == net && !c.priority.is_empty())
        .collect();
    let mut classes: Vec<&str> = Vec::new();
    for c in &cells {
        for p in &c.priority {
            if !classes.contains(&p.class) {
                classes.push(p.class);
            }
        }
    }
    let transports = transports_of(cells.iter().copied());
    let mut series = Vec::new();
    for t in &transports {
        let of_t: Vec<&&CellSummary> = cells.iter().filter(|c| c.config.transport == *t).collect();
        for c in &of_t {
            let label = if of_t.len() == 1 {
                t.name().to_owned()
            } else {
                format!(
                    "{} {}×{}",
                    t.name(),
                    c.config.agents,
                    size_label(c.config.size)
                )
            };
            let color = if of_t.len() == 1 {
                transport_color(*t)
            } else {
                palette(series.len())
            };
            series.push(BarSeriesSpec {
                label,
                color,
                values: classes
                    .iter()
                    .map(|cl| {
                        c.priority
                            .iter()
                            .find(|p| p.class == *cl)
                            .map(|p| p.p99_us / 1000.0)
                    })
                    .collect(),
            });
        }
    }
    let labels: Vec<String> = classes.iter().map(|c| (*c).to_owned()).collect();
    let title = format!("Priority probe, network {net}: p99 latency by class");
    let svg = bar_chart(
        &title,
        "priority class",
        "p99 ms (median)",
        &labels,
        &series,
    )?;
    Some((title, svg))
}

// ---------------------------------------------------------------------------------------------
// Text helpers.

fn fmt_num(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        NONE.to_owned()
    }
}

fn opt_num(v: Option<f64>, digits: usize) -> String {
    v.map_or(NONE.to_owned(), |v| fmt_num(v, digits))
}

fn opt_str(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| NONE.to_owned())
}

/// `100 B`, `1 KiB`, `1536 B`, `2 MiB`.
pub(crate) fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// A file-name-safe form of a network profile name: `50ms+1%` → `50ms_1pct`.
fn slug(s: &str) -> String {
    let mut out = String::new();
    for ch in s.chars() {
        match ch {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => out.push(ch),
            '+' => out.push('_'),
            '%' => out.push_str("pct"),
            _ => out.push('-'),
        }
    }
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, 'n');
    }
    out
}

/// The command line as a shell would take it back: arguments quoted where needed.
fn shell_join(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars().all(|c| {
                    c.is_ascii_alphanumeric()
                        || matches!(c, '-' | '_' | '.' | '/' | '=' | ',' | ':' | '+' | '%' | '@')
                });
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn longest_backtick_run(s: &str) -> usize {
    let mut best = 0;
    let mut run = 0;
    for c in s.chars() {
        if c == '`' {
            run += 1;
            best = best.max(run);
        } else {
            run = 0;
        }
    }
    best
}

/// Escapes text for Markdown (tables included): characters that would format or break a
/// table, and HTML's `<`, `>` and `&`. Line breaks become spaces.
fn md_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '#' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\n' | '\r' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}

/// Escapes text for HTML content and attribute values.
fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// `YYYY-MM-DD HH:MM:SS UTC` of Unix seconds.
fn utc_time(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Civil-from-days (proleptic Gregorian), after Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

const CSS: &str = "\
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0; color: #1b1b1b; background: #fafafa; }
main { max-width: 1300px; margin: 0 auto; padding: 1.5rem; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
pre { background: #f0f0f0; padding: 0.75rem; overflow-x: auto; }
.table { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; white-space: nowrap; }
th { background: #eee; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1.5rem 0; background: #fff; border: 1px solid #ddd; padding: 0.5rem; }
figure svg { display: block; max-width: 100%; height: auto; }
figcaption { font-size: 0.9rem; color: #444; margin-top: 0.25rem; }
";

/// Runs on load: every figure must hold an SVG with a non-empty box that draws something
/// besides its background.
const CHECK_SCRIPT: &str = r#"window.addEventListener("load", function () {
  var figures = document.querySelectorAll("figure");
  var problem = null;
  for (var i = 0; i < figures.length && !problem; i++) {
    var svg = figures[i].querySelector("svg");
    var name = figures[i].id || ("figure " + (i + 1));
    if (!svg) { problem = name + " has no svg"; break; }
    var rect = svg.getBoundingClientRect();
    if (!(rect.width > 0 && rect.height > 0)) { problem = name + " has an empty box"; break; }
    var box = null;
    try { box = svg.getBBox(); } catch (e) { box = null; }
    if (!box || !(box.width > 0 && box.height > 0)) { problem = name + " has an empty bounding box"; break; }
    var drawn = svg.querySelectorAll("polyline, path, line, circle, polygon, text").length
      + Math.max(0, svg.querySelectorAll("rect").length - 1);
    if (drawn === 0) { problem = name + " draws nothing"; }
  }
  document.body.dataset.charts = String(figures.length);
  document.body.dataset.check = problem ? "fail: " + problem : "ok";
});
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::*;
    use crate::stats::LatencySummary;
    use crate::{BenchConfig, ClassSummary, Environment, SCHEMA};

    fn network(name: &str) -> NetworkProfile {
        NetworkProfile {
            name: name.to_owned(),
            rtt_ms: 0,
            loss_percent: 0.0,
        }
    }

    fn cell(transport: BenchTransport, agents: usize, size: usize, net: &str) -> CellConfig {
        CellConfig {
            transport,
            agents,
            workers: CellConfig::workers_for(agents),
            size,
            window: 4,
            warmup_ms: 100,
            duration_ms: 1000,
            rate: None,
            request_timeout_ms: 5000,
            network: network(net),
            open_loop_ms: 0,
            priority_probe_ms: 0,
            quic_cc: Default::default(),
            quic_max_streams: 4096,
            quic_max_mtu: 16384,
            quic_loopback_mtu: 16384,
            quic_receive_budget: 0,
            quic_endpoints: 1,
            tcp_cc: None,
            netsim_stage: Default::default(),
            qlog_dir: None,
        }
    }

    fn latency(p50: u64, p99: u64) -> LatencySummary {
        LatencySummary {
            count: 100,
            min_us: p50 / 2,
            mean_us: p50 as f64,
            p50_us: p50,
            p90_us: (p50 + p99) / 2,
            p99_us: p99,
            p999_us: p99 * 2,
            max_us: p99 * 3,
        }
    }

    /// A hand-made run: `rps` responses per second, a small histogram around `p50_us`.
    fn run(config: &CellConfig, rps: f64, p50_us: u64) -> CellResult {
        CellResult {
            config: config.clone(),
            hub_url: "quic://127.0.0.1:1".into(),
            network: NetworkPath {
                mode: "loopback",
                spec: None,
                hub_url: "quic://127.0.0.1:1".into(),
                emulator: None,
            },
            connect_ms: 12.5,
            connect: ConnectRecord {
                agents: config.agents + config.workers,
                all_connected_ms: 12.5,
                p50_ms: 8.0,
                p99_ms: 12.0,
                handshakes_per_sec: 880.0,
                resumed: None,
            },
            sent: 100,
            answered: 100,
            errors: 0,
            timeouts: 0,
            abandoned: 0,
            consistent: true,
            responses_per_sec: rps,
            payload_mbit_per_sec: rps * config.size as f64 * 16.0 / 1e6,
            latency: latency(p50_us, p50_us * 4),
            histogram: vec![(p50_us / 2, 10), (p50_us, 40), (p50_us * 4, 50)],
            open_loop: None,
            priority: None,
            resources: Resources {
                hub_mode: "in-process",
                hub: None,
                agents: ProcessUsage::default(),
                hub_cpu_us_per_response: None,
                agents_cpu_us_per_response: 0.0,
                hub_rss_bytes_per_agent: None,
                hub_sockets: None,
            },
            bottleneck: None,
            error_samples: Vec::new(),
            udp_rcvbuf_errors: None,
        }
    }

    fn report(cells: Vec<CellSummary>) -> Report {
        Report {
            schema: SCHEMA,
            command_line: vec!["agentwire".into(), "bench".into(), "--note=<b>&".into()],
            started_unix: 1_700_000_000,
            environment: Environment {
                cpu_model: Some("Example CPU <x> | 2.0GHz".into()),
                cores: 2,
                kernel: None,
                git_sha: Some("abc123".into()),
                rustc: Some("rustc 1.95.0".into()),
                build_profile: "release",
                target: "linux-x86_64".into(),
                crate_versions: [("quinn".to_owned(), "0.11.12".to_owned())].into(),
                network: crate::environment::NetworkEnvironment {
                    rmem_max: Some(212_992),
                    wmem_max: None,
                    quic_udp_buffers: Some((4_194_304, 4_194_304)),
                    udp_gso_segments: Some(64),
                    udp_gro_segments: Some(64),
                    tcp_congestion_control: Some("cubic".into()),
                },
            },
            hub_mode: "process",
            config: BenchConfig::default(),
            cells,
        }
    }

    /// quic and wss on two networks; quic noisy, wss with a bottleneck; one skipped cell.
    fn sample() -> Report {
        let mut cells = Vec::new();
        for net in ["0ms", "50ms+1%"] {
            let q = cell(BenchTransport::Quic, 10, 1024, net);
            cells.push(CellSummary::from_runs(
                q.clone(),
                vec![
                    run(&q, 900.0, 1500),
                    run(&q, 1300.0, 1600),
                    run(&q, 1000.0, 1400),
                ],
            ));
            let w = cell(BenchTransport::Wss, 10, 1024, net);
            let mut runs = vec![run(&w, 500.0, 3000), run(&w, 510.0, 3100)];
            runs[1].bottleneck = Some("load generator at 100% CPU".into());
            cells.push(CellSummary::from_runs(w, runs));
        }
        cells.push(CellSummary::skipped(
            cell(BenchTransport::H2, 10, 1024, "50ms+1%"),
            "packet mode needs root <&>".into(),
        ));
        report(cells)
    }

    /// Where QUIC loses, the verdict names the winner and why, from the cells' CPU per message.
    #[test]
    fn the_verdict_says_who_won_and_why_quic_lost() {
        let mut cells = Vec::new();
        let q = cell(BenchTransport::Quic, 10, 1024, "0ms");
        let mut qr = run(&q, 600.0, 2000);
        qr.resources.hub_cpu_us_per_response = Some(30.0);
        cells.push(CellSummary::from_runs(q, vec![qr]));
        let h = cell(BenchTransport::H2, 10, 1024, "0ms");
        let mut hr = run(&h, 1000.0, 1000);
        hr.resources.hub_cpu_us_per_response = Some(15.0);
        cells.push(CellSummary::from_runs(h, vec![hr]));
        // Unix is faster still, but crosses no network: not the "best TCP".
        let u = cell(BenchTransport::Unix, 10, 1024, "0ms");
        cells.push(CellSummary::from_runs(
            u.clone(),
            vec![run(&u, 5000.0, 200)],
        ));
        // A network where only QUIC ran.
        cells.push(CellSummary::skipped(
            cell(BenchTransport::Quic, 10, 1024, "50ms+1%"),
            "no namespaces here".into(),
        ));
        let r = report(cells);
        let lines = crate::verdict::verdict(&r);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let l = &lines[0];
        assert_eq!(l.tcp, "h2");
        assert!((l.msgs_ratio - 0.6).abs() < 1e-9);
        assert_eq!(l.winner, crate::verdict::Winner::Tcp("h2"));
        assert_eq!(
            l.why.as_deref(),
            Some("CPU per message in the hub: 2.0x h2's")
        );
        let text = crate::verdict::render_text(&r);
        assert!(text.contains("0.60x msg/s, p90 2.00x"), "{text}");
        assert!(text.contains("→ h2 wins"), "{text}");
        assert!(
            text.contains("50ms+1%: not measured (no namespaces here)"),
            "{text}"
        );
    }

    #[test]
    fn markdown_has_the_medians_flags_and_reasons() {
        let r = sample();
        let md = render_markdown(&r, &charts(&r));
        // Median of 900, 1300, 1000 is 1000; cov is 19.5 %.
        assert!(
            md.contains("| quic | 0ms | 10 | 1024 | 4 | 3 | 1000 | 19.5 | noisy |"),
            "{md}"
        );
        // wss: median of 500 and 510 is 505; p50 median of 3.0 and 3.1 ms is 3.05 ms.
        assert!(
            md.contains("| wss | 0ms | 10 | 1024 | 4 | 2 | 505 | 1.4 | no |"),
            "{md}"
        );
        assert!(md.contains("| 3.05 |"), "{md}");
        assert!(
            md.contains("- noisy: quic, network 0ms, 10 agents × 1 KiB"),
            "{md}"
        );
        // The bottleneck is a column with one footnote per kind, not a note per cell.
        assert!(
            md.contains("| 0 | load generator at 100% CPU (1) |"),
            "{md}"
        );
        assert!(md.contains("- (1) load generator at 100% CPU\n"), "{md}");
        assert!(!md.contains("- bottleneck:"), "{md}");
        // The verdict opens the report: QUIC 1000 msg/s against wss's 505 on both networks.
        let verdict = md.find("## Verdict").expect("a verdict section");
        assert!(verdict < md.find("## Command line").unwrap(), "{md}");
        assert!(
            md.contains(
                "- 0ms · 10 agents × 1 KiB: QUIC vs best TCP (wss) 1.98x msg/s, p90 0.49x, \
                 p99 0.49x → QUIC wins (1,000 vs 505 msg/s)"
            ),
            "{md}"
        );
        assert!(
            md.contains("| h2 | 50ms+1% | 10 | 1024 | packet mode needs root &lt;&amp;&gt; |"),
            "{md}"
        );
        // Escaped for Markdown: a pipe in a table cell, angle brackets.
        assert!(md.contains("Example CPU &lt;x&gt; \\| 2.0GHz"), "{md}");
        // The command line is verbatim in a code block, quoted like a shell would.
        assert!(
            md.contains("```\nagentwire bench '--note=<b>&'\n```"),
            "{md}"
        );
        assert!(md.contains("| kernel | – |"), "{md}");
        assert!(md.contains("![Throughput, network 0ms"), "{md}");
        assert!(md.contains("(charts/throughput-50ms_1pct.svg)"), "{md}");
        assert!(md.contains("2023-11-14 22:13:20 UTC"), "{md}");
        // Connect: 12.50 ms (each client: p50 8, p99 12) and 880 handshakes/s; no 0-RTT.
        assert!(
            md.contains("| quic | 0ms | 10 | 1024 | 12.50 | 8.00 | 12.00 | 880 | – | – |"),
            "{md}"
        );
        assert!(md.contains("No cell has an open-loop phase."), "{md}");
        assert!(md.contains("No cell has priority probe data."), "{md}");
    }

    #[test]
    fn chart_names_and_svgs() {
        let mut r = sample();
        // Priority data and hub RSS for the first cell.
        r.cells[0].priority = vec![
            ClassSummary {
                class: "critical",
                p50_us: 900.0,
                p99_us: 2000.0,
            },
            ClassSummary {
                class: "low",
                p50_us: 1900.0,
                p99_us: 9000.0,
            },
        ];
        r.cells[0].hub_peak_rss_bytes = Some(64.0 * MIB);
        r.cells[1].agents_peak_rss_bytes = 80.0 * MIB;
        let charts = charts(&r);
        let names: Vec<&str> = charts.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "throughput-0ms",
                "throughput-50ms_1pct",
                "latency-0ms-10x1024",
                "latency-50ms_1pct-10x1024",
                "connect-0ms",
                "connect-50ms_1pct",
                "rss-0ms",
                "priority-0ms",
            ]
        );
        for c in &charts {
            assert!(c.svg.starts_with("<svg"), "{}", c.name);
            assert!(c.svg.trim_end().ends_with("</svg>"), "{}", c.name);
            assert!(c.svg.contains("quic"), "{}", c.name);
            if !c.name.starts_with("priority") && !c.name.starts_with("rss") {
                assert!(c.svg.contains("wss"), "{}", c.name);
            }
        }
        let rss = &charts[6];
        assert!(rss.svg.contains("quic hub") && rss.svg.contains("wss agents"));
        let prio = &charts[7];
        assert!(prio.svg.contains("critical") && prio.svg.contains("low"));
        // The Markdown and HTML carry the priority table and every figure.
        let md = render_markdown(&r, &charts);
        assert!(
            md.contains("| quic | 0ms | 10 | 1024 | critical | 0.90 | 2.00 |"),
            "{md}"
        );
        assert!(md.contains("| 64.0 |"), "{md}");
        let html = render_html(&r, &charts);
        assert_eq!(html.matches("<figure").count(), charts.len());
        assert_eq!(html.matches("<figcaption>").count(), charts.len());
    }

    #[test]
    fn open_loop_adds_a_dashed_line_and_a_table() {
        let mut r = sample();
        let c = r.cells[0].config.clone();
        let mut runs = vec![run(&c, 1000.0, 1500)];
        runs[0].open_loop = Some(OpenLoopRecord {
            rate_per_sec: 500.0,
            rate_basis: "50% of this run's closed-loop rate".into(),
            duration_ms: 1000,
            scheduled: 500,
            answered: 500,
            errors: 0,
            late_sends: 0,
            latency: latency(2000, 8000),
            histogram: vec![(1000, 100), (2000, 300), (8000, 100)],
        });
        r.cells[0] = CellSummary::from_runs(c, runs);
        let md = render_markdown(&r, &[]);
        assert!(
            md.contains("| quic | 0ms | 10 | 1024 | 500 | 2.00 | 8.00 | 16.00 |"),
            "{md}"
        );
        let charts = charts(&r);
        let cdf = charts
            .iter()
            .find(|c| c.name == "latency-0ms-10x1024")
            .unwrap();
        assert!(cdf.svg.contains("quic open-loop"), "{}", cdf.svg);
    }

    #[test]
    fn html_escapes_and_checks() {
        let r = sample();
        let charts = charts(&r);
        let html = render_html(&r, &charts);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(
            html.contains("agentwire bench &#39;--note=&lt;b&gt;&amp;&#39;"),
            "{html}"
        );
        assert!(html.contains("packet mode needs root &lt;&amp;&gt;"));
        assert!(!html.contains("<b>"));
        assert!(html.contains("document.body.dataset.check"));
        // No external resources: the only URLs are the SVG namespace names.
        assert_eq!(
            html.matches("http").count(),
            html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count()
        );
        assert!(!html.contains("<link") && !html.contains("src="));
        assert_eq!(html.matches("<figure").count(), charts.len());
    }

    #[test]
    fn latency_charts_are_limited() {
        let mut cells = Vec::new();
        for agents in 1..=15 {
            let c = cell(BenchTransport::Quic, agents, 100, "0ms");
            cells.push(CellSummary::from_runs(c.clone(), vec![run(&c, 100.0, 500)]));
        }
        let r = report(cells);
        let charts = charts(&r);
        let latency = charts
            .iter()
            .filter(|c| c.name.starts_with("latency-"))
            .count();
        assert_eq!(latency, MAX_LATENCY_CHARTS);
        let md = render_markdown(&r, &charts);
        assert!(md.contains("3 more groups"), "{md}");
        assert!(md.contains("15 agents × 100 B"), "{md}");
    }

    #[test]
    fn empty_and_skipped_only_reports_render() {
        let empty = report(Vec::new());
        assert!(charts(&empty).is_empty());
        let md = render_markdown(&empty, &[]);
        assert!(md.contains("No cell was run."), "{md}");
        assert!(md.contains("No charts"), "{md}");
        let _ = render_html(&empty, &[]);

        let skipped = report(vec![CellSummary::skipped(
            cell(BenchTransport::Unix, 2, 100, "0ms"),
            "no reason".into(),
        )]);
        assert!(charts(&skipped).is_empty());
        let md = render_markdown(&skipped, &[]);
        assert!(md.contains("| unix | 0ms | 2 | 100 | no reason |"), "{md}");

        // A cell that is neither skipped nor run shows dashes.
        let norun = report(vec![CellSummary::from_runs(
            cell(BenchTransport::H2, 2, 100, "0ms"),
            Vec::new(),
        )]);
        assert!(charts(&norun).is_empty());
        let md = render_markdown(&norun, &[]);
        assert!(
            md.contains("| h2 | 0ms | 2 | 100 | 4 | 0 | – | – | – |"),
            "{md}"
        );
        let _ = render_html(&norun, &[]);

        // Runs without answers: no histogram, zero rates.
        let c = cell(BenchTransport::Wss, 2, 100, "0ms");
        let mut r0 = run(&c, 0.0, 0);
        r0.histogram.clear();
        let zero = report(vec![CellSummary::from_runs(c, vec![r0])]);
        let charts = charts(&zero);
        assert!(charts.iter().all(|c| !c.name.starts_with("latency")));
        let _ = render_markdown(&zero, &charts);
        let _ = render_html(&zero, &charts);
    }

    #[test]
    fn write_all_writes_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("new");
        let files = write_all(&sample(), &out).unwrap();
        assert!(files.json.ends_with("bench-1700000000.json"));
        for p in [&files.json, &files.markdown, &files.html] {
            assert!(p.is_file(), "{}", p.display());
        }
        assert_eq!(files.charts.len(), 6);
        for p in &files.charts {
            assert!(p.is_file(), "{}", p.display());
            assert!(p.starts_with(out.join("charts")));
        }
    }

    #[test]
    fn helpers() {
        assert_eq!(slug("50ms+1%"), "50ms_1pct");
        assert_eq!(slug("a b/c"), "a-b-c");
        assert_eq!(size_label(100), "100 B");
        assert_eq!(size_label(10240), "10 KiB");
        assert_eq!(size_label(1 << 20), "1 MiB");
        assert_eq!(size_label(1536), "1536 B");
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(md_escape("a|b_c<d>"), "a\\|b\\_c&lt;d&gt;");
        assert_eq!(
            html_escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(
            shell_join(&["a".into(), "b c".into(), "it's".into()]),
            "a 'b c' 'it'\\''s'"
        );
        let pts = cdf_points(&[(1000, 1), (2000, 3)]);
        assert_eq!(pts, vec![(1.0, 0.0), (1.0, 0.25), (2.0, 1.0)]);
        let runs = {
            let c = cell(BenchTransport::Quic, 1, 1, "0ms");
            vec![run(&c, 10.0, 1), run(&c, 30.0, 2), run(&c, 21.0, 3)]
        };
        assert_eq!(median_run(&runs).map(|r| r.responses_per_sec), Some(21.0));
    }
}
