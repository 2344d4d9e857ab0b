//! Tests of [`FjallEngine`](super::FjallEngine): versions, scans, durability across
//! reopen and the key encoding.

use super::encoding::encode_key;
use super::*;
use proptest::prelude::*;

fn enc(k: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(k, &mut out);
    out
}

#[test]
fn encoding_round_trips_edge_keys() {
    for len in [0, 1, 15, 16, 17, 31, 32, 33] {
        for byte in [0x00, 0x01, 0xFE, 0xFF] {
            let key = vec![byte; len];
            let e = enc(&key);
            assert_eq!(e.len() % (GROUP + 1), 0);
            assert_eq!(&decode_key(&e).unwrap()[..], &key[..]);
        }
    }
}

#[test]
fn the_longest_key_fits_fjall() {
    let key = vec![0u8; crate::MAX_KEY_LEN];
    assert!(entry_key(&key, Timestamp(1)).len() <= usize::from(u16::MAX));
}

#[test]
fn corrupt_encodings_are_rejected() {
    assert!(decode_key(&[]).is_err());
    assert!(decode_key(&[0; 5]).is_err());
    let mut e = enc(b"abc");
    *e.last_mut().unwrap() = MARKER_MORE;
    assert!(decode_key(&e).is_err());
}

fn engine(durability: Durability) -> (tempfile::TempDir, FjallEngine) {
    let dir = tempfile::tempdir().unwrap();
    let e = FjallEngine::open(FjallConfig::new(dir.path().join("db"), durability)).unwrap();
    (dir, e)
}

#[test]
fn always_has_fsynced_every_write_when_it_returns() {
    let (_dir, e) = engine(Durability::Always);
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let e = &e;
            s.spawn(move || {
                for i in 0..50u64 {
                    let before = e.inner.sync.committed.load(Ordering::Acquire);
                    e.put(Bytes::from(vec![t]), Timestamp(i), Bytes::new())
                        .unwrap();
                    // This write's sequence number is above `before`, and is covered.
                    assert!(*e.inner.sync.synced.lock() > before);
                }
            });
        }
    });
    assert_eq!(*e.inner.sync.synced.lock(), 200);
}

#[test]
fn never_leaves_fsync_to_flush() {
    let (_dir, e) = engine(Durability::Never);
    e.put(Bytes::from_static(b"k"), Timestamp(1), Bytes::new())
        .unwrap();
    assert_eq!(*e.inner.sync.synced.lock(), 0);
    e.flush().unwrap();
    assert_eq!(*e.inner.sync.synced.lock(), 1);
}

#[test]
fn sync_written_fsyncs_what_returned_once_and_only_when_the_policy_has_not() {
    let fsyncs = |e: &FjallEngine| e.inner.sync.fsyncs.load(Ordering::Relaxed);
    for durability in [Durability::Everysec, Durability::Never] {
        let (_dir, e) = engine(durability);
        assert_eq!(e.write_durability(), WriteDurability::OnSync);
        e.put(Bytes::from_static(b"k"), Timestamp(1), Bytes::new())
            .unwrap();
        let before = fsyncs(&e);
        e.sync_written().unwrap();
        assert_eq!(*e.inner.sync.synced.lock(), 1);
        assert!(fsyncs(&e) > before);
        // Nothing new since: no second fsync.
        let after = fsyncs(&e);
        e.sync_written().unwrap();
        assert_eq!(fsyncs(&e), after);
    }
    let (_dir, e) = engine(Durability::Always);
    assert_eq!(e.write_durability(), WriteDurability::OnReturn);
    e.put(Bytes::from_static(b"k"), Timestamp(1), Bytes::new())
        .unwrap();
    let after = fsyncs(&e);
    e.sync_written().unwrap();
    assert_eq!(fsyncs(&e), after);
}

/// The live keys as of now, counted by a scan.
fn scanned_live(e: &FjallEngine) -> u64 {
    e.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Timestamp::MAX,
        usize::MAX,
        false,
    )
    .unwrap()
    .len() as u64
}

