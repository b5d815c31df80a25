//! Drawing the report's plots with `plotters`, into SVG strings or PNG files.
//!
//! One drawing function per kind of plot, generic over the backend, so the SVG and the PNG
//! of a plot are the same picture. The pair map (node x node) and the rail map (node x
//! rail) are both a `Matrix` drawn by `draw_matrix`. Text is laid out with the DejaVu Sans font compiled into
//! the binary (`assets/fonts/`, registered once as `sans-serif`): no fontconfig at build
//! time and no system fonts at run time, so a report renders the same on a bare compute
//! node as on a desktop.
//!
//! Everything here must survive odd data: non-finite numbers are left out before they
//! reach a coordinate, empty or zero-width ranges are widened, and a plot with nothing
//! to show says so in its frame instead of failing.

use std::path::Path;
use std::sync::OnceLock;

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{HeatMap, RailMap, ReportData, ReportError, REPLAY_LABEL};
use crate::units::format_rfc3339;
use crate::units::{human_size, short_time};

/// DejaVu Sans (Bitstream Vera licence, see `assets/fonts/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// The family name the plots ask for; [`ensure_font`] binds it to [`FONT`].
const FAMILY: &str = "sans-serif";

/// Most runs given their own legend line; more would hide the plot.
const MAX_LEGEND_RUNS: usize = 12;

/// Line colours, distinguishable in print and by most colour-blind readers (Okabe-Ito
/// order, then a few darker extras).
const PALETTE: [RGBColor; 10] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(230, 159, 0),
    RGBColor(0, 0, 0),
    RGBColor(120, 94, 240),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

/// The plots a report can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plot {
    /// busbw against message size, one line per run, baselines as bands.
    Busbw,
    /// Node x node pair busbw.
    HeatMap,
    /// Node x rail: what each node sent on each data NIC.
    RailMap,
    /// Nodes' busbw over time.
    NodeTrend,
}

impl Plot {
    /// The plots that `data` has something for, in report order.
    pub fn for_data(data: &ReportData) -> Vec<Plot> {
        let mut plots = Vec::new();
        if !data.runs.is_empty() {
            plots.push(Plot::Busbw);
        }
        if data.heat.is_some() {
            plots.push(Plot::HeatMap);
        }
        if data.rail_map.is_some() {
            plots.push(Plot::RailMap);
        }
        if !data.trends.is_empty() {
            plots.push(Plot::NodeTrend);
        }
        plots
    }

    /// File name without extension.
    pub fn file_stem(self) -> &'static str {
        match self {
            Plot::Busbw => "busbw",
            Plot::HeatMap => "heatmap",
            Plot::RailMap => "railmap",
            Plot::NodeTrend => "node-trend",
        }
    }

    /// Section title in the HTML.
    pub fn title(self) -> &'static str {
        match self {
            Plot::Busbw => "Bus bandwidth by message size",
            Plot::HeatMap => "Pairwise bus bandwidth (node x node)",
            Plot::RailMap => "Bandwidth sent per data NIC (node x rail)",
            Plot::NodeTrend => "Nodes over time",
        }
    }

    /// Pixel size of the picture for this data.
    pub fn dimensions(self, data: &ReportData) -> (u32, u32) {
        match self {
            Plot::Busbw => (1100, 650),
            Plot::NodeTrend => (1100, 560),
            Plot::HeatMap => Matrix::dimensions(data.heat.as_ref().map(heat_view).as_ref()),
            Plot::RailMap => Matrix::dimensions(data.rail_map.as_ref().map(rail_view).as_ref()),
        }
    }
}

/// A linear `f64` axis with the tick positions we choose (log2 sizes, node centres).
///
/// plotters' own `with_key_points` wrapper loses the `f64` label formatter, so this small
/// axis does the same job with default formatting; every use sets its own formatter.
#[derive(Debug, Clone)]
struct KeyedAxis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl KeyedAxis {
    fn new(lo: f64, hi: f64, ticks: Vec<f64>) -> KeyedAxis {
        let (lo, hi) = sane_range(lo, hi, 1.0);
        let ticks = ticks
            .into_iter()
            .filter(|t| (lo..=hi).contains(t))
            .collect();
        KeyedAxis { lo, hi, ticks }
    }
}

