//! Redis geo-command semantics over a [`View`]: GEOADD, GEODIST, GEOHASH, GEOPOS,
//! GEORADIUS, GEORADIUSBYMEMBER (with STORE/STOREDIST), GEORADIUS_RO,
//! GEORADIUSBYMEMBER_RO, GEOSEARCH and GEOSEARCHSTORE, reply for reply and error for error
//! Redis 7.0.15's (`geo.c`).
//!
//! **A geo index is a sorted set** ([`Kind::ZSet`], stored with the sorted-set module's
//! [`encoding`](crate::zsets::encoding)): each member's score is the 52-bit interleaved
//! geohash Redis computes ([`hash`]), so ZSCORE, ZRANGE ... WITHSCORES and ZREM work on a geo
//! key and give Redis's numbers, and GEOADD is ZADD ([`crate::zsets::zadd`]) with scores
//! computed from coordinates: it keeps the key's TTL, changes a held index in place, and on a
//! view of bytes refuses a set larger than [`View::max_value_len`] as ZADD does. Reads go
//! through [`collection::read`] (the held index itself, or one decoded from bytes); a search
//! finds each cell's first member in O(log n).
//!
//! **Searches** ([`search`]) follow Redis's algorithm, not a brute-force filter: a cell step
//! estimated from the radius, the centre cell and its eight neighbours (those the shape's
//! bounding box reaches), each scanned as a range of scores, every member's decoded
//! position tested against the circle (Haversine on Redis's sphere of radius 6372797.560856 m)
//! or the box. Every formula keeps Redis's order of `f64` operations, so the members found,
//! their order before sorting, and the distances are Redis's (points within a rounding error
//! of the edge included). COUNT without ANY sorts nearest first; ANY stops at COUNT members
//! found in cell order.
//!
//! **Replies** are Redis 7.0's: distances as `%.4f` bulk strings (both protocols),
//! coordinates as `addReplyHumanLongDouble` writes them (`%.17Lf` without trailing zeros; a
//! bulk string in RESP2, a double in RESP3), hashes as integers, a missing GEOPOS member as
//! the null array. Argument checks run in Redis's order: a search's source key type first,
//! then its centre and radius, then each option in turn (errors of the option's own
//! arguments as they come), then the STORE/WITH*, FROM*, BY* and ANY/COUNT conflicts, then
//! the search. Every read counts a keyspace hit or miss on its source key.
//!
//! **Checked against Redis itself**: the tests replay several hundred commands recorded from
//! a real Redis 7.0.15 (`geo/redis-7.0.15-replies.txt`, by `geo/record_redis_replies.py`:
//! random searches of every kind and option, the poles' limits, the antimeridian, errors),
//! whose replies must match byte for byte.
//!
//! **STORE/STOREDIST/GEOSEARCHSTORE** write the members found (after COUNT) as a new sorted
//! set — geohash scores, or distances in the request's unit — replacing the destination and
//! its TTL whatever its type; an empty result deletes the destination.
//!
//! **Hostile input**: coordinates, radii and sizes are parsed as Redis's `strtod` reads them
//! (NaN refused, infinities accepted and handled as Redis does: an infinite radius covers
//! the index); COUNT is any positive 64-bit integer and allocates nothing by itself; no
//! argument can make a loop run long or a computation panic.
//!
//! **Where it departs**: sorting by distance is stable where Redis's `qsort`/`pqsort` are
//! not, so members at exactly the same distance keep their search order (Redis may answer
//! them in another order, with COUNT even another subset); a score that is no geohash (set
//! by ZADD) is read as Redis's `(uint64_t)` and `(long long)` casts read it on x86-64
//! (where C leaves them undefined): GEOPOS, GEOHASH and WITHHASH answer what Redis 7.0.15
//! on x86-64 answers. The
//! longitude/latitude error formats its values with Rust's `{:.6}`, which is C's `%f` for
//! every finite and infinite value.

