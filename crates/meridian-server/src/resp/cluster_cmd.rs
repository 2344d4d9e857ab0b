//! The Redis Cluster protocol's commands (`CLUSTER ...`, `READONLY`, `READWRITE`, `ASKING`),
//! so cluster-aware clients (redis-py `RedisCluster`, `redis-cli -c`, `redis-benchmark
//! --cluster`, ...) work against a Meridian cluster.
//!
//! **Slots.** A key's slot is Redis's (`meridian_cluster::slot_of`), and each partition of
//! the ring is one contiguous slot range (`Ring::slot_range`).
//!
//! **Each node describes the cluster from its own DC.** For every partition's slot range the
//! "master" reported is the partition's replica in the answering node's DC (the first, in the
//! layout's claim order, whose DC is this node's; if none, the first replica) and the other
//! replicas are its "replicas". A cluster-aware client connected to a DC-1 node therefore
//! sends every single-key command to a DC-1 node. Any node still serves any key (Meridian
//! coordinates anywhere), so no MOVED or CROSSSLOT is ever answered; the map only steers
//! clients to a nearby replica.
//!
//! Redis's model has one role per node, and clients rely on it (redis-py takes a node's role
//! from the first range it appears in, and sends SCAN, KEYS, DBSIZE, ... to the masters
//! only). Here a node can lead some ranges and replicate others; the view keeps Redis's
//! model: a node that leads a range in this view is listed only as a master, and a range's
//! replicas are the other replicas that lead nothing in this view (in practice, the other
//! DCs' nodes). `CLUSTER SLOTS` says that per range. `CLUSTER NODES` flags a node `master` when it
//! leads at least one range in this node's view, else `slave` of the leader of the first range
//! it replicates. `CLUSTER SHARDS` has one shard per leader: its ranges, the leader and every
//! node replicating any of them.
//!
//! Node ids are 40 lowercase hex characters derived only from the Meridian `NodeId` (so every
//! node names every other the same way, across restarts); the last 8 are the id itself.
//! Addresses are the members' announced RESP addresses (`MemberRecord::resp`).

use crate::cluster_backend::ClusterBackend;
use crate::resp::context::RespContext;
use meridian_cluster::{SLOTS, key_hash, slot_of};
use meridian_core::{DcId, NodeId};
use meridian_redis::Args;
use meridian_redis::Cmd;
use meridian_redis::Reply;
use meridian_replication::ClusterMeta;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;

/// Redis's answer to cluster commands on a node without cluster mode.
pub(crate) const DISABLED: &str = "ERR This instance has cluster support disabled";

/// The 40-hex-character Redis node id of Meridian node `id`: stable, and the same on every
/// node.
pub fn redis_node_id(id: NodeId) -> String {
    let be = id.0.to_be_bytes();
    let a = key_hash(b"meridian-redis-node-id/a", &be);
    let b = key_hash(b"meridian-redis-node-id/b", &be);
    format!("{a:016x}{b:016x}{:08x}", id.0)
}

/// Which of a partition's replicas (given by their DCs, in the layout's claim order) the
/// cluster commands report as the master of its slots to a node of `my_dc`: the first in
/// `my_dc`, else the first.
pub(crate) fn reported_lead(dcs: impl IntoIterator<Item = DcId>, my_dc: DcId) -> usize {
    dcs.into_iter().position(|dc| dc == my_dc).unwrap_or(0)
}

/// One member, as the cluster commands describe it.
struct NodeView {
    id: NodeId,
    name: String,
    dc: DcId,
    resp: Option<SocketAddr>,
    bus_port: u16,
    up: bool,
}

/// One partition's slot range with its reported leader and replicas (indexes into
/// [`View::nodes`]).
struct RangeView {
    first: u16,
    last: u16,
    master: usize,
    replicas: Vec<usize>,
}

/// The cluster as this node reports it: from its own DC (see the module docs).
struct View {
    me: usize,
    epoch: u64,
    nodes: Vec<NodeView>,
    ranges: Vec<RangeView>,
}

impl View {
    fn of(cluster: &ClusterBackend) -> View {
        let node = &cluster.node;
        View::build(&node.meta(), node.id(), node.dc(), |n| node.is_up(n))
    }

