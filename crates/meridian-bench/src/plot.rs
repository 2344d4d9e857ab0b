//! Plots drawn by the tool itself, as PNG and SVG (spec `experiments.md`): latency CDFs
//! ([`latency_cdf`]), box plots of percentile vectors in facets ([`box_plots`], the layout of
//! the geo study's `plot-boxplots.R`) and throughput over time ([`throughput_over_time`]).
//!
//! Every function writes `<base>.png` and `<base>.svg` (the suffix is appended, so a base
//! `out/run.1` gives `out/run.1.png`), creates `base`'s parent directory if missing, and
//! returns the two paths written.
//!
//! Guarantees:
//! - **Pure Rust, no system fonts.** Text is rendered with an embedded font (DejaVu Sans,
//!   `assets/DejaVuSans.ttf`, Bitstream Vera / Arev license next to it), registered once with
//!   plotters' `ab_glyph` backend under the family `sans-serif`. The SVG keeps its text as
//!   `<text font-family="sans-serif">` elements, so a viewer uses its own sans-serif font.
//! - **Deterministic.** The same input gives byte-identical files: no timestamps, no
//!   randomness, a fixed colour palette and explicitly computed axis ticks.
//! - **All or nothing per call.** Both images are drawn in memory first; files are only
//!   written once both drawings succeeded, so a refused input leaves no file behind.
//! - **No panics on bad input.** Empty inputs and series without samples give a figure with a
//!   "no data" note (and the series' labels); latencies of 0 µs are drawn at 1 µs on log
//!   scales; malformed percentile vectors are refused with [`BenchError::Plot`]. Drawing and
//!   file errors are mapped to [`BenchError::Plot`] and [`BenchError::Io`].
//! - Series and boxes take their colours from a fixed 10-colour palette (Tableau 10), in
//!   order. Lines past the 10th keep the colours but are dashed (11th to 20th), then dotted
//!   (21st to 30th), so up to 30 lines are told apart ([`series_style`]); boxes, one colour
//!   per label, repeat colours after 10.
//! - Line figures (CDF, throughput) draw their legend in a panel right of the plot, never
//!   over a curve: the figure is widened to hold it.
//! - Throughput over time draws only each series' measured interval
//!   ([`ThroughputSeries::measured`]): the warm-up is a shaded band, not a line at 0 ops/s.
//! - Latencies are given in microseconds (as recorded by [`crate::stats`]) and drawn in
//!   milliseconds.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hdrhistogram::Histogram;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, register_font};

use crate::BenchError;

/// The font family every text element uses; the embedded font is registered under it.
const FONT_FAMILY: &str = "sans-serif";
/// DejaVu Sans 2.37 (see `assets/DejaVuSans-LICENSE.txt`).
static FONT_BYTES: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
/// The outcome of the one font registration.
static FONT_REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();

/// Size of a CDF or throughput figure, in pixels (PNG) and user units (SVG).
const LINE_FIGURE_SIZE: (u32, u32) = (1000, 600);
/// Height of a figure's title band.
const TITLE_HEIGHT: u32 = 50;
/// Height of one row of box-plot facets.
const FACET_ROW_HEIGHT: u32 = 550;

/// Series colours (Tableau 10), used in order and then repeated.
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4E, 0x79, 0xA7),
    RGBColor(0xF2, 0x8E, 0x2B),
    RGBColor(0xE1, 0x57, 0x59),
    RGBColor(0x76, 0xB7, 0xB2),
    RGBColor(0x59, 0xA1, 0x4F),
    RGBColor(0xED, 0xC9, 0x48),
    RGBColor(0xB0, 0x7A, 0xA1),
    RGBColor(0xFF, 0x9D, 0xA7),
    RGBColor(0x9C, 0x75, 0x5F),
    RGBColor(0xBA, 0xB0, 0xAC),
];
const GRID_BOLD: RGBColor = RGBColor(215, 215, 215);
const GRID_LIGHT: RGBColor = RGBColor(238, 238, 238);
const NOTE_GREY: RGBColor = RGBColor(110, 110, 110);

/// One line of a latency CDF: a label and its HDR histogram of latencies in microseconds.
#[derive(Debug, Clone)]
pub struct CdfSeries<'a> {
    /// The legend entry (followed by the sample count in the figure).
    pub label: String,
    /// Latencies in microseconds; an empty histogram is listed as "no data".
    pub histogram: &'a Histogram<u64>,
}

/// One box of a box plot, built from a percentile vector like the geo study's
/// `plot-boxplots.R`: whiskers at p1 and p99, box from p25 to p75, a line at the median
/// (p50), all in microseconds.
///
/// `percentiles_us` holds p1..p99 (99 entries, index `i` = p(i+1)), as in
/// [`crate::stats::Summary::percentiles_us`], non-decreasing. An **empty** vector means the
/// box has no samples (drawn as a "no data" note in its slot); any other length is refused.
/// Note that a [`crate::stats::Summary`] without samples has 99 zeros, which would be drawn
/// as a box at 0 ms: pass an empty vector for such a scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxSpec {
    /// The box's x-axis label (`ind1`, `lt_qqer`, ...).
    pub label: String,
    /// p1..p99 in microseconds (99 entries), or empty for "no data".
    pub percentiles_us: Vec<u64>,
}

/// One facet (sub-plot) of a box-plot figure, e.g. "read · local".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxFacet {
    /// The facet's caption.
    pub title: String,
    /// Its boxes, drawn left to right in this order.
    pub boxes: Vec<BoxSpec>,
}

/// One throughput time series: ops completed per 1 s bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputSeries {
    /// The legend entry.
    pub label: String,
    /// Operations completed in each 1 s bucket since the run start (bucket `i` covers
    /// `[i s, (i+1) s)`), as in [`crate::stats::Report::throughput_per_s`].
    pub per_second: Vec<u64>,
    /// The measured interval `[from, to)` in seconds since the run start (after the warm-up,
    /// until the run's end), or `None` when every bucket is measured. Buckets outside it are
    /// not drawn; a bucket it cuts is drawn over its measured part, at its count divided by
    /// that part's length (not at all when the part is under a quarter second).
    pub measured: Option<(f64, f64)>,
}

