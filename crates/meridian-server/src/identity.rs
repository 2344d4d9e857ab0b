//! The identity of a durable cluster node's data directory: which node it belongs to and the
//! node's current **incarnation**, in the small file [`IDENTITY_FILE`] next to the engine's
//! files.
//!
//! ## Why every start takes a new incarnation
//!
//! A dot `(partition, node, incarnation, counter)` must never be issued twice (see
//! `meridian_replication::node`): a peer that already holds a reissued dot treats the new
//! write as one it has seen and silently drops it. A primary issues the next counter after the
//! highest one in its **stored** object's clock. A durable node keeps its objects across a
//! restart, so with `fsync = always` it could in principle keep its incarnation; but under
//! `everysec`/`never` the last writes before a crash may be lost from its disk while their
//! dots already reached other replicas, and reusing the incarnation would then reissue them.
//! A fresh incarnation on every start is safe in every case: its counters start over in a
//! dot space nobody has seen, and the node's older dots stay in the stored clocks, where they
//! keep describing what they always did. The cost is one more entry per restart in the
//! clocks of the keys the node coordinates afterwards.
//!
//! ## How
//!
//! [`claim`] runs after the engine is open (fjall's lock keeps a second process off the
//! directory) and before the node serves anything:
//! - the file is read; a file of another node id is refused (each node needs its own data
//!   directory), and so is a directory that holds data but no identity file (it was not
//!   written by a cluster node, e.g. a single node's keyspace);
//! - the new incarnation is `max(previous + 1, seconds since the epoch)`: strictly increasing
//!   across starts of one directory whatever the clock does, and, for a fresh directory
//!   (including a wiped one that replaces a node with the same id, whose old dots may still
//!   live on other replicas), the same clock-based choice an in-memory cluster node makes;
//! - it is written atomically and durably (temporary file, fsync, rename, fsync of the
//!   directory), so a crash at any point leaves the old or the new identity, never a torn
//!   one, and the incarnation in use is always on disk before its first dot is issued.
//!
//! ## Placement scheme
//!
//! The file also records how the directory's keys were placed on the ring
//! ([`PLACEMENT`]: Redis Cluster hash slots, `crc16-slots`). Earlier versions placed keys by
//! an xxh3 hash and wrote no such line; their partitions hold other keys, so a node reading
//! such a directory would serve, hand off and repair the wrong partitions. [`claim`] refuses
//! a directory that holds data under an identity without the marker (what it is, why, what
//! to do) instead of misreading it; an empty one is simply claimed with the current scheme.
//!
//! ## Cluster metadata
//!
//! A durable node also keeps the last cluster metadata it adopted (layout, members, buckets)
//! in [`META_FILE`] (JSON), written the same atomic way on every adoption ([`save_meta`]). On a
//! restart it starts from that document when it is newer than what its configuration
//! describes ([`load_meta`]), so a node that was down during a join or leave does not serve
//! with a layout the cluster has left behind until a peer tells it.

use crate::error::{Error, Result};
use meridian_core::NodeId;
use meridian_replication::ClusterMeta;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The identity file's name inside the data directory.
pub const IDENTITY_FILE: &str = "meridian-identity";

/// The placement scheme this version writes and accepts: keys placed by their Redis Cluster
/// hash slot (`meridian_cluster::slot_of`).
pub const PLACEMENT: &str = "crc16-slots";

/// The cluster-metadata file's name inside the data directory.
pub const META_FILE: &str = "meridian-cluster-meta";

/// What the identity file records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The node the directory belongs to.
    pub node: NodeId,
    /// The incarnation of the node's current (or last) run.
    pub incarnation: u32,
    /// The placement scheme the directory's keys were placed with (`None`: a file written
    /// before the marker existed, i.e. the old xxh3 ring).
    pub placement: Option<String>,
}

impl Identity {
    fn encode(&self) -> String {
        format!(
            "# Meridian cluster node identity: do not edit, delete or copy to another node.\n\
             node_id = {}\nincarnation = {}\nplacement = {}\n",
            self.node.0,
            self.incarnation,
            self.placement.as_deref().unwrap_or(PLACEMENT)
        )
    }

    fn decode(text: &str) -> std::result::Result<Identity, String> {
        let (mut node, mut incarnation, mut placement) = (None, None, None);
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("malformed line '{line}'"))?;
            let number = || {
                v.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("malformed value in '{line}'"))
            };
            match k.trim() {
                "node_id" => node = Some(NodeId(number()?)),
                "incarnation" => incarnation = Some(number()?),
                "placement" => placement = Some(v.trim().to_owned()),
                other => return Err(format!("unknown field '{other}'")),
            }
        }
        match (node, incarnation) {
            (Some(node), Some(incarnation)) => Ok(Identity {
                node,
                incarnation,
                placement,
            }),
            _ => Err("node_id or incarnation missing".into()),
        }
    }
}

/// The identity file of `dir`.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(IDENTITY_FILE)
}

