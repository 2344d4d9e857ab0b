//! Axes: explicit ranges and ticks (linear, from zero, and log with 1-2-5 steps), so the output
//! depends on the data only, never on plotters' own tick choice.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;

/// The coordinate type of every axis: a linear `f64` range with explicit tick positions.
pub(super) type Axis = AxisSpec;

/// One axis: a linear `f64` range with explicit bold (labelled) and light grid positions. On a
/// log axis every coordinate (range, ticks, drawn values) is `log10(value)`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AxisSpec {
    pub(super) lo: f64,
    pub(super) hi: f64,
    pub(super) ticks: Vec<f64>,
    pub(super) light: Vec<f64>,
    pub(super) log: bool,
}

impl AxisSpec {
    pub(super) fn coord(&self) -> Axis {
        self.clone()
    }

    /// The drawing coordinate of a data value (positive on a log axis).
    pub(super) fn to_coord(&self, value: f64) -> f64 {
        if self.log { value.log10() } else { value }
    }

    /// The tick label of a drawing coordinate.
    pub(super) fn label(&self, coord: f64) -> String {
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
pub(super) fn fmt_num(v: f64) -> String {
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
pub(super) fn linear_axis(lo: f64, hi: f64) -> AxisSpec {
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
pub(super) fn linear_axis_from_zero(max: f64) -> AxisSpec {
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
pub(super) fn log_axis(min: f64, max: f64, floor: f64) -> AxisSpec {
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