/// Writes `<base>.png` and `<base>.svg`: the latency CDF of every series (x: latency in ms,
/// log scale; y: cumulative fraction 0..1), one colour per series, with a legend.
/// Returns the two paths written.
///
/// Each series is drawn through the points (highest equivalent value of each recorded HDR
/// bucket, fraction of samples at or below it), starting at (its smallest value, 0); its legend
/// entry is `label (n=count)`, or `label (no data)` for an empty histogram. With no series or
/// only empty ones, the figure holds a "no data" note listing the labels.
pub fn latency_cdf(
    base: &Path,
    title: &str,
    series: &[CdfSeries<'_>],
) -> Result<Vec<PathBuf>, BenchError> {
    let lines = series
        .iter()
        .map(|s| CdfLine {
            label: s.label.clone(),
            count: s.histogram.len(),
            points: cdf_points(s.histogram),
        })
        .collect();
    write_figure(
        base,
        &CdfFigure {
            title: title.to_string(),
            lines,
        },
    )
}

/// Writes `<base>.png` and `<base>.svg`: the facets side by side (a grid: at most 2 or 3 per row),
/// each with its boxes along x (labels such as ind1, ind2, lt_qqer, lt_rec) and latency in ms on y
/// (linear scale by default; `log_y` for a log scale since local and remote latencies differ by 100x).
///
/// One or two facets make one row, four make a 2×2 grid, otherwise three per row; the figure is
/// 1000 px wide (1260 px with three columns) and 50 px + 550 px per row high. Each facet has its
/// own y range (from 0 on a linear scale). A box keeps its colour across facets (colours are
/// given per label, in order of first appearance). Whiskers are p1 and p99, the box p25..p75,
/// the line the median. A [`BoxSpec`] whose `percentiles_us` is neither empty nor 99
/// non-decreasing values is refused with [`BenchError::Plot`] before anything is written.
pub fn box_plots(
    base: &Path,
    title: &str,
    facets: &[BoxFacet],
    log_y: bool,
) -> Result<Vec<PathBuf>, BenchError> {
    let mut labels: Vec<&str> = Vec::new();
    let mut prepared = Vec::with_capacity(facets.len());
    for facet in facets {
        let mut boxes = Vec::with_capacity(facet.boxes.len());
        for spec in &facet.boxes {
            let colour_index = match labels.iter().position(|l| *l == spec.label) {
                Some(i) => i,
                None => {
                    labels.push(&spec.label);
                    labels.len() - 1
                }
            };
            boxes.push(PreparedBox {
                label: spec.label.clone(),
                colour: PALETTE[colour_index % PALETTE.len()],
                five: five_numbers(&facet.title, spec)?,
            });
        }
        prepared.push(PreparedFacet {
            title: facet.title.clone(),
            boxes,
        });
    }
    write_figure(
        base,
        &BoxFigure {
            title: title.to_string(),
            facets: prepared,
            log_y,
        },
    )
}

/// Writes `<base>.png` and `<base>.svg`: throughput over time (x: seconds since the run start, y: ops/s), one line per series.
///
/// Each series is drawn as a staircase: bucket `i` is a horizontal segment from `i` s to
/// `i+1` s at its count, within the series' measured interval; the time before every series'
/// interval starts (the warm-up) is shaded and labelled. An empty series is listed as
/// `label (no data)`; with no series or only empty ones, the figure holds a "no data" note
/// listing the labels.
pub fn throughput_over_time(
    base: &Path,
    title: &str,
    series: &[ThroughputSeries],
) -> Result<Vec<PathBuf>, BenchError> {
    write_figure(
        base,
        &ThroughputFigure {
            title: title.to_string(),
            series: series.to_vec(),
        },
    )
}

/// One line of an [`xy_lines`] figure: a label and its (x, y) points, drawn in order.
#[derive(Debug, Clone, PartialEq)]
pub struct XySeries {
    /// The legend entry.
    pub label: String,
    /// The points (x, y); on a log y axis, points with y <= 0 are skipped. Non-finite values
    /// are skipped.
    pub points: Vec<(f64, f64)>,
}

/// The axes and decorations of an [`xy_lines`] figure.
#[derive(Debug, Clone, PartialEq)]
pub struct XyAxes {
    /// The figure's title.
    pub title: String,
    /// The x axis' description.
    pub x_desc: String,
    /// The y axis' description.
    pub y_desc: String,
    /// A log10 y axis (1-2-5 ticks) instead of a linear one from 0.
    pub log_y: bool,
    /// x positions of dashed vertical marker lines (phase changes, ...).
    pub markers: Vec<f64>,
}

/// Writes `<base>.png` and `<base>.svg`: one line per series through its points (x linear
/// from the smallest to the largest x; y linear from 0 or log10), with optional dashed grey
/// vertical markers and a legend. With no drawable point, the figure holds a "no data"
/// note listing the labels. Returns the two paths written.
pub fn xy_lines(
    base: &Path,
    axes: &XyAxes,
    series: &[XySeries],
) -> Result<Vec<PathBuf>, BenchError> {
    let series = series
        .iter()
        .map(|s| XySeries {
            label: s.label.clone(),
            points: s
                .points
                .iter()
                .copied()
                .filter(|&(x, y)| x.is_finite() && y.is_finite() && (!axes.log_y || y > 0.0))
                .collect(),
        })
        .collect();
    write_figure(
        base,
        &XyFigure {
            axes: axes.clone(),
            series,
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Rendering: one figure, two backends.

/// A figure that can be drawn on any plotters backend.
trait Figure {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    /// Draws the whole figure on `root` (which is `size()` large).
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// `<base>.<ext>`: the suffix is appended, never substituted for an existing extension.
fn with_suffix(base: &Path, ext: &str) -> PathBuf {
    let mut name = OsString::from(base.as_os_str());
    name.push(".");
    name.push(ext);
    PathBuf::from(name)
}

/// Registers the embedded font with plotters, once per process.
fn ensure_font() -> Result<(), BenchError> {
    FONT_REGISTERED
        .get_or_init(|| {
            register_font(FONT_FAMILY, FontStyle::Normal, FONT_BYTES)
                .map_err(|_| "the embedded font DejaVuSans.ttf could not be parsed".to_string())
        })
        .clone()
        .map_err(|reason| BenchError::Plot { reason })
}

fn plot_error(what: &Path, reason: impl std::fmt::Display) -> BenchError {
    BenchError::Plot {
        reason: format!("{}: {reason}", what.display()),
    }
}

fn io_error(path: &Path, reason: impl std::fmt::Display) -> BenchError {
    BenchError::Io {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Draws `fig` into an RGB pixel buffer (3 bytes per pixel, rows top to bottom).
fn render_rgb(fig: &impl Figure, what: &Path) -> Result<Vec<u8>, BenchError> {
    ensure_font()?;
    let (w, h) = fig.size();
    let mut pixels = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (w, h)).into_drawing_area();
        fig.draw(&root).map_err(|e| plot_error(what, e))?;
        root.present().map_err(|e| plot_error(what, e))?;
    }
    Ok(pixels)
}

/// Draws `fig` as an SVG document.
fn render_svg(fig: &impl Figure, what: &Path) -> Result<String, BenchError> {
    ensure_font()?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, fig.size()).into_drawing_area();
        fig.draw(&root).map_err(|e| plot_error(what, e))?;
        root.present().map_err(|e| plot_error(what, e))?;
    }
    Ok(svg)
}

/// Draws `fig` twice in memory, then writes `<base>.png` and `<base>.svg`.
fn write_figure(base: &Path, fig: &impl Figure) -> Result<Vec<PathBuf>, BenchError> {
    if base.file_name().is_none() {
        return Err(io_error(
            base,
            "not a file path: give the plot's base name, such as `out/latency-cdf`",
        ));
    }
    let png_path = with_suffix(base, "png");
    let svg_path = with_suffix(base, "svg");
    let pixels = render_rgb(fig, &png_path)?;
    let svg = render_svg(fig, &svg_path)?;

    if let Some(parent) = base.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
    }
    {
        let size = fig.size();
        let mut png = BitMapBackend::new(&png_path, size);
        png.blit_bitmap((0, 0), size, &pixels)
            .map_err(|e| plot_error(&png_path, e))?;
        png.present().map_err(|e| io_error(&png_path, e))?;
    }
    std::fs::write(&svg_path, svg).map_err(|e| io_error(&svg_path, e))?;
    Ok(vec![png_path, svg_path])
}

/// Fills `root` white and draws `title` at its top; returns the area below the title.
fn titled<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
) -> Result<DrawingArea<DB, Shift>, String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (title_area, rest) = root.split_vertically(TITLE_HEIGHT);
    if !title.is_empty() {
        let (w, h) = title_area.dim_in_pixel();
        let style = TextStyle::from((FONT_FAMILY, 26).into_font())
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Center));
        title_area
            .draw(&Text::new(
                title.to_string(),
                (w as i32 / 2, h as i32 / 2 + 4),
                style,
            ))
            .map_err(|e| e.to_string())?;
    }
    Ok(rest)
}

