//! What an experiment hands back: tables (printed as text, or as one JSON object per row with
//! `--json`) and figures (written as a CSV and an SVG per figure with `--out DIR`).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::LabError;
use crate::plot;

/// One printed table. `rows` are the text cells; `json` holds one object per row with the fields
/// documented in `docs/lab.md` (they may carry more precision than the text).
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Short id, e.g. `table1` or `fig12`.
    pub name: String,
    /// Caption printed above the table.
    pub title: String,
    /// Column headers.
    pub columns: Vec<String>,
    /// Text cells, one vector per row.
    pub rows: Vec<Vec<String>>,
    /// Machine-readable rows.
    pub json: Vec<serde_json::Value>,
}

impl Table {
    /// A table with a name, a caption and column headers, and no rows yet.
    pub fn new(name: &str, title: &str, columns: &[&str]) -> Self {
        Table {
            name: name.to_string(),
            title: title.to_string(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
            json: Vec::new(),
        }
    }

    /// Appends a row: its text cells and its JSON object.
    pub fn push(&mut self, cells: Vec<String>, json: serde_json::Value) {
        debug_assert_eq!(cells.len(), self.columns.len());
        self.rows.push(cells);
        self.json.push(json);
    }

    /// The table as aligned text.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.len()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        // Text columns (most cells not numbers) are left-aligned, numeric ones right-aligned.
        let numeric: Vec<bool> = (0..self.columns.len())
            .map(|i| {
                let cells: Vec<&String> = self
                    .rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .filter(|c| !c.is_empty())
                    .collect();
                let numbers = cells.iter().filter(|c| looks_numeric(c)).count();
                !cells.is_empty() && 2 * numbers >= cells.len()
            })
            .collect();
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.title);
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                let sep = if i == 0 { "" } else { "  " };
                if !numeric[i] {
                    let _ = write!(s, "{sep}{cell:<w$}");
                } else {
                    let _ = write!(s, "{sep}{cell:>w$}");
                }
            }
            s.trim_end().to_string()
        };
        let _ = writeln!(out, "{}", line(&self.columns));
        let total: usize = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
        let _ = writeln!(out, "{}", "-".repeat(total));
        for row in &self.rows {
            let _ = writeln!(out, "{}", line(row));
        }
        out
    }
}

/// One curve of a figure.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points in x order.
    pub points: Vec<(f64, f64)>,
}

/// A figure: the data of one of the seed's plots, redrawn on our numbers.
#[derive(Debug, Clone)]
pub struct Figure {
    /// File stem of the CSV and SVG, e.g. `fig12`.
    pub stem: String,
    /// Caption, naming the seed figure it reproduces.
    pub title: String,
    /// X axis label with unit.
    pub x_label: String,
    /// Y axis label with unit.
    pub y_label: String,
    /// Logarithmic y axis (Fig 16 of seed 000 is).
    pub log_y: bool,
    /// Top of a linear y axis: larger values are drawn at the top edge (the CSV keeps them).
    pub y_max: Option<f64>,
    /// The curves.
    pub series: Vec<Series>,
}

impl Figure {
    /// The figure's data in long form: `series,x,y`.
    pub fn csv(&self) -> String {
        let mut out = format!(
            "series,{},{}\n",
            csv_field(&self.x_label),
            csv_field(&self.y_label)
        );
        for s in &self.series {
            for (x, y) in &s.points {
                let _ = writeln!(out, "{},{x},{y}", csv_field(&s.name));
            }
        }
        out
    }
}

/// A cell that reads as a number, possibly with a unit (`12.5`, `30x`, `929/s`, `4 MB/s`).
fn looks_numeric(cell: &str) -> bool {
    let mut tokens = cell.split_whitespace();
    let head = tokens.next().unwrap_or("");
    let unit_ok = tokens.all(|t| t.chars().all(|c| c.is_alphabetic() || c == '/'));
    let head = head.trim_end_matches(|c: char| c.is_alphabetic() || c == '/' || c == '%');
    unit_ok && !head.is_empty() && head.parse::<f64>().is_ok()
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Everything one experiment produced.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// `crypto`, `model`, `sim` or `raid`.
    pub experiment: String,
    /// Printed tables.
    pub tables: Vec<Table>,
    /// Figures for `--out`.
    pub figures: Vec<Figure>,
    /// Free text printed after the tables: how the run was measured, how it compares with the seed.
    pub notes: Vec<String>,
}

impl Report {
    /// All tables and notes as text. A table without text rows only feeds `--json`.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for t in self.tables.iter().filter(|t| !t.rows.is_empty()) {
            out.push_str(&t.render());
            out.push('\n');
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        out
    }

    /// One JSON object per table row, one per line. Each object gets the experiment name if the
    /// row does not carry it already.
    pub fn json_lines(&self) -> String {
        let mut out = String::new();
        for t in &self.tables {
            for row in &t.json {
                let mut row = row.clone();
                if let serde_json::Value::Object(map) = &mut row {
                    map.entry("experiment")
                        .or_insert_with(|| serde_json::Value::String(self.experiment.clone()));
                }
                let _ = writeln!(out, "{row}");
            }
        }
        out
    }

    /// Writes `<stem>.csv` and `<stem>.svg` for every figure into `dir` (created if missing) and
    /// returns the paths written.
    pub fn write_outputs(&self, dir: &Path) -> Result<Vec<PathBuf>, LabError> {
        fs::create_dir_all(dir).map_err(|source| LabError::Output {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut written = Vec::new();
        for fig in &self.figures {
            let csv_path = dir.join(format!("{}.csv", fig.stem));
            fs::write(&csv_path, fig.csv()).map_err(|source| LabError::Output {
                path: csv_path.clone(),
                source,
            })?;
            written.push(csv_path);
            let svg_path = dir.join(format!("{}.svg", fig.stem));
            plot::draw_svg(fig, &svg_path)?;
            written.push(svg_path);
        }
        Ok(written)
    }
}

/// Formats a float with `digits` decimals.
pub fn fmt(x: f64, digits: usize) -> String {
    format!("{x:.digits$}")
}
