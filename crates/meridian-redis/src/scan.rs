//! SCAN's arguments and reply, shared by SCAN, HSCAN and every backend's scan: cursors are
//! unsigned decimals, COUNT is at least 1, TYPE names one of Redis's types.

use crate::args::Args;
use crate::error::{CmdError, SYNTAX, int_arg, raw};
use crate::reply::Reply;
use bytes::Bytes;
use meridian_core::envelope::Kind;

/// Most elements a single SCAN call gathers, whatever its COUNT.
pub const MAX_SCAN_COUNT: usize = 100_000;

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
