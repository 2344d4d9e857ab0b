//! A stream's stored form: what a view that holds bytes (a MULTI overlay, a cluster's
//! one-key view, RENAME, DUMP's envelope) keeps for a key of kind [`Kind::Stream`].
//!
//! ```text
//! [1] last.ms last.seq first.ms first.seq maxdel.ms maxdel.seq entries_added
//!     nodes { key.ms key.seq entries { ms seq (0 fields{len bytes} | 1) } }
//!     groups { name last.ms last.seq entries_read+1
//!              consumers { name seen_time } pel { ms seq consumer delivery_time count } }
//! ```
//!
//! Every number is an unsigned LEB128 and every list is prefixed by its count. Decoding
//! checks everything it relies on (IDs ascending within and across nodes, nodes non-empty,
//! pending entries owned by existing consumers) and answers `Corrupt` — never a panic, and
//! never an allocation larger than the bytes it read — for anything else.

use super::groups::{Consumer, ConsumerGroup, Nack};
use super::id::StreamId;
use super::object::Stream;
use crate::zsets::encoding::{Reader, put_uvarint};
use bytes::Bytes;

const VERSION: u8 = 1;

fn put_id(out: &mut Vec<u8>, id: StreamId) {
    put_uvarint(out, id.ms);
    put_uvarint(out, id.seq);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_uvarint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// The stored form of `s`.
pub fn encode(s: &Stream) -> Vec<u8> {
    let mut out = vec![VERSION];
    for id in [s.last_id, s.first_id, s.max_deleted] {
        put_id(&mut out, id);
    }
    put_uvarint(&mut out, s.entries_added);
    put_uvarint(&mut out, s.node_count() as u64);
    for (key, entries) in s.nodes() {
        put_id(&mut out, key);
        put_uvarint(&mut out, entries.len() as u64);
        for e in entries {
            put_id(&mut out, e.id);
            if e.is_deleted() {
                out.push(1);
            } else {
                out.push(0);
                put_uvarint(&mut out, e.fields.len() as u64);
                for f in &e.fields {
                    put_bytes(&mut out, f);
                }
            }
        }
    }
    put_uvarint(&mut out, s.groups.len() as u64);
    for (name, g) in &s.groups {
        put_bytes(&mut out, name);
        put_id(&mut out, g.last_id);
        put_uvarint(&mut out, (g.entries_read + 1).max(0) as u64);
        put_uvarint(&mut out, g.consumers.len() as u64);
        for (cname, c) in &g.consumers {
            put_bytes(&mut out, cname);
            put_uvarint(&mut out, c.seen_time);
        }
        put_uvarint(&mut out, g.pel.len() as u64);
        for (id, n) in &g.pel {
            put_id(&mut out, *id);
            put_bytes(&mut out, &n.consumer);
            put_uvarint(&mut out, n.delivery_time);
            put_uvarint(&mut out, n.delivery_count);
        }
    }
    out
}

type R<T> = Result<T, &'static str>;

fn id(r: &mut Reader<'_>) -> R<StreamId> {
    Ok(StreamId::new(r.uvarint()?, r.uvarint()?))
}

/// A count of items of at least `min_bytes` each, checked against what is left.
fn count(r: &mut Reader<'_>, min_bytes: usize) -> R<usize> {
    let n = r.uvarint()?;
    if n > (r.left() / min_bytes.max(1)) as u64 {
        return Err("stream count exceeds its data");
    }
    Ok(n as usize)
}

fn bytes(r: &mut Reader<'_>, data: &Bytes) -> R<Bytes> {
    let n = usize::try_from(r.uvarint()?).map_err(|_| "stream length out of range")?;
    let start = r.pos;
    r.take(n)?;
    Ok(data.slice(start..start + n))
}

/// Decodes a stored stream.
pub fn decode(data: &Bytes) -> R<Stream> {
    let mut r = Reader { data, pos: 0 };
    if r.take(1)? != [VERSION] {
        return Err("unknown stream encoding");
    }
    let mut s = Stream::default();
    s.last_id = id(&mut r)?;
    s.first_id = id(&mut r)?;
    s.max_deleted = id(&mut r)?;
    s.entries_added = r.uvarint()?;
    let mut prev: Option<StreamId> = None;
    for _ in 0..count(&mut r, 3)? {
        let key = id(&mut r)?;
        let n = count(&mut r, 3)?;
        if n == 0 {
            return Err("empty stream node");
        }
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            let eid = id(&mut r)?;
            if (i == 0 && eid != key) || prev.is_some_and(|p| eid <= p) || eid > s.last_id {
                return Err("stream IDs out of order");
            }
            prev = Some(eid);
            let fields = match r.take(1)? {
                [0] => {
                    let k = count(&mut r, 1)?;
                    if k == 0 || k % 2 != 0 {
                        return Err("stream entry without field-value pairs");
                    }
                    let mut f = Vec::with_capacity(k);
                    for _ in 0..k {
                        f.push(bytes(&mut r, data)?);
                    }
                    Some(f)
                }
                [1] => None,
                _ => return Err("bad stream entry flag"),
            };
            entries.push((eid, fields));
        }
        s.push_node(key, entries);
    }
    for _ in 0..count(&mut r, 4)? {
        let name = bytes(&mut r, data)?;
        let last_id = id(&mut r)?;
        let entries_read = i64::try_from(r.uvarint()?).map_err(|_| "bad entries_read")? - 1;
        let mut g = ConsumerGroup::new(last_id, entries_read);
        for _ in 0..count(&mut r, 2)? {
            let cname = bytes(&mut r, data)?;
            let seen_time = r.uvarint()?;
            g.consumers.insert(
                cname,
                Consumer {
                    seen_time,
                    ..Consumer::default()
                },
            );
        }
        for _ in 0..count(&mut r, 5)? {
            let pid = id(&mut r)?;
            let consumer = bytes(&mut r, data)?;
            let nack = Nack {
                consumer: consumer.clone(),
                delivery_time: r.uvarint()?,
                delivery_count: r.uvarint()?,
            };
            let Some(c) = g.consumers.get_mut(&consumer) else {
                return Err("pending entry of an unknown consumer");
            };
            c.pending.insert(pid);
            if g.pel.insert(pid, nack).is_some() {
                return Err("pending entry listed twice");
            }
        }
        if s.groups.insert(name, g).is_some() {
            return Err("consumer group listed twice");
        }
    }
    if r.left() != 0 {
        return Err("trailing bytes after a stream");
    }
    Ok(s)
}

/// The live entry count of a stored stream, read without decoding its entries' fields.
pub fn stored_len(data: &Bytes) -> R<usize> {
    decode(data).map(|s| s.len() as usize)
}
