//! Cluster metadata: the one versioned document every node of a cluster agrees on — the
//! layout (who owns which partition), the previous layout while ownership handoff runs, the
//! member table (names, DCs, addresses) and the bucket registry — and the changes that
//! produce its next version (join, leave, set a bucket, handoff complete).
//!
//! ## How it is kept consistent
//!
//! - Every change goes through one node, the **claimant** (the lowest node id of the current
//!   layout, as in Riak): [`ClusterMeta::apply`] is a pure function of the current document
//!   and the change, and the claimant publishes the result with `version + 1`.
//! - Nodes exchange the document by version: a heartbeat carries the sender's version; a
//!   node that hears a lower version pushes its document to that peer, and the claimant
//!   pushes every new version to every member at once. A node adopts a document only if it
//!   is newer ([`ClusterMeta::supersedes`]: greater `(version, author)`, so two claimants that
//!   disagreed during a partition still converge on one document).
//! - Only one layout change runs at a time: a join or leave is refused while `previous` is
//!   set, that is until every node reported its handoff done and the claimant published the
//!   [`MetaChange::HandoffComplete`] version.
//!
//! - The **key directory** of transactional buckets (spec `repartitioning.md` §6: keys moved
//!   off their hash partition) rides in the document too: a move is two changes
//!   ([`MetaChange::KeyDirectory`] `Begin`, then `Finish` or `Cancel`), so every coordinator
//!   gets the directory by the same versioned, gossiped, persisted path as the layout, and no
//!   node ever applies directory changes out of order.
//!
//! - The **ACL users** every node enforces ride in it too ([`ClusterMeta::acl`], module
//!   [`crate::users`]): `ACL SETUSER`/`DELUSER`/`LOAD` on any node are
//!   [`MetaChange::Users`], so every node adopts the same users in the same order.
//!
//! The document is pure data (no I/O); the node kernel ([`crate::kernel`]) adopts it.

use crate::bucket::{BucketProps, BucketType, Buckets, ClusterShape};
use crate::error::{ReplicationError, Result};
use crate::users::{UserTable, UsersChange};
use meridian_cluster::{Layout, Member, Props, Topology, rebalance};
use meridian_core::{DcId, NodeId};
use meridian_txn::{DirChange, KeyDirectory};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// One member of the cluster: identity, DC and the addresses clients and peers use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// The node's id.
    pub id: NodeId,
    /// Its name (`dc0-n0`, or the name in its config).
    pub name: String,
    /// Its DC.
    pub dc: DcId,
    /// The DC's name (as configured; `dc0`... in an embedded cluster).
    pub dc_name: String,
    /// Where peers reach it (absent for in-process clusters).
    pub peer: Option<SocketAddr>,
    /// Its RESP address, when known: the plaintext listener's, or the TLS one's when the
    /// node serves RESP over TLS only (what a plaintext client is told, as Redis does).
    pub resp: Option<SocketAddr>,
    /// Its HTTP address, when known.
    pub http: Option<SocketAddr>,
    /// Its RESP-over-TLS address (`resp.tls-port`), when it has one: what clients connected
    /// over TLS are told. Last and defaulted, so documents saved before TLS existed load.
    #[serde(default)]
    pub resp_tls: Option<SocketAddr>,
}

impl MemberRecord {
    /// The record of node `id` in DC `dc` of an in-process cluster (simulator, benchmarks,
    /// tests): named `n{id}` in `dc{dc}`, with no addresses.
    pub fn in_process(id: NodeId, dc: DcId) -> MemberRecord {
        MemberRecord {
            id,
            name: format!("n{}", id.0),
            dc,
            dc_name: format!("dc{}", dc.0),
            peer: None,
            resp: None,
            http: None,
            resp_tls: None,
        }
    }

