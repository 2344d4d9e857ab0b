//! Redis's value grammar: strict integers and floats (`string2ll`, `string2ld`), the float
//! format INCRBYFLOAT stores, and the glob matcher of KEYS, SCAN MATCH and HSCAN MATCH.
//!
//! Everything here is a pure function of its bytes: no allocation beyond the result, no
//! panic on any input, and no pattern takes exponential time.

pub use meridian_core::int::parse_i64;

/// Parses a float like Redis's `string2ld`: no surrounding spaces, not NaN.
pub fn parse_f64(s: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(s).ok()?;
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

/// Formats a float the way INCRBYFLOAT stores it: the shortest decimal that reads back as the
/// same `f64`, without exponent or trailing `.0`.
pub fn format_f64(v: f64) -> Vec<u8> {
    let s = format!("{v}");
    let s = s.strip_suffix(".0").unwrap_or(&s);
    let s = if s == "-0" { "0" } else { s };
    s.as_bytes().to_vec()
}

/// The most elements HRANDFIELD, SRANDMEMBER and ZRANDMEMBER answer for a negative count
/// (repetitions allowed), where Redis builds a reply of any length: a larger count is
/// refused with `ERR value is out of range`.
pub const MAX_RANDOM_REPEATS: u64 = 1 << 20;

/// Which of `n` elements a random-member command with `count` answers, as Redis picks them:
/// none for 0; `|count|` uniform picks with repetitions for a negative count (refused beyond
/// [`MAX_RANDOM_REPEATS`]: `None`, for `ERR value is out of range`); every element, in
/// order, when `count ≥ n`; else `count` distinct uniform picks.
pub fn random_indexes(n: usize, count: i64) -> Option<Vec<usize>> {
    use rand::Rng;
    if count == 0 || n == 0 {
        return Some(Vec::new());
    }
    if count < 0 {
        let times = count.unsigned_abs();
        if times > MAX_RANDOM_REPEATS {
            return None;
        }
        let mut rng = rand::rng();
        return Some((0..times).map(|_| rng.random_range(0..n)).collect());
    }
    if count as u64 >= n as u64 {
        return Some((0..n).collect());
    }
    Some(rand::seq::index::sample(&mut rand::rng(), n, count as usize).into_vec())
}

/// A blocking command's timeout (BLPOP, BZPOPMIN, ...), as Redis 7's
/// `getTimeoutFromObjectOrReply` reads it: seconds as a float, 0 for "forever"; `None` for
/// forever, else the milliseconds to wait.
pub fn parse_timeout(a: &[u8]) -> Result<Option<u64>, crate::error::CmdError> {
    use crate::error::raw;
    let secs = parse_f64(a).ok_or_else(|| raw("ERR timeout is not a float or out of range"))?;
    // Redis rounds up to milliseconds before it checks the sign: -0.0001 is 0.
    let ms = (secs * 1000.0).ceil();
    if !ms.is_finite() || ms >= i64::MAX as f64 {
        return Err(raw("ERR timeout is out of range"));
    }
    if ms < 0.0 {
        return Err(raw("ERR timeout is negative"));
    }
    Ok((ms > 0.0).then_some(ms as u64))
}

/// Formats a double the way Redis 7.0 replies with one (`addReplyDouble`: C's `%.17g`, and
/// `inf`/`-inf`): ZSCORE of 1.5 is `1.5`, of 0.1 `0.10000000000000001`, of 1e20 `1e+20`.
pub fn format_double(v: f64) -> String {
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if v.is_nan() {
        return "nan".to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // 17 significant digits, then %g's choice of notation by the decimal exponent.
    let sci = format!("{v:.16e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..17).contains(&exp) {
        let mantissa = trim_fraction(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.unsigned_abs());
    }
    let decimals = (16 - exp).max(0) as usize;
    trim_fraction(&format!("{v:.decimals$}")).to_string()
}

/// A decimal without the trailing zeros of its fraction (and without a bare `.`).
fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// Redis's glob matcher (`stringmatchlen`): `*`, `?`, `[abc]`, `[^a]`, `[a-z]` and `\`
/// escapes, byte-wise, optionally ASCII case-insensitive. Like Redis, it gives up (no match)
/// on patterns nesting `*` more than 1000 deep, and stops retrying longer matches for an
/// earlier `*` once a later one failed everywhere, so no pattern takes exponential time.
pub fn glob_match(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    let mut skip_longer = false;
    glob_impl(pattern, string, nocase, &mut skip_longer, 0)
}

fn glob_impl(
    mut p: &[u8],
    mut s: &[u8],
    nocase: bool,
    skip_longer: &mut bool,
    nesting: u32,
) -> bool {
    // Out-of-range reads return 0, as the C version reads the NUL terminator.
    fn at(b: &[u8], i: usize) -> u8 {
        b.get(i).copied().unwrap_or(0)
    }
    let fold = |c: u8| if nocase { c.to_ascii_lowercase() } else { c };
    if nesting > 1000 {
        return false;
    }
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                while at(p, 1) == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                while !s.is_empty() {
                    if glob_impl(&p[1..], s, nocase, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s = &s[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => s = &s[1..],
            b'[' => {
                p = &p[1..];
                let not = at(p, 0) == b'^';
                if not {
                    p = &p[1..];
                }
                let mut matched = false;
                loop {
                    if at(p, 0) == b'\\' && p.len() >= 2 {
                        p = &p[1..];
                        if p[0] == s[0] {
                            matched = true;
                        }
                    } else if at(p, 0) == b']' {
                        break;
                    } else if p.is_empty() {
                        // Unterminated class: the C code steps back so the final advance
                        // below leaves the pattern empty.
                        break;
                    } else if p.len() >= 3 && p[1] == b'-' {
                        let (mut start, mut end) = (fold(p[0]), fold(p[2]));
                        if start > end {
                            std::mem::swap(&mut start, &mut end);
                        }
                        let c = fold(s[0]);
                        p = &p[2..];
                        if c >= start && c <= end {
                            matched = true;
                        }
                    } else if fold(p[0]) == fold(s[0]) {
                        matched = true;
                    }
                    p = &p[1..];
                }
                if not {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                s = &s[1..];
            }
            c => {
                let c = if c == b'\\' && p.len() >= 2 {
                    p = &p[1..];
                    p[0]
                } else {
                    c
                };
                if fold(c) != fold(s[0]) {
                    return false;
                }
                s = &s[1..];
            }
        }
        p = p.get(1..).unwrap_or(&[]);
        if s.is_empty() {
            while at(p, 0) == b'*' {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", false), // as in Redis; KEYS * and SCAN skip matching altogether
            ("*", "anything", true),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h*llo", "hllo", true),
            ("h*llo", "heeeello", true),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("h[a-b]llo", "hcllo", false),
            ("h\\*llo", "h*llo", true),
            ("h\\*llo", "hello", false),
            ("[\\]]", "]", true),
            ("[abc", "a", true),
            ("[abc", "ab", false),
            ("a*", "a", true),
            ("a**b", "ab", true),
            ("*a*b*", "xxaxxbxx", true),
            ("*a*b*", "xxbxxaxx", false),
            ("", "", true),
            ("", "a", false),
            ("a", "", false),
            ("abc\\", "abc\\", true),
            ("user:*", "user:42", true),
            ("user:*", "item:42", false),
        ];
        for &(p, s, want) in cases {
            assert_eq!(
                glob_match(p.as_bytes(), s.as_bytes(), false),
                want,
                "{p:?} vs {s:?}"
            );
        }
        assert!(glob_match(b"HeLLo", b"hello", true));
        assert!(glob_match(b"[A-C]x", b"bx", true));
        // Adversarial patterns finish quickly (Redis's skipLongerMatches).
        let p = "a*".repeat(30) + "b";
        assert!(!glob_match(p.as_bytes(), "a".repeat(100).as_bytes(), false));
    }

    #[test]
    fn parse_i64_is_string2ll() {
        for (s, want) in [
            ("0", Some(0)),
            ("-1", Some(-1)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("-0", None),
            ("007", None),
            ("+7", None),
            ("", None),
            ("-", None),
            ("1e3", None),
            (" 1", None),
        ] {
            assert_eq!(parse_i64(s.as_bytes()), want, "{s:?}");
        }
    }

    #[test]
    fn doubles_format_as_redis_7_0_replies() {
        for (v, want) in [
            (1.5, "1.5"),
            (10.0, "10"),
            (-3.0, "-3"),
            (0.1, "0.10000000000000001"),
            (1.1, "1.1000000000000001"),
            (1e20, "1e+20"),
            (1.5e-7, "1.4999999999999999e-07"),
            (0.0001, "0.0001"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (12345678901234567.0, "12345678901234568"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (-0.0, "-0"),
            (0.0, "0"),
        ] {
            assert_eq!(format_double(v), want, "{v:e}");
        }
    }

    #[test]
    fn timeouts_parse_as_redis_reads_them() {
        assert_eq!(parse_timeout(b"0").unwrap(), None);
        assert_eq!(parse_timeout(b"0.1").unwrap(), Some(100));
        assert_eq!(parse_timeout(b"2").unwrap(), Some(2000));
        for (bad, why) in [
            (&b"-1"[..], "negative"),
            (b"abc", "not a float"),
            (b"inf", "out of range"),
            (b"1e300", "out of range"),
        ] {
            let line = parse_timeout(bad).unwrap_err().into_line();
            assert!(line.contains(why), "{line}");
        }
    }
}
