//! [`StreamId`]: a stream entry's ID, `<ms>-<seq>` — two unsigned 64-bit numbers ordered
//! ms first — and its grammar as Redis 7.0's `streamGenericParseIDOrReply` reads it.
//!
//! Parsing never panics and never wraps: an ID longer than 127 bytes, a part that is not a
//! decimal `u64`, or `-`/`+` where a strict ID is wanted, is Redis's `Invalid stream ID`.

use crate::error::{CmdError, raw};
use std::fmt;

/// A stream entry ID.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    /// The milliseconds part.
    pub ms: u64,
    /// The sequence part.
    pub seq: u64,
}

/// Redis's error for an ID that does not parse.
pub const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

impl StreamId {
    /// `0-0`, the smallest ID (`-`).
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    /// The largest ID (`+`).
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    /// An ID.
    pub const fn new(ms: u64, seq: u64) -> Self {
        Self { ms, seq }
    }

    /// The next ID, `None` past the largest.
    pub fn next(self) -> Option<StreamId> {
        match self.seq.checked_add(1) {
            Some(seq) => Some(StreamId { ms: self.ms, seq }),
            None => self.ms.checked_add(1).map(|ms| StreamId { ms, seq: 0 }),
        }
    }

    /// The previous ID, `None` before `0-0`.
    pub fn prev(self) -> Option<StreamId> {
        match self.seq.checked_sub(1) {
            Some(seq) => Some(StreamId { ms: self.ms, seq }),
            None => self
                .ms
                .checked_sub(1)
                .map(|ms| StreamId { ms, seq: u64::MAX }),
        }
    }

    /// Whether it is `0-0`.
    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    /// The ID's text, `<ms>-<seq>`.
    pub fn to_bytes(self) -> Vec<u8> {
        self.to_string().into_bytes()
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// How an ID argument is read.
#[derive(Clone, Copy, Debug)]
pub struct IdRules {
    /// The sequence of an ID given as `<ms>` alone.
    pub missing_seq: u64,
    /// Whether `-` and `+` are refused.
    pub strict: bool,
    /// Whether `<ms>-*` is accepted (XADD): the sequence is then left to the stream.
    pub seq_star: bool,
}

impl IdRules {
    /// A strict ID (no `-`/`+`), a missing sequence 0.
    pub const STRICT: IdRules = IdRules {
        missing_seq: 0,
        strict: true,
        seq_star: false,
    };
    /// `-` and `+` allowed, a missing sequence `missing_seq`.
    pub const fn range(missing_seq: u64) -> IdRules {
        IdRules {
            missing_seq,
            strict: false,
            seq_star: false,
        }
    }
}

/// A parsed ID and whether its sequence was given (false only for `<ms>-*`).
pub fn parse_with(arg: &[u8], rules: IdRules) -> Result<(StreamId, bool), CmdError> {
    let invalid = || raw(INVALID_ID);
    if arg.len() > 127 {
        return Err(invalid());
    }
    match arg {
        b"-" if !rules.strict => return Ok((StreamId::MIN, true)),
        b"+" if !rules.strict => return Ok((StreamId::MAX, true)),
        _ => {}
    }
    let (ms, seq) = match memchr::memchr(b'-', arg) {
        Some(at) => (&arg[..at], Some(&arg[at + 1..])),
        None => (arg, None),
    };
    let ms = parse_u64(ms).ok_or_else(invalid)?;
    match seq {
        None => Ok((StreamId::new(ms, rules.missing_seq), true)),
        Some(b"*") if rules.seq_star => Ok((StreamId::new(ms, 0), false)),
        Some(s) => Ok((StreamId::new(ms, parse_u64(s).ok_or_else(invalid)?), true)),
    }
}

/// A strict ID (`-` and `+` refused), a missing sequence 0.
pub fn parse_strict(arg: &[u8]) -> Result<StreamId, CmdError> {
    parse_with(arg, IdRules::STRICT).map(|(id, _)| id)
}

/// One end of a range (XRANGE, XPENDING, XAUTOCLAIM): `(` makes it exclusive (then strict),
/// `-`/`+` are the extremes, a missing sequence is `missing_seq`. Answers the ID and whether
/// it is exclusive.
pub fn parse_interval(arg: &[u8], missing_seq: u64) -> Result<(StreamId, bool), CmdError> {
    if arg.len() > 1 && arg[0] == b'(' {
        let rules = IdRules {
            missing_seq,
            ..IdRules::STRICT
        };
        return parse_with(&arg[1..], rules).map(|(id, _)| (id, true));
    }
    parse_with(arg, IdRules::range(missing_seq)).map(|(id, _)| (id, false))
}

/// The start of a range: exclusive moves it up one (`invalid start ID for the interval`
/// past the largest ID).
pub fn range_start(arg: &[u8]) -> Result<StreamId, CmdError> {
    let (id, exclusive) = parse_interval(arg, 0)?;
    if !exclusive {
        return Ok(id);
    }
    id.next()
        .ok_or_else(|| raw("ERR invalid start ID for the interval"))
}

/// The end of a range: exclusive moves it down one (`invalid end ID for the interval`
/// before `0-0`).
pub fn range_end(arg: &[u8]) -> Result<StreamId, CmdError> {
    let (id, exclusive) = parse_interval(arg, u64::MAX)?;
    if !exclusive {
        return Ok(id);
    }
    id.prev()
        .ok_or_else(|| raw("ERR invalid end ID for the interval"))
}

/// A decimal `u64` as Redis's `string2ull` reads it: digits only (no sign, no spaces), no
/// leading zeros beyond a lone `0` mattering not (Redis accepts them through `strtoull`).
fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_id_forms() {
        let p = |s: &[u8]| parse_with(s, IdRules::range(7)).ok().map(|(id, _)| id);
        assert_eq!(p(b"5-3"), Some(StreamId::new(5, 3)));
        assert_eq!(p(b"5"), Some(StreamId::new(5, 7)));
        assert_eq!(p(b"-"), Some(StreamId::MIN));
        assert_eq!(p(b"+"), Some(StreamId::MAX));
        assert_eq!(
            p(b"18446744073709551615-18446744073709551615"),
            Some(StreamId::MAX)
        );
        for bad in [
            &b""[..],
            b"a",
            b"1-",
            b"-1",
            b"1-2-3",
            b"18446744073709551616",
            b" 1",
        ] {
            assert!(p(bad).is_none(), "{bad:?}");
        }
        assert!(parse_strict(b"-").is_err());
        assert!(parse_strict(&[b'1'; 128]).is_err());
        assert_eq!(
            parse_with(
                b"5-*",
                IdRules {
                    seq_star: true,
                    ..IdRules::STRICT
                }
            )
            .ok(),
            Some((StreamId::new(5, 0), false))
        );
        assert!(parse_strict(b"5-*").is_err());
    }

    #[test]
    fn intervals_step_over_their_exclusive_end() {
        assert_eq!(range_start(b"(1-5").ok(), Some(StreamId::new(1, 6)));
        assert_eq!(
            range_start(b"(1-18446744073709551615").ok(),
            Some(StreamId::new(2, 0))
        );
        assert!(range_start(b"(18446744073709551615-18446744073709551615").is_err());
        assert_eq!(range_end(b"(2-0").ok(), Some(StreamId::new(1, u64::MAX)));
        assert!(range_end(b"(0-0").is_err());
        assert!(range_end(b"(-").is_err());
        assert_eq!(range_end(b"3").ok(), Some(StreamId::new(3, u64::MAX)));
    }
}
