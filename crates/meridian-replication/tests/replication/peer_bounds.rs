//! A peer's requests are served within this node's own limits, never a count the peer
//! sends: repeated or oversized id lists are refused unserved (and counted), not answered
//! with work proportional to what the peer asked for.

use super::*;
use meridian_cluster::{HashRequest, SegmentId};
use meridian_core::PartitionId;
use meridian_replication::{AaeItem, AaeMsg, RemoteError};

/// An attacker joined to the cluster's network, and a partition node 1 holds.
fn attacker(c: &Cluster) -> (meridian_net::Transport<Msg>, PartitionId) {
    let (t, _inbox) = c.net.join(NodeId(99)).unwrap();
    let p = (0..64)
        .map(PartitionId)
        .find(|&p| c.meta.layout.replicas(p).contains(&NodeId(1)))
        .unwrap();
    (t, p)
}

async fn ask(t: &meridian_net::Transport<Msg>, msg: AaeMsg) -> Msg {
    t.request(NodeId(1), Msg::Aae(msg), Duration::from_secs(30))
        .await
        .unwrap()
}

fn refused_naming(reply: Msg, field: &str) {
    match reply {
        Msg::Error(RemoteError::BadRequest(why)) => assert!(why.contains(field), "{why}"),
        other => panic!("expected a refusal naming {field}, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn merkle_requests_with_repeated_parents_or_segments_are_refused_unserved() {
    let c = Cluster::start_aae(
        41,
        Duration::from_secs(3600),
        Duration::from_secs(3600),
        1000,
    )
    .await;
    for i in 0..200 {
        let key = format!("k{i}");
        c.node(NodeId(1))
            .put(key.as_bytes(), b("v"), None, PutOptions::default())
            .await
            .unwrap();
    }
    let (t, p) = attacker(&c);

    // A real exchange step is answered: one parent's 16 children.
    let one = HashRequest::Children {
        level: 0,
        parents: vec![0],
    };
    match ask(
        &t,
        AaeMsg::Hashes {
            partition: p,
            request: one,
        },
    )
    .await
    {
        Msg::Aae(AaeMsg::HashReply(r)) => assert_eq!(r.hashes.len(), 16),
        other => panic!("{other:?}"),
    }
    // 100k copies of parent 0 would be answered with 1.6M hashes (each byte of a frame
    // asking for a KiB): refused instead.
    let repeated = HashRequest::Children {
        level: 0,
        parents: vec![0; 100_000],
    };
    let reply = ask(
        &t,
        AaeMsg::Hashes {
            partition: p,
            request: repeated,
        },
    )
    .await;
    refused_naming(reply, "parents");

    // Segment lists: the same segment 10k times, or more ids than one request carries.
    let reply = ask(
        &t,
        AaeMsg::Keys {
            partition: p,
            segments: vec![SegmentId(0); 10_000],
        },
    )
    .await;
    refused_naming(reply, "AaeMsg::Keys.segments");
    let reply = ask(
        &t,
        AaeMsg::Keys {
            partition: p,
            segments: (0..10_000).map(SegmentId).collect(),
        },
    )
    .await;
    refused_naming(reply, "AaeMsg::Keys.segments");
    // A sync larger than one batch.
    let items = (0..10_000)
        .map(|i| AaeItem {
            key: format!("k{i}").into_bytes(),
            object: None,
        })
        .collect();
    let reply = ask(
        &t,
        AaeMsg::Sync {
            partition: p,
            items,
        },
    )
    .await;
    refused_naming(reply, "AaeMsg::Sync.items");
    assert_eq!(c.node(NodeId(1)).stats().peer_requests_refused, 4);

    // Distinct ascending segments within the cap are still served, one list each.
    let reply = ask(
        &t,
        AaeMsg::Keys {
            partition: p,
            segments: (0..64).map(SegmentId).collect(),
        },
    )
    .await;
    match reply {
        Msg::Aae(AaeMsg::KeysReply(lists)) => assert_eq!(lists.len(), 64),
        other => panic!("{other:?}"),
    }
}