impl Ranged for KeyedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let t = (value - self.lo) / (self.hi - self.lo);
        // `as` saturates and maps NaN to 0: an odd value lands on the edge, never panics.
        (f64::from(limit.0) + t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// Registers the embedded font once; later calls return the first result.
fn ensure_font() -> Result<(), ReportError> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(ReportError::Plot {
            plot: "any plot",
            reason: "the embedded DejaVu Sans font could not be loaded".into(),
        })
    }
}

/// The plot as an SVG document.
pub fn render_svg(plot: Plot, data: &ReportData) -> Result<String, ReportError> {
    ensure_font()?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, plot.dimensions(data)).into_drawing_area();
        draw(plot, data, &root)?;
    }
    Ok(svg)
}

/// The plot as a PNG file at `path`.
pub fn render_png(plot: Plot, data: &ReportData, path: &Path) -> Result<(), ReportError> {
    ensure_font()?;
    let root = BitMapBackend::new(path, plot.dimensions(data)).into_drawing_area();
    draw(plot, data, &root)
}

fn draw<DB: DrawingBackend>(
    plot: Plot,
    data: &ReportData,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), ReportError> {
    let result = match plot {
        Plot::Busbw => draw_busbw(root, data),
        Plot::HeatMap => match &data.heat {
            Some(heat) => draw_matrix(root, &heat_view(heat)),
            None => draw_empty(root, "no pairwise results"),
        },
        Plot::RailMap => match &data.rail_map {
            Some(rails) => draw_matrix(root, &rail_view(rails)),
            None => draw_empty(root, "no rail results"),
        },
        Plot::NodeTrend => draw_trend(root, data),
    }
    .and_then(|()| root.present().map_err(|e| e.to_string()));
    result.map_err(|reason| ReportError::Plot {
        plot: plot.file_stem(),
        reason,
    })
}

/// Any plotting error, as text (backend error types differ per backend).
fn txt<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn font(size: u32) -> TextStyle<'static> {
    (FAMILY, size).into_text_style(&(1000u32, 1000u32))
}

fn draw_empty<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, what: &str) -> Result<(), String> {
    root.fill(&WHITE).map_err(txt)?;
    let (w, h) = root.dim_in_pixel();
    root.draw(&Text::new(
        what.to_string(),
        (w as i32 / 2 - 80, h as i32 / 2),
        font(18),
    ))
    .map_err(txt)
}

/// A y-axis number with as many decimals as the axis' scale needs (`350`, `3.5`, `0.35`).
fn axis_number(y: f64, axis_max: f64) -> String {
    match axis_max {
        m if m >= 20.0 => format!("{y:.0}"),
        m if m >= 2.0 => format!("{y:.1}"),
        _ => format!("{y:.2}"),
    }
}

/// Widens a range that is empty, inverted or not finite into a drawable one.
fn sane_range(lo: f64, hi: f64, pad: f64) -> (f64, f64) {
    if !lo.is_finite() || !hi.is_finite() || hi < lo {
        return (0.0, 1.0);
    }
    if hi - lo < f64::EPSILON * hi.abs().max(1.0) {
        return (lo - pad, hi + pad);
    }
    (lo, hi)
}

/// Key points of the log2 size axis: whole powers of two, at most about 12 of them,
/// spaced evenly and aligned so that 8 B, 64 B, ... 8 GiB (every third power) show when
/// they fit.
fn size_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (first, last) = (lo.ceil() as i64, hi.floor() as i64);
    if last < first {
        return vec![lo, hi];
    }
    let count = (last - first + 1) as usize;
    let step = count.div_ceil(12).max(1) as i64;
    // Start at a multiple of the step offset from 2^3 (8 B), so labels land on 8 B, 64 B...
    let start = first + (3 - first).rem_euclid(step);
    let start = if start > last { first } else { start };
    (start..=last)
        .step_by(step as usize)
        .map(|e| e as f64)
        .collect()
}

