//! Moving a key between partition leaders, Clock-SI safe (spec `repartitioning.md` §6): the
//! leader-side state of keys being moved ([`MoveTable`]), what ships ([`Exported`]), and the
//! admission rules a leader applies before it reads or certifies a key.
//!
//! The protocol for key k from p to q (directory entry epochs `e < e'`):
//! 1. The directory says `Moving{p → q, e}`; p **freezes** k ([`MoveTable::freeze`]): new
//!    prepares and single-step commits touching k abort with the retryable
//!    `Abort::KeyMoving` (before certification, so they leave nothing), and p waits until no
//!    mark on k remains ([`export_ready`]). Reads go on: k no longer changes at p.
//! 2. p takes `export_ts` from its leader clock ([`MoveTable::exported`]) and ships every
//!    version of k a live snapshot can read (`TxnStore::export_key`) with their commit
//!    timestamps. From then on p refuses reads of k at snapshots `≥ export_ts` (KeyMoving).
//!    q installs the versions (`TxnStore::import_key`) and raises its leader clock to
//!    [`Exported::clock_floor`] `= max(export_ts, max commit_ts)`, so every later timestamp
//!    q issues is above it.
//! 3. The directory says `At{q, e'}`; p answers `WrongPartition{hint: q, dir_epoch}` for k
//!    ([`MoveTable::moved`]) and deletes its versions after a grace period.
//!
//! **Why snapshots stay consistent.** For any snapshot s, a read of k at p and a read at q
//! answer the same version: both hold the same versions with the same timestamps, and no
//! commit of k happens at p after the freeze. The spec's clock rule (`clock_q ≥ max
//! commit_ts + 1`) is not enough on its own: p may have served a read of k at a snapshot s
//! far above k's last commit (R1 only needs `clock_p > s`), and if q's clock lagged, a later
//! commit of k at q could get a timestamp below s — the version that read missed. Raising
//! q's clock to `export_ts` closes it: every read p served before the export had
//! `s < clock_p ≤ export_ts`, p serves none at `s ≥ export_ts` afterwards, and every commit
//! at q comes after the install, so its timestamp is above `export_ts`. (Under the oracle,
//! `export_ts` must be an oracle timestamp taken after the drain, for the same reason.)

use crate::leader::{LeaderClock, Mark};
use crate::placement::KeyDirectory;
use crate::store::KeyVersions;
use crate::types::{Abort, Result, TxnError};
use bytes::Bytes;
use meridian_core::{PartitionId, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a move ships from p to q.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exported {
    /// The key's versions.
    pub versions: KeyVersions,
    /// p's clock after the drain: above every snapshot p served k at and every commit of k.
    pub export_ts: Timestamp,
}

impl Exported {
    /// The value q's leader clock must reach before q serves k: every timestamp q issues
    /// afterwards is above it (`LeaderClock::observe`).
    pub fn clock_floor(&self) -> Timestamp {
        self.versions
            .max_commit_ts()
            .map_or(self.export_ts, |t| t.max(self.export_ts))
    }

    /// Raises `clock` to [`Exported::clock_floor`] (q, at install).
    pub fn advance(&self, clock: &mut LeaderClock) {
        clock.observe(self.clock_floor());
    }
}

/// Whether p may export k: no transaction holds a mark on it (prepared writes, and watches,
/// which certify against it, have drained).
pub fn export_ready(mark: Option<&Mark>) -> bool {
    mark.is_none()
}

/// A key's state at a leader that is moving it away (logged by the serving code, so a
/// restarted source still refuses what it refused: `TxnStore::log_key_move`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyMove {
    /// Step 1–2: frozen for the move of directory epoch `epoch` to `to`; `export_ts` once
    /// the versions were exported.
    Frozen {
        /// The destination.
        to: PartitionId,
        /// The `Moving` entry's epoch.
        epoch: u64,
        /// Set at export.
        export_ts: Option<Timestamp>,
    },
    /// Step 3: the key lives at `to` since directory epoch `dir_epoch`; its versions here go
    /// at `delete_at_us` (the grace period for reads already past their checks).
    Gone {
        /// The destination.
        to: PartitionId,
        /// The `At` entry's epoch.
        dir_epoch: u64,
        /// When the local versions may be deleted, µs.
        delete_at_us: u64,
        /// Whether they were.
        deleted: bool,
    },
}

