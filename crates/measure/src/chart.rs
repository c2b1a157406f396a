//! SVG charts for benchmark reports, drawn with plotters into a string: grouped bars and lines
//! on a logarithmic x axis, a shared palette and axis labels.
//!
//! This module only draws what it is given; it must not read results or files.

use std::error::Error;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

/// Size of every chart, pixels.
pub const CHART_SIZE: (u32, u32) = (900, 480);

/// The `i`-th colour of a ten-colour palette (repeats after ten).
pub fn palette(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    COLORS[i % COLORS.len()]
}

/// One line of [`line_chart`].
pub struct LineSeriesSpec {
    /// Legend text.
    pub label: String,
    /// Line colour.
    pub color: RGBColor,
    /// Dashed instead of solid.
    pub dashed: bool,
    /// (x, y) points; x must be positive (the x axis is logarithmic).
    pub points: Vec<(f64, f64)>,
}

/// One series of a grouped bar chart drawn by [`grouped_bars_svg`].
#[derive(Debug, Clone, PartialEq)]
pub struct BarSeries {
    /// Legend text.
    pub label: String,
    /// One value per group; `None` draws no bar.
    pub values: Vec<Option<f64>>,
}

/// Grouped bars as a standalone SVG document (900 x 480): one group per entry of `groups`,
/// one bar per series in each, coloured in series order, with a legend. `None` when there is
/// nothing to draw (no groups, or no finite non-negative value).
///
/// ```
/// use agentwire_measure::chart::{grouped_bars_svg, BarSeries};
/// let svg = grouped_bars_svg(
///     "req/s",
///     "scenario",
///     "requests per second",
///     &["p1".to_string(), "p6".to_string()],
///     &[BarSeries { label: "h3".into(), values: vec![Some(10.0), Some(30.0)] }],
/// )
/// .unwrap();
/// assert!(svg.starts_with("<svg") && svg.contains("<rect"));
/// assert!(grouped_bars_svg("x", "x", "y", &[], &[]).is_none());
/// ```
pub fn grouped_bars_svg(
    caption: &str,
    x_desc: &str,
    y_desc: &str,
    groups: &[String],
    series: &[BarSeries],
) -> Option<String> {
    let specs: Vec<BarSeriesSpec> = series
        .iter()
        .enumerate()
        .map(|(i, s)| BarSeriesSpec {
            label: s.label.clone(),
            color: palette(i),
            values: s.values.clone(),
        })
        .collect();
    bar_chart(caption, x_desc, y_desc, groups, &specs)
}

/// One series of [`bar_chart`], with its colour.
pub struct BarSeriesSpec {
    /// Legend text.
    pub label: String,
    /// Bar colour.
    pub color: RGBColor,
    /// One value per group; `None` draws no bar.
    pub values: Vec<Option<f64>>,
}

// ---------------------------------------------------------------------------------------------
// Drawing (plotters, SVG backend into a string).

/// What a drawing closure returns.
pub type DrawResult = std::result::Result<(), Box<dyn Error>>;

/// Runs `draw` on a fresh SVG canvas; `None` if drawing failed.
pub fn svg_canvas(
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> DrawResult,
) -> Option<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, CHART_SIZE).into_drawing_area();
        root.fill(&WHITE).ok()?;
        draw(&root).ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

/// A chart on `root` with `caption` and the margins and label areas every chart here has.
fn framed<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(caption, caption_style())
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(80);
    builder
}

/// Draws the series' legend at `position` on a translucent white box.
fn draw_legend<'a, 'b: 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, CT>,
    position: SeriesLabelPosition,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The captions' font.
pub fn caption_style() -> TextStyle<'static> {
    ("sans-serif", 18).into_font().into()
}

/// A category x axis for grouped bars: `0..n`, group `i` spanning `i..i + 1`, a tick (and its
/// label) at each group's centre.
struct CategoryAxis(usize);

impl Ranged for CategoryAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let n = self.0.max(1) as f64;
        limit.0 + (value / n * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            (0..self.0).map(|i| i as f64 + 0.5).collect()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.0 as f64
    }
}