mod hash;
mod helper;
mod search;

use crate::args::Args;
use crate::collection;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, CmdResult, Result, SYNTAX, arity_error, int_arg, raw};
use crate::reply::Reply;
use crate::value::parse_f64;
use crate::view::View;
use crate::zsets::{self, Score, ZSet, ZaddFlags};
use bytes::BufMut;
use helper::{Extent, Shape};
use search::Found;

type ArgResult<T> = std::result::Result<T, CmdError>;

/// Whether this module runs `cmd`: every geo command.
pub fn handles(cmd: Cmd) -> bool {
    cmd.group() == Group::Geo
}

/// Executes a geo command (one [`handles`] accepts) against `view`, writing its reply in the
/// client's protocol; an error is returned for the caller to write. Arity is checked again
/// here, so a caller that did not check gets Redis's error, never a panic.
pub fn exec_on_view(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    let name = cmd.spec().name;
    if !cmd.spec().arity_ok(args.len()) {
        return Err(arity_error(name));
    }
    match cmd {
        Cmd::Geoadd => geoadd(view, args, reply),
        Cmd::Geodist => geodist(view, args, reply),
        Cmd::Geohash => geohash(view, args, reply),
        Cmd::Geopos => geopos(view, args, reply),
        Cmd::Georadius => radius_generic(view, args, reply, Variant::Radius { ro: false }),
        Cmd::GeoradiusRo => radius_generic(view, args, reply, Variant::Radius { ro: true }),
        Cmd::Georadiusbymember => {
            radius_generic(view, args, reply, Variant::ByMember { ro: false })
        }
        Cmd::GeoradiusbymemberRo => {
            radius_generic(view, args, reply, Variant::ByMember { ro: true })
        }
        Cmd::Geosearch => radius_generic(view, args, reply, Variant::Search { store: false }),
        Cmd::Geosearchstore => radius_generic(view, args, reply, Variant::Search { store: true }),
        other => Err(raw(format!(
            "ERR {} is not a geo command",
            other.spec().name.to_ascii_uppercase()
        ))),
    }
}

// ----- loading and storing ---------------------------------------------------------------

/// Runs the read `f` over the index at `key` (`None` when absent), counting a hit or a miss:
/// the view's held sorted set itself, or one decoded from its bytes.
fn read<R>(view: &mut dyn View, key: &[u8], f: impl FnOnce(&ZSet) -> R) -> Result<Option<R>> {
    collection::read::<ZSet, _, _>(view, key, |z| Ok(f(z)))
}

/// The scores of `members` in the index at `key` (`None` when the key is absent).
fn scores<'a>(
    view: &mut dyn View,
    key: &[u8],
    members: impl Iterator<Item = &'a [u8]>,
) -> Result<Option<Vec<Option<f64>>>> {
    read(view, key, |z| members.map(|m| z.score(m)).collect())
}

// ----- argument helpers ------------------------------------------------------------------

/// A float argument (`strtod`'s grammar, NaN refused), or `msg`'s error.
fn float_arg(a: &[u8], msg: &'static str) -> ArgResult<f64> {
    parse_f64(a).ok_or_else(|| raw(msg))
}

const NOT_A_FLOAT: &str = "ERR value is not a valid float";

/// A longitude and latitude pair (Redis's `extractLongLatOrReply`).
fn lon_lat_arg(lon: &[u8], lat: &[u8]) -> ArgResult<(f64, f64)> {
    let lon = float_arg(lon, NOT_A_FLOAT)?;
    let lat = float_arg(lat, NOT_A_FLOAT)?;
    if !hash::valid_lon_lat(lon, lat) {
        return Err(raw(format!(
            "ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"
        )));
    }
    Ok((lon, lat))
}

