//! What a node's front ends serve in cluster mode: [`ClusterBackend`] (the replication node,
//! its [`Dispatch`] facade, the WAN emulator's control, the replication nodes of the process)
//! and the request options every front end parses the same way ([`apply_option`]).
//!
//! It sits below every front end (RESP, HTTP, S3, the object service) and imports none of
//! them, nor the cluster start-up in `cluster` (which re-exports it): front ends
//! depend on it, never the other way round. Replication errors reach the wire through
//! `wire_error`.

use meridian_cluster::{Props, Quorum, ReplicaSelection};
use meridian_core::{DcId, NodeId};
use meridian_net::wan::WanControl;
use meridian_replication::{Dispatch, EventualNode};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The replication nodes running in this process, by id: every node of an embedded cluster
/// (`meridian up`), only the node itself in a TCP cluster. Admin requests that act on one
/// node (`PUT /balance/service-model` with `"node"`) reach the others through it.
#[derive(Debug, Clone, Default)]
pub struct LocalNodes(Arc<parking_lot::RwLock<BTreeMap<NodeId, EventualNode>>>);

impl LocalNodes {
    /// Adds (or replaces) `node`.
    pub fn insert(&self, node: EventualNode) {
        self.0.write().insert(node.id(), node);
    }

    /// The node with id `id`, if it runs in this process.
    pub fn get(&self, id: NodeId) -> Option<EventualNode> {
        self.0.read().get(&id).cloned()
    }

    /// The ids of the nodes in this process.
    pub fn ids(&self) -> Vec<NodeId> {
        self.0.read().keys().copied().collect()
    }
}

/// What a node's front ends serve in cluster mode. See the module docs.
#[derive(Debug, Clone)]
pub struct ClusterBackend {
    /// The replication node (membership, buckets, admin requests).
    pub node: EventualNode,
    /// The facade the front ends send key requests through (the same node).
    pub dispatch: Dispatch,
    /// The WAN emulator's control, when the node's messages go through one.
    pub wan: Option<WanControl>,
    /// The replication nodes of this process (this one included).
    pub local: LocalNodes,
    /// The SCAN cursors this node handed out (`resp::cluster_keys`).
    pub(crate) scan_cursors: Arc<parking_lot::Mutex<crate::scan_cursors::CursorTable>>,
}

/// How many SCAN cursors a cluster node remembers (as many as a single node does by default).
const SCAN_CURSORS: usize = 16 * 1024;

impl ClusterBackend {
    /// The backend of `node` (and its WAN emulator's control); the only node of its process.
    pub fn new(node: EventualNode, wan: Option<WanControl>) -> ClusterBackend {
        Self::in_process(node, wan, LocalNodes::default())
    }

    /// The backend of `node` among the nodes of `local` (it is added there).
    pub fn in_process(
        node: EventualNode,
        wan: Option<WanControl>,
        local: LocalNodes,
    ) -> ClusterBackend {
        local.insert(node.clone());
        ClusterBackend {
            dispatch: Dispatch::new(node.clone()),
            node,
            wan,
            local,
            scan_cursors: Arc::new(parking_lot::Mutex::new(
                crate::scan_cursors::CursorTable::new(SCAN_CURSORS),
            )),
        }
    }

    /// The name of DC `dc` as the members' records give it (`dc1`, `east`), for error
    /// messages and admin replies; the id's own form (`dc1`) when no member names it.
    pub fn dc_name(&self, dc: DcId) -> String {
        self.node
            .meta()
            .members
            .iter()
            .find(|m| m.dc == dc)
            .map_or_else(|| dc.to_string(), |m| m.dc_name.clone())
    }

    /// The DC a user names: a member's DC name (`east`), a DC id (`1`) or its display form
    /// (`dc1`). `None` when no member is in that DC.
    pub fn resolve_dc(&self, name: &str) -> Option<DcId> {
        let meta = self.node.meta();
        let name = name.trim();
        if let Some(m) = meta.members.iter().find(|m| m.dc_name == name) {
            return Some(m.dc);
        }
        let digits = name.strip_prefix("dc").unwrap_or(name);
        let id = DcId(digits.parse().ok()?);
        meta.members.iter().any(|m| m.dc == id).then_some(id)
    }

