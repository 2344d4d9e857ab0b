//! The Redis Cluster protocol end to end: an embedded 2-DC × 2-node cluster (port 0) answers
//! `CLUSTER SLOTS`/`SHARDS`/`NODES`/`INFO`/`KEYSLOT`/`MYID`, `READONLY`, `READWRITE`,
//! `ASKING` in Redis 7's shapes (RESP2 and RESP3), covers every slot exactly once, and each
//! node maps every slot to a node of its own DC, so a cluster-aware client connected in a DC
//! sends every single-key command to that DC. With the default `resp.misrouted = "moved"`,
//! a key command sent to a node that is not its slot's master there gets `-MOVED` to that
//! master, which follows failovers and returns.

use super::cluster_mode::{cluster, connect};
use super::*;
use meridian_cluster::slot_of;
use meridian_core::{DcId, NodeId};
use meridian_server::cluster::Embedded;
use meridian_server::resp::redis_node_id;
use std::collections::BTreeMap;

async fn connect_to(addr: SocketAddr) -> Raw {
    Raw {
        stream: TcpStream::connect(addr).await.unwrap(),
        buf: BytesMut::new(),
    }
}

pub(super) fn int(f: &Frame) -> i64 {
    match f {
        Frame::Integer(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

pub(super) fn text(f: &Frame) -> String {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) | Frame::Error(b) => {
            String::from_utf8_lossy(b).into_owned()
        }
        Frame::Verbatim { text, .. } => String::from_utf8_lossy(text).into_owned(),
        other => panic!("expected a string, got {other:?}"),
    }
}

pub(super) fn array(f: Frame) -> Vec<Frame> {
    match f {
        Frame::Array(a) => a,
        other => panic!("expected an array, got {other:?}"),
    }
}

/// A map reply as pairs: RESP3's map, or RESP2's flat array.
pub(super) fn pairs(f: Frame) -> Vec<(String, Frame)> {
    match f {
        Frame::Map(m) => m.into_iter().map(|(k, v)| (text(&k), v)).collect(),
        Frame::Array(a) => {
            assert!(a.len().is_multiple_of(2), "a flat map has pairs");
            let mut it = a.into_iter();
            let mut out = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((text(&k), v));
            }
            out
        }
        other => panic!("expected a map, got {other:?}"),
    }
}

