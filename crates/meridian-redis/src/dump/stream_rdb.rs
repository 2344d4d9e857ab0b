//! A stream's RDB form (`RDB_TYPE_STREAM_LISTPACKS`, `_2` and `_3`): what DUMP writes for a
//! stream and what RESTORE reads, Redis 7.0's layout (`rdbSaveObject`/`rdbLoadObject`).
//!
//! ```text
//! nodes: len, then per node: string(master ID, 16 bytes big endian), string(listpack)
//! len(length) len(last.ms) len(last.seq)
//! [_2, _3: len(first.ms) len(first.seq) len(maxdel.ms) len(maxdel.seq) len(entries_added)]
//! groups: len, then per group: string(name) len(last.ms) len(last.seq) [_2, _3: len(entries_read)]
//!   pel: len, then per entry: raw ID (16 bytes) ms-time(delivery, 8 bytes LE) len(count)
//!   consumers: len, then per consumer: string(name) ms-time(seen) [_3: ms-time(active)]
//!     len, then raw IDs (16 bytes) of the entries it owns
//! ```
//!
//! A node's listpack holds a master entry (`count deleted num-fields field... 0`) then each
//! entry (`flags ms-diff seq-diff [num-fields] [field value | value]... lp-count`), flag 1
//! marking a deleted entry and 2 an entry with the master's fields. Reading checks every
//! count, ID order and `lp-count` (Redis's deep sanitization) and answers `Bad` for
//! anything else; writing (`rdb::save` frames it) emits one node per
//! `stream-node-max-entries`-sized run of live entries (no tombstones), which Redis loads as
//! its own.

use super::packed::ListpackWriter;
use crate::streams::StreamId;
use bytes::Bytes;

/// `RDB_TYPE_STREAM_LISTPACKS`: Redis 5 to 6.2.
pub const TYPE_STREAM: u8 = 15;
/// `RDB_TYPE_STREAM_LISTPACKS_2`: Redis 7.0 (what DUMP writes).
pub const TYPE_STREAM_2: u8 = 19;
/// `RDB_TYPE_STREAM_LISTPACKS_3`: Redis 7.2 (consumers' active time).
pub const TYPE_STREAM_3: u8 = 21;

const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;
/// Entries per node written (Redis's default `stream-node-max-entries`).
pub(super) const NODE_ENTRIES: usize = 100;

/// The 16-byte big-endian form of an ID (radix-tree keys, PEL entries).
pub fn raw_id(id: StreamId) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&id.ms.to_be_bytes());
    b[8..].copy_from_slice(&id.seq.to_be_bytes());
    b
}

/// The ID of a 16-byte big-endian form.
pub fn id_of_raw(b: &[u8]) -> Option<StreamId> {
    let ms = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
    let seq = u64::from_be_bytes(b.get(8..16)?.try_into().ok()?);
    (b.len() == 16).then_some(StreamId::new(ms, seq))
}

/// One node's listpack: the master entry (the first entry's fields), then each entry.
pub(super) fn node_listpack(
    master: StreamId,
    master_fields: &[Bytes],
    entries: &[&crate::streams::object::Item],
) -> Vec<u8> {
    let mut lp = ListpackWriter::default();
    let names: Vec<&Bytes> = master_fields.iter().step_by(2).collect();
    lp.int(entries.len() as i64);
    lp.int(0);
    lp.int(names.len() as i64);
    for n in &names {
        lp.string(n);
    }
    lp.int(0);
    for e in entries {
        let pairs = e.fields.len() / 2;
        let same =
            pairs == names.len() && e.fields.iter().step_by(2).zip(&names).all(|(a, b)| a == *b);
        lp.int(if same { FLAG_SAMEFIELDS } else { 0 });
        lp.int(e.id.ms.wrapping_sub(master.ms) as i64);
        lp.int(e.id.seq.wrapping_sub(master.seq) as i64);
        if same {
            for v in e.fields.iter().skip(1).step_by(2) {
                lp.string(v);
            }
            lp.int(pairs as i64 + 3);
        } else {
            lp.int(pairs as i64);
            for f in &e.fields {
                lp.string(f);
            }
            lp.int(2 * pairs as i64 + 4);
        }
    }
    lp.finish()
}

/// Why a node does not read: the caller answers `Bad`.
#[derive(Debug)]
pub struct BadNode;

/// A node's entries from its listpack's elements (integers as their decimal text): each
/// ID with its fields, `None` for a deleted one.
pub type NodeEntries = Vec<(StreamId, Option<Vec<Bytes>>)>;

/// Reads a node keyed `master` from its listpack's elements, checking it as Redis's deep
/// sanitization does.
pub fn parse_node(master: StreamId, elems: &[Bytes]) -> Result<NodeEntries, BadNode> {
    let mut it = elems.iter();
    let next_int = |it: &mut std::slice::Iter<'_, Bytes>| -> Result<i64, BadNode> {
        it.next()
            .and_then(|e| crate::value::parse_i64(e))
            .ok_or(BadNode)
    };
    let count = next_int(&mut it)?;
    let deleted = next_int(&mut it)?;
    let nfields = next_int(&mut it)?;
    let total = count.checked_add(deleted).ok_or(BadNode)?;
    let nfields = usize::try_from(nfields).map_err(|_| BadNode)?;
    if count < 0 || deleted < 0 || nfields > elems.len() {
        return Err(BadNode);
    }
    let names: Vec<Bytes> = it.by_ref().take(nfields).cloned().collect();
    if names.len() != nfields || next_int(&mut it)? != 0 {
        return Err(BadNode);
    }
    let mut out: NodeEntries = Vec::new();
    let (mut live, mut dead) = (0i64, 0i64);
    while it.len() > 0 {
        let flags = next_int(&mut it)?;
        let ms = master.ms.wrapping_add(next_int(&mut it)? as u64);
        let seq = master.seq.wrapping_add(next_int(&mut it)? as u64);
        let id = StreamId::new(ms, seq);
        if out.last().is_some_and(|(prev, _)| *prev >= id) || (out.is_empty() && id < master) {
            return Err(BadNode);
        }
        let mut fields = Vec::new();
        let lp_count = if flags & FLAG_SAMEFIELDS != 0 {
            for name in &names {
                fields.push(name.clone());
                fields.push(it.next().ok_or(BadNode)?.clone());
            }
            nfields as i64 + 3
        } else {
            let n = usize::try_from(next_int(&mut it)?).map_err(|_| BadNode)?;
            if n > it.len() / 2 {
                return Err(BadNode);
            }
            for _ in 0..2 * n {
                fields.push(it.next().ok_or(BadNode)?.clone());
            }
            2 * n as i64 + 4
        };
        if next_int(&mut it)? != lp_count || fields.is_empty() {
            return Err(BadNode);
        }
        if flags & FLAG_DELETED != 0 {
            dead += 1;
            out.push((id, None));
        } else {
            live += 1;
            out.push((id, Some(fields)));
        }
    }
    if live != count || dead != deleted || total == 0 {
        return Err(BadNode);
    }
    Ok(out)
}
