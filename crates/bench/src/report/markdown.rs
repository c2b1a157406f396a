//! The document as Markdown (`report.md`).
//!
//! This module owns Markdown's syntax and escaping only.

use super::*;

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

pub(super) fn longest_backtick_run(s: &str) -> usize {
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
pub(super) fn md_escape(s: &str) -> String {
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
