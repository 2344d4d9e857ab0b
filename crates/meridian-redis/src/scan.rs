//! SCAN's arguments and reply, shared by SCAN, HSCAN and every backend's scan: cursors are
//! unsigned decimals, COUNT is at least 1, TYPE names one of Redis's types.

use crate::args::Args;
use crate::error::{CmdError, SYNTAX, int_arg, raw};
use crate::reply::Reply;
use bytes::Bytes;
use meridian_core::envelope::Kind;

/// Most elements a single SCAN call gathers, whatever its COUNT.
pub const MAX_SCAN_COUNT: usize = 100_000;

/// An element scan (SSCAN, HSCAN) over a large collection returns at least
/// 1/`ELEMENT_SCAN_PASSES` of it per call.
pub const ELEMENT_SCAN_PASSES: usize = 32;

/// A fixed 64-bit hash of an element (FNV-1a, then a 64-bit finalizer to spread it): an
/// element scan's cursor space. Fixed so a cursor means the same on every node, after a
/// restart and whatever else the collection holds — so an element present during a whole
/// iteration is returned exactly once however the collection changes.
pub fn element_hash(m: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in m {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// One step of an element scan from `cursor` over the `n` elements whose
/// [`element_hash`]es `hashes` gives in position order: the positions to list, in hash
/// order, and the next cursor (0: done). Each call but the last takes at least `count`
/// elements and at least 1/[`ELEMENT_SCAN_PASSES`] of them, at most [`MAX_SCAN_COUNT`] plus
/// hash ties (which go together, so the next call starts after them). O(n) per call.
pub fn hashed_step(
    hashes: impl Iterator<Item = u64>,
    n: usize,
    cursor: u64,
    count: usize,
) -> (Vec<usize>, u64) {
    let batch = count
        .max(n.div_ceil(ELEMENT_SCAN_PASSES))
        .clamp(1, MAX_SCAN_COUNT.max(1));
    let mut cands: Vec<(u64, usize)> = hashes
        .enumerate()
        .filter_map(|(i, h)| (h >= cursor).then_some((h, i)))
        .collect();
    let next = if cands.len() > batch {
        cands.select_nth_unstable_by(batch - 1, |a, b| a.0.cmp(&b.0));
        let bound = cands[batch - 1].0;
        let mut keep = batch;
        for i in batch..cands.len() {
            if cands[i].0 == bound {
                cands.swap(keep, i);
                keep += 1;
            }
        }
        cands.truncate(keep);
        bound.checked_add(1).unwrap_or(0)
    } else {
        0
    };
    cands.sort_unstable();
    (cands.into_iter().map(|(_, i)| i).collect(), next)
}

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// SCAN's arguments (HSCAN's after its key, see [`crate::hashes`]).
pub struct ScanArgs<'a> {
    /// Where the iteration resumes (0: from the start).
    pub cursor: u64,
    /// The MATCH pattern, unless it filters nothing.
    pub pattern: Option<&'a [u8]>,
    /// COUNT: how many elements to look at (a hint).
    pub count: usize,
    /// TYPE: `None` lists every type; `Some(Some(kind))` keys of that type; `Some(None)` a
    /// type Meridian never stores (list, set, zset, stream): nothing.
    pub kind: Option<Option<Kind>>,
}

/// A SCAN/HSCAN cursor: an unsigned decimal (Redis's `parseScanCursorOrReply`).
pub fn parse_cursor(a: &[u8]) -> Result<u64, CmdError> {
    std::str::from_utf8(a)
        .ok()
        .filter(|s| !s.starts_with(|c: char| c.is_ascii_whitespace()))
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| raw("ERR invalid cursor"))
}

/// Parses `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]` with Redis's rules and
/// messages.
pub fn parse_scan(args: Args<'_>) -> Result<ScanArgs<'_>, CmdError> {
    let cursor = parse_cursor(args.get(1))?;
    let mut pattern = None;
    let mut count = 10usize;
    let mut kind = None;
    let mut i = 2;
    while i < args.len() {
        let opt = args.get(i);
        if i + 1 >= args.len() {
            return Err(raw(SYNTAX));
        }
        let v = args.get(i + 1);
        if opt.eq_ignore_ascii_case(b"COUNT") {
            let n = int_arg(v)?;
            if n < 1 {
                return Err(raw(SYNTAX));
            }
            // (`usize::MAX as i64` is -1: a `min` with it made every COUNT unbounded.)
            count = usize::try_from(n).unwrap_or(usize::MAX);
        } else if opt.eq_ignore_ascii_case(b"MATCH") {
            pattern = Some(v);
        } else if opt.eq_ignore_ascii_case(b"TYPE") {
            const TYPES: [&[u8]; 6] = [b"string", b"list", b"set", b"zset", b"hash", b"stream"];
            if !TYPES.iter().any(|t| v.eq_ignore_ascii_case(t)) {
                return Err(raw(format!("ERR unknown type name '{}'", lossy(v))));
            }
            kind = Some(if v.eq_ignore_ascii_case(b"string") {
                Some(Kind::String)
            } else if v.eq_ignore_ascii_case(b"hash") {
                Some(Kind::Hash)
            } else {
                None
            });
        } else {
            return Err(raw(SYNTAX));
        }
        i += 2;
    }
    // A pattern of only `*` filters nothing.
    let pattern = pattern.filter(|p| !p.iter().all(|&c| c == b'*'));
    Ok(ScanArgs {
        cursor,
        pattern,
        count,
        kind,
    })
}

/// Writes SCAN's reply: the next cursor and the keys (`list`: false answers an empty list,
/// for a TYPE Meridian never stores).
pub fn scan_reply(reply: &mut Reply, next: u64, keys: &[Bytes], list: bool) {
    let mut buf = itoa::Buffer::new();
    reply.array(2);
    reply.bulk(buf.format(next).as_bytes());
    if list {
        reply.array(keys.len());
        for k in keys {
            reply.bulk(k);
        }
    } else {
        reply.array(0);
    }
}
