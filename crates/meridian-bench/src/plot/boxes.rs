//! The box-plot figure: percentile vectors as five-number boxes, one facet per group laid out
//! in a grid (the geo study's `plot-boxplots.R`); malformed vectors are refused, not drawn.

use super::{
    Axis, AxisSpec, BoxSpec, FACET_ROW_HEIGHT, FONT_FAMILY, Figure, LINE_FIGURE_SIZE, NOTE_GREY,
    TITLE_HEIGHT, draw_mesh, draw_note, linear_axis, linear_axis_from_zero, log_axis,
    no_data_lines, titled,
};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::BenchError;

/// p1, p25, p50, p75, p99 in ms.
type FiveNumbers = [f64; 5];

pub(super) struct PreparedBox {
    pub(super) label: String,
    pub(super) colour: RGBColor,
    pub(super) five: Option<FiveNumbers>,
}

pub(super) struct PreparedFacet {
    pub(super) title: String,
    pub(super) boxes: Vec<PreparedBox>,
}

pub(super) struct BoxFigure {
    pub(super) title: String,
    pub(super) facets: Vec<PreparedFacet>,
    pub(super) log_y: bool,
}

/// The five numbers of `spec`, `None` for "no data", or why its percentiles are refused.
pub(super) fn five_numbers(facet: &str, spec: &BoxSpec) -> Result<Option<FiveNumbers>, BenchError> {
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
