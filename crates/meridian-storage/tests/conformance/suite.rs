//! The conformance suite: each check is a function over `&dyn Engine`, instantiated at the
//! bottom for [`MemEngine`] and for [`FjallEngine`] under each durability policy.

use super::common::*;
use bytes::Bytes;
use meridian_core::Timestamp;
use meridian_storage::{
    Durability, Engine, GcStats, MAX_KEY_LEN, StorageError, Version, WriteBatch, WriteOp,
};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};

/// Writes `op` to the engine and to the model.
fn write(e: &dyn Engine, m: &mut Model, op: WriteOp) {
    model_apply(m, &op);
    match op {
        WriteOp::Put { key, ts, value } => e.put(key, ts, value).unwrap(),
        WriteOp::Delete { key, ts } => e.delete(key, ts).unwrap(),
    }
}

fn put(key: &[u8], t: u64, v: &[u8]) -> WriteOp {
    WriteOp::Put {
        key: b(key),
        ts: ts(t),
        value: b(v),
    }
}

fn del(key: &[u8], t: u64) -> WriteOp {
    WriteOp::Delete {
        key: b(key),
        ts: ts(t),
    }
}

/// Every key of the model, compared at every timestamp in `times`.
fn assert_matches(e: &dyn Engine, m: &Model, times: impl IntoIterator<Item = u64> + Clone) {
    for key in m.keys() {
        for t in times.clone() {
            assert_eq!(
                e.get(key, ts(t)).unwrap(),
                model_get(m, key, ts(t)),
                "get({key:?}, {t})"
            );
            assert_eq!(
                e.get_value(key, ts(t)).unwrap(),
                model_get(m, key, ts(t)).and_then(|v| v.value),
                "get_value({key:?}, {t})"
            );
        }
    }
}

/// Reads at every timestamp see the version of their time, and never another key's.
pub fn snapshot_reads_at_many_timestamps(e: &dyn Engine) {
    let mut m = Model::new();
    // Out of order, so versions land before, between and after existing ones.
    let history: [(u64, Option<&str>); 7] = [
        (40, Some("c")),
        (10, Some("a")),
        (100, Some("")),
        (20, Some("b")),
        (70, Some("d")),
        (30, None),
        (55, None),
    ];
    for (t, v) in history {
        let op = match v {
            Some(v) => put(b"k", t, v.as_bytes()),
            None => del(b"k", t),
        };
        write(e, &mut m, op);
    }
    // Neighbours, including keys the encoding could confuse with "k": its extensions by 0x00
    // and 0xFF bytes, and a prefix. Their versions must never leak into reads of "k".
    write(e, &mut m, put(b"k\x00", 5, b"k0"));
    write(e, &mut m, put(b"k\xff", 6, b"kff"));
    write(e, &mut m, put(b"", 7, b"empty"));
    write(e, &mut m, put(b"j", 3, b"j"));
    write(e, &mut m, put(b"l", 1000, b"l"));
    assert_eq!(
        e.get(b"k", ts(9)).unwrap(),
        None,
        "k\\0 at 5 is another key"
    );
    assert_matches(e, &m, 0..=110);
    assert_matches(e, &m, [u64::MAX - 1, u64::MAX]);
    assert_eq!(e.get_latest(b"k").unwrap(), Some(val(100, b"")));
    assert_eq!(e.get(b"absent", Timestamp::MAX).unwrap(), None);
    assert_eq!(
        e.versions(b"k").unwrap(),
        vec![
            val(10, b"a"),
            val(20, b"b"),
            tomb(30),
            val(40, b"c"),
            tomb(55),
            val(70, b"d"),
            val(100, b""),
        ],
        "versions oldest first"
    );
    // Extreme timestamps.
    write(e, &mut m, put(b"edge", 0, b"zero"));
    write(e, &mut m, put(b"edge", u64::MAX, b"max"));
    assert_matches(e, &m, [0, 1, u64::MAX - 1, u64::MAX]);
}

/// Tombstones are versions for `get` and absences for `get_value` and live-key counts.
pub fn tombstones(e: &dyn Engine) {
    e.put(b(b"k"), ts(10), b(b"v")).unwrap();
    e.delete(b(b"k"), ts(20)).unwrap();
    assert_eq!(e.get(b"k", ts(25)).unwrap(), Some(tomb(20)));
    assert!(e.get(b"k", ts(25)).unwrap().unwrap().is_tombstone());
    assert_eq!(e.get_value(b"k", ts(25)).unwrap(), None);
    assert_eq!(e.get_value(b"k", ts(15)).unwrap(), Some(b(b"v")));
    assert_eq!(e.stats().live_keys, 0);
    // Deleting a key that never existed stores a tombstone, and changes no count.
    e.delete(b(b"never"), ts(5)).unwrap();
    assert_eq!(e.get(b"never", ts(5)).unwrap(), Some(tomb(5)));
    assert_eq!(e.get(b"never", ts(4)).unwrap(), None);
    assert_eq!(e.stats().live_keys, 0);
    // A tombstone older than the latest value does not kill the key.
    e.put(b(b"x"), ts(50), b(b"x")).unwrap();
    e.delete(b(b"x"), ts(40)).unwrap();
    assert_eq!(e.stats().live_keys, 1);
    assert_eq!(e.get_value(b"x", ts(45)).unwrap(), None);
    assert_eq!(e.get_value(b"x", Timestamp::MAX).unwrap(), Some(b(b"x")));
    let all = e
        .scan(Bound::Unbounded, Bound::Unbounded, Timestamp::MAX, 10, true)
        .unwrap();
    assert_eq!(
        all,
        vec![
            (b(b"k"), tomb(20)),
            (b(b"never"), tomb(5)),
            (b(b"x"), val(50, b"x"))
        ]
    );
    let live = e
        .scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            10,
            false,
        )
        .unwrap();
    assert_eq!(live, vec![(b(b"x"), val(50, b"x"))]);
}