/// Reads `dir`'s identity, `None` when the file does not exist.
pub fn read(dir: &Path) -> Result<Option<Identity>> {
    let path = path_in(dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => Identity::decode(&text).map(Some).map_err(|e| {
            Error::Config(format!(
                "the node identity file {} is corrupt ({e}); it must not be edited",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io {
            what: format!("reading {}", path.display()),
            source,
        }),
    }
}

/// Claims the next incarnation of node `node` in `dir` (see the module docs): checks the
/// directory belongs to `node` (`has_data`: the engine already holds keys), persists the new
/// identity durably and returns it. `now_secs` is the wall clock in seconds since the epoch.
pub fn claim(dir: &Path, node: NodeId, has_data: bool, now_secs: u64) -> Result<Identity> {
    let previous = read(dir)?;
    let clock = u32::try_from(now_secs).unwrap_or(u32::MAX).max(1);
    let incarnation = match previous {
        Some(p) if p.node != node => {
            return Err(Error::Config(format!(
                "storage.data_dir {} belongs to node {} (see {}), not to cluster.id = {}: \
                 give each node its own data directory",
                dir.display(),
                p.node.0,
                path_in(dir).display(),
                node.0
            )));
        }
        Some(p) if has_data && p.placement.as_deref() != Some(PLACEMENT) => {
            return Err(Error::Config(format!(
                "storage.data_dir {} holds data placed by {} (see {}), but this version \
                 places keys by Redis Cluster hash slots ({PLACEMENT}): its partitions hold \
                 other keys, so serving it would misplace them. Start this node on an empty \
                 data directory (it receives its partitions from its replicas), or export \
                 the keys with the older version and write them again",
                dir.display(),
                match &p.placement {
                    Some(other) => format!("the '{other}' scheme"),
                    None => "the old xxh3 ring (no placement line)".to_owned(),
                },
                path_in(dir).display(),
            )));
        }
        Some(p) => p.incarnation.checked_add(1).ok_or_else(|| {
            Error::Config(format!(
                "node {} has used every incarnation in {}",
                node.0,
                dir.display()
            ))
        })?,
        None if has_data => {
            return Err(Error::Config(format!(
                "storage.data_dir {} holds data but no {IDENTITY_FILE} file: it was not \
                 written by a cluster node; give this node an empty data directory",
                dir.display()
            )));
        }
        None => 0,
    }
    .max(clock);
    let id = Identity {
        node,
        incarnation,
        placement: Some(PLACEMENT.to_owned()),
    };
    write_atomically(dir, &id.encode()).map_err(|source| Error::Io {
        what: format!("writing {}", path_in(dir).display()),
        source,
    })?;
    Ok(id)
}

/// Writes `bytes` as file `name` of `dir`: temporary file, fsync, rename, fsync the directory.
fn write_file_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `text` as the identity file.
fn write_atomically(dir: &Path, text: &str) -> std::io::Result<()> {
    write_file_atomically(dir, IDENTITY_FILE, text.as_bytes())
}

/// Saves `meta` as the data directory's cluster metadata, atomically and durably.
pub fn save_meta(dir: &Path, meta: &ClusterMeta) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(meta)
        .map_err(|e| Error::Config(format!("encoding the cluster metadata: {e}")))?;
    write_file_atomically(dir, META_FILE, &bytes).map_err(|source| Error::Io {
        what: format!("writing {}", dir.join(META_FILE).display()),
        source,
    })
}

/// The cluster metadata saved in `dir`, if any.
///
/// # Errors
/// An unreadable file, or one that does not decode (with what to do about it).
pub fn load_meta(dir: &Path) -> Result<Option<ClusterMeta>> {
    let path = dir.join(META_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Io {
                what: format!("reading {}", path.display()),
                source,
            });
        }
    };
    let bad = |why: String| {
        Error::Config(format!(
            "{} is not valid cluster metadata ({why}); remove it to start from the \
             configuration (peers send the current metadata)",
            path.display()
        ))
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_directory_starts_at_the_clock_and_each_claim_increases() {
        let dir = tempfile::tempdir().unwrap();
        let first = claim(dir.path(), NodeId(3), false, 1_000).unwrap();
        assert_eq!(first.incarnation, 1_000);
        assert_eq!(read(dir.path()).unwrap(), Some(first));
        // A clock that went backwards (or stands still) still gives a new incarnation.
        let second = claim(dir.path(), NodeId(3), true, 10).unwrap();
        assert_eq!(second.incarnation, 1_001);
        let third = claim(dir.path(), NodeId(3), true, 5_000).unwrap();
        assert_eq!(third.incarnation, 5_000);
        assert_eq!(read(dir.path()).unwrap(), Some(third));
        assert!(!dir.path().join(format!("{IDENTITY_FILE}.tmp")).exists());
        // With a zero clock a fresh directory still starts at 1.
        let fresh = tempfile::tempdir().unwrap();
        assert_eq!(
            claim(fresh.path(), NodeId(1), false, 0)
                .unwrap()
                .incarnation,
            1
        );
    }

    #[test]
    fn another_nodes_directory_and_foreign_data_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        claim(dir.path(), NodeId(1), false, 7).unwrap();
        let e = claim(dir.path(), NodeId(2), true, 8)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("belongs to node 1") && e.contains("cluster.id = 2"),
            "{e}"
        );
        assert_eq!(
            read(dir.path()).unwrap().unwrap().incarnation,
            7,
            "untouched"
        );

        let other = tempfile::tempdir().unwrap();
        let e = claim(other.path(), NodeId(1), true, 8)
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds data but no"), "{e}");

        std::fs::write(path_in(other.path()), "node_id = x\n").unwrap();
        let e = read(other.path()).unwrap_err().to_string();
        assert!(e.contains("corrupt"), "{e}");
    }

    #[test]
    fn a_directory_of_the_old_xxh3_ring_is_refused_not_misread() {
        let dir = tempfile::tempdir().unwrap();
        let id = claim(dir.path(), NodeId(1), false, 7).unwrap();
        assert_eq!(id.placement.as_deref(), Some(PLACEMENT));
        let text = std::fs::read_to_string(path_in(dir.path())).unwrap();
        assert!(text.contains("placement = crc16-slots"), "{text}");

        // An identity file as the previous version wrote it: no placement line.
        let old = "# Meridian cluster node identity: do not edit, delete or copy to another \
                   node.\nnode_id = 1\nincarnation = 9\n";
        std::fs::write(path_in(dir.path()), old).unwrap();
        let e = claim(dir.path(), NodeId(1), true, 10)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("old xxh3 ring")
                && e.contains("hash slots")
                && e.contains("empty data directory"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(path_in(dir.path())).unwrap(), old);
        // Another scheme's name is refused too.
        std::fs::write(path_in(dir.path()), format!("{old}placement = other\n")).unwrap();
        let e = claim(dir.path(), NodeId(1), true, 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("'other' scheme"), "{e}");
        // Without data nothing can be misread: the directory is claimed with the marker.
        std::fs::write(path_in(dir.path()), old).unwrap();
        let id = claim(dir.path(), NodeId(1), false, 10).unwrap();
        assert_eq!(
            (id.incarnation, id.placement.as_deref()),
            (10, Some(PLACEMENT))
        );
        assert_eq!(read(dir.path()).unwrap(), Some(id));
    }

    #[test]
    fn cluster_metadata_round_trips_and_a_bad_file_says_what_to_do() {
        use meridian_cluster::{Member, Ring, Topology, claim as place};
        use meridian_replication::{Buckets, ClusterShape, MemberRecord, MetaChange};
        let dir = tempfile::tempdir().unwrap();
        assert!(load_meta(dir.path()).unwrap().is_none());
        let records: Vec<MemberRecord> = (1..=4)
            .map(|i| MemberRecord {
                id: NodeId(i),
                name: format!("n{i}"),
                dc: meridian_core::DcId((i - 1) / 2),
                dc_name: format!("dc{}", (i - 1) / 2),
                peer: Some(format!("127.0.0.{i}:7000").parse().unwrap()),
                resp: None,
                http: None,
                resp_tls: Some(format!("127.0.0.{i}:6380").parse().unwrap()),
            })
            .collect();
        let topo = Topology::new(records.iter().map(|r| Member::new(r.id, r.dc))).unwrap();
        let layout = place(&topo, Ring::new(64).unwrap(), 3).unwrap();
        let buckets = Buckets::new(ClusterShape::of(&layout)).unwrap();
        let meta = ClusterMeta::new(layout, records, &buckets)
            .unwrap()
            .apply(&MetaChange::Leave(NodeId(4)), NodeId(1))
            .unwrap();
        save_meta(dir.path(), &meta).unwrap();
        assert_eq!(load_meta(dir.path()).unwrap(), Some(meta.clone()));
        // Saving again replaces it atomically.
        save_meta(dir.path(), &meta).unwrap();
        assert_eq!(load_meta(dir.path()).unwrap(), Some(meta.clone()));

        // A file saved before members had TLS addresses loads, without them.
        let mut old: serde_json::Value = serde_json::to_value(&meta).unwrap();
        for m in old["members"].as_array_mut().unwrap() {
            m.as_object_mut().unwrap().remove("resp_tls");
        }
        std::fs::write(dir.path().join(META_FILE), old.to_string()).unwrap();
        let loaded = load_meta(dir.path()).unwrap().unwrap();
        assert!(loaded.members.iter().all(|m| m.resp_tls.is_none()));
        assert_eq!(loaded.layout, meta.layout);

        std::fs::write(dir.path().join(META_FILE), b"{ not json").unwrap();
        let e = load_meta(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("not valid cluster metadata") && e.contains("remove it"),
            "{e}"
        );
    }
}
