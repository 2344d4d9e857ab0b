//! The object service's invariants (spec `large-objects.md`, invariants 1–6): round trips over
//! sizes × chunk sizes × parallel streams, ranges equal to slices, atomic visibility when the
//! coordinator dies at every step of an upload (with a reader watching), a chunk corrupted at
//! rest served from another replica and repaired, and admission with 768 concurrent transfers
//! (every one completes and verifies; in-flight bytes stay under the cap; with no queue the
//! refused ones fail only with `TooManyTransfers`). Single-node service over a memory
//! keyspace and chunk store, and an embedded 2-DC × 2-node cluster.

use bytes::Bytes;
use futures_util::stream;
use meridian_blob::{ChunkId, MemChunkStore};
use meridian_core::{Clock, SystemClock};
use meridian_net::wan::LinkConfig;
use meridian_server::cluster::{Embedded, EmbeddedConfig};
use meridian_server::keyspace::Keyspace;
use meridian_server::objects::{Backend, BlobConfig, ByteStream, ObjectError, Objects};
use meridian_storage::MemEngine;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

fn local(cfg: BlobConfig) -> Arc<Objects> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let keyspace = Arc::new(Keyspace::new(Arc::new(MemEngine::new()), clock.clone()));
    Arc::new(Objects::new(
        Backend::Local {
            keyspace,
            chunks: Arc::new(MemChunkStore::new()),
        },
        cfg,
        clock,
        7,
    ))
}

fn small_chunks(cs: u32) -> BlobConfig {
    BlobConfig {
        chunk_size: cs,
        threshold: 0,
        ..BlobConfig::default()
    }
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// The body as the network would deliver it: pieces of 10 000 bytes.
pub(super) fn body(bytes: &[u8]) -> ByteStream {
    let pieces: Vec<Result<Bytes, ObjectError>> = bytes
        .chunks(10_000)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(stream::iter(pieces))
}

async fn read_all(o: &Objects, bucket: &str, key: &str) -> Result<Vec<u8>, ObjectError> {
    use futures_util::StreamExt;
    let head = o.head(bucket, key.as_bytes()).await?;
    let size = head.manifest.size;
    if size == 0 {
        return Ok(Vec::new());
    }
    let mut s = o.read(bucket, key.as_bytes(), &head, 0, size - 1).await?;
    let mut out = Vec::with_capacity(size as usize);
    while let Some(b) = s.next().await {
        out.extend_from_slice(&b?);
    }
    Ok(out)
}

async fn read_range(o: &Objects, key: &str, first: u64, last: u64) -> Vec<u8> {
    use futures_util::StreamExt;
    let head = o.head("b", key.as_bytes()).await.unwrap();
    let mut s = o
        .read("b", key.as_bytes(), &head, first, last)
        .await
        .unwrap();
    let mut out = Vec::new();
    while let Some(b) = s.next().await {
        out.extend_from_slice(&b.unwrap());
    }
    out
}

#[tokio::test]
async fn round_trips_over_sizes_and_chunk_sizes() {
    for cs in [64 << 10, 256 << 10] {
        let o = local(small_chunks(cs));
        let cs = cs as usize;
        for (i, size) in [0, 1, cs - 1, cs, cs + 1, 10 * cs + 7]
            .into_iter()
            .enumerate()
        {
            let d = data(i as u64, size);
            let key = format!("k{size}");
            let m = o
                .put("b", key.as_bytes(), body(&d), Default::default(), None)
                .await
                .unwrap();
            assert_eq!(m.size, size as u64);
            assert_eq!(
                m.digest,
                *blake3::hash(&d).as_bytes(),
                "size {size} cs {cs}"
            );
            assert_eq!(
                m.chunks.len(),
                size.div_ceil(cs),
                "chunks of size {size} at chunk size {cs}"
            );
            assert_eq!(
                read_all(&o, "b", &key).await.unwrap(),
                d,
                "size {size} cs {cs}"
            );
        }
    }
}

#[tokio::test]
async fn parallel_part_streams_assemble_the_same_object() {
    use meridian_server::objects::MIN_PART_SIZE;
    for streams in [1usize, 2, 8] {
        let o = local(small_chunks(1 << 20));
        let part = MIN_PART_SIZE as usize;
        let d = data(streams as u64, part * streams + 7);
        let id = o
            .create_upload("b", b"obj", Default::default())
            .await
            .unwrap();
        let uploads = d.chunks(part).enumerate().map(|(i, p)| {
            let o = o.clone();
            let p = p.to_vec();
            async move {
                let etag = o
                    .upload_part("b", b"obj", id, i as u32 + 1, body(&p), None)
                    .await
                    .unwrap();
                (i as u32 + 1, etag)
            }
        });
        let mut parts = futures_util::future::join_all(uploads).await;
        parts.sort();
        let m = o.complete_upload("b", b"obj", id, &parts).await.unwrap();
        assert_eq!(m.digest, *blake3::hash(&d).as_bytes(), "{streams} streams");
        assert!(m.meta.s3_etag.ends_with(&format!("-{}\"", parts.len())));
        assert_eq!(
            read_all(&o, "b", "obj").await.unwrap(),
            d,
            "{streams} streams"
        );
        // The upload's records are gone: it can be neither completed nor listed again.
        assert!(matches!(
            o.complete_upload("b", b"obj", id, &parts).await,
            Err(ObjectError::NoSuchUpload)
        ));
    }
}

#[tokio::test]
async fn ranges_equal_slices_of_the_whole() {
    let o = local(small_chunks(64 << 10));
    let d = data(3, (64 << 10) * 7 + 123);
    o.put("b", b"r", body(&d), Default::default(), None)
        .await
        .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for _ in 0..200 {
        let a = rng.random_range(0..d.len() as u64);
        let b = rng.random_range(a..d.len() as u64);
        assert_eq!(
            read_range(&o, "r", a, b).await,
            &d[a as usize..=b as usize],
            "range {a}-{b}"
        );
    }
}

async fn cluster() -> Embedded {
    let mut cfg = EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        wan_latency: Duration::from_millis(2),
        intra_dc: LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        ..EmbeddedConfig::default()
    };
    cfg.node.blob = small_chunks(64 << 10);
    crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap()
}