fn is_node_id(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// One `CLUSTER SLOTS` range: `(first, last, [(ip:port, id)...])`, master first.
pub(super) type SlotRange = (u16, u16, Vec<(SocketAddr, String)>);

/// `CLUSTER SLOTS` parsed, checking Redis 7's node shape (ip, port, id, metadata map).
pub(super) fn parse_slots(reply: Frame) -> Vec<SlotRange> {
    array(reply)
        .into_iter()
        .map(|range| {
            let mut parts = array(range).into_iter();
            let first = int(&parts.next().unwrap()) as u16;
            let last = int(&parts.next().unwrap()) as u16;
            let nodes = parts
                .map(|n| {
                    let n = array(n);
                    assert_eq!(n.len(), 4, "ip, port, id, metadata: {n:?}");
                    assert!(
                        matches!(&n[3], Frame::Map(m) if m.is_empty())
                            || matches!(&n[3], Frame::Array(a) if a.is_empty()),
                        "{n:?}"
                    );
                    let addr: SocketAddr =
                        format!("{}:{}", text(&n[0]), int(&n[1])).parse().unwrap();
                    let id = text(&n[2]);
                    assert!(is_node_id(&id), "{id}");
                    (addr, id)
                })
                .collect::<Vec<_>>();
            assert!(!nodes.is_empty());
            (first, last, nodes)
        })
        .collect()
}

/// The DC of the member listening on `addr`.
fn dc_of(c: &Embedded, addr: SocketAddr) -> DcId {
    c.members
        .iter()
        .find(|m| m.resp == Some(addr))
        .unwrap_or_else(|| panic!("{addr} is no member's RESP address"))
        .dc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_slot_is_covered_once_and_led_by_the_answering_nodes_dc() {
    let c = cluster().await;
    for i in 0..c.members.len() {
        let my_dc = c.members[i].dc;
        let mut con = connect(&c, i).await;
        let ranges = parse_slots(con.cmd(&[b"CLUSTER", b"SLOTS"]).await);
        assert_eq!(ranges.len(), 64, "one range per partition");
        let mut next = 0u32;
        for (first, last, nodes) in &ranges {
            assert_eq!(u32::from(*first), next, "contiguous, in order, no overlap");
            assert!(first <= last);
            next = u32::from(*last) + 1;
            assert!((1..=3).contains(&nodes.len()), "N = 3 replicas at most");
            // Each DC is a cluster of its own nodes: every node listed is in my DC, and
            // since both of them lead ranges, neither is listed as a replica (one role per
            // node: redis-py would take it for a replica and leave it out of SCAN).
            for (addr, _) in nodes {
                assert_eq!(dc_of(&c, *addr), my_dc, "a node of another DC listed");
            }
            assert_eq!(nodes.len(), 1, "no spare node in a DC of two");
            let mut ids: Vec<&String> = nodes.iter().map(|(_, id)| id).collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), nodes.len(), "distinct nodes");
            // The master is the first replica of the partition in this DC (claim order).
            let l = c.node(i).layout();
            let p = l.ring().partition_of_slot(*first);
            let lead = l
                .replicas(p)
                .iter()
                .copied()
                .find(|&n| l.topology().dc_of(n) == Some(my_dc))
                .unwrap();
            assert_eq!(nodes[0].1, redis_node_id(lead));
        }
        assert_eq!(next, 16384, "every slot covered");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_commands_reply_in_redis_shapes() {
    let c = cluster().await;
    let mut a = connect(&c, 0).await;
    // KEYSLOT: Redis's documented values and hash tags.
    for (key, slot) in [
        (&b"somekey"[..], 11058),
        (b"foo", 12182),
        (b"{foo}bar", 12182),
        (b"foo{}{bar}", i64::from(slot_of(b"foo{}{bar}"))),
        (b"foo{{bar}}zap", i64::from(slot_of(b"{bar"))),
    ] {
        assert_eq!(int(&a.cmd(&[b"CLUSTER", b"KEYSLOT", key]).await), slot);
    }
    assert_eq!(
        a.cmd(&[b"CLUSTER", b"KEYSLOT", b"{user1000}.following"])
            .await,
        a.cmd(&[b"CLUSTER", b"KEYSLOT", b"{user1000}.followers"])
            .await
    );
    // MYID: stable, 40 hex, the same name the other commands use.
    let myid = text(&a.cmd(&[b"cluster", b"myid"]).await);
    assert_eq!(myid, redis_node_id(NodeId(1)));
    assert!(is_node_id(&myid));

    // NODES: one line per node of this DC; myself, master, epoch, connected, slot ranges.
    let nodes = text(&a.cmd(&[b"CLUSTER", b"NODES"]).await);
    let lines: Vec<&str> = nodes.lines().collect();
    assert_eq!(lines.len(), 2, "{nodes}");
    let epoch = c.node(0).layout().epoch();
    let mut slots = 0;
    for line in &lines {
        let f: Vec<&str> = line.split(' ').collect();
        assert!(f.len() >= 8, "{line}");
        assert!(is_node_id(f[0]), "{line}");
        let addr: SocketAddr = f[1].split('@').next().unwrap().parse().unwrap();
        let member = c.members.iter().find(|m| m.resp == Some(addr)).unwrap();
        assert_eq!(f[0], redis_node_id(member.id));
        assert_eq!(f[2].contains("myself"), member.id == NodeId(1), "{line}");
        assert_eq!(member.dc, DcId(0), "DC 0's view: {line}");
        assert!(f[2].contains("master"), "{line}");
        assert_eq!(f[3], "-", "{line}");
        assert_eq!(f[6], epoch.to_string());
        assert_eq!(f[7], "connected");
        for range in &f[8..] {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            slots += hi.parse::<u32>().unwrap() - lo.parse::<u32>().unwrap() + 1;
        }
    }
    assert_eq!(slots, 16384, "{nodes}");

    // INFO: Redis's fields.
    let info = text(&a.cmd(&[b"CLUSTER", b"INFO"]).await);
    for want in [
        "cluster_state:ok\r\n",
        "cluster_slots_assigned:16384\r\n",
        "cluster_slots_ok:16384\r\n",
        "cluster_known_nodes:2\r\n",
        "cluster_size:2\r\n",
    ] {
        assert!(info.contains(want), "{want} in {info}");
    }
    assert!(text(&a.cmd(&[b"INFO", b"cluster"]).await).contains("cluster_enabled:1\r\n"));

    // SHARDS: a map per shard with `slots` and `nodes`, each node a map (RESP2: flat).
    let shards = array(a.cmd(&[b"CLUSTER", b"SHARDS"]).await);
    assert_eq!(shards.len(), 2, "one shard per DC-0 node");
    let mut shard_slots = 0;
    for shard in shards {
        let shard = pairs(shard);
        assert_eq!(shard[0].0, "slots");
        assert_eq!(shard[1].0, "nodes");
        let bounds: Vec<i64> = array(shard[0].1.clone()).iter().map(int).collect();
        for b in bounds.chunks(2) {
            shard_slots += b[1] - b[0] + 1;
        }
        let nodes = array(shard[1].1.clone());
        let keys: Vec<String> = pairs(nodes[0].clone()).into_iter().map(|p| p.0).collect();
        assert_eq!(
            keys,
            [
                "id",
                "port",
                "ip",
                "endpoint",
                "role",
                "replication-offset",
                "health"
            ]
        );
        let roles: Vec<String> = nodes
            .into_iter()
            .map(|n| {
                let n = pairs(n);
                assert_eq!(text(&n[6].1), "online");
                text(&n[4].1)
            })
            .collect();
        assert_eq!(roles[0], "master");
        assert_eq!(roles, ["master"], "no spare node in a DC of two");
    }
    assert_eq!(shard_slots, 16384);

    // The connection-mode commands, and what is refused.
    for cmd in [&b"READONLY"[..], b"READWRITE", b"ASKING"] {
        assert_eq!(a.cmd(&[cmd]).await, Frame::Simple("OK".into()));
    }
    let e = text(&a.cmd(&[b"CLUSTER", b"COUNTKEYSINSLOT", b"16384"]).await);
    assert_eq!(e, "ERR Invalid slot");
    let e = text(&a.cmd(&[b"CLUSTER", b"GETKEYSINSLOT", b"7", b"-1"]).await);
    assert_eq!(e, "ERR Invalid slot or number of keys");
    let e = text(&a.cmd(&[b"CLUSTER", b"GETKEYSINSLOT", b"7", b"x"]).await);
    assert_eq!(e, "ERR value is not an integer or out of range");
    let e = text(&a.cmd(&[b"CLUSTER", b"COUNTKEYSINSLOT"]).await);
    assert_eq!(
        e,
        "ERR wrong number of arguments for 'cluster|countkeysinslot' command"
    );
    let e = text(&a.cmd(&[b"CLUSTER", b"BOGUS"]).await);
    assert_eq!(e, "ERR unknown subcommand 'BOGUS'. Try CLUSTER HELP.");
    let e = text(&a.cmd(&[b"CLUSTER", b"SLOTS", b"x"]).await);
    assert_eq!(
        e,
        "ERR wrong number of arguments for 'cluster|slots' command"
    );

    // Never CROSSSLOT: keys of different slots in one command are served.
    assert_ne!(slot_of(b"a"), slot_of(b"b"));
    assert_eq!(
        a.cmd(&[b"MSET", b"a", b"1", b"b", b"2"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(
        a.cmd(&[b"MGET", b"a", b"b", b"{a}x"]).await,
        Frame::Array(vec![bulk("1"), bulk("2"), Frame::Null])
    );

    // RESP3: maps are maps, the node metadata an empty map, NODES a verbatim string.
    let mut r3 = connect(&c, 3).await;
    let _ = r3.cmd(&[b"HELLO", b"3"]).await;
    let Frame::Map(first) = array(r3.cmd(&[b"CLUSTER", b"SHARDS"]).await).remove(0) else {
        panic!("RESP3 shards are maps")
    };
    assert_eq!(text(&first[0].0), "slots");
    let ranges = parse_slots(r3.cmd(&[b"CLUSTER", b"SLOTS"]).await);
    assert!(ranges.iter().all(|r| dc_of(&c, r.2[0].0) == DcId(1)));
    assert!(matches!(
        r3.cmd(&[b"CLUSTER", b"NODES"]).await,
        Frame::Verbatim { .. }
    ));
    let myid = text(&r3.cmd(&[b"CLUSTER", b"MYID"]).await);
    assert_eq!(myid, redis_node_id(NodeId(4)));

    // The redis crate reads the same replies.
    let url = format!("redis://{}/", c.members[1].resp.unwrap());
    let (slot, ranges): (i64, Vec<redis::Value>) = blocking(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let slot = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg("somekey")
            .query(&mut con)
            .unwrap();
        let ranges = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).unwrap();
        (slot, ranges)
    })
    .await;
    assert_eq!((slot, ranges.len()), (11058, 64));
    c.shutdown().await;
}

/// `total_commands_processed` of every node.
async fn commands_processed(c: &Embedded) -> Vec<u64> {
    let mut out = Vec::new();
    for i in 0..c.members.len() {
        let info = text(&connect(c, i).await.cmd(&[b"INFO", b"stats"]).await);
        let n = info
            .lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .unwrap()
            .parse()
            .unwrap();
        out.push(n);
    }
    out
}

/// What a cluster-aware client does: read the slot map from a seed node, then send each
/// single-key command to the master of the key's slot. From a seed in DC `d`, every
/// command lands on a node of DC `d` (counted by each node's INFO, not just computed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_client_seeded_in_a_dc_sends_every_key_command_to_that_dc() {
    let c = cluster().await;
    for seed in [3, 0] {
        let dc = c.members[seed].dc;
        let ranges = parse_slots(connect(&c, seed).await.cmd(&[b"CLUSTER", b"SLOTS"]).await);
        let mut owner = vec![None; 16384];
        for (first, last, nodes) in &ranges {
            for s in *first..=*last {
                assert!(owner[usize::from(s)].replace(nodes[0].0).is_none());
            }
        }
        let before = commands_processed(&c).await;
        let mut cons: BTreeMap<SocketAddr, Raw> = BTreeMap::new();
        let mut sent: BTreeMap<SocketAddr, u64> = BTreeMap::new();
        for k in 0..200 {
            let key = if k % 4 == 0 {
                format!("{{user{}}}.following", k / 4)
            } else {
                format!("dc{}-key-{k}", dc.0)
            };
            let addr = owner[usize::from(slot_of(key.as_bytes()))].unwrap();
            assert_eq!(dc_of(&c, addr), dc, "{key} maps to {addr}");
            let con = match cons.entry(addr) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => e.insert(connect_to(addr).await),
            };
            let set = con.cmd(&[b"SET", key.as_bytes(), b"v"]).await;
            assert_eq!(set, Frame::Simple("OK".into()));
            assert_eq!(con.cmd(&[b"GET", key.as_bytes()]).await, bulk("v"));
            *sent.entry(addr).or_default() += 2;
        }
        let after = commands_processed(&c).await;
        for (i, m) in c.members.iter().enumerate() {
            let addr = m.resp.unwrap();
            // The first INFO is counted by the second.
            let delta = after[i] - before[i] - 1;
            assert_eq!(delta, sent.get(&addr).copied().unwrap_or(0), "node {i}");
            if m.dc != dc {
                assert_eq!(delta, 0, "node {i} is in another DC");
            }
        }
        assert_eq!(sent.values().sum::<u64>(), 400);
    }
    c.shutdown().await;
}

/// `CLUSTER COUNTKEYSINSLOT` and `GETKEYSINSLOT` as Redis Cluster answers them: the node that
/// answers for a slot in its DC's view counts and returns its keys; every other node 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_in_slot_are_counted_by_the_slots_master_only() {
    let c = cluster().await;
    let mut a = connect(&c, 0).await;
    let keys: Vec<String> = (0..25).map(|i| format!("{{tagged}}.{i}")).collect();
    let slot = slot_of(b"tagged");
    for k in &keys {
        let set = a.cmd(&[b"SET", k.as_bytes(), b"v"]).await;
        assert_eq!(set, Frame::Simple("OK".into()));
    }
    let slot_text = slot.to_string();
    for nodes in [[0usize, 1], [2, 3]] {
        let owner = owners(&c, nodes[0]).await[usize::from(slot)];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let mut counts = Vec::new();
            for &i in &nodes {
                let mut n = connect(&c, i).await;
                let count = n
                    .cmd(&[b"CLUSTER", b"COUNTKEYSINSLOT", slot_text.as_bytes()])
                    .await;
                counts.push((c.members[i].resp.unwrap(), int(&count)));
            }
            let (mine, others): (Vec<_>, Vec<_>) =
                counts.into_iter().partition(|(addr, _)| *addr == owner);
            assert!(others.iter().all(|(_, n)| *n == 0), "{others:?}");
            if mine == [(owner, 25)] {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{mine:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut o = connect_to(owner).await;
        let got = array(
            o.cmd(&[b"CLUSTER", b"GETKEYSINSLOT", slot_text.as_bytes(), b"10"])
                .await,
        );
        assert_eq!(got.len(), 10);
        let mut all: Vec<String> = array(
            o.cmd(&[b"CLUSTER", b"GETKEYSINSLOT", slot_text.as_bytes(), b"1000"])
                .await,
        )
        .iter()
        .map(text)
        .collect();
        all.sort();
        let mut want = keys.clone();
        want.sort();
        assert_eq!(all, want);
        let none = o
            .cmd(&[b"CLUSTER", b"GETKEYSINSLOT", slot_text.as_bytes(), b"0"])
            .await;
        assert_eq!(none, Frame::Array(vec![]));
        let empty_slot = ((slot + 1) % 16384).to_string();
        let zero = o
            .cmd(&[b"CLUSTER", b"COUNTKEYSINSLOT", empty_slot.as_bytes()])
            .await;
        assert_eq!(int(&zero), 0);
    }
    c.shutdown().await;
}

/// The slot owners of `node`'s `CLUSTER SLOTS`: one address per slot.
async fn owners(c: &Embedded, node: usize) -> Vec<SocketAddr> {
    let ranges = parse_slots(connect(c, node).await.cmd(&[b"CLUSTER", b"SLOTS"]).await);
    let mut owner = Vec::with_capacity(16384);
    for (first, last, nodes) in &ranges {
        owner.extend((*first..=*last).map(|_| nodes[0].0));
    }
    assert_eq!(owner.len(), 16384);
    owner
}

/// Polls `node`'s slot map until `done` holds of it (the failure detector's verdict takes a
/// few heartbeats); panics after a minute.
async fn wait_for_slots(
    c: &Embedded,
    node: usize,
    what: &str,
    done: impl Fn(&[SlotRange]) -> bool,
) -> Vec<SlotRange> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let ranges = parse_slots(connect(c, node).await.cmd(&[b"CLUSTER", b"SLOTS"]).await);
        if done(&ranges) {
            return ranges;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {ranges:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Failover as a cluster client sees it: when a node is cut off, every other node's map
/// names a live replica (of the same DC where there is one) as master of each of its ranges,
/// writes acknowledged before the cut stay readable there, and the dead node is listed as a
/// failed master without slots; when it returns, it takes its ranges back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_node_hands_its_ranges_over_and_takes_them_back() {
    let c = cluster().await;
    let victim = 1; // NodeId(2), DC 0
    let victim_addr = c.members[victim].resp.unwrap();
    let before = owners(&c, 0).await;
    assert!(before.contains(&victim_addr));
    // Keys the victim is master of, written through it before the cut.
    let keys: Vec<String> = (0..4000)
        .map(|k| format!("fo-{k}"))
        .filter(|k| before[usize::from(slot_of(k.as_bytes()))] == victim_addr)
        .take(50)
        .collect();
    assert_eq!(keys.len(), 50);
    let mut v = connect(&c, victim).await;
    for k in &keys {
        let set = v.cmd(&[b"SET", k.as_bytes(), k.as_bytes()]).await;
        assert_eq!(set, Frame::Simple("OK".into()));
    }

    c.wan.isolate(c.members[victim].id);
    for node in [0, 2, 3] {
        let ranges = wait_for_slots(&c, node, "the victim still leads", |r| {
            r.iter().all(|r| r.2[0].0 != victim_addr)
        })
        .await;
        let my_dc = c.members[node].dc;
        for (first, _, nodes) in &ranges {
            // A live replica of my DC when there is one, else another DC's.
            let l = c.node(node).layout();
            let p = l.ring().partition_of_slot(*first);
            let list = l.replicas(p);
            let live: Vec<NodeId> = list.iter().copied().filter(|&n| n != NodeId(2)).collect();
            let expect = live
                .iter()
                .copied()
                .find(|&n| l.topology().dc_of(n) == Some(my_dc))
                .unwrap_or(live[0]);
            assert_eq!(
                nodes[0].1,
                redis_node_id(expect),
                "slot {first} from node {node}"
            );
        }
    }
    let text = text(&connect(&c, 0).await.cmd(&[b"CLUSTER", b"NODES"]).await);
    let line = text
        .lines()
        .find(|l| l.contains(&victim_addr.to_string()))
        .unwrap();
    assert!(
        line.contains(" master,fail - ") && line.ends_with(" disconnected"),
        "{line}"
    );
    // The acknowledged writes are readable at the new masters, and new writes go there.
    let after = owners(&c, 0).await;
    for k in &keys {
        let owner = after[usize::from(slot_of(k.as_bytes()))];
        assert_ne!(owner, victim_addr);
        let mut con = connect_to(owner).await;
        assert_eq!(con.cmd(&[b"GET", k.as_bytes()]).await, bulk(k), "{k}");
        let set = con.cmd(&[b"SET", k.as_bytes(), b"after"]).await;
        assert_eq!(set, Frame::Simple("OK".into()));
    }

    c.wan.heal_all();
    wait_for_slots(&c, 0, "the victim never took its ranges back", |r| {
        r.iter().any(|r| r.2[0].0 == victim_addr)
    })
    .await;
    let back = owners(&c, 0).await;
    assert_eq!(back, before, "the same ranges as before the cut");
    c.shutdown().await;
}

#[tokio::test]
async fn a_standalone_node_has_cluster_support_disabled() {
    let s = Server::default().await;
    let mut con = s.connect().await;
    for req in [
        &[&b"CLUSTER"[..], b"SLOTS"][..],
        &[b"CLUSTER", b"KEYSLOT", b"k"],
        &[b"READONLY"],
        &[b"ASKING"],
    ] {
        assert_eq!(
            text(&con.cmd(req).await),
            "ERR This instance has cluster support disabled"
        );
    }
    let info = text(&con.cmd(&[b"INFO", b"cluster"]).await);
    assert!(info.contains("cluster_enabled:0\r\n"), "{info}");
    s.stop().await;
}

#[tokio::test]
async fn hostile_cluster_arguments_get_errors_and_the_node_keeps_serving() {
    let c = cluster().await;
    let mut con = connect(&c, 0).await;
    let huge = vec![b'{'; 1 << 20];
    let cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (vec![b"CLUSTER"], "ERR wrong number of arguments"),
        (vec![b"CLUSTER", b"NOPE"], "ERR unknown subcommand"),
        (
            vec![b"CLUSTER", b"SLOTS", b"extra"],
            "ERR wrong number of arguments",
        ),
        (
            vec![b"CLUSTER", b"KEYSLOT"],
            "ERR wrong number of arguments",
        ),
        (
            vec![b"CLUSTER", b"COUNTKEYSINSLOT", b"16384"],
            "ERR Invalid slot",
        ),
        (
            vec![b"CLUSTER", b"COUNTKEYSINSLOT", b"-1"],
            "ERR Invalid slot",
        ),
        (
            vec![b"CLUSTER", b"COUNTKEYSINSLOT", b"99999999999999999999999"],
            "ERR value is not an integer or out of range",
        ),
        (
            vec![b"CLUSTER", b"GETKEYSINSLOT", b"\xff\xfe", b"10"],
            "ERR value is not an integer or out of range",
        ),
        (
            vec![b"CLUSTER", b"GETKEYSINSLOT", b"1", b"-9223372036854775808"],
            "ERR Invalid slot or number of keys",
        ),
        (vec![b"CLUSTER", b"\xff\x00"], "ERR unknown subcommand"),
        // Databases (`cluster_db`): every index outside 0..16 refused, nothing created.
        (vec![b"SELECT", b"-1"], "ERR DB index is out of range"),
        (vec![b"SELECT", b"16"], "ERR DB index is out of range"),
        (
            vec![b"SELECT", b"99999999999999999999999"],
            "ERR value is not an integer or out of range",
        ),
        (
            vec![b"SELECT", b"\xff"],
            "ERR value is not an integer or out of range",
        ),
        (vec![b"SELECT", b"1", b"2"], "ERR wrong number of arguments"),
        (
            vec![b"SWAPDB", b"0", b"x"],
            "ERR SWAPDB is not allowed in cluster mode",
        ),
        (
            vec![b"MOVE", b"{a}", b"1"],
            "ERR MOVE is not allowed in cluster mode",
        ),
    ];
    for (req, want) in &cases {
        let got = text(&con.cmd(req).await);
        assert!(got.starts_with(want), "{req:?}: {got}");
    }
    let buckets = c.node(0).buckets();
    assert!(
        !buckets.names().any(|n| n.starts_with("db")),
        "a refused SELECT registered a bucket"
    );
    // A 1 MiB key of unbalanced braces hashes whole, like Redis.
    let slot = int(&con.cmd(&[b"CLUSTER", b"KEYSLOT", &huge]).await);
    assert_eq!(slot, i64::from(slot_of(&huge)));
    // The connection and the node still serve.
    assert_eq!(text(&con.cmd(&[b"SET", b"k", b"v"]).await), "OK");
    assert_eq!(text(&con.cmd(&[b"GET", b"k"]).await), "v");
    c.shutdown().await;
}

/// A 2-DC × 2-node cluster with the default settings a cluster node has: `-MOVED` for a
/// misrouted key command, the timeline default bucket.
async fn redirecting_cluster() -> Embedded {
    let cfg = meridian_server::cluster::EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        wan_latency: Duration::ZERO,
        intra_dc: meridian_net::wan::LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        ..Default::default()
    };
    meridian_server::cluster::start_embedded(cfg, Duration::from_secs(60))
        .await
        .unwrap()
}

/// The first key `PREFIX-N` whose slot `pick` accepts, by its owner in `owner`.
fn key_where(prefix: &str, owner: &[SocketAddr], pick: impl Fn(SocketAddr) -> bool) -> String {
    (0..100_000)
        .map(|k| format!("{prefix}-{k}"))
        .find(|k| pick(owner[usize::from(slot_of(k.as_bytes()))]))
        .unwrap()
}

fn moved_to(slot_key: &str, to: SocketAddr) -> Frame {
    Frame::Error(format!("MOVED {} {to}", slot_of(slot_key.as_bytes())).into())
}

/// Every node redirects a key of a slot it does not master (in its DC's view) to the master
/// its own `CLUSTER SLOTS` names, in its DC, and does nothing; it serves its own slots'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_command_sent_to_another_nodes_slot_is_moved_there_and_does_nothing() {
    let c = redirecting_cluster().await;
    for node in 0..4 {
        let me = c.members[node].resp.unwrap();
        let owner = owners(&c, node).await;
        let prefix = format!("n{node}");
        let theirs = key_where(&prefix, &owner, |o| o != me);
        let mine = key_where(&prefix, &owner, |o| o == me);
        let master = owner[usize::from(slot_of(theirs.as_bytes()))];
        assert_eq!(
            dc_of(&c, master),
            c.members[node].dc,
            "MOVED stays in the DC"
        );

        let mut con = connect(&c, node).await;
        let v = format!("v{node}");
        let set = con.cmd(&[b"SET", theirs.as_bytes(), v.as_bytes()]).await;
        assert_eq!(set, moved_to(&theirs, master), "node {node}");
        assert_eq!(
            con.cmd(&[b"GET", theirs.as_bytes()]).await,
            moved_to(&theirs, master)
        );
        let mut at_master = connect_to(master).await;
        assert_eq!(
            at_master.cmd(&[b"GET", theirs.as_bytes()]).await,
            Frame::Null
        );
        let set = at_master
            .cmd(&[b"SET", theirs.as_bytes(), v.as_bytes()])
            .await;
        assert_eq!(set, Frame::Simple("OK".into()));
        assert_eq!(at_master.cmd(&[b"GET", theirs.as_bytes()]).await, bulk(&v));

        let set = con.cmd(&[b"SET", mine.as_bytes(), v.as_bytes()]).await;
        assert_eq!(set, Frame::Simple("OK".into()), "node {node}'s own slot");
        assert_eq!(con.cmd(&[b"GET", mine.as_bytes()]).await, bulk(&v));
    }
    c.shutdown().await;
}