/// A unit's size in metres (Redis's `extractUnitOrReply`).
fn unit_arg(u: &[u8]) -> ArgResult<f64> {
    let units: [(&[u8], f64); 4] = [
        (b"m", 1.0),
        (b"km", 1000.0),
        (b"ft", 0.3048),
        (b"mi", 1609.34),
    ];
    units
        .iter()
        .find(|(n, _)| u.eq_ignore_ascii_case(n))
        .map(|&(_, m)| m)
        .ok_or_else(|| raw("ERR unsupported unit provided. please use M, KM, FT, MI"))
}

/// `radius unit` (Redis's `extractDistanceOrReply`): (radius, metres per unit).
fn radius_arg(radius: &[u8], unit: &[u8]) -> ArgResult<(f64, f64)> {
    let r = float_arg(radius, "ERR need numeric radius")?;
    if r < 0.0 {
        return Err(raw("ERR radius cannot be negative"));
    }
    Ok((r, unit_arg(unit)?))
}

/// `width height unit` (Redis's `extractBoxOrReply`): (width, height, metres per unit).
fn box_arg(w: &[u8], h: &[u8], unit: &[u8]) -> ArgResult<(f64, f64, f64)> {
    let w = float_arg(w, "ERR need numeric width")?;
    let h = float_arg(h, "ERR need numeric height")?;
    if h < 0.0 || w < 0.0 {
        return Err(raw("ERR height or width cannot be negative"));
    }
    Ok((w, h, unit_arg(unit)?))
}

// ----- reply formats ---------------------------------------------------------------------

/// A distance as Redis writes it (`fixedpoint_d2string(..., 4)`: rounded to nearest, ties to
/// even, with four decimals), a bulk string in both protocols.
fn reply_distance(reply: &mut Reply, d: f64) {
    reply.bulk(format_distance(d).as_bytes());
}

/// `%.4f` as Redis's `fixedpoint_d2string` computes it: `llrint(d * 10000)` then the digits.
fn format_distance(d: f64) -> String {
    if d == 0.0 {
        return "0.0000".to_string();
    }
    // Saturates where C's llrint is undefined (no distance gets near).
    let scaled = (d * 10000.0).round_ties_even() as i64;
    let sign = if scaled < 0 { "-" } else { "" };
    let v = scaled.unsigned_abs();
    format!("{sign}{}.{:04}", v / 10000, v % 10000)
}

/// A coordinate as Redis's `addReplyHumanLongDouble` writes it: `%.17Lf` without trailing
/// zeros (`-0` as `0`), a bulk string in RESP2, a double in RESP3.
fn reply_coord(reply: &mut Reply, v: f64) {
    let text = format_human(v);
    if reply.resp3 {
        reply.out.put_u8(b',');
        reply.out.put_slice(text.as_bytes());
        reply.out.put_slice(b"\r\n");
    } else {
        reply.bulk(text.as_bytes());
    }
}

fn format_human(v: f64) -> String {
    let s = format!("{v:.17}");
    let t = if s.contains('.') {
        let t = s.trim_end_matches('0');
        t.strip_suffix('.').unwrap_or(t)
    } else {
        &s
    };
    if t == "-0" {
        "0".to_string()
    } else {
        t.to_string()
    }
}

// ----- GEOADD, GEODIST, GEOHASH, GEOPOS --------------------------------------------------