/// The keys a leader is moving away, or has moved away recently (module docs).
#[derive(Debug, Clone, Default)]
pub struct MoveTable {
    keys: BTreeMap<Bytes, KeyMove>,
}

fn moving(key: &[u8]) -> TxnError {
    Abort::KeyMoving(key.to_vec()).into()
}

impl MoveTable {
    /// An empty table.
    pub fn new() -> MoveTable {
        MoveTable::default()
    }

    /// A table holding the logged states (recovery after a restart).
    pub fn restore(entries: impl IntoIterator<Item = (Bytes, KeyMove)>) -> MoveTable {
        MoveTable {
            keys: entries.into_iter().collect(),
        }
    }

    /// `key`'s state, if it is being moved away or was.
    pub fn get(&self, key: &[u8]) -> Option<&KeyMove> {
        self.keys.get(key)
    }

    /// Whether nothing is being moved.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether a prepare or a single-step commit may certify `key` here: not while it moves
    /// (`KeyMoving`), not once it left (`WrongPartition`).
    pub fn admit_write(&self, key: &[u8]) -> Result<()> {
        match self.keys.get(key) {
            None => Ok(()),
            Some(KeyMove::Frozen { .. }) => Err(moving(key)),
            Some(&KeyMove::Gone { to, dir_epoch, .. }) => Err(TxnError::WrongPartition {
                hint: to,
                dir_epoch,
            }),
        }
    }

    /// Whether a read of `key` at `snap` may be served here: frozen keys are read below
    /// their `export_ts` only (`KeyMoving` above), keys that left are not (`WrongPartition`).
    pub fn admit_read(&self, key: &[u8], snap: Timestamp) -> Result<()> {
        match self.keys.get(key) {
            Some(KeyMove::Frozen {
                export_ts: Some(e), ..
            }) if snap >= *e => Err(moving(key)),
            None | Some(KeyMove::Frozen { .. }) => Ok(()),
            Some(&KeyMove::Gone { to, dir_epoch, .. }) => Err(TxnError::WrongPartition {
                hint: to,
                dir_epoch,
            }),
        }
    }

    /// Step 1: freezes `key` for the move of directory epoch `epoch` to `to` (idempotent for
    /// the same epoch; a key that left is refused: it is not here).
    pub fn freeze(&mut self, key: &[u8], to: PartitionId, epoch: u64) -> Result<()> {
        match self.keys.get(key) {
            Some(KeyMove::Frozen { epoch: e, .. }) if *e == epoch => Ok(()),
            Some(KeyMove::Frozen { epoch: e, .. }) => Err(TxnError::BadRequest(format!(
                "key {} is frozen for the move of epoch {e}, not {epoch}",
                String::from_utf8_lossy(key)
            ))),
            Some(KeyMove::Gone { .. }) => Err(TxnError::BadRequest(format!(
                "key {} has left this leader",
                String::from_utf8_lossy(key)
            ))),
            None => {
                self.keys.insert(
                    Bytes::copy_from_slice(key),
                    KeyMove::Frozen {
                        to,
                        epoch,
                        export_ts: None,
                    },
                );
                Ok(())
            }
        }
    }

    /// Step 2 at p: records the export timestamp `ts` (a fresh tick of p's clock, taken after
    /// the drain). A repeated export keeps the larger one.
    pub fn exported(&mut self, key: &[u8], epoch: u64, ts: Timestamp) -> Result<Timestamp> {
        match self.keys.get_mut(key) {
            Some(KeyMove::Frozen {
                epoch: e,
                export_ts,
                ..
            }) if *e == epoch => {
                let t = export_ts.map_or(ts, |old| old.max(ts));
                *export_ts = Some(t);
                Ok(t)
            }
            _ => Err(TxnError::BadRequest(format!(
                "key {} is not frozen for the move of epoch {epoch}",
                String::from_utf8_lossy(key)
            ))),
        }
    }

