//! Strict percent-decoding of request paths and query values (the HTTP API, its objects,
//! and the ACL check of both): a `%` not followed by two hex digits is refused, where the
//! `percent-encoding` crate alone would pass it through as a literal. Bytes out are raw (a
//! key need not be UTF-8).

/// Strict percent-decoding: `None` when a `%` is not followed by two hex digits (the
/// `percent-encoding` crate alone would pass such a `%` through as a literal).
pub(crate) fn decode(s: &[u8]) -> Option<Vec<u8>> {
    let well_formed = memchr::memchr_iter(b'%', s).all(|i| {
        s.get(i + 1..i + 3)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    well_formed.then(|| percent_encoding::percent_decode(s).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_yields_raw_bytes() {
        assert_eq!(decode(b"a%2Fb%00%ff").unwrap(), b"a/b\x00\xff");
        assert_eq!(decode(b"plain").unwrap(), b"plain");
        assert!(decode(b"bad%2").is_none());
        assert!(decode(b"bad%zz").is_none());
        // from_str_radix, which decoded these before, took a sign: `%+f` was 0x0f.
        assert!(decode(b"bad%+f").is_none());
    }
}
