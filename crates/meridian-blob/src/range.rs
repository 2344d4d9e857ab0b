//! HTTP byte ranges (RFC 9110 §14, as S3 applies them) and the chunks a range touches.
//!
//! Only a **single** range is served (spec §5). A `Range` header that is not one well-formed
//! `bytes=` range — another unit, several ranges, a malformed or overflowing number,
//! `first > last` — is *ignored*, as RFC 9110 and S3 do: [`parse_range`] returns `None` and
//! the whole object is served with 200. A well-formed range that the object cannot satisfy
//! (it starts at or past the end, a zero-length suffix, any range of an empty object) is a
//! 416, which [`RangeSpec::resolve`] reports as [`Unsatisfiable`].
//!
//! [`chunk_span`] maps a resolved range onto a manifest's chunk offsets
//! ([`crate::Manifest::offsets`]) with two binary searches, and [`chunk_slice`] says which
//! bytes of each of those chunks to send. None of these functions panics, whatever the input.

use thiserror::Error;

/// One byte range as written in a `Range` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RangeSpec {
    /// `bytes=first-last`: both inclusive; `last` may lie past the end (it is clamped).
    FromTo(u64, u64),
    /// `bytes=first-`: from `first` to the end.
    From(u64),
    /// `bytes=-n`: the last `n` bytes (all of them when the object is shorter).
    Suffix(u64),
}

/// A range the object cannot satisfy: HTTP 416 with `Content-Range: bytes */size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("range not satisfiable: the object is {size} bytes long")]
pub struct Unsatisfiable {
    /// The object's length in bytes.
    pub size: u64,
}

impl Unsatisfiable {
    /// The `Content-Range` value a 416 carries: `bytes */size`.
    pub fn content_range(&self) -> String {
        format!("bytes */{}", self.size)
    }
}