    /// Step 3 at p: the key lives at its destination since directory epoch `dir_epoch`; its
    /// versions here may go at `now_us + grace_us`.
    pub fn moved(
        &mut self,
        key: &[u8],
        epoch: u64,
        dir_epoch: u64,
        now_us: u64,
        grace_us: u64,
    ) -> Result<()> {
        match self.keys.get(key).copied() {
            Some(KeyMove::Frozen { to, epoch: e, .. }) if e == epoch => {
                self.keys.insert(
                    Bytes::copy_from_slice(key),
                    KeyMove::Gone {
                        to,
                        dir_epoch,
                        delete_at_us: now_us.saturating_add(grace_us),
                        deleted: false,
                    },
                );
                Ok(())
            }
            Some(KeyMove::Gone { .. }) => Ok(()),
            _ => Err(TxnError::BadRequest(format!(
                "key {} is not frozen for the move of epoch {epoch}",
                String::from_utf8_lossy(key)
            ))),
        }
    }

    /// A cancelled move: `key` is served here again.
    pub fn unfreeze(&mut self, key: &[u8], epoch: u64) {
        if matches!(self.keys.get(key), Some(KeyMove::Frozen { epoch: e, .. }) if *e == epoch) {
            self.keys.remove(key);
        }
    }

    /// `key` was installed here (q, or p again when it comes back): nothing of an earlier
    /// move of it away remains.
    pub fn arrived(&mut self, key: &[u8]) {
        self.keys.remove(key);
    }

