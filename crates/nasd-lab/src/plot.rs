//! Draws a [`Figure`] as an SVG line chart with plotters' SVG backend. Only that backend is
//! enabled (no font or system libraries): the SVG carries its text as `<text>` elements that the
//! viewer renders. [`draw_ascii`] draws the same figure as text, for a terminal.

use std::path::Path;

use plotters::prelude::*;

use crate::error::LabError;
use crate::report::Figure;

/// Width and height of every plot, in pixels.
pub const PLOT_SIZE_PX: (u32, u32) = (900, 600);

/// Colours of successive series, cycled.
const PALETTE: [RGBColor; 12] = [
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
    RGBColor(0, 0, 0),
    RGBColor(255, 215, 0),
];

/// Series with at most this many points also get a marker per point.
const MARKER_MAX_POINTS: usize = 24;

/// Smallest y drawn on a log axis, so that zero values stay on the chart.
const LOG_Y_FLOOR: f64 = 1e-3;

/// Columns of a text plot's drawing area, characters.
pub const ASCII_PLOT_COLS: usize = 72;
/// Rows of a text plot's drawing area, lines.
pub const ASCII_PLOT_ROWS: usize = 18;
/// Width of the y-axis labels of a text plot, characters.
const ASCII_LABEL_COLS: usize = 9;
/// Marks of successive series in a text plot, cycled.
const ASCII_MARKS: [char; 8] = ['.', 'o', '*', '+', 'x', '#', '@', '%'];

/// Draws `fig` as text: a grid of [`ASCII_PLOT_COLS`] x [`ASCII_PLOT_ROWS`] cells with one mark
/// per series (an earlier series keeps a shared cell, so put the curve to watch first), a linear
/// y axis from zero (logarithmic if `fig.log_y`), the x range of the data, and a legend.
pub fn draw_ascii(fig: &Figure) -> String {
    let pts = || fig.series.iter().flat_map(|s| s.points.iter());
    let x_min = pts().map(|p| p.0).fold(f64::MAX, f64::min);
    let x_max = pts().map(|p| p.0).fold(f64::MIN, f64::max);
    let y_top = pts().map(|p| p.1).fold(f64::MIN, f64::max);
    let y_top = fig.y_max.map_or(y_top, |cap| y_top.min(cap));
    let mut out = format!("{}\n", fig.title);
    if x_min > x_max || y_top <= 0.0 || !y_top.is_finite() {
        out.push_str("(no data)\n");
        return out;
    }
    let y_of = |y: f64| -> f64 {
        if fig.log_y {
            y.max(LOG_Y_FLOOR).log10()
        } else {
            y
        }
    };
    let (lo, hi) = if fig.log_y {
        (y_of(LOG_Y_FLOOR), y_of(y_top))
    } else {
        (0.0, y_top)
    };
    let span_x = (x_max - x_min).max(f64::MIN_POSITIVE);
    let span_y = (hi - lo).max(f64::MIN_POSITIVE);
    let mut grid = vec![vec![' '; ASCII_PLOT_COLS]; ASCII_PLOT_ROWS];
    for (i, s) in fig.series.iter().enumerate() {
        for &(x, y) in &s.points {
            let col = ((x - x_min) / span_x * (ASCII_PLOT_COLS - 1) as f64).round();
            let row = ((y_of(y.min(y_top)) - lo) / span_y * (ASCII_PLOT_ROWS - 1) as f64).round();
            let (col, row) = (col.max(0.0) as usize, row.max(0.0) as usize);
            let cell = &mut grid[ASCII_PLOT_ROWS - 1 - row.min(ASCII_PLOT_ROWS - 1)]
                [col.min(ASCII_PLOT_COLS - 1)];
            if *cell == ' ' {
                *cell = ASCII_MARKS[i % ASCII_MARKS.len()];
            }
        }
    }
    let label = |row: usize| -> String {
        let v = lo + span_y * (ASCII_PLOT_ROWS - 1 - row) as f64 / (ASCII_PLOT_ROWS - 1) as f64;
        let v = if fig.log_y { 10f64.powf(v) } else { v };
        format!("{v:>w$.1}", w = ASCII_LABEL_COLS)
    };
    for (r, line) in grid.iter().enumerate() {
        let tick = r == 0 || r == ASCII_PLOT_ROWS - 1 || r == ASCII_PLOT_ROWS / 2;
        let l = if tick {
            label(r)
        } else {
            " ".repeat(ASCII_LABEL_COLS)
        };
        let cells: String = line.iter().collect();
        out.push_str(&format!("{l} |{}\n", cells.trim_end()));
    }
    out.push_str(&ascii_footer(fig, x_min, x_max));
    out
}