/// Writing the same key at the same timestamp replaces that version.
pub fn same_ts_overwrite(e: &dyn Engine) {
    e.put(b(b"k"), ts(10), b(b"a")).unwrap();
    e.put(b(b"k"), ts(10), b(b"b")).unwrap();
    assert_eq!(e.versions(b"k").unwrap(), vec![val(10, b"b")]);
    assert_eq!(e.stats().live_keys, 1);
    e.delete(b(b"k"), ts(10)).unwrap();
    assert_eq!(e.versions(b"k").unwrap(), vec![tomb(10)]);
    assert_eq!(e.stats().live_keys, 0);
    e.put(b(b"k"), ts(10), b(b"c")).unwrap();
    assert_eq!(e.stats().live_keys, 1);
    // Overwriting an older version leaves the latest alone.
    e.put(b(b"k"), ts(20), b(b"d")).unwrap();
    e.delete(b(b"k"), ts(10)).unwrap();
    assert_eq!(e.versions(b"k").unwrap(), vec![tomb(10), val(20, b"d")]);
    assert_eq!(e.stats().live_keys, 1);
    // Within a batch, the later write of a key and timestamp wins.
    let mut batch = WriteBatch::new();
    batch
        .put(b(b"j"), ts(5), b(b"first"))
        .put(b(b"j"), ts(5), b(b"second"))
        .delete(b(b"i"), ts(5))
        .put(b(b"i"), ts(5), b(b"alive"))
        .put(b(b"h"), ts(5), b(b"dead"))
        .delete(b(b"h"), ts(5));
    e.write_batch(batch).unwrap();
    assert_eq!(e.versions(b"j").unwrap(), vec![val(5, b"second")]);
    assert_eq!(e.versions(b"i").unwrap(), vec![val(5, b"alive")]);
    assert_eq!(e.versions(b"h").unwrap(), vec![tomb(5)]);
    assert_eq!(e.stats().live_keys, 3, "k, j and i");
    // A batch that writes several versions of a key: the newest decides liveness.
    let mut batch = WriteBatch::new();
    batch
        .put(b(b"g"), ts(9), b(b"new"))
        .delete(b(b"g"), ts(3))
        .put(b(b"f"), ts(1), b(b"old"))
        .delete(b(b"f"), ts(2));
    e.write_batch(batch).unwrap();
    assert_eq!(e.stats().live_keys, 4, "k, j, i and g");
}

/// A batch with one bad write fails entirely and writes nothing; so do single writes.
pub fn batch_with_oversized_key_writes_nothing(e: &dyn Engine) {
    let long = Bytes::from(vec![b'x'; MAX_KEY_LEN + 1]);
    let mut batch = WriteBatch::new();
    batch
        .put(b(b"a"), ts(1), b(b"1"))
        .put(long.clone(), ts(1), b(b"2"))
        .put(b(b"c"), ts(1), b(b"3"));
    let err = e.write_batch(batch).unwrap_err();
    assert!(
        matches!(err, StorageError::KeyTooLarge { len, max } if len == MAX_KEY_LEN + 1 && max == MAX_KEY_LEN),
        "{err}"
    );
    let mut batch = WriteBatch::new();
    batch
        .put(b(b"a"), ts(1), b(b"1"))
        .delete(long.clone(), ts(1));
    assert!(matches!(
        e.write_batch(batch),
        Err(StorageError::KeyTooLarge { .. })
    ));
    assert!(matches!(
        e.put(long.clone(), ts(1), b(b"v")),
        Err(StorageError::KeyTooLarge { .. })
    ));
    assert!(matches!(
        e.delete(long.clone(), ts(1)),
        Err(StorageError::KeyTooLarge { .. })
    ));
    assert_eq!(e.get(b"a", Timestamp::MAX).unwrap(), None);
    assert_eq!(e.get(b"c", Timestamp::MAX).unwrap(), None);
    assert_eq!(e.get(&long, Timestamp::MAX).unwrap(), None);
    assert!(
        e.scan(Bound::Unbounded, Bound::Unbounded, Timestamp::MAX, 10, true)
            .unwrap()
            .is_empty()
    );
    assert_eq!(e.stats().live_keys, 0);
    // An empty batch is fine.
    e.write_batch(WriteBatch::new()).unwrap();
}

