//! The RDB encoding of one value, as a DUMP payload carries it (`rdb.c`'s `rdbLoadObject`
//! and `rdbSaveObject`), and the payload's frame:
//!
//! ```text
//! [RDB type byte][the value in RDB encoding][RDB version, u16 LE][CRC-64/Jones of all before, u64 LE]
//! ```
//!
//! **Reading** ([`verify`], then [`load`]) takes every value type Redis 7.0 writes and the
//! older ones it still reads: strings (raw, integer-encoded, LZF-compressed), lists
//! (`LIST`, `LIST_ZIPLIST`, `LIST_QUICKLIST` of ziplists, `LIST_QUICKLIST_2` of listpack
//! and plain nodes), sets (`SET`, `SET_INTSET`), sorted sets (`ZSET` with scores as text,
//! `ZSET_2` with binary scores, `ZSET_ZIPLIST`, `ZSET_LISTPACK`) and hashes (`HASH`,
//! `HASH_ZIPMAP`, `HASH_ZIPLIST`, `HASH_LISTPACK`) and streams (`STREAM_LISTPACKS`, `_2`,
//! `_3`, see [`super::stream_rdb`]). Module values are refused (Meridian has none), as is
//! any other type byte.
//!
//! The payload is hostile. Every length is checked against the bytes left before anything
//! is sliced; a count is believed only as far as the bytes could hold that many items (each
//! takes at least one byte); the bytes a value decodes to are charged to a budget (the
//! view's longest value) before they are allocated, and an LZF string may not announce more
//! than its compressed bytes could expand to. The embedded encodings are checked as Redis's
//! deep sanitization checks them ([`super::packed`]); a hash field, set member or sorted-set
//! member twice, a NaN score or an empty collection is damage, as in Redis. Nothing here
//! panics on any input.
//!
//! **Writing** ([`save`]) emits the simplest encodings Redis 7.0 loads: `STRING`, `LIST`
//! (one string per element; Redis builds its quicklist from them), `SET`, `ZSET_2` and
//! `HASH`, each string integer-encoded when Redis would (a canonical integer of 32 bits),
//! never LZF-compressed, and `STREAM_LISTPACKS_2` for a stream; RDB version 10.

use super::crc64::crc64;
use super::lzf;
use super::packed::{self, Bad};
use super::stream_rdb::{
    NODE_ENTRIES, TYPE_STREAM, TYPE_STREAM_2, TYPE_STREAM_3, id_of_raw, node_listpack, parse_node,
    raw_id,
};
use crate::streams::{Stream, StreamId};
use crate::zsets::{Score, ZSet};
use bytes::Bytes;
use meridian_core::hash::Fields;

/// The RDB version Redis 7.0 writes and the newest it reads.
pub const RDB_VERSION: u16 = 10;
/// The version and the CRC after the value.
pub const FOOTER: usize = 10;

const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_HASH_ZIPMAP: u8 = 9;
const TYPE_LIST_ZIPLIST: u8 = 10;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_ZSET_ZIPLIST: u8 = 12;
const TYPE_HASH_ZIPLIST: u8 = 13;
const TYPE_LIST_QUICKLIST: u8 = 14;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;

const ENC_INT8: u64 = 0;
const ENC_INT16: u64 = 1;
const ENC_INT32: u64 = 2;
const ENC_LZF: u64 = 3;

const NODE_PLAIN: u64 = 1;
const NODE_PACKED: u64 = 2;

/// The most an LZF stream expands: a 3-byte back reference writes 264 bytes.
const LZF_MAX_RATIO: usize = 88;

/// A value read out of a payload, before Meridian encodes it.
#[derive(Debug)]
pub enum Value {
    /// A string.
    String(Bytes),
    /// A hash's fields.
    Hash(Fields),
    /// A list's elements, in order (at least one).
    List(Vec<Bytes>),
    /// A set's members, strictly ascending (at least one).
    Set(Vec<Bytes>),
    /// A sorted set (at least one member).
    ZSet(ZSet),
    /// A stream (possibly without entries).
    Stream(crate::streams::Stream),
}

/// Why a payload does not load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadError {
    /// Damaged or unsupported: `ERR Bad data format`.
    Bad,
    /// The value would exceed the longest value the view accepts.
    TooLarge,
}

impl From<Bad> for LoadError {
    fn from(_: Bad) -> Self {
        LoadError::Bad
    }
}

