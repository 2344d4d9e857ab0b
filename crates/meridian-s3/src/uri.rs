//! Percent-encoding as SigV4 and S3 define it.
//!
//! `encode` implements AWS's `UriEncode`: every byte except the unreserved set
//! `A-Za-z0-9-._~` (and `/` when asked) becomes `%XY` with upper-case hex. `decode` is
//! strict: a `%` not followed by two hex digits is an error, never passed through, and
//! `+` is a literal plus (S3 clients encode a space as `%20`).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_encode, percent_encode_byte};
use std::fmt::Write as _;

/// Every byte but RFC 3986's unreserved characters (`A-Za-z0-9-._~`), which SigV4 never
/// encodes.
const RESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// [`RESERVED`] less `/` (paths).
const RESERVED_BUT_SLASH: &AsciiSet = &RESERVED.remove(b'/');

/// The unreserved characters of RFC 3986, which SigV4 never encodes.
pub(crate) fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// `b` as `%XY`, upper-case hex.
fn push_escaped(out: &mut String, b: u8) {
    out.push_str(percent_encode_byte(b));
}

/// AWS `UriEncode` of `bytes` appended to `out`; `/` kept as is when `keep_slash`.
pub(crate) fn encode_into(out: &mut String, bytes: &[u8], keep_slash: bool) {
    let set = if keep_slash {
        RESERVED_BUT_SLASH
    } else {
        RESERVED
    };
    let _ = write!(out, "{}", percent_encode(bytes, set));
}

/// AWS `UriEncode` of `bytes`.
pub(crate) fn encode(bytes: &[u8], keep_slash: bool) -> String {
    let mut out = String::with_capacity(bytes.len() + bytes.len() / 2);
    encode_into(&mut out, bytes, keep_slash);
    out
}

/// The byte of the escape whose `%` is at `s[i]`; `None` unless two hex digits follow.
fn escaped_byte(s: &[u8], i: usize) -> Option<u8> {
    let mut byte = [0u8; 1];
    hex::decode_to_slice(s.get(i + 1..i + 3)?, &mut byte).ok()?;
    Some(byte[0])
}

/// Strict percent-decoding; `None` on a malformed escape (`percent_decode` alone would pass
/// it through as a literal `%`).
pub(crate) fn decode(s: &[u8]) -> Option<Vec<u8>> {
    let well_formed = s
        .iter()
        .enumerate()
        .filter(|&(_, &b)| b == b'%')
        .all(|(i, _)| escaped_byte(s, i).is_some());
    well_formed.then(|| percent_encoding::percent_decode(s).collect())
}

/// Strict percent-decoding into UTF-8; `None` on a malformed escape or invalid UTF-8.
pub(crate) fn decode_utf8(s: &str) -> Option<String> {
    String::from_utf8(decode(s.as_bytes())?).ok()
}

/// Re-encodes an already percent-encoded path into SigV4's canonical form without
/// decoding it first as a whole: escapes of unreserved bytes become the bytes, other
/// escapes get upper-case hex (so `%2F` stays `%2F`), and raw bytes outside the
/// unreserved set and `/` are escaped. `None` on a malformed escape.
pub(crate) fn canonicalize_encoded_path(raw: &str) -> Option<String> {
    let s = raw.as_bytes();
    let mut out = String::with_capacity(s.len() + 8);
    let mut i = 0;
    while let Some(&b) = s.get(i) {
        if b == b'%' {
            let v = escaped_byte(s, i)?;
            if is_unreserved(v) {
                out.push(char::from(v));
            } else {
                push_escaped(&mut out, v);
            }
            i += 3;
        } else {
            if is_unreserved(b) || b == b'/' {
                out.push(char::from(b));
            } else {
                push_escaped(&mut out, b);
            }
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_rules() {
        assert_eq!(encode(b"a b/c~d.e_f-g", false), "a%20b%2Fc~d.e_f-g");
        assert_eq!(encode(b"a b/c", true), "a%20b/c");
        assert_eq!(encode("é+*".as_bytes(), false), "%C3%A9%2B%2A");
    }

    #[test]
    fn decode_rules() {
        assert_eq!(decode(b"a%20b%2f+").as_deref(), Some(&b"a b/+"[..]));
        assert_eq!(decode(b"%"), None);
        assert_eq!(decode(b"%2"), None);
        assert_eq!(decode(b"%zz"), None);
        assert_eq!(decode_utf8("%FF"), None);
    }

    #[test]
    fn canonical_path() {
        assert_eq!(
            canonicalize_encoded_path("/test$file.text").as_deref(),
            Some("/test%24file.text")
        );
        assert_eq!(
            canonicalize_encoded_path("/test%24file.text").as_deref(),
            Some("/test%24file.text")
        );
        assert_eq!(
            canonicalize_encoded_path("/a%2fb%41").as_deref(),
            Some("/a%2FbA")
        );
        assert_eq!(
            canonicalize_encoded_path("/a//b/../c").as_deref(),
            Some("/a//b/../c")
        );
        assert_eq!(canonicalize_encoded_path("/a%"), None);
    }
}