fn draw_busbw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    data: &ReportData,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(txt)?;
    let tol = data.tolerance_pct / 100.0;
    let (lo, hi, ymax) = busbw_frame(data);
    let any_data = data
        .runs
        .iter()
        .any(|r| r.points.iter().any(|p| p.busbw.is_some()));

    let mut chart = ChartBuilder::on(root)
        .caption("busbw vs message size (out-of-place)", font(24))
        .margin(18)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(KeyedAxis::new(lo, hi, size_ticks(lo, hi)), 0.0..ymax)
        .map_err(txt)?;
    chart
        .configure_mesh()
        .x_desc("message size (log2 scale)")
        .y_desc("busbw (GB/s)")
        .x_label_formatter(&|x| human_size(x.exp2().round() as u64))
        .y_label_formatter(&|y| axis_number(*y, ymax))
        .label_style(font(14))
        .axis_desc_style(font(16))
        .light_line_style(RGBColor(240, 240, 240))
        .y_max_light_lines(1)
        .draw()
        .map_err(txt)?;

    // Baselines first, so runs are drawn over them.
    for band in &data.bands {
        let pts: Vec<(f64, f64)> = band
            .points
            .iter()
            .filter(|(s, v)| *s > 0 && v.is_finite())
            .map(|(s, v)| ((*s as f64).log2(), *v))
            .collect();
        if pts.is_empty() {
            continue;
        }
        // Tinted like the first run judged against it, so overlapping bands can be told apart.
        let tint = data
            .runs
            .iter()
            .position(|r| r.band_key() == band.key)
            .map_or(RGBColor(120, 120, 120), |i| PALETTE[i % PALETTE.len()]);
        let fill = tint.mix(0.2);
        let outline = band_outline(&pts, tol);
        chart
            .draw_series(std::iter::once(Polygon::new(outline, fill.filled())))
            .map_err(txt)?
            .label(band.label())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], fill.filled()));
        chart
            .draw_series(LineSeries::new(pts, tint.mix(0.6).stroke_width(1)))
            .map_err(txt)?;
    }

    for (i, run) in data.runs.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let style = color.stroke_width(if run.replay.is_some() { 2 } else { 3 });
        let segments = run_segments(run);
        let labelled = chart
            .draw_series(LineSeries::new(std::iter::empty::<(f64, f64)>(), style))
            .map_err(txt)?;
        if i < MAX_LEGEND_RUNS {
            labelled
                .label(run.label())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
        for seg in segments.into_iter().filter(|s| !s.is_empty()) {
            chart
                .draw_series(seg.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(txt)?;
            chart
                .draw_series(LineSeries::new(seg, style))
                .map_err(txt)?;
        }
    }
    if data.runs.len() > MAX_LEGEND_RUNS {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), u32>>())
            .map_err(txt)?
            .label(format!(
                "... and {} more runs (see the table)",
                data.runs.len() - MAX_LEGEND_RUNS
            ))
            .legend(|(x, y)| EmptyElement::at((x, y)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(font(14))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()
        .map_err(txt)?;
    if !any_data {
        let (w, h) = root.dim_in_pixel();
        root.draw(&Text::new(
            "no busbw numbers in these runs",
            (w as i32 / 2 - 130, h as i32 / 2),
            font(18),
        ))
        .map_err(txt)?;
    }
    Ok(())
}

/// The busbw plot's frame: the x range (log2 of the sizes, whole powers) and the y
/// maximum (the runs' busbw and the baselines' upper edges, with headroom).
fn busbw_frame(data: &ReportData) -> (f64, f64, f64) {
    let tol = data.tolerance_pct / 100.0;
    let sizes = data
        .runs
        .iter()
        .flat_map(|r| {
            r.points
                .iter()
                .filter(|p| p.busbw.is_some())
                .map(|p| p.size_bytes)
        })
        .chain(data.bands.iter().flat_map(|b| b.points.iter().map(|p| p.0)))
        .filter(|&s| s > 0);
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for s in sizes {
        let x = (s as f64).log2();
        lo = lo.min(x.floor());
        hi = hi.max(x.ceil());
    }
    if !lo.is_finite() {
        // Nothing to draw: show the usual 8 B .. 8 GiB frame.
        (lo, hi) = (3.0, 33.0);
    }
    let (lo, hi) = sane_range(lo, hi, 1.0);
    let ymax = data
        .runs
        .iter()
        .flat_map(|r| r.points.iter().filter_map(|p| p.busbw))
        .chain(
            data.bands
                .iter()
                .flat_map(|b| b.points.iter().map(|p| p.1 * (1.0 + tol))),
        )
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let ymax = if ymax > 0.0 { ymax * 1.08 } else { 1.0 };
    (lo, hi, ymax)
}

/// A baseline band's outline, `tol` above and below its points; a short bar for one point.
fn band_outline(pts: &[(f64, f64)], tol: f64) -> Vec<(f64, f64)> {
    let mut outline: Vec<(f64, f64)> = pts.iter().map(|(x, v)| (*x, v * (1.0 + tol))).collect();
    outline.extend(pts.iter().rev().map(|(x, v)| (*x, v * (1.0 - tol))));
    if pts.len() == 1 {
        // One size: a short bar instead of a zero-width polygon.
        let (x, v) = pts[0];
        outline = vec![
            (x - 0.15, v * (1.0 + tol)),
            (x + 0.15, v * (1.0 + tol)),
            (x + 0.15, v * (1.0 - tol)),
            (x - 0.15, v * (1.0 - tol)),
        ];
    }
    outline
}

/// A run's points as line segments, broken where the run has no number.
fn run_segments(run: &super::RunSeries) -> Vec<Vec<(f64, f64)>> {
    // A gap where the run has no number: split the line into segments.
    let mut segments: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for p in run.points.iter().filter(|p| p.size_bytes > 0) {
        match p.busbw.filter(|b| b.is_finite()) {
            Some(b) => {
                if let Some(seg) = segments.last_mut() {
                    seg.push(((p.size_bytes as f64).log2(), b));
                }
            }
            None => segments.push(Vec::new()),
        }
    }
    segments
}

/// Width of the heat map's colour bar, height of its title, narrowest picture (so the
/// title fits).
const HEAT_BAR: u32 = 150;
const HEAT_TITLE: u32 = 60;
const HEAT_MIN_WIDTH: u32 = 640;

/// Longest node label the heat map prints, in characters; longer names keep their tail.
const HEAT_LABEL_CHARS: usize = 16;

/// Side of the heat map's grid in pixels: 32 px cells for small clusters, capped so
/// a big one still fits a screen (cells then shrink, and the labels thin out).
fn heat_grid_px(n: usize) -> u32 {
    (n as u32).saturating_mul(32).clamp(320, 1000)
}

/// Room for the node labels (beside the grid, and rotated under it): the longest
/// label's width at 13 px, plus the tick.
fn heat_label_px(nodes: &[String]) -> u32 {
    let chars = nodes
        .iter()
        .map(|n| n.chars().count().min(HEAT_LABEL_CHARS + 1))
        .max()
        .unwrap_or(4) as u32;
    (chars * 8 + 16).clamp(40, 160)
}

/// A node name cut to [`HEAT_LABEL_CHARS`], keeping its distinctive tail.
fn heat_label(name: &str) -> String {
    let count = name.chars().count();
    if count <= HEAT_LABEL_CHARS {
        return name.to_string();
    }
    let tail: String = name.chars().skip(count - (HEAT_LABEL_CHARS - 1)).collect();
    format!("…{tail}")
}

/// Every how-many-th node gets a label so that labels (about 16 px apart) never overlap.
pub fn label_step(n: usize, axis_px: u32, label_px: u32) -> usize {
    if n == 0 {
        return 1;
    }
    let per_label = axis_px as f64 / n as f64;
    ((label_px as f64 / per_label).ceil() as usize).max(1)
}

/// Colour for a cell at `ratio` of its map's reference (the colour scale's 100%): red at
/// half or less, through orange and pale yellow, to green at the reference and above.
pub fn heat_color(ratio: f64) -> RGBColor {
    const STOPS: [(f64, (f64, f64, f64)); 5] = [
        (0.5, (165.0, 0.0, 38.0)),
        (0.7, (244.0, 109.0, 67.0)),
        (0.85, (254.0, 224.0, 139.0)),
        (0.97, (166.0, 217.0, 106.0)),
        (1.1, (26.0, 152.0, 80.0)),
    ];
    let r = if ratio.is_finite() { ratio } else { 0.0 };
    let r = r.clamp(STOPS[0].0, STOPS[STOPS.len() - 1].0);
    for w in STOPS.windows(2) {
        let ((a, ca), (b, cb)) = (w[0], w[1]);
        if r <= b {
            let t = (r - a) / (b - a);
            let mix = |x: f64, y: f64| (x + (y - x) * t).round().clamp(0.0, 255.0) as u8;
            return RGBColor(mix(ca.0, cb.0), mix(ca.1, cb.1), mix(ca.2, cb.2));
        }
    }
    let c = STOPS[STOPS.len() - 1].1;
    RGBColor(c.0 as u8, c.1 as u8, c.2 as u8)
}

/// A matrix as [`draw_matrix`] draws it: the pair map (node x node) and the rail map
/// (node x rail) are one picture with different labels and a different 100%.
struct Matrix<'a> {
    /// The title above the grid.
    caption: String,
    /// Some numbers come from stand-in replays: [`REPLAY_LABEL`] goes under the title.
    replay: bool,
    /// Row labels, top to bottom.
    rows: &'a [String],
    /// Column labels, left to right.
    columns: &'a [String],
    /// `rows.len()` rows of `columns.len()` cells; `None` is drawn blank.
    values: &'a [Vec<Option<f64>>],
    /// The value drawn as 100% on the colour scale (and named under it).
    reference: Option<f64>,
    /// Per column, the value drawn as 100% in that column instead of `reference`.
    column_references: Option<Vec<Option<f64>>>,
    /// Axis titles: beside the rows, under the columns.
    row_title: &'static str,
    column_title: &'static str,
    /// What the reference is, under the colour bar: `% of {scale_of}`, `{reference_name}:
    /// 41.8 GB/s`.
    scale_of: &'static str,
    reference_name: &'static str,
    /// Said in the frame when there are no rows.
    empty: &'static str,
    /// Width and height of the grid in pixels (before the picture's minimum width).
    grid_px: (u32, u32),
}