    /// The view of node `me` (in `my_dc`) of `meta`'s current layout; `up` is its failure
    /// detector.
    fn build(meta: &ClusterMeta, me: NodeId, my_dc: DcId, up: impl Fn(NodeId) -> bool) -> View {
        let layout = &meta.layout;
        let topo = layout.topology();
        let mut nodes: Vec<NodeView> = topo
            .members()
            .iter()
            .map(|m| {
                let rec = meta.members.iter().find(|r| r.id == m.id);
                NodeView {
                    id: m.id,
                    name: redis_node_id(m.id),
                    dc: m.dc,
                    resp: rec.and_then(|r| r.resp),
                    bus_port: rec.and_then(|r| r.peer).map_or(0, |p| p.port()),
                    up: up(m.id),
                }
            })
            .collect();
        nodes.sort_by_key(|n| n.id);
        let index: BTreeMap<NodeId, usize> =
            nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
        let ring = layout.ring();
        let mut ranges: Vec<RangeView> = ring
            .partitions()
            .filter_map(|p| {
                let list: Vec<usize> = layout
                    .replicas(p)
                    .iter()
                    .filter_map(|n| index.get(n).copied())
                    .collect();
                let lead = reported_lead(list.iter().map(|&i| nodes[i].dc), my_dc);
                let master = *list.get(lead)?;
                let replicas = list
                    .iter()
                    .enumerate()
                    .filter(|&(j, _)| j != lead)
                    .map(|(_, &i)| i)
                    .collect();
                let (first, last) = ring.slot_range(p);
                Some(RangeView {
                    first,
                    last,
                    master,
                    replicas,
                })
            })
            .collect();
        // One role per node, as Redis Cluster's: a node that leads a range is listed as a
        // master only, never as another range's replica. Clients take a node's role from
        // where it first appears (redis-py), and would otherwise leave a leader out of the
        // masters they send SCAN, KEYS, DBSIZE, ... to.
        let leaders: Vec<bool> = (0..nodes.len())
            .map(|i| ranges.iter().any(|r| r.master == i))
            .collect();
        for r in &mut ranges {
            r.replicas.retain(|&i| !leaders[i]);
        }
        let me = index.get(&me).copied().unwrap_or(0);
        View {
            me,
            epoch: layout.epoch(),
            nodes,
            ranges,
        }
    }

    /// The nodes that lead at least one range, in node order.
    fn masters(&self) -> Vec<usize> {
        let mut m: Vec<usize> = self.ranges.iter().map(|r| r.master).collect();
        m.sort_unstable();
        m.dedup();
        m
    }

    /// The slot ranges `i` leads, merged where contiguous.
    fn led_ranges(&self, i: usize) -> Vec<(u16, u16)> {
        let mut out: Vec<(u16, u16)> = Vec::new();
        for r in self.ranges.iter().filter(|r| r.master == i) {
            match out.last_mut() {
                Some(last) if u32::from(last.1) + 1 == u32::from(r.first) => last.1 = r.last,
                _ => out.push((r.first, r.last)),
            }
        }
        out
    }

    fn ip(&self, i: usize) -> String {
        self.nodes[i]
            .resp
            .map(|a| a.ip().to_string())
            .unwrap_or_default()
    }

    fn port(&self, i: usize) -> u16 {
        self.nodes[i].resp.map_or(0, |a| a.port())
    }

    /// One node of a `CLUSTER SLOTS` range: ip, port, id, and Redis 7's (empty) map of
    /// further endpoints.
    fn slots_node(&self, reply: &mut Reply, i: usize) {
        reply.array(4);
        reply.bulk(self.ip(i).as_bytes());
        reply.int(i64::from(self.port(i)));
        reply.bulk(self.nodes[i].name.as_bytes());
        reply.map(0);
    }

    fn slots(&self, reply: &mut Reply) {
        reply.array(self.ranges.len());
        for r in &self.ranges {
            reply.array(3 + r.replicas.len());
            reply.int(i64::from(r.first));
            reply.int(i64::from(r.last));
            self.slots_node(reply, r.master);
            for &i in &r.replicas {
                self.slots_node(reply, i);
            }
        }
    }