/// Reads of keys too long to be stored find nothing, and such keys work as scan bounds.
pub fn oversized_reads(e: &dyn Engine) {
    let mut m = Model::new();
    let mut max = vec![0u8; MAX_KEY_LEN];
    write(e, &mut m, put(&max, 1, b"max"));
    write(e, &mut m, put(b"a", 1, b"a"));
    write(e, &mut m, put(b"\xff", 1, b"ff"));
    for len in [MAX_KEY_LEN + 1, MAX_KEY_LEN + 2, 100_000] {
        for byte in [0x00u8, 0x01, 0xFF] {
            let huge = vec![byte; len];
            assert_eq!(e.get(&huge, Timestamp::MAX).unwrap(), None);
            assert_eq!(e.get_value(&huge, Timestamp::MAX).unwrap(), None);
            assert!(e.versions(&huge).unwrap().is_empty());
            let bounds = [
                Bound::Included(b(&huge)),
                Bound::Excluded(b(&huge)),
                Bound::Included(b(&max)),
                Bound::Excluded(b(&max)),
                Bound::Unbounded,
            ];
            for start in &bounds {
                for end in &bounds {
                    let got = e
                        .scan(start.clone(), end.clone(), Timestamp::MAX, 10, true)
                        .unwrap();
                    let want = model_scan(&m, start, end, Timestamp::MAX, 10, true);
                    assert_eq!(got, want, "{len} x {byte}");
                }
            }
        }
    }
    max.push(0);
    assert!(e.put(b(&max), ts(2), b(b"no")).is_err());
}

/// Keys of exactly [`MAX_KEY_LEN`] bytes work, whatever their bytes.
pub fn max_key_len(e: &dyn Engine) {
    let mut m = Model::new();
    for byte in [0x00u8, 0xFF, b'k'] {
        let key = vec![byte; MAX_KEY_LEN];
        write(e, &mut m, put(&key, 2, &[byte]));
        write(e, &mut m, del(&key, 3));
        write(e, &mut m, put(&key, 4, b"again"));
    }
    let mut almost = vec![0u8; MAX_KEY_LEN];
    *almost.last_mut().unwrap() = 1;
    write(e, &mut m, put(&almost, 1, b"almost"));
    assert_matches(e, &m, 0..=5);
    let all = e
        .scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            100,
            true,
        )
        .unwrap();
    assert_eq!(
        all,
        model_scan(
            &m,
            &Bound::Unbounded,
            &Bound::Unbounded,
            Timestamp::MAX,
            100,
            true
        )
    );
    assert_eq!(e.stats().live_keys, 4);
}

/// The empty key and empty values are ordinary.
pub fn empty_keys_and_values(e: &dyn Engine) {
    e.put(Bytes::new(), ts(1), Bytes::new()).unwrap();
    assert_eq!(e.get(b"", ts(1)).unwrap(), Some(val(1, b"")));
    assert_eq!(e.get_value(b"", ts(1)).unwrap(), Some(Bytes::new()));
    assert_eq!(e.get(b"", ts(0)).unwrap(), None);
    e.put(b(b"a"), ts(1), Bytes::new()).unwrap();
    assert_eq!(e.stats().live_keys, 2, "an empty value is a value");
    let all = e
        .scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            10,
            false,
        )
        .unwrap();
    assert_eq!(
        all,
        vec![(Bytes::new(), val(1, b"")), (b(b"a"), val(1, b""))]
    );
    let from_empty = e
        .scan(
            Bound::Included(Bytes::new()),
            Bound::Included(Bytes::new()),
            Timestamp::MAX,
            10,
            false,
        )
        .unwrap();
    assert_eq!(from_empty, vec![(Bytes::new(), val(1, b""))]);
    let after_empty = e
        .scan(
            Bound::Excluded(Bytes::new()),
            Bound::Unbounded,
            Timestamp::MAX,
            10,
            false,
        )
        .unwrap();
    assert_eq!(after_empty, vec![(b(b"a"), val(1, b""))]);
    e.delete(Bytes::new(), ts(2)).unwrap();
    assert_eq!(e.get_value(b"", ts(2)).unwrap(), None);
    assert_eq!(e.get_value(b"", ts(1)).unwrap(), Some(Bytes::new()));
    assert_eq!(e.stats().live_keys, 1);
}

/// Keys made of 0x00 and 0xFF bytes, and of lengths around the encoding's group size.
fn binary_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        vec![0, 0],
        vec![0, 0, 0],
        vec![0, 1],
        vec![0, 0xFF],
        vec![1],
        vec![0xFF],
        vec![0xFF, 0],
        vec![0xFF, 0xFF],
        vec![0xFF, 0xFF, 0xFF],
        b"a".to_vec(),
        b"a\x00".to_vec(),
        b"a\x00\x00".to_vec(),
        b"a\x00b".to_vec(),
        b"a\x01".to_vec(),
        b"a\xff".to_vec(),
        b"ab".to_vec(),
    ];
    for len in [15, 16, 17, 32, 33] {
        for byte in [0u8, 0xFF, b'a'] {
            keys.push(vec![byte; len]);
        }
        let mut k = vec![b'a'; len];
        k.push(0);
        keys.push(k);
    }
    keys
}

/// Binary keys come back in bytewise order, and each reads as itself.
pub fn binary_keys_ordering(e: &dyn Engine) {
    let keys = binary_keys();
    let mut rng = XorShift::new(7);
    let mut shuffled = keys.clone();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut m = Model::new();
    for (i, k) in shuffled.iter().enumerate() {
        write(e, &mut m, put(k, 10, &i.to_be_bytes()));
        write(e, &mut m, put(k, 20 + i as u64, k));
    }
    let all = e
        .scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            usize::MAX,
            true,
        )
        .unwrap();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(
        all.iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>(),
        sorted
    );
    assert_matches(e, &m, [9, 10, 15, 25, 40, u64::MAX]);
    for k in &keys {
        assert_eq!(e.versions(k).unwrap().len(), 2, "versions of {k:?}");
    }
    // Every pair of bounds drawn from the keys themselves.
    let bounds: Vec<Bound<Bytes>> = std::iter::once(Bound::Unbounded)
        .chain(
            keys.iter()
                .step_by(3)
                .flat_map(|k| [Bound::Included(b(k)), Bound::Excluded(b(k))]),
        )
        .collect();
    for start in &bounds {
        for end in &bounds {
            for at in [15, u64::MAX] {
                let got = e
                    .scan(start.clone(), end.clone(), ts(at), 5, false)
                    .unwrap();
                let want = model_scan(&m, start, end, ts(at), 5, false);
                assert_eq!(got, want, "scan({start:?}, {end:?}, {at})");
            }
        }
    }
    assert_eq!(e.stats().live_keys, keys.len() as u64);
}