    /// The RESP address to tell a client, by how it is connected (Redis 7's
    /// `getNodeClientPort`): over TLS, the TLS address when the node has one; otherwise, or
    /// when the node has no TLS listener, [`MemberRecord::resp`] (which names the TLS
    /// listener of a node without a plaintext one). `None` while no address is known.
    pub fn client_resp(&self, tls: bool) -> Option<SocketAddr> {
        match tls {
            true => self.resp_tls.or(self.resp),
            false => self.resp.or(self.resp_tls),
        }
    }

    /// The plaintext RESP address, `None` for a node serving RESP over TLS only (its `resp`
    /// is then its TLS address: two listeners cannot share one address) or unknown.
    pub fn plain_resp(&self) -> Option<SocketAddr> {
        self.resp.filter(|a| Some(*a) != self.resp_tls)
    }
}

/// A change to the cluster metadata, applied by the claimant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaChange {
    /// Add a node (its DC by name: an unknown name creates a DC). Partitions move to it.
    Join(MemberRecord),
    /// Remove a node; its partitions move to the others, which receive its data.
    Leave(NodeId),
    /// Create or replace a bucket.
    SetBucket {
        /// The bucket's name.
        name: String,
        /// Its properties.
        props: WireBucket,
    },
    /// Every node has handed off what it no longer owns under layout `epoch`: drop the
    /// previous layout and the members that left.
    HandoffComplete {
        /// The layout epoch whose handoff finished.
        epoch: u64,
    },
    /// Remove a bucket (not `default`): its keys take the `default` bucket's properties.
    /// Emptying it first is the caller's business (the S3 endpoint refuses a non-empty one).
    DropBucket {
        /// The bucket's name.
        name: String,
    },
    /// Change the transactional key directory (a batch of key moves starting, ending or
    /// given up); refused whole if any key's change does not fit.
    KeyDirectory(DirChange),
    /// Truncate buckets: every value of each written at or before `mark` (microseconds) is
    /// gone. A bucket's mark only moves forward.
    Truncate {
        /// The buckets (registered names).
        buckets: Vec<String>,
        /// The mark ([`crate::Node::truncate`] picks it above every member's clock).
        mark: u64,
    },
    /// Change the ACL users every node enforces (module [`crate::users`]).
    Users {
        /// The proposer's users as it runs with them: where the change starts from while
        /// the document has no users yet ([`ClusterMeta::acl`] `None`), else ignored.
        base: UserTable,
        /// The change.
        change: UsersChange,
    },
}

/// [`BucketProps`] in a form every serde format can carry (the TOML form is flattened, which
/// binary formats cannot encode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireBucket {
    /// The consistency model.
    pub bucket_type: BucketType,
    /// The quorum parameters.
    pub props: Props,
    /// The DC rule.
    pub dc_rule: Option<bool>,
    /// Extra copies of hot keys.
    #[serde(default)]
    pub extra_copies: Option<bool>,
    /// Timeline properties (documents written before timeline buckets existed lack them).
    #[serde(default)]
    pub timeline: crate::timeline::TimelineProps,
    /// Transaction properties.
    #[serde(default)]
    pub txn: meridian_txn::TxnProps,
    /// Whether the S3 endpoint owns the bucket (documents written before it lack it).
    #[serde(default)]
    pub s3: Option<bool>,
}

impl From<BucketProps> for WireBucket {
    fn from(b: BucketProps) -> Self {
        WireBucket {
            bucket_type: b.bucket_type,
            props: b.props,
            dc_rule: b.dc_rule,
            extra_copies: b.extra_copies,
            timeline: b.timeline,
            txn: b.txn,
            s3: b.s3,
        }
    }
}

impl From<WireBucket> for BucketProps {
    fn from(w: WireBucket) -> Self {
        BucketProps {
            bucket_type: w.bucket_type,
            props: w.props,
            dc_rule: w.dc_rule,
            extra_copies: w.extra_copies,
            timeline: w.timeline,
            txn: w.txn,
            s3: w.s3,
        }
    }
}

