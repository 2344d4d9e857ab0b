//! The common look of every chart: margins, grid and fonts, the series styles (10 palette
//! colours, then dashed, then dotted, so up to 30 lines are told apart), the legend panel right
//! of the plot, and thinning of dense lines before drawing.

use super::{Axis, AxisSpec, FONT_FAMILY, GRID_BOLD, GRID_LIGHT, PALETTE};

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Builds a chart with the common style (margins, grid, fonts, tick labels) on `area`.
pub(super) fn styled_chart<'a, DB: DrawingBackend>(
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
pub(super) fn draw_mesh<DB: DrawingBackend>(
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
pub(super) enum Dash {
    Solid,
    Dashed,
    Dotted,
}

/// The colour and dash of one line of a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SeriesStyle {
    colour: RGBColor,
    pub(super) dash: Dash,
}

/// The style of the `i`-th line of a figure: the palette's colours in order, solid for the
/// first 10 lines, dashed for the next 10, dotted for the 10 after (then again).
pub(super) fn series_style(i: usize) -> SeriesStyle {
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
pub(super) fn draw_styled_line<DB: DrawingBackend>(
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
pub(super) fn legend_width<'a>(labels: impl Iterator<Item = &'a str>) -> u32 {
    let chars = labels.map(|l| l.chars().count()).max().unwrap_or(0);
    let chars = u32::try_from(chars).unwrap_or(u32::MAX);
    chars.saturating_mul(9).saturating_add(75).clamp(180, 520)
}

/// Splits a line figure's area into the plot and, when there are `entries`, the legend
/// panel at its right ([`legend_width`] wide), drawn there: a sample of each line's style
/// and its label, one per row, top down.
pub(super) fn with_legend_panel<DB: DrawingBackend>(
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
pub(super) fn thin(points: &[(f64, f64)], dx: f64, dy: f64) -> Vec<(f64, f64)> {
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