/// Scans: bounds, limit, snapshot timestamp and tombstones, against the model.
pub fn scans(e: &dyn Engine) {
    let mut m = Model::new();
    let mut rng = XorShift::new(42);
    let keys: Vec<Bytes> = (0..24u8)
        .map(|i| match i % 4 {
            0 => b([i]),
            1 => b([b'k', i, 0]),
            2 => b([b'k', i, 0xFF]),
            _ => b(format!("key-{i:02}")),
        })
        .collect();
    for _ in 0..120 {
        let k = &keys[rng.below(keys.len() as u64) as usize];
        let t = 1 + rng.below(30);
        let op = if rng.below(4) == 0 {
            del(k, t)
        } else {
            put(k, t, format!("{k:?}@{t}").as_bytes())
        };
        write(e, &mut m, op);
    }
    let mut bounds = vec![Bound::Unbounded];
    for i in [0usize, 5, 6, 13, 23] {
        bounds.push(Bound::Included(keys[i].clone()));
        bounds.push(Bound::Excluded(keys[i].clone()));
    }
    bounds.push(Bound::Included(b(b"k")));
    bounds.push(Bound::Excluded(b(b"zzz")));
    for start in &bounds {
        for end in &bounds {
            for at in [0, 5, 15, 31, u64::MAX] {
                for limit in [0, 1, 3, 100] {
                    for tombs in [false, true] {
                        let got = e
                            .scan(start.clone(), end.clone(), ts(at), limit, tombs)
                            .unwrap();
                        let want = model_scan(&m, start, end, ts(at), limit, tombs);
                        assert_eq!(
                            got, want,
                            "scan({start:?}, {end:?}, {at}, {limit}, {tombs})"
                        );
                    }
                }
            }
        }
    }
    // Inverted and degenerate ranges are empty, not errors.
    for (s, en) in [
        (Bound::Included(b(b"z")), Bound::Included(b(b"a"))),
        (Bound::Excluded(b(b"k")), Bound::Excluded(b(b"k"))),
        (Bound::Included(b(b"k")), Bound::Excluded(b(b"k"))),
        (Bound::Excluded(b(b"k")), Bound::Included(b(b"k"))),
    ] {
        assert!(e.scan(s, en, Timestamp::MAX, 10, true).unwrap().is_empty());
    }
    assert_eq!(e.stats().live_keys, model_live(&m));
}

/// The gc scenario: per key, its history and what `gc(25)` leaves.
fn gc_scenario(e: &dyn Engine, m: &mut Model) {
    write(e, m, put(b"a", 10, b"a10"));
    write(e, m, put(b"a", 20, b"a20"));
    write(e, m, put(b"a", 30, b"a30"));
    write(e, m, put(b"b", 10, b"b10"));
    write(e, m, del(b"b", 20));
    write(e, m, del(b"c", 10));
    write(e, m, put(b"c", 30, b"c30"));
    write(e, m, put(b"d", 30, b"d30"));
    write(e, m, del(b"e", 5));
    write(e, m, put(b"f", 5, b"f5"));
    write(e, m, put(b"f", 25, b"f25"));
    write(e, m, put(b"g", 1, b"g1"));
    write(e, m, del(b"g", 25));
    write(e, m, del(b"h", 26));
}

