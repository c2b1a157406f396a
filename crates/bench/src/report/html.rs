//! The document as one self-contained HTML page (`report.html`: CSS and SVG inline, no external resource).
//!
//! This module owns HTML's syntax and escaping only.

use super::*;

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

/// Escapes text for HTML content and attribute values.
pub(super) fn html_escape(s: &str) -> String {
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

pub(super) const CSS: &str = "\
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
pub(super) const CHECK_SCRIPT: &str = r#"window.addEventListener("load", function () {
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