    /// `GET /cluster`: members with this node's failure-detector verdict, DCs, layout epoch,
    /// Q, per-node partition ownership, and the state of a running ownership handoff.
    pub fn describe(&self) -> serde_json::Value {
        let meta = self.node.meta();
        let layout = &meta.layout;
        let mut primary: BTreeMap<NodeId, usize> = BTreeMap::new();
        let mut secondary: BTreeMap<NodeId, usize> = BTreeMap::new();
        for replicas in layout.all_replicas() {
            for (i, n) in replicas.iter().enumerate() {
                *if i == 0 {
                    primary.entry(*n).or_default()
                } else {
                    secondary.entry(*n).or_default()
                } += 1;
            }
        }
        let members: Vec<_> = meta
            .members
            .iter()
            .map(|m| {
                serde_json::json!({
                    "id": m.id.0,
                    "name": m.name,
                    "dc": m.dc.0,
                    "dc_name": m.dc_name,
                    "peer": m.peer.map(|a| a.to_string()),
                    "resp": m.resp.map(|a| a.to_string()),
                    "http": m.http.map(|a| a.to_string()),
                    "resp_tls": m.resp_tls.map(|a| a.to_string()),
                    "status": if self.node.is_up(m.id) { "up" } else { "down" },
                    "self": m.id == self.node.id(),
                    "member": if layout.topology().contains(m.id) { "yes" } else { "leaving" },
                    "partitions": {
                        "primary": primary.get(&m.id).copied().unwrap_or(0),
                        "secondary": secondary.get(&m.id).copied().unwrap_or(0),
                    },
                })
            })
            .collect();
        let dcs: Vec<_> = layout
            .topology()
            .dcs()
            .map(|d| {
                serde_json::json!({
                    "id": d.0,
                    "nodes": layout.topology().nodes_in(d).iter().map(|n| n.0).collect::<Vec<_>>(),
                })
            })
            .collect();
        let handoff = match &meta.previous {
            Some(prev) => serde_json::json!({
                "running": true,
                "from_epoch": prev.epoch(),
                // Only the claimant tracks who reported their handoff done.
                "claimant_waits_for": (meta.claimant() == self.node.id()).then(|| {
                    self.node.handoff_pending().iter().map(|n| n.0).collect::<Vec<_>>()
                }),
            }),
            None => serde_json::json!({ "running": false }),
        };
        serde_json::json!({
            "node": self.node.id().0,
            "joined": meta.version > 0,
            "metadata_version": meta.version,
            "claimant": meta.claimant().0,
            "members": members,
            "dcs": dcs,
            "layout": {
                "epoch": layout.epoch(),
                "q": layout.ring().q(),
                "target_n": layout.target_n(),
            },
            "handoff": handoff,
        })
    }
}

/// Parses a quorum value: `one`, `quorum`, `all` (any case) or a number.
pub fn parse_quorum(v: &[u8]) -> Option<Quorum> {
    if v.eq_ignore_ascii_case(b"one") {
        Some(Quorum::One)
    } else if v.eq_ignore_ascii_case(b"quorum") {
        Some(Quorum::Quorum)
    } else if v.eq_ignore_ascii_case(b"all") {
        Some(Quorum::All)
    } else {
        std::str::from_utf8(v).ok()?.parse().ok().map(Quorum::Count)
    }
}

/// Parses a flag: `1`/`0`, `true`/`false`, `yes`/`no` (any case).
pub fn parse_flag(v: &[u8]) -> Option<bool> {
    if v == b"1" || v.eq_ignore_ascii_case(b"true") || v.eq_ignore_ascii_case(b"yes") {
        Some(true)
    } else if v == b"0" || v.eq_ignore_ascii_case(b"false") || v.eq_ignore_ascii_case(b"no") {
        Some(false)
    } else {
        None
    }
}