/// A body that yields `prefix` and then waits forever (a client, or its coordinator, that
/// stops mid-upload); `asked` counts the pieces the consumer asked for.
fn stalling_body(prefix: Vec<Bytes>, asked: Arc<AtomicU64>) -> ByteStream {
    let s = stream::unfold((prefix.into_iter(), asked), |(mut it, asked)| async move {
        asked.fetch_add(1, Ordering::SeqCst);
        match it.next() {
            Some(b) => Some((Ok(b), (it, asked))),
            None => std::future::pending().await,
        }
    });
    Box::pin(s)
}

#[tokio::test]
async fn a_coordinator_dying_at_any_step_leaves_the_old_object() {
    let c = cluster().await;
    let (o0, o3) = (c.states[0].objects.clone(), c.states[3].objects.clone());
    let cs = 64 << 10;
    let old = data(1, cs * 5 + 11);
    let new = data(2, cs * 5 + 11);
    o0.put("b", b"k", body(&old), Default::default(), None)
        .await
        .unwrap();
    let stored = |c: &Embedded| -> u64 {
        c.states
            .iter()
            .map(|s| {
                s.cluster
                    .as_ref()
                    .unwrap()
                    .node
                    .chunk_store()
                    .stored_bytes()
            })
            .sum()
    };
    let before = stored(&c);
    // A reader in the other DC sees the old object or the new one, whole, throughout.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (o3, stop, old, new) = (o3.clone(), stop.clone(), old.clone(), new.clone());
        tokio::spawn(async move {
            let mut reads = 0u64;
            while !stop.load(Ordering::SeqCst) {
                if let Ok(got) = read_all(&o3, "b", "k").await {
                    assert!(got == old || got == new, "a reader saw a mixed object");
                    reads += 1;
                }
                tokio::task::yield_now().await;
            }
            reads
        })
    };
    let pieces: Vec<Bytes> = new.chunks(cs).map(Bytes::copy_from_slice).collect();
    for step in 0..pieces.len() {
        let asked = Arc::new(AtomicU64::new(0));
        let upload = {
            let (o0, asked) = (o0.clone(), asked.clone());
            let prefix = pieces[..step].to_vec();
            tokio::spawn(async move {
                o0.put(
                    "b",
                    b"k",
                    stalling_body(prefix, asked),
                    Default::default(),
                    None,
                )
                .await
            })
        };
        // Crash once the coordinator has consumed `step` pieces and waits for more.
        while asked.load(Ordering::SeqCst) <= step as u64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        upload.abort();
        let _ = upload.await;
        for o in [&o0, &o3] {
            assert_eq!(
                read_all(o, "b", "k").await.unwrap(),
                old,
                "after a crash at step {step}"
            );
        }
    }
    // The crashed uploads did store chunks (they are orphans now), so the old object survived
    // chunks of the new one being on the replicas, not their absence.
    assert!(stored(&c) > before, "no crashed upload stored a chunk");
    o0.put("b", b"k", body(&new), Default::default(), None)
        .await
        .unwrap();
    let mut seen_new = false;
    for _ in 0..200 {
        if read_all(&o3, "b", "k").await.unwrap() == new {
            seen_new = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        seen_new,
        "the committed upload never became visible in the other DC"
    );
    stop.store(true, Ordering::SeqCst);
    assert!(reader.await.unwrap() > 0, "the reader never read");
    c.shutdown().await;
}

