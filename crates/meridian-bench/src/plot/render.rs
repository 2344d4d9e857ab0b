//! Rendering: one figure, two backends. A [`Figure`] draws itself on any plotters backend;
//! it is drawn to an RGB buffer and to an SVG string in memory, and both files are written only
//! once both drawings succeeded, so a refused input leaves no file behind.

use super::{FONT_BYTES, FONT_FAMILY, FONT_REGISTERED, NOTE_GREY, TITLE_HEIGHT};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, register_font};

use crate::BenchError;

/// A figure that can be drawn on any plotters backend.
pub(super) trait Figure {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    /// Draws the whole figure on `root` (which is `size()` large).
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// `<base>.<ext>`: the suffix is appended, never substituted for an existing extension.
pub(super) fn with_suffix(base: &Path, ext: &str) -> PathBuf {
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
pub(super) fn render_rgb(fig: &impl Figure, what: &Path) -> Result<Vec<u8>, BenchError> {
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
pub(super) fn write_figure(base: &Path, fig: &impl Figure) -> Result<Vec<PathBuf>, BenchError> {
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
pub(super) fn titled<DB: DrawingBackend>(
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
pub(super) fn draw_note<DB: DrawingBackend>(
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
pub(super) fn no_data_lines<'a>(labels: impl Iterator<Item = &'a str>) -> Vec<String> {
    let labels: Vec<&str> = labels.collect();
    let mut lines = vec!["no data".to_string()];
    if !labels.is_empty() {
        lines.push(format!("series without samples: {}", labels.join(", ")));
    }
    lines
}
