//! Redis's 52-bit geohash: a longitude/latitude cell as interleaved bits (latitude in the
//! even bits, longitude in the odd ones), its decoding back to a cell and to the cell's
//! centre, its neighbours, and the standard base-32 geohash string GEOHASH answers.
//!
//! Every computation is done in the same order of `f64` operations as Redis's `geohash.c`,
//! so a score written here is bit-for-bit the score Redis writes for the same coordinates,
//! and a decoded position is the one GEOPOS answers in Redis.

/// The most bits per coordinate (26 × 2 = 52 bits: a score's exact-integer range).
pub const STEP_MAX: u8 = 26;

/// The westmost longitude Redis indexes.
pub const LON_MIN: f64 = -180.0;
/// The eastmost longitude Redis indexes.
pub const LON_MAX: f64 = 180.0;
/// The southmost latitude Redis indexes (EPSG:900913's limit: the poles are not indexed).
pub const LAT_MIN: f64 = -85.05112878;
/// The northmost latitude Redis indexes.
pub const LAT_MAX: f64 = 85.05112878;

/// An interval of one coordinate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    /// Its lower end.
    pub min: f64,
    /// Its upper end.
    pub max: f64,
}

/// The ranges Redis indexes: longitude, latitude.
pub const WGS84: (Range, Range) = (
    Range {
        min: LON_MIN,
        max: LON_MAX,
    },
    Range {
        min: LAT_MIN,
        max: LAT_MAX,
    },
);

/// The ranges of the standard geohash (GEOHASH re-encodes into them).
const STANDARD: (Range, Range) = (
    Range {
        min: -180.0,
        max: 180.0,
    },
    Range {
        min: -90.0,
        max: 90.0,
    },
);

/// A cell: `step` bits of each coordinate, interleaved into the low `2 × step` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hash {
    /// The interleaved bits.
    pub bits: u64,
    /// Bits per coordinate, 1 to [`STEP_MAX`].
    pub step: u8,
}

/// A cell's extent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Area {
    /// West and east edges.
    pub lon: Range,
    /// South and north edges.
    pub lat: Range,
}

/// Whether Redis accepts this pair (GEOADD, FROMLONLAT, GEORADIUS's centre). NaN never is.
pub fn valid_lon_lat(lon: f64, lat: f64) -> bool {
    (LON_MIN..=LON_MAX).contains(&lon) && (LAT_MIN..=LAT_MAX).contains(&lat)
}

/// Spreads the 32 bits of `v` to the even bits of a `u64`.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// Gathers the even bits of `v` into a `u32` (the inverse of [`spread`]).
fn squash(v: u64) -> u32 {
    let mut x = v & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x >> 16)) & 0x0000_0000_FFFF_FFFF;
    x as u32
}

/// Latitude bits in the even positions, longitude bits in the odd ones.
fn interleave(lat: u32, lon: u32) -> u64 {
    spread(lat) | (spread(lon) << 1)
}

/// (latitude bits, longitude bits).
fn deinterleave(bits: u64) -> (u32, u32) {
    (squash(bits), squash(bits >> 1))
}

/// A coordinate's offset in its range scaled to `2^step`, truncated as C converts a double
/// to `uint32_t` (the range's upper end gives `2^step` itself, as in Redis).
fn scaled(v: f64, r: Range, step: u8) -> u32 {
    let offset = (v - r.min) / (r.max - r.min) * (1u64 << step) as f64;
    offset as u32
}

/// The cell of `step` bits holding the point in `ranges` (Redis's `geohashEncode`); `None`
/// for a point outside Redis's limits or outside the ranges, or a step out of 1..=26.
pub fn encode_in(ranges: (Range, Range), lon: f64, lat: f64, step: u8) -> Option<Hash> {
    let (lon_r, lat_r) = ranges;
    if step == 0 || step > 32 || !valid_lon_lat(lon, lat) {
        return None;
    }
    if lat < lat_r.min || lat > lat_r.max || lon < lon_r.min || lon > lon_r.max {
        return None;
    }
    Some(Hash {
        bits: interleave(scaled(lat, lat_r, step), scaled(lon, lon_r, step)),
        step,
    })
}

/// The cell of `step` bits in Redis's ranges.
pub fn encode(lon: f64, lat: f64, step: u8) -> Option<Hash> {
    encode_in(WGS84, lon, lat, step)
}

/// The score GEOADD gives a point Redis accepts: its 26-step cell aligned to 52 bits.
pub fn score_of(lon: f64, lat: f64) -> Option<u64> {
    encode(lon, lat, STEP_MAX).map(align52)
}

/// A cell's bits shifted to the top of 52 bits (the scores of every point in the cell start
/// here).
pub fn align52(h: Hash) -> u64 {
    h.bits << (52 - 2 * u32::from(h.step.min(STEP_MAX)))
}

/// The extent of a cell of Redis's ranges (Redis's `geohashDecode`).
pub fn decode_area(h: Hash) -> Area {
    decode_area_in(WGS84, h)
}

