//! Draws a [`Figure`] as an SVG line chart with plotters' SVG backend. Only that backend is
//! enabled (no font or system libraries): the SVG carries its text as `<text>` elements that the
//! viewer renders.

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