/// The names `replica_selection` accepts, for error messages: `local_first, random, ... or
/// avr`.
pub fn strategy_names() -> String {
    let names: Vec<&str> = ReplicaSelection::ALL.iter().map(|s| s.name()).collect();
    match names.split_last() {
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Parses a replica-selection strategy name (any case).
pub fn parse_strategy(v: &[u8]) -> Option<ReplicaSelection> {
    std::str::from_utf8(v).ok()?.trim().parse().ok()
}

/// The largest `TIMEOUT`/`timeout_ms` and `HEDGE_MS`/`hedge_ms` a request may ask for
/// ([`meridian_cluster::quorum::MAX_DURATION_MS`]; bucket properties have their own, longer cap).
pub const MAX_REQUEST_MS: u64 = meridian_cluster::quorum::MAX_DURATION_MS;

/// Applies one request option (`r`, `pr`, `w`, `dw`, `pw`, `node_confirms`, `dc_confirms`,
/// `notfound_ok`, `basic_quorum`, `read_fanout`, `hedge_ms`, `replica_selection`,
/// `timeout`/`timeout_ms`; names in any case) to `props`.
/// `reads` selects which names are valid: GET options or PUT/DELETE options.
pub fn apply_option(
    props: &mut Props,
    name: &[u8],
    value: &[u8],
    reads: bool,
) -> std::result::Result<(), String> {
    let lname = String::from_utf8_lossy(name).to_ascii_lowercase();
    let quorum = || {
        parse_quorum(value).ok_or_else(|| {
            format!(
                "invalid value '{}' for {lname}: expected one, quorum, all or a number",
                String::from_utf8_lossy(value)
            )
        })
    };
    let flag = || {
        parse_flag(value).ok_or_else(|| {
            format!(
                "invalid value '{}' for {lname}: expected 1 or 0",
                String::from_utf8_lossy(value)
            )
        })
    };
    match (lname.as_str(), reads) {
        ("r", true) => props.r = Some(quorum()?),
        ("pr", true) => props.pr = Some(quorum()?),
        ("notfound_ok", true) => props.notfound_ok = Some(flag()?),
        ("basic_quorum", true) => props.basic_quorum = Some(flag()?),
        ("read_fanout", true) => {
            props.read_fanout = Some(if value.eq_ignore_ascii_case(b"all") {
                meridian_cluster::ReadFanout::All
            } else if value.eq_ignore_ascii_case(b"quorum") {
                meridian_cluster::ReadFanout::Quorum
            } else {
                return Err(format!(
                    "invalid value '{}' for read_fanout: expected all or quorum",
                    String::from_utf8_lossy(value)
                ));
            });
        }
        ("replica_selection", true) => {
            props.replica_selection = Some(parse_strategy(value).ok_or_else(|| {
                format!(
                    "invalid value '{}' for replica_selection: expected {}",
                    String::from_utf8_lossy(value),
                    strategy_names()
                )
            })?);
        }
        ("w", false) => props.w = Some(quorum()?),
        ("dw", false) => props.dw = Some(quorum()?),
        ("pw", false) => props.pw = Some(quorum()?),
        ("node_confirms", false) => props.node_confirms = Some(quorum()?),
        ("dc_confirms", false) => props.dc_confirms = Some(quorum()?),
        ("hedge_ms", true) => {
            let ms = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&ms| ms <= MAX_REQUEST_MS)
                .ok_or_else(|| {
                    format!(
                        "invalid hedge_ms '{}': expected a number of milliseconds up to \
                         {MAX_REQUEST_MS}",
                        String::from_utf8_lossy(value)
                    )
                })?;
            props.hedge_ms = Some(ms);
        }
        ("timeout" | "timeout_ms", _) => {
            let ms = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&ms| ms > 0 && ms <= MAX_REQUEST_MS)
                .ok_or_else(|| {
                    format!(
                        "invalid {lname} '{}': expected a positive number of milliseconds up \
                         to {MAX_REQUEST_MS}",
                        String::from_utf8_lossy(value)
                    )
                })?;
            props.timeout_ms = Some(ms);
        }
        _ => {
            return Err(format!(
                "unknown option '{}'; valid: {}",
                String::from_utf8_lossy(name),
                if reads {
                    "R, PR, NOTFOUND_OK, BASIC_QUORUM, READ_FANOUT, HEDGE_MS, REPLICA_SELECTION, \
                     TIMEOUT"
                } else {
                    "W, DW, PW, NODE_CONFIRMS, DC_CONFIRMS, TIMEOUT"
                }
            ));
        }
    }
    Ok(())
}