impl Matrix<'_> {
    /// Picture size: the grid, its labels, the colour bar and the title.
    fn dimensions(view: Option<&Matrix>) -> (u32, u32) {
        let (gw, gh, row_labels, column_labels) =
            view.map_or((heat_grid_px(0), heat_grid_px(0), 0, 0), |m| {
                (
                    m.grid_px.0,
                    m.grid_px.1,
                    heat_label_px(m.rows),
                    heat_label_px(m.columns),
                )
            });
        (
            (gw + row_labels + HEAT_BAR + 70).max(HEAT_MIN_WIDTH),
            gh + column_labels + HEAT_TITLE + 70,
        )
    }
}

/// The pair heat map as a [`Matrix`]: nodes both ways, 100% at the p90 pair.
fn heat_view(heat: &HeatMap) -> Matrix<'_> {
    let n = heat.nodes.len();
    let measured = heat.values.iter().flatten().flatten().count() / 2;
    Matrix {
        caption: format!(
            "pair busbw{} - {n} nodes, {measured} pairs measured",
            heat.size_bytes
                .map(|s| format!(" at {}", human_size(s)))
                .unwrap_or_default()
        ),
        replay: heat.replay,
        rows: &heat.nodes,
        columns: &heat.nodes,
        values: &heat.values,
        reference: heat.reference(),
        column_references: None,
        row_title: "node",
        column_title: "partner",
        scale_of: "the p90 pair",
        reference_name: "pair",
        empty: "no pairwise results",
        grid_px: (heat_grid_px(n), heat_grid_px(n)),
    }
}

