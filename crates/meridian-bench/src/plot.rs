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

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hdrhistogram::Histogram;
use plotters::prelude::*;

use crate::BenchError;

mod axes;
mod boxes;
mod cdf;
mod render;
mod style;
mod throughput;
mod xy;

use axes::{Axis, AxisSpec, linear_axis, linear_axis_from_zero, log_axis};
use boxes::{BoxFigure, PreparedBox, PreparedFacet, five_numbers};
use cdf::{CdfFigure, CdfLine, cdf_points, line_figure_size};
use render::{Figure, draw_note, no_data_lines, titled, write_figure};
use style::{
    SeriesStyle, draw_mesh, draw_styled_line, legend_width, series_style, styled_chart, thin,
    with_legend_panel,
};
use throughput::ThroughputFigure;
use xy::XyFigure;

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

#[cfg(test)]
mod tests;
