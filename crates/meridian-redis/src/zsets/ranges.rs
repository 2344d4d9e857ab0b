//! Score and lexicographic ranges as Redis 7.0 reads them (`zslParseRange`,
//! `zslParseLexRange`), and the selection of a range of a [`ZSet`] by rank, score or member
//! with REV and LIMIT, walked the way Redis walks its skiplist.

use super::encoding::{Member, Score, ZSet};
use crate::error::{CmdError, raw};
use bytes::Bytes;

/// Redis's error for a score bound that does not parse.
pub const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
/// Redis's error for a lex bound that does not parse.
pub const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";

/// A score interval: `min`/`max`, each inclusive or exclusive (`(`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoreRange {
    /// Lower bound.
    pub min: f64,
    /// Whether the lower bound is excluded.
    pub min_ex: bool,
    /// Upper bound.
    pub max: f64,
    /// Whether the upper bound is excluded.
    pub max_ex: bool,
}

impl ScoreRange {
    /// Whether `s` is at or above the lower bound.
    pub fn gte_min(&self, s: f64) -> bool {
        if self.min_ex {
            s > self.min
        } else {
            s >= self.min
        }
    }

    /// Whether `s` is at or below the upper bound.
    pub fn lte_max(&self, s: f64) -> bool {
        if self.max_ex {
            s < self.max
        } else {
            s <= self.max
        }
    }
}

/// C's `strtod` over a whole argument, as `zslParseRange` uses it: leading white space is
/// skipped, the rest must be a float (`inf`, `-inf`, `1e3`, `.5` ...), not NaN. An empty
/// argument is 0 (strtod converts nothing and stops at the terminator, which Redis accepts).
/// Hexadecimal floats (`0x1p3`), which strtod also reads, are refused.
fn strtod_whole(s: &[u8]) -> Option<f64> {
    if s.is_empty() {
        return Some(0.0);
    }
    let t = std::str::from_utf8(s).ok()?;
    let rest = t.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let v: f64 = rest.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

fn score_bound(a: &[u8]) -> Option<(f64, bool)> {
    match a.split_first() {
        Some((b'(', rest)) => strtod_whole(rest).map(|v| (v, true)),
        _ => strtod_whole(a).map(|v| (v, false)),
    }
}

/// Parses `min max` (`(` marks an exclusive bound); Redis's error otherwise.
pub fn parse_score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange, CmdError> {
    let ((min, min_ex), (max, max_ex)) = score_bound(min)
        .zip(score_bound(max))
        .ok_or_else(|| raw(NOT_FLOAT_RANGE))?;
    Ok(ScoreRange {
        min,
        min_ex,
        max,
        max_ex,
    })
}

/// One end of a lex range: `-` (below everything), `+` (above everything), `[m` or `(m`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LexBound {
    /// `-`
    NegInf,
    /// `+`
    PosInf,
    /// `[member`
    Incl(Bytes),
    /// `(member`
    Excl(Bytes),
}

/// A lexicographic interval of members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LexRange {
    /// Lower bound.
    pub min: LexBound,
    /// Upper bound.
    pub max: LexBound,
}

impl LexRange {
    /// Whether `m` is at or above the lower bound.
    pub fn gte_min(&self, m: &[u8]) -> bool {
        match &self.min {
            LexBound::NegInf => true,
            LexBound::PosInf => false,
            LexBound::Incl(b) => m >= &b[..],
            LexBound::Excl(b) => m > &b[..],
        }
    }

    /// Whether `m` is at or below the upper bound.
    pub fn lte_max(&self, m: &[u8]) -> bool {
        match &self.max {
            LexBound::NegInf => false,
            LexBound::PosInf => true,
            LexBound::Incl(b) => m <= &b[..],
            LexBound::Excl(b) => m < &b[..],
        }
    }
}

fn lex_bound(a: &[u8]) -> Option<LexBound> {
    match a {
        b"-" => Some(LexBound::NegInf),
        b"+" => Some(LexBound::PosInf),
        [b'(', rest @ ..] => Some(LexBound::Excl(Bytes::copy_from_slice(rest))),
        [b'[', rest @ ..] => Some(LexBound::Incl(Bytes::copy_from_slice(rest))),
        _ => None,
    }
}

/// Parses `min max` of a lex range; Redis's error otherwise.
pub fn parse_lex_range(min: &[u8], max: &[u8]) -> Result<LexRange, CmdError> {
    let (min, max) = lex_bound(min)
        .zip(lex_bound(max))
        .ok_or_else(|| raw(NOT_LEX_RANGE))?;
    Ok(LexRange { min, max })
}

/// What a range selects by.
#[derive(Clone, Debug, PartialEq)]
pub enum RangeBy {
    /// Ranks `start..=stop`, negative counting from the end (ZRANGE, ZREVRANGE).
    Rank(i64, i64),
    /// Scores (BYSCORE).
    Score(ScoreRange),
    /// Members (BYLEX).
    Lex(LexRange),
}

/// A whole range request: what, in which direction, and LIMIT (offset, count; a negative
/// count is no limit, a negative offset selects nothing, as in Redis).
#[derive(Clone, Debug, PartialEq)]
pub struct RangeSpec {
    /// The interval.
    pub by: RangeBy,
    /// Highest first (REV, ZREV*).
    pub rev: bool,
    /// LIMIT's offset (score and lex ranges only).
    pub offset: i64,
    /// LIMIT's count; negative: unlimited.
    pub limit: i64,
}