/// The latest-version index, as (user key, ts, is a value).
fn index_of(e: &FjallEngine) -> Vec<(Bytes, u64, bool)> {
    e.inner
        .store()
        .unwrap()
        .latest
        .iter()
        .map(|g| {
            let (k, v) = g.into_inner().unwrap();
            let (ts, live) = decode_latest(&v).unwrap();
            (decode_key(&k).unwrap(), ts.0, live)
        })
        .collect()
}

fn bs(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn the_index_is_repaired_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let config = FjallConfig::new(dir.path().join("db"), Durability::Never);
    let expected = {
        let e = FjallEngine::open(config.clone()).unwrap();
        e.put(bs("a"), Timestamp(1), bs("1")).unwrap();
        e.put(bs("a"), Timestamp(3), bs("3")).unwrap();
        e.put(bs("b"), Timestamp(2), bs("2")).unwrap();
        e.delete(bs("b"), Timestamp(4)).unwrap();
        e.put(bs("c"), Timestamp(5), bs("5")).unwrap();
        e.put(bs("d"), Timestamp(6), bs("6")).unwrap();
        let expected = index_of(&e);
        assert_eq!(
            expected,
            vec![
                (bs("a"), 3, true),
                (bs("b"), 4, false),
                (bs("c"), 5, true),
                (bs("d"), 6, true)
            ]
        );
        // Damage the index: a missing entry, a wrong one, one without versions.
        let st = e.inner.store().unwrap();
        st.latest.remove(enc(b"a")).unwrap();
        st.latest
            .insert(enc(b"c"), latest_value(Timestamp(1), false).as_slice())
            .unwrap();
        st.latest
            .insert(enc(b"zz"), latest_value(Timestamp(9), true).as_slice())
            .unwrap();
        drop(st);
        expected
    };
    let e = FjallEngine::open(config.clone()).unwrap();
    assert_eq!(index_of(&e), expected);
    assert_eq!(e.stats().live_keys, 3);
    // A database without the index (as written before it existed) gets it built.
    e.inner.store().unwrap().latest.clear().unwrap();
    drop(e);
    let e = FjallEngine::open(config).unwrap();
    assert_eq!(index_of(&e), expected);
    e.delete(bs("a"), Timestamp(7)).unwrap();
    e.put(bs("b"), Timestamp(7), bs("7")).unwrap();
    assert_eq!(e.stats().live_keys, 3);
    assert_eq!(scanned_live(&e), 3);
}

#[test]
fn gc_removes_the_index_entry_of_a_key_it_removes() {
    let (_dir, e) = engine(Durability::Never);
    e.put(bs("k"), Timestamp(1), bs("v")).unwrap();
    e.delete(bs("k"), Timestamp(2)).unwrap();
    e.put(bs("j"), Timestamp(1), bs("v")).unwrap();
    e.put(bs("j"), Timestamp(2), bs("w")).unwrap();
    let stats = e.gc(Timestamp(3)).unwrap();
    assert_eq!(stats.keys_removed, 1);
    assert_eq!(index_of(&e), vec![(bs("j"), 2, true)]);
    assert_eq!(e.stats().live_keys, 1);
    e.put(bs("k"), Timestamp(4), bs("again")).unwrap();
    assert_eq!(e.stats().live_keys, 2);
    // Older than the latest version: not the latest, and not live.
    e.delete(bs("j"), Timestamp(1)).unwrap();
    assert_eq!(e.stats().live_keys, 2);
    e.clear().unwrap();
    assert!(index_of(&e).is_empty());
    e.put(bs("k"), Timestamp(5), bs("v")).unwrap();
    assert_eq!(e.stats().live_keys, 1);
}