    /// Keys whose grace period is over and whose versions are still here.
    pub fn to_delete(&self, now_us: u64) -> Vec<Bytes> {
        self.keys
            .iter()
            .filter(|(_, m)| {
                matches!(m, KeyMove::Gone { delete_at_us, deleted: false, .. } if *delete_at_us <= now_us)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// `key`'s versions were deleted here.
    pub fn deleted(&mut self, key: &[u8]) {
        if let Some(KeyMove::Gone { deleted, .. }) = self.keys.get_mut(key) {
            *deleted = true;
        }
    }

    /// The keys frozen here, each with the epoch of its move.
    pub fn frozen(&self) -> Vec<(Bytes, u64)> {
        self.keys
            .iter()
            .filter_map(|(k, m)| match m {
                KeyMove::Frozen { epoch, .. } => Some((k.clone(), *epoch)),
                KeyMove::Gone { .. } => None,
            })
            .collect()
    }

    /// Drops the entries of keys deleted here whose move the local directory (at
    /// `dir_epoch`) already knows: the directory answers for them from then on. Returns
    /// the keys dropped.
    pub fn forget_settled(&mut self, dir_epoch: u64) -> Vec<Bytes> {
        let gone: Vec<Bytes> = self
            .keys
            .iter()
            .filter(|(_, m)| {
                matches!(m, KeyMove::Gone { dir_epoch: e, deleted: true, .. } if *e <= dir_epoch)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            self.keys.remove(k);
        }
        gone
    }
}

/// How a move ended, by a directory that no longer says it is under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveOutcome {
    /// The key stayed: its source serves it again.
    Cancelled,
    /// The key lives elsewhere since directory epoch `dir_epoch`.
    Left {
        /// The epoch of the directory entry that says so (or of the directory when the key
        /// went back to its hash partition and the entry went with it).
        dir_epoch: u64,
    },
}

/// How the move of `key` that the leader of the partitions `mine` froze it for (directory
/// epoch `epoch`) ended, by that leader's directory copy `dir` (`home`: the key's hash
/// partition); `None` while it may still be under way — the copy says `Moving` at that
/// epoch, or is older than the move.
///
/// The source learns the end of a move from the mover (`MoveDone`, `MoveCancel`); when that
/// message is lost, or the mover crashed and the claimant gave the move up, the key would
/// stay frozen — refusing writes, its copy never deleted. The directory is the record of how
/// every move ended, so the source can settle the key by itself.
pub fn move_outcome(
    dir: &KeyDirectory,
    key: &[u8],
    epoch: u64,
    home: impl FnOnce() -> PartitionId,
    mine: impl Fn(PartitionId) -> bool,
) -> Option<MoveOutcome> {
    if dir.epoch() < epoch {
        return None;
    }
    if let Some(crate::placement::Placement::Moving { epoch: e, .. }) = dir.get(key)
        && *e == epoch
    {
        return None;
    }
    let r = dir.route(key, home);
    if mine(r.partition) {
        Some(MoveOutcome::Cancelled)
    } else {
        let dir_epoch = dir.get(key).map_or(dir.epoch(), |p| p.epoch());
        Some(MoveOutcome::Left { dir_epoch })
    }
}

/// Whether the leader of the partitions `mine` serves `key` for writes, by its directory
/// copy: `KeyMoving` while the key moves, `WrongPartition` if it lives elsewhere. `home` is the
/// key's hash partition. Check the [`MoveTable`] too: the directory copy may lag.
pub fn directory_admits_write(
    dir: &KeyDirectory,
    key: &[u8],
    home: impl FnOnce() -> PartitionId,
    mine: impl Fn(PartitionId) -> bool,
) -> Result<()> {
    let r = dir.route(key, home);
    if !mine(r.partition) {
        return Err(TxnError::WrongPartition {
            hint: r.partition,
            dir_epoch: r.dir_epoch,
        });
    }
    if r.moving {
        return Err(moving(key));
    }
    Ok(())
}

/// Whether that leader serves `key` for reads by its directory copy (a moving key is still
/// read at its source).
pub fn directory_admits_read(
    dir: &KeyDirectory,
    key: &[u8],
    home: impl FnOnce() -> PartitionId,
    mine: impl Fn(PartitionId) -> bool,
) -> Result<()> {
    let r = dir.route(key, home);
    if !mine(r.partition) {
        return Err(TxnError::WrongPartition {
            hint: r.partition,
            dir_epoch: r.dir_epoch,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::{self, Controls};
    use crate::store::TxnStore;
    use crate::types::TxId;
    use meridian_core::NodeId;
    use meridian_storage::{MemEngine, WriteBatch};
    use std::sync::Arc;

    const P: PartitionId = PartitionId(3);
    const Q: PartitionId = PartitionId(9);
    const GRACE: u64 = 1_000_000;

    /// One leader: its store and clock; `raw` is its fake wall clock.
    struct Leader {
        store: TxnStore,
        clock: LeaderClock,
        moves: MoveTable,
        raw: u64,
    }

    impl Leader {
        fn new(raw: u64) -> Leader {
            Leader {
                store: TxnStore::new(Arc::new(MemEngine::new()), Timestamp(1)),
                clock: LeaderClock::new(1_000),
                moves: MoveTable::new(),
                raw,
            }
        }

        fn tick(&mut self) -> Timestamp {
            self.raw += 10;
            self.clock.tick(Timestamp(self.raw)).unwrap()
        }

        /// A single-step commit of `key = v` at snapshot `snap`, as the serving code runs it:
        /// admission, certification, timestamp, install.
        fn commit(&mut self, key: &[u8], v: Option<&str>, snap: Timestamp) -> Result<Timestamp> {
            self.moves.admit_write(key)?;
            let txid = TxId {
                coord: NodeId(1),
                seq: self.raw,
            };
            leader::certify(
                key,
                None,
                self.store.last_commit(key)?,
                snap,
                txid,
                Controls::default(),
            )?;
            let ts = self.tick();
            let mut b = WriteBatch::new();
            let v = v.map(|v| Bytes::copy_from_slice(v.as_bytes()));
            self.store
                .install(&mut b, key, ts, v.as_ref(), Timestamp(0))?;
            self.store.write(b)?;
            Ok(ts)
        }

        fn read(&self, key: &[u8], snap: Timestamp) -> Result<crate::Found> {
            self.moves.admit_read(key, snap)?;
            self.store.read_at(key, snap)
        }
    }

    /// p holds k with a few versions (one a delete); returns their timestamps.
    fn seeded(p: &mut Leader, k: &[u8]) -> Vec<Timestamp> {
        let mut ts = Vec::new();
        for v in [Some("1"), Some("2"), None, Some("4")] {
            let snap = p.tick();
            ts.push(p.commit(k, v, snap).unwrap());
        }
        ts
    }

    /// Steps 1–2 of a move of `k` from p to q; returns what shipped.
    fn ship(
        p: &mut Leader,
        q: &mut Leader,
        k: &[u8],
        epoch: u64,
        watermark: Timestamp,
    ) -> Exported {
        p.moves.freeze(k, Q, epoch).unwrap();
        assert!(export_ready(None));
        let t = p.tick();
        let export_ts = p.moves.exported(k, epoch, t).unwrap();
        let ex = Exported {
            versions: p.store.export_key(k, watermark).unwrap(),
            export_ts,
        };
        let mut b = WriteBatch::new();
        q.store.import_key(&mut b, k, &ex.versions).unwrap();
        q.store.write(b).unwrap();
        q.moves.arrived(k);
        ex.advance(&mut q.clock);
        ex
    }

    #[test]
    fn snapshot_reads_at_the_same_timestamp_agree_on_both_sides() {
        let k = b"bank:a";
        let mut p = Leader::new(1_000_000);
        // q's wall clock is far behind p's.
        let mut q = Leader::new(1_000);
        let ts = seeded(&mut p, k);
        let ex = ship(&mut p, &mut q, k, 1, Timestamp(0));
        assert_eq!(ex.versions.versions.len(), 4);
        for snap in ts[0].0 - 2..ex.export_ts.0 {
            let snap = Timestamp(snap);
            assert_eq!(
                p.read(k, snap).unwrap(),
                q.store.read_at(k, snap).unwrap(),
                "snap {snap:?}"
            );
        }
        // And with versions below the watermark left behind: q refuses what it cannot
        // answer as p would, never answers differently.
        let mut p2 = Leader::new(5_000_000);
        let mut q2 = Leader::new(1_000);
        let k2 = b"bank:b";
        let ts2 = seeded(&mut p2, k2);
        let watermark = Timestamp(ts2[2].0 + 1);
        let ex2 = ship(&mut p2, &mut q2, k2, 1, watermark);
        assert_eq!(
            ex2.versions
                .versions
                .iter()
                .map(|v| v.0)
                .collect::<Vec<_>>(),
            vec![ts2[3], ts2[2]],
            "the versions above the watermark and the newest below it"
        );
        for snap in ts2[0].0 - 2..ex2.export_ts.0 {
            let snap = Timestamp(snap);
            match q2.store.read_at(k2, snap) {
                Ok(v) => assert_eq!(v, p2.read(k2, snap).unwrap(), "snap {snap:?}"),
                Err(TxnError::SnapshotTooOld { .. }) => assert!(snap < watermark),
                Err(e) => panic!("{e:?}"),
            }
        }
    }

    #[test]
    fn the_destination_clock_passes_every_snapshot_the_source_served() {
        let k = b"bank:a";
        let mut p = Leader::new(50_000_000);
        let mut q = Leader::new(1_000); // far behind
        let ts = seeded(&mut p, k);
        // p serves a read far above k's last commit (R1 only needs clock_p > snap).
        let snap = Timestamp(p.clock.read(Timestamp(p.raw + 5_000_000)).unwrap().0 - 1);
        p.raw += 5_000_000;
        assert!(p.read(k, snap).unwrap().is_some());
        let ex = ship(&mut p, &mut q, k, 1, Timestamp(0));
        // The spec's rule, and the stronger one this design needs.
        let max_commit = *ts.last().unwrap();
        assert!(ex.clock_floor() >= Timestamp(max_commit.0 + 1));
        assert!(ex.export_ts > snap);
        // Every timestamp q issues from now on is above both, whatever q's wall clock says.
        let next = q.tick();
        assert!(
            next > ex.export_ts && next > snap && next > max_commit,
            "{next:?}"
        );
        // A commit of k at q is invisible to the snapshot p served, as it was at p.
        let c = q.commit(k, Some("5"), next).unwrap();
        assert!(c > snap);
        assert_eq!(q.store.read_at(k, snap).unwrap(), p.read(k, snap).unwrap());
        // Reads at p at or above export_ts are refused (retryable), below it still served.
        let e = p.read(k, ex.export_ts).unwrap_err();
        assert_eq!(e, TxnError::Aborted(Abort::KeyMoving(k.to_vec())));
        assert!(e.is_retryable());
        assert!(p.read(k, Timestamp(ex.export_ts.0 - 1)).is_ok());
    }

    /// Negative control: a destination that applies only the spec's `max commit_ts + 1`
    /// (or nothing) issues a commit below a snapshot the source already served — the same
    /// snapshot then reads two different values of the key.
    #[test]
    fn with_only_the_commit_ts_rule_a_served_snapshot_changes() {
        let k = b"bank:a";
        let mut p = Leader::new(50_000_000);
        let mut q = Leader::new(1_000);
        let ts = seeded(&mut p, k);
        let snap = Timestamp(p.clock.read(Timestamp(p.raw + 5_000_000)).unwrap().0 - 1);
        p.raw += 5_000_000;
        let seen = p.read(k, snap).unwrap();
        p.moves.freeze(k, Q, 1).unwrap();
        let t = p.tick();
        let export_ts = p.moves.exported(k, 1, t).unwrap();
        let kv = p.store.export_key(k, Timestamp(0)).unwrap();
        let mut b = WriteBatch::new();
        q.store.import_key(&mut b, k, &kv).unwrap();
        q.store.write(b).unwrap();
        assert!(export_ts > snap);
        // The spec's rule; then a writer whose snapshot is just past the last commit (R1 at
        // q makes q's clock pass it).
        let w = Timestamp(ts.last().unwrap().0 + 1);
        q.clock.observe(w);
        let c = q.commit(k, Some("late"), w).unwrap();
        assert!(c < snap, "q committed at {c:?}, below the served {snap:?}");
        assert_ne!(
            q.store.read_at(k, snap).unwrap(),
            seen,
            "the snapshot changed"
        );
    }

    #[test]
    fn a_transaction_touching_a_moving_key_aborts_retryably_with_no_effect() {
        let k = b"bank:a";
        let mut p = Leader::new(1_000_000);
        seeded(&mut p, k);
        let before = p.store.export_key(k, Timestamp(0)).unwrap();
        p.moves.freeze(k, Q, 7).unwrap();
        let snap = p.tick();
        let e = p.commit(k, Some("x"), snap).unwrap_err();
        assert_eq!(e, TxnError::Aborted(Abort::KeyMoving(k.to_vec())));
        assert!(e.is_retryable());
        assert_eq!(
            p.store.export_key(k, Timestamp(0)).unwrap(),
            before,
            "no effect"
        );
        // Other keys are untouched by the freeze.
        assert!(p.commit(b"bank:other", Some("y"), snap).is_ok());
        // Reads go on while frozen (nothing changes at p).
        let now = p.clock.read(Timestamp(p.raw)).unwrap();
        assert!(p.read(k, now).is_ok());
        // A cancelled move serves writes again.
        p.moves.unfreeze(k, 7);
        let snap = p.tick();
        assert!(p.commit(k, Some("z"), snap).is_ok());
    }

    #[test]
    fn pending_marks_drain_before_the_export() {
        let mark = Mark {
            txid: TxId {
                coord: NodeId(2),
                seq: 1,
            },
            prepare_ts: Timestamp(10),
            snap: Timestamp(5),
            watch_only: true,
        };
        assert!(!export_ready(Some(&mark)), "even a watch holds the export");
        assert!(export_ready(None));
        // An export before the freeze, or for another move, is refused.
        let mut t = MoveTable::new();
        assert!(t.exported(b"k", 1, Timestamp(5)).is_err());
        t.freeze(b"k", Q, 1).unwrap();
        t.freeze(b"k", Q, 1).unwrap();
        assert!(t.freeze(b"k", Q, 2).is_err());
        assert!(t.exported(b"k", 2, Timestamp(5)).is_err());
        assert_eq!(t.exported(b"k", 1, Timestamp(5)).unwrap(), Timestamp(5));
        // A repeated export keeps the larger timestamp.
        assert_eq!(t.exported(b"k", 1, Timestamp(3)).unwrap(), Timestamp(5));
        assert_eq!(t.exported(b"k", 1, Timestamp(8)).unwrap(), Timestamp(8));
    }

    #[test]
    fn the_source_redirects_then_deletes_after_the_grace_period() {
        let k = b"bank:a";
        let mut p = Leader::new(1_000_000);
        let mut q = Leader::new(2_000_000);
        seeded(&mut p, k);
        let mut dir = KeyDirectory::new();
        let e = dir.begin_move(k, P, P, Q).unwrap();
        let ex = ship(&mut p, &mut q, k, e, Timestamp(0));
        let e2 = dir.finish_move(k, P).unwrap();
        p.moves.moved(k, e, e2, 100, GRACE).unwrap();
        let wrong = TxnError::WrongPartition {
            hint: Q,
            dir_epoch: e2,
        };
        let snap = p.tick();
        assert_eq!(p.commit(k, Some("x"), snap).unwrap_err(), wrong);
        assert_eq!(p.read(k, Timestamp(ex.export_ts.0 - 1)).unwrap_err(), wrong);
        assert!(wrong.is_retryable());
        // q serves it, by its directory copy; p's copy sends it on.
        let mine_q = |x: PartitionId| x == Q;
        let mine_p = |x: PartitionId| x == P;
        assert!(directory_admits_write(&dir, k, || P, mine_q).is_ok());
        assert_eq!(
            directory_admits_write(&dir, k, || P, mine_p).unwrap_err(),
            wrong
        );
        // While moving, the source's copy still reads but refuses writes.
        let mut moving = KeyDirectory::new();
        moving.begin_move(k, P, P, Q).unwrap();
        assert!(directory_admits_read(&moving, k, || P, mine_p).is_ok());
        assert!(matches!(
            directory_admits_write(&moving, k, || P, mine_p),
            Err(TxnError::Aborted(Abort::KeyMoving(_)))
        ));
        // The versions stay at p for the grace period, then go.
        assert!(p.moves.to_delete(100 + GRACE - 1).is_empty());
        assert_eq!(p.moves.to_delete(100 + GRACE), vec![Bytes::from_static(k)]);
        let mut b = WriteBatch::new();
        assert_eq!(p.store.delete_key(&mut b, k).unwrap(), 4);
        p.store.write(b).unwrap();
        p.moves.deleted(k);
        assert!(p.moves.to_delete(u64::MAX).is_empty());
        assert_eq!(p.store.read_at(k, Timestamp(u64::MAX)).unwrap(), None);
        // Once p's directory copy knows the move, the table entry goes: the copy answers.
        p.moves.forget_settled(e2 - 1);
        assert!(p.moves.get(k).is_some());
        p.moves.forget_settled(e2);
        assert!(p.moves.is_empty());
        // q still answers every snapshot.
        assert!(q.store.read_at(k, Timestamp(u64::MAX)).unwrap().is_some());
    }

    #[test]
    fn a_key_moved_back_replaces_what_was_left_behind() {
        let k = b"bank:a";
        let mut p = Leader::new(1_000_000);
        let mut q = Leader::new(2_000_000);
        seeded(&mut p, k);
        ship(&mut p, &mut q, k, 1, Timestamp(0));
        p.moves.moved(k, 1, 2, 0, GRACE).unwrap();
        let snap = q.tick();
        q.commit(k, Some("new"), snap).unwrap();
        // Back to p within the grace period: p's stale copy is replaced, not merged.
        q.moves.freeze(k, P, 3).unwrap();
        let t = q.tick();
        let export_ts = q.moves.exported(k, 3, t).unwrap();
        let ex = Exported {
            versions: q.store.export_key(k, Timestamp(0)).unwrap(),
            export_ts,
        };
        let mut b = WriteBatch::new();
        p.store.import_key(&mut b, k, &ex.versions).unwrap();
        p.store.write(b).unwrap();
        p.moves.arrived(k);
        ex.advance(&mut p.clock);
        assert_eq!(
            p.store.export_key(k, Timestamp(0)).unwrap(),
            q.store.export_key(k, Timestamp(0)).unwrap()
        );
        assert!(p.tick() > ex.export_ts);
        // Out-of-order versions are refused.
        let bad = KeyVersions {
            versions: vec![(Timestamp(1), None), (Timestamp(2), None)],
            truncated: false,
        };
        assert!(p.store.import_key(&mut WriteBatch::new(), k, &bad).is_err());
    }

    /// A source that was never told how a move ended settles it from its directory copy:
    /// not while the copy says the move is under way or predates it; served again after a
    /// cancel; gone (refusing with `WrongPartition`, its copy deleted later) after a finish,
    /// whether the directory keeps an entry for the key or the key went home and the entry
    /// with it.
    #[test]
    fn a_source_settles_a_move_it_was_not_told_the_end_of() {
        const R: PartitionId = PartitionId(5);
        let mine = |x: PartitionId| x == P;
        for home in [P, Q] {
            let outcome = |dir: &KeyDirectory, epoch| move_outcome(dir, b"k", epoch, || home, mine);
            let mut dir = KeyDirectory::new();
            if home != P {
                // The key lives at p, away from home, before the move back.
                dir.begin_move(b"k", home, home, P).unwrap();
                dir.finish_move(b"k", home).unwrap();
            }
            let e = dir.begin_move(b"k", home, P, Q).unwrap();
            let mut moves = MoveTable::new();
            moves.freeze(b"k", Q, e).unwrap();
            assert_eq!(moves.frozen(), vec![(Bytes::from_static(b"k"), e)]);
            assert_eq!(outcome(&dir, e), None, "under way");
            assert_eq!(
                outcome(&KeyDirectory::new(), e),
                None,
                "a copy older than the move"
            );

            let mut cancelled = dir.clone();
            cancelled.cancel_move(b"k", home).unwrap();
            assert_eq!(outcome(&cancelled, e), Some(MoveOutcome::Cancelled));
            let mut m = moves.clone();
            m.unfreeze(b"k", e);
            assert!(m.admit_write(b"k").is_ok() && m.frozen().is_empty());

            let mut finished = dir.clone();
            let done = finished.finish_move(b"k", home).unwrap();
            assert_eq!(
                outcome(&finished, e),
                Some(MoveOutcome::Left { dir_epoch: done }),
                "home {home}"
            );
            let mut m = moves.clone();
            m.moved(b"k", e, done, 0, GRACE).unwrap();
            assert!(matches!(
                m.admit_write(b"k"),
                Err(TxnError::WrongPartition { hint: Q, .. })
            ));
            assert!(m.frozen().is_empty());
            assert_eq!(m.to_delete(GRACE), vec![Bytes::from_static(b"k")]);

            // Moved on since, from q to r: still not here.
            let mut onward = finished.clone();
            onward.begin_move(b"k", home, Q, R).unwrap();
            let last = onward.finish_move(b"k", home).unwrap();
            assert_eq!(
                outcome(&onward, e),
                Some(MoveOutcome::Left { dir_epoch: last })
            );
            // A newer move of the key from here ended the old one: cancelled.
            let mut again = cancelled.clone();
            let e2 = again.begin_move(b"k", home, P, Q).unwrap();
            assert_eq!(outcome(&again, e), Some(MoveOutcome::Cancelled));
            assert_eq!(outcome(&again, e2), None);
        }
    }

    proptest::proptest! {
        /// Export then import reproduces every answer at or above the watermark, including
        /// the cap's `SnapshotTooOld`.
        #[test]
        fn export_import_round_trips(
            steps in proptest::collection::vec((1u64..20, 0u64..40, proptest::bool::ANY), 1..100),
            lag in 0u64..60,
        ) {
            let src = TxnStore::new(Arc::new(MemEngine::new()), Timestamp(1));
            let (mut now, mut wm) = (0u64, 0u64);
            for (step, back, del) in steps {
                now += step;
                wm = wm.max(now.saturating_sub(back));
                let mut b = WriteBatch::new();
                let v = (!del).then(|| Bytes::from(now.to_string()));
                src.install(&mut b, b"k", Timestamp(now), v.as_ref(), Timestamp(wm)).unwrap();
                src.write(b).unwrap();
            }
            let watermark = Timestamp(wm.saturating_sub(lag));
            let dst = TxnStore::new(Arc::new(MemEngine::new()), Timestamp(1));
            let kv = src.export_key(b"k", watermark).unwrap();
            let mut b = WriteBatch::new();
            dst.import_key(&mut b, b"k", &kv).unwrap();
            dst.write(b).unwrap();
            for snap in watermark.0..=now + 1 {
                let s = Timestamp(snap);
                proptest::prop_assert_eq!(src.read_at(b"k", s), dst.read_at(b"k", s), "snap {}", snap);
            }
        }
    }
}
