//! The throughput-over-time figure: each series' measured interval as a line, its warm-up as a
//! shaded band (never a line at 0 ops/s).

use super::{
    FONT_FAMILY, Figure, NOTE_GREY, SeriesStyle, ThroughputSeries, draw_note, draw_styled_line,
    line_figure_size, linear_axis, linear_axis_from_zero, no_data_lines, series_style,
    styled_chart, titled, with_legend_panel,
};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub(super) struct ThroughputFigure {
    pub(super) title: String,
    pub(super) series: Vec<ThroughputSeries>,
}

/// The shortest part of a 1 s bucket drawn as a rate: a sliver's rate is mostly noise.
const MIN_PARTIAL_BUCKET_S: f64 = 0.25;

/// The staircase of one throughput series: (x, ops/s) corner points of every bucket inside
/// its measured interval, a cut bucket scaled to its measured part.
pub(super) fn throughput_points(s: &ThroughputSeries) -> Vec<(f64, f64)> {
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