    fn shard_node(&self, reply: &mut Reply, i: usize, role: &str) {
        let n = &self.nodes[i];
        let ip = self.ip(i);
        reply.map(7);
        reply.bulk(b"id");
        reply.bulk(n.name.as_bytes());
        reply.bulk(b"port");
        reply.int(i64::from(self.port(i)));
        reply.bulk(b"ip");
        reply.bulk(ip.as_bytes());
        reply.bulk(b"endpoint");
        reply.bulk(ip.as_bytes());
        reply.bulk(b"role");
        reply.bulk(role.as_bytes());
        reply.bulk(b"replication-offset");
        reply.int(0);
        reply.bulk(b"health");
        reply.bulk(if n.up { &b"online"[..] } else { b"failed" });
    }

    fn shards(&self, reply: &mut Reply) {
        let masters = self.masters();
        reply.array(masters.len());
        for m in masters {
            let led = self.led_ranges(m);
            let mut replicas: Vec<usize> = self
                .ranges
                .iter()
                .filter(|r| r.master == m)
                .flat_map(|r| r.replicas.iter().copied())
                .collect();
            replicas.sort_unstable();
            replicas.dedup();
            reply.map(2);
            reply.bulk(b"slots");
            reply.array(2 * led.len());
            for (first, last) in led {
                reply.int(i64::from(first));
                reply.int(i64::from(last));
            }
            reply.bulk(b"nodes");
            reply.array(1 + replicas.len());
            self.shard_node(reply, m, "master");
            for i in replicas {
                self.shard_node(reply, i, "replica");
            }
        }
    }

    /// `CLUSTER NODES`: one line per member, Redis's format.
    fn nodes_text(&self) -> String {
        let masters = self.masters();
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let is_master = masters.contains(&i);
            let mut flags = Vec::new();
            if i == self.me {
                flags.push("myself");
            }
            let master_of = if is_master {
                None
            } else {
                self.ranges
                    .iter()
                    .find(|r| r.replicas.contains(&i))
                    .map(|r| r.master)
            };
            flags.push(if is_master || master_of.is_none() {
                "master"
            } else {
                "slave"
            });
            if !n.up {
                flags.push("fail");
            }
            if n.resp.is_none() {
                flags.push("noaddr");
            }
            let _ = write!(
                out,
                "{} {}:{}@{} {} {} 0 0 {} {}",
                n.name,
                self.ip(i),
                self.port(i),
                n.bus_port,
                flags.join(","),
                master_of.map_or("-", |m| self.nodes[m].name.as_str()),
                self.epoch,
                if n.up { "connected" } else { "disconnected" },
            );
            if is_master {
                for (first, last) in self.led_ranges(i) {
                    if first == last {
                        let _ = write!(out, " {first}");
                    } else {
                        let _ = write!(out, " {first}-{last}");
                    }
                }
            }
            out.push('\n');
        }
        out
    }

    /// `CLUSTER INFO`.
    fn info_text(&self) -> String {
        let failed: u32 = self
            .ranges
            .iter()
            .filter(|r| !self.nodes[r.master].up)
            .map(|r| u32::from(r.last - r.first) + 1)
            .sum();
        let assigned: u32 = self
            .ranges
            .iter()
            .map(|r| u32::from(r.last - r.first) + 1)
            .sum();
        let mut out = String::new();
        let mut line = |k: &str, v: &dyn std::fmt::Display| {
            let _ = write!(out, "{k}:{v}\r\n");
        };
        // Any node serves any key, so the cluster is `ok` while its slots are assigned.
        let ok = assigned == u32::from(SLOTS);
        line("cluster_state", &if ok { "ok" } else { "fail" });
        line("cluster_slots_assigned", &assigned);
        line("cluster_slots_ok", &(assigned - failed));
        line("cluster_slots_pfail", &0);
        line("cluster_slots_fail", &failed);
        line("cluster_known_nodes", &self.nodes.len());
        line("cluster_size", &self.masters().len());
        line("cluster_current_epoch", &self.epoch);
        line("cluster_my_epoch", &self.epoch);
        line("cluster_stats_messages_sent", &0);
        line("cluster_stats_messages_received", &0);
        line("total_cluster_links_buffer_limit_exceeded", &0);
        out
    }

    #[cfg(test)]
    fn describe(&self) -> Vec<(u16, u16, NodeId, Vec<NodeId>)> {
        self.ranges
            .iter()
            .map(|r| {
                let ids = r.replicas.iter().map(|&i| self.nodes[i].id).collect();
                (r.first, r.last, self.nodes[r.master].id, ids)
            })
            .collect()
    }
}