/// `GEOADD key [NX|XX] [CH] longitude latitude member [...]`: every pair is checked before
/// the key is looked at, then it is ZADD with the pairs' geohash scores.
fn geoadd(view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let key = args.get(1);
    let mut flags = ZaddFlags::default();
    let mut ch = false;
    let mut i = 2;
    while i < args.len() {
        let o = args.get(i);
        if o.eq_ignore_ascii_case(b"NX") {
            flags.nx = true;
        } else if o.eq_ignore_ascii_case(b"XX") {
            flags.xx = true;
        } else if o.eq_ignore_ascii_case(b"CH") {
            ch = true;
        } else {
            break;
        }
        i += 1;
    }
    let rest = args.len() - i;
    // No triple at all is ZADD's syntax error in Redis (GEOADD passes it on).
    if rest == 0 || !rest.is_multiple_of(3) || (flags.nx && flags.xx) {
        return Err(raw(SYNTAX));
    }
    let mut pairs = Vec::with_capacity(rest / 3);
    for j in (i..args.len()).step_by(3) {
        let (lon, lat) = lon_lat_arg(args.get(j), args.get(j + 1))?;
        // A pair that passed the check always encodes.
        let bits = hash::score_of(lon, lat).unwrap_or(0);
        pairs.push((bits as f64, args.get(j + 2)));
    }
    let out = zsets::zadd(view, key, flags, &pairs)?;
    let n = if ch {
        out.added + out.updated
    } else {
        out.added
    };
    reply.int(i64::try_from(n).unwrap_or(i64::MAX));
    Ok(())
}

/// `GEODIST key member1 member2 [unit]`: the unit is checked before the key; null when the
/// key or either member is missing.
fn geodist(view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let to_m = match args.len() {
        4 => 1.0,
        5 => unit_arg(args.get(4))?,
        _ => return Err(raw(SYNTAX)),
    };
    let Some(found) = scores(view, args.get(1), args.iter_from(2).take(2))? else {
        reply.null();
        return Ok(());
    };
    match found[..] {
        [Some(a), Some(b)] => {
            let (lon1, lat1) = hash::decode_score(a);
            let (lon2, lat2) = hash::decode_score(b);
            reply_distance(reply, helper::distance(lon1, lat1, lon2, lat2) / to_m);
        }
        _ => reply.null(),
    }
    Ok(())
}

/// `GEOHASH key member [...]`: each member's 11-character standard geohash, or null.
fn geohash(view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let found = scores(view, args.get(1), args.iter_from(2))?;
    reply.array(args.len() - 2);
    for i in 0..args.len() - 2 {
        match found.as_ref().and_then(|f| f.get(i).copied().flatten()) {
            Some(s) => reply.bulk(&hash::geohash_string(s)),
            None => reply.null(),
        }
    }
    Ok(())
}

/// `GEOPOS key member [...]`: each member's decoded `[longitude, latitude]`, or the null
/// array.
fn geopos(view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let found = scores(view, args.get(1), args.iter_from(2))?;
    reply.array(args.len() - 2);
    for i in 0..args.len() - 2 {
        match found.as_ref().and_then(|f| f.get(i).copied().flatten()) {
            Some(s) => {
                let (lon, lat) = hash::decode_score(s);
                reply.array(2);
                reply_coord(reply, lon);
                reply_coord(reply, lat);
            }
            None => reply.null_array(),
        }
    }
    Ok(())
}

// ----- the searches ----------------------------------------------------------------------

/// Which search command (Redis's `georadiusGeneric` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// GEORADIUS (`ro`: GEORADIUS_RO, no STORE).
    Radius { ro: bool },
    /// GEORADIUSBYMEMBER (`ro`: GEORADIUSBYMEMBER_RO).
    ByMember { ro: bool },
    /// GEOSEARCH (`store`: GEOSEARCHSTORE).
    Search { store: bool },
}

/// The requested order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// Where a search's result goes.
#[derive(Clone, Copy, Debug)]
struct Store<'a> {
    key: &'a [u8],
    /// Distances as scores (STOREDIST) rather than geohashes.
    dist: bool,
}

const MEMBER_NOT_FOUND: &str = "ERR could not decode requested zset member";

/// A member's position in the index, or Redis's error for a missing member.
fn member_pos(z: &ZSet, member: &[u8]) -> ArgResult<(f64, f64)> {
    z.score(member)
        .map(hash::decode_score)
        .ok_or_else(|| raw(MEMBER_NOT_FOUND))
}

/// What a search found, and where it goes.
struct Searched<'a> {
    /// STORE/STOREDIST's destination, or `None` for a reply.
    store: Option<Store<'a>>,
    /// The members found, sorted and cut to COUNT, distances in the request's unit.
    found: Vec<Found>,
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
}

