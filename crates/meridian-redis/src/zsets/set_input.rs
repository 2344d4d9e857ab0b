//! **TEMPORARY — to be pointed at `crate::sets`.** A key holding a *set* is a valid input of
//! ZUNION/ZINTER/ZDIFF (and their STORE forms, ZINTERCARD), every member scoring 1. The set
//! module is being written concurrently, so its members are decoded here from the encoding
//! agreed with it:
//!
//! ```text
//! [count: LEB128 u64] count × ( [member length: LEB128 u64] [member] )
//! ```
//!
//! members unique, in ascending byte order. When `crate::sets` lands, replace the body of
//! [`set_members`] with a call to its decoder; nothing else in `crate::zsets` reads set bytes.

use super::encoding::Reader;
use crate::error::{RedisError, Result};
use crate::view::{Entry, Kind};
use bytes::Bytes;

/// The members of the set `e` holds, ascending (slices of its value, no copy). WRONGTYPE for
/// an entry of another kind; `Corrupt` for bytes that do not decode (checked as defensively as
/// a sorted set's: lengths against the bytes left, order, uniqueness, no trailing bytes).
pub fn set_members(e: &Entry) -> Result<Vec<Bytes>> {
    if e.kind != Kind::Set {
        return Err(RedisError::WrongType);
    }
    decode_set(&e.data).map_err(RedisError::Corrupt)
}

fn decode_set(data: &Bytes) -> std::result::Result<Vec<Bytes>, &'static str> {
    let mut r = Reader { data, pos: 0 };
    let count = r.uvarint()?;
    // A member takes at least its one length byte.
    if count > r.left() as u64 {
        return Err("set count exceeds its bytes");
    }
    let mut out: Vec<Bytes> = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = usize::try_from(r.uvarint()?).map_err(|_| "set member length overflows")?;
        let start = r.pos;
        r.take(len)?;
        let m = data.slice(start..start + len);
        if out.last().is_some_and(|p| *p >= m) {
            return Err("set members out of order");
        }
        out.push(m);
    }
    if r.left() != 0 {
        return Err("set has trailing bytes");
    }
    Ok(out)
}

/// Encodes `members` (ascending, unique) as [`set_members`] reads them — for tests, and for
/// whoever must build a set before `crate::sets` exists.
pub fn encode_set(members: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    super::encoding::put_uvarint(&mut out, members.len() as u64);
    for m in members {
        super::encoding::put_uvarint(&mut out, m.len() as u64);
        out.extend_from_slice(m);
    }
    out
}
