//! The latency CDF figure: one line per recorded histogram, in milliseconds on a log x axis
//! (0 µs drawn at 1 µs), with the legend in a panel right of the plot.

use super::{
    AxisSpec, Figure, LINE_FIGURE_SIZE, SeriesStyle, draw_note, draw_styled_line, legend_width,
    linear_axis, log_axis, no_data_lines, series_style, styled_chart, thin, titled,
    with_legend_panel,
};

use hdrhistogram::Histogram;
use plotters::coord::Shift;
use plotters::prelude::*;

pub(super) struct CdfLine {
    pub(super) label: String,
    pub(super) count: u64,
    /// (latency in ms, cumulative fraction), increasing in both.
    pub(super) points: Vec<(f64, f64)>,
}

pub(super) struct CdfFigure {
    pub(super) title: String,
    pub(super) lines: Vec<CdfLine>,
}

/// A latency in µs as ms, at least 1 µs so that it has a logarithm.
fn us_to_ms_positive(us: u64) -> f64 {
    us.max(1) as f64 / 1000.0
}

/// (latency in ms, fraction of samples at or below it) of every recorded bucket, preceded by
/// (smallest latency, 0). Empty for an empty histogram.
pub(super) fn cdf_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
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
pub(super) fn line_figure_size(legend: &[(String, SeriesStyle)]) -> (u32, u32) {
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