/// The rail map as a [`Matrix`]: nodes down, rails across, each cell as a share of its
/// rail's median.
fn rail_view(rails: &RailMap) -> Matrix<'_> {
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    Matrix {
        caption: format!(
            "rail busbw sent{} - {} x {}",
            rails
                .size_bytes
                .map(|s| format!(" at {}", human_size(s)))
                .unwrap_or_default(),
            plural(rails.nodes.len(), "node"),
            plural(rails.rails.len(), "rail"),
        ),
        replay: false,
        rows: &rails.nodes,
        columns: &rails.rails,
        values: &rails.values,
        reference: rails.reference(),
        // Each rail against its own median: a slow NIC stands out in its column even when
        // rails differ (a whole rail that is slow is in validate's verdicts).
        column_references: Some(rails.rail_medians()),
        row_title: "node (sender)",
        column_title: "rail (data NIC)",
        scale_of: "the rail's median",
        reference_name: "median",
        empty: "no rail results",
        grid_px: (
            rail_grid_px(rails.rails.len()),
            heat_grid_px(rails.nodes.len()),
        ),
    }
}

/// Width of the rail map's grid: 64 px per rail (there are few, and their names are
/// longer than a node number), capped like the pair map's.
fn rail_grid_px(rails: usize) -> u32 {
    (rails as u32).saturating_mul(64).clamp(128, 1000)
}