/// Parses a `Range` header value. `None` when it is not exactly one well-formed `bytes=`
/// range, in which case the header is to be ignored and the whole object served.
///
/// The unit is case-insensitive; optional whitespace is accepted around `=`, `-` and the
/// value, and empty list elements (`bytes=0-9,`) are skipped as RFC 9110 §5.6.1 asks. Numbers
/// are ASCII digits only (no sign) and must fit a `u64`.
pub fn parse_range(header: &str) -> Option<RangeSpec> {
    let (unit, set) = header.split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let mut specs = set.split(',').map(str::trim).filter(|s| !s.is_empty());
    let spec = specs.next()?;
    if specs.next().is_some() {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    match (first.is_empty(), last.is_empty()) {
        (true, true) => None,
        (true, false) => Some(RangeSpec::Suffix(number(last)?)),
        (false, true) => Some(RangeSpec::From(number(first)?)),
        (false, false) => {
            let (a, b) = (number(first)?, number(last)?);
            (a <= b).then_some(RangeSpec::FromTo(a, b))
        }
    }
}

/// A run of ASCII digits as a `u64`; `None` for anything else or an overflow.
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl RangeSpec {
    /// The range's first and last byte (inclusive) in an object of `size` bytes, with `last`
    /// clamped to `size - 1`; [`Unsatisfiable`] (416) when the range starts at or past the
    /// end, for a zero-length suffix, and for any range of an empty object. A hand-built
    /// `FromTo(a, b)` with `a > b` (which [`parse_range`] never returns) is unsatisfiable too.
    pub fn resolve(self, size: u64) -> Result<(u64, u64), Unsatisfiable> {
        let unsat = Err(Unsatisfiable { size });
        if size == 0 {
            return unsat;
        }
        let end = size - 1;
        match self {
            RangeSpec::FromTo(a, b) if a <= b && a < size => Ok((a, b.min(end))),
            RangeSpec::From(a) if a < size => Ok((a, end)),
            RangeSpec::Suffix(n) if n > 0 => Ok((size.saturating_sub(n), end)),
            _ => unsat,
        }
    }
}

/// The `Content-Range` value of a 206: `bytes first-last/size`.
pub fn content_range(first: u64, last: u64, size: u64) -> String {
    format!("bytes {first}-{last}/{size}")
}

/// The chunks covering bytes `first..=last`, as an inclusive index range `(lo, hi)`.
///
/// `offsets` are a manifest's cumulative chunk starts ([`crate::Manifest::offsets`]: one
/// entry per chunk plus the size). For `first <= last < offsets.last()` with ascending
/// offsets the answer is exact: chunk `lo` holds `first`, chunk `hi` holds `last`, and
/// zero-length chunks at either edge are skipped. For any other input it does not panic but
/// returns indexes clamped to the chunks that exist (`(0, 0)` when there are none).
pub fn chunk_span(offsets: &[u64], first: u64, last: u64) -> (usize, usize) {
    let chunks = offsets.len().saturating_sub(1);
    let max = chunks.saturating_sub(1);
    // The chunk holding byte `b` is the last one starting at or before it.
    let holding = |b: u64| {
        offsets
            .partition_point(|&o| o <= b)
            .saturating_sub(1)
            .min(max)
    };
    let lo = holding(first);
    let hi = holding(last).max(lo);
    (lo, hi)
}

/// Which bytes of chunk `index` belong to the range `first..=last`, relative to the chunk's
/// start: a half-open `start..end`. `None` when the chunk does not exist or does not overlap
/// the range. Used to trim the first and last chunk of a [`chunk_span`].
pub fn chunk_slice(
    offsets: &[u64],
    index: usize,
    first: u64,
    last: u64,
) -> Option<std::ops::Range<u64>> {
    let start = *offsets.get(index)?;
    let end = *offsets.get(index.checked_add(1)?)?;
    let lo = first.max(start);
    let hi = last.saturating_add(1).min(end);
    (lo < hi).then(|| lo - start..hi - start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!(parse_range("bytes=0-499"), Some(RangeSpec::FromTo(0, 499)));
        assert_eq!(parse_range("bytes=500-"), Some(RangeSpec::From(500)));
        assert_eq!(parse_range("bytes=-500"), Some(RangeSpec::Suffix(500)));
        assert_eq!(parse_range("bytes=-0"), Some(RangeSpec::Suffix(0)));
        assert_eq!(parse_range("bytes=7-7"), Some(RangeSpec::FromTo(7, 7)));
        assert_eq!(
            parse_range("bytes=0-18446744073709551615"),
            Some(RangeSpec::FromTo(0, u64::MAX))
        );
    }

    #[test]
    fn accepts_whitespace_case_and_empty_elements() {
        assert_eq!(
            parse_range("  bytes = 1 - 2 "),
            Some(RangeSpec::FromTo(1, 2))
        );
        assert_eq!(parse_range("Bytes=3-"), Some(RangeSpec::From(3)));
        assert_eq!(parse_range("BYTES=\t-4"), Some(RangeSpec::Suffix(4)));
        assert_eq!(parse_range("bytes=0-9,"), Some(RangeSpec::FromTo(0, 9)));
        assert_eq!(parse_range("bytes=, 0-9 ,,"), Some(RangeSpec::FromTo(0, 9)));
    }

    #[test]
    fn ignores_what_is_not_one_well_formed_range() {
        for bad in [
            "",
            "bytes",
            "bytes=",
            "bytes=-",
            "bytes= , ",
            "bytes=5-3",
            "bytes=0-1,2-3",
            "bytes=0-1, -5",
            "items=0-1",
            "bytes=a-b",
            "bytes=+1-2",
            "bytes=1-+2",
            "bytes=-+2",
            "bytes=1--2",
            "bytes=1-2-3",
            "bytes=0x10-",
            "bytes=1 2-3",
            "bytes=18446744073709551616-",
            "bytes=-18446744073709551616",
            "bytes=0-18446744073709551616",
            "bytes=1-2=3",
            "=0-1",
            "bytes=١-٢",
        ] {
            assert_eq!(parse_range(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn resolves_and_clamps() {
        assert_eq!(RangeSpec::FromTo(0, 499).resolve(10_000), Ok((0, 499)));
        assert_eq!(RangeSpec::FromTo(5, 999).resolve(10), Ok((5, 9)));
        assert_eq!(RangeSpec::FromTo(9, u64::MAX).resolve(10), Ok((9, 9)));
        assert_eq!(RangeSpec::From(3).resolve(10), Ok((3, 9)));
        assert_eq!(RangeSpec::Suffix(3).resolve(10), Ok((7, 9)));
        assert_eq!(RangeSpec::Suffix(10).resolve(10), Ok((0, 9)));
        assert_eq!(RangeSpec::Suffix(u64::MAX).resolve(10), Ok((0, 9)));
        assert_eq!(RangeSpec::From(0).resolve(1), Ok((0, 0)));
        assert_eq!(
            RangeSpec::Suffix(1).resolve(u64::MAX),
            Ok((u64::MAX - 1, u64::MAX - 1))
        );
    }

    #[test]
    fn unsatisfiable_cases_are_416() {
        let u = Unsatisfiable { size: 10 };
        assert_eq!(RangeSpec::FromTo(10, 20).resolve(10), Err(u));
        assert_eq!(RangeSpec::From(10).resolve(10), Err(u));
        assert_eq!(RangeSpec::From(u64::MAX).resolve(10), Err(u));
        assert_eq!(RangeSpec::Suffix(0).resolve(10), Err(u));
        assert_eq!(RangeSpec::FromTo(5, 3).resolve(10), Err(u));
        let empty = Unsatisfiable { size: 0 };
        assert_eq!(RangeSpec::FromTo(0, 0).resolve(0), Err(empty));
        assert_eq!(RangeSpec::From(0).resolve(0), Err(empty));
        assert_eq!(RangeSpec::Suffix(5).resolve(0), Err(empty));
        assert_eq!(u.content_range(), "bytes */10");
        assert_eq!(
            u.to_string(),
            "range not satisfiable: the object is 10 bytes long"
        );
    }

    #[test]
    fn content_range_text() {
        assert_eq!(content_range(0, 499, 1234), "bytes 0-499/1234");
    }

    #[test]
    fn spans_on_a_fixed_layout() {
        // Chunks of 4, 4, 2 bytes.
        let offsets = [0, 4, 8, 10];
        assert_eq!(chunk_span(&offsets, 0, 0), (0, 0));
        assert_eq!(chunk_span(&offsets, 0, 3), (0, 0));
        assert_eq!(chunk_span(&offsets, 3, 4), (0, 1));
        assert_eq!(chunk_span(&offsets, 4, 7), (1, 1));
        assert_eq!(chunk_span(&offsets, 5, 9), (1, 2));
        assert_eq!(chunk_span(&offsets, 0, 9), (0, 2));
        assert_eq!(chunk_span(&offsets, 9, 9), (2, 2));
        assert_eq!(chunk_slice(&offsets, 0, 3, 4), Some(3..4));
        assert_eq!(chunk_slice(&offsets, 1, 3, 4), Some(0..1));
        assert_eq!(chunk_slice(&offsets, 2, 3, 4), None);
        assert_eq!(chunk_slice(&offsets, 3, 0, 9), None);
        assert_eq!(chunk_slice(&offsets, usize::MAX, 0, 9), None);
    }

    #[test]
    fn spans_skip_zero_length_chunks() {
        let offsets = [0, 0, 5, 5, 10, 10];
        assert_eq!(chunk_span(&offsets, 0, 4), (1, 1));
        assert_eq!(chunk_span(&offsets, 4, 5), (1, 3));
        assert_eq!(chunk_span(&offsets, 5, 9), (3, 3));
        assert_eq!(chunk_span(&offsets, 0, 9), (1, 3));
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        assert_eq!(chunk_span(&[], 0, 0), (0, 0));
        assert_eq!(chunk_span(&[0], 5, 9), (0, 0));
        assert_eq!(chunk_span(&[0, 10], 50, 60), (0, 0));
        assert_eq!(chunk_span(&[0, 10, 20], 15, 3), (1, 1));
        assert_eq!(chunk_span(&[7, 10, 20], 0, 3), (0, 0));
        assert_eq!(chunk_span(&[0, 10, 20], u64::MAX, u64::MAX), (1, 1));
        let _ = chunk_span(&[30, 10, 20, 0], 5, 25);
        assert_eq!(chunk_slice(&[0, 10], 0, 0, u64::MAX), Some(0..10));
        assert_eq!(chunk_slice(&[10, 0], 0, 0, 20), None);
    }

    fn layout() -> impl Strategy<Value = Vec<u32>> {
        prop::collection::vec(1u32..=64, 1..=24)
    }

    proptest! {
        /// For random chunk layouts and ranges, the span's chunks, trimmed, are exactly the
        /// range's bytes.
        #[test]
        fn span_covers_exactly_the_range(lens in layout(), a in any::<u64>(), b in any::<u64>(),
                                         header in 0u8..3) {
            let mut offsets = vec![0u64];
            let mut data = Vec::new();
            for (i, len) in lens.iter().enumerate() {
                offsets.push(offsets[i] + u64::from(*len));
                data.extend((0..*len).map(|j| (i as u32 * 31 + j) as u8));
            }
            let size = *offsets.last().unwrap();
            let spec = match header {
                0 => { let (x, y) = (a % (size + 8), b % (size + 8)); RangeSpec::FromTo(x.min(y), x.max(y)) }
                1 => RangeSpec::From(a % (size + 8)),
                _ => RangeSpec::Suffix(a % (size + 8)),
            };
            let Ok((first, last)) = spec.resolve(size) else {
                // Only a start at or past the end, or an empty suffix, is unsatisfiable.
                prop_assert!(matches!(spec, RangeSpec::FromTo(f, _) | RangeSpec::From(f) if f >= size)
                    || spec == RangeSpec::Suffix(0));
                return Ok(());
            };
            prop_assert!(first <= last && last < size);
            let (lo, hi) = chunk_span(&offsets, first, last);
            prop_assert!(lo <= hi && hi < lens.len());
            prop_assert!(offsets[lo] <= first && first < offsets[lo + 1]);
            prop_assert!(offsets[hi] <= last && last < offsets[hi + 1]);
            let mut got = Vec::new();
            for i in lo..=hi {
                let s = chunk_slice(&offsets, i, first, last).unwrap();
                let chunk = &data[offsets[i] as usize..offsets[i + 1] as usize];
                got.extend_from_slice(&chunk[s.start as usize..s.end as usize]);
            }
            prop_assert_eq!(&got[..], &data[first as usize..=last as usize]);
        }

        /// Formatting a range and parsing it back gives the same range.
        #[test]
        fn parse_round_trips(a in any::<u64>(), b in any::<u64>(), form in 0u8..3) {
            let (text, want) = match form {
                0 => (format!("bytes={}-{}", a.min(b), a.max(b)), RangeSpec::FromTo(a.min(b), a.max(b))),
                1 => (format!("bytes={a}-"), RangeSpec::From(a)),
                _ => (format!("bytes=-{a}"), RangeSpec::Suffix(a)),
            };
            prop_assert_eq!(parse_range(&text), Some(want));
        }

        /// Arbitrary headers never panic the parser, and what it accepts resolves sanely.
        #[test]
        fn parse_never_panics(header in ".{0,40}", size in any::<u64>()) {
            if let Some(spec) = parse_range(&header)
                && let Ok((first, last)) = spec.resolve(size)
            {
                prop_assert!(first <= last && last < size);
            }
        }

        /// `chunk_span` never panics, whatever the offsets and bounds.
        #[test]
        fn span_never_panics(offsets in prop::collection::vec(any::<u64>(), 0..8),
                             a in any::<u64>(), b in any::<u64>()) {
            let (lo, hi) = chunk_span(&offsets, a, b);
            prop_assert!(lo <= hi);
            prop_assert!(hi < offsets.len().max(2) - 1);
            let _ = chunk_slice(&offsets, lo, a, b);
        }
    }
}