/// What Meridian can serve anywhere is not redirected: keys of several slots in one command,
/// commands queued in MULTI (EXEC runs them where the bucket decides), read-only commands
/// after READONLY (until READWRITE), keyless commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_slot_queued_readonly_and_keyless_commands_are_served_where_they_arrive() {
    let c = redirecting_cluster().await;
    let me = c.members[0].resp.unwrap();
    let owner = owners(&c, 0).await;
    let theirs = key_where("key", &owner, |o| o != me);
    let mine = key_where("key", &owner, |o| o == me);
    let master = owner[usize::from(slot_of(theirs.as_bytes()))];
    let mut con = connect(&c, 0).await;
    let ok = Frame::Simple("OK".into());

    let mset = [b"MSET", theirs.as_bytes(), b"1", mine.as_bytes(), b"2"];
    assert_eq!(con.cmd(&mset).await, ok);
    let mget = con
        .cmd(&[b"MGET", theirs.as_bytes(), mine.as_bytes()])
        .await;
    assert_eq!(mget, Frame::Array(vec![bulk("1"), bulk("2")]));

    assert_eq!(con.cmd(&[b"MULTI"]).await, ok);
    let queued = Frame::Simple("QUEUED".into());
    assert_eq!(con.cmd(&[b"INCR", theirs.as_bytes()]).await, queued);
    assert_eq!(
        con.cmd(&[b"EXEC"]).await,
        Frame::Array(vec![Frame::Integer(2)])
    );

    assert_eq!(con.cmd(&[b"READONLY"]).await, ok);
    assert_eq!(con.cmd(&[b"GET", theirs.as_bytes()]).await, bulk("2"));
    let write = con.cmd(&[b"SET", theirs.as_bytes(), b"x"]).await;
    assert_eq!(
        write,
        moved_to(&theirs, master),
        "READONLY lets reads through only"
    );
    assert_eq!(con.cmd(&[b"READWRITE"]).await, ok);
    let get = con.cmd(&[b"GET", theirs.as_bytes()]).await;
    assert_eq!(get, moved_to(&theirs, master));

    assert_eq!(con.cmd(&[b"PING"]).await, Frame::Simple("PONG".into()));
    assert!(matches!(con.cmd(&[b"DBSIZE"]).await, Frame::Integer(_)));
    // A pipeline: each misrouted command answers MOVED in its place, the others run.
    let mut pipeline = Vec::new();
    for args in [
        [&b"GET"[..], mine.as_bytes()],
        [&b"GET"[..], theirs.as_bytes()],
        [&b"GET"[..], mine.as_bytes()],
    ] {
        let req = Frame::Array(args.iter().map(|a| Frame::bulk(a.to_vec())).collect());
        pipeline.extend_from_slice(&req.to_bytes(false));
    }
    con.send(&pipeline).await;
    assert_eq!(con.frame().await, bulk("2"));
    assert_eq!(con.frame().await, moved_to(&theirs, master));
    assert_eq!(con.frame().await, bulk("2"));
    c.shutdown().await;
}