fn draw_matrix<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    m: &Matrix,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(txt)?;
    let (rows, cols) = (m.rows.len(), m.columns.len());
    if rows == 0 || cols == 0 {
        return draw_empty(root, m.empty);
    }
    let (w, _) = root.dim_in_pixel();
    root.draw(&Text::new(
        m.caption.clone(),
        (w as i32 / 2, 14),
        font(20).pos(Pos::new(HPos::Center, VPos::Top)),
    ))
    .map_err(txt)?;
    if m.replay {
        root.draw(&Text::new(
            REPLAY_LABEL,
            (w as i32 / 2, 38),
            font(16)
                .color(&RGBColor(170, 110, 0))
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(txt)?;
    }
    let body = root.margin(HEAT_TITLE, 0, 0, 0);
    let (bw, _) = body.dim_in_pixel();
    let (grid_area, bar_area) = body.split_horizontally(bw.saturating_sub(HEAT_BAR));
    let (grid_w, grid_h) = m.grid_px;
    let row_step = label_step(rows, grid_h, 16);
    let col_step = label_step(cols, grid_w, 16);
    // Label key points at the centre of every `step`-th cell; rows run top to bottom.
    let col_ticks: Vec<f64> = (0..cols)
        .step_by(col_step)
        .map(|j| j as f64 + 0.5)
        .collect();
    let row_ticks: Vec<f64> = (0..rows)
        .step_by(row_step)
        .map(|i| (rows - 1 - i) as f64 + 0.5)
        .collect();
    // The label of the cell a key point is in (`None` off the grid).
    let label = |v: f64, labels: &[String], flip: bool| -> String {
        if !v.is_finite() || v < 0.0 {
            return String::new();
        }
        let i = v.floor() as usize;
        let i = if flip {
            labels.len().checked_sub(i + 1)
        } else {
            Some(i)
        };
        i.and_then(|i| labels.get(i))
            .map(|s| heat_label(s))
            .unwrap_or_default()
    };
    let mut chart = ChartBuilder::on(&grid_area)
        .margin(12)
        .x_label_area_size(heat_label_px(m.columns) + 30)
        .y_label_area_size(heat_label_px(m.rows) + 30)
        .build_cartesian_2d(
            KeyedAxis::new(0.0, cols as f64, col_ticks),
            KeyedAxis::new(0.0, rows as f64, row_ticks),
        )
        .map_err(txt)?;
    chart
        .configure_mesh()
        .disable_mesh()
        // The column labels are drawn below by hand (rotated, anchored at their start);
        // the mesh only draws their tick marks.
        .x_label_formatter(&|_| String::new())
        .y_label_formatter(&|y| label(*y, m.rows, true))
        .y_label_style(font(13))
        .x_desc(m.column_title)
        .y_desc(m.row_title)
        .axis_desc_style(font(15))
        .draw()
        .map_err(txt)?;
    let mut cells = Vec::new();
    for (i, row) in m.values.iter().enumerate().take(rows) {
        for (j, v) in row.iter().enumerate().take(cols) {
            let column = m
                .column_references
                .as_ref()
                .and_then(|refs| refs.get(j).copied().flatten());
            let (Some(v), Some(reference)) = (v, column.or(m.reference)) else {
                continue;
            };
            let ratio = if reference > 0.0 { v / reference } else { 1.0 };
            let y = (rows - 1 - i) as f64;
            cells.push(Rectangle::new(
                [(j as f64, y), (j as f64 + 1.0, y + 1.0)],
                heat_color(ratio).filled(),
            ));
        }
    }
    chart.draw_series(cells).map_err(txt)?;
    // Column labels read downwards from just below their tick. plotters would centre a
    // rotated label on the tick, which puts half of it over the grid in SVG viewers.
    let label_style = font(13)
        .transform(FontTransform::Rotate90)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for j in (0..cols).step_by(col_step) {
        let (x, y) = chart.backend_coord(&(j as f64 + 0.5, 0.0));
        root.draw(&Text::new(
            label(j as f64 + 0.5, m.columns, false),
            (x, y + 10),
            label_style.clone(),
        ))
        .map_err(txt)?;
    }
    // A thin frame so blank cells at the edge still read as part of the grid.
    chart
        .draw_series(std::iter::once(Rectangle::new(
            [(0.0, 0.0), (cols as f64, rows as f64)],
            RGBColor(150, 150, 150).stroke_width(1),
        )))
        .map_err(txt)?;
    draw_color_bar(&bar_area, m)
}

/// The reference under the colour bar with two significant digits below 1 GB/s (a rail
/// over TCP moves about 0.8 GB/s: `0.9` would hide a 10% difference), one decimal above.
fn reference_number(r: f64) -> String {
    match r {
        r if r >= 1.0 => format!("{r:.1}"),
        r if r >= 0.1 => format!("{r:.2}"),
        _ => format!("{r:.3}"),
    }
}

fn draw_color_bar<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    m: &Matrix,
) -> Result<(), String> {
    let (_, h) = area.dim_in_pixel();
    let top = 10i32;
    let bottom = (h as i32 - 130).max(top + 60);
    let x0 = 10i32;
    let x1 = 34i32;
    let steps = 60;
    for k in 0..steps {
        let ratio = 1.1 - (1.1 - 0.5) * k as f64 / steps as f64;
        let y_a = top + (bottom - top) * k / steps;
        let y_b = top + (bottom - top) * (k + 1) / steps;
        area.draw(&Rectangle::new(
            [(x0, y_a), (x1, y_b)],
            heat_color(ratio).filled(),
        ))
        .map_err(txt)?;
    }
    for pct in [110, 100, 85, 70, 50] {
        let ratio = pct as f64 / 100.0;
        let y = top + ((1.1 - ratio) / 0.6 * (bottom - top) as f64).round() as i32;
        let label = if pct == 110 {
            ">=110%".to_string()
        } else {
            format!("{pct}%")
        };
        area.draw(&Text::new(label, (x1 + 6, y - 7), font(13)))
            .map_err(txt)?;
    }
    let lines = [
        format!("% of {}", m.scale_of),
        match m.reference {
            Some(r) => format!("{}: {} GB/s", m.reference_name, reference_number(r)),
            None => format!("{}: -", m.reference_name),
        },
        "blank: not measured".to_string(),
    ];
    for (k, line) in lines.iter().enumerate() {
        area.draw(&Text::new(
            line.clone(),
            (4, bottom + 16 + 18 * k as i32),
            font(13),
        ))
        .map_err(txt)?;
    }
    Ok(())
}