/// gc keeps every read at or above the horizon, and buries dead tombstones.
pub fn gc_semantics(e: &dyn Engine) {
    let mut m = Model::new();
    gc_scenario(e, &mut m);
    let h = ts(25);
    let reads = |e: &dyn Engine| {
        let mut out = Vec::new();
        for k in m.keys() {
            for t in [25, 26, 29, 30, 31, u64::MAX] {
                out.push(e.get_value(k, ts(t)).unwrap());
            }
        }
        for t in [25, 30, u64::MAX] {
            out.push(Some(Bytes::from(format!(
                "{:?}",
                e.scan(Bound::Unbounded, Bound::Unbounded, ts(t), 100, false)
                    .unwrap()
            ))));
        }
        out
    };
    let before = reads(e);
    let latest = |e: &dyn Engine| {
        m.keys()
            .map(|k| e.get_value(k, Timestamp::MAX).unwrap())
            .collect::<Vec<_>>()
    };
    let latest_before = latest(e);
    let live = e.stats().live_keys;
    assert_eq!(live, 4, "a, c, d, f");
    let stats = e.gc(h).unwrap();
    assert_eq!(
        stats,
        GcStats {
            versions_removed: 7,
            keys_removed: 3
        },
        "a10; b10 and b20 (b goes); e5 (e goes); f5; g1 and g25 (g goes)"
    );
    assert_eq!(
        reads(e),
        before,
        "reads at or above the horizon are unchanged"
    );
    assert_eq!(e.stats().live_keys, live);
    assert_eq!(
        e.versions(b"a").unwrap(),
        vec![val(20, b"a20"), val(30, b"a30")]
    );
    assert_eq!(e.versions(b"b").unwrap(), vec![]);
    assert_eq!(e.versions(b"c").unwrap(), vec![tomb(10), val(30, b"c30")]);
    assert_eq!(e.versions(b"d").unwrap(), vec![val(30, b"d30")]);
    assert_eq!(e.versions(b"e").unwrap(), vec![]);
    assert_eq!(e.versions(b"f").unwrap(), vec![val(25, b"f25")]);
    assert_eq!(e.versions(b"g").unwrap(), vec![]);
    assert_eq!(
        e.versions(b"h").unwrap(),
        vec![tomb(26)],
        "above the horizon"
    );
    assert_eq!(
        e.get(b"b", Timestamp::MAX).unwrap(),
        None,
        "buried tombstone gone"
    );
    for t in [25, 30, u64::MAX] {
        let all = e
            .scan(Bound::Unbounded, Bound::Unbounded, ts(t), 100, true)
            .unwrap();
        assert_scan(
            &m,
            &Bound::Unbounded,
            &Bound::Unbounded,
            ts(t),
            100,
            true,
            h,
            &all,
        );
        assert!(
            all.iter()
                .all(|(k, _)| !matches!(&k[..], b"b" | b"e" | b"g"))
        );
    }
    // Again, or lower: nothing more to do.
    assert_eq!(e.gc(h).unwrap(), GcStats::default());
    assert_eq!(e.gc(ts(10)).unwrap(), GcStats::default());
    // Everything but the latest version of live keys goes at the top.
    let stats = e.gc(Timestamp::MAX).unwrap();
    assert_eq!(stats.keys_removed, 1, "h");
    assert_eq!(stats.versions_removed, 3, "a20, c10, h26");
    for k in [b"a", b"c", b"d", b"f"] {
        assert_eq!(e.versions(k).unwrap().len(), 1);
    }
    assert_eq!(e.stats().live_keys, 4);
    assert_eq!(latest(e), latest_before);
}

/// gc over many keys, in chunks, with values and tombstones interleaved.
pub fn gc_many_keys(e: &dyn Engine) {
    let mut m = Model::new();
    let mut batch = WriteBatch::new();
    for i in 0..3000u32 {
        let k = b(format!("key{i:05}"));
        for t in 1..=(i % 4 + 1) as u64 {
            if (i + t as u32).is_multiple_of(3) {
                batch.delete(k.clone(), ts(t * 10));
            } else {
                batch.put(k.clone(), ts(t * 10), b(i.to_le_bytes()));
            }
        }
        if batch.len() > 500 {
            for op in &batch.ops {
                model_apply(&mut m, op);
            }
            e.write_batch(std::mem::take(&mut batch)).unwrap();
        }
    }
    for op in &batch.ops {
        model_apply(&mut m, op);
    }
    e.write_batch(batch).unwrap();
    assert_eq!(e.stats().live_keys, model_live(&m));
    let h = ts(25);
    let stats = e.gc(h).unwrap();
    // Expected: per key, versions at or below 25 except the newest of them, plus buried
    // tombstones.
    let mut want = GcStats::default();
    for chain in m.values() {
        let below = chain.range(..=h).count() as u64;
        let above = chain.len() as u64 - below;
        want.versions_removed += below.saturating_sub(1);
        let newest_below = chain.range(..=h).next_back();
        if above == 0 && newest_below.is_some_and(|(_, v)| v.is_none()) {
            want.versions_removed += 1;
            want.keys_removed += 1;
        }
    }
    assert_eq!(stats, want);
    assert_eq!(e.stats().live_keys, model_live(&m));
    for t in [25, 35, u64::MAX] {
        let got = e
            .scan(Bound::Unbounded, Bound::Unbounded, ts(t), usize::MAX, true)
            .unwrap();
        assert_scan(
            &m,
            &Bound::Unbounded,
            &Bound::Unbounded,
            ts(t),
            usize::MAX,
            true,
            h,
            &got,
        );
    }
}

/// An inline horizon may prune, but never changes reads at or above it; lower ones are
/// ignored.
pub fn gc_horizon_inline(e: &dyn Engine) {
    let mut m = Model::new();
    let mut rng = XorShift::new(99);
    // A history below and around the horizon-to-be...
    for _ in 0..100 {
        let k = [b'k', rng.below(12) as u8];
        let t = 10 + rng.below(50);
        let op = if rng.below(3) == 0 {
            del(&k, t)
        } else {
            put(&k, t, &t.to_be_bytes())
        };
        write(e, &mut m, op);
    }
    let h = ts(50);
    e.set_gc_horizon(h);
    e.set_gc_horizon(ts(10)); // ignored: horizons only rise
    // ...then writes at or above it (the horizon says no one reads below it any more), which
    // an engine may use to prune the keys' older versions.
    for _ in 0..200 {
        let k = [b'k', rng.below(12) as u8];
        let t = 50 + rng.below(30);
        let op = if rng.below(3) == 0 {
            del(&k, t)
        } else {
            put(&k, t, &t.to_be_bytes())
        };
        write(e, &mut m, op);
        let k = [b'k', rng.below(12) as u8];
        let at = ts(50 + rng.below(35));
        assert_get(&m, &k, at, h, e.get(&k, at).unwrap());
    }
    for t in [50, 55, 60, 69, 70, 79, 80, u64::MAX] {
        for k in m.keys() {
            assert_get(&m, k, ts(t), h, e.get(k, ts(t)).unwrap());
            assert_eq!(
                e.get_value(k, ts(t)).unwrap(),
                model_get(&m, k, ts(t)).and_then(|v| v.value)
            );
        }
        for tombs in [false, true] {
            let got = e
                .scan(Bound::Unbounded, Bound::Unbounded, ts(t), 7, tombs)
                .unwrap();
            assert_scan(
                &m,
                &Bound::Unbounded,
                &Bound::Unbounded,
                ts(t),
                7,
                tombs,
                h,
                &got,
            );
        }
    }
    assert_eq!(e.stats().live_keys, model_live(&m));
}

