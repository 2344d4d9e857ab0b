//! `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]`: the longest common
//! subsequence of two string values, Redis 7's command reply for reply — the subsequence, its
//! length, or the matched ranges (walked from the strings' ends, as Redis walks them) with
//! the length.
//!
//! What it guarantees: a missing key is the empty string; a key of another type answers
//! `ERR The specified keys must contain string values` (checked before the options, as
//! Redis); LEN with IDX is refused. The work is Redis's dynamic program: a table of
//! `(len₁+1)·(len₂+1)` 32-bit cells, O(len₁·len₂) time — refused, before anything is
//! allocated, when the table would exceed the view's longest value (Redis's
//! `proto-max-bulk-len`) with Redis's own error; a large object's chunked value is refused as
//! GETRANGE refuses it.

use crate::args::Args;
use crate::error::{CmdError, RedisError, SYNTAX, int_arg, raw};
use crate::large_object;
use crate::reply::Reply;
use crate::view::{Kind, View};
use bytes::Bytes;

/// LCS's options.
#[derive(Debug, Default, PartialEq, Eq)]
struct Options {
    len: bool,
    idx: bool,
    with_match_len: bool,
    min_match_len: u64,
}

/// One matched range: where it starts and ends in each string (inclusive).
#[derive(Debug, PartialEq, Eq)]
struct Range {
    a: (usize, usize),
    b: (usize, usize),
}

