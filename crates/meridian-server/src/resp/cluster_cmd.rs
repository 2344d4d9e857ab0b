//! The Redis Cluster protocol's commands (`CLUSTER ...`, `READONLY`, `READWRITE`, `ASKING`),
//! so cluster-aware clients (redis-py `RedisCluster`, `redis-cli -c`, `redis-benchmark
//! --cluster`, ...) work against a Meridian cluster.
//!
//! **Slots.** A key's slot is Redis's (`meridian_cluster::slot_of`), and each partition of
//! the ring is one contiguous slot range (`Ring::slot_range`).
//!
//! **Each DC is a Redis Cluster of its own nodes.** A node answers with its own DC's view:
//! for every partition's slot range the "master" is the partition's first replica (in the
//! layout's claim order) that is in this node's DC and up by this node's failure detector.
//! Only the nodes of that view are listed — this DC's, plus another DC's replica standing in
//! for a range none of this DC's replicas can serve — so a client seeded in a DC, refreshing
//! from any node it learns of, never routes outside it while the DC holds a live replica of
//! every range; the other DCs replicate underneath. A key command sent to a node that is not
//! its slot's master in this view gets `-MOVED` to that master (`cluster_redirect`; with
//! `resp.misrouted = "serve"` any node coordinates any key instead). Keys of several slots
//! in one command are served, not refused with CROSSSLOT: Meridian coordinates anywhere.
//!
//! **Failover.** When the failure detector marks a node down (φ-accrual over a cluster node's
//! 500 ms heartbeats: about 3 s of silence), the next answer names the range's next replica in the DC as its
//! master, or another DC's up replica when the DC has none; the dead node stays listed as
//! `master,fail … disconnected` without slots, as Redis lists a failed-over master. When it
//! returns, its heartbeat makes it up again and the same rule gives its ranges back. A client
//! that still sends a range's keys to the stand-in gets `-MOVED` back to it.
//!
//! Redis's model has one role per node and one replica set per master, and clients rely on it
//! (redis-py takes a node's role from the first range it appears in and sends SCAN, KEYS,
//! DBSIZE, ... to the masters only; ioredis groups a pipeline's keys by a range's whole node
//! list). Here a node can lead some ranges and replicate others, so the view keeps Redis's
//! model: a node that leads a range is listed only as a master; each other up node of the view
//! that replicates a master's range is the replica of exactly one master (the first range's),
//! and every range of a master lists the same replicas. Any node serves a key, so a replica
//! listed for a range it does not hold still answers `READONLY` reads correctly. `CLUSTER
//! SLOTS` says that per range; `CLUSTER NODES` flags a node `master` or `slave` of its master;
//! `CLUSTER SHARDS` has one shard per master.
//!
//! Node ids are 40 lowercase hex characters derived only from the Meridian `NodeId` (so every
//! node names every other the same way, across restarts); the last 8 are the id itself.
//! Addresses are the members' announced RESP addresses, by the asking connection as Redis 7
//! with `tls-cluster yes` gives them: a client connected over TLS is told each node's TLS
//! address (`MemberRecord::resp_tls`), a plaintext client its plaintext one
//! (`MemberRecord::resp`), each falling back on the other when the node lacks it
//! (`MemberRecord::client_resp`). `CLUSTER SHARDS` gives both, as `port` and `tls-port`.

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

/// Which of a partition's replicas (their DCs, in the layout's claim order; `up(i)` the
/// liveness of the `i`-th) the cluster commands report as the master of its slots to a node
/// of `my_dc`: the first up replica in `my_dc`; else the first up replica of any DC; else
/// (every replica down) the first in `my_dc`, else the first. `None` only for an empty list.
/// `up` is asked lazily, in order, and only as far as the answer needs (a routed request asks
/// it of nobody when the answering node is its DC's first replica).
pub(crate) fn reported_lead(
    dcs: &[DcId],
    up: impl Fn(usize) -> bool,
    my_dc: DcId,
) -> Option<usize> {
    let mine = |i: &usize| dcs[*i] == my_dc;
    (0..dcs.len())
        .filter(mine)
        .find(|&i| up(i))
        .or_else(|| (0..dcs.len()).find(|&i| up(i)))
        .or_else(|| (0..dcs.len()).find(mine))
        .or_else(|| (!dcs.is_empty()).then_some(0))
}