/// `clear` removes everything, and the engine works afterwards.
pub fn clear(e: &dyn Engine) {
    for i in 0..100u32 {
        e.put(b(i.to_be_bytes()), ts(1), b(b"v")).unwrap();
        e.delete(b(i.to_be_bytes()), ts(2 + 2 * u64::from(i % 2)))
            .unwrap();
        e.put(b(i.to_be_bytes()), ts(3), b(b"w")).unwrap();
    }
    assert_eq!(e.stats().live_keys, 50);
    e.clear().unwrap();
    assert_eq!(e.stats().live_keys, 0);
    assert!(
        e.scan(Bound::Unbounded, Bound::Unbounded, Timestamp::MAX, 10, true)
            .unwrap()
            .is_empty()
    );
    assert_eq!(e.get(&0u32.to_be_bytes(), Timestamp::MAX).unwrap(), None);
    assert!(e.versions(&7u32.to_be_bytes()).unwrap().is_empty());
    e.put(b(b"after"), ts(1), b(b"v")).unwrap();
    assert_eq!(e.get_value(b"after", ts(1)).unwrap(), Some(b(b"v")));
    assert_eq!(e.stats().live_keys, 1);
    assert_eq!(e.stats().versions, 1);
    e.clear().unwrap();
    e.clear().unwrap();
    assert_eq!(e.stats().live_keys, 0);
}

/// `stats().live_keys` is exact after concurrent writers, gc passes and batches.
pub fn live_keys_exact_under_concurrency(e: &dyn Engine, ops_per_thread: u64) {
    std::thread::scope(|s| {
        for thread in 0..4u64 {
            s.spawn(move || {
                let mut rng = XorShift::new(thread + 1);
                for i in 0..ops_per_thread {
                    // Keys overlap between threads; timestamps too, sometimes.
                    let k = b([b'k', rng.below(40) as u8]);
                    let t = ts(1 + rng.below(60));
                    match rng.below(5) {
                        0 => e.delete(k, t).unwrap(),
                        1 => {
                            let mut batch = WriteBatch::new();
                            for j in 0..3 {
                                let k = b([b'k', rng.below(40) as u8]);
                                if (i + j) % 3 == 0 {
                                    batch.delete(k, t);
                                } else {
                                    batch.put(k, t, b(b"b"));
                                }
                            }
                            e.write_batch(batch).unwrap();
                        }
                        _ => e.put(k, t, b(thread.to_be_bytes())).unwrap(),
                    }
                }
            });
        }
        s.spawn(|| {
            // gc passes with a rising horizon, racing with the writers.
            for h in (0..60).step_by(3) {
                e.gc(ts(h)).unwrap();
                std::thread::yield_now();
            }
        });
        s.spawn(|| {
            // A reader, so reads race with writes too.
            for _ in 0..50 {
                let live = e
                    .scan(
                        Bound::Unbounded,
                        Bound::Unbounded,
                        Timestamp::MAX,
                        100,
                        false,
                    )
                    .unwrap();
                assert!(live.iter().all(|(_, v)| !v.is_tombstone()));
            }
        });
    });
    let live = e
        .scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            usize::MAX,
            false,
        )
        .unwrap();
    assert_eq!(e.stats().live_keys, live.len() as u64);
}

/// Readers never see part of a batch: every batch rewrites all keys with one value.
pub fn batches_are_atomic_to_readers(e: &dyn Engine, batches: u64) {
    const KEYS: u8 = 8;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=batches {
                let mut batch = WriteBatch::new();
                for k in 0..KEYS {
                    batch.put(b([k]), ts(i), b(i.to_be_bytes()));
                }
                e.write_batch(batch).unwrap();
            }
            done.store(true, Ordering::Release);
        });
        for reader in 0..2 {
            let done = &done;
            s.spawn(move || {
                let value = |v: &Version| {
                    u64::from_be_bytes(v.value.as_ref().unwrap()[..].try_into().unwrap())
                };
                let mut checks = 0u64;
                while !done.load(Ordering::Acquire) || checks < 10 {
                    checks += 1;
                    if reader == 0 {
                        let all = e
                            .scan(
                                Bound::Unbounded,
                                Bound::Unbounded,
                                Timestamp::MAX,
                                100,
                                false,
                            )
                            .unwrap();
                        assert!(all.is_empty() || all.len() == usize::from(KEYS), "{all:?}");
                        assert!(
                            all.windows(2).all(|w| value(&w[0].1) == value(&w[1].1)),
                            "a scan saw part of a batch: {all:?}"
                        );
                    } else {
                        // Point reads in the batch's order: a later key is never older.
                        let mut last = 0;
                        for k in 0..KEYS {
                            let v = e.get_latest(&[k]).unwrap().map_or(0, |v| value(&v));
                            assert!(v >= last, "key {k} at {v} after a key at {last}");
                            last = v;
                        }
                    }
                }
            });
        }
    });
    let all = e
        .scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            100,
            false,
        )
        .unwrap();
    assert_eq!(all.len(), usize::from(KEYS));
    assert_eq!(e.stats().live_keys, u64::from(KEYS));
}