fn draw_trend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    data: &ReportData,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(txt)?;
    let all = || {
        data.trends
            .iter()
            .flat_map(|t| t.runs.iter().chain(&t.checks))
    };
    let (mut tlo, mut thi) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut ymax = 0.0f64;
    for p in all() {
        tlo = tlo.min(p.unix as f64);
        thi = thi.max(p.unix as f64);
        if p.busbw.is_finite() {
            ymax = ymax.max(p.busbw);
        }
    }
    if !tlo.is_finite() {
        return draw_empty(root, "no runs of these nodes at this size");
    }
    let (tlo, thi) = sane_range(tlo, thi, 3600.0);
    let pad = (thi - tlo) * 0.04;
    let (tlo, thi) = (tlo - pad, thi + pad);
    let ymax = if ymax > 0.0 { ymax * 1.12 } else { 1.0 };
    let mut caption = String::from("busbw over time");
    let sizes: std::collections::BTreeSet<Option<u64>> =
        data.trends.iter().map(|t| t.size_bytes).collect();
    match (sizes.len(), sizes.first()) {
        (1, Some(Some(s))) => caption.push_str(&format!(" at {}", human_size(*s))),
        (1, _) => {}
        _ => caption.push_str(" (each node at the size in its legend)"),
    }
    if let Some(c) = &data.trend_collective {
        caption.push_str(&format!(" ({c})"));
    }
    let mut chart = ChartBuilder::on(root)
        .caption(caption, font(24))
        .margin(18)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(tlo..thi, 0.0..ymax)
        .map_err(txt)?;
    chart
        .configure_mesh()
        .x_labels(6)
        .x_label_formatter(&|t| short_time(&format_rfc3339(t.round() as i64)))
        .y_label_formatter(&|y| axis_number(*y, ymax))
        .x_desc("run time (UTC)")
        .y_desc("busbw (GB/s)")
        .label_style(font(14))
        .axis_desc_style(font(16))
        .light_line_style(RGBColor(240, 240, 240))
        .max_light_lines(1)
        .draw()
        .map_err(txt)?;
    let mut any_drop = false;
    for (i, trend) in data.trends.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = trend
            .runs
            .iter()
            .filter(|p| p.busbw.is_finite())
            .map(|p| (p.unix as f64, p.busbw))
            .collect();
        let mut label = format!(
            "{} ({} run{}",
            trend.node,
            pts.len(),
            if pts.len() == 1 { "" } else { "s" }
        );
        if sizes.len() > 1 {
            if let Some(s) = trend.size_bytes {
                label.push_str(&format!(" at {}", human_size(s)));
            }
        }
        let replays = trend.runs.iter().filter(|p| p.replay).count();
        match replays {
            0 => label.push(')'),
            r if r == trend.runs.len() => label.push_str(&format!("; {REPLAY_LABEL})")),
            r => label.push_str(&format!("; {r} of them replays, not measurements)")),
        }
        let style = color.stroke_width(2);
        chart
            .draw_series(LineSeries::new(pts.clone(), style))
            .map_err(txt)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(txt)?;
        let checks: Vec<(f64, f64)> = trend
            .checks
            .iter()
            .filter(|p| p.busbw.is_finite())
            .map(|p| (p.unix as f64, p.busbw))
            .collect();
        if !checks.is_empty() {
            chart
                .draw_series(
                    checks
                        .iter()
                        .map(|&p| Circle::new(p, 5, color.stroke_width(2))),
                )
                .map_err(txt)?
                .label(format!("{} pair results (validation)", trend.node))
                .legend(move |(x, y)| Circle::new((x + 9, y), 5, color.stroke_width(2)));
        }
        let drops: Vec<(f64, f64)> = trend
            .runs
            .iter()
            .filter(|p| p.drop && p.busbw.is_finite())
            .map(|p| (p.unix as f64, p.busbw))
            .collect();
        if !drops.is_empty() {
            any_drop = true;
            chart
                .draw_series(drops.iter().map(|&p| Cross::new(p, 8, RED.stroke_width(3))))
                .map_err(txt)?;
        }
    }
    if any_drop {
        chart
            .draw_series(std::iter::empty::<Cross<(f64, f64), u32>>())
            .map_err(txt)?
            .label(format!(
                "drop: >{}% below the median of the previous {} runs",
                data.tolerance_pct,
                super::DROP_WINDOW
            ))
            .legend(|(x, y)| Cross::new((x + 9, y), 6, RED.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(font(14))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()
        .map_err(txt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_ticks_land_on_8_bytes_and_stay_few() {
        let t = size_ticks(3.0, 33.0);
        assert_eq!(t.first(), Some(&3.0));
        assert_eq!(t.last(), Some(&33.0));
        assert!(t.len() <= 12, "{t:?}");
        let labels: Vec<String> = t.iter().map(|x| human_size(x.exp2() as u64)).collect();
        assert!(labels.contains(&"8 B".to_string()) && labels.contains(&"8 GiB".to_string()));
        // A narrow range labels every power.
        assert_eq!(size_ticks(20.0, 24.0), vec![20.0, 21.0, 22.0, 23.0, 24.0]);
        // A range inside one power still gets two key points.
        assert_eq!(size_ticks(3.2, 3.8), vec![3.2, 3.8]);
    }

    #[test]
    fn labels_thin_out_on_big_maps() {
        assert_eq!(label_step(8, 240, 16), 1);
        assert_eq!(label_step(500, heat_grid_px(500), 16), 8);
        assert_eq!(label_step(0, 240, 16), 1);
    }

    #[test]
    fn heat_colors_go_from_red_to_green() {
        let red = heat_color(0.4);
        let green = heat_color(1.3);
        assert!(red.0 > red.1, "{red:?}");
        assert!(green.1 > green.0, "{green:?}");
        assert_eq!(heat_color(f64::NAN), heat_color(0.5));
    }

    #[test]
    fn reference_keeps_two_digits_below_one_gbps() {
        assert_eq!(reference_number(41.83), "41.8");
        assert_eq!(reference_number(0.8512), "0.85");
        assert_eq!(reference_number(0.0243), "0.024");
    }

    #[test]
    fn ranges_are_never_empty() {
        assert_eq!(sane_range(5.0, 5.0, 1.0), (4.0, 6.0));
        assert_eq!(sane_range(f64::NAN, 5.0, 1.0), (0.0, 1.0));
        assert_eq!(sane_range(6.0, 5.0, 1.0), (0.0, 1.0));
    }
}
