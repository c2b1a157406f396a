//! The report's charts (SVG, drawn with `agentwire_measure::chart`): throughput, latency CDFs, connects, hub memory, priorities; a chart without data is left out.
//!
//! This module owns which charts there are and what each plots; the drawing is the measure
//! crate's.

use super::*;

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

/// Network profile names of cells with runs, in order of first appearance.
pub(super) fn networks(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in request_cells(report) {
        if !out.contains(&c.config.network.name) {
            out.push(c.config.network.name.clone());
        }
    }
    out
}

/// Transports of the given cells, in [`BenchTransport::ALL`] order.
pub(super) fn transports_of<'a>(
    cells: impl Iterator<Item = &'a CellSummary>,
) -> Vec<BenchTransport> {
    let present: Vec<BenchTransport> = cells.map(|c| c.config.transport).collect();
    BenchTransport::ALL
        .into_iter()
        .filter(|t| present.contains(t))
        .collect()
}

/// A fixed colour per transport, so every chart uses the same one.
pub(super) fn transport_color(t: BenchTransport) -> RGBColor {
    let i = BenchTransport::ALL
        .iter()
        .position(|x| *x == t)
        .unwrap_or(0);
    palette(i)
}

/// The run whose responses per second is closest to the cell's median (the first on a tie).
pub(super) fn median_run(runs: &[CellResult]) -> Option<&CellResult> {
    let rps: Vec<f64> = runs.iter().map(|r| r.responses_per_sec).collect();
    let med = stats::median(&rps)?;
    runs.iter().min_by(|a, b| {
        (a.responses_per_sec - med)
            .abs()
            .total_cmp(&(b.responses_per_sec - med).abs())
    })
}

/// One latency CDF chart's cells: same network, agents and size.
pub(super) struct LatencyGroup {
    pub(super) network: String,
    pub(super) agents: usize,
    pub(super) size: usize,
}

/// Groups (network, agents, size) whose cells have a closed-loop histogram, in run order.
pub(super) fn latency_groups(report: &Report) -> Vec<LatencyGroup> {
    let mut out: Vec<LatencyGroup> = Vec::new();
    for c in request_cells(report) {
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
pub(super) fn cdf_points(hist: &[(u64, u64)]) -> Vec<(f64, f64)> {
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

pub(super) fn throughput_chart(report: &Report, net: &str) -> Option<(String, String)> {
    let cells: Vec<&CellSummary> = request_cells(report)
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

pub(super) fn latency_chart(report: &Report, g: &LatencyGroup) -> Option<(String, String)> {
    let cells: Vec<&CellSummary> = request_cells(report)
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
pub(super) fn per_agents(
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

pub(super) fn agent_ticks(series: &[LineSeriesSpec]) -> Vec<f64> {
    let mut ticks: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    ticks
}

pub(super) fn connect_chart(report: &Report, net: &str) -> Option<(String, String)> {
    let cells: Vec<&CellSummary> = request_cells(report)
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

pub(super) fn rss_chart(report: &Report, net: &str) -> Option<(String, String)> {
    let cells: Vec<&CellSummary> = request_cells(report)
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

pub(super) fn priority_chart(report: &Report, net: &str) -> Option<(String, String)> {
    let cells: Vec<&CellSummary> = request_cells(report)
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

/// The request/reply cells with runs: the charts draw those alone (a one-way cell of the same
/// transport, agents and size measures deliveries, not responses, and is in the tables).
fn request_cells(report: &Report) -> impl Iterator<Item = &CellSummary> {
    with_runs(report).filter(|c| c.config.pattern == crate::Pattern::Request)
}