/// The cluster metadata document. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMeta {
    /// Bumped by every change; 0 for a node that has not joined yet.
    pub version: u64,
    /// The claimant that produced this version (breaks ties between equal versions).
    pub author: NodeId,
    /// The current layout: reads and writes are placed with it.
    pub layout: Layout,
    /// The layout before the last membership change, while its ownership handoff runs:
    /// reads also consult its owners, which may still hold data not yet handed off.
    pub previous: Option<Layout>,
    /// Every member of `layout` and `previous`, by id.
    pub members: Vec<MemberRecord>,
    /// The bucket registry (validated against the layout's shape).
    pub buckets: BTreeMap<String, WireBucket>,
    /// Transactional keys placed off their hash partition (empty: hash placement).
    #[serde(default)]
    pub key_directory: KeyDirectory,
    /// Bucket truncation marks (`FLUSHALL` in cluster mode), microseconds: every value of the
    /// bucket written at or before its mark is gone (module [`crate::truncation`]).
    #[serde(default)]
    pub truncated: BTreeMap<String, u64>,
    /// The ACL users every node enforces (module [`crate::users`]); `None` until the first
    /// `ACL SETUSER`/`DELUSER`/`LOAD` in cluster mode: each node then serves the users of
    /// its own configuration. Last, and defaulted, so documents saved before it still load.
    #[serde(default)]
    pub acl: Option<UserTable>,
}

impl ClusterMeta {
    /// Version 1 of a cluster: `layout`, its `members` (one record per node of the layout's
    /// topology) and the `buckets`. Every node built from the same configuration computes the
    /// same document.
    pub fn new(layout: Layout, members: Vec<MemberRecord>, buckets: &Buckets) -> Result<Self> {
        let mut members = members;
        members.sort_by_key(|m| m.id);
        for m in layout.topology().members() {
            if !members.iter().any(|r| r.id == m.id) {
                return Err(refused(format!("no member record for {}", m.id)));
            }
        }
        let author = claimant_of(&layout);
        Ok(ClusterMeta {
            version: 1,
            author,
            layout,
            previous: None,
            members,
            buckets: buckets
                .names()
                .map(|n| (n.to_owned(), (*buckets.get(n).expect("listed")).into()))
                .collect(),
            key_directory: KeyDirectory::new(),
            truncated: BTreeMap::new(),
            acl: None,
        })
    }

    /// The placeholder of a node started to join an existing cluster: version 0, so any
    /// member's document replaces it. `layout` and `members` describe what the node knows of
    /// the cluster (its configuration); it serves no client request until it is admitted.
    pub fn joining(layout: Layout, members: Vec<MemberRecord>, buckets: &Buckets) -> Result<Self> {
        let mut m = ClusterMeta::new(layout, members, buckets)?;
        m.version = 0;
        Ok(m)
    }

    /// The node that serializes changes: the lowest id of the current layout.
    pub fn claimant(&self) -> NodeId {
        claimant_of(&self.layout)
    }

    /// Whether this document should replace `other`.
    pub fn supersedes(&self, other: &ClusterMeta) -> bool {
        (self.version, self.author) > (other.version, other.author)
    }

    /// The record of `id`, if it is a member (of the current or the previous layout).
    pub fn member(&self, id: NodeId) -> Option<&MemberRecord> {
        self.members.iter().find(|m| m.id == id)
    }

    /// The validated bucket registry of this document.
    pub fn bucket_registry(&self) -> Result<Buckets> {
        Buckets::from_map(
            ClusterShape::of(&self.layout),
            self.buckets
                .iter()
                .map(|(n, w)| (n.clone(), BucketProps::from(*w)))
                .collect(),
        )
    }