fn decode_area_in(ranges: (Range, Range), h: Hash) -> Area {
    let (lon_r, lat_r) = ranges;
    let (ilat, ilon) = deinterleave(h.bits);
    let cells = (1u64 << h.step.min(32)) as f64;
    let lat_scale = lat_r.max - lat_r.min;
    let lon_scale = lon_r.max - lon_r.min;
    // `+ 1` wraps in 32 bits as C's `uint32_t` does (only a score that is no geohash gets
    // there).
    let edge = |i: u32, min: f64, scale: f64| min + (f64::from(i) * 1.0 / cells) * scale;
    Area {
        lat: Range {
            min: edge(ilat, lat_r.min, lat_scale),
            max: edge(ilat.wrapping_add(1), lat_r.min, lat_scale),
        },
        lon: Range {
            min: edge(ilon, lon_r.min, lon_scale),
            max: edge(ilon.wrapping_add(1), lon_r.min, lon_scale),
        },
    }
}

/// A sorted-set score read as a 52-bit hash the way Redis's `(uint64_t)score` reads it on
/// x86-64 (a score GEOADD wrote is an exact integer below 2^54, read exactly; any other
/// score, written by ZADD, decodes to the position Redis answers for it): below 2^63 the
/// score is truncated through `int64_t` (a negative one wraps), from 2^63 on it is offset
/// by 2^63 first; a value out of either conversion's range is the CPU's "indefinite"
/// integer, 2^63.
pub fn score_bits(score: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    const INDEFINITE: u64 = 1 << 63;
    let truncate = |x: f64| -> u64 {
        if (-TWO_63..TWO_63).contains(&x) {
            (x as i64) as u64
        } else {
            INDEFINITE
        }
    };
    if score < TWO_63 {
        truncate(score)
    } else {
        truncate(score - TWO_63) ^ INDEFINITE
    }
}

/// A score as Redis's `(long long)score` reads it on x86-64 (WITHHASH's integer).
pub fn score_int(score: f64) -> i64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if (-TWO_63..TWO_63).contains(&score) {
        score as i64
    } else {
        i64::MIN
    }
}

/// The position a score stands for: its 26-step cell's centre, clamped to Redis's limits
/// (Redis's `decodeGeohash`), `(longitude, latitude)`.
pub fn decode_score(score: f64) -> (f64, f64) {
    let area = decode_area(Hash {
        bits: score_bits(score),
        step: STEP_MAX,
    });
    let lon = ((area.lon.min + area.lon.max) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((area.lat.min + area.lat.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// The 11-character standard geohash of a score, as GEOHASH answers it: the position is
/// decoded, re-encoded over latitudes -90..90 (Redis's index uses -85..85), and written in
/// base 32; the 11th character is always `0` (52 bits make 10.4 characters).
pub fn geohash_string(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (lon, lat) = decode_score(score);
    // A decoded position is always within the limits, so this encodes; a zero hash (as
    // Redis's zeroed struct would give) otherwise.
    let bits = encode_in(STANDARD, lon, lat, STEP_MAX).map_or(0, |h| h.bits);
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().take(10).enumerate() {
        let idx = (bits >> (52 - (i + 1) * 5)) & 0x1f;
        *c = ALPHABET[idx as usize];
    }
    out
}

/// Moves a cell one column east (`d > 0`) or west, wrapping around the antimeridian
/// (longitude bits are the odd ones).
fn move_x(h: &mut Hash, d: i8) {
    move_bits(h, d, 0xaaaa_aaaa_aaaa_aaaa);
}

/// Moves a cell one row north (`d > 0`) or south, wrapping (latitude bits are the even ones).
fn move_y(h: &mut Hash, d: i8) {
    move_bits(h, d, 0x5555_5555_5555_5555);
}

/// Adds ±1 to the coordinate whose bits are `mask`, carrying through the other
/// coordinate's bits (filled with ones so the carry passes them), as `geohash_move_x/y`.
fn move_bits(h: &mut Hash, d: i8, mask: u64) {
    if d == 0 {
        return;
    }
    let shift = 64 - 2 * u32::from(h.step.clamp(1, 32));
    let mine = h.bits & mask;
    let other = h.bits & !mask;
    // The other coordinate's bit positions, within the cell's width.
    let filler = !mask >> shift;
    let moved = if d > 0 {
        mine.wrapping_add(filler.wrapping_add(1))
    } else {
        (mine | filler).wrapping_sub(filler.wrapping_add(1))
    };
    h.bits = (moved & (mask >> shift)) | other;
}

/// A cell's eight neighbours, wrapping around the antimeridian and the poles' rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbors {
    /// North.
    pub north: Hash,
    /// South.
    pub south: Hash,
    /// East.
    pub east: Hash,
    /// West.
    pub west: Hash,
    /// North-east.
    pub north_east: Hash,
    /// North-west.
    pub north_west: Hash,
    /// South-east.
    pub south_east: Hash,
    /// South-west.
    pub south_west: Hash,
}

/// The eight neighbours of `h` (Redis's `geohashNeighbors`).
pub fn neighbors(h: Hash) -> Neighbors {
    let at = |dx: i8, dy: i8| {
        let mut n = h;
        move_x(&mut n, dx);
        move_y(&mut n, dy);
        n
    };
    Neighbors {
        north: at(0, 1),
        south: at(0, -1),
        east: at(1, 0),
        west: at(-1, 0),
        north_east: at(1, 1),
        north_west: at(-1, 1),
        south_east: at(1, -1),
        south_west: at(-1, -1),
    }
}
