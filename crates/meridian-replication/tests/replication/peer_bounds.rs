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

/// A peer's key listing is served within the leader's own cap, whatever budget, bitmap or
/// resume key it sends.
#[tokio::test(start_paused = true)]
async fn hostile_key_listings_are_answered_within_the_leaders_limits() {
    use meridian_replication::{Dispatch, TxnProps};
    use meridian_txn::TxnMsg;
    let c = Cluster::start(43, Duration::from_secs(3600)).await;
    c.set_bucket("tx", BucketProps::transactional(TxnProps::default()))
        .await;
    let mut led = 0;
    let d = Dispatch::new(c.nodes[0].clone());
    for i in 0..40 {
        let key = b(&format!("tx:k{i}"));
        led += usize::from(c.nodes[0].txn_leader(&key).1 == NodeId(1));
        d.set(&key, b("v")).await.unwrap();
    }
    assert!(led >= 2, "node 1 leads {led} of the keys");
    let (t, _) = attacker(&c);
    let list = |after: Option<Bytes>, budget: u32, partitions: Vec<u8>| {
        let t = &t;
        async move {
            let msg = TxnMsg::ListKeys {
                after,
                budget,
                partitions,
            };
            match t
                .request(NodeId(1), Msg::Txn(msg), Duration::from_secs(30))
                .await
                .unwrap()
            {
                Msg::Txn(TxnMsg::KeysPage(Ok(page))) => page,
                other => panic!("expected a page, got {other:?}"),
            }
        }
    };
    // Every partition, any budget: the keys node 1 leads, all of them, in one page.
    let (keys, next) = list(None, u32::MAX, vec![0xFF; 1 << 16]).await;
    assert_eq!((keys.len(), next), (led, None));
    // A zero budget examines one key, and says where to go on.
    let (keys, next) = list(None, 0, vec![0xFF; 8]).await;
    assert!(keys.len() <= 1 && next.is_some(), "{keys:?} {next:?}");
    // No partition marked (or a bitmap too short to name one): nothing listed.
    assert!(list(None, 100, Vec::new()).await.0.is_empty());
    // A resume key of any size or content is a position, not an error.
    let (keys, _) = list(Some(Bytes::from(vec![0xFF; 64 * 1024])), 100, vec![0xFF; 8]).await;
    assert!(keys.is_empty());
    let (keys, _) = list(Some(Bytes::new()), 100, vec![0xFF; 8]).await;
    assert_eq!(keys.len(), led);
}

