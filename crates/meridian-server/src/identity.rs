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

use crate::error::{Error, Result};
use meridian_core::NodeId;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The identity file's name inside the data directory.
pub const IDENTITY_FILE: &str = "meridian-identity";

/// What the identity file records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The node the directory belongs to.
    pub node: NodeId,
    /// The incarnation of the node's current (or last) run.
    pub incarnation: u32,
}

impl Identity {
    fn encode(&self) -> String {
        format!(
            "# Meridian cluster node identity: do not edit, delete or copy to another node.\n\
             node_id = {}\nincarnation = {}\n",
            self.node.0, self.incarnation
        )
    }

    fn decode(text: &str) -> std::result::Result<Identity, String> {
        let (mut node, mut incarnation) = (None, None);
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("malformed line '{line}'"))?;
            let v: u32 = v
                .trim()
                .parse()
                .map_err(|_| format!("malformed value in '{line}'"))?;
            match k.trim() {
                "node_id" => node = Some(NodeId(v)),
                "incarnation" => incarnation = Some(v),
                other => return Err(format!("unknown field '{other}'")),
            }
        }
        match (node, incarnation) {
            (Some(node), Some(incarnation)) => Ok(Identity { node, incarnation }),
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
    let id = Identity { node, incarnation };
    write_atomically(dir, &id.encode()).map_err(|source| Error::Io {
        what: format!("writing {}", path_in(dir).display()),
        source,
    })?;
    Ok(id)
}

/// Writes `text` as the identity file: temporary file, fsync, rename, fsync the directory.
fn write_atomically(dir: &Path, text: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!("{IDENTITY_FILE}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path_in(dir))?;
    std::fs::File::open(dir)?.sync_all()
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
}
