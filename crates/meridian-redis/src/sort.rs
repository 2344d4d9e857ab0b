//! SORT and SORT_RO over a [`View`]: reply for reply and error for error Redis 7.0's
//! (`sort.c`).
//!
//! `SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]
//! [STORE destination]` sorts the elements of a list, set or sorted set (a missing key sorts
//! as empty, another type is `-WRONGTYPE`), by the elements themselves or by the values the
//! BY pattern names, and answers the elements or the values the GET patterns name — or
//! stores them as a list at `destination` and answers their count. SORT_RO is SORT without
//! STORE.
//!
//! **Redis's rules kept**:
//!
//! - options are read left to right, case-insensitively; an option missing its arguments,
//!   an unknown word, or STORE in SORT_RO is `ERR syntax error`; LIMIT's numbers must be
//!   64-bit integers; all of this before the key is read;
//! - numeric sorting (the default) reads every sort key as C's `strtod` does and refuses
//!   the whole command with `ERR One or more scores can't be converted into double` when
//!   one does not read (trailing bytes, NaN, out of range); a BY key that does not exist
//!   sorts as 0. Equal scores are ordered by the elements' bytes;
//! - ALPHA compares bytes; with BY, a missing sort key sorts before every present one;
//! - a BY pattern without `*` (`BY nosort`) sorts nothing: a list keeps its order and a
//!   sorted set its score order, DESC reverses it and LIMIT counts from the chosen end; a
//!   set is sorted ALPHA anyway when the result is STOREd (so replicas agree);
//! - LIMIT clamps as Redis does (a negative offset is 0, a negative count is "all", an
//!   offset past the end is an empty result);
//! - a pattern is `#` (the element), or has its first `*` replaced by the element; a `->`
//!   after the `*` followed by at least one byte names a hash field. A key of another type,
//!   a missing field, or a pattern without `*` reads as nil (GET answers nil; STORE stores
//!   an empty string);
//! - STORE replaces `destination` whatever it held (dropping its TTL) with a list, or
//!   deletes it when the result is empty, and answers the stored length.
//!
//! **Where it departs**: ALPHA compares bytes where Redis uses `strcoll` (byte order is
//! what Redis does under the C locale, except that `strcoll` stops at a NUL byte). Elements
//! whose sort keys compare equal under ALPHA keep their source order (Redis's `qsort`
//! leaves it unspecified). A set's members are kept in byte order here, so SORT of a set
//! `BY nosort` answers them in that order (Redis answers its hash-table order), and a
//! script's `BY nosort` over a set is not forced to an ALPHA sort (this layer does not know
//! it runs in a script; byte order is deterministic anyway, but DESC is then ignored as it
//! is outside scripts). BY and GET patterns are not refused in cluster mode or by ACLs: the
//! backend makes pattern lookups work. A large object (a string key holding a manifest)
//! reads as its bytes when they are inline, as nil when stored in chunks (which only the
//! async paths can read). `strtod`'s underflow check flags every subnormal result (glibc
//! flags only inexact ones). A STOREd list must fit [`View::max_value_len`] (`ERR list
//! exceeds maximum allowed size (proto-max-bulk-len)`, nothing written).

use crate::args::Args;
use crate::command::Cmd;
use crate::error::{CmdError, CmdResult, RedisError, Result, SYNTAX, arity_error, int_arg, raw};
use crate::lists::encoding::{HEADER, elem_len, put_elem};
use crate::lists::start_list;
use crate::reply::Reply;
use crate::view::{EntryRef, Kind, View};
use bytes::Bytes;
use meridian_storage::StorageError;
use std::cmp::Ordering;

#[cfg(test)]
mod tests;

/// Redis's error when a numeric sort key does not read as a double.
const NOT_A_DOUBLE: &str = "ERR One or more scores can't be converted into double";