/// Draws `lines` centred in `area`, one below the other, in grey.
fn draw_note<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lines: &[String],
) -> Result<(), String> {
    let (w, h) = area.dim_in_pixel();
    let style = TextStyle::from((FONT_FAMILY, 22).into_font())
        .color(&NOTE_GREY)
        .pos(Pos::new(HPos::Center, VPos::Center));
    let first = h as i32 / 2 - (lines.len() as i32 - 1) * 15;
    for (i, line) in lines.iter().enumerate() {
        area.draw(&Text::new(
            line.clone(),
            (w as i32 / 2, first + i as i32 * 30),
            style.clone(),
        ))
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The "no data" note, with the labels of the series that had none.
fn no_data_lines<'a>(labels: impl Iterator<Item = &'a str>) -> Vec<String> {
    let labels: Vec<&str> = labels.collect();
    let mut lines = vec!["no data".to_string()];
    if !labels.is_empty() {
        lines.push(format!("series without samples: {}", labels.join(", ")));
    }
    lines
}

// ---------------------------------------------------------------------------------------------
// Axes: explicit ranges and ticks, so the output depends on the data only.

/// The coordinate type of every axis: a linear `f64` range with explicit tick positions.
type Axis = AxisSpec;

/// One axis: a linear `f64` range with explicit bold (labelled) and light grid positions. On a
/// log axis every coordinate (range, ticks, drawn values) is `log10(value)`.
#[derive(Debug, Clone, PartialEq)]
struct AxisSpec {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    light: Vec<f64>,
    log: bool,
}

impl AxisSpec {
    fn coord(&self) -> Axis {
        self.clone()
    }

    /// The drawing coordinate of a data value (positive on a log axis).
    fn to_coord(&self, value: f64) -> f64 {
        if self.log { value.log10() } else { value }
    }

    /// The tick label of a drawing coordinate.
    fn label(&self, coord: f64) -> String {
        if self.log {
            fmt_num(10f64.powf(coord))
        } else {
            fmt_num(coord)
        }
    }
}

impl Ranged for AxisSpec {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        RangedCoordf64::from(self.lo..self.hi).map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// `v` with three significant digits at most and no trailing zeros.
fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "?".to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let decimals = (2 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" { "0".to_string() } else { s }
}

/// A 1-2-5 step giving about `target` intervals over `span` (> 0).
fn nice_step(span: f64, target: f64) -> f64 {
    let raw = span / target;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// A linear axis over `[lo, hi]` (widened to one unit if empty or inverted).
fn linear_axis(lo: f64, hi: f64) -> AxisSpec {
    let (lo, hi) = if lo.is_finite() && hi.is_finite() && hi > lo {
        (lo, hi)
    } else if lo.is_finite() {
        (lo, lo + 1.0)
    } else {
        (0.0, 1.0)
    };
    let step = nice_step(hi - lo, 8.0);
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    let ticks = (first..=last).map(|k| k as f64 * step).collect();
    AxisSpec {
        lo,
        hi,
        ticks,
        light: Vec::new(),
        log: false,
    }
}

/// A linear axis from 0 to a round value a little above `max`.
fn linear_axis_from_zero(max: f64) -> AxisSpec {
    let top = if max.is_finite() && max > 0.0 {
        max * 1.08
    } else {
        1.0
    };
    let step = nice_step(top, 8.0);
    linear_axis(0.0, (top / step).ceil() * step)
}

const ONE_TWO_FIVE: [f64; 3] = [1.0, 2.0, 5.0];

/// The largest 1-2-5 value (1, 2, 5 × 10^k) at or below `v` (> 0).
fn floor_125(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    let m = v / mag * (1.0 + 1e-9);
    let f = ONE_TWO_FIVE.iter().rev().find(|&&c| c <= m).copied();
    f.unwrap_or(1.0) * mag
}

/// The smallest 1-2-5 value at or above `v` (> 0).
fn ceil_125(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    let m = v / mag * (1.0 - 1e-9);
    let c = ONE_TWO_FIVE.iter().find(|&&c| c >= m).copied();
    c.unwrap_or(10.0) * mag
}

/// A log axis covering `[min, max]` (both clamped to at least `floor`), with 1-2-5 ticks
/// (powers of ten over whole decades if that would be more than 12 ticks) and light lines at 1..9 × 10^k.
fn log_axis(min: f64, max: f64, floor: f64) -> AxisSpec {
    let clean = |v: f64| if v.is_finite() { v.max(floor) } else { floor };
    let (min, max) = (clean(min), clean(max.max(min)));
    let mut lo = floor_125(min);
    let mut hi = ceil_125(max);
    if hi / lo < 1.5 {
        lo = floor_125(lo * 0.99);
        hi = ceil_125(hi * 1.01);
    }
    let k_lo = lo.log10().floor() as i32;
    let k_hi = hi.log10().ceil() as i32;
    let in_range = |v: f64, lo: f64, hi: f64| v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9);
    let decades = || (k_lo..=k_hi).map(|k| 10f64.powi(k));
    let mut ticks: Vec<f64> = decades()
        .flat_map(|d| ONE_TWO_FIVE.iter().map(move |m| m * d))
        .filter(|&v| in_range(v, lo, hi))
        .collect();
    if ticks.len() > 12 {
        // Powers of ten only, over whole decades.
        lo = 10f64.powi(k_lo);
        hi = 10f64.powi(k_hi);
        ticks = decades().collect();
    }
    let light = decades()
        .flat_map(|d| (1..10).map(move |m| f64::from(m) * d))
        .filter(|&v| in_range(v, lo, hi))
        .map(f64::log10)
        .collect();
    AxisSpec {
        lo: lo.log10(),
        hi: hi.log10(),
        ticks: ticks.into_iter().map(f64::log10).collect(),
        light,
        log: true,
    }
}

/// Builds a chart with the common style (margins, grid, fonts, tick labels) on `area`.
fn styled_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    x: &AxisSpec,
    y: &AxisSpec,
    x_desc: &str,
    y_desc: &str,
) -> Result<ChartContext<'a, DB, Cartesian2d<Axis, Axis>>, String> {
    let mut chart = ChartBuilder::on(area)
        .margin(15)
        .x_label_area_size(55)
        .y_label_area_size(75)
        .build_cartesian_2d(x.coord(), y.coord())
        .map_err(|e| e.to_string())?;
    draw_mesh(
        &mut chart,
        &|v: &f64| x.label(*v),
        &|v: &f64| y.label(*v),
        Some(x_desc),
        y_desc,
    )?;
    Ok(chart)
}

/// Draws the grid, axes and tick labels in the common style; `x_desc: None` is a categorical
/// x axis (no vertical grid lines, no description).
fn draw_mesh<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<Axis, Axis>>,
    x_fmt: &dyn Fn(&f64) -> String,
    y_fmt: &dyn Fn(&f64) -> String,
    x_desc: Option<&str>,
    y_desc: &str,
) -> Result<(), String> {
    let mut mesh = chart.configure_mesh();
    match x_desc {
        Some(desc) => mesh.x_desc(desc),
        None => mesh.disable_x_mesh(),
    };
    mesh.y_desc(y_desc)
        .x_label_formatter(x_fmt)
        .y_label_formatter(y_fmt)
        .bold_line_style(GRID_BOLD.stroke_width(1))
        .light_line_style(GRID_LIGHT.stroke_width(1))
        .axis_style(BLACK.stroke_width(1))
        .label_style((FONT_FAMILY, 15).into_font())
        .axis_desc_style((FONT_FAMILY, 17).into_font())
        .draw()
        .map_err(|e| e.to_string())
}

/// How a line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dash {
    Solid,
    Dashed,
    Dotted,
}

/// The colour and dash of one line of a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SeriesStyle {
    colour: RGBColor,
    dash: Dash,
}

/// The style of the `i`-th line of a figure: the palette's colours in order, solid for the
/// first 10 lines, dashed for the next 10, dotted for the 10 after (then again).
fn series_style(i: usize) -> SeriesStyle {
    SeriesStyle {
        colour: PALETTE[i % PALETTE.len()],
        dash: match (i / PALETTE.len()) % 3 {
            0 => Dash::Solid,
            1 => Dash::Dashed,
            _ => Dash::Dotted,
        },
    }
}

/// Draws `points` (backend coordinates) on `area` in `style`, `width` pixels wide.
fn draw_styled_path<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    points: Vec<(i32, i32)>,
    style: SeriesStyle,
    width: u32,
) -> Result<(), String> {
    let stroke = style.colour.stroke_width(width);
    match style.dash {
        Dash::Solid => area.draw(&PathElement::new(points, stroke)),
        Dash::Dashed => area.draw(&DashedPathElement::new(points, 10, 6, stroke)),
        Dash::Dotted => area.draw(&DashedPathElement::new(points, 2, 5, stroke)),
    }
    .map_err(|e| e.to_string())
}

/// Draws one line of a chart in `style`.
fn draw_styled_line<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<Axis, Axis>>,
    points: Vec<(f64, f64)>,
    style: SeriesStyle,
) -> Result<(), String> {
    let stroke = style.colour.stroke_width(2);
    match style.dash {
        Dash::Solid => chart
            .draw_series(LineSeries::new(points, stroke))
            .map(|_| ()),
        Dash::Dashed => chart
            .draw_series(DashedLineSeries::new(points, 10, 6, stroke))
            .map(|_| ()),
        Dash::Dotted => chart
            .draw_series(DashedLineSeries::new(points, 2, 5, stroke))
            .map(|_| ()),
    }
    .map_err(|e| e.to_string())
}

/// Width of the legend panel right of a line figure's plot, from its longest label.
fn legend_width<'a>(labels: impl Iterator<Item = &'a str>) -> u32 {
    let chars = labels.map(|l| l.chars().count()).max().unwrap_or(0);
    let chars = u32::try_from(chars).unwrap_or(u32::MAX);
    chars.saturating_mul(9).saturating_add(75).clamp(180, 520)
}