#[test]
fn many_writers_keep_live_keys_exact_through_group_commit() {
    let (dir, e) = engine(Durability::Always);
    std::thread::scope(|s| {
        for t in 0..16u64 {
            let e = &e;
            s.spawn(move || {
                for i in 0..60u64 {
                    let key = bs(&format!("k{}", (t * 7 + i) % 40));
                    let ts = Timestamp(1 + (i * 16 + t) % 97);
                    if (i + t).is_multiple_of(3) {
                        e.delete(key, ts).unwrap();
                    } else {
                        let mut batch = WriteBatch::new();
                        batch.put(key.clone(), ts, bs("v"));
                        batch.put(bs(&format!("k{}", (t + i) % 40)), ts, bs("w"));
                        batch.delete(key, ts);
                        batch.put(bs(&format!("k{}", (t + i) % 40)), ts, bs("x"));
                        e.write_batch(batch).unwrap();
                    }
                }
            });
        }
    });
    assert_eq!(e.stats().live_keys, scanned_live(&e));
    let index = index_of(&e);
    for (k, ts, live) in &index {
        let v = e.get_latest(k).unwrap().unwrap();
        assert_eq!((v.ts.0, v.value.is_some()), (*ts, *live));
    }
    // Every write was acknowledged after an fsync covering it, in fewer fsyncs than writes.
    assert_eq!(*e.inner.sync.synced.lock(), 16 * 60);
    assert!(e.inner.sync.fsyncs.load(Ordering::Relaxed) <= 16 * 60);
    let live = e.stats().live_keys;
    let config = e.config().clone();
    drop(e);
    let e = FjallEngine::open(config).unwrap();
    assert_eq!(e.stats().live_keys, live);
    assert_eq!(index_of(&e), index);
    drop(dir);
}

/// A storage-level benchmark of concurrent durable writers:
/// `cargo test --release -p meridian-storage --lib -- --ignored --nocapture bench_`.
#[test]
#[ignore = "benchmark"]
fn bench_concurrent_writers() {
    for durability in [Durability::Always, Durability::Everysec] {
        for threads in [1u64, 2, 8, 32] {
            let (_dir, e) = engine(durability);
            let per_thread = match durability {
                Durability::Always => 4000 / threads,
                _ => 100_000 / threads,
            };
            let value = Bytes::from(vec![7u8; 500]);
            let start = std::time::Instant::now();
            std::thread::scope(|s| {
                for t in 0..threads {
                    let (e, value) = (&e, value.clone());
                    s.spawn(move || {
                        for i in 0..per_thread {
                            let key =
                                bs(&format!("key:{:012}", (i * 7919 + t * 104_729) % 100_000));
                            e.put(key, Timestamp(i * threads + t + 1), value.clone())
                                .unwrap();
                        }
                    });
                }
            });
            let elapsed = start.elapsed().as_secs_f64();
            let writes = per_thread * threads;
            let fsyncs = e.inner.sync.fsyncs.load(Ordering::Relaxed);
            println!(
                "{durability:>8} {threads:>2} writers: {:>8.0} writes/s, {:.2} writes per fsync",
                writes as f64 / elapsed,
                writes as f64 / fsyncs.max(1) as f64
            );
        }
    }
}

proptest! {
    #[test]
    fn encoding_preserves_order_and_is_prefix_free(
        a in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xFF), any::<u8>()], 0..40),
        b in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xFF), any::<u8>()], 0..40),
        ta in any::<u64>(),
        tb in any::<u64>(),
    ) {
        let (ea, eb) = (enc(&a), enc(&b));
        prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
        if a != b {
            prop_assert!(!eb.starts_with(&ea) && !ea.starts_with(&eb));
        }
        let (ka, kb) = (entry_key(&a, Timestamp(ta)), entry_key(&b, Timestamp(tb)));
        let expected = a.cmp(&b).then(tb.cmp(&ta));
        prop_assert_eq!(ka.cmp(&kb), expected);
        prop_assert_eq!(&decode_key(&ea).unwrap()[..], &a[..]);
    }
}