/// Whether this node is the reported master of each partition (by index) in its own DC's
/// view: the ranges it answers `SCAN`, `KEYS`, `DBSIZE` and `COUNTKEYSINSLOT` for. The same
/// rule as [`View`]'s, with each member's liveness asked of the failure detector once.
pub(crate) fn served_partitions(cluster: &ClusterBackend) -> Vec<bool> {
    let node = &cluster.node;
    let meta = node.meta();
    let layout = &meta.layout;
    let topo = layout.topology();
    let (me, my_dc) = (node.id(), node.dc());
    let up: BTreeMap<NodeId, bool> = topo
        .members()
        .iter()
        .map(|m| (m.id, node.is_up(m.id)))
        .collect();
    layout
        .ring()
        .partitions()
        .map(|p| {
            let replicas: Vec<(NodeId, DcId)> = layout
                .replicas(p)
                .iter()
                .filter_map(|&n| topo.dc_of(n).map(|dc| (n, dc)))
                .collect();
            let live = |i: usize| up.get(&replicas[i].0).copied().unwrap_or(false);
            let dcs: Vec<DcId> = replicas.iter().map(|&(_, dc)| dc).collect();
            let lead = reported_lead(&dcs, live, my_dc);
            lead.is_some_and(|l| replicas[l].0 == me)
        })
        .collect()
}

/// One member, as the cluster commands describe it.
struct NodeView {
    id: NodeId,
    name: String,
    dc: DcId,
    /// The address the asking client is told (by its connection type).
    resp: Option<SocketAddr>,
    /// The plaintext RESP port (`CLUSTER SHARDS`' `port`), when the node has one.
    plain_port: Option<u16>,
    /// The RESP-over-TLS port (`CLUSTER SHARDS`' `tls-port`), when the node has one.
    tls_port: Option<u16>,
    bus_port: u16,
    up: bool,
}

/// One partition's slot range with its reported master and that master's replicas (indexes
/// into [`View::nodes`]).
struct RangeView {
    first: u16,
    last: u16,
    master: usize,
    replicas: Vec<usize>,
}

/// The cluster as this node reports it: its own DC's view (see the module docs).
struct View {
    me: usize,
    epoch: u64,
    /// Every member, in id order.
    nodes: Vec<NodeView>,
    /// Whether each member is part of this view (listed by `CLUSTER NODES`).
    listed: Vec<bool>,
    /// The master each member replicates in this view, if it is a replica.
    replica_of: Vec<Option<usize>>,
    ranges: Vec<RangeView>,
}

impl View {
    /// The view told to a client connected over TLS (`tls`) or not.
    fn of(cluster: &ClusterBackend, tls: bool) -> View {
        let node = &cluster.node;
        View::build(&node.meta(), node.id(), node.dc(), tls, |n| node.is_up(n))
    }