/// SORT's options, as parsed.
#[derive(Debug, Default)]
struct Options<'a> {
    /// The BY pattern, if any.
    by: Option<&'a [u8]>,
    /// A BY pattern without `*` was given: nothing is sorted.
    dont_sort: bool,
    /// LIMIT's offset and count (Redis's defaults: 0 and -1).
    offset: i64,
    count: i64,
    /// The GET patterns, in order.
    gets: Vec<&'a [u8]>,
    desc: bool,
    alpha: bool,
    /// STORE's destination.
    store: Option<&'a [u8]>,
}

/// Whether SORT/SORT_RO `args` name a hash field through a BY or GET pattern (`*->field`):
/// such a read may reach any key's hash, which a view that holds hashes in memory serves
/// only under that key's lock — so a backend runs the command with every key reachable
/// (the standalone keyspace locks every stripe). Arguments that do not parse answer false
/// (the command is refused before it reads anything).
pub fn reads_hash_fields(cmd: Cmd, args: Args<'_>) -> bool {
    matches!(cmd, Cmd::Sort | Cmd::SortRo)
        && parse(cmd, args).is_ok_and(|o| {
            o.by.into_iter()
                .chain(o.gets.iter().copied())
                .any(names_hash_field)
        })
}

/// Whether a BY/GET pattern names a hash field: a `->` after its `*` followed by a field
/// (`lookup`'s reading of it).
fn names_hash_field(pattern: &[u8]) -> bool {
    let searched = crate::error::until_nul(pattern);
    memchr::memchr(b'*', searched).is_some_and(|star| {
        memchr::memmem::find(&searched[star + 1..], b"->")
            .is_some_and(|f| pattern.get(star + 1 + f + 2).is_some_and(|&b| b != 0))
    })
}