type Result<T> = std::result::Result<T, LoadError>;

/// Whether `payload` has a footer of a version this node reads and a matching CRC
/// (`verifyDumpPayload`); the value's bytes (type byte first) if so.
pub fn verify(payload: &[u8]) -> Option<&[u8]> {
    let body_len = payload.len().checked_sub(FOOTER)?;
    let footer = &payload[body_len..];
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    if version > RDB_VERSION {
        return None;
    }
    let mut crc = [0u8; 8];
    crc.copy_from_slice(&footer[2..]);
    (crc64(0, &payload[..payload.len() - 8]) == u64::from_le_bytes(crc))
        .then_some(&payload[..body_len])
}

/// The value `body` (type byte, then the value) holds, decoding at most `budget` bytes of
/// strings. The value must take the whole body.
pub fn load(body: &[u8], budget: usize) -> Result<Value> {
    let mut r = Reader {
        buf: body,
        pos: 0,
        budget,
    };
    let value = r.object()?;
    if r.pos != body.len() {
        return Err(LoadError::Bad);
    }
    Ok(value)
}

/// The Meridian kind a payload's type byte stands for (`None` for a type it cannot hold),
/// read without decoding (so a too-large error can name the type).
pub fn kind_of(body: &[u8]) -> Option<crate::view::Kind> {
    use crate::view::Kind;
    Some(match *body.first()? {
        TYPE_STRING => Kind::String,
        TYPE_LIST | TYPE_LIST_ZIPLIST | TYPE_LIST_QUICKLIST | TYPE_LIST_QUICKLIST_2 => Kind::List,
        TYPE_SET | TYPE_SET_INTSET => Kind::Set,
        TYPE_ZSET | TYPE_ZSET_2 | TYPE_ZSET_ZIPLIST | TYPE_ZSET_LISTPACK => Kind::ZSet,
        TYPE_HASH | TYPE_HASH_ZIPMAP | TYPE_HASH_ZIPLIST | TYPE_HASH_LISTPACK => Kind::Hash,
        TYPE_STREAM | TYPE_STREAM_2 | TYPE_STREAM_3 => Kind::Stream,
        _ => return None,
    })
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Bytes of strings still allowed.
    budget: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(LoadError::Bad);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn charge(&mut self, n: usize) -> Result<()> {
        self.budget = self.budget.checked_sub(n).ok_or(LoadError::TooLarge)?;
        Ok(())
    }

    /// A length, or (`true`) a special string encoding (`rdbLoadLenByRef`).
    fn len_or_encoding(&mut self) -> Result<(u64, bool)> {
        let b = self.byte()?;
        Ok(match b >> 6 {
            0 => (u64::from(b & 0x3f), false),
            1 => ((u64::from(b & 0x3f) << 8) | u64::from(self.byte()?), false),
            3 => (u64::from(b & 0x3f), true),
            _ => match b {
                0x80 => {
                    let d = self.take(4)?;
                    (
                        u64::from(u32::from_be_bytes([d[0], d[1], d[2], d[3]])),
                        false,
                    )
                }
                0x81 => {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(self.take(8)?);
                    (u64::from_be_bytes(a), false)
                }
                _ => return Err(LoadError::Bad),
            },
        })
    }

    /// A plain length, as a size that fits this machine.
    fn len(&mut self) -> Result<usize> {
        match self.len_or_encoding()? {
            (n, false) => usize::try_from(n).map_err(|_| LoadError::Bad),
            (_, true) => Err(LoadError::Bad),
        }
    }

    /// A count of items that take at least a byte each: one the bytes left cannot hold is
    /// damage (Redis would run out of bytes reading them). Zero is an empty key.
    fn count(&mut self) -> Result<usize> {
        let n = self.len()?;
        if n == 0 || n > self.left() {
            return Err(LoadError::Bad);
        }
        Ok(n)
    }

    /// A string in any of its encodings (`rdbGenericLoadStringObject`).
    fn string(&mut self) -> Result<Bytes> {
        let (n, special) = self.len_or_encoding()?;
        if !special {
            let n = usize::try_from(n).map_err(|_| LoadError::Bad)?;
            let s = self.take(n)?;
            self.charge(n)?;
            return Ok(Bytes::copy_from_slice(s));
        }
        let int = match n {
            ENC_INT8 => i64::from(self.byte()? as i8),
            ENC_INT16 => {
                let d = self.take(2)?;
                i64::from(i16::from_le_bytes([d[0], d[1]]))
            }
            ENC_INT32 => {
                let d = self.take(4)?;
                i64::from(i32::from_le_bytes([d[0], d[1], d[2], d[3]]))
            }
            ENC_LZF => {
                let clen = self.len()?;
                let ulen = self.len()?;
                let compressed = self.take(clen)?;
                if ulen > clen.saturating_mul(LZF_MAX_RATIO) {
                    return Err(LoadError::Bad);
                }
                self.charge(ulen)?;
                let out = lzf::decompress(compressed, ulen).map_err(|_| LoadError::Bad)?;
                return Ok(Bytes::from(out));
            }
            _ => return Err(LoadError::Bad),
        };
        let mut buf = itoa::Buffer::new();
        let s = buf.format(int).as_bytes();
        self.charge(s.len())?;
        Ok(Bytes::copy_from_slice(s))
    }

    /// A score written as text (`RDB_TYPE_ZSET`): a length byte, or 253/254/255 for
    /// NaN/+inf/−inf.
    fn text_double(&mut self) -> Result<f64> {
        match self.byte()? {
            255 => Ok(f64::NEG_INFINITY),
            254 => Ok(f64::INFINITY),
            253 => Ok(f64::NAN),
            n => {
                let s = self.take(usize::from(n))?;
                parse_score(s).ok_or(LoadError::Bad)
            }
        }
    }

    fn binary_double(&mut self) -> Result<f64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(f64::from_le_bytes(a))
    }

    /// A string holding a compact encoding: its bytes are given back to the budget once
    /// read (they were bounded by it while decompressed), and the elements it decodes to
    /// are charged instead ([`Reader::charge_elems`]).
    fn packed_string(&mut self) -> Result<Bytes> {
        let s = self.string()?;
        self.budget = self.budget.saturating_add(s.len());
        Ok(s)
    }

    /// Charges the elements a compact encoding decoded to.
    fn charge_elems(&mut self, elems: &[Bytes]) -> Result<()> {
        let n = elems
            .iter()
            .map(Bytes::len)
            .fold(0usize, usize::saturating_add);
        self.charge(n)
    }

    /// A length that must fit 64 bits (IDs, counters).
    fn len_u64(&mut self) -> Result<u64> {
        match self.len_or_encoding()? {
            (n, false) => Ok(n),
            (_, true) => Err(LoadError::Bad),
        }
    }

    /// A count of items of at least `min` bytes each, believed only as far as the bytes
    /// left could hold them (zero allowed).
    fn items(&mut self, min: usize) -> Result<usize> {
        let n = self.len()?;
        if n > self.left() / min.max(1) {
            return Err(LoadError::Bad);
        }
        Ok(n)
    }

    fn raw_id(&mut self) -> Result<StreamId> {
        id_of_raw(self.take(16)?).ok_or(LoadError::Bad)
    }

    /// A millisecond time (`rdbLoadMillisecondTime`: 8 bytes, little endian).
    fn ms_time(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    /// A stream of RDB type `ty` (see `stream_rdb`).
    fn stream(&mut self, ty: u8) -> Result<Value> {
        let mut s = Stream::default();
        let mut prev: Option<StreamId> = None;
        for _ in 0..self.items(2)? {
            let key = self.string()?;
            let master = id_of_raw(&key).ok_or(LoadError::Bad)?;
            let lp = self.packed_string()?;
            let elems = packed::listpack(&lp)?;
            self.charge_elems(&elems)?;
            let entries = parse_node(master, &elems).map_err(|_| LoadError::Bad)?;
            if prev.is_some_and(|p| entries.first().is_some_and(|(first, _)| *first <= p)) {
                return Err(LoadError::Bad);
            }
            prev = entries.last().map(|(id, _)| *id);
            s.push_node(master, entries);
        }
        let length = self.len_u64()?;
        s.last_id = StreamId::new(self.len_u64()?, self.len_u64()?);
        if s.len() != length || prev.is_some_and(|p| p > s.last_id) {
            return Err(LoadError::Bad);
        }
        if ty == TYPE_STREAM {
            s.entries_added = length;
            s.first_id = s.first_live().unwrap_or_default();
        } else {
            s.first_id = StreamId::new(self.len_u64()?, self.len_u64()?);
            s.max_deleted = StreamId::new(self.len_u64()?, self.len_u64()?);
            s.entries_added = self.len_u64()?;
        }
        for _ in 0..self.items(3)? {
            let name = self.string()?;
            let last = StreamId::new(self.len_u64()?, self.len_u64()?);
            let entries_read = if ty == TYPE_STREAM {
                crate::streams::distance_from_first(&s, last).map_or(-1, |d| d as i64)
            } else {
                self.len_u64()? as i64
            };
            let mut g = crate::streams::groups::ConsumerGroup::new(last, entries_read);
            for _ in 0..self.items(17)? {
                let id = self.raw_id()?;
                let nack = crate::streams::groups::Nack {
                    consumer: Bytes::new(),
                    delivery_time: self.ms_time()?,
                    delivery_count: self.len_u64()?,
                };
                if g.pel.insert(id, nack).is_some() {
                    return Err(LoadError::Bad);
                }
            }
            for _ in 0..self.items(10)? {
                let cname = self.string()?;
                let seen_time = self.ms_time()?;
                if ty == TYPE_STREAM_3 {
                    self.ms_time()?;
                }
                let mut c = crate::streams::groups::Consumer {
                    seen_time,
                    ..Default::default()
                };
                for _ in 0..self.items(16)? {
                    let id = self.raw_id()?;
                    match g.pel.get_mut(&id) {
                        Some(n) if n.consumer.is_empty() && !cname.is_empty() => {
                            n.consumer = cname.clone();
                        }
                        _ => return Err(LoadError::Bad),
                    }
                    c.pending.insert(id);
                }
                if g.consumers.insert(cname, c).is_some() {
                    return Err(LoadError::Bad);
                }
            }
            if g.pel.values().any(|n| n.consumer.is_empty()) || s.groups.insert(name, g).is_some() {
                return Err(LoadError::Bad);
            }
        }
        Ok(Value::Stream(s))
    }

    fn object(&mut self) -> Result<Value> {
        let ty = self.byte()?;
        match ty {
            TYPE_STRING => Ok(Value::String(self.string()?)),
            TYPE_LIST => {
                let n = self.count()?;
                let mut elems = Vec::new();
                for _ in 0..n {
                    elems.push(self.string()?);
                }
                Ok(Value::List(elems))
            }
            TYPE_LIST_QUICKLIST | TYPE_LIST_QUICKLIST_2 => {
                let nodes = self.count()?;
                let mut elems = Vec::new();
                for _ in 0..nodes {
                    let container = if ty == TYPE_LIST_QUICKLIST_2 {
                        match self.len()? as u64 {
                            c @ (NODE_PLAIN | NODE_PACKED) => c,
                            _ => return Err(LoadError::Bad),
                        }
                    } else {
                        NODE_PACKED
                    };
                    let node = if container == NODE_PLAIN {
                        self.string()?
                    } else {
                        self.packed_string()?
                    };
                    if node.is_empty() {
                        return Err(LoadError::Bad);
                    }
                    if container == NODE_PLAIN {
                        elems.push(node);
                        continue;
                    }
                    // Empty nodes are skipped, as Redis does.
                    let part = if ty == TYPE_LIST_QUICKLIST_2 {
                        packed::listpack(&node)?
                    } else {
                        packed::ziplist(&node)?
                    };
                    self.charge_elems(&part)?;
                    elems.extend(part);
                }
                non_empty_list(elems)
            }
            TYPE_LIST_ZIPLIST => {
                let part = packed::ziplist(&self.packed_string()?)?;
                self.charge_elems(&part)?;
                non_empty_list(part)
            }
            TYPE_SET => {
                let n = self.count()?;
                let mut members = Vec::new();
                for _ in 0..n {
                    members.push(self.string()?);
                }
                sorted_set(members)
            }
            TYPE_SET_INTSET => {
                let ints = packed::intset(&self.packed_string()?)?;
                let mut buf = itoa::Buffer::new();
                let mut members = Vec::with_capacity(ints.len());
                for i in ints {
                    let s = buf.format(i).as_bytes();
                    self.charge(s.len())?;
                    members.push(Bytes::copy_from_slice(s));
                }
                sorted_set(members)
            }
            TYPE_ZSET | TYPE_ZSET_2 => {
                let n = self.count()?;
                let mut z = ZSet::default();
                for _ in 0..n {
                    let member = self.string()?;
                    let score = if ty == TYPE_ZSET_2 {
                        self.binary_double()?
                    } else {
                        self.text_double()?
                    };
                    zset_insert(&mut z, member, score)?;
                }
                Ok(Value::ZSet(z))
            }
            TYPE_ZSET_ZIPLIST | TYPE_ZSET_LISTPACK => {
                let node = self.packed_string()?;
                let elems = if ty == TYPE_ZSET_LISTPACK {
                    packed::listpack(&node)?
                } else {
                    packed::ziplist(&node)?
                };
                self.charge_elems(&elems)?;
                if elems.is_empty() || elems.len() % 2 != 0 {
                    return Err(LoadError::Bad);
                }
                let mut z = ZSet::default();
                for pair in elems.chunks_exact(2) {
                    let score = parse_score(&pair[1]).ok_or(LoadError::Bad)?;
                    zset_insert(&mut z, pair[0].clone(), score)?;
                }
                Ok(Value::ZSet(z))
            }
            TYPE_HASH => {
                let n = self.count()?;
                let mut fields = Fields::new();
                for _ in 0..n {
                    let f = self.string()?;
                    let v = self.string()?;
                    hash_insert(&mut fields, f, v)?;
                }
                Ok(Value::Hash(fields))
            }
            TYPE_HASH_ZIPLIST | TYPE_HASH_LISTPACK => {
                let node = self.packed_string()?;
                let elems = if ty == TYPE_HASH_LISTPACK {
                    packed::listpack(&node)?
                } else {
                    packed::ziplist(&node)?
                };
                self.charge_elems(&elems)?;
                if elems.is_empty() || elems.len() % 2 != 0 {
                    return Err(LoadError::Bad);
                }
                let mut fields = Fields::new();
                for pair in elems.chunks_exact(2) {
                    hash_insert(&mut fields, pair[0].clone(), pair[1].clone())?;
                }
                Ok(Value::Hash(fields))
            }
            TYPE_HASH_ZIPMAP => {
                let pairs = packed::zipmap(&self.packed_string()?)?;
                let mut fields = Fields::new();
                for (f, v) in pairs {
                    self.charge(f.len().saturating_add(v.len()))?;
                    hash_insert(&mut fields, f, v)?;
                }
                Ok(Value::Hash(fields))
            }
            TYPE_STREAM | TYPE_STREAM_2 | TYPE_STREAM_3 => self.stream(ty),
            // Module values, and bytes that are no type at all.
            _ => Err(LoadError::Bad),
        }
    }
}