/// The x axis, its range and labels, and the legend of a text plot.
fn ascii_footer(fig: &Figure, x_min: f64, x_max: f64) -> String {
    let pad = " ".repeat(ASCII_LABEL_COLS);
    let mut out = format!("{pad} +{}\n", "-".repeat(ASCII_PLOT_COLS));
    let (left, right) = (format!("{x_min}"), format!("{x_max}"));
    let gap = ASCII_PLOT_COLS.saturating_sub(left.len() + right.len());
    out.push_str(&format!("{pad}  {left}{}{right}\n", " ".repeat(gap)));
    out.push_str(&format!("{pad}  x: {}; y: {}\n", fig.x_label, fig.y_label));
    for (i, s) in fig.series.iter().enumerate() {
        let mark = ASCII_MARKS[i % ASCII_MARKS.len()];
        out.push_str(&format!("{pad}  {mark} {}\n", s.name));
    }
    out
}

/// Draws `fig` into `path`.
pub fn draw_svg(fig: &Figure, path: &Path) -> Result<(), LabError> {
    let err = |e: String| LabError::Plot {
        path: path.to_path_buf(),
        reason: e,
    };
    let points = fig.series.iter().flat_map(|s| s.points.iter());
    let (mut x_min, mut x_max, mut y_min, mut y_max) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    if x_min > x_max {
        (x_min, x_max, y_min, y_max) = (0.0, 1.0, 0.0, 1.0);
    }
    if x_max <= x_min {
        x_max = x_min + 1.0;
    }
    let root = SVGBackend::new(path, PLOT_SIZE_PX).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(&fig.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70);
    if fig.log_y {
        let lo = y_min.max(LOG_Y_FLOOR);
        let hi = (y_max.max(lo) * 2.0).max(lo * 10.0);
        let mut chart = builder
            .build_cartesian_2d(x_min..x_max, (lo..hi).log_scale())
            .map_err(|e| err(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc(fig.x_label.as_str())
            .y_desc(fig.y_label.as_str())
            .draw()
            .map_err(|e| err(e.to_string()))?;
        for (i, s) in fig.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (x, y.max(lo))).collect();
            if pts.len() <= MARKER_MAX_POINTS {
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(|e| err(e.to_string()))?;
            }
            chart
                .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                .map_err(|e| err(e.to_string()))?
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(e.to_string()))?;
    } else {
        let lo = y_min.min(0.0);
        let top = fig.y_max.map_or(y_max, |cap| y_max.min(cap));
        let hi = if top > lo { top * 1.05 } else { lo + 1.0 };
        let clip = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
            pts.iter().map(|&(x, y)| (x, y.min(hi))).collect()
        };
        let mut chart = builder
            .build_cartesian_2d(x_min..x_max, lo..hi)
            .map_err(|e| err(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc(fig.x_label.as_str())
            .y_desc(fig.y_label.as_str())
            .draw()
            .map_err(|e| err(e.to_string()))?;
        for (i, s) in fig.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let pts = clip(&s.points);
            if pts.len() <= MARKER_MAX_POINTS {
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(|e| err(e.to_string()))?;
            }
            chart
                .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                .map_err(|e| err(e.to_string()))?
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(e.to_string()))?;
    }
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Series;

    #[test]
    fn ascii_plot_puts_the_extremes_in_the_corners_and_names_every_series() {
        let fig = Figure {
            stem: "t".into(),
            title: "a rising line".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_y: false,
            y_max: None,
            series: vec![
                Series {
                    name: "up".into(),
                    points: vec![(0.0, 0.0), (10.0, 100.0)],
                },
                Series {
                    name: "flat".into(),
                    points: vec![(5.0, 50.0)],
                },
            ],
        };
        let text = draw_ascii(&fig);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "a rising line");
        // Top row: the largest y at the right edge; bottom row: the smallest at the left.
        assert!(
            lines[1].starts_with("    100.0 |") && lines[1].ends_with('.'),
            "{text}"
        );
        assert!(lines[ASCII_PLOT_ROWS].ends_with("|."), "{text}");
        assert!(
            text.contains("  . up\n") && text.contains("  o flat\n"),
            "{text}"
        );
        assert_eq!(
            text.lines().filter(|l| l.contains('o')).count(),
            2,
            "{text}"
        );
        // A later series never hides an earlier one.
        let mut both = fig.clone();
        both.series[1].points.push((10.0, 100.0));
        assert!(draw_ascii(&both).lines().nth(1).unwrap().ends_with('.'));
        let empty = Figure {
            series: Vec::new(),
            ..fig
        };
        assert!(draw_ascii(&empty).contains("(no data)"));
    }
}
