//! Large-object chunks between nodes: damage on the wire (spec large-objects.md invariant 4).
//! A chunk's bytes travel as a payload beside their message, covered by the chunk's xxh3-128
//! rather than the frame's CRC; a damaged copy must be refused by whoever receives it — the
//! replica storing it, the coordinator reading it — and never stored or returned.

use super::*;
use meridian_blob::{ChunkId, chunk_digest};
use meridian_replication::ReplicationError;

#[tokio::test(start_paused = true)]
async fn chunks_damaged_on_the_wire_are_refused_and_read_from_another_replica() {
    let c = Cluster::start(71, Duration::from_secs(60)).await;
    // Coordinate from a node that holds no copy, so every read crosses the wire.
    let coordinator = NodeId(1);
    let key = key_where(&c, "blob:k", |p| !p.contains(&coordinator));
    let primaries = c.primaries(&key);
    let node = &c.nodes[0];
    let bytes = Bytes::from((0..100_000u32).map(|i| (i * 7) as u8).collect::<Vec<u8>>());
    let digest = chunk_digest(&bytes);
    let id = ChunkId {
        version: 42,
        index: 0,
    };
    node.blob_put_chunk(&key, id, digest, bytes.clone(), 0)
        .await
        .unwrap();
    sleep(Duration::from_secs(1)).await;
    for p in &primaries {
        let store = c.nodes[(p.0 - 1) as usize].chunk_store();
        assert_eq!(
            store.get(id).unwrap().as_ref(),
            Some(&bytes),
            "{p} holds it"
        );
    }

    // Two of the three replicas' answers are damaged on the way: the read gets the third's.
    c.damage_payloads_from
        .lock()
        .extend(primaries[..2].iter().copied());
    let got = node.blob_get_chunk(&key, id, digest, 0).await.unwrap();
    assert_eq!(got, bytes);
    // All three damaged: nothing damaged is ever returned.
    c.damage_payloads_from.lock().insert(primaries[2]);
    assert!(matches!(
        node.blob_get_chunk(&key, id, digest, 0).await,
        Err(ReplicationError::ChunkUnavailable { .. })
    ));
    c.damage_payloads_from.lock().clear();

    // The coordinator's own sends damaged: every replica refuses the chunk, the write fails,
    // and no replica stores damaged bytes.
    c.damage_payloads_from.lock().insert(coordinator);
    let other = ChunkId {
        version: 43,
        index: 0,
    };
    let r = node
        .blob_put_chunk(&key, other, digest, bytes.clone(), 0)
        .await;
    assert!(
        matches!(r, Err(ReplicationError::ChunkWriteFailed { ok: 0, .. })),
        "{r:?}"
    );
    sleep(Duration::from_secs(1)).await;
    for p in &primaries {
        let store = c.nodes[(p.0 - 1) as usize].chunk_store();
        assert_eq!(
            store.get(other).unwrap(),
            None,
            "{p} stored a damaged chunk"
        );
    }
    c.damage_payloads_from.lock().clear();
    c.stop.cancel();
}

/// A peer's listing request is bounded (partitions named, entries asked for) before the node
/// does any work: an oversized one is answered `BadRequest` and the node keeps serving.
#[tokio::test(start_paused = true)]
async fn a_peer_asking_for_an_oversized_listing_is_refused() {
    use meridian_replication::RemoteError;
    use meridian_replication::blob::BlobMsg;
    let c = Cluster::start(72, Duration::from_secs(60)).await;
    // A peer on the network outside the membership, sending what it likes.
    let (peer, _inbox) = c.net.join(NodeId(99)).unwrap();
    let list = |partitions: usize, limit: u32| {
        Msg::Blob(BlobMsg::List {
            partitions: vec![meridian_core::PartitionId(0); partitions],
            start: Bytes::new(),
            end: Bytes::new(),
            limit,
        })
    };
    for (partitions, limit) in [(65_537, 10), (1, 10_001), (1, u32::MAX)] {
        let r = peer
            .request(NodeId(1), list(partitions, limit), Duration::from_secs(5))
            .await;
        assert!(
            matches!(r, Ok(Msg::Error(RemoteError::BadRequest(_)))),
            "{partitions} partitions, limit {limit}: {r:?}"
        );
    }
    let r = peer
        .request(NodeId(1), list(1, 10), Duration::from_secs(5))
        .await;
    assert!(
        matches!(r, Ok(Msg::Blob(BlobMsg::Listed { .. }))),
        "a bounded listing: {r:?}"
    );
}