/// A larger mixed workload checked against the model, with big values.
pub fn mixed_workload(e: &dyn Engine) {
    let mut m = Model::new();
    let mut rng = XorShift::new(2024);
    for i in 0..400u64 {
        let k = format!("user:{}", rng.below(60));
        let t = 1 + rng.below(100);
        let op = match rng.below(10) {
            0 | 1 => del(k.as_bytes(), t),
            2 => put(k.as_bytes(), t, &vec![i as u8; 5000 + i as usize]),
            _ => put(k.as_bytes(), t, format!("v{i}").as_bytes()),
        };
        write(e, &mut m, op);
    }
    assert_matches(e, &m, [0, 10, 50, 99, 100, u64::MAX]);
    assert_eq!(e.stats().live_keys, model_live(&m));
    let map: BTreeMap<Bytes, Version> = e
        .scan(Bound::Unbounded, Bound::Unbounded, ts(50), usize::MAX, true)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(
        map.len(),
        model_scan(
            &m,
            &Bound::Unbounded,
            &Bound::Unbounded,
            ts(50),
            usize::MAX,
            true
        )
        .len()
    );
}

/// Everything written survives closing and reopening: versions, tombstones, counts, and the
/// effects of gc and clear.
pub fn reopen_persists(h: &mut dyn Harness) {
    let mut m = Model::new();
    let e = h.engine();
    gc_scenario(e, &mut m);
    for k in binary_keys() {
        write(e, &mut m, put(&k, 40, &k));
    }
    let long = vec![0u8; MAX_KEY_LEN];
    write(e, &mut m, put(&long, 41, b"long"));
    let mut batch = WriteBatch::new();
    batch
        .put(b(b"batch1"), ts(7), b(b"x"))
        .delete(b(b"batch2"), ts(7));
    for op in &batch.ops {
        model_apply(&mut m, op);
    }
    e.write_batch(batch).unwrap();
    let live = e.stats().live_keys;
    assert_eq!(live, model_live(&m));
    if !h.reopen() {
        return;
    }
    let e = h.engine();
    assert_matches(e, &m, [0, 5, 10, 20, 25, 30, 40, 41, u64::MAX]);
    assert_eq!(e.stats().live_keys, live);
    // gc, then reopen: the pruned state persists.
    let stats = e.gc(ts(25)).unwrap();
    assert_eq!(stats.keys_removed, 4, "b, e, g and batch2");
    let after_gc: Vec<_> = m.keys().map(|k| e.versions(k).unwrap()).collect();
    h.reopen();
    let e = h.engine();
    let reopened: Vec<_> = m.keys().map(|k| e.versions(k).unwrap()).collect();
    assert_eq!(reopened, after_gc);
    assert_eq!(e.stats().live_keys, live);
    // clear, write, reopen: only the new write is there.
    e.clear().unwrap();
    e.put(b(b"new"), ts(1), b(b"v")).unwrap();
    e.flush().unwrap();
    h.reopen();
    let e = h.engine();
    let all = e
        .scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            100,
            true,
        )
        .unwrap();
    assert_eq!(all, vec![(b(b"new"), val(1, b"v"))]);
    assert_eq!(e.stats().live_keys, 1);
    assert_eq!(e.stats().versions, 1);
}

/// Reopening many times, writing in between, with data both in disk tables and in memory,
/// keeps everything.
pub fn reopen_repeatedly(h: &mut dyn Harness) {
    let mut m = Model::new();
    for round in 0..4u64 {
        let e = h.engine();
        let mut batch = WriteBatch::new();
        for i in 0..300u64 {
            let k = b(format!("r{}", (i * 7 + round) % 250));
            if i % 5 == 0 {
                batch.delete(k, ts(round * 1000 + i));
            } else {
                batch.put(
                    k,
                    ts(round * 1000 + i),
                    Bytes::from(vec![round as u8; 2000]),
                );
            }
        }
        for op in &batch.ops {
            model_apply(&mut m, op);
        }
        e.write_batch(batch).unwrap();
        if round % 2 == 0 {
            h.to_disk();
        }
        if round == 2 {
            h.engine().gc(ts(1500)).unwrap();
        }
        if !h.reopen() {
            return;
        }
        let e = h.engine();
        assert_eq!(e.stats().live_keys, model_live(&m), "round {round}");
        let got = e
            .scan(
                Bound::Unbounded,
                Bound::Unbounded,
                Timestamp::MAX,
                usize::MAX,
                true,
            )
            .unwrap();
        let horizon = if round >= 2 { ts(1500) } else { Timestamp::MIN };
        assert_scan(
            &m,
            &Bound::Unbounded,
            &Bound::Unbounded,
            Timestamp::MAX,
            usize::MAX,
            true,
            horizon,
            &got,
        );
        for t in [1500, 2100, 3299] {
            for k in m.keys().step_by(7) {
                assert_get(&m, k, ts(t), horizon, e.get(k, ts(t)).unwrap());
            }
        }
    }
}

/// `flush` works under every policy, and so does dropping the engine (which stops the
/// `Everysec` thread).
pub fn flush_and_drop(e: &dyn Engine) {
    e.put(b(b"k"), ts(1), b(b"v")).unwrap();
    e.flush().unwrap();
    e.flush().unwrap();
    assert_eq!(e.get_value(b"k", ts(1)).unwrap(), Some(b(b"v")));
}

