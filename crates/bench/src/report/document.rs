//! The report as a document: blocks (headings, paragraphs, tables, charts) built once from a [`Report`], which the Markdown and HTML renderers both walk.
//!
//! This module owns what the report says and in which order; it must not format for one
//! output or compute a number the report does not hold.

use super::*;

pub(super) enum Block<'a> {
    Heading(usize, String),
    Para(String),
    Code(String),
    Table(Table),
    List(Vec<String>),
    Figure(&'a Chart),
}

pub(super) struct Table {
    pub(super) head: Vec<String>,
    /// Per column: true for text (left-aligned), false for numbers (right-aligned).
    pub(super) text: Vec<bool>,
    pub(super) rows: Vec<Vec<String>>,
}

/// Columns that hold text; every other column holds numbers.
pub(super) const TEXT_COLUMNS: [&str; 9] = [
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
    pub(super) fn new(head: &[&str]) -> Self {
        Table {
            head: head.iter().map(|h| (*h).to_owned()).collect(),
            text: head.iter().map(|h| TEXT_COLUMNS.contains(h)).collect(),
            rows: Vec::new(),
        }
    }

    pub(super) fn is_text(&self, col: usize) -> bool {
        self.text.get(col).copied().unwrap_or(true)
    }
}

pub(super) fn opt_int(v: Option<u64>) -> String {
    v.map_or(NONE.to_owned(), |v| v.to_string())
}

/// Cells that were asked to run (not skipped), in run order.
pub(super) fn measured(report: &Report) -> impl Iterator<Item = &CellSummary> {
    report.cells.iter().filter(|c| c.skipped.is_none())
}

/// Cells with at least one run.
pub(super) fn with_runs(report: &Report) -> impl Iterator<Item = &CellSummary> {
    measured(report).filter(|c| !c.runs.is_empty())
}

/// transport, network, agents, size: the first columns of every per-cell table.
pub(super) const CELL_HEAD: [&str; 4] = ["transport", "network", "agents", "size B"];

pub(super) fn cell_cols(c: &CellConfig) -> Vec<String> {
    vec![
        transport_col(c),
        c.network.name.clone(),
        c.agents.to_string(),
        c.size.to_string(),
    ]
}

/// The transport column: the transport, after the pattern for a one-way cell (`fanout quic`).
fn transport_col(c: &CellConfig) -> String {
    match c.pattern {
        crate::Pattern::Request => c.transport.name().to_owned(),
        other => format!("{other} {}", c.transport.name()),
    }
}

/// A cell as a chart or table caption, e.g. `quic, network 0ms, 10 agents × 1 KiB` (the
/// progress line uses [`crate::cell_label`]).
pub(super) fn cell_caption(c: &CellConfig) -> String {
    format!(
        "{}, network {}, {} agents × {}",
        transport_col(c),
        c.network.name,
        c.agents,
        size_label(c.size)
    )
}

pub(super) fn head(cols: &[&'static str]) -> Vec<&'static str> {
    let mut h: Vec<&'static str> = CELL_HEAD.to_vec();
    h.extend_from_slice(cols);
    h
}

pub(super) fn document<'a>(report: &Report, charts: &'a [Chart]) -> Vec<Block<'a>> {
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
pub(super) fn first_seen(values: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for v in values {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen
}
