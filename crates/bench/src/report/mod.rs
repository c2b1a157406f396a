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

mod document;
use document::*;
mod sections;
use sections::*;
mod markdown;
pub use markdown::*;
mod html;
pub use html::*;
mod charts;
pub use charts::*;

use crate::format::*;

/// At most this many latency CDF charts are drawn; the other groups are named in the report.
pub const MAX_LATENCY_CHARTS: usize = 12;

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

#[cfg(test)]
mod tests;