/// Splits a line figure's area into the plot and, when there are `entries`, the legend
/// panel at its right ([`legend_width`] wide), drawn there: a sample of each line's style
/// and its label, one per row, top down.
fn with_legend_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, SeriesStyle)],
) -> Result<DrawingArea<DB, Shift>, String> {
    if entries.is_empty() {
        return Ok(area.clone());
    }
    let (w, h) = area.dim_in_pixel();
    let panel_w = legend_width(entries.iter().map(|(l, _)| l.as_str()));
    let (plot, panel) = area.split_horizontally(w.saturating_sub(panel_w));
    // The rows share the panel's height; fewer than 30 rows keep the usual 24 px and 15 px text.
    let (top, bottom) = (15, i64::from(h) - 70);
    let n = i64::try_from(entries.len()).unwrap_or(i64::MAX);
    let row = ((bottom - top) / n.max(1)).clamp(8, 24);
    let font = (row - 6).clamp(8, 15);
    let height = row * n + 12;
    panel
        .draw(&Rectangle::new(
            [
                (0, top as i32),
                (panel_w as i32 - 15, (top + height).min(i64::from(h)) as i32),
            ],
            RGBColor(170, 170, 170).stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
    let text = TextStyle::from((FONT_FAMILY, font as i32).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (k, (label, style)) in entries.iter().enumerate() {
        let y = (top + 6 + row * k as i64 + row / 2) as i32;
        draw_styled_path(&panel, vec![(10, y), (44, y)], *style, 3)?;
        panel
            .draw(&Text::new(label.clone(), (52, y), text.clone()))
            .map_err(|e| e.to_string())?;
    }
    Ok(plot)
}

/// Keeps the first and last point and every point that moved at least `dx` or `dy` from the
/// last one kept (the CDF is monotone, so this is visually lossless at plot resolution).
fn thin(points: &[(f64, f64)], dx: f64, dy: f64) -> Vec<(f64, f64)> {
    let mut kept: Vec<(f64, f64)> = Vec::with_capacity(points.len().min(4096));
    for (i, &p) in points.iter().enumerate() {
        let keep = match kept.last() {
            None => true,
            Some(&(x, y)) => {
                i + 1 == points.len() || (p.0 - x).abs() >= dx || (p.1 - y).abs() >= dy
            }
        };
        if keep {
            kept.push(p);
        }
    }
    kept
}

// ---------------------------------------------------------------------------------------------
// Latency CDF.

struct CdfLine {
    label: String,
    count: u64,
    /// (latency in ms, cumulative fraction), increasing in both.
    points: Vec<(f64, f64)>,
}

struct CdfFigure {
    title: String,
    lines: Vec<CdfLine>,
}

/// A latency in µs as ms, at least 1 µs so that it has a logarithm.
fn us_to_ms_positive(us: u64) -> f64 {
    us.max(1) as f64 / 1000.0
}

/// (latency in ms, fraction of samples at or below it) of every recorded bucket, preceded by
/// (smallest latency, 0). Empty for an empty histogram.
fn cdf_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let total = h.len();
    if total == 0 {
        return Vec::new();
    }
    let mut points = Vec::new();
    let mut cumulative = 0u64;
    for v in h.iter_recorded() {
        let x = us_to_ms_positive(v.value_iterated_to());
        if points.is_empty() {
            points.push((x, 0.0));
        }
        cumulative = cumulative.saturating_add(v.count_since_last_iteration());
        points.push((x, (cumulative as f64 / total as f64).min(1.0)));
    }
    points
}

impl CdfFigure {
    /// The legend: every line's label and style, or nothing when no line has data.
    fn legend(&self) -> Vec<(String, SeriesStyle)> {
        if self.lines.iter().all(|l| l.points.is_empty()) {
            return Vec::new();
        }
        self.lines
            .iter()
            .enumerate()
            .map(|(i, line)| {
                let label = if line.count == 0 {
                    format!("{} (no data)", line.label)
                } else {
                    format!("{} (n={})", line.label, line.count)
                };
                (label, series_style(i))
            })
            .collect()
    }
}

/// A line figure's size: the plot, widened by the legend panel when there is one.
fn line_figure_size(legend: &[(String, SeriesStyle)]) -> (u32, u32) {
    let (w, h) = LINE_FIGURE_SIZE;
    if legend.is_empty() {
        (w, h)
    } else {
        (w + legend_width(legend.iter().map(|(l, _)| l.as_str())), h)
    }
}

impl Figure for CdfFigure {
    fn size(&self) -> (u32, u32) {
        line_figure_size(&self.legend())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let area = titled(root, &self.title)?;
        let with_data: Vec<&CdfLine> = self.lines.iter().filter(|l| !l.points.is_empty()).collect();
        if with_data.is_empty() {
            return draw_note(
                &area,
                &no_data_lines(self.lines.iter().map(|l| l.label.as_str())),
            );
        }
        let legend = self.legend();
        let area = with_legend_panel(&area, &legend)?;
        let min = with_data
            .iter()
            .map(|l| l.points[0].0)
            .fold(f64::INFINITY, f64::min);
        let max = with_data
            .iter()
            .filter_map(|l| l.points.last().map(|p| p.0))
            .fold(0.0, f64::max);
        let x = log_axis(min, max, 0.001);
        let y = linear_axis(0.0, 1.0);
        let y = AxisSpec { hi: 1.02, ..y };
        let mut chart = styled_chart(
            &area,
            &x,
            &y,
            "latency (ms, log scale)",
            "cumulative fraction of operations",
        )?;
        let dx = (x.hi - x.lo) / 2000.0;
        for (line, (_, style)) in self.lines.iter().zip(&legend) {
            let points: Vec<(f64, f64)> = line
                .points
                .iter()
                .map(|&(ms, f)| (x.to_coord(ms), f))
                .collect();
            draw_styled_line(&mut chart, thin(&points, dx, 0.001), *style)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Box plots.

/// p1, p25, p50, p75, p99 in ms.
type FiveNumbers = [f64; 5];

struct PreparedBox {
    label: String,
    colour: RGBColor,
    five: Option<FiveNumbers>,
}

struct PreparedFacet {
    title: String,
    boxes: Vec<PreparedBox>,
}

struct BoxFigure {
    title: String,
    facets: Vec<PreparedFacet>,
    log_y: bool,
}

/// The five numbers of `spec`, `None` for "no data", or why its percentiles are refused.
fn five_numbers(facet: &str, spec: &BoxSpec) -> Result<Option<FiveNumbers>, BenchError> {
    let p = &spec.percentiles_us;
    if p.is_empty() {
        return Ok(None);
    }
    if p.len() != 99 {
        return Err(BenchError::Plot {
            reason: format!(
                "box `{}` of facet `{facet}`: percentiles_us has {} entries, expected 99 \
                 (p1..p99) or none (no data)",
                spec.label,
                p.len()
            ),
        });
    }
    if let Some(i) = p.windows(2).position(|w| w[0] > w[1]) {
        return Err(BenchError::Plot {
            reason: format!(
                "box `{}` of facet `{facet}`: percentiles_us must be non-decreasing, but \
                 p{} = {} µs > p{} = {} µs",
                spec.label,
                i + 1,
                p[i],
                i + 2,
                p[i + 1]
            ),
        });
    }
    let ms = |i: usize| p[i] as f64 / 1000.0;
    Ok(Some([ms(0), ms(24), ms(49), ms(74), ms(98)]))
}

/// Columns of the facet grid for `n` facets.
fn grid_columns(n: usize) -> usize {
    match n {
        0 | 1 => 1,
        2 | 4 => 2,
        _ => 3,
    }
}

impl Figure for BoxFigure {
    fn size(&self) -> (u32, u32) {
        let n = self.facets.len();
        if n == 0 {
            return LINE_FIGURE_SIZE;
        }
        let cols = grid_columns(n);
        let rows = n.div_ceil(cols) as u32;
        let width = if cols == 3 { 1260 } else { 1000 };
        (width, TITLE_HEIGHT + rows * FACET_ROW_HEIGHT)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let area = titled(root, &self.title)?;
        if self.facets.is_empty() {
            return draw_note(&area, &no_data_lines(std::iter::empty()));
        }
        let cols = grid_columns(self.facets.len());
        let rows = self.facets.len().div_ceil(cols);
        let cells = area.split_evenly((rows, cols));
        for (facet, cell) in self.facets.iter().zip(cells.iter()) {
            self.draw_facet(facet, cell)?;
        }
        Ok(())
    }
}

impl BoxFigure {
    fn draw_facet<DB: DrawingBackend>(
        &self,
        facet: &PreparedFacet,
        cell: &DrawingArea<DB, Shift>,
    ) -> Result<(), String> {
        let data: Vec<&FiveNumbers> = facet.boxes.iter().filter_map(|b| b.five.as_ref()).collect();
        if data.is_empty() {
            let (caption, rest) = cell.split_vertically(40);
            let (w, _) = caption.dim_in_pixel();
            caption
                .draw(&Text::new(
                    facet.title.clone(),
                    (w as i32 / 2, 25),
                    TextStyle::from((FONT_FAMILY, 20).into_font())
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                ))
                .map_err(|e| e.to_string())?;
            return draw_note(
                &rest,
                &no_data_lines(facet.boxes.iter().map(|b| b.label.as_str())),
            );
        }
        let max = data.iter().map(|f| f[4]).fold(0.0, f64::max);
        let y = if self.log_y {
            let min = data.iter().map(|f| f[0]).fold(f64::INFINITY, f64::min);
            log_axis(min, max, 0.001)
        } else {
            linear_axis_from_zero(max)
        };
        let n = facet.boxes.len();
        let x = AxisSpec {
            ticks: (0..n).map(|i| i as f64 + 0.5).collect(),
            ..linear_axis(0.0, n as f64)
        };
        let labels: Vec<&str> = facet.boxes.iter().map(|b| b.label.as_str()).collect();
        let x_labeled = LabeledAxis {
            axis: &x,
            labels: &labels,
        };
        let y_desc = if self.log_y {
            "latency (ms, log scale)"
        } else {
            "latency (ms)"
        };
        let chart = styled_chart_labeled(cell, &facet.title, &x_labeled, &y, y_desc)?;
        let plot = chart.plotting_area();
        // On a log axis, values below the axis floor (0 µs) are drawn at the floor.
        let yc = |v: f64| {
            if self.log_y {
                y.to_coord(v.max(0.001))
            } else {
                v
            }
        };
        let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        for (i, b) in facet.boxes.iter().enumerate() {
            let c = i as f64 + 0.5;
            let Some(f) = b.five else {
                let mid = (y.lo + y.hi) / 2.0;
                plot.draw(&Text::new(
                    "no data",
                    (c, mid),
                    TextStyle::from((FONT_FAMILY, 16).into_font())
                        .color(&NOTE_GREY)
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                ))
                .map_err(err)?;
                continue;
            };
            let [p1, p25, p50, p75, p99] = f.map(yc);
            let (half, cap) = (0.3, 0.15);
            let line = BLACK.stroke_width(1);
            plot.draw(&PathElement::new(vec![(c, p1), (c, p25)], line))
                .map_err(err)?;
            plot.draw(&PathElement::new(vec![(c, p75), (c, p99)], line))
                .map_err(err)?;
            plot.draw(&PathElement::new(vec![(c - cap, p1), (c + cap, p1)], line))
                .map_err(err)?;
            plot.draw(&PathElement::new(
                vec![(c - cap, p99), (c + cap, p99)],
                line,
            ))
            .map_err(err)?;
            plot.draw(&Rectangle::new(
                [(c - half, p25), (c + half, p75)],
                b.colour.mix(0.45).filled(),
            ))
            .map_err(err)?;
            plot.draw(&Rectangle::new([(c - half, p25), (c + half, p75)], line))
                .map_err(err)?;
            plot.draw(&PathElement::new(
                vec![(c - half, p50), (c + half, p50)],
                BLACK.stroke_width(3),
            ))
            .map_err(err)?;
        }
        Ok(())
    }
}

/// A categorical x axis: tick `i + 0.5` is labelled `labels[i]`.
struct LabeledAxis<'a> {
    axis: &'a AxisSpec,
    labels: &'a [&'a str],
}

impl LabeledAxis<'_> {
    fn label(&self, coord: f64) -> String {
        let i = (coord - 0.5).round();
        if i >= 0.0 && (i as usize) < self.labels.len() {
            self.labels[i as usize].to_string()
        } else {
            String::new()
        }
    }
}

/// [`styled_chart`] for a box-plot facet: categorical x axis, no vertical grid lines.
fn styled_chart_labeled<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x: &LabeledAxis<'_>,
    y: &AxisSpec,
    y_desc: &str,
) -> Result<ChartContext<'a, DB, Cartesian2d<Axis, Axis>>, String> {
    let mut chart = ChartBuilder::on(area)
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .caption(caption, (FONT_FAMILY, 20).into_font())
        .build_cartesian_2d(x.axis.coord(), y.coord())
        .map_err(|e| e.to_string())?;
    draw_mesh(
        &mut chart,
        &|v: &f64| x.label(*v),
        &|v: &f64| y.label(*v),
        None,
        y_desc,
    )?;
    Ok(chart)
}