/// A score as text: what `strtod` reads, but the whole text must be the number.
fn parse_score(s: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(s).ok()?;
    let v: f64 = s.parse().ok()?;
    Some(v)
}

fn non_empty_list(elems: Vec<Bytes>) -> Result<Value> {
    if elems.is_empty() {
        return Err(LoadError::Bad);
    }
    Ok(Value::List(elems))
}

/// Members in any order, sorted; a member twice is damage.
fn sorted_set(mut members: Vec<Bytes>) -> Result<Value> {
    members.sort_unstable();
    if members.is_empty() || members.windows(2).any(|w| w[0] == w[1]) {
        return Err(LoadError::Bad);
    }
    Ok(Value::Set(members))
}

fn zset_insert(z: &mut ZSet, member: Bytes, score: f64) -> Result<()> {
    let score = Score::new(score).ok_or(LoadError::Bad)?;
    match z.insert(&member, score) {
        None => Ok(()),
        Some(_) => Err(LoadError::Bad),
    }
}

fn hash_insert(fields: &mut Fields, f: Bytes, v: Bytes) -> Result<()> {
    match fields.insert(f, v) {
        None => Ok(()),
        Some(_) => Err(LoadError::Bad),
    }
}

// ----- writing ---------------------------------------------------------------------------

/// Appends an RDB length (`rdbSaveLen`).
pub fn put_len(out: &mut Vec<u8>, n: usize) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
    } else if let Ok(n) = u32::try_from(n) {
        out.push(0x80);
        out.extend_from_slice(&n.to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&(n as u64).to_be_bytes());
    }
}