    /// The next version after `change`, produced by claimant `author`. Pure: the caller
    /// publishes it.
    ///
    /// # Errors
    /// [`ReplicationError::MembershipRefused`] saying why (duplicate or unknown node, a
    /// handoff in progress, too few nodes left for the layout's N, a bucket that no longer
    /// fits); [`ReplicationError::InvalidBucket`] for a bad bucket.
    pub fn apply(&self, change: &MetaChange, author: NodeId) -> Result<ClusterMeta> {
        let mut next = self.clone();
        next.version = self.version + 1;
        next.author = author;
        match change {
            MetaChange::Join(record) => {
                self.no_handoff_running("join")?;
                if self.layout.topology().contains(record.id) {
                    return Err(refused(format!("{} is already a member", record.id)));
                }
                let mut record = record.clone();
                record.dc = self.dc_named(&record.dc_name);
                let mut topo: Vec<Member> = self.layout.topology().members().to_vec();
                topo.push(Member::new(record.id, record.dc));
                next.members.retain(|m| m.id != record.id);
                next.members.push(record);
                next.members.sort_by_key(|m| m.id);
                next.relayout(topo)?;
            }
            MetaChange::Leave(id) => {
                self.no_handoff_running("leave")?;
                if !self.layout.topology().contains(*id) {
                    return Err(refused(format!("{id} is not a member")));
                }
                let topo: Vec<Member> = self
                    .layout
                    .topology()
                    .members()
                    .iter()
                    .copied()
                    .filter(|m| m.id != *id)
                    .collect();
                next.relayout(topo)?;
            }
            MetaChange::SetBucket { name, props } => {
                let mut registry = self.bucket_registry()?;
                registry.set(name, (*props).into())?;
                next.buckets.insert(name.clone(), *props);
            }
            MetaChange::DropBucket { name } => {
                if name == crate::bucket::DEFAULT_BUCKET_NAME {
                    return Err(refused("the default bucket cannot be removed".into()));
                }
                if next.buckets.remove(name).is_none() {
                    return Err(refused(format!("no bucket named {name}")));
                }
            }
            MetaChange::Truncate { buckets, mark } => {
                if buckets.is_empty() {
                    return Err(refused("a truncation names at least one bucket".into()));
                }
                for name in buckets {
                    if !self.buckets.contains_key(name) {
                        return Err(refused(format!("no bucket named {name}")));
                    }
                    let m = next.truncated.entry(name.clone()).or_default();
                    *m = (*m).max(*mark);
                }
            }
            MetaChange::Users { base, change } => {
                // The first change starts from the proposer's users: every node served its
                // own configuration until now, and the proposer's is what its client saw.
                let from = self.acl.as_ref().unwrap_or(base);
                let users = from
                    .apply(change)
                    .map_err(|e| refused(format!("ACL users: {e}")))?;
                next.acl = Some(users);
            }
            MetaChange::KeyDirectory(change) => {
                let ring = self.layout.ring();
                if let DirChange::Begin(moves) = change
                    && let Some((k, to)) = moves.iter().find(|(_, to)| to.0 >= ring.q())
                {
                    return Err(refused(format!(
                        "key {} cannot move to {to}: the ring has {} partitions",
                        String::from_utf8_lossy(k),
                        ring.q()
                    )));
                }
                next.key_directory
                    .apply(change, |k| ring.partition_of(k))
                    .map_err(|e| refused(format!("key directory: {e}")))?;
            }
            MetaChange::HandoffComplete { epoch } => {
                if self.previous.is_none() || self.layout.epoch() != *epoch {
                    return Err(refused(format!(
                        "no handoff of layout epoch {epoch} is running (current epoch {}, handoff {})",
                        self.layout.epoch(),
                        if self.previous.is_some() {
                            "running"
                        } else {
                            "done"
                        }
                    )));
                }
                next.previous = None;
                let topo = next.layout.topology().clone();
                next.members.retain(|m| topo.contains(m.id));
            }
        }
        Ok(next)
    }

    fn no_handoff_running(&self, what: &str) -> Result<()> {
        match &self.previous {
            Some(_) => Err(refused(format!(
                "cannot {what} while the handoff of layout epoch {} is still running; retry when \
                 GET /cluster shows it done",
                self.layout.epoch()
            ))),
            None => Ok(()),
        }
    }

    /// The id of the DC called `name`: an existing member's, else the next free id.
    fn dc_named(&self, name: &str) -> DcId {
        self.members
            .iter()
            .find(|m| m.dc_name == name)
            .map(|m| m.dc)
            .unwrap_or_else(|| DcId(self.members.iter().map(|m| m.dc.0 + 1).max().unwrap_or(0)))
    }