// ---------------------------------------------------------------------------------------------
// Throughput over time.

struct ThroughputFigure {
    title: String,
    series: Vec<ThroughputSeries>,
}

/// The shortest part of a 1 s bucket drawn as a rate: a sliver's rate is mostly noise.
const MIN_PARTIAL_BUCKET_S: f64 = 0.25;

/// The staircase of one throughput series: (x, ops/s) corner points of every bucket inside
/// its measured interval, a cut bucket scaled to its measured part.
fn throughput_points(s: &ThroughputSeries) -> Vec<(f64, f64)> {
    let (from, to) = s.measured.unwrap_or((0.0, f64::INFINITY));
    let mut points = Vec::with_capacity(2 * s.per_second.len());
    for (t, &ops) in s.per_second.iter().enumerate() {
        let (a, b) = (t as f64, t as f64 + 1.0);
        let (a, b) = (a.max(from), b.min(to));
        if b - a < MIN_PARTIAL_BUCKET_S {
            continue;
        }
        let rate = ops as f64 / (b - a);
        points.push((a, rate));
        points.push((b, rate));
    }
    points
}

impl ThroughputFigure {
    /// The legend: every series' label and style, or nothing when no series has buckets.
    fn legend(&self) -> Vec<(String, SeriesStyle)> {
        if self.series.iter().all(|s| s.per_second.is_empty()) {
            return Vec::new();
        }
        self.series
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let label = if s.per_second.is_empty() {
                    format!("{} (no data)", s.label)
                } else {
                    s.label.clone()
                };
                (label, series_style(i))
            })
            .collect()
    }
}

impl Figure for ThroughputFigure {
    fn size(&self) -> (u32, u32) {
        line_figure_size(&self.legend())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let area = titled(root, &self.title)?;
        let seconds = self
            .series
            .iter()
            .map(|s| s.per_second.len())
            .max()
            .unwrap_or(0);
        if seconds == 0 {
            return draw_note(
                &area,
                &no_data_lines(self.series.iter().map(|s| s.label.as_str())),
            );
        }
        let legend = self.legend();
        let area = with_legend_panel(&area, &legend)?;
        let lines: Vec<Vec<(f64, f64)>> = self.series.iter().map(throughput_points).collect();
        let max = lines.iter().flatten().map(|&(_, y)| y).fold(0.0, f64::max);
        // Up to the last bucket drawn (a run's drain may leave empty buckets after its end).
        let last = lines.iter().flatten().map(|&(x, _)| x).fold(0.0, f64::max);
        let x = linear_axis(0.0, if last > 0.0 { last } else { seconds as f64 });
        let y = linear_axis_from_zero(max);
        let mut chart = styled_chart(
            &area,
            &x,
            &y,
            "time since run start (s)",
            "throughput (ops/s)",
        )?;
        // The warm-up: before every series' measured interval starts.
        let warmup = self
            .series
            .iter()
            .filter(|s| !s.per_second.is_empty())
            .map(|s| s.measured.map_or(0.0, |(from, _)| from))
            .fold(f64::INFINITY, f64::min);
        if warmup.is_finite() && warmup > 0.0 {
            let end = warmup.min(x.hi);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x.lo, y.lo), (end, y.hi)],
                    RGBColor(120, 120, 120).mix(0.12).filled(),
                )))
                .map_err(|e| e.to_string())?;
            let (left, _) = chart.backend_coord(&(x.lo, y.hi));
            let (right, _) = chart.backend_coord(&(end, y.hi));
            // Labelled when the band is wide enough for the word.
            if right - left >= 60 {
                let text = TextStyle::from((FONT_FAMILY, 15).into_font())
                    .color(&NOTE_GREY)
                    .pos(Pos::new(HPos::Center, VPos::Top));
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at(((x.lo + end) / 2.0, y.hi))
                            + Text::new("warm-up", (0, 8), text),
                    ))
                    .map_err(|e| e.to_string())?;
            }
        }
        for (points, (_, style)) in lines.into_iter().zip(&legend) {
            draw_styled_line(&mut chart, points, *style)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Generic x-y lines.

struct XyFigure {
    axes: XyAxes,
    series: Vec<XySeries>,
}

impl XyFigure {
    /// The legend: every series' label and style, or nothing when nothing is drawn.
    fn legend(&self) -> Vec<(String, SeriesStyle)> {
        if self.series.iter().all(|s| s.points.is_empty()) {
            return Vec::new();
        }
        self.series
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let label = if s.points.is_empty() {
                    format!("{} (no data)", s.label)
                } else {
                    s.label.clone()
                };
                (label, series_style(i))
            })
            .collect()
    }
}