/// Appends a string, integer-encoded when Redis would (`rdbSaveRawString` without LZF): a
/// canonical integer of at most 11 characters that fits 32 bits.
pub fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11
        && let Some(v) = crate::value::parse_i64(s)
        && itoa::Buffer::new().format(v).as_bytes() == s
        && let Ok(v) = i32::try_from(v)
    {
        if let Ok(v) = i8::try_from(v) {
            out.extend_from_slice(&[0xc0 | ENC_INT8 as u8, v as u8]);
        } else if let Ok(v) = i16::try_from(v) {
            out.push(0xc0 | ENC_INT16 as u8);
            out.extend_from_slice(&v.to_le_bytes());
        } else {
            out.push(0xc0 | ENC_INT32 as u8);
            out.extend_from_slice(&v.to_le_bytes());
        }
        return;
    }
    put_len(out, s.len());
    out.extend_from_slice(s);
}

/// A value to write: borrowed pieces of a decoded Meridian value.
pub enum Save<'a> {
    /// A string's bytes.
    String(&'a [u8]),
    /// A hash's fields and values.
    Hash(&'a Fields),
    /// A list's elements, in order.
    List(&'a [&'a [u8]]),
    /// A set's members.
    Set(&'a [Bytes]),
    /// A sorted set.
    ZSet(&'a ZSet),
    /// A stream.
    Stream(&'a Stream),
}

/// The DUMP payload of `value`: type byte, value, version, CRC.
pub fn save(value: Save<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    match value {
        Save::String(s) => {
            out.reserve(s.len() + 16);
            out.push(TYPE_STRING);
            put_string(&mut out, s);
        }
        Save::Hash(fields) => {
            out.push(TYPE_HASH);
            put_len(&mut out, fields.len());
            for (f, v) in fields {
                put_string(&mut out, f);
                put_string(&mut out, v);
            }
        }
        Save::List(elems) => {
            out.push(TYPE_LIST);
            put_len(&mut out, elems.len());
            for e in elems {
                put_string(&mut out, e);
            }
        }
        Save::Set(members) => {
            out.push(TYPE_SET);
            put_len(&mut out, members.len());
            for m in members {
                put_string(&mut out, m);
            }
        }
        Save::Stream(st) => save_stream(&mut out, st),
        Save::ZSet(z) => {
            out.push(TYPE_ZSET_2);
            put_len(&mut out, z.len());
            // Highest first, as Redis writes a skiplist (its loader inserts faster so).
            for (score, member) in z.iter().rev() {
                put_string(&mut out, member);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
    }
    seal(out)
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    put_len(out, usize::try_from(v).unwrap_or(usize::MAX));
}

/// A stream as Redis 7.0 writes one (`STREAM_LISTPACKS_2`, see `stream_rdb`).
fn save_stream(out: &mut Vec<u8>, s: &Stream) {
    out.push(TYPE_STREAM_2);
    let live = s.range(StreamId::MIN, StreamId::MAX, 0, false);
    let nodes: Vec<_> = live.chunks(NODE_ENTRIES).collect();
    put_len(out, nodes.len());
    for node in &nodes {
        let master = node[0];
        put_string(out, &raw_id(master.id));
        put_string(out, &node_listpack(master.id, &master.fields, node));
    }
    put_u64(out, s.len());
    for v in [s.last_id.ms, s.last_id.seq, s.first_id.ms, s.first_id.seq] {
        put_u64(out, v);
    }
    for v in [s.max_deleted.ms, s.max_deleted.seq, s.entries_added] {
        put_u64(out, v);
    }
    put_len(out, s.groups.len());
    for (name, g) in &s.groups {
        put_string(out, name);
        put_u64(out, g.last_id.ms);
        put_u64(out, g.last_id.seq);
        // -1 (unknown) is written as Redis writes it: the same 64 bits, unsigned.
        put_u64(out, g.entries_read as u64);
        put_len(out, g.pel.len());
        for (id, n) in &g.pel {
            out.extend_from_slice(&raw_id(*id));
            out.extend_from_slice(&n.delivery_time.to_le_bytes());
            put_u64(out, n.delivery_count);
        }
        put_len(out, g.consumers.len());
        for (cname, c) in &g.consumers {
            put_string(out, cname);
            out.extend_from_slice(&c.seen_time.to_le_bytes());
            put_len(out, c.pending.len());
            for id in &c.pending {
                out.extend_from_slice(&raw_id(*id));
            }
        }
    }
}

/// Appends the footer (version, CRC) to a value's bytes.
pub fn seal(mut body: Vec<u8>) -> Vec<u8> {
    body.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(0, &body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}