fn arity(sub: &[u8], ok: bool) -> Result<(), String> {
    if ok {
        return Ok(());
    }
    Err(format!(
        "ERR wrong number of arguments for 'cluster|{}' command",
        String::from_utf8_lossy(sub).to_ascii_lowercase()
    ))
}

fn slot_arg(a: &[u8]) -> Result<u16, String> {
    std::str::from_utf8(a)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|s| u16::try_from(s).ok())
        .filter(|&s| s < SLOTS)
        .ok_or_else(|| "ERR Invalid or out of range slot".to_owned())
}

const HELP: &[&str] = &[
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "MYID",
    "    Return the node id.",
    "NODES",
    "    Return cluster configuration seen by node. Output format:",
    "    <id> <ip:port@bus-port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
    "SHARDS",
    "    Return information about slot range mappings and the nodes associated with them.",
    "SLOTS",
    "    Return information about slots range mappings. Each range is made of:",
    "    start, end, master and replicas IP addresses, ports and ids",
    "    (the master is this node's DC's replica of the range).",
    "HELP",
    "    Print this help.",
];

/// `CLUSTER <subcommand>`; `Err` is a complete error line.
pub(crate) fn cluster(ctx: &RespContext, reply: &mut Reply, args: Args<'_>) -> Result<(), String> {
    let Some(backend) = ctx.cluster.as_deref() else {
        return Err(DISABLED.into());
    };
    let sub = args.get(1);
    let argc = args.len();
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    if is("SLOTS") {
        arity(sub, argc == 2)?;
        View::of(backend).slots(reply);
    } else if is("SHARDS") {
        arity(sub, argc == 2)?;
        View::of(backend).shards(reply);
    } else if is("NODES") {
        arity(sub, argc == 2)?;
        reply.verbatim(b"txt", View::of(backend).nodes_text().as_bytes());
    } else if is("INFO") {
        arity(sub, argc == 2)?;
        reply.verbatim(b"txt", View::of(backend).info_text().as_bytes());
    } else if is("MYID") {
        arity(sub, argc == 2)?;
        reply.bulk(redis_node_id(backend.node.id()).as_bytes());
    } else if is("KEYSLOT") {
        arity(sub, argc == 3)?;
        reply.int(i64::from(slot_of(args.get(2))));
    } else if is("COUNTKEYSINSLOT") || is("GETKEYSINSLOT") {
        arity(sub, argc == if is("COUNTKEYSINSLOT") { 3 } else { 4 })?;
        slot_arg(args.get(2))?;
        return Err(format!(
            "ERR CLUSTER {} is not supported: Meridian does not index keys by slot, and any \
             node serves any key (use SCAN, or CLUSTER KEYSLOT per key)",
            String::from_utf8_lossy(sub).to_ascii_uppercase()
        ));
    } else if is("HELP") {
        reply.array(HELP.len());
        for l in HELP {
            reply.simple(l.as_bytes());
        }
    } else {
        let sub = &sub[..sub.len().min(128)];
        return Err(format!(
            "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
            String::from_utf8_lossy(sub)
        ));
    }
    Ok(())
}