/// Whether an entry is past the far end of the range in the walk's direction.
fn in_far(by: &RangeBy, rev: bool, s: f64, m: &[u8]) -> bool {
    match (by, rev) {
        (RangeBy::Score(r), false) => r.lte_max(s),
        (RangeBy::Score(r), true) => r.gte_min(s),
        (RangeBy::Lex(r), false) => r.lte_max(m),
        (RangeBy::Lex(r), true) => r.gte_min(m),
        (RangeBy::Rank(..), _) => true,
    }
}

fn in_near(by: &RangeBy, rev: bool, s: f64, m: &[u8]) -> bool {
    match (by, rev) {
        (RangeBy::Score(r), false) => r.gte_min(s),
        (RangeBy::Score(r), true) => r.lte_max(s),
        (RangeBy::Lex(r), false) => r.gte_min(m),
        (RangeBy::Lex(r), true) => r.lte_max(m),
        (RangeBy::Rank(..), _) => true,
    }
}

/// Where a walk over `z` in `spec`'s direction may start without passing an entry inside the
/// near bound: the entries from there, in walk order. O(log n) to the start for a score range,
/// and for a lex range over a set whose scores are all equal (Redis's precondition for lex
/// ranges); otherwise from the end of the set.
fn walk<'z>(z: &'z ZSet, spec: &RangeSpec) -> Box<dyn Iterator<Item = (f64, &'z Member)> + 'z> {
    let all = || -> Box<dyn Iterator<Item = (f64, &'z Member)> + 'z> {
        if spec.rev {
            Box::new(z.iter().rev())
        } else {
            Box::new(z.iter())
        }
    };
    match (&spec.by, spec.rev) {
        // Every entry below `(min, "")` scores below `min`.
        (RangeBy::Score(r), false) => match Score::new(r.min) {
            Some(min) => Box::new(z.iter_from(min, b"", false)),
            None => all(),
        },
        // Every entry from `(next float above max, "")` on scores above `max` (`+inf`: none).
        (RangeBy::Score(r), true) => match Score::new(r.max.next_up()) {
            Some(above) if r.max != f64::INFINITY => {
                Box::new(z.iter_until(above, b"", false).rev())
            }
            _ => all(),
        },
        (RangeBy::Lex(r), rev) => {
            let Some((lo, hi)) = z.score_bounds() else {
                return all();
            };
            let Some(s) = Score::new(lo).filter(|_| Score::new(lo) == Score::new(hi)) else {
                return all();
            };
            // One score: the walk's order is the members' order.
            match (rev, if rev { &r.max } else { &r.min }) {
                (false, LexBound::Incl(b)) => Box::new(z.iter_from(s, b, false)),
                (false, LexBound::Excl(b)) => Box::new(z.iter_from(s, b, true)),
                (true, LexBound::Incl(b)) => Box::new(z.iter_until(s, b, true).rev()),
                (true, LexBound::Excl(b)) => Box::new(z.iter_until(s, b, false).rev()),
                _ => all(),
            }
        }
        (RangeBy::Rank(..), _) => all(),
    }
}

/// The entries `spec` selects, in reply order. As Redis walks: from the first entry inside
/// the near bound, skip `offset` entries, then take entries while inside the far bound, at
/// most `limit`. Every request-derived number is clamped, never trusted as a size.
pub fn select(z: &ZSet, spec: &RangeSpec) -> Vec<(f64, Member)> {
    let mut out = Vec::new();
    visit(z, spec, |s, m| out.push((s, m.clone())));
    out
}

/// How many entries `spec` selects (ZCOUNT, ZLEXCOUNT), without copying them.
pub fn count(z: &ZSet, spec: &RangeSpec) -> u64 {
    let mut n = 0u64;
    visit(z, spec, |_, _| n += 1);
    n
}

/// Calls `f` on each entry `spec` selects, in reply order (see [`select`]).
fn visit<'z>(z: &'z ZSet, spec: &RangeSpec, mut f: impl FnMut(f64, &'z Member)) {
    let len = z.len() as i64;
    if let RangeBy::Rank(start, stop) = spec.by {
        let start = if start < 0 {
            len.saturating_add(start)
        } else {
            start
        }
        .max(0);
        let stop = if stop < 0 {
            len.saturating_add(stop)
        } else {
            stop
        };
        if start > stop || start >= len {
            return;
        }
        let stop = stop.min(len - 1);
        let take = (stop - start + 1) as usize;
        // Ranks count in the walk's direction; walk from whichever end is nearer, so
        // ZRANGE -10 -1 skips no more than ZRANGE 0 9.
        if start <= len - 1 - stop {
            let it: Box<dyn Iterator<Item = (f64, &Member)>> = if spec.rev {
                Box::new(z.iter().rev())
            } else {
                Box::new(z.iter())
            };
            it.skip(start as usize)
                .take(take)
                .for_each(|(s, m)| f(s, m));
        } else {
            let it: Box<dyn Iterator<Item = (f64, &Member)>> = if spec.rev {
                Box::new(z.iter())
            } else {
                Box::new(z.iter().rev())
            };
            let mut picked: Vec<(f64, &Member)> =
                it.skip((len - 1 - stop) as usize).take(take).collect();
            picked.reverse();
            picked.into_iter().for_each(|(s, m)| f(s, m));
        }
        return;
    }
    if spec.offset < 0 {
        return;
    }
    let offset = usize::try_from(spec.offset).unwrap_or(usize::MAX);
    let limit = usize::try_from(spec.limit).unwrap_or(usize::MAX);
    let by = &spec.by;
    walk(z, spec)
        .skip_while(|(s, m)| !in_near(by, spec.rev, *s, m))
        .skip(offset)
        .take_while(|(s, m)| in_far(by, spec.rev, *s, m))
        .take(limit)
        .for_each(|(s, m)| f(s, m));
}