/// Grouped bars: one group per label, one bar per series in each group (900 x 480 SVG);
/// `None` when there is nothing to draw.
pub fn bar_chart(
    caption: &str,
    x_desc: &str,
    y_desc: &str,
    groups: &[String],
    series: &[BarSeriesSpec],
) -> Option<String> {
    let values = || {
        series
            .iter()
            .flat_map(|s| s.values.iter().flatten().copied())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    if groups.is_empty() || values().next().is_none() {
        return None;
    }
    let top = values().fold(0.0f64, f64::max);
    let y_max = if top > 0.0 { top * 1.25 } else { 1.0 };
    let n = groups.len();
    svg_canvas(|root| {
        let mut chart = framed(root, caption).build_cartesian_2d(CategoryAxis(n), 0f64..y_max)?;
        let label_of = |v: &f64| {
            let i = v.floor();
            if i >= 0.0 && (i as usize) < n {
                groups[i as usize].clone()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .max_light_lines(2)
            .disable_x_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(&label_of)
            .y_label_formatter(&|v| axis_number(*v))
            .draw()?;
        let k = series.len().max(1) as f64;
        let width = 0.8 / k;
        for (j, s) in series.iter().enumerate() {
            if s.values.iter().flatten().next().is_none() {
                continue;
            }
            let color = s.color;
            let bars = s.values.iter().enumerate().filter_map(|(i, v)| {
                let v = (*v).filter(|v| v.is_finite() && *v >= 0.0)?;
                let x0 = i as f64 + 0.1 + j as f64 * width;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + width * 0.9, v)],
                    color.filled(),
                ))
            });
            chart
                .draw_series(bars)?
                .label(s.label.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
                });
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
}

/// Lines on a logarithmic x axis. `x_ticks` gives the tick positions (else 1-2-5 steps);
/// `y_max` fixes the top of the y axis (else a little above the largest value).
pub fn line_chart(
    caption: &str,
    x_desc: &str,
    y_desc: &str,
    x_ticks: Option<Vec<f64>>,
    y_max: Option<f64>,
    series: &[LineSeriesSpec],
    markers: bool,
) -> Option<String> {
    let points = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|(x, y)| x.is_finite() && *x > 0.0 && y.is_finite())
    };
    if series.is_empty() || points().next().is_none() {
        return None;
    }
    let x_lo = points().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_hi = points().map(|p| p.0).fold(0.0f64, f64::max);
    // Pad the range a little, and widen a single value into a visible range.
    let (x_lo, x_hi) = if x_hi / x_lo < 1.5 {
        (x_lo / 1.5, x_hi * 1.5)
    } else {
        (x_lo / 1.15, x_hi * 1.15)
    };
    let y_top = y_max.unwrap_or_else(|| {
        let top = points().map(|p| p.1).fold(0.0f64, f64::max);
        if top > 0.0 {
            top * 1.15
        } else {
            1.0
        }
    });
    let ticks = x_ticks.unwrap_or_else(|| log_ticks(x_lo, x_hi));
    svg_canvas(|root| {
        let mut chart = framed(root, caption)
            .build_cartesian_2d((x_lo..x_hi).log_scale().with_key_points(ticks), 0f64..y_top)?;
        chart
            .configure_mesh()
            .max_light_lines(2)
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(&|v| axis_number(*v))
            .y_label_formatter(&|v| axis_number(*v))
            .draw()?;
        for s in series {
            let color = s.color;
            let style = color.stroke_width(2);
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && *x > 0.0 && y.is_finite())
                .collect();
            if pts.is_empty() {
                continue;
            }
            if s.dashed {
                chart
                    .draw_series(DashedLineSeries::new(pts.clone(), 8, 5, style))?
                    .label(s.label.as_str())
                    .legend(move |(x, y)| {
                        DashedPathElement::new(vec![(x, y), (x + 22, y)], 6, 4, style)
                    });
            } else {
                chart
                    .draw_series(LineSeries::new(pts.clone(), style))?
                    .label(s.label.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
            }
            if markers {
                chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
            }
        }
        draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
    })
}

/// 1-2-5 ticks between `lo` and `hi` (decades only when that gives too many).
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut all = Vec::new();
    let mut decades = Vec::new();
    let mut exp = lo.log10().floor() as i32;
    while 10f64.powi(exp) <= hi && exp < 20 {
        let base = 10f64.powi(exp);
        for m in [1.0, 2.0, 5.0] {
            let v = base * m;
            if v >= lo && v <= hi {
                all.push(v);
                if m == 1.0 {
                    decades.push(v);
                }
            }
        }
        exp += 1;
    }
    if all.len() > 12 && decades.len() >= 2 {
        decades
    } else {
        all
    }
}

/// A tick label without needless digits: 0.05, 0.5, 2, 1500, 25k.
pub fn axis_number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100_000.0 {
        format!("{}k", trim_zeros(&format!("{:.0}", v / 1000.0)))
    } else if a >= 10.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim_zeros(&format!("{v:.1}"))
    } else if a >= 0.01 {
        trim_zeros(&format!("{v:.2}"))
    } else {
        trim_zeros(&format!("{v:.3}"))
    }
}

fn trim_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_numbers_and_ticks() {
        assert_eq!(axis_number(0.5), "0.5");
        assert_eq!(axis_number(2.0), "2");
        assert_eq!(axis_number(1500.0), "1500");
        assert_eq!(axis_number(250_000.0), "250k");
        assert_eq!(log_ticks(0.3, 30.0), vec![0.5, 1.0, 2.0, 5.0, 10.0, 20.0]);
    }
}
