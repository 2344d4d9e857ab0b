//! Invariant 8 of the large-object spec: chunks moved by handoff verify to the same digest.
//! A node joins an embedded cluster holding large objects; the layout change moves keys to it,
//! ownership handoff moves their manifests, and chunk handoff (`meridian_replication::blob::
//! handoff`) moves their chunks — checked before anything reads them (so read repair cannot be
//! what put them there), and the nodes that gave keys away no longer keep their chunks.

use super::objects::body;
use bytes::Bytes;
use meridian_blob::{ChunkStore, Placement};
use meridian_net::wan::LinkConfig;
use meridian_server::cluster::EmbeddedConfig;
use meridian_server::objects::BlobConfig;
use std::time::Duration;

/// Every (version, index) chunk copy a store holds, with its bytes.
fn copies(store: &dyn ChunkStore) -> Vec<((u128, u32), Bytes)> {
    let mut out = Vec::new();
    for (version, _) in store.versions().unwrap() {
        for index in store.indexes(version).unwrap() {
            let id = meridian_blob::ChunkId { version, index };
            if let Some(b) = store.get(id).unwrap() {
                out.push(((version, index), b));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_follow_their_keys_to_a_joining_node_and_verify() {
    chunks_follow_their_homes(Placement::WithManifest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_chunks_spread_and_follow_their_own_homes_to_a_joining_node() {
    chunks_follow_their_homes(Placement::Spread).await;
}

/// The nodes holding chunks of `version`.
fn holders(c: &meridian_server::cluster::Embedded, version: u128) -> Vec<usize> {
    (0..c.states.len())
        .filter(|&i| {
            let store = c.node(i).chunk_store();
            !store.indexes(version).unwrap().is_empty()
        })
        .collect()
}

async fn chunks_follow_their_homes(placement: Placement) {
    let mut cfg = EmbeddedConfig {
        dcs: 1,
        nodes_per_dc: 3,
        n: 2,
        intra_dc: LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        handoff: Some(Duration::from_millis(200)),
        ..EmbeddedConfig::default()
    };
    cfg.node.blob = BlobConfig {
        chunk_size: 64 << 10,
        threshold: 0,
        chunk_placement: placement,
        ..BlobConfig::default()
    };
    let mut c = crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap();
    let objects = 24usize;
    let mut expected = Vec::new();
    for i in 0..objects {
        let d: Vec<u8> = (0..(64 << 10) * 3 + i).map(|j| (j * 7 + i) as u8).collect();
        let m = c.states[0]
            .objects
            .put(
                "b",
                format!("k{i}").as_bytes(),
                body(&d),
                Default::default(),
                None,
            )
            .await
            .unwrap();
        expected.push((d, m));
    }
    let chunks_total: usize = expected.iter().map(|(_, m)| m.chunks.len()).sum();
    // With its manifest, an object's chunks are on its key's two replicas; spread, an
    // object's chunks use the whole cluster.
    let widest = expected
        .iter()
        .map(|(_, m)| {
            assert_eq!(m.placement, placement);
            holders(&c, m.version).len()
        })
        .max()
        .unwrap();
    match placement {
        Placement::WithManifest => assert_eq!(widest, 2),
        Placement::Spread => assert_eq!(widest, 3, "no object's chunks spread"),
    }
    c.add_node("dc0", Duration::from_secs(60)).await.unwrap();
    let joined = c.states.len() - 1;
    // Wait for the handoff: every chunk on exactly its key's two replicas, the new node
    // holding its share.
    let mut settled = false;
    for _ in 0..300 {
        let per_node: Vec<_> = (0..c.states.len())
            .map(|i| copies(c.node(i).chunk_store().as_ref()))
            .collect();
        let total: usize = per_node.iter().map(Vec::len).sum();
        if !per_node[joined].is_empty() && total == 2 * chunks_total {
            settled = true;
            // What arrived verifies: each copy's bytes are the object's bytes there.
            for ((version, index), b) in &per_node[joined] {
                let (d, m) = expected
                    .iter()
                    .find(|(_, m)| m.chunks.iter().any(|r| r.version == *version))
                    .expect("a chunk of a known object");
                let r = m.chunks.iter().find(|r| r.index == *index).unwrap();
                let start = *index as usize * (64 << 10);
                assert_eq!(&b[..], &d[start..start + r.len as usize]);
                assert_eq!(meridian_blob::chunk_digest(b), r.digest);
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        settled,
        "the chunks did not settle on their keys' replicas after the join"
    );
    // Every object reads back whole through the new node, with the same BLAKE3.
    for (i, (d, m)) in expected.iter().enumerate() {
        let o = &c.states[joined].objects;
        let key = format!("k{i}");
        let head = o.head("b", key.as_bytes()).await.unwrap();
        assert_eq!(head.manifest.digest, m.digest);
        let s = o
            .read("b", key.as_bytes(), &head, 0, head.manifest.size - 1)
            .await
            .unwrap();
        let got: Vec<u8> = futures_util::StreamExt::collect::<Vec<_>>(s)
            .await
            .into_iter()
            .flat_map(|r| r.unwrap().to_vec())
            .collect();
        assert_eq!(&got, d, "object {i}");
    }
    c.shutdown().await;
}

/// Chunk repair (anti-entropy of chunks): a replica that lost a live object's chunks — the
/// whole version, as when it was down through the upload with no fallback standing in, or one
/// chunk — gets them back from the other replica's pass, verified; a replaced version that a
/// replica already collected is not brought back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_repair_restores_missing_chunks_of_live_objects_only() {
    let mut cfg = EmbeddedConfig {
        dcs: 1,
        nodes_per_dc: 3,
        n: 2,
        intra_dc: LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        ..EmbeddedConfig::default()
    };
    cfg.node.blob = BlobConfig {
        chunk_size: 64 << 10,
        threshold: 0,
        ..BlobConfig::default()
    };
    let c = crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap();
    let data = |seed: usize| -> Vec<u8> {
        (0..(64 << 10) * 3 + 17)
            .map(|j| (j * 13 + seed) as u8)
            .collect()
    };
    let o = &c.states[0].objects;
    let live = o
        .put("b", b"live", body(&data(1)), Default::default(), None)
        .await
        .unwrap();
    let old = o
        .put("b", b"replaced", body(&data(2)), Default::default(), None)
        .await
        .unwrap();
    o.put("b", b"replaced", body(&data(3)), Default::default(), None)
        .await
        .unwrap();
    let [a, b] = holders(&c, live.version)[..] else {
        panic!("two replicas hold the live object");
    };
    let store = |i: usize| c.node(i).chunk_store();
    // `b` lost the live version whole and, had it not, `old` is garbage it collected.
    store(b).delete_version(live.version).unwrap();
    let old_holders = holders(&c, old.version);
    for &i in &old_holders[1..] {
        store(i).delete_version(old.version).unwrap();
    }
    assert!(store(b).indexes(live.version).unwrap().is_empty());

    let pass = c.states[a].objects.repair_chunks().await.unwrap();
    assert_eq!(pass.sent, live.chunks.len() as u64, "{pass:?}");
    let mine = copies(store(b).as_ref());
    for r in &live.chunks {
        let (_, got) = mine
            .iter()
            .find(|((v, i), _)| *v == r.version && *i == r.index)
            .expect("the chunk is back");
        assert_eq!(meridian_blob::chunk_digest(got), r.digest);
    }
    // One chunk lost: only it is sent, whoever runs a pass.
    store(a)
        .remove(meridian_blob::ChunkId {
            version: live.version,
            index: 1,
        })
        .unwrap();
    let mut sent = 0;
    for i in 0..c.states.len() {
        sent += c.states[i].objects.repair_chunks().await.unwrap().sent;
    }
    assert_eq!(sent, 1);
    assert_eq!(store(a).indexes(live.version).unwrap(), vec![0, 1, 2, 3]);
    // No pass brought the replaced version back to the replica that collected it.
    for &i in &old_holders[1..] {
        assert!(
            store(i).indexes(old.version).unwrap().is_empty(),
            "node {i}: a replaced version came back"
        );
    }
    c.shutdown().await;
}