/// `READONLY`, `READWRITE`, `ASKING`: accepted in cluster mode (any node serves reads and
/// writes of any key, so there is nothing to switch).
pub(crate) fn connection_mode(
    ctx: &RespContext,
    reply: &mut Reply,
    cmd: Cmd,
) -> Result<(), String> {
    debug_assert!(matches!(cmd, Cmd::Readonly | Cmd::Readwrite | Cmd::Asking));
    if ctx.cluster.is_none() {
        return Err(DISABLED.into());
    }
    reply.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_40_lowercase_hex_and_stable() {
        let a = redis_node_id(NodeId(1));
        assert_eq!(a.len(), 40);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert!(a.ends_with("00000001"), "{a}");
        assert_ne!(a, redis_node_id(NodeId(2)));
        assert_eq!(a, redis_node_id(NodeId(1)));
        assert_eq!(a, GOLDEN_NODE_1);
    }
    const GOLDEN_NODE_1: &str = "45e8abb8022cc497e9a751c55e78d18d00000001";

    #[test]
    fn slot_arguments() {
        assert_eq!(slot_arg(b"0"), Ok(0));
        assert_eq!(slot_arg(b"16383"), Ok(16383));
        assert!(slot_arg(b"16384").is_err());
        assert!(slot_arg(b"-1").is_err());
        assert!(slot_arg(b"x").is_err());
    }

    /// Two DCs of two nodes each (ids 1, 2 in DC 0; 3, 4 in DC 1), Q = 64, N = 3.
    fn meta() -> ClusterMeta {
        use meridian_cluster::{Member, Ring, Topology, claim};
        use meridian_replication::{Buckets, ClusterShape, MemberRecord};
        let records: Vec<MemberRecord> = (1..=4u32)
            .map(|i| MemberRecord {
                id: NodeId(i),
                name: format!("n{i}"),
                dc: DcId((i - 1) / 2),
                dc_name: format!("dc{}", (i - 1) / 2),
                peer: Some(format!("127.0.0.1:{}", 17000 + i).parse().unwrap()),
                resp: Some(format!("127.0.0.1:{}", 7000 + i).parse().unwrap()),
                http: None,
            })
            .collect();
        let topo = Topology::new(records.iter().map(|r| Member::new(r.id, r.dc))).unwrap();
        let layout = claim(&topo, Ring::new(64).unwrap(), 3).unwrap();
        let buckets = Buckets::new(ClusterShape::of(&layout)).unwrap();
        ClusterMeta::new(layout, records, &buckets).unwrap()
    }

    #[test]
    fn every_slot_once_led_by_the_answering_nodes_dc() {
        let meta = meta();
        for (me, dc) in [(NodeId(1), DcId(0)), (NodeId(4), DcId(1))] {
            let v = View::build(&meta, me, dc, |_| true);
            let ranges = v.describe();
            let mut next = 0u32;
            for (p, (first, last, master, replicas)) in ranges.iter().enumerate() {
                assert_eq!(u32::from(*first), next);
                next = u32::from(*last) + 1;
                let list = meta.layout.replicas(meridian_core::PartitionId(p as u32));
                let expect = *list
                    .iter()
                    .find(|n| meta.layout.topology().dc_of(**n) == Some(dc))
                    .unwrap();
                assert_eq!(*master, expect, "partition {p}");
                assert!(!replicas.contains(master));
                // The replicas are the partition's other replicas that lead nothing here.
                let leaders: Vec<NodeId> = ranges.iter().map(|r| r.2).collect();
                let want: Vec<NodeId> = list
                    .iter()
                    .copied()
                    .filter(|n| n != master && !leaders.contains(n))
                    .collect();
                assert_eq!(*replicas, want, "partition {p}");
            }
            assert_eq!(next, u32::from(SLOTS));
            let text = v.nodes_text();
            assert_eq!(text.lines().count(), 4);
            let mine = text.lines().find(|l| l.contains("myself")).unwrap();
            assert!(mine.starts_with(&redis_node_id(me)), "{mine}");
            // Only this DC's nodes lead slots.
            for line in text.lines() {
                let f: Vec<&str> = line.split(' ').collect();
                let leads = f.len() > 8;
                let port: u32 = f[1].split(['@', ':']).nth(1).unwrap().parse().unwrap();
                let in_my_dc = (port - 7001) / 2 == dc.0;
                assert_eq!(leads, in_my_dc, "{line}");
                assert_eq!(f[2].contains("master"), leads, "{line}");
                assert_eq!(f[7], "connected");
            }
            assert!(v.info_text().starts_with("cluster_state:ok\r\n"));
        }
        // A down leader is flagged `fail` and its slots counted failed.
        let v = View::build(&meta, NodeId(1), DcId(0), |n| n != NodeId(2));
        let text = v.nodes_text();
        let two = text
            .lines()
            .find(|l| l.starts_with(&redis_node_id(NodeId(2))))
            .unwrap();
        assert!(
            two.contains(",fail ") && two.contains(" disconnected"),
            "{two}"
        );
        assert!(!v.info_text().contains("cluster_slots_fail:0\r\n"));
    }
}
