//! End to end through the public API: a key is placed, a PUT and a GET run their quorum
//! tallies over the replicas' causal objects, and a membership change yields a handoff plan.

use bytes::Bytes;
use meridian_cluster::{
    AplSummary, Clock, Content, GetReply, GetTally, Member, Meta, Object, Params, PutTally,
    ReplicaId, Ring, Topology, claim, coordinator_put, diff, merge, precheck_get, precheck_put,
    preflist, rebalance,
};
use meridian_core::{DcId, NodeId};
use std::collections::BTreeMap;

fn topology(extra: &[(u32, u32)]) -> Topology {
    let base = [(1, 0), (2, 0), (3, 0), (11, 1), (12, 1), (13, 1)];
    Topology::new(
        base.iter()
            .chain(extra)
            .map(|&(n, d)| Member::new(NodeId(n), DcId(d))),
    )
    .unwrap()
}

#[test]
fn put_then_get_with_one_primary_down() {
    let topo = topology(&[]);
    let layout = claim(&topo, Ring::new(64).unwrap(), 3).unwrap();
    let p = layout.ring().partition_of(b"img:cat.png");
    let down = layout.replicas(p)[1];
    let up = |n: NodeId| n != down;
    let apl = preflist(&layout, p, 3, DcId(0), up);
    assert_eq!(apl.len(), 3, "a fallback replaces the down primary");
    assert_eq!(apl.distinct_dcs(), 2);

    // PUT with defaults (W = DW = quorum = 2).
    let params = Params::default();
    let put_p = precheck_put(&params, AplSummary::from(&apl)).unwrap();
    let mut stores: BTreeMap<NodeId, Object> = BTreeMap::new();
    let coord = apl.entries()[0];
    let me = ReplicaId {
        partition: p,
        node: coord.node,
        incarnation: 0,
        epoch: 0,
    };
    let v1 = Content::Value(Bytes::from_static(b"v1"));
    let obj = coordinator_put(None, &Clock::new(), v1, Meta { ts_us: 1 }, me).unwrap();
    let mut tally = PutTally::new(put_p, apl.len() as u32);
    for e in apl.entries() {
        let local = stores.remove(&e.node).unwrap_or_default();
        stores.insert(e.node, merge(&local, &obj));
        tally.w_ack(e.node, e.dc);
        tally.dw_ack(e.is_primary());
    }
    assert_eq!(tally.outcome(), Some(Ok(())));

    // GET: R = 2 over the same apl.
    let get_p = precheck_get(&params, AplSummary::from(&apl)).unwrap();
    let mut g = GetTally::new(get_p, apl.len() as u32);
    let mut merged = Object::default();
    for e in apl.entries() {
        if g.is_enough() {
            break;
        }
        match stores.get(&e.node) {
            Some(o) => {
                g.ok(e.is_primary(), o.is_tombstone_only());
                merged = merge(&merged, o);
            }
            None => g.notfound(e.is_primary()),
        }
    }
    assert_eq!(g.outcome(), Some(Ok(GetReply::Merge)));
    assert_eq!(
        merged.values().collect::<Vec<_>>(),
        [&Bytes::from_static(b"v1")]
    );

    // The opaque context round-trips and a write carrying it supersedes v1.
    let ctx = Clock::decode(&merged.clock().encode()).unwrap();
    let v2 = Content::Value(Bytes::from_static(b"v2"));
    let local = stores[&coord.node].clone();
    let obj2 = coordinator_put(Some(local), &ctx, v2, Meta { ts_us: 2 }, me).unwrap();
    let all = stores.values().fold(obj2, |m, o| merge(&m, o));
    assert_eq!(
        all.values().collect::<Vec<_>>(),
        [&Bytes::from_static(b"v2")]
    );
}

#[test]
fn a_join_produces_a_small_handoff_plan() {
    let old = claim(&topology(&[]), Ring::new(256).unwrap(), 3).unwrap();
    let new = rebalance(&old, &topology(&[(4, 0)])).unwrap();
    assert_eq!(new.epoch(), old.epoch() + 1);
    let plan = diff(&old, &new);
    assert!(!plan.is_empty());
    // dc0 holds 1.5 × 256 = 384 slots on 3 nodes; the 4th takes a quarter of them.
    assert!(plan.len() <= 384usize.div_ceil(4), "{}", plan.len());
    for t in &plan {
        assert_eq!(t.to, NodeId(4));
        assert!(!t.sources.is_empty());
        assert!(new.replicas(t.partition).contains(&NodeId(4)));
    }
}