/// MOVED follows a failover and a return: while a node is cut off its DC partner serves its
/// ranges (no MOVED), and once it is back the partner redirects them to it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moved_follows_a_failover_and_the_dead_nodes_return() {
    let c = redirecting_cluster().await;
    let victim = 1; // NodeId(2), DC 0
    let victim_addr = c.members[victim].resp.unwrap();
    let before = owners(&c, 0).await;
    let key = key_where("key", &before, |o| o == victim_addr);
    let mut partner = connect(&c, 0).await;
    let moved = moved_to(&key, victim_addr);
    assert_eq!(partner.cmd(&[b"SET", key.as_bytes(), b"1"]).await, moved);

    c.wan.isolate(c.members[victim].id);
    wait_for_slots(&c, 0, "the victim still leads", |r| {
        r.iter().all(|r| r.2[0].0 != victim_addr)
    })
    .await;
    let ok = Frame::Simple("OK".into());
    assert_eq!(partner.cmd(&[b"SET", key.as_bytes(), b"2"]).await, ok);

    c.wan.heal_all();
    wait_for_slots(&c, 0, "the victim never took its ranges back", |r| {
        r.iter().any(|r| r.2[0].0 == victim_addr)
    })
    .await;
    assert_eq!(partner.cmd(&[b"GET", key.as_bytes()]).await, moved);
    // Just after the heal the victim may not yet see a majority up, and a timeline master
    // then refuses rather than risk a fenced answer: poll until it serves.
    let mut back = connect_to(victim_addr).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let read = loop {
        let read = back.cmd(&[b"GET", key.as_bytes()]).await;
        if read == bulk("2") || tokio::time::Instant::now() > deadline {
            break read;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(read, bulk("2"), "the write taken during the failover");
    c.shutdown().await;
}