#[tokio::test]
async fn hostile_timeline_groups_are_refused_and_apply_nothing() {
    use meridian_replication::timeline::{Content, Expect, GroupItem, MAX_GROUP_ITEMS};
    use meridian_replication::{ReplicationError, TimelineMsg};
    let c = Cluster::start(47, Duration::from_secs(3600)).await;
    c.set_bucket("tl", BucketProps::timeline()).await;
    let ring = c.meta.layout.ring();
    // Keys node 1 arbitrates (absent records are inserted by their partition's first replica).
    let arbitrated = |tag: &str| {
        (0..10_000)
            .map(|i| format!("tl:{{{tag}{i}}}"))
            .find(|k| c.meta.layout.replicas(ring.partition_of(k.as_bytes()))[0] == NodeId(1))
            .unwrap()
    };
    let (k1, k2) = (arbitrated("a"), arbitrated("b"));
    assert_ne!(
        ring.partition_of(k1.as_bytes()),
        ring.partition_of(k2.as_bytes())
    );
    let (t, _) = attacker(&c);
    let item = |key: &str| GroupItem {
        key: key.as_bytes().to_vec(),
        expect: Expect::Absent,
        content: Some(Content::Value(b("v"))),
    };
    let group = |items: Vec<GroupItem>| {
        let t = &t;
        async move {
            let msg = TimelineMsg::Group {
                items,
                origin_dc: DcId(0),
                move_to: None,
            };
            t.request(NodeId(1), Msg::Timeline(msg), Duration::from_secs(30))
                .await
                .unwrap()
        }
    };
    let refused = |reply: Msg, why: &str| match reply {
        Msg::Timeline(TimelineMsg::GroupReply(Err(e))) => {
            assert!(e.to_string().contains(why), "{e}")
        }
        other => panic!("expected a refusal ({why}), got {other:?}"),
    };
    // Too many items: refused unserved, naming the field.
    let many = (0..=MAX_GROUP_ITEMS)
        .map(|i| item(&format!("{k1}{i}")))
        .collect();
    refused_naming(group(many).await, "TimelineMsg::Group.items");
    // A repeated key, and keys of two partitions: refused, nothing applied.
    refused(
        group(vec![item(&k1), item(&k1)]).await,
        "a key appears twice",
    );
    refused(group(vec![item(&k1), item(&k2)]).await, "another partition");
    // A precondition that fails on one item: nothing applied, the other item included.
    c.node(NodeId(1))
        .tl_put(k2.as_bytes(), Content::Value(b("old")), Expect::Any)
        .await
        .unwrap();
    let k2b = format!("{k2}x");
    let r = group(vec![item(&k2), item(&k2b)]).await;
    assert!(
        matches!(
            r,
            Msg::Timeline(TimelineMsg::GroupReply(Err(
                ReplicationError::AlreadyExists { .. }
            )))
        ),
        "{r:?}"
    );
    assert!(
        c.node(NodeId(1))
            .tl_local(k2b.as_bytes())
            .unwrap()
            .is_none()
    );
    // An empty group is nothing to do; a sound one applies every item.
    assert!(matches!(
        group(Vec::new()).await,
        Msg::Timeline(TimelineMsg::GroupReply(Ok(v))) if v.is_empty()
    ));
    let k1b = format!("{k1}x");
    match group(vec![item(&k1), item(&k1b)]).await {
        Msg::Timeline(TimelineMsg::GroupReply(Ok(v))) => assert!(v.iter().all(Option::is_some)),
        other => panic!("expected the group applied, got {other:?}"),
    }
    assert!(
        c.node(NodeId(1))
            .tl_local(k1b.as_bytes())
            .unwrap()
            .is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn hostile_take_overs_leave_a_live_masters_record_alone() {
    use meridian_replication::timeline::{Content, Expect, TimelineProps};
    use meridian_replication::{ReplicationError, TimelineMsg};
    let c = Cluster::start(53, Duration::from_secs(3600)).await;
    let failover = BucketProps {
        timeline: TimelineProps {
            failover: true,
            ..TimelineProps::default()
        },
        ..BucketProps::timeline()
    };
    c.set_bucket("tf", failover).await;
    c.set_bucket("tl", BucketProps::timeline()).await;
    // Keys node 1 holds, mastered by another primary that is up.
    let held = |bucket: &str| {
        (0..10_000)
            .map(|i| format!("{bucket}:k{i}").into_bytes())
            .find(|k| {
                let p = c.primaries(k);
                p.contains(&NodeId(1)) && p[0] != NodeId(1)
            })
            .unwrap()
    };
    let (key, plain) = (held("tf"), held("tl"));
    let master = c.primaries(&key)[0];
    let mut before = Vec::new();
    for k in [&key, &plain] {
        let w = c
            .node(c.primaries(k)[0])
            .tl_put(k, Content::Value(b("v")), Expect::Any)
            .await
            .unwrap();
        before.push(w.record);
    }
    sleep(Duration::from_secs(2)).await;
    let (t, _) = attacker(&c);
    let take_over = |key: &[u8], from: NodeId| {
        let t = &t;
        let msg = TimelineMsg::TakeOver {
            key: key.to_vec(),
            from,
        };
        async move {
            match t
                .request(NodeId(1), Msg::Timeline(msg), Duration::from_secs(30))
                .await
                .unwrap()
            {
                Msg::Timeline(TimelineMsg::WriteReply(r)) => r,
                other => panic!("expected a write reply, got {other:?}"),
            }
        }
    };
    let refused = |r: Result<_, ReplicationError>, why: &str| match r {
        Err(e @ ReplicationError::ForceMasterRefused { .. }) => {
            assert!(e.to_string().contains(why), "{e}")
        }
        other => panic!("expected a refusal ({why}), got {other:?}"),
    };
    // The master is up: refused.
    refused(take_over(&key, master).await, "is up");
    // The serving node itself: refused.
    refused(take_over(&key, NodeId(1)).await, "is up");
    // A bucket that does not fail over: refused whoever is named.
    refused(take_over(&plain, NodeId(77)).await, "does not fail over");
    // A node that is not a member (never up): the record names another master, so it is
    // answered as it is, not taken.
    match take_over(&key, NodeId(77)).await {
        Ok((r, by)) => {
            assert_eq!(r, before[0]);
            assert_eq!(by.node, master);
        }
        Err(e) => panic!("expected the record as it is, got {e}"),
    }
    // Nothing changed anywhere: every primary holds the master's records.
    for (k, rec) in [(&key, &before[0]), (&plain, &before[1])] {
        for p in c.primaries(k) {
            assert_eq!(c.node(p).tl_local(k).unwrap().as_ref(), Some(rec), "{p}");
        }
    }
}
