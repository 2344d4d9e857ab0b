//! Redis's integer text: the one strict parse (`string2ll`) by which every path — the single
//! node's keyspace, the cluster's counters — reads a stored value or an argument as a
//! 64-bit integer, so `INCR` over `" 1"`, `"+1"`, `"01"` or `"-0"` is refused everywhere
//! alike.

/// Parses a 64-bit integer exactly like Redis's `string2ll`: optional `-`, no `+`, no
/// leading zeros, no spaces, no `-0`, at most 20 characters.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    let (&first, rest) = digits.split_first()?;
    if !(b'1'..=b'9').contains(&first) {
        return None;
    }
    let mut v = (first - b'0') as u64;
    for &c in rest {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    if negative {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}