impl Figure for XyFigure {
    fn size(&self) -> (u32, u32) {
        line_figure_size(&self.legend())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let area = titled(root, &self.axes.title)?;
        let all = || self.series.iter().flat_map(|s| s.points.iter().copied());
        if all().next().is_none() {
            return draw_note(
                &area,
                &no_data_lines(self.series.iter().map(|s| s.label.as_str())),
            );
        }
        let (x_lo, x_hi) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (x, _)| {
            (lo.min(x), hi.max(x))
        });
        let (y_lo, y_hi) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, y)| {
            (lo.min(y), hi.max(y))
        });
        let legend = self.legend();
        let area = with_legend_panel(&area, &legend)?;
        let x = linear_axis(x_lo, x_hi);
        let y = if self.axes.log_y {
            log_axis(y_lo, y_hi, 1e-9)
        } else {
            linear_axis_from_zero(y_hi)
        };
        let mut chart = styled_chart(&area, &x, &y, &self.axes.x_desc, &self.axes.y_desc)?;
        for &m in &self.axes.markers {
            if !(m.is_finite() && m >= x.lo && m <= x.hi) {
                continue;
            }
            // Dashes: short segments along the marker.
            let steps = 60;
            let span = y.hi - y.lo;
            let dashes = (0..steps).step_by(2).map(|i| {
                let a = y.lo + span * f64::from(i) / f64::from(steps);
                let b = y.lo + span * f64::from(i + 1) / f64::from(steps);
                PathElement::new(vec![(m, a), (m, b)], NOTE_GREY.stroke_width(1))
            });
            chart.draw_series(dashes).map_err(|e| e.to_string())?;
        }
        for (s, (_, style)) in self.series.iter().zip(&legend) {
            let points: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|&(px, py)| (px, y.to_coord(py)))
                .collect();
            draw_styled_line(&mut chart, points, *style)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{MAX_LATENCY_US, SIGNIFICANT_DIGITS};

    const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

    fn histogram(samples_us: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, MAX_LATENCY_US, SIGNIFICANT_DIGITS).unwrap();
        for &s in samples_us {
            h.saturating_record(s);
        }
        h
    }

    /// Width and height from the PNG's IHDR chunk (which must come first).
    fn png_dimensions(bytes: &[u8]) -> (u32, u32) {
        assert!(bytes.len() > 33, "PNG too short: {} bytes", bytes.len());
        assert_eq!(bytes[..8], PNG_SIGNATURE, "not a PNG signature");
        assert_eq!(&bytes[12..16], b"IHDR", "first chunk is not IHDR");
        let be =
            |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        (be(16), be(20))
    }

    /// Checks both files of `paths` (as returned for `base`) and returns the SVG text.
    fn check_outputs(base: &Path, paths: &[PathBuf], size: (u32, u32), texts: &[&str]) -> String {
        assert_eq!(paths, [with_suffix(base, "png"), with_suffix(base, "svg")]);
        let png = std::fs::read(&paths[0]).unwrap();
        assert_eq!(png_dimensions(&png), size);
        let svg = std::fs::read_to_string(&paths[1]).unwrap();
        assert!(svg.contains("<svg"), "no <svg element");
        assert!(svg.trim_end().ends_with("</svg>"), "SVG not closed");
        assert!(
            svg.contains(&format!("width=\"{}\" height=\"{}\"", size.0, size.1)),
            "SVG size is not {size:?}"
        );
        for text in texts {
            assert!(svg.contains(text), "SVG lacks the text {text:?}");
        }
        svg
    }

    /// Number of distinct colours drawn by `fig` in its pixel buffer, and the number of dark
    /// (text or axis) pixels in the title band.
    fn pixel_stats(fig: &impl Figure) -> (usize, usize) {
        let (w, _) = fig.size();
        let pixels = render_rgb(fig, Path::new("test")).unwrap();
        let mut colours: Vec<[u8; 3]> = pixels.chunks(3).map(|c| [c[0], c[1], c[2]]).collect();
        let title_dark = colours[..(w * TITLE_HEIGHT) as usize]
            .iter()
            .filter(|c| c.iter().all(|&v| v < 100))
            .count();
        colours.sort_unstable();
        colours.dedup();
        (colours.len(), title_dark)
    }

    /// The size of a line figure whose legend lists `labels`.
    fn with_legend(labels: &[&str]) -> (u32, u32) {
        (1000 + legend_width(labels.iter().copied()), 600)
    }

    /// The x of the SVG text element holding exactly `text`.
    fn svg_text_x(svg: &str, text: &str) -> i32 {
        let at = svg
            .find(&format!(">\n{text}\n<"))
            .unwrap_or_else(|| panic!("no text {text:?}"));
        let open = svg[..at].rfind("<text").unwrap();
        let x = &svg[open..at];
        let x = &x[x.find(" x=\"").unwrap() + 4..];
        x[..x.find('"').unwrap()].parse().unwrap()
    }

    fn percentiles(scale_us: u64) -> Vec<u64> {
        (1..=99u64).map(|p| scale_us + p * scale_us / 50).collect()
    }

    #[test]
    fn latency_cdf_writes_png_and_svg_with_title_and_labels() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("nested/dir/cdf");
        let local = histogram(&(1..=1000).map(|i| 200 + i).collect::<Vec<_>>());
        let remote = histogram(&(1..=1000).map(|i| 80_000 + 37 * i).collect::<Vec<_>>());
        let series = [
            CdfSeries {
                label: "local".into(),
                histogram: &local,
            },
            CdfSeries {
                label: "remote".into(),
                histogram: &remote,
            },
        ];
        let paths = latency_cdf(&base, "read latency CDF", &series).unwrap();
        let svg = check_outputs(
            &base,
            &paths,
            with_legend(&["remote (n=1000)"]),
            &[
                "read latency CDF",
                "local (n=1000)",
                "remote (n=1000)",
                "latency (ms, log scale)",
            ],
        );
        // One line per series, in the palette's first two colours.
        assert!(svg.contains("<polyline"), "no line drawn");
        assert!(
            svg.contains("#4E79A7") && svg.contains("#F28E2B"),
            "series colours missing"
        );
        assert!(!svg.contains("no data"));
        // Ticks of the log axis cover 0.2 ms .. 120 ms.
        for tick in [">\n0.2\n<", ">\n1\n<", ">\n100\n<"] {
            assert!(svg.contains(tick), "x tick {tick:?} missing");
        }
    }

    #[test]
    fn png_text_is_rendered_with_the_embedded_font() {
        let h = histogram(&[1_000, 2_000, 3_000]);
        let fig = CdfFigure {
            title: "title text".into(),
            lines: vec![CdfLine {
                label: "a".into(),
                count: h.len(),
                points: cdf_points(&h),
            }],
        };
        let (colours, title_dark) = pixel_stats(&fig);
        assert!(
            title_dark > 100,
            "title band has only {title_dark} dark pixels"
        );
        // White, black, greys of the grid and anti-aliased text, the series colour.
        assert!(colours > 10, "only {colours} distinct colours drawn");
    }

    #[test]
    fn output_is_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        let h = histogram(&[5, 50, 500, 5_000, 50_000]);
        let series = [CdfSeries {
            label: "s".into(),
            histogram: &h,
        }];
        let a = latency_cdf(&dir.path().join("a"), "t", &series).unwrap();
        let b = latency_cdf(&dir.path().join("b"), "t", &series).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(
                std::fs::read(x).unwrap(),
                std::fs::read(y).unwrap(),
                "{x:?} != {y:?}"
            );
        }
    }

    #[test]
    fn latency_cdf_without_data_draws_a_no_data_note() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("empty");
        let paths = latency_cdf(&base, "nothing here", &[]).unwrap();
        check_outputs(&base, &paths, (1000, 600), &["nothing here", "no data"]);

        let empty = histogram(&[]);
        let series = [CdfSeries {
            label: "idle-client".into(),
            histogram: &empty,
        }];
        let paths = latency_cdf(&base, "still nothing", &series).unwrap();
        check_outputs(
            &base,
            &paths,
            (1000, 600),
            &["still nothing", "no data", "idle-client"],
        );
    }

    #[test]
    fn latency_cdf_single_sample_zero_and_empty_series_work() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("one");
        let one = histogram(&[1_500]);
        let zero = histogram(&[0]);
        let empty = histogram(&[]);
        let huge = histogram(&[u64::MAX]);
        let series = [
            CdfSeries {
                label: "one".into(),
                histogram: &one,
            },
            CdfSeries {
                label: "zero".into(),
                histogram: &zero,
            },
            CdfSeries {
                label: "empty".into(),
                histogram: &empty,
            },
            CdfSeries {
                label: "saturated".into(),
                histogram: &huge,
            },
        ];
        let paths = latency_cdf(&base, "edge cases", &series).unwrap();
        check_outputs(
            &base,
            &paths,
            with_legend(&["saturated (n=1)"]),
            &[
                "one (n=1)",
                "zero (n=1)",
                "empty (no data)",
                "saturated (n=1)",
            ],
        );
    }

    #[test]
    fn box_plots_draw_a_grid_of_facets() {
        let dir = tempfile::tempdir().unwrap();
        let labels = ["ind1", "ind2", "lt_qqer", "lt_rec"];
        let facet = |title: &str, scale: u64| BoxFacet {
            title: title.into(),
            boxes: labels
                .iter()
                .enumerate()
                .map(|(i, l)| BoxSpec {
                    label: l.to_string(),
                    percentiles_us: percentiles(scale * (i as u64 + 1)),
                })
                .collect(),
        };
        let facets = [
            facet("read · local", 300),
            facet("read · remote", 40_000),
            facet("update · local", 500),
            facet("update · remote", 90_000),
        ];
        for log_y in [false, true] {
            let base = dir.path().join(format!("box-{log_y}"));
            let paths = box_plots(&base, "latency by strategy", &facets, log_y).unwrap();
            let mut texts = vec!["latency by strategy", "read · local", "update · remote"];
            texts.extend(labels);
            let svg = check_outputs(&base, &paths, (1000, 50 + 2 * 550), &texts);
            // 4 boxes × 4 facets, each a filled rectangle in its label's colour.
            assert_eq!(svg.matches("fill=\"#4E79A7\"").count(), 4, "ind1 boxes");
            assert_eq!(
                svg.matches("fill=\"#59A14F\"").count(),
                0,
                "unexpected fifth colour"
            );
            assert!(!svg.contains("no data"));
        }
        // Three facets: one row of three, wider.
        let base = dir.path().join("box3");
        let paths = box_plots(&base, "three", &facets[..3], true).unwrap();
        check_outputs(&base, &paths, (1260, 600), &["three"]);
        // One facet: one row.
        let base = dir.path().join("box1");
        let paths = box_plots(&base, "one", &facets[..1], false).unwrap();
        check_outputs(&base, &paths, (1000, 600), &["one", "ind1"]);
    }

    #[test]
    fn box_plots_without_data_draw_no_data_notes() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("none");
        let paths = box_plots(&base, "no facets", &[], true).unwrap();
        check_outputs(&base, &paths, (1000, 600), &["no facets", "no data"]);

        let facets = [
            BoxFacet {
                title: "empty facet".into(),
                boxes: vec![],
            },
            BoxFacet {
                title: "partly empty".into(),
                boxes: vec![
                    BoxSpec {
                        label: "ind1".into(),
                        percentiles_us: vec![],
                    },
                    BoxSpec {
                        label: "ind2".into(),
                        percentiles_us: percentiles(1_000),
                    },
                ],
            },
            BoxFacet {
                title: "only empty boxes".into(),
                boxes: vec![BoxSpec {
                    label: "lt_rec".into(),
                    percentiles_us: vec![],
                }],
            },
        ];
        for log_y in [false, true] {
            let paths = box_plots(&base, "some empty", &facets, log_y).unwrap();
            let svg = check_outputs(
                &base,
                &paths,
                (1260, 600),
                &[
                    "empty facet",
                    "partly empty",
                    "only empty boxes",
                    "ind1",
                    "ind2",
                    "lt_rec",
                ],
            );
            assert_eq!(
                svg.matches("no data").count(),
                3,
                "one note per empty facet or box"
            );
        }
    }

    #[test]
    fn box_plots_accept_degenerate_percentiles() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("flat");
        let facets = [BoxFacet {
            title: "flat".into(),
            boxes: vec![
                BoxSpec {
                    label: "zeros".into(),
                    percentiles_us: vec![0; 99],
                },
                BoxSpec {
                    label: "single".into(),
                    percentiles_us: vec![1_500; 99],
                },
            ],
        }];
        for log_y in [false, true] {
            let paths = box_plots(&base, "flat boxes", &facets, log_y).unwrap();
            check_outputs(&base, &paths, (1000, 600), &["zeros", "single"]);
        }
    }

    #[test]
    fn box_plots_refuse_malformed_percentiles_and_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("bad");
        let short = [BoxFacet {
            title: "f".into(),
            boxes: vec![BoxSpec {
                label: "ind1".into(),
                percentiles_us: vec![1, 2, 3],
            }],
        }];
        let err = box_plots(&base, "t", &short, false).unwrap_err();
        let BenchError::Plot { reason } = err else {
            panic!("not a Plot error: {err:?}")
        };
        assert!(
            reason.contains("ind1") && reason.contains("3 entries"),
            "{reason}"
        );

        let mut decreasing = percentiles(100);
        decreasing[50] = 0;
        let unsorted = [BoxFacet {
            title: "f".into(),
            boxes: vec![BoxSpec {
                label: "ind2".into(),
                percentiles_us: decreasing,
            }],
        }];
        let err = box_plots(&base, "t", &unsorted, true).unwrap_err();
        let BenchError::Plot { reason } = err else {
            panic!("not a Plot error: {err:?}")
        };
        assert!(
            reason.contains("non-decreasing") && reason.contains("p51"),
            "{reason}"
        );

        assert!(!with_suffix(&base, "png").exists() && !with_suffix(&base, "svg").exists());
    }

    #[test]
    fn throughput_over_time_writes_png_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("tput");
        let series = [
            ThroughputSeries {
                label: "ind1".into(),
                per_second: vec![0, 0, 900, 1_000, 1_050, 980, 1_010],
                measured: None,
            },
            ThroughputSeries {
                label: "lt_rec".into(),
                per_second: vec![0, 0, 400, 420],
                measured: None,
            },
        ];
        let paths = throughput_over_time(&base, "throughput", &series).unwrap();
        let svg = check_outputs(
            &base,
            &paths,
            with_legend(&["lt_rec"]),
            &[
                "throughput",
                "ind1",
                "lt_rec",
                "ops/s",
                "time since run start (s)",
            ],
        );
        assert!(svg.contains("#4E79A7") && svg.contains("#F28E2B"));
        // The y axis reaches a round value above the peak.
        assert!(svg.contains(">\n1200\n<"), "y tick 1200 missing");
    }

    #[test]
    fn throughput_edge_cases_work() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("tput-edge");
        let paths = throughput_over_time(&base, "no series", &[]).unwrap();
        check_outputs(&base, &paths, (1000, 600), &["no series", "no data"]);

        let empty = [ThroughputSeries {
            label: "idle".into(),
            per_second: vec![],
            measured: None,
        }];
        let paths = throughput_over_time(&base, "empty series", &empty).unwrap();
        check_outputs(&base, &paths, (1000, 600), &["no data", "idle"]);

        let series = [
            ThroughputSeries {
                label: "one bucket".into(),
                per_second: vec![7],
                measured: None,
            },
            ThroughputSeries {
                label: "zeros".into(),
                per_second: vec![0, 0, 0],
                measured: None,
            },
            ThroughputSeries {
                label: "idle".into(),
                per_second: vec![],
                measured: None,
            },
        ];
        let paths = throughput_over_time(&base, "edges", &series).unwrap();
        check_outputs(
            &base,
            &paths,
            with_legend(&["idle (no data)"]),
            &["one bucket", "zeros", "idle (no data)"],
        );

        let zeros = [ThroughputSeries {
            label: "all zero".into(),
            per_second: vec![0; 5],
            measured: None,
        }];
        let paths = throughput_over_time(&base, "zero", &zeros).unwrap();
        check_outputs(&base, &paths, with_legend(&["all zero"]), &["all zero"]);
    }

    /// The demo's CDF has 16 curves (4 modes × 2 ops × local/remote): every curve gets its
    /// own colour and dash, and the legend sits in its own panel, right of every curve.
    #[test]
    fn many_curves_stay_distinct_and_the_legend_hides_none() {
        let styles: Vec<SeriesStyle> = (0..30).map(series_style).collect();
        for (i, a) in styles.iter().enumerate() {
            for b in &styles[..i] {
                assert_ne!(a, b, "line {i} repeats a style");
            }
        }
        assert_eq!(styles[9].dash, Dash::Solid);
        assert_eq!(styles[10].dash, Dash::Dashed);
        assert_eq!(styles[20].dash, Dash::Dotted);

        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("cdf16");
        let hists: Vec<Histogram<u64>> = (0..16u64)
            .map(|i| {
                let scale = if i % 2 == 0 { 100 } else { 100_000 };
                histogram(&(1..=200).map(|k| scale + k * (i + 1)).collect::<Vec<_>>())
            })
            .collect();
        let labels: Vec<String> = (0..16).map(|i| format!("mode{} op {i}", i / 4)).collect();
        let series: Vec<CdfSeries<'_>> = labels
            .iter()
            .zip(&hists)
            .map(|(label, h)| CdfSeries {
                label: label.clone(),
                histogram: h,
            })
            .collect();
        let paths = latency_cdf(&base, "sixteen", &series).unwrap();
        let entries: Vec<String> = labels.iter().map(|l| format!("{l} (n=200)")).collect();
        let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
        let svg = check_outputs(&base, &paths, with_legend(&refs), &refs);
        // Every legend entry is right of the plot (which spans x < 1000).
        for entry in &refs {
            assert!(svg_text_x(&svg, entry) >= 1000, "{entry} over the plot");
        }
    }

    /// The warm-up is not a line at 0 ops/s: buckets before the measured interval are left
    /// out, a cut bucket is scaled to its measured part, and the band is shaded and named.
    #[test]
    fn throughput_leaves_the_warmup_out() {
        let s = ThroughputSeries {
            label: "ops/s".into(),
            per_second: vec![0, 0, 50, 100, 100, 30],
            measured: Some((2.5, 5.3)),
        };
        let want = [
            (2.5, 100.0),
            (3.0, 100.0),
            (3.0, 100.0),
            (4.0, 100.0),
            (4.0, 100.0),
            (5.0, 100.0),
            (5.0, 100.0),
            (5.3, 100.0),
        ];
        let got = throughput_points(&s);
        assert_eq!(got.len(), want.len(), "{got:?}");
        for ((x, y), (gx, gy)) in want.into_iter().zip(got) {
            assert!((x - gx).abs() < 1e-9 && (y - gy).abs() < 1e-6, "{gx},{gy}");
        }
        // A sliver after the warm-up is too short to be a rate.
        let sliver = ThroughputSeries {
            measured: Some((2.9, 6.0)),
            ..s.clone()
        };
        assert_eq!(throughput_points(&sliver)[0], (3.0, 100.0));

        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("tput-warm");
        let run = ThroughputSeries {
            label: "ops/s".into(),
            per_second: [vec![0; 5], vec![1_000; 10]].concat(),
            measured: Some((5.0, 15.0)),
        };
        let points = throughput_points(&run);
        assert!(
            points.iter().all(|&(x, y)| x >= 5.0 && y == 1_000.0),
            "{points:?}"
        );
        let paths = throughput_over_time(&base, "warm", &[run]).unwrap();
        check_outputs(&base, &paths, with_legend(&["ops/s"]), &["warm-up"]);
    }

    #[test]
    fn paths_append_the_suffix_and_bad_bases_are_refused() {
        assert_eq!(
            with_suffix(Path::new("out/run.1"), "png"),
            PathBuf::from("out/run.1.png")
        );
        let err = throughput_over_time(Path::new("/"), "t", &[]).unwrap_err();
        assert!(matches!(err, BenchError::Io { .. }), "{err:?}");

        // A base below a regular file: the directory cannot be created.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let err = throughput_over_time(&file.join("plot"), "t", &[]).unwrap_err();
        let BenchError::Io { path, .. } = err else {
            panic!("not an Io error: {err:?}")
        };
        assert_eq!(path, file.display().to_string());
    }

    #[test]
    fn axes_have_round_ticks() {
        assert_eq!(fmt_num(0.001), "0.001");
        assert_eq!(fmt_num(0.2 + 0.1), "0.3");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(150.0), "150");
        assert_eq!(fmt_num(3_600_000.0), "3600000");
        assert_eq!(fmt_num(0.0), "0");

        let log = log_axis(0.23, 87.0, 0.001);
        let labels: Vec<String> = log.ticks.iter().map(|&t| log.label(t)).collect();
        assert_eq!(
            labels,
            ["0.2", "0.5", "1", "2", "5", "10", "20", "50", "100"]
        );
        // A single value still spans a range, with at least two ticks.
        let single = log_axis(1.0, 1.0, 0.001);
        assert!(
            single.lo < 0.0 && single.hi > 0.0 && single.ticks.len() >= 2,
            "{single:?}"
        );
        // Wide ranges keep only powers of ten.
        let wide = log_axis(0.0, 3.6e6, 0.001);
        assert_eq!(wide.ticks.len(), 11, "{wide:?}");

        let lin = linear_axis_from_zero(1_050.0);
        let labels: Vec<String> = lin.ticks.iter().map(|&t| lin.label(t)).collect();
        assert_eq!(lin.hi, 1_200.0);
        assert_eq!(labels.first().map(String::as_str), Some("0"));
        assert_eq!(labels.last().map(String::as_str), Some("1200"));
    }

    #[test]
    fn xy_lines_draw_log_and_linear_axes_with_markers() {
        let dir = tempfile::tempdir().unwrap();
        let series = [
            XySeries {
                label: "fast".into(),
                points: vec![(0.0, 31.0), (1.0, 32.0), (2.0, 35.0)],
            },
            XySeries {
                label: "backlog".into(),
                points: vec![(0.0, 31.0), (1.0, 0.0), (2.0, 90_000.0), (3.0, f64::NAN)],
            },
        ];
        for log_y in [true, false] {
            let axes = XyAxes {
                title: "latency over time".into(),
                x_desc: "time (s)".into(),
                y_desc: "latency (ms)".into(),
                log_y,
                markers: vec![1.5, 99.0],
            };
            let base = dir.path().join(format!("xy-{log_y}"));
            let paths = xy_lines(&base, &axes, &series).unwrap();
            let svg = check_outputs(
                &base,
                &paths,
                with_legend(&["backlog"]),
                &["latency over time", "fast", "backlog", "time (s)"],
            );
            assert!(svg.contains("#4E79A7") && svg.contains("#F28E2B"));
            if log_y {
                assert!(svg.contains(">\n100000\n<"), "log tick 100000 missing");
            }
        }
        let empty = [XySeries {
            label: "idle".into(),
            points: vec![(0.0, 0.0)],
        }];
        let axes = XyAxes {
            title: "t".into(),
            x_desc: "x".into(),
            y_desc: "y".into(),
            log_y: true,
            markers: vec![],
        };
        let base = dir.path().join("xy-empty");
        let paths = xy_lines(&base, &axes, &empty).unwrap();
        check_outputs(&base, &paths, (1000, 600), &["no data", "idle"]);
    }
}
