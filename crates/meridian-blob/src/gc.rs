//! Which stored chunk versions may be deleted (spec §3 "GC", invariant 7): a pure decision,
//! so the rule can be model-tested; the sweeper that lists versions, reads their keys and
//! deletes is elsewhere.
//!
//! A node stores chunks by *version* (the upload that wrote them) and remembers when it first
//! stored one ([`crate::VersionInfo`]). For each version the sweeper reads the key the
//! version belongs to and summarizes it as a [`KeyState`], then asks [`decide`]:
//!
//! 1. **Keep** while an upload with this id is still open, when the key could not be read
//!    ([`KeyState::Unknown`]), while any live manifest (any sibling) references the version,
//!    and while the version is younger than `version_grace` since it was stored.
//! 2. **Superseded**: a manifest created, or a deletion made, *after* the version was stored
//!    (strictly later, µs) replaced it. It is deleted once `version_grace` has passed since
//!    that event — the grace counts from when the version stopped being live, which is what
//!    protects a reader that fetched the old manifest just before and is still streaming.
//!    The newest such event is used, which can only postpone deletion.
//! 3. **Orphan** (never committed: nothing references it and nothing newer happened): deleted
//!    once `orphan_ttl` has passed since it was stored.
//!
//! Caveat: the rule cannot tell a superseded committed version from an upload still streaming
//! that lost a race to a newer write. Such an upload must be reported open (`upload_open`) by
//! whoever knows, or it must commit within `version_grace` of the competing write; otherwise
//! its chunks may go before its manifest lands.
//!
//! Times are µs; the version's `stored_at_us` is this node's clock, a manifest's
//! `created_us` the committing node's. Skew can only make a superseded version look like an
//! orphan (kept longer), or postpone the superseded deletion, except that a version stored
//! *after* a skewed-future manifest's timestamp would be taken as superseded — the grace
//! period (10 min) is meant to dwarf clock skew.

use crate::manifest::Manifest;

/// The GC periods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcConfig {
    /// How long chunks of a replaced or deleted version survive the replacement (covers readers
    /// mid-stream); also the minimum age of any deleted version. Default 10 min.
    pub version_grace_us: u64,
    /// How long chunks of an upload that never committed survive. Default 1 h.
    pub orphan_ttl_us: u64,
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            version_grace_us: 10 * 60 * 1_000_000,
            orphan_ttl_us: 60 * 60 * 1_000_000,
        }
    }
}

/// What the key a version belongs to holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyState {
    /// One or more live manifests (siblings).
    Manifests {
        /// Every chunk version referenced by any live manifest of the key.
        referenced: Vec<u128>,
        /// The newest `created_us` among them.
        newest_created_us: u64,
    },
    /// No live manifest: the key was deleted, never written, or holds a plain value.
    Absent {
        /// When it was deleted, if a tombstone says so.
        deleted_at_us: Option<u64>,
    },
    /// The key could not be read (timeout, no quorum): nothing may be decided.
    Unknown,
}

impl KeyState {
    /// The state of a key holding these live manifests (siblings); [`KeyState::Absent`]
    /// without a deletion time when there are none.
    pub fn from_manifests<'a>(manifests: impl IntoIterator<Item = &'a Manifest>) -> KeyState {
        let mut referenced = Vec::new();
        let mut newest: Option<u64> = None;
        for m in manifests {
            referenced.extend(m.chunk_versions());
            newest = Some(newest.map_or(m.created_us, |n| n.max(m.created_us)));
        }
        match newest {
            None => KeyState::Absent {
                deleted_at_us: None,
            },
            Some(newest_created_us) => {
                referenced.sort_unstable();
                referenced.dedup();
                KeyState::Manifests {
                    referenced,
                    newest_created_us,
                }
            }
        }
    }
}

/// What to do with a stored version's chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub enum GcDecision {
    /// Leave them.
    Keep,
    /// Delete them.
    Delete,
}