#[tokio::test]
async fn a_chunk_corrupted_at_rest_is_served_from_another_replica_and_repaired() {
    let c = cluster().await;
    let cs = 64 << 10;
    let d = data(5, cs * 3 + 1);
    let m = c.states[0]
        .objects
        .put("b", b"c", body(&d), Default::default(), None)
        .await
        .unwrap();
    let id = ChunkId {
        version: m.chunks[1].version,
        index: m.chunks[1].index,
    };
    // A node that holds the chunk reads its own copy first: corrupt that copy.
    let holder = (0..4)
        .find(|&i| {
            let store = c.states[i].cluster.as_ref().unwrap().node.chunk_store();
            matches!(store.get(id), Ok(Some(_)))
        })
        .expect("some node holds the chunk");
    let store = c.states[holder]
        .cluster
        .as_ref()
        .unwrap()
        .node
        .chunk_store();
    assert!(store.flip_bit(id, 77).unwrap());
    assert!(
        store.get(id).is_err(),
        "the flipped bit is detected at rest"
    );
    assert_eq!(
        read_all(&c.states[holder].objects, "b", "c").await.unwrap(),
        d
    );
    let mut repaired = false;
    for _ in 0..200 {
        if let Ok(Some(b)) = store.get(id) {
            assert_eq!(&b[..], &d[cs..2 * cs]);
            repaired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(repaired, "the corrupt copy was not replaced by a good one");
    // A replica that lost the chunk altogether (down while it was written, wiped) gets it
    // back the same way when it is read.
    assert!(store.remove(id).unwrap());
    assert_eq!(
        read_all(&c.states[holder].objects, "b", "c").await.unwrap(),
        d
    );
    let mut restored = false;
    for _ in 0..200 {
        if let Ok(Some(_)) = store.get(id) {
            restored = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        restored,
        "the missing chunk was not restored by read repair"
    );
    c.shutdown().await;
}

/// Bodies that wait for `gate` before their first byte: every transfer is admitted (or
/// queued, or refused) before any finishes.
fn gated_body(d: Arc<Vec<u8>>, gate: Arc<tokio::sync::Semaphore>) -> ByteStream {
    let s = stream::once(async move {
        let _ = gate.acquire().await;
        Ok::<Bytes, ObjectError>(Bytes::copy_from_slice(&d))
    });
    Box::pin(s)
}

async fn run_768(max_queued: usize) -> (Arc<Objects>, Vec<Result<(), ObjectError>>, u64) {
    let cfg = BlobConfig {
        max_active_transfers: 480,
        max_queued,
        max_inflight_bytes: 4 << 20,
        queue_timeout_ms: 120_000,
        ..small_chunks(64 << 10)
    };
    let o = local(cfg);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (o, peak) = (o.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                peak.fetch_max(o.inflight_bytes(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let mut tasks = Vec::new();
    for i in 0..768u64 {
        let (o, gate) = (o.clone(), gate.clone());
        let d = Arc::new(data(i, 150_000));
        tasks.push(tokio::spawn(async move {
            let key = format!("t{i}");
            o.put(
                "b",
                key.as_bytes(),
                gated_body(d.clone(), gate),
                Default::default(),
                None,
            )
            .await?;
            assert_eq!(read_all(&o, "b", &key).await?, *d, "transfer {i}");
            Ok::<(), ObjectError>(())
        }));
    }
    // Every transfer is running, queued or refused before any body flows.
    loop {
        let s = o.admission().stats();
        let (active, queued, rejected): (usize, usize, u64) = (
            s.active.iter().sum(),
            s.queued.iter().sum(),
            s.rejected_total.iter().sum(),
        );
        if active as u64 + queued as u64 + rejected == 768 {
            assert_eq!(active, 480);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gate.add_permits(1 << 20);
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    sampler.abort();
    (o, results, peak.load(Ordering::Relaxed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seven_hundred_sixty_eight_transfers_all_complete_under_the_memory_cap() {
    let (o, results, peak) = run_768(1024).await;
    let failed: Vec<_> = results.iter().filter(|r| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "{} transfers failed: {:?}",
        failed.len(),
        failed.first()
    );
    assert!(peak <= 4 << 20, "in-flight bytes peaked at {peak}");
    assert_eq!(
        o.admission().stats().admitted_total.iter().sum::<u64>(),
        768 * 2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_queue_the_refused_transfers_fail_only_with_too_many_transfers() {
    let (_, results, _) = run_768(0).await;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let refused = results
        .iter()
        .filter(|r| matches!(r, Err(ObjectError::TooManyTransfers(_))))
        .count();
    assert_eq!(ok, 480);
    assert_eq!(refused, 288, "every other failure must be TooManyTransfers");
}

/// Garbage collection on a node (invariant 7 at the service; the rule's model test is in
/// `meridian_blob::gc`): a replaced version's chunks go `version_grace` after the
/// replacement, never before; the live version's never; an abandoned upload's after
/// `orphan_ttl`; an open multipart upload's parts not while it is open.
#[tokio::test]
async fn garbage_chunks_go_after_their_grace_periods_and_live_ones_never() {
    use meridian_core::{ManualClock, Timestamp};
    let clock = Arc::new(ManualClock::new(Timestamp(1_000_000_000)));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let chunks = Arc::new(MemChunkStore::new());
    let keyspace = Arc::new(Keyspace::new(Arc::new(MemEngine::new()), dyn_clock.clone()));
    let cfg = BlobConfig {
        version_grace_ms: 10_000,
        orphan_ttl_ms: 60_000,
        ..small_chunks(64 << 10)
    };
    let o = Objects::new(
        Backend::Local {
            keyspace,
            chunks: chunks.clone(),
        },
        cfg,
        dyn_clock,
        1,
    );
    use meridian_blob::ChunkStore;
    let versions = || -> Vec<u128> {
        chunks
            .versions()
            .unwrap()
            .into_iter()
            .map(|(v, _)| v)
            .collect()
    };
    let d1 = data(1, 200_000);
    let v1 = o
        .put("b", b"k", body(&d1), Default::default(), None)
        .await
        .unwrap()
        .version;
    clock.advance(Duration::from_secs(1));
    let d2 = data(2, 200_000);
    let v2 = o
        .put("b", b"k", body(&d2), Default::default(), None)
        .await
        .unwrap()
        .version;
    // An upload that never commits.
    let asked = Arc::new(AtomicU64::new(0));
    let pieces = vec![Bytes::from(data(3, 100_000))];
    let orphan = {
        let o = Arc::new(o);
        let o2 = o.clone();
        let t = tokio::spawn(async move {
            o2.put(
                "b",
                b"k",
                stalling_body(pieces, asked),
                Default::default(),
                None,
            )
            .await
        });
        while versions().len() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        t.abort();
        let _ = t.await;
        o
    };
    let o = orphan;
    let mpu = o
        .create_upload("b", b"m", Default::default())
        .await
        .unwrap();
    o.upload_part("b", b"m", mpu, 1, body(&data(4, 100_000)), None)
        .await
        .unwrap();
    let all = versions();
    assert_eq!(all.len(), 4);
    // Inside every grace period: nothing goes.
    clock.advance(Duration::from_secs(9));
    assert_eq!(o.collect_garbage().await.unwrap().deleted, 0);
    // Past the replaced version's grace: v1 only.
    clock.advance(Duration::from_secs(2));
    let pass = o.collect_garbage().await.unwrap();
    assert_eq!(pass.deleted, 1);
    assert!(!versions().contains(&v1) && versions().contains(&v2));
    assert_eq!(read_all(&o, "b", "k").await.unwrap(), d2);
    // Past the orphan TTL: the abandoned upload goes; the live version and the open upload's
    // part stay.
    clock.advance(Duration::from_secs(60));
    assert_eq!(o.collect_garbage().await.unwrap().deleted, 1);
    assert_eq!(versions().len(), 2);
    assert!(versions().contains(&v2));
    assert_eq!(read_all(&o, "b", "k").await.unwrap(), d2);
    // Once the upload is aborted its part is garbage too.
    o.abort_upload("b", b"m", mpu).await.unwrap();
    assert_eq!(o.collect_garbage().await.unwrap().deleted, 1);
    assert_eq!(versions(), vec![v2]);
}

/// `blob.md5_etag = false`: the ETag is the quoted BLAKE3 (not mistakable for an MD5), a
/// client's Content-MD5 is still checked, and multipart uploads still complete.
#[tokio::test]
async fn without_md5_etags_the_etag_is_the_blake3_and_content_md5_is_still_checked() {
    let o = local(BlobConfig {
        md5_etag: false,
        ..small_chunks(64 << 10)
    });
    let d = data(9, 300_000);
    let m = o
        .put("b", b"k", body(&d), Default::default(), None)
        .await
        .unwrap();
    assert_eq!(m.meta.s3_etag, format!("\"{}\"", blake3::hash(&d).to_hex()));
    let md5 = meridian_blob::digest::md5(&d);
    o.put("b", b"k2", body(&d), Default::default(), Some(md5))
        .await
        .unwrap();
    let mut wrong = md5;
    wrong[0] ^= 1;
    assert!(matches!(
        o.put("b", b"k3", body(&d), Default::default(), Some(wrong))
            .await,
        Err(ObjectError::BadDigest(_))
    ));
    assert!(matches!(
        o.head("b", b"k3").await,
        Err(ObjectError::NoSuchKey)
    ));
    let part = meridian_server::objects::MIN_PART_SIZE as usize;
    let d = data(10, part + 5);
    let id = o
        .create_upload("b", b"mp", Default::default())
        .await
        .unwrap();
    let e1 = o
        .upload_part("b", b"mp", id, 1, body(&d[..part]), None)
        .await
        .unwrap();
    let e2 = o
        .upload_part("b", b"mp", id, 2, body(&d[part..]), None)
        .await
        .unwrap();
    let m = o
        .complete_upload("b", b"mp", id, &[(1, e1), (2, e2)])
        .await
        .unwrap();
    assert!(m.meta.s3_etag.ends_with("-2\""), "{}", m.meta.s3_etag);
    assert_eq!(read_all(&o, "b", "mp").await.unwrap(), d);
}

/// Objects in a timeline bucket are stored and read with the bucket's protocol, but a listing
/// (which scans the replicas' eventual objects) is refused rather than shown empty.
#[tokio::test]
async fn a_timeline_bucket_holds_objects_and_refuses_listings() {
    let mut cfg = EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        wan_latency: Duration::from_millis(2),
        intra_dc: LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        buckets: [(
            "tl".to_owned(),
            meridian_replication::BucketProps::timeline(),
        )]
        .into(),
        ..EmbeddedConfig::default()
    };
    cfg.node.blob = small_chunks(64 << 10);
    let c = crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap();
    let d = data(12, 200_000);
    c.states[0]
        .objects
        .put("tl", b"k", body(&d), Default::default(), None)
        .await
        .unwrap();
    // Timeline reads are read-any: the other DC sees the object once its record arrives.
    let mut seen = false;
    for _ in 0..500 {
        if let Ok(got) = read_all(&c.states[2].objects, "tl", "k").await {
            assert_eq!(got, d);
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen, "the other DC never saw the timeline object");
    let listed = c.states[1].objects.list("tl", b"", None, 10).await;
    assert!(
        matches!(&listed, Err(ObjectError::Unsupported(m)) if m.contains("timeline")),
        "{listed:?}"
    );
    c.shutdown().await;
}

/// The scrub (spec §8): a bit flipped at rest is found without anyone reading the object,
/// the bad copy is deleted and a good one fetched from a healthy replica; a clean pass
/// changes nothing.
#[tokio::test]
async fn the_scrub_finds_and_repairs_a_chunk_corrupted_at_rest() {
    let c = cluster().await;
    let cs = 64 << 10;
    let d = data(13, cs * 2 + 5);
    let m = c.states[0]
        .objects
        .put("b", b"s", body(&d), Default::default(), None)
        .await
        .unwrap();
    let id = ChunkId {
        version: m.chunks[0].version,
        index: m.chunks[0].index,
    };
    let holder = (0..4)
        .find(|&i| {
            let store = c.states[i].cluster.as_ref().unwrap().node.chunk_store();
            matches!(store.get(id), Ok(Some(_)))
        })
        .expect("some node holds the chunk");
    let objects = &c.states[holder].objects;
    let clean = objects.scrub().await.unwrap();
    assert_eq!((clean.corrupt, clean.repaired), (0, 0));
    assert!(clean.chunks >= 1);
    let store = c.states[holder]
        .cluster
        .as_ref()
        .unwrap()
        .node
        .chunk_store();
    assert!(store.flip_bit(id, 5).unwrap());
    let pass = objects.scrub().await.unwrap();
    assert_eq!((pass.corrupt, pass.repaired), (1, 1), "{pass:?}");
    let mut good = false;
    for _ in 0..200 {
        if let Ok(Some(b)) = store.get(id) {
            assert_eq!(&b[..], &d[..cs]);
            good = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(good, "the scrub did not bring a good copy back");
    c.shutdown().await;
}

/// `list_uploads` pages by upload id within any budget: whatever the page size and however
/// little a page may read (part records included, which it skips), going on from each page's
/// `next` returns every open upload exactly once, in id order, and every page but the last
/// moves on.
#[tokio::test]
async fn upload_listings_page_on_through_every_upload_within_any_budget() {
    use meridian_server::objects::{LIST_BUDGET, ListBudget};
    let o = local(small_chunks(64 << 10));
    let mut expected = Vec::new();
    for i in 0..12u32 {
        let key = format!("obj{i:02}");
        let id = o
            .create_upload("b", key.as_bytes(), Default::default())
            .await
            .unwrap();
        // Uploads with no parts, and with more parts than a small page reads.
        for part in 1..=(i % 4) * 3 {
            o.upload_part("b", key.as_bytes(), id, part, body(b"p"), None)
                .await
                .unwrap();
        }
        expected.push((id, Bytes::from(key)));
    }
    // Another bucket's uploads are not listed.
    o.create_upload("c", b"other", Default::default())
        .await
        .unwrap();
    expected.sort();
    let tiny = ListBudget {
        calls: 1,
        records: 1,
    };
    let small = ListBudget {
        calls: 2,
        records: 5,
    };
    for budget in [LIST_BUDGET, small, tiny] {
        for limit in [1, 5, 1000] {
            let mut seen = Vec::new();
            let mut after = None;
            for _ in 0..1000 {
                let mut b = budget;
                let page = o
                    .list_uploads("b", b"", after, limit, &mut b)
                    .await
                    .unwrap();
                assert!(page.uploads.len() <= limit);
                seen.extend(page.uploads.into_iter().map(|(key, id, _)| (id, key)));
                match page.next {
                    Some(next) => {
                        assert!(after < Some(next), "{budget:?} {limit}: no progress");
                        after = Some(next);
                    }
                    None => break,
                }
            }
            assert_eq!(seen, expected, "{budget:?}, {limit} a page");
        }
    }
}

/// Garbage collection reads each bucket's open uploads once a pass, and keeps the parts of
/// every one of them (in any bucket, however many) past the orphan TTL; an aborted upload's
/// parts go.
#[tokio::test]
async fn garbage_collection_keeps_the_parts_of_every_open_upload() {
    let o = local(BlobConfig {
        version_grace_ms: 1,
        orphan_ttl_ms: 1,
        ..small_chunks(64 << 10)
    });
    let mut uploads = Vec::new();
    for bucket in ["b1", "b2", "b3"] {
        for i in 0..20 {
            let key = format!("k{i}");
            let id = o
                .create_upload(bucket, key.as_bytes(), Default::default())
                .await
                .unwrap();
            for part in 1..=3 {
                o.upload_part(bucket, key.as_bytes(), id, part, body(b"part"), None)
                    .await
                    .unwrap();
            }
            uploads.push((bucket, key, id));
        }
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let pass = o.collect_garbage().await.unwrap();
    assert_eq!((pass.versions, pass.deleted), (180, 0));
    let aborted: Vec<_> = uploads.iter().step_by(7).collect();
    for (bucket, key, id) in &aborted {
        o.abort_upload(bucket, key.as_bytes(), *id).await.unwrap();
    }
    let gone = aborted.len() as u64 * 3;
    assert_eq!(o.collect_garbage().await.unwrap().deleted, gone);
    let pass = o.collect_garbage().await.unwrap();
    assert_eq!((pass.versions, pass.deleted), (180 - gone, 0));
}