fn parse(cmd: Cmd, args: Args<'_>) -> std::result::Result<Options<'_>, CmdError> {
    let mut o = Options {
        count: -1,
        ..Options::default()
    };
    let n = args.len();
    let mut j = 2;
    while j < n {
        let word = args.get(j);
        let left = n - j - 1;
        if word.eq_ignore_ascii_case(b"asc") {
            o.desc = false;
        } else if word.eq_ignore_ascii_case(b"desc") {
            o.desc = true;
        } else if word.eq_ignore_ascii_case(b"alpha") {
            o.alpha = true;
        } else if word.eq_ignore_ascii_case(b"limit") && left >= 2 {
            o.offset = int_arg(args.get(j + 1))?;
            o.count = int_arg(args.get(j + 2))?;
            j += 2;
        } else if cmd == Cmd::Sort && word.eq_ignore_ascii_case(b"store") && left >= 1 {
            o.store = Some(args.get(j + 1));
            j += 1;
        } else if word.eq_ignore_ascii_case(b"by") && left >= 1 {
            let pattern = args.get(j + 1);
            o.by = Some(pattern);
            // As `strchr`: a `*` after a NUL byte is not seen. Once set, `dont_sort` stays
            // set even if a later BY has a `*` (as in sort.c).
            if memchr::memchr(b'*', crate::error::until_nul(pattern)).is_none() {
                o.dont_sort = true;
            }
            j += 1;
        } else if word.eq_ignore_ascii_case(b"get") && left >= 1 {
            o.gets.push(args.get(j + 1));
            j += 1;
        } else {
            return Err(raw(SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

/// What was sorted: its elements in their native order, and whether that order means
/// something (a list's or a sorted set's) or not (a set's).
struct Source {
    elems: Vec<Bytes>,
    ordered: bool,
}

fn load_source(view: &mut dyn View, key: &[u8]) -> Result<Source> {
    let entry = view.load(key)?;
    view.count_read(key, entry.is_some());
    let Some(entry) = entry else {
        // Redis sorts a missing key as an empty list.
        return Ok(Source {
            elems: Vec::new(),
            ordered: true,
        });
    };
    match entry.kind {
        Kind::List => {
            let list = crate::lists::decode(entry)?;
            let raw = list.raw()?;
            let mut elems = Vec::new();
            for e in raw.elems() {
                let e = e?;
                elems.push(list.data.slice(HEADER + e.start..HEADER + e.end));
            }
            Ok(Source {
                elems,
                ordered: true,
            })
        }
        Kind::Set => Ok(Source {
            elems: crate::sets::members(&entry)?,
            ordered: false,
        }),
        Kind::ZSet => {
            let z = crate::zsets::decode(&entry)?;
            Ok(Source {
                elems: z.iter().map(|(_, m)| Bytes::copy_from_slice(m)).collect(),
                ordered: true,
            })
        }
        _ => Err(RedisError::WrongType),
    }
}

/// The value `pattern` names for `elem` (`lookupKeyByPattern`): `#` is the element; else the
/// first `*` is replaced by the element, and a `->` after it followed by a field names a
/// hash field. `None` when the pattern has no `*`, the key is missing or of another type,
/// or the field is missing.
///
/// Searches stop at a NUL byte, as C's `strchr`/`strstr` do on the pattern.
fn lookup(view: &mut dyn View, pattern: &[u8], elem: &Bytes) -> Result<Option<Bytes>> {
    if pattern.first() == Some(&b'#') && pattern.get(1).is_none_or(|&b| b == 0) {
        return Ok(Some(elem.clone()));
    }
    let searched = crate::error::until_nul(pattern);
    let Some(star) = memchr::memchr(b'*', searched) else {
        return Ok(None);
    };
    let arrow = memchr::memmem::find(&searched[star + 1..], b"->")
        .map(|i| star + 1 + i)
        .filter(|&f| pattern.get(f + 2).is_some_and(|&b| b != 0));
    let (postfix, field) = match arrow {
        Some(f) => (&pattern[star + 1..f], Some(&pattern[f + 2..])),
        None => (&pattern[star + 1..], None),
    };
    let mut key = Vec::with_capacity(star + elem.len() + postfix.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(elem);
    key.extend_from_slice(postfix);

    if let Some(field) = field {
        // Through the collection, so a hash the view holds in memory is not materialized.
        let read = crate::collection::read(view, &key, |h: &crate::hashes::Hash| {
            Ok(h.get(field).map(Bytes::copy_from_slice))
        });
        return match read {
            Ok(value) => Ok(value.flatten()),
            Err(RedisError::WrongType | RedisError::Storage(StorageError::KeyTooLarge { .. })) => {
                Ok(None)
            }
            Err(e) => Err(e),
        };
    }
    let entry = match view.load(&key) {
        Ok(e) => e,
        // A key longer than the store accepts cannot exist.
        Err(RedisError::Storage(StorageError::KeyTooLarge { .. })) => None,
        Err(e) => return Err(e),
    };
    view.count_read(&key, entry.is_some());
    let Some(entry) = entry else {
        return Ok(None);
    };
    Ok(match entry.kind {
        Kind::String => crate::large_object::shown_now(entry.data).ok(),
        _ => None,
    })
}

/// C's `isspace` in the C locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// A sort key read as sort.c reads it: `strtod` must consume everything up to the end (or a
/// NUL byte), without ERANGE, and not yield NaN. The empty string reads as 0 (`strtod`
/// converts nothing and stops at the terminator).
fn parse_score(b: &[u8]) -> Option<f64> {
    let s = crate::error::until_nul(b);
    if s.is_empty() {
        return Some(0.0);
    }
    let t = &s[s.iter().position(|&c| !is_c_space(c))?..];
    let (negative, body) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let magnitude = if body.len() > 2 && body[0] == b'0' && body[1].eq_ignore_ascii_case(&b'x') {
        parse_hex(&body[2..])?
    } else {
        parse_decimal(body)?
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// An unsigned decimal float, `inf`/`infinity`, or `nan` (refused): C's grammar, which Rust's
/// parser shares for these forms. Overflow and underflow are refused (`ERANGE`).
fn parse_decimal(body: &[u8]) -> Option<f64> {
    // Rust would take a sign here too: there must be none left.
    if matches!(body.first(), Some(b'+' | b'-')) {
        return None;
    }
    let v: f64 = std::str::from_utf8(body).ok()?.parse().ok()?;
    let literal_inf = body.first().is_some_and(|c| c.eq_ignore_ascii_case(&b'i'));
    let mantissa = body
        .iter()
        .position(|c| c.eq_ignore_ascii_case(&b'e'))
        .map_or(body, |e| &body[..e]);
    let nonzero = mantissa.iter().any(|c| (b'1'..=b'9').contains(c));
    in_range(v, literal_inf, nonzero)
}

/// The digits of a hexadecimal float after `0x`: `h+[.h*]` or `.h+`, then an optional
/// `p[+-]d+`. The first 30 significant digits are kept (more cannot change an `f64` beyond
/// a sticky bit).
fn parse_hex(s: &[u8]) -> Option<f64> {
    let mut mantissa: u128 = 0;
    let mut kept = 0u32;
    let mut sticky = false;
    let mut exp: i64 = 0;
    let mut digits = 0usize;
    let mut seen_dot = false;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == b'.' && !seen_dot {
            seen_dot = true;
        } else if let Some(d) = (c as char).to_digit(16) {
            digits += 1;
            if mantissa == 0 && d == 0 {
                if seen_dot {
                    exp -= 4;
                }
            } else if kept < 30 {
                mantissa = (mantissa << 4) | u128::from(d);
                kept += 1;
                if seen_dot {
                    exp -= 4;
                }
            } else {
                sticky |= d != 0;
                if !seen_dot {
                    exp += 4;
                }
            }
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    if i < s.len() {
        if !s[i].eq_ignore_ascii_case(&b'p') {
            return None;
        }
        let e = &s[i + 1..];
        let (neg, ds) = match e.first() {
            Some(b'-') => (true, &e[1..]),
            Some(b'+') => (false, &e[1..]),
            _ => (false, e),
        };
        if ds.is_empty() || !ds.iter().all(u8::is_ascii_digit) {
            return None;
        }
        // Saturate: anything past a few thousand is already out of range.
        let mut n: i64 = 0;
        for d in ds {
            n = (n * 10 + i64::from(*d - b'0')).min(1 << 20);
        }
        exp += if neg { -n } else { n };
    }
    let nonzero = mantissa != 0;
    if sticky {
        mantissa |= 1;
    }
    // `as` rounds to nearest; the scaling by a power of two is exact in the normal range.
    let mut v = mantissa as f64;
    let mut e = exp.clamp(-5000, 5000) as i32;
    while e != 0 {
        let step = e.clamp(-1000, 1000);
        v *= 2f64.powi(step);
        e -= step;
    }
    in_range(v, false, nonzero)
}

/// Refuses NaN, an overflow to infinity (not a literal `inf`) and an underflow (a zero or a
/// subnormal from non-zero digits), as `strtod`'s `ERANGE`.
fn in_range(v: f64, literal_inf: bool, nonzero: bool) -> Option<f64> {
    if v.is_nan() || (v.is_infinite() && !literal_inf) {
        return None;
    }
    if nonzero && (v == 0.0 || v.abs() < f64::MIN_POSITIVE) {
        return None;
    }
    Some(v)
}

/// The output range after Redis's LIMIT clamping: `(start, len)` into a vector of `n`.
fn limit_range(offset: i64, count: i64, n: usize) -> (usize, usize) {
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    let mut start = offset.clamp(0, n);
    let count = count.clamp(-1, n);
    let mut end = if count < 0 { n - 1 } else { start + count - 1 };
    if start >= n {
        start = n - 1;
        end = n - 2;
    }
    end = end.min(n - 1);
    let len = (end - start + 1).max(0);
    // Both are within 0..=n when len > 0.
    (
        usize::try_from(start.max(0)).unwrap_or(0),
        usize::try_from(len).unwrap_or(0),
    )
}

/// Sorts `elems` per the options; `Err` with Redis's message when a numeric key does not
/// read.
fn sort(
    view: &mut dyn View,
    o: &Options<'_>,
    elems: Vec<Bytes>,
) -> std::result::Result<Vec<Bytes>, CmdError> {
    let dir = |ord: Ordering| if o.desc { ord.reverse() } else { ord };
    if o.alpha {
        match o.by {
            None => {
                let mut elems = elems;
                elems.sort_by(|a, b| dir(a.cmp(b)));
                Ok(elems)
            }
            Some(by) => {
                let mut keyed = Vec::with_capacity(elems.len());
                for e in elems {
                    let k = lookup(view, by, &e)?;
                    keyed.push((k, e));
                }
                // `None` (no key) sorts first: `Option`'s order.
                keyed.sort_by(|a, b| dir(a.0.cmp(&b.0)));
                Ok(keyed.into_iter().map(|(_, e)| e).collect())
            }
        }
    } else {
        let mut keyed = Vec::with_capacity(elems.len());
        let mut bad = false;
        for e in elems {
            let score = match o.by {
                None => parse_score(&e),
                Some(by) => match lookup(view, by, &e)? {
                    None => Some(0.0),
                    Some(v) => parse_score(&v),
                },
            };
            bad |= score.is_none();
            keyed.push((score.unwrap_or(0.0), e));
        }
        if bad {
            return Err(raw(NOT_A_DOUBLE));
        }
        keyed.sort_by(|a, b| {
            dir(a
                .0
                .partial_cmp(&b.0)
                .unwrap_or(Ordering::Equal)
                .then_with(|| a.1.cmp(&b.1)))
        });
        Ok(keyed.into_iter().map(|(_, e)| e).collect())
    }
}

/// Executes SORT or SORT_RO over `view`.
pub fn exec_on_view(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    if args.len() < 2 {
        return Err(arity_error(cmd.spec().name));
    }
    let mut o = parse(cmd, args)?;
    let source = load_source(view, args.get(1))?;

    // A set has no order of its own: when the result is stored, sort it ALPHA so that the
    // stored list does not depend on a hash table's order.
    if o.dont_sort && !source.ordered && o.store.is_some() {
        o.dont_sort = false;
        o.alpha = true;
        o.by = None;
    }

    let (start, len) = limit_range(o.offset, o.count, source.elems.len());
    let chosen: Vec<Bytes> = if o.dont_sort {
        if source.ordered && o.desc {
            source
                .elems
                .into_iter()
                .rev()
                .skip(start)
                .take(len)
                .collect()
        } else {
            // A list or sorted set ascending, or a set (DESC means nothing unsorted).
            source.elems.into_iter().skip(start).take(len).collect()
        }
    } else {
        let sorted = sort(view, &o, source.elems)?;
        sorted.into_iter().skip(start).take(len).collect()
    };

    // The values answered or stored: the elements, or one value per GET per element.
    let mut out: Vec<Option<Bytes>> = Vec::new();
    let mut body = 0usize;
    let max_body = view.max_value_len().saturating_sub(HEADER);
    for e in chosen {
        if o.gets.is_empty() {
            body = body.saturating_add(elem_len(e.len()));
            out.push(Some(e));
        } else {
            for pattern in &o.gets {
                let v = lookup(view, pattern, &e)?;
                body = body.saturating_add(elem_len(v.as_ref().map_or(0, Bytes::len)));
                out.push(v);
            }
        }
        if o.store.is_some() && body > max_body {
            return Err(RedisError::CollectionTooLarge("list").into());
        }
    }

    match o.store {
        None => {
            reply.array(out.len());
            for v in &out {
                reply.opt_bulk(v.as_deref());
            }
        }
        Some(dest) => {
            if out.is_empty() {
                view.store(dest, None)?;
            } else {
                let mut data = start_list(out.len(), body, view.max_value_len())?;
                for v in &out {
                    put_elem(&mut data, v.as_deref().unwrap_or_default());
                }
                view.store(
                    dest,
                    Some(EntryRef {
                        data: &data,
                        expiry: None,
                        kind: Kind::List,
                    }),
                )?;
            }
            reply.int(i64::try_from(out.len()).unwrap_or(i64::MAX));
        }
    }
    Ok(())
}
