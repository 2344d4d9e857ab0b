//! The stored forms of a Redis set and sorted set — the `data` of an envelope of kind
//! [`crate::envelope::Kind::Set`] or [`crate::envelope::Kind::ZSet`] — shared by the Redis
//! layer (which holds them as objects and answers every command over them) and by the
//! eventual buckets' element CRDT (which shows its merged members in these forms and reads
//! what a command stored back out of them).
//!
//! - **set**: `[count, LEB128]` then per member, strictly ascending by bytes,
//!   `[length, LEB128][member]`.
//! - **sorted set**: `[count, LEB128]` then per entry, ascending by (score, member),
//!   `[score: f64 big endian][length, LEB128][member]`; scores are never NaN and compare as
//!   Redis compares them (`-0` equals `0`), each member appears once.
//!
//! Decoding checks every length against the bytes left before slicing, the order, and that
//! nothing trails: damage is an error naming it, never a panic or an allocation sized by a
//! count that was not proven.

use crate::envelope::BadEnvelope;
use crate::leb128;
use bytes::Bytes;
use std::cmp::Ordering;
use std::ops::Range;

fn get_len(data: &[u8], at: &mut usize, what: &'static str) -> Result<usize, BadEnvelope> {
    let n = leb128::get(data, at).map_err(|e| match e {
        leb128::Bad::Truncated => BadEnvelope(what),
        leb128::Bad::Overflow => BadEnvelope("collection length overflows"),
    })?;
    usize::try_from(n).map_err(|_| BadEnvelope("collection length overflows"))
}

/// The member count a set's or sorted set's data starts with, unchecked against its body.
pub fn count(data: &[u8]) -> Result<usize, BadEnvelope> {
    get_len(data, &mut 0, "truncated collection value")
}

/// The set data of `members`, which must be strictly ascending by bytes.
pub fn encode_set<M: AsRef<[u8]>>(members: &[M]) -> Vec<u8> {
    debug_assert!(members.windows(2).all(|w| w[0].as_ref() < w[1].as_ref()));
    let size = leb128::size(members.len() as u64)
        + members
            .iter()
            .map(|m| leb128::size(m.as_ref().len() as u64) + m.as_ref().len())
            .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    leb128::put(&mut out, members.len() as u64);
    for m in members {
        leb128::put(&mut out, m.as_ref().len() as u64);
        out.extend_from_slice(m.as_ref());
    }
    out
}

/// Walks set data, checking every length, the strict order and that nothing trails: `f`
/// gets each member's byte range, ascending (before damage further on shows). Returns the
/// member count.
pub fn walk_set(data: &[u8], mut f: impl FnMut(Range<usize>)) -> Result<usize, BadEnvelope> {
    let mut at = 0usize;
    let count = get_len(data, &mut at, "truncated set")?;
    // Every member takes at least its length byte: a count beyond the bytes left is damage.
    if count > data.len() - at {
        return Err(BadEnvelope("set count exceeds its data"));
    }
    let mut prev: Option<Range<usize>> = None;
    for _ in 0..count {
        let n = get_len(data, &mut at, "truncated set")?;
        let end = at
            .checked_add(n)
            .filter(|&e| e <= data.len())
            .ok_or(BadEnvelope("truncated set"))?;
        let r = at..end;
        if prev.is_some_and(|p| data[p] >= data[r.clone()]) {
            return Err(BadEnvelope("set members out of order"));
        }
        at = end;
        f(r.clone());
        prev = Some(r);
    }
    if at != data.len() {
        return Err(BadEnvelope("trailing bytes after a set"));
    }
    Ok(count)
}

/// A set's members, strictly ascending, as slices of `data` (no copy).
pub fn decode_set(data: &Bytes) -> Result<Vec<Bytes>, BadEnvelope> {
    let mut out = Vec::new();
    walk_set(data, |r| out.push(data.slice(r)))?;
    Ok(out)
}

/// Redis's order of sorted-set entries: by score (`-0` equals `0`), then by member bytes.
/// Scores are never NaN.
pub fn zset_order(a: (f64, &[u8]), b: (f64, &[u8])) -> Ordering {
    a.0.partial_cmp(&b.0)
        .unwrap_or(Ordering::Equal)
        .then_with(|| a.1.cmp(b.1))
}

/// The sorted-set data of `entries`, which must be in [`zset_order`] with each member once.
pub fn encode_zset<'a>(entries: impl ExactSizeIterator<Item = (f64, &'a [u8])> + Clone) -> Vec<u8> {
    let body: usize = entries
        .clone()
        .map(|(_, m)| 8 + leb128::size(m.len() as u64) + m.len())
        .sum();
    let mut out = Vec::with_capacity(leb128::size(entries.len() as u64) + body);
    leb128::put(&mut out, entries.len() as u64);
    for (score, m) in entries {
        out.extend_from_slice(&score.to_be_bytes());
        leb128::put(&mut out, m.len() as u64);
        out.extend_from_slice(m);
    }
    out
}