/// Instantiates the listed checks as tests in a module, for an engine made by `$make`.
/// RANDOMKEY's draw: over the draws `0..n`, every live key exactly once (a uniform draw
/// is a uniform key); deleted keys never; nothing from an empty engine.
pub fn random_live_keys(e: &dyn Engine) {
    assert_eq!(e.random_live_key(7).unwrap(), None, "empty");
    let n = 2_500u64;
    for i in 0..n {
        e.put(b(format!("k{i:05}").as_bytes()), ts(1), b(b"v"))
            .unwrap();
    }
    for i in (0..n).step_by(5) {
        e.delete(b(format!("k{i:05}").as_bytes()), ts(2)).unwrap();
    }
    let live = n - n / 5;
    let mut seen = std::collections::BTreeSet::new();
    for draw in 0..live {
        let k = e
            .random_live_key(draw + live * 3)
            .unwrap()
            .expect("a live key");
        assert!(
            !k.ends_with(b"0") && !k.ends_with(b"5"),
            "deleted key {k:?} drawn"
        );
        seen.insert(k);
    }
    assert_eq!(seen.len() as u64, live, "each live key once");
}

macro_rules! instantiate {
    ($module:ident, $make:expr, [$($check:ident),* $(,)?], [$($reopen:ident),* $(,)?], $scale:expr) => {
        mod $module {
            #[allow(unused_imports)]
            use super::super::common::*;
            #[allow(unused_imports)]
            use meridian_storage::{Durability, MemEngine};
            $(
                #[test]
                fn $check() {
                    let h = $make;
                    super::$check(Harness::engine(&h));
                }
            )*
            $(
                #[test]
                fn $reopen() {
                    let mut h = $make;
                    super::$reopen(&mut h);
                }
            )*
            #[test]
            fn live_keys_exact_under_concurrency() {
                let h = $make;
                super::live_keys_exact_under_concurrency(Harness::engine(&h), 150 / $scale);
            }
            #[test]
            fn batches_are_atomic_to_readers() {
                let h = $make;
                super::batches_are_atomic_to_readers(Harness::engine(&h), 200 / $scale);
            }
        }
    };
}

instantiate!(
    mem,
    MemEngine::new(),
    [
        snapshot_reads_at_many_timestamps,
        tombstones,
        same_ts_overwrite,
        batch_with_oversized_key_writes_nothing,
        max_key_len,
        oversized_reads,
        empty_keys_and_values,
        binary_keys_ordering,
        scans,
        gc_semantics,
        gc_many_keys,
        gc_horizon_inline,
        clear,
        mixed_workload,
        flush_and_drop,
        random_live_keys,
    ],
    [reopen_persists],
    1
);

instantiate!(
    fjall_never,
    FjallHarness::new(Durability::Never),
    [
        snapshot_reads_at_many_timestamps,
        tombstones,
        same_ts_overwrite,
        batch_with_oversized_key_writes_nothing,
        max_key_len,
        oversized_reads,
        empty_keys_and_values,
        binary_keys_ordering,
        scans,
        gc_semantics,
        gc_many_keys,
        gc_horizon_inline,
        clear,
        mixed_workload,
        flush_and_drop,
        random_live_keys,
    ],
    [reopen_persists, reopen_repeatedly],
    1
);

instantiate!(
    fjall_always,
    FjallHarness::new(Durability::Always),
    [
        snapshot_reads_at_many_timestamps,
        tombstones,
        same_ts_overwrite,
        batch_with_oversized_key_writes_nothing,
        oversized_reads,
        empty_keys_and_values,
        gc_semantics,
        clear,
        flush_and_drop,
        random_live_keys,
    ],
    [reopen_persists],
    3
);

instantiate!(
    fjall_everysec,
    FjallHarness::new(Durability::Everysec),
    [
        snapshot_reads_at_many_timestamps,
        tombstones,
        same_ts_overwrite,
        batch_with_oversized_key_writes_nothing,
        oversized_reads,
        empty_keys_and_values,
        gc_semantics,
        clear,
        flush_and_drop,
        random_live_keys,
    ],
    [reopen_persists],
    1
);

/// The `Everysec` thread runs a few rounds (one with a write to sync, then idle ones) without
/// disturbing anything, and dropping the engine stops it.
#[test]
fn everysec_thread_runs_and_stops() {
    let mut h = FjallHarness::new(Durability::Everysec);
    h.engine().put(b(b"k"), ts(1), b(b"v")).unwrap();
    // Let the background thread run at least one round (no timing is asserted).
    std::thread::sleep(std::time::Duration::from_millis(1200));
    h.reopen();
    assert_eq!(h.engine().get_value(b"k", ts(1)).unwrap(), Some(b(b"v")));
}

/// Two engines cannot share a directory: the second open fails cleanly.
#[test]
fn second_open_of_a_directory_fails() {
    let dir = tempfile::tempdir().unwrap();
    let first = open_fjall(dir.path(), Durability::Never);
    let second = meridian_storage::FjallEngine::open(meridian_storage::FjallConfig::new(
        dir.path(),
        Durability::Never,
    ));
    assert!(second.is_err());
    drop(first);
    let again = open_fjall(dir.path(), Durability::Never);
    assert_eq!(again.stats().live_keys, 0);
    assert_eq!(again.name(), "fjall");
}