/// GEORADIUS, GEORADIUSBYMEMBER, their _RO forms, GEOSEARCH and GEOSEARCHSTORE (Redis's
/// `georadiusGeneric`), checking in its order: the source is searched where the view keeps
/// it (the members found are copied out), then the result is replied or stored.
fn radius_generic(
    view: &mut dyn View,
    args: Args<'_>,
    reply: &mut Reply,
    variant: Variant,
) -> CmdResult {
    let src_at = if variant == (Variant::Search { store: true }) {
        2
    } else {
        1
    };
    let done = read(view, args.get(src_at), |z| {
        search_in(args, variant, Some(z))
    })?;
    let out = match done {
        Some(out) => out?,
        None => search_in(args, variant, None)?,
    };
    match out.store {
        Some(s) => {
            let mut z = ZSet::default();
            for f in &out.found {
                let score = if s.dist { f.dist } else { f.score };
                if let Some(score) = Score::new(score) {
                    z.insert(&f.member, score);
                }
            }
            zsets::store_result(view, s.key, z)?;
            reply.int(i64::try_from(out.found.len()).unwrap_or(i64::MAX));
        }
        None => reply_found(
            reply,
            &out.found,
            out.with_dist,
            out.with_hash,
            out.with_coord,
        ),
    }
    Ok(())
}