/// Walks sorted-set data, checking every length, that no score is NaN, the order and that
/// nothing trails: `f` gets each entry's score and member range, in order. Returns the count.
/// A repeated member among equal scores is out of order; one under two scores is the
/// caller's to find (it needs a lookup by member).
pub fn walk_zset(data: &[u8], mut f: impl FnMut(f64, Range<usize>)) -> Result<usize, BadEnvelope> {
    let mut at = 0usize;
    let count = get_len(data, &mut at, "truncated collection value")?;
    // Each entry takes at least 9 bytes: a count beyond that is damage, not a loop bound.
    if count > (data.len() - at) / 9 {
        return Err(BadEnvelope("sorted set count exceeds its bytes"));
    }
    let mut prev: Option<(f64, Range<usize>)> = None;
    for _ in 0..count {
        let raw: [u8; 8] = data
            .get(at..at + 8)
            .and_then(|s| s.try_into().ok())
            .ok_or(BadEnvelope("truncated collection value"))?;
        at += 8;
        let score = f64::from_be_bytes(raw);
        if score.is_nan() {
            return Err(BadEnvelope("sorted set score is NaN"));
        }
        let n = get_len(data, &mut at, "truncated collection value")?;
        let end = at
            .checked_add(n)
            .filter(|&e| e <= data.len())
            .ok_or(BadEnvelope("truncated collection value"))?;
        let r = at..end;
        if let Some((ps, pr)) = &prev
            && zset_order((*ps, &data[pr.clone()]), (score, &data[r.clone()])) != Ordering::Less
        {
            return Err(BadEnvelope("sorted set entries out of order"));
        }
        at = end;
        f(score, r.clone());
        prev = Some((score, r));
    }
    if at != data.len() {
        return Err(BadEnvelope("sorted set has trailing bytes"));
    }
    Ok(count)
}

/// A sorted set's entries in order, members as slices of `data` (no copy).
pub fn decode_zset(data: &Bytes) -> Result<Vec<(f64, Bytes)>, BadEnvelope> {
    let mut out = Vec::new();
    walk_zset(data, |s, r| out.push((s, data.slice(r))))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn damage_is_an_error() {
        assert!(decode_set(&Bytes::from_static(&[2, 1, b'b', 1, b'a'])).is_err());
        assert!(decode_set(&Bytes::from_static(&[200, 1])).is_err());
        assert!(decode_set(&Bytes::from_static(&[1, 1, b'a', 0])).is_err());
        assert!(decode_zset(&Bytes::from_static(&[1, 0, 0])).is_err());
        let nan = encode_zset([(f64::NAN, &b"a"[..])].into_iter());
        assert!(decode_zset(&Bytes::from(nan)).is_err());
        let twice = encode_zset([(1.0, &b"a"[..]), (1.0, &b"a"[..])].into_iter());
        assert!(decode_zset(&Bytes::from(twice)).is_err());
        assert_eq!(
            count(&[0x80]),
            Err(BadEnvelope("truncated collection value"))
        );
    }

    #[test]
    fn minus_zero_equals_zero() {
        let z = encode_zset([(-0.0, &b"a"[..]), (0.0, &b"b"[..])].into_iter());
        assert_eq!(decode_zset(&Bytes::from(z)).unwrap().len(), 2);
    }

    proptest! {
        #[test]
        fn sets_round_trip(members in proptest::collection::btree_set(proptest::collection::vec(any::<u8>(), 0..20), 0..40)) {
            let members: Vec<Vec<u8>> = members.into_iter().collect();
            let data = Bytes::from(encode_set(&members));
            let back = decode_set(&data).unwrap();
            prop_assert_eq!(back.iter().map(|b| b.to_vec()).collect::<Vec<_>>(), members);
            prop_assert_eq!(count(&data).unwrap(), back.len());
        }

        #[test]
        fn zsets_round_trip(entries in proptest::collection::btree_map(proptest::collection::vec(any::<u8>(), 0..12), -1e6f64..1e6, 0..40)) {
            let mut sorted: Vec<(f64, Vec<u8>)> = entries.into_iter().map(|(m, s)| (s, m)).collect();
            sorted.sort_by(|a, b| zset_order((a.0, &a.1), (b.0, &b.1)));
            let data = Bytes::from(encode_zset(sorted.iter().map(|(s, m)| (*s, &m[..]))));
            let back = decode_zset(&data).unwrap();
            prop_assert_eq!(back.into_iter().map(|(s, m)| (s, m.to_vec())).collect::<Vec<_>>(), sorted);
        }

        #[test]
        fn arbitrary_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let raw = Bytes::from(raw);
            let _ = decode_set(&raw);
            let _ = decode_zset(&raw);
        }
    }
}
