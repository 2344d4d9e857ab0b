//! Generic x-y line figures with caller-chosen axes ([`XyAxes`](super::XyAxes)).

use super::{
    Figure, NOTE_GREY, SeriesStyle, XyAxes, XySeries, draw_note, draw_styled_line,
    line_figure_size, linear_axis, linear_axis_from_zero, log_axis, no_data_lines, series_style,
    styled_chart, titled, with_legend_panel,
};

use plotters::coord::Shift;
use plotters::prelude::*;

pub(super) struct XyFigure {
    pub(super) axes: XyAxes,
    pub(super) series: Vec<XySeries>,
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
