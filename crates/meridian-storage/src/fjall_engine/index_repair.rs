//! The open-time check of the latest-version index against the versions: a database written
//! before the index existed gets it built, and any difference (a crash between the two
//! keyspaces' clear records) is repaired in bounded batches.

use super::{REPAIR_CHUNK, Store, backend, latest_value};
use crate::Result;
use fjall::{Keyspace, Slice};
use meridian_core::Timestamp;

/// The open-time check of the latest-version index: fed the latest version of every key in
/// key order, it walks the index alongside and repairs what differs.
pub(super) struct IndexRepair<'a> {
    store: &'a Store,
    index: fjall::Iter,
    /// The index entry not yet compared.
    next: Option<(Slice, Slice)>,
    fixes: fjall::OwnedWriteBatch,
    repaired: u64,
}

impl<'a> IndexRepair<'a> {
    pub(super) fn new(store: &'a Store, index: fjall::Iter) -> Self {
        Self {
            store,
            index,
            next: None,
            fixes: store.db.batch(),
            repaired: 0,
        }
    }

    /// The index entry not yet compared, if any.
    fn peek(&mut self) -> Result<Option<&(Slice, Slice)>> {
        if self.next.is_none()
            && let Some(guard) = self.index.next()
        {
            self.next = Some(guard.into_inner().map_err(backend)?);
        }
        Ok(self.next.as_ref())
    }

    fn fix(&mut self, f: impl FnOnce(&mut fjall::OwnedWriteBatch, &Keyspace)) -> Result<()> {
        f(&mut self.fixes, &self.store.latest);
        self.repaired += 1;
        if self.fixes.len() >= REPAIR_CHUNK {
            let full = std::mem::replace(&mut self.fixes, self.store.db.batch());
            full.commit().map_err(backend)?;
        }
        Ok(())
    }

    /// The key encoded as `enc`, whose latest version is at `ts`, is a value if `live`.
    pub(super) fn key(&mut self, enc: &[u8], ts: Timestamp, live: bool) -> Result<()> {
        // Index entries of keys without versions go.
        while let Some((k, _)) = self.peek()?
            && &k[..] < enc
        {
            let k = k.clone();
            self.next = None;
            self.fix(|b, ks| b.remove(ks, k))?;
        }
        let want = latest_value(ts, live);
        let matches = match self.peek()? {
            Some((k, v)) if &k[..] == enc => {
                let ok = v[..] == want[..];
                self.next = None;
                ok
            }
            _ => false,
        };
        if !matches {
            self.fix(|b, ks| b.insert(ks, enc, want.as_slice()))?;
        }
        Ok(())
    }

    /// Removes the index entries after the last key, and commits the repairs.
    pub(super) fn finish(mut self) -> Result<()> {
        while let Some((k, _)) = self.peek()? {
            let k = k.clone();
            self.next = None;
            self.fix(|b, ks| b.remove(ks, k))?;
        }
        if !self.fixes.is_empty() {
            self.fixes.commit().map_err(backend)?;
        }
        if self.repaired > 0 {
            tracing::info!(entries = self.repaired, "repaired the latest-version index");
        }
        Ok(())
    }
}