/// Whether the chunks of `version`, first stored at `stored_at_us`, may be deleted at
/// `now_us`, given its key's state and whether an upload with this id is still open (rules in
/// the module docs).
pub fn decide(
    cfg: &GcConfig,
    version: u128,
    stored_at_us: u64,
    key: &KeyState,
    upload_open: bool,
    now_us: u64,
) -> GcDecision {
    let since = |t: u64| now_us.saturating_sub(t);
    if upload_open || since(stored_at_us) < cfg.version_grace_us {
        return GcDecision::Keep;
    }
    // When a newer manifest or a deletion replaced the version, if one did.
    let superseded_at = match key {
        KeyState::Unknown => return GcDecision::Keep,
        KeyState::Manifests { referenced, .. } if referenced.contains(&version) => {
            return GcDecision::Keep;
        }
        KeyState::Manifests {
            newest_created_us: t,
            ..
        }
        | KeyState::Absent {
            deleted_at_us: Some(t),
        } => Some(*t).filter(|&t| t > stored_at_us),
        KeyState::Absent {
            deleted_at_us: None,
        } => None,
    };
    let expired = match superseded_at {
        Some(t) => now_us >= t && since(t) >= cfg.version_grace_us,
        None => since(stored_at_us) >= cfg.orphan_ttl_us,
    };
    if expired {
        GcDecision::Delete
    } else {
        GcDecision::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    const MIN: u64 = 60 * 1_000_000;
    const CFG: GcConfig = GcConfig {
        version_grace_us: 10 * MIN,
        orphan_ttl_us: 60 * MIN,
    };
    const V: u128 = 7;

    fn manifests(referenced: &[u128], newest: u64) -> KeyState {
        KeyState::Manifests {
            referenced: referenced.to_vec(),
            newest_created_us: newest,
        }
    }

    fn d(key: &KeyState, stored: u64, open: bool, now: u64) -> GcDecision {
        decide(&CFG, V, stored, key, open, now)
    }

    use GcDecision::{Delete, Keep};

    #[test]
    fn defaults() {
        assert_eq!(GcConfig::default(), CFG);
    }

    #[test]
    fn referenced_open_unknown_and_young_are_kept() {
        let t0 = 1_000 * MIN;
        let far = t0 + 1_000 * MIN;
        assert_eq!(d(&manifests(&[3, V], t0 + 1), t0, false, far), Keep);
        assert_eq!(
            d(
                &KeyState::Absent {
                    deleted_at_us: None
                },
                t0,
                true,
                far
            ),
            Keep
        );
        assert_eq!(d(&KeyState::Unknown, t0, false, far), Keep);
        // Superseded at once, but not yet version_grace old.
        let gone = KeyState::Absent {
            deleted_at_us: Some(t0 + 1),
        };
        assert_eq!(d(&gone, t0, false, t0 + 10 * MIN), Keep);
        // Stored in the future (clock stepped back): kept.
        assert_eq!(d(&gone, far, false, t0), Keep);
    }

    #[test]
    fn superseded_goes_version_grace_after_the_replacement() {
        let stored = 100 * MIN;
        let replaced = stored + 30 * MIN;
        for key in [
            manifests(&[9], replaced),
            KeyState::Absent {
                deleted_at_us: Some(replaced),
            },
        ] {
            assert_eq!(d(&key, stored, false, replaced), Keep);
            assert_eq!(d(&key, stored, false, replaced + 10 * MIN - 1), Keep);
            assert_eq!(d(&key, stored, false, replaced + 10 * MIN), Delete);
            // Still open: kept regardless.
            assert_eq!(d(&key, stored, true, replaced + 1_000 * MIN), Keep);
        }
        // A replacement timestamp in the future (skew): kept until grace after it.
        let key = manifests(&[9], stored + 100 * MIN);
        assert_eq!(d(&key, stored, false, stored + 50 * MIN), Keep);
        assert_eq!(d(&key, stored, false, stored + 110 * MIN), Delete);
    }

    #[test]
    fn orphans_go_after_orphan_ttl() {
        let stored = 100 * MIN;
        // Nothing newer than the version: the live manifest predates it, or the key is empty,
        // or the deletion predates it, or the newest manifest has the very same timestamp.
        for key in [
            manifests(&[1], stored - 1),
            manifests(&[1], stored),
            KeyState::Absent {
                deleted_at_us: None,
            },
            KeyState::Absent {
                deleted_at_us: Some(stored - 5 * MIN),
            },
        ] {
            assert_eq!(d(&key, stored, false, stored + 59 * MIN), Keep, "{key:?}");
            assert_eq!(d(&key, stored, false, stored + 60 * MIN), Delete, "{key:?}");
        }
    }

    #[test]
    fn extreme_times_do_not_overflow() {
        let key = KeyState::Absent {
            deleted_at_us: Some(u64::MAX),
        };
        assert_eq!(d(&key, 0, false, u64::MAX), Keep);
        assert_eq!(
            d(
                &KeyState::Absent {
                    deleted_at_us: None
                },
                0,
                false,
                u64::MAX
            ),
            Delete
        );
        assert_eq!(
            d(
                &KeyState::Absent {
                    deleted_at_us: None
                },
                u64::MAX,
                false,
                0
            ),
            Keep
        );
        let zero = GcConfig {
            version_grace_us: 0,
            orphan_ttl_us: 0,
        };
        assert_eq!(
            decide(
                &zero,
                V,
                5,
                &KeyState::Absent {
                    deleted_at_us: None
                },
                false,
                5
            ),
            Delete
        );
        assert_eq!(decide(&zero, V, 5, &manifests(&[V], 9), false, 9), Keep);
    }

    #[test]
    fn key_state_from_manifests() {
        let m = |version: u128, refs: &[u128], created_us: u64| Manifest {
            version,
            size: refs.len() as u64,
            chunk_size: 1 << 16,
            chunks: refs
                .iter()
                .enumerate()
                .map(|(i, &v)| crate::ChunkRef {
                    version: v,
                    index: i as u32,
                    len: 1,
                    digest: [0; 16],
                })
                .collect(),
            inline: None,
            digest: [0; 32],
            placement: crate::Placement::WithManifest,
            created_us,
            meta: crate::ObjectMeta::default(),
        };
        let (a, b) = (m(1, &[1, 1, 5], 10), m(2, &[2, 5], 30));
        assert_eq!(
            KeyState::from_manifests([&a, &b]),
            KeyState::Manifests {
                referenced: vec![1, 2, 5],
                newest_created_us: 30
            }
        );
        assert_eq!(
            KeyState::from_manifests([]),
            KeyState::Absent {
                deleted_at_us: None
            }
        );
    }

    // ---- Model test ----------------------------------------------------------------------

    #[derive(Debug, Clone)]
    enum Op {
        /// A new upload starts storing chunks.
        Start,
        /// An open upload commits: its manifest replaces the live ones or joins them as a
        /// sibling, and may also reference the chunks of the live manifests (copy / append).
        Commit {
            pick: usize,
            sibling: bool,
            reuse: bool,
        },
        /// An open upload is abandoned (client gone, coordinator crashed).
        Abort { pick: usize },
        /// The key is deleted.
        Delete,
        /// A reader fetches the live manifests and streams their chunks for up to
        /// `version_grace`.
        Read,
        /// Time passes.
        Advance(u64),
        /// A GC sweep; `blind` when the key cannot be read.
        Gc { blind: bool },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Start),
            3 => (any::<usize>(), any::<bool>(), any::<bool>())
                .prop_map(|(pick, sibling, reuse)| Op::Commit { pick, sibling, reuse }),
            1 => any::<usize>().prop_map(|pick| Op::Abort { pick }),
            1 => Just(Op::Delete),
            2 => Just(Op::Read),
            4 => prop::sample::select(vec![0, 1, 1_000_000, MIN, 5 * MIN, 9 * MIN, 10 * MIN,
                                            11 * MIN, 30 * MIN, 59 * MIN, 61 * MIN])
                .prop_map(Op::Advance),
            3 => Just(Op::Gc { blind: false }),
            1 => Just(Op::Gc { blind: true }),
        ]
    }

    struct LiveManifest {
        referenced: BTreeSet<u128>,
        created_us: u64,
    }

    #[derive(Default)]
    struct Model {
        now: u64,
        next: u128,
        /// Stored versions: when stored.
        stored: BTreeMap<u128, u64>,
        open: BTreeSet<u128>,
        committed: BTreeSet<u128>,
        live: Vec<LiveManifest>,
        deleted_at: Option<u64>,
        /// Readers: (started at, versions they stream).
        readers: Vec<(u64, BTreeSet<u128>)>,
    }

    impl Model {
        fn key_state(&self) -> KeyState {
            if self.live.is_empty() {
                return KeyState::Absent {
                    deleted_at_us: self.deleted_at,
                };
            }
            let referenced: BTreeSet<u128> = self
                .live
                .iter()
                .flat_map(|m| m.referenced.iter().copied())
                .collect();
            KeyState::Manifests {
                referenced: referenced.into_iter().collect(),
                newest_created_us: self.live.iter().map(|m| m.created_us).max().unwrap_or(0),
            }
        }

        fn referenced(&self, v: u128) -> bool {
            self.live.iter().any(|m| m.referenced.contains(&v))
        }

        /// When `v` stopped being live (or something newer than it happened), if it did.
        fn superseded_at(&self, v: u128) -> Option<u64> {
            let stored = self.stored[&v];
            let newest = if self.live.is_empty() {
                self.deleted_at
            } else {
                self.live.iter().map(|m| m.created_us).max()
            };
            newest.filter(|&t| t > stored)
        }

        fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
            match *op {
                Op::Start => {
                    self.next += 1;
                    self.stored.insert(self.next, self.now);
                    self.open.insert(self.next);
                }
                Op::Commit {
                    pick,
                    sibling,
                    reuse,
                } => {
                    let Some(&v) = self.open.iter().nth(pick % self.open.len().max(1)) else {
                        return Ok(());
                    };
                    self.open.remove(&v);
                    self.committed.insert(v);
                    let mut referenced = BTreeSet::from([v]);
                    if reuse {
                        referenced.extend(self.live.iter().flat_map(|m| m.referenced.iter()));
                    }
                    if !sibling {
                        self.live.clear();
                    }
                    self.live.push(LiveManifest {
                        referenced,
                        created_us: self.now,
                    });
                }
                Op::Abort { pick } => {
                    if let Some(&v) = self.open.iter().nth(pick % self.open.len().max(1)) {
                        self.open.remove(&v);
                    }
                }
                Op::Delete => {
                    self.live.clear();
                    self.deleted_at = Some(self.now);
                }
                Op::Read => {
                    let versions = self.live.iter().flat_map(|m| m.referenced.iter().copied());
                    self.readers.push((self.now, versions.collect()));
                }
                Op::Advance(dt) => {
                    self.now += dt;
                    let now = self.now;
                    self.readers
                        .retain(|(at, _)| now - at < CFG.version_grace_us);
                }
                Op::Gc { blind } => self.gc(blind)?,
            }
            Ok(())
        }

        fn gc(&mut self, blind: bool) -> Result<(), TestCaseError> {
            let key = if blind {
                KeyState::Unknown
            } else {
                self.key_state()
            };
            let now = self.now;
            let versions: Vec<(u128, u64)> = self.stored.iter().map(|(&v, &s)| (v, s)).collect();
            for (v, stored) in versions {
                let open = self.open.contains(&v);
                if decide(&CFG, v, stored, &key, open, now) == GcDecision::Keep {
                    continue;
                }
                // Safety: never a referenced, open, young or streamed version; never blind.
                prop_assert!(!blind, "deleted {v} without reading the key");
                prop_assert!(
                    !self.referenced(v),
                    "deleted {v}, referenced by a live manifest"
                );
                prop_assert!(!open, "deleted {v}, its upload is open");
                prop_assert!(
                    now - stored >= CFG.version_grace_us,
                    "deleted {v}, too young"
                );
                prop_assert!(
                    !self.readers.iter().any(|(_, vs)| vs.contains(&v)),
                    "deleted {v} under a reader"
                );
                if !self.committed.contains(&v) && self.superseded_at(v).is_none() {
                    prop_assert!(
                        now - stored >= CFG.orphan_ttl_us,
                        "orphan {v} deleted early"
                    );
                }
                self.stored.remove(&v);
            }
            if blind {
                return Ok(());
            }
            // Liveness: what may go, went.
            for (&v, &stored) in &self.stored {
                if self.open.contains(&v) || self.referenced(v) {
                    continue;
                }
                match self.superseded_at(v) {
                    Some(t) => prop_assert!(
                        now - t < CFG.version_grace_us,
                        "superseded {v} kept {} µs after its replacement",
                        now - t
                    ),
                    None => prop_assert!(
                        now - stored < CFG.orphan_ttl_us,
                        "orphan {v} kept {} µs after it was stored",
                        now - stored
                    ),
                }
            }
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Invariant 7 over random histories of uploads, commits, deletes, reads and sweeps.
        #[test]
        fn gc_model(ops in prop::collection::vec(op(), 1..120)) {
            let mut model = Model::default();
            for op in &ops {
                model.apply(op)?;
            }
            // Close everything, wait out the longest period, sweep: only what live manifests
            // reference is left.
            model.open.clear();
            model.apply(&Op::Advance(CFG.orphan_ttl_us + CFG.version_grace_us))?;
            model.apply(&Op::Gc { blind: false })?;
            let left: Vec<u128> = model.stored.keys().copied().collect();
            for v in left {
                prop_assert!(model.referenced(v), "{v} survived unreferenced");
            }
        }

        /// The decision never panics and never deletes what rule 1 protects.
        #[test]
        fn decide_protects(v in 0u128..4, stored in any::<u64>(), now in any::<u64>(),
                           refs in prop::collection::vec(0u128..4, 0..3), newest in any::<u64>(),
                           deleted in any::<Option<u64>>(), open in any::<bool>(), form in 0u8..3) {
            let key = match form {
                0 => KeyState::Manifests { referenced: refs.clone(), newest_created_us: newest },
                1 => KeyState::Absent { deleted_at_us: deleted },
                _ => KeyState::Unknown,
            };
            if decide(&CFG, v, stored, &key, open, now) == GcDecision::Delete {
                prop_assert!(!open && form != 2);
                prop_assert!(form != 0 || !refs.contains(&v));
                prop_assert!(now >= stored && now - stored >= CFG.version_grace_us);
            }
        }
    }
}