    /// Rebalances onto `members` (few moves), keeping the old layout as `previous`, and checks
    /// that every bucket still fits the new shape.
    fn relayout(&mut self, members: Vec<Member>) -> Result<()> {
        let topo = Topology::new(members).map_err(|e| refused(format!("topology: {e}")))?;
        let layout = rebalance(&self.layout, &topo).map_err(|e| refused(e.to_string()))?;
        let shape = ClusterShape::of(&layout);
        for (name, w) in &self.buckets {
            BucketProps::from(*w).validate(name, shape).map_err(|e| {
                refused(format!(
                    "after the change, bucket {name} would not fit: {e}"
                ))
            })?;
        }
        self.previous = Some(std::mem::replace(&mut self.layout, layout));
        Ok(())
    }
}

fn claimant_of(layout: &Layout) -> NodeId {
    layout
        .topology()
        .members()
        .iter()
        .map(|m| m.id)
        .min()
        .expect("a layout has members")
}

fn refused(reason: String) -> ReplicationError {
    ReplicationError::MembershipRefused { reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_cluster::{Quorum, Ring, claim};

    fn record(id: u32, dc: u32) -> MemberRecord {
        MemberRecord::in_process(NodeId(id), DcId(dc))
    }

    /// 2 DCs × 2 nodes, Q = 64, N = 3.
    fn meta() -> ClusterMeta {
        let records: Vec<_> = (1..=4).map(|i| record(i, (i - 1) / 2)).collect();
        let topo = Topology::new(records.iter().map(|r| Member::new(r.id, r.dc))).unwrap();
        let layout = claim(&topo, Ring::new(64).unwrap(), 3).unwrap();
        let buckets = Buckets::new(ClusterShape::of(&layout)).unwrap();
        ClusterMeta::new(layout, records, &buckets).unwrap()
    }

    #[test]
    fn join_moves_few_partitions_and_keeps_the_previous_layout_until_handoff_completes() {
        let m = meta();
        assert_eq!((m.version, m.claimant()), (1, NodeId(1)));
        let mut joiner = record(5, 9);
        joiner.dc_name = "dc1".into();
        let j = m.apply(&MetaChange::Join(joiner), NodeId(1)).unwrap();
        assert_eq!(j.version, 2);
        assert_eq!(j.member(NodeId(5)).unwrap().dc, DcId(1), "DC found by name");
        assert_eq!(j.layout.epoch(), m.layout.epoch() + 1);
        assert_eq!(j.previous.as_ref(), Some(&m.layout));
        let moved = meridian_cluster::diff(&m.layout, &j.layout).len();
        assert!(moved > 0 && moved <= 64 * 3 / 5 + 4, "moved {moved}");
        assert!(j.supersedes(&m) && !m.supersedes(&j));

        // One change at a time.
        let err = j
            .apply(&MetaChange::Leave(NodeId(2)), NodeId(1))
            .unwrap_err();
        assert_eq!(err.code(), "membership_refused");
        assert!(err.to_string().contains("handoff"), "{err}");
        // A stale completion is refused; the right one clears `previous`.
        assert!(
            j.apply(&MetaChange::HandoffComplete { epoch: 1 }, NodeId(1))
                .is_err()
        );
        let done = j
            .apply(
                &MetaChange::HandoffComplete {
                    epoch: j.layout.epoch(),
                },
                NodeId(1),
            )
            .unwrap();
        assert!(done.previous.is_none());
        assert_eq!(done.members.len(), 5);
    }

    #[test]
    fn a_truncation_mark_only_moves_forward_and_names_known_buckets() {
        let m = meta();
        let t = |buckets: &[&str], mark| MetaChange::Truncate {
            buckets: buckets.iter().map(|b| b.to_string()).collect(),
            mark,
        };
        let a = m.apply(&t(&["default"], 50), NodeId(1)).unwrap();
        assert_eq!(a.truncated.get("default"), Some(&50));
        let b = a.apply(&t(&["default"], 20), NodeId(1)).unwrap();
        assert_eq!(b.truncated.get("default"), Some(&50), "a late, lower mark");
        let err = m.apply(&t(&["nope"], 5), NodeId(1)).unwrap_err();
        assert!(err.to_string().contains("no bucket named nope"), "{err}");
        assert!(m.apply(&t(&[], 5), NodeId(1)).is_err());
        // The document carries its marks over the wire.
        let bytes = postcard::to_allocvec(&b).unwrap();
        assert_eq!(postcard::from_bytes::<ClusterMeta>(&bytes).unwrap(), b);
    }

    #[test]
    fn leave_drops_the_member_once_handoff_completes() {
        let m = meta();
        let l = m.apply(&MetaChange::Leave(NodeId(1)), NodeId(1)).unwrap();
        assert!(!l.layout.topology().contains(NodeId(1)));
        assert_eq!(
            l.claimant(),
            NodeId(2),
            "the claimant moves with the layout"
        );
        assert!(
            l.member(NodeId(1)).is_some(),
            "still told about the handoff"
        );
        let done = l
            .apply(
                &MetaChange::HandoffComplete {
                    epoch: l.layout.epoch(),
                },
                NodeId(2),
            )
            .unwrap();
        assert!(done.member(NodeId(1)).is_none());
    }

    #[test]
    fn bad_changes_are_refused_with_the_reason() {
        let m = meta();
        let dup = m
            .apply(&MetaChange::Join(record(2, 0)), NodeId(1))
            .unwrap_err();
        assert!(dup.to_string().contains("already a member"), "{dup}");
        let unknown = m
            .apply(&MetaChange::Leave(NodeId(9)), NodeId(1))
            .unwrap_err();
        assert!(unknown.to_string().contains("not a member"), "{unknown}");
        // 4 nodes, N = 3: one may leave, then nothing more.
        let three = m
            .apply(&MetaChange::Leave(NodeId(4)), NodeId(1))
            .and_then(|l| {
                l.apply(
                    &MetaChange::HandoffComplete {
                        epoch: l.layout.epoch(),
                    },
                    NodeId(1),
                )
            })
            .unwrap();
        let too_few = three
            .apply(&MetaChange::Leave(NodeId(3)), NodeId(1))
            .unwrap_err();
        assert_eq!(too_few.code(), "membership_refused");
        let props = Props {
            r: Some(Quorum::Count(5)),
            ..Props::default()
        };
        let bad = m
            .apply(
                &MetaChange::SetBucket {
                    name: "b".into(),
                    props: WireBucket {
                        bucket_type: BucketType::Eventual,
                        props,
                        dc_rule: None,
                        extra_copies: None,
                        timeline: Default::default(),
                        txn: Default::default(),
                        s3: None,
                    },
                },
                NodeId(1),
            )
            .unwrap_err();
        assert_eq!(bad.code(), "invalid_bucket");
    }

    fn users(pairs: &[(&str, &str)]) -> UserTable {
        pairs
            .iter()
            .map(|(n, r)| (n.to_string(), r.to_string()))
            .collect::<BTreeMap<_, _>>()
            .into()
    }

    #[test]
    fn the_first_users_change_starts_from_the_proposers_users_and_later_ones_ignore_theirs() {
        let m = meta();
        assert_eq!(m.acl, None, "a cluster starts with each node's own users");
        let base = users(&[("default", "on nopass ~* &* +@all"), ("ops", "on")]);
        let set = |name: &str, base: &UserTable| MetaChange::Users {
            base: base.clone(),
            change: UsersChange::Set {
                name: name.into(),
                rules: "on #ab ~app:* +get".into(),
            },
        };
        let a = m.apply(&set("alice", &base), NodeId(1)).unwrap();
        let names: Vec<_> = a.acl.as_ref().unwrap().users().keys().cloned().collect();
        assert_eq!(names, ["alice", "default", "ops"]);
        // Another node's stale view of the users does not matter once the document has them.
        let b = a
            .apply(&set("bob", &users(&[("default", "off")])), NodeId(1))
            .unwrap();
        let names: Vec<_> = b.acl.as_ref().unwrap().users().keys().cloned().collect();
        assert_eq!(names, ["alice", "bob", "default", "ops"]);
        // The document carries its users over the wire and to disk; one saved before users
        // existed still loads.
        let bytes = postcard::to_allocvec(&b).unwrap();
        assert_eq!(postcard::from_bytes::<ClusterMeta>(&bytes).unwrap(), b);
        let json = serde_json::to_value(&b).unwrap();
        assert_eq!(
            serde_json::from_value::<ClusterMeta>(json.clone()).unwrap(),
            b
        );
        let mut old = json;
        old.as_object_mut().unwrap().remove("acl");
        assert_eq!(
            serde_json::from_value::<ClusterMeta>(old).unwrap().acl,
            None
        );
    }

    /// Attack: a peer proposing to delete `default`, or a base past the bounds, is refused
    /// with the reason, and nothing changes.
    #[test]
    fn bad_users_changes_are_refused_with_the_reason() {
        let m = meta();
        let base = users(&[("default", "on")]);
        let del = MetaChange::Users {
            base: base.clone(),
            change: UsersChange::Delete {
                names: vec!["default".into()],
            },
        };
        let err = m.apply(&del, NodeId(1)).unwrap_err();
        assert_eq!(err.code(), "membership_refused");
        assert!(
            err.to_string()
                .contains("The 'default' user cannot be removed"),
            "{err}"
        );
        let huge = MetaChange::Users {
            base: (0..=crate::users::MAX_USERS)
                .map(|i| (format!("u{i}"), "on".to_string()))
                .chain([("default".to_string(), "on".to_string())])
                .collect::<BTreeMap<_, _>>()
                .into(),
            change: UsersChange::Delete { names: vec![] },
        };
        let err = m.apply(&huge, NodeId(1)).unwrap_err();
        assert!(err.to_string().contains("ACL users: at most"), "{err}");
        let nameless = MetaChange::Users {
            base,
            change: UsersChange::Set {
                name: "a b".into(),
                rules: "on".into(),
            },
        };
        assert!(m.apply(&nameless, NodeId(1)).is_err());
    }

    #[test]
    fn a_client_is_told_the_address_of_its_own_connection_type() {
        let a = |s: &str| Some(s.parse::<SocketAddr>().unwrap());
        let mut r = record(1, 0);
        assert_eq!((r.client_resp(false), r.client_resp(true)), (None, None));
        r.resp = a("10.0.0.1:6379");
        assert_eq!(
            r.client_resp(true),
            a("10.0.0.1:6379"),
            "no TLS port: plaintext"
        );
        r.resp_tls = a("10.0.0.1:6380");
        assert_eq!(r.client_resp(false), a("10.0.0.1:6379"));
        assert_eq!(r.client_resp(true), a("10.0.0.1:6380"));
        assert_eq!(r.plain_resp(), a("10.0.0.1:6379"));
        // TLS only: `resp` names the TLS listener, which plaintext clients are told too.
        r.resp = r.resp_tls;
        assert_eq!(r.client_resp(false), a("10.0.0.1:6380"));
        assert_eq!(r.plain_resp(), None);
        r.resp = None;
        assert_eq!(r.client_resp(false), a("10.0.0.1:6380"));
    }

    #[test]
    fn the_document_round_trips_through_postcard() {
        let mut joiner = record(5, 1);
        joiner.resp_tls = Some("10.0.0.5:6380".parse().unwrap());
        let m = meta().apply(&MetaChange::Join(joiner), NodeId(1)).unwrap();
        let bytes = postcard::to_allocvec(&m).unwrap();
        assert_eq!(postcard::from_bytes::<ClusterMeta>(&bytes).unwrap(), m);
    }
}