/// A search's arguments checked and run over the index `z` (`None`: the key is missing, and
/// only the options are checked).
fn search_in<'a>(args: Args<'a>, variant: Variant, z: Option<&ZSet>) -> ArgResult<Searched<'a>> {
    let mut center: Option<(f64, f64)> = None;
    let mut extent: Option<(Extent, f64)> = None;
    let mut store: Option<Store<'_>> = None;
    let base = match variant {
        Variant::Radius { .. } => {
            center = Some(lon_lat_arg(args.get(2), args.get(3))?);
            let (r, conv) = radius_arg(args.get(4), args.get(5))?;
            extent = Some((Extent::Radius(r), conv));
            6
        }
        Variant::ByMember { .. } => {
            // Without the key, Redis parses the options only (for the reply's type).
            if let Some(z) = z {
                center = Some(member_pos(z, args.get(2))?);
                let (r, conv) = radius_arg(args.get(3), args.get(4))?;
                extent = Some((Extent::Radius(r), conv));
            }
            5
        }
        Variant::Search { store: false } => 2,
        Variant::Search { store: true } => {
            store = Some(Store {
                key: args.get(1),
                dist: false,
            });
            3
        }
    };
    let is_search = matches!(variant, Variant::Search { .. });
    let store_allowed = matches!(
        variant,
        Variant::Radius { ro: false } | Variant::ByMember { ro: false }
    );
    let (mut with_dist, mut with_hash, mut with_coord) = (false, false, false);
    let (mut from_member, mut from_lonlat, mut by_radius, mut by_box) =
        (false, false, false, false);
    let mut sort = Sort::None;
    let mut any = false;
    let mut count: i64 = 0;

    let n = args.len();
    let mut i = base;
    while i < n {
        let o = args.get(i);
        // Arguments after this one.
        let left = n - i - 1;
        let is = |name: &[u8]| o.eq_ignore_ascii_case(name);
        if is(b"WITHDIST") {
            with_dist = true;
        } else if is(b"WITHHASH") {
            with_hash = true;
        } else if is(b"WITHCOORD") {
            with_coord = true;
        } else if is(b"ANY") {
            any = true;
        } else if is(b"ASC") {
            sort = Sort::Asc;
        } else if is(b"DESC") {
            sort = Sort::Desc;
        } else if is(b"COUNT") && left >= 1 {
            count = int_arg(args.get(i + 1))?;
            if count <= 0 {
                return Err(raw("ERR COUNT must be > 0"));
            }
            i += 1;
        } else if (is(b"STORE") || is(b"STOREDIST")) && left >= 1 && store_allowed {
            store = Some(Store {
                key: args.get(i + 1),
                dist: is(b"STOREDIST"),
            });
            i += 1;
        } else if is(b"STOREDIST") && variant == (Variant::Search { store: true }) {
            if let Some(s) = store.as_mut() {
                s.dist = true;
            }
        } else if is(b"FROMMEMBER") && left >= 1 && is_search && !from_lonlat {
            if let Some(z) = z {
                center = Some(member_pos(z, args.get(i + 1))?);
            }
            from_member = true;
            i += 1;
        } else if is(b"FROMLONLAT") && left >= 2 && is_search && !from_member {
            center = Some(lon_lat_arg(args.get(i + 1), args.get(i + 2))?);
            from_lonlat = true;
            i += 2;
        } else if is(b"BYRADIUS") && left >= 2 && is_search && !by_box {
            let (r, conv) = radius_arg(args.get(i + 1), args.get(i + 2))?;
            extent = Some((Extent::Radius(r), conv));
            by_radius = true;
            i += 2;
        } else if is(b"BYBOX") && left >= 3 && is_search && !by_radius {
            let (width, height, conv) = box_arg(args.get(i + 1), args.get(i + 2), args.get(i + 3))?;
            extent = Some((Extent::Box { width, height }, conv));
            by_box = true;
            i += 3;
        } else {
            return Err(raw(SYNTAX));
        }
        i += 1;
    }

    if store.is_some() && (with_dist || with_hash || with_coord) {
        let who = if variant == (Variant::Search { store: true }) {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Err(raw(format!(
            "ERR {who} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    if is_search {
        let typed = String::from_utf8_lossy(crate::error::until_nul(args.get(0)));
        if !(from_member || from_lonlat) {
            return Err(raw(format!(
                "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {typed}"
            )));
        }
        if !(by_radius || by_box) {
            return Err(raw(format!(
                "ERR exactly one of BYRADIUS and BYBOX can be specified for {typed}"
            )));
        }
    }
    if any && count == 0 {
        return Err(raw("ERR the ANY argument requires COUNT argument"));
    }

    let mut out = Searched {
        store,
        found: Vec::new(),
        with_dist,
        with_hash,
        with_coord,
    };
    let (Some(z), Some((lon, lat)), Some((extent, conversion))) = (z, center, extent) else {
        // The source key is missing (the only way to get here without a centre or extent):
        // nothing found, an empty destination deleted.
        return Ok(out);
    };
    if count != 0 && sort == Sort::None && !any {
        sort = Sort::Asc;
    }
    let shape = Shape {
        lon,
        lat,
        conversion,
        extent,
    };
    let limit = (any && count > 0).then(|| usize::try_from(count).unwrap_or(usize::MAX));
    let mut found = search::search(z, &shape, limit);
    if sort != Sort::None {
        search::sort_by_distance(&mut found, sort == Sort::Desc);
    }
    if count > 0 {
        found.truncate(usize::try_from(count).unwrap_or(usize::MAX));
    }
    for f in &mut found {
        f.dist /= conversion;
    }
    out.found = found;
    Ok(out)
}

/// A search's members, each alone or as `[member, dist?, hash?, [lon, lat]?]`.
fn reply_found(reply: &mut Reply, found: &[Found], dist: bool, hash: bool, coord: bool) {
    let extra = usize::from(dist) + usize::from(hash) + usize::from(coord);
    reply.array(found.len());
    for f in found {
        if extra > 0 {
            reply.array(extra + 1);
        }
        reply.bulk(&f.member);
        if dist {
            reply_distance(reply, f.dist);
        }
        if hash {
            reply.int(hash::score_int(f.score));
        }
        if coord {
            reply.array(2);
            reply_coord(reply, f.lon);
            reply_coord(reply, f.lat);
        }
    }
}

#[cfg(test)]
mod tests;
