//! The data of a Redis hash as every front end and bucket type stores it: its fields and
//! values, sorted by field, in one byte string.
//!
//! Encoding: `[field count, LEB128]` then, per field in ascending byte order,
//! `[field length, LEB128][field][value length, LEB128][value]`. Decoding never copies:
//! fields and values are slices of the stored allocation. Decoding checks that the lengths
//! fit and the fields are strictly ascending, so a damaged value is an error, never a panic
//! or a hash with a field twice.
//!
//! A hash is one value: changing a field rewrites the whole hash (O(size of the hash)), and
//! its size is bounded by the longest value a front end accepts.

use crate::envelope::BadEnvelope;
use bytes::Bytes;
use std::collections::BTreeMap;

/// A hash's fields and their values, in field order.
pub type Fields = BTreeMap<Bytes, Bytes>;

/// The encoding of `fields` (the data of an envelope of kind [`crate::envelope::Kind::Hash`]).
pub fn encode<'a>(fields: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    put_len(&mut out, fields.len());
    for (f, v) in fields {
        put_len(&mut out, f.len());
        out.extend_from_slice(f);
        put_len(&mut out, v.len());
        out.extend_from_slice(v);
    }
    out
}

/// Encodes a [`Fields`] map.
pub fn encode_map(fields: &Fields) -> Vec<u8> {
    encode(fields.iter().map(|(f, v)| (&f[..], &v[..])))
}

/// Decodes a hash's data into its fields (slices of `data`, no copy).
pub fn decode(data: &Bytes) -> Result<Fields, BadEnvelope> {
    let mut at = 0usize;
    let count = get_len(data, &mut at)?;
    let mut fields = Fields::new();
    for _ in 0..count {
        let field = get_slice(data, &mut at)?;
        let value = get_slice(data, &mut at)?;
        if fields
            .last_key_value()
            .is_some_and(|(last, _)| *last >= field)
        {
            return Err(BadEnvelope("hash fields out of order"));
        }
        fields.insert(field, value);
    }
    if at != data.len() {
        return Err(BadEnvelope("trailing bytes after a hash"));
    }
    Ok(fields)
}

/// The number of fields of a hash's data, without decoding them.
pub fn len(data: &[u8]) -> Result<usize, BadEnvelope> {
    let mut at = 0usize;
    get_len(data, &mut at)
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    crate::leb128::put(out, n as u64);
}

fn get_len(data: &[u8], at: &mut usize) -> Result<usize, BadEnvelope> {
    match crate::leb128::get(data, at) {
        Ok(n) => usize::try_from(n).map_err(|_| BadEnvelope("hash length overflows")),
        Err(crate::leb128::Bad::Truncated) => Err(BadEnvelope("truncated hash")),
        Err(crate::leb128::Bad::Overflow) => Err(BadEnvelope("hash length overflows")),
    }
}

fn get_slice(data: &Bytes, at: &mut usize) -> Result<Bytes, BadEnvelope> {
    let n = get_len(data, at)?;
    let end = at
        .checked_add(n)
        .filter(|&e| e <= data.len())
        .ok_or(BadEnvelope("truncated hash"))?;
    let s = data.slice(*at..end);
    *at = end;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> Fields {
        pairs
            .iter()
            .map(|(f, v)| (Bytes::from(f.to_string()), Bytes::from(v.to_string())))
            .collect()
    }

    #[test]
    fn round_trips_and_counts() {
        for m in [
            map(&[]),
            map(&[("a", "1")]),
            map(&[("", ""), ("f", &"x".repeat(300)), ("g", "")]),
        ] {
            let data = Bytes::from(encode_map(&m));
            assert_eq!(decode(&data), Ok(m.clone()));
            assert_eq!(len(&data), Ok(m.len()));
        }
    }

    #[test]
    fn damaged_data_is_an_error_not_a_panic() {
        let good = encode_map(&map(&[("a", "1"), ("b", "2")]));
        for cut in 0..good.len() {
            assert!(
                decode(&Bytes::copy_from_slice(&good[..cut])).is_err(),
                "{cut}"
            );
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode(&Bytes::from(trailing)).is_err());
        // Out of order and duplicate fields.
        let swapped = [2, 1, b'b', 0, 1, b'a', 0];
        assert!(decode(&Bytes::copy_from_slice(&swapped)).is_err());
        let twice = [2, 1, b'a', 0, 1, b'a', 0];
        assert!(decode(&Bytes::copy_from_slice(&twice)).is_err());
        // A length that overflows, and one past the end.
        let huge = [0xff; 12];
        assert!(decode(&Bytes::copy_from_slice(&huge)).is_err());
        let past = [1, 0x7f, b'a'];
        assert!(decode(&Bytes::copy_from_slice(&past)).is_err());
    }
}