/// Runs LCS over `view` and writes its reply.
pub fn exec_on_view(
    args: Args<'_>,
    view: &mut dyn View,
    reply: &mut Reply,
) -> Result<(), CmdError> {
    if args.len() < 3 {
        return Err(crate::error::arity_error("lcs"));
    }
    let a = value(view, args.get(1))?;
    let b = value(view, args.get(2))?;
    let o = options(args)?;
    if o.idx && o.len {
        return Err(raw(
            "ERR If you want both the length and indexes, please just use IDX.",
        ));
    }
    let cells = (a.len() as u128 + 1) * (b.len() as u128 + 1);
    if cells * 4 > view.max_value_len() as u128 {
        return Err(raw(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let table = Table::new(&a, &b);
    if o.len && !o.idx {
        reply.int(i64::from(table.len()));
        return Ok(());
    }
    let (common, ranges) = table.walk(&a, &b, o.min_match_len);
    if !o.idx {
        reply.bulk(&common);
        return Ok(());
    }
    reply.map(2);
    reply.bulk(b"matches");
    reply.array(ranges.len());
    for r in &ranges {
        reply.array(if o.with_match_len { 3 } else { 2 });
        for (start, end) in [r.a, r.b] {
            reply.array(2);
            reply.int(start as i64);
            reply.int(end as i64);
        }
        if o.with_match_len {
            reply.int((r.a.1 - r.a.0 + 1) as i64);
        }
    }
    reply.bulk(b"len");
    reply.int(i64::from(table.len()));
    Ok(())
}

/// The string at `key` (empty when missing), or Redis's error for another type.
fn value(view: &mut dyn View, key: &[u8]) -> Result<Bytes, CmdError> {
    let e = view.load(key)?;
    view.count_read(key, e.is_some());
    match e {
        None => Ok(Bytes::new()),
        Some(e) if e.kind != Kind::String => {
            Err(raw("ERR The specified keys must contain string values"))
        }
        Some(e) => match large_object::object_size(&e.data) {
            Some(size) => Err(RedisError::LargeObject { cmd: "LCS", size }.into()),
            None => Ok(e.data),
        },
    }
}

fn options(args: Args<'_>) -> Result<Options, CmdError> {
    let mut o = Options::default();
    let mut j = 3;
    while j < args.len() {
        let opt = args.get(j);
        let more = j + 1 < args.len();
        if opt.eq_ignore_ascii_case(b"IDX") {
            o.idx = true;
        } else if opt.eq_ignore_ascii_case(b"LEN") {
            o.len = true;
        } else if opt.eq_ignore_ascii_case(b"WITHMATCHLEN") {
            o.with_match_len = true;
        } else if opt.eq_ignore_ascii_case(b"MINMATCHLEN") && more {
            // A negative length is 0, as Redis reads it.
            o.min_match_len = u64::try_from(int_arg(args.get(j + 1))?).unwrap_or(0);
            j += 1;
        } else {
            return Err(raw(SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

/// The dynamic program's table: cell `(i, j)` is the LCS length of `a[..i]` and `b[..j]`.
struct Table {
    cells: Vec<u32>,
    width: usize,
}

impl Table {
    /// Fills the table, O(len₁·len₂). The caller bounds its size first.
    fn new(a: &[u8], b: &[u8]) -> Self {
        let width = b.len() + 1;
        let mut cells = vec![0u32; (a.len() + 1) * width];
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                cells[i * width + j] = if a[i - 1] == b[j - 1] {
                    cells[(i - 1) * width + j - 1] + 1
                } else {
                    cells[(i - 1) * width + j].max(cells[i * width + j - 1])
                };
            }
        }
        Table { cells, width }
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.cells[i * self.width + j]
    }

    /// The LCS length.
    fn len(&self) -> u32 {
        self.cells.last().copied().unwrap_or(0)
    }

    /// Walks back from the strings' ends, as Redis does: the common subsequence, and the
    /// contiguous matched ranges of at least `min_len` bytes (0: all) in the order the walk
    /// closes them (from the ends towards the starts).
    fn walk(&self, a: &[u8], b: &[u8], min_len: u64) -> (Vec<u8>, Vec<Range>) {
        let mut common = vec![0u8; self.len() as usize];
        let mut k = common.len();
        let mut ranges = Vec::new();
        // The range being extended backwards, if any.
        let mut current: Option<Range> = None;
        let (mut i, mut j) = (a.len(), b.len());
        while i > 0 && j > 0 {
            let mut emit = false;
            if a[i - 1] == b[j - 1] {
                k -= 1;
                common[k] = a[i - 1];
                match &mut current {
                    None => {
                        current = Some(Range {
                            a: (i - 1, i - 1),
                            b: (j - 1, j - 1),
                        })
                    }
                    Some(r) if r.a.0 == i && r.b.0 == j => {
                        r.a.0 -= 1;
                        r.b.0 -= 1;
                    }
                    Some(_) => emit = true,
                }
                // A match with either string's first byte ends the walk: close the range.
                emit |= current.as_ref().is_some_and(|r| r.a.0 == 0 || r.b.0 == 0);
                i -= 1;
                j -= 1;
            } else {
                if self.at(i - 1, j) > self.at(i, j - 1) {
                    i -= 1;
                } else {
                    j -= 1;
                }
                emit = current.is_some();
            }
            if emit
                && let Some(r) = current.take()
                && (r.a.1 - r.a.0 + 1) as u64 >= min_len
            {
                ranges.push(r);
            }
        }
        (common, ranges)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OwnedArgs;
    use crate::test_view::TestView;
    use crate::view::EntryRef;

    fn run(v: &mut TestView, line: &str, resp3: bool) -> String {
        let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let owned = OwnedArgs::from_slices(parts.iter().copied());
        let mut reply = Reply::new(64);
        reply.resp3 = resp3;
        if let Err(e) = exec_on_view(owned.get(), v, &mut reply) {
            reply.command_error(e);
        }
        String::from_utf8(reply.out.to_vec()).unwrap()
    }

    fn view() -> TestView {
        let mut v = TestView::new();
        v.store(b"virus1", Some(EntryRef::string(b"ohmytext", None)))
            .unwrap();
        v.store(b"virus2", Some(EntryRef::string(b"mynewtext", None)))
            .unwrap();
        v
    }

    /// Redis's own documentation examples, reply for reply.
    #[test]
    fn answers_as_redis_documents() {
        let mut v = view();
        assert_eq!(run(&mut v, "LCS virus1 virus2", false), "$6\r\nmytext\r\n");
        assert_eq!(run(&mut v, "LCS virus1 virus2 LEN", false), ":6\r\n");
        assert_eq!(
            run(&mut v, "LCS virus1 virus2 IDX", false),
            "*4\r\n$7\r\nmatches\r\n*2\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n\
             *2\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n$3\r\nlen\r\n:6\r\n"
        );
        assert_eq!(
            run(
                &mut v,
                "LCS virus1 virus2 IDX MINMATCHLEN 4 WITHMATCHLEN",
                true
            ),
            "%2\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n\
             $3\r\nlen\r\n:6\r\n"
        );
    }

    #[test]
    fn missing_keys_types_options_and_bounds() {
        let mut v = view();
        assert_eq!(run(&mut v, "LCS nokey virus1", false), "$0\r\n\r\n");
        assert_eq!(run(&mut v, "LCS nokey other LEN", false), ":0\r\n");
        v.store(
            b"h",
            Some(EntryRef {
                data: b"",
                expiry: None,
                kind: Kind::Hash,
            }),
        )
        .unwrap();
        let wrong = "-ERR The specified keys must contain string values\r\n";
        assert_eq!(run(&mut v, "LCS virus1 h", false), wrong);
        assert_eq!(
            run(&mut v, "LCS h virus1 BADOPT", false),
            wrong,
            "type first"
        );
        assert_eq!(
            run(&mut v, "LCS virus1 virus2 BADOPT", false),
            "-ERR syntax error\r\n"
        );
        assert_eq!(
            run(&mut v, "LCS virus1 virus2 MINMATCHLEN", false),
            "-ERR syntax error\r\n"
        );
        assert_eq!(
            run(&mut v, "LCS virus1 virus2 MINMATCHLEN x", false),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(
            run(&mut v, "LCS virus1 virus2 LEN IDX", false),
            "-ERR If you want both the length and indexes, please just use IDX.\r\n"
        );
        v.max = 64;
        assert_eq!(
            run(&mut v, "LCS virus1 virus2", false),
            "-ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len\r\n",
            "9 × 10 cells of 4 bytes exceed 64"
        );
    }

    /// The walk's subsequence is common to both strings and as long as the table says, and
    /// the ranges are real matches, against a brute-force check on small random strings.
    #[test]
    fn the_walk_agrees_with_the_table() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..500 {
            let a: Vec<u8> = (0..rng.random_range(0..12))
                .map(|_| rng.random_range(b'a'..b'd'))
                .collect();
            let b: Vec<u8> = (0..rng.random_range(0..12))
                .map(|_| rng.random_range(b'a'..b'd'))
                .collect();
            let t = Table::new(&a, &b);
            let (common, ranges) = t.walk(&a, &b, 0);
            assert_eq!(common.len(), t.len() as usize);
            for s in [&a, &b] {
                let mut it = s.iter();
                assert!(
                    common.iter().all(|c| it.any(|x| x == c)),
                    "{common:?} in {s:?}"
                );
            }
            let matched: usize = ranges.iter().map(|r| r.a.1 - r.a.0 + 1).sum();
            assert_eq!(matched, common.len(), "the ranges cover the subsequence");
            for r in &ranges {
                assert_eq!(a[r.a.0..=r.a.1], b[r.b.0..=r.b.1]);
            }
        }
    }
}