    /// The view of node `me` (in `my_dc`) of `meta`'s current layout, with the addresses a
    /// client connected over TLS (`tls`) or not is told; `up` is its failure detector.
    fn build(
        meta: &ClusterMeta,
        me: NodeId,
        my_dc: DcId,
        tls: bool,
        up: impl Fn(NodeId) -> bool,
    ) -> View {
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
                    resp: rec.and_then(|r| r.client_resp(tls)),
                    plain_port: rec.and_then(|r| r.plain_resp()).map(|a| a.port()),
                    tls_port: rec.and_then(|r| r.resp_tls).map(|a| a.port()),
                    bus_port: rec.and_then(|r| r.peer).map_or(0, |p| p.port()),
                    up: m.id == me || up(m.id),
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
                let dcs: Vec<DcId> = list.iter().map(|&i| nodes[i].dc).collect();
                let lead = reported_lead(&dcs, |j| nodes[list[j]].up, my_dc)?;
                let (first, last) = ring.slot_range(p);
                let master = list[lead];
                Some(RangeView {
                    first,
                    last,
                    master,
                    // For now the range's other replicas; replaced by its master's below.
                    replicas: list.into_iter().filter(|&i| i != master).collect(),
                })
            })
            .collect();
        let leaders: Vec<bool> = (0..nodes.len())
            .map(|i| ranges.iter().any(|r| r.master == i))
            .collect();
        // One role per node and one replica set per master (see the module docs).
        let mut replica_of: Vec<Option<usize>> = vec![None; nodes.len()];
        for r in &ranges {
            for &i in &r.replicas {
                let eligible = !leaders[i] && nodes[i].up && nodes[i].dc == my_dc;
                if eligible && replica_of[i].is_none() {
                    replica_of[i] = Some(r.master);
                }
            }
        }
        for r in &mut ranges {
            r.replicas = (0..nodes.len())
                .filter(|&i| replica_of[i] == Some(r.master))
                .collect();
        }
        let listed = (0..nodes.len())
            .map(|i| nodes[i].dc == my_dc || leaders[i])
            .collect();
        let me = index.get(&me).copied().unwrap_or(0);
        View {
            me,
            epoch: layout.epoch(),
            nodes,
            listed,
            replica_of,
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

    /// The replicas of master `m`, in node order.
    fn replicas_of(&self, m: usize) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.replica_of[i] == Some(m))
            .collect()
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

    /// One node of a `CLUSTER SHARDS` shard. As Redis 7, `port` is the plaintext port and
    /// `tls-port` the TLS one, whichever the client uses, each given only when the node has
    /// it (`port` 0 for a node whose address is not known yet).
    fn shard_node(&self, reply: &mut Reply, i: usize, role: &str) {
        let n = &self.nodes[i];
        let ip = self.ip(i);
        let port = match (n.plain_port, n.tls_port) {
            (None, Some(_)) => None,
            (p, _) => Some(p.unwrap_or(0)),
        };
        reply.map(6 + usize::from(port.is_some()) + usize::from(n.tls_port.is_some()));
        reply.bulk(b"id");
        reply.bulk(n.name.as_bytes());
        if let Some(p) = port {
            reply.bulk(b"port");
            reply.int(i64::from(p));
        }
        if let Some(p) = n.tls_port {
            reply.bulk(b"tls-port");
            reply.int(i64::from(p));
        }
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
            let replicas = self.replicas_of(m);
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
            if !self.listed[i] {
                continue;
            }
            let is_master = masters.contains(&i);
            let mut flags = Vec::new();
            if i == self.me {
                flags.push("myself");
            }
            let master_of = self.replica_of[i];
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
        // Any node serves any key, so the cluster is `ok` while its slots are assigned (a range
        // whose replicas are all down is counted failed, but other ranges are still served).
        let ok = assigned == u32::from(SLOTS);
        line("cluster_state", &if ok { "ok" } else { "fail" });
        line("cluster_slots_assigned", &assigned);
        line("cluster_slots_ok", &(assigned - failed));
        line("cluster_slots_pfail", &0);
        line("cluster_slots_fail", &failed);
        line(
            "cluster_known_nodes",
            &self.listed.iter().filter(|&&l| l).count(),
        );
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

pub(crate) fn arity(sub: &[u8], ok: bool) -> Result<(), String> {
    if ok {
        return Ok(());
    }
    Err(format!(
        "ERR wrong number of arguments for 'cluster|{}' command",
        String::from_utf8_lossy(sub).to_ascii_lowercase()
    ))
}

const HELP: &[&str] = &[
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "COUNTKEYSINSLOT <slot>",
    "    Return the number of keys in <slot>.",
    "GETKEYSINSLOT <slot> <count>",
    "    Return key names stored by current node in a slot.",
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
/// `tls`: the asking client is connected over TLS (the addresses it is told).
pub(crate) fn cluster(
    ctx: &RespContext,
    reply: &mut Reply,
    args: Args<'_>,
    tls: bool,
) -> Result<(), String> {
    let Some(backend) = ctx.cluster.as_deref() else {
        return Err(DISABLED.into());
    };
    let sub = args.get(1);
    let argc = args.len();
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    if is("SLOTS") {
        arity(sub, argc == 2)?;
        View::of(backend, tls).slots(reply);
    } else if is("SHARDS") {
        arity(sub, argc == 2)?;
        View::of(backend, tls).shards(reply);
    } else if is("NODES") {
        arity(sub, argc == 2)?;
        reply.verbatim(b"txt", View::of(backend, tls).nodes_text().as_bytes());
    } else if is("INFO") {
        arity(sub, argc == 2)?;
        reply.verbatim(b"txt", View::of(backend, tls).info_text().as_bytes());
    } else if is("MYID") {
        arity(sub, argc == 2)?;
        reply.bulk(redis_node_id(backend.node.id()).as_bytes());
    } else if is("KEYSLOT") {
        arity(sub, argc == 3)?;
        reply.int(i64::from(slot_of(args.get(2))));
    } else if is("COUNTKEYSINSLOT") || is("GETKEYSINSLOT") {
        // Served outside transactions by `cluster_keys::keys_in_slot` (they walk the node's
        // listing, which waits on the network); a transaction's queue runs synchronously.
        return Err(format!(
            "ERR CLUSTER {} is not supported inside MULTI on a Meridian cluster (send it on \
             its own)",
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

/// `READONLY`, `READWRITE`, `ASKING`: accepted in cluster mode. The connection's `READONLY`
/// flag (kept by the caller) lets read-only commands be served on any node
/// (`cluster_redirect`); nothing is ever in migration, so `ASKING` changes nothing.
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

    /// `per_dc[d]` nodes in DC d (ids from 1, DC by DC), Q = `q`, N = `n`.
    fn meta_of(per_dc: &[u32], q: u32, n: usize) -> ClusterMeta {
        use meridian_cluster::{Member, Ring, Topology, claim};
        use meridian_replication::{Buckets, ClusterShape, MemberRecord};
        let dcs: Vec<u32> = per_dc
            .iter()
            .enumerate()
            .flat_map(|(d, &k)| std::iter::repeat_n(d as u32, k as usize))
            .collect();
        let records: Vec<MemberRecord> = dcs
            .iter()
            .enumerate()
            .map(|(i, &dc)| {
                let i = i as u32 + 1;
                MemberRecord {
                    id: NodeId(i),
                    name: format!("n{i}"),
                    dc: DcId(dc),
                    dc_name: format!("dc{dc}"),
                    peer: Some(format!("127.0.0.1:{}", 17000 + i).parse().unwrap()),
                    resp: Some(format!("127.0.0.1:{}", 7000 + i).parse().unwrap()),
                    http: None,
                    resp_tls: None,
                }
            })
            .collect();
        let topo = Topology::new(records.iter().map(|r| Member::new(r.id, r.dc))).unwrap();
        let layout = claim(&topo, Ring::new(q).unwrap(), n).unwrap();
        let buckets = Buckets::new(ClusterShape::of(&layout)).unwrap();
        ClusterMeta::new(layout, records, &buckets).unwrap()
    }

    #[test]
    fn a_tls_client_is_told_tls_ports_and_a_plaintext_client_plaintext_ones() {
        let mut meta = meta();
        // Node 2 serves no TLS; node 1 serves TLS only (its `resp` is its TLS listener).
        for r in &mut meta.members {
            let tls = format!("127.0.0.1:{}", 8000 + r.id.0).parse().unwrap();
            match r.id.0 {
                1 => (r.resp, r.resp_tls) = (Some(tls), Some(tls)),
                2 => {}
                _ => r.resp_tls = Some(tls),
            }
        }
        let plain = View::build(&meta, NodeId(1), DcId(0), false, |_| true);
        let tls = View::build(&meta, NodeId(1), DcId(0), true, |_| true);
        let ports = |v: &View| (0..v.nodes.len()).map(|i| v.port(i)).collect::<Vec<_>>();
        assert_eq!(ports(&plain), [8001, 7002, 7003, 7004]);
        assert_eq!(ports(&tls), [8001, 7002, 8003, 8004]);
        assert!(tls.nodes_text().contains(" 127.0.0.1:8001@17001 myself,"));
        assert!(plain.nodes_text().contains(" 127.0.0.1:7002@17002 "));
        // SHARDS names both ports, whichever the client uses, and only those the node has.
        let shard = |i: usize| {
            let mut r = Reply::new(256);
            r.resp3 = true;
            plain.shard_node(&mut r, i, "master");
            String::from_utf8(r.out.to_vec()).unwrap()
        };
        let only_tls = shard(0);
        assert!(only_tls.starts_with("%7\r\n") && only_tls.contains("tls-port\r\n:8001"));
        assert!(!only_tls.contains("$4\r\nport"), "{only_tls}");
        assert!(shard(1).starts_with("%7\r\n") && !shard(1).contains("tls-port"));
        let both = shard(2);
        assert!(both.starts_with("%8\r\n") && both.contains("$4\r\nport\r\n:7003\r\n"));
        assert!(both.contains("tls-port\r\n:8003\r\n"), "{both}");
    }

    /// Two DCs of two nodes each (ids 1, 2 in DC 0; 3, 4 in DC 1), Q = 64, N = 3.
    fn meta() -> ClusterMeta {
        meta_of(&[2, 2], 64, 3)
    }

    fn dc_of(meta: &ClusterMeta, n: NodeId) -> DcId {
        meta.layout.topology().dc_of(n).unwrap()
    }

    /// Redis's shape, whatever the cluster: every slot exactly once, in order; no master is
    /// also a replica; every range of a master lists the same replicas; a replica has one
    /// master; `CLUSTER NODES` says the same.
    fn assert_redis_shaped(v: &View) {
        let ranges = v.describe();
        let mut next = 0u32;
        let mut replicas_of: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
        for (first, last, master, replicas) in &ranges {
            assert_eq!(u32::from(*first), next);
            next = u32::from(*last) + 1;
            assert!(!replicas.contains(master));
            let known = replicas_of
                .entry(*master)
                .or_insert_with(|| replicas.clone());
            assert_eq!(known, replicas, "one replica list per master");
        }
        assert_eq!(next, u32::from(SLOTS));
        let masters: Vec<NodeId> = replicas_of.keys().copied().collect();
        let all: Vec<NodeId> = replicas_of.values().flatten().copied().collect();
        for r in &all {
            assert!(!masters.contains(r), "a master listed as a replica");
            assert_eq!(all.iter().filter(|x| *x == r).count(), 1, "one master each");
        }
        let text = v.nodes_text();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let id = NodeId(u32::from_str_radix(&f[0][32..], 16).unwrap());
            assert_eq!(f[2].contains("slave"), all.contains(&id), "{line}");
            assert_eq!(f.len() > 8, masters.contains(&id), "{line}");
        }
    }

    #[test]
    fn every_slot_once_led_by_the_answering_nodes_dc_which_alone_is_listed() {
        let meta = meta();
        for (me, dc) in [(NodeId(1), DcId(0)), (NodeId(4), DcId(1))] {
            let v = View::build(&meta, me, dc, false, |_| true);
            assert_redis_shaped(&v);
            for (p, (_, _, master, replicas)) in v.describe().iter().enumerate() {
                let list = meta.layout.replicas(meridian_core::PartitionId(p as u32));
                let expect = *list.iter().find(|n| dc_of(&meta, **n) == dc).unwrap();
                assert_eq!(*master, expect, "partition {p}");
                // Both of this DC's nodes lead ranges: no replica is left to list.
                assert!(replicas.is_empty(), "partition {p}: {replicas:?}");
            }
            let text = v.nodes_text();
            assert_eq!(text.lines().count(), 2, "this DC's nodes only: {text}");
            let mine = text.lines().find(|l| l.contains("myself")).unwrap();
            assert!(mine.starts_with(&redis_node_id(me)), "{mine}");
            for line in text.lines() {
                let port: u32 = line.split([' ', ':', '@']).nth(2).unwrap().parse().unwrap();
                assert_eq!((port - 7001) / 2, dc.0, "{line}");
                assert!(
                    line.contains(" master ") || line.contains(",master "),
                    "{line}"
                );
                assert!(line.contains(" connected"), "{line}");
            }
            let info = v.info_text();
            assert!(info.starts_with("cluster_state:ok\r\n"));
            assert!(info.contains("cluster_known_nodes:2\r\n"), "{info}");
        }
    }

    #[test]
    fn a_down_node_hands_its_ranges_to_a_live_replica_of_its_dc_first() {
        let meta = meta();
        let down = NodeId(2);
        let v = View::build(&meta, NodeId(1), DcId(0), false, |n| n != down);
        assert_redis_shaped(&v);
        for (p, (_, _, master, _)) in v.describe().iter().enumerate() {
            let list = meta.layout.replicas(meridian_core::PartitionId(p as u32));
            assert_ne!(*master, down, "partition {p}");
            // This DC's live replica if it has one, else another DC's first replica.
            let expect = list
                .iter()
                .find(|&&n| n != down && dc_of(&meta, n) == DcId(0))
                .or_else(|| list.iter().find(|&&n| n != down))
                .unwrap();
            assert_eq!(master, expect, "partition {p}");
        }
        // The dead node is listed as Redis lists a failed-over master: no slots.
        let text = v.nodes_text();
        let two = text
            .lines()
            .find(|l| l.starts_with(&redis_node_id(down)))
            .unwrap();
        assert_eq!(
            two.split(' ').skip(2).collect::<Vec<_>>(),
            [
                "master,fail",
                "-",
                "0",
                "0",
                &meta.layout.epoch().to_string(),
                "disconnected"
            ],
            "{two}"
        );
        assert!(v.info_text().contains("cluster_slots_fail:0\r\n"));
        // Back up: the same rule gives its ranges back.
        let back = View::build(&meta, NodeId(1), DcId(0), false, |_| true);
        let again = View::build(&meta, NodeId(1), DcId(0), false, |n| n != down);
        assert_eq!(again.describe(), v.describe());
        assert!(back.describe().iter().any(|r| r.2 == down));
        // Every replica down: the range is failed and says so.
        let v = View::build(&meta, NodeId(1), DcId(0), false, |n| n == NodeId(1));
        assert!(!v.info_text().contains("cluster_slots_fail:0\r\n"));
    }

    #[test]
    fn spare_nodes_of_the_dc_are_replicas_of_one_master_each() {
        // With more nodes in a DC than ranges (70 nodes, Q = 64) some lead nothing, and each
        // of those replicates exactly one master.
        let cases = [
            (&[4u32, 1][..], 64, 3),
            (&[5, 2], 64, 4),
            (&[3, 3], 64, 3),
            (&[2, 2, 2], 64, 3),
            (&[70], 64, 3),
            (&[68, 3], 64, 3),
        ];
        let mut replicas_seen = 0;
        for (per_dc, q, n) in cases {
            let meta = meta_of(per_dc, q, n);
            for me in meta.layout.topology().members().iter().take(8) {
                for v in [
                    View::build(&meta, me.id, me.dc, false, |_| true),
                    View::build(&meta, me.id, me.dc, false, |x| x.0 % 2 == 1 || x == me.id),
                ] {
                    assert_redis_shaped(&v);
                    replicas_seen += v.replica_of.iter().flatten().count();
                }
            }
        }
        assert!(replicas_seen > 0, "some case has a spare node");
    }
}
