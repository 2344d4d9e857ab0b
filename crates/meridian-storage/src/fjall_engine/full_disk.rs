//! A full disk and other fjall failures: the free-space reserve, the write budget, refusing
//! writes (and why), and resuming once space returns.
//!
//! A refused write never reaches fjall; writes resume only with [`RESUME_HEADROOM`] more than
//! the reserve free, and a failure other than a full disk refuses writes until a restart.

use super::{
    BUDGET_DIVISOR, Inner, LOW_SPACE, REOPEN_BACKOFF, RESUME_HEADROOM, Refusal, Store, backend,
};
use crate::disk::{Degraded, EngineHealth};
use crate::{Result, StorageError};
use fjall::PersistMode;
use meridian_core::Clock;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Inner {
    /// Whether a write failed in fjall since it was (re)opened, which then refuses every
    /// write and fsync.
    pub(super) fn poisoned(&self) -> bool {
        self.disk.refusing.load(Ordering::Acquire)
            && self.disk.state.lock().as_ref().is_some_and(|r| r.reopen)
    }

    /// The error writes are refused with, if they are.
    pub(super) fn refused(&self) -> Option<StorageError> {
        if !self.disk.refusing.load(Ordering::Acquire) {
            return None;
        }
        self.disk
            .state
            .lock()
            .as_ref()
            .map(|r| self.refusal_error(r))
    }

    fn refusal_error(&self, r: &Refusal) -> StorageError {
        if r.disk_full {
            StorageError::DiskFull {
                path: self.config.path.clone(),
                available: r.available,
                reserve: self.disk.reserve.load(Ordering::Relaxed),
            }
        } else {
            StorageError::Backend(format!(
                "the storage engine failed ({}); writes are refused until the node is restarted",
                r.failure
            ))
        }
    }

    /// Lets a write of about `cost` bytes through, or refuses it: while writes are refused,
    /// or when the free space, measured again once the bytes written since the last
    /// measurement may have used up the headroom, is below the reserve.
    pub(super) fn admit(&self, cost: u64) -> Result<()> {
        if let Some(refused) = self.refused() {
            return Err(refused);
        }
        let cost = i64::try_from(cost).unwrap_or(i64::MAX);
        if self.disk.budget.fetch_sub(cost, Ordering::Relaxed) < cost {
            self.measure();
            if let Some(refused) = self.refused() {
                return Err(refused);
            }
        }
        Ok(())
    }

    /// Measures the free space: renews the write budget, refuses writes if the space is below
    /// the reserve, and returns it (`None` if the probe failed).
    pub(super) fn measure(&self) -> Option<u64> {
        let available = match self.disk.probe.available(&self.config.path) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, path = %self.config.path.display(),
                    "cannot measure the free space of the data directory");
                return None;
            }
        };
        let reserve = self.disk.reserve.load(Ordering::Relaxed);
        let headroom = available.saturating_sub(reserve) / BUDGET_DIVISOR;
        self.disk.budget.store(
            i64::try_from(headroom).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        let mut state = self.disk.state.lock();
        match state.as_mut() {
            Some(r) => r.available = available,
            None if available < reserve => {
                drop(state);
                self.refuse(
                    true,
                    format!("{available} bytes free, below the reserve of {reserve} bytes"),
                    available,
                    false,
                );
            }
            None => {}
        }
        Some(available)
    }

    /// Records a failed write to fjall (which poisons it) and returns the error to answer:
    /// [`StorageError::DiskFull`] if the disk is full.
    pub(super) fn write_failed(&self, e: fjall::Error) -> StorageError {
        let full = crate::disk::caused_by_full_disk(&e);
        // A failure fjall met in the background (flushing a memtable) surfaces as `Poisoned`:
        // a full disk if space is low.
        let low = |available: u64| {
            available
                < self
                    .disk
                    .reserve
                    .load(Ordering::Relaxed)
                    .saturating_add(LOW_SPACE)
        };
        let available = self.disk.probe.available(&self.config.path).unwrap_or(0);
        let disk_full = full || (matches!(e, fjall::Error::Poisoned) && low(available));
        self.refuse(disk_full, e.to_string(), available, true);
        self.refused().unwrap_or_else(|| backend(e))
    }

    /// Starts refusing writes (or, if they already are, notes the new failure).
    pub(super) fn refuse(&self, disk_full: bool, failure: String, available: u64, reopen: bool) {
        let mut state = self.disk.state.lock();
        match state.as_mut() {
            Some(r) => {
                r.reopen |= reopen;
                r.failures += 1;
                r.available = available;
            }
            None => {
                let path = self.config.path.display();
                if disk_full {
                    tracing::error!(%path, available, %failure,
                        "the disk is full: writes are refused until space returns");
                } else {
                    tracing::error!(%path, %failure,
                        "the storage engine failed: writes are refused until a restart");
                }
                *state = Some(Refusal {
                    disk_full,
                    failure,
                    available,
                    since_us: self.disk.clock.now().0,
                    reopen,
                    failures: 1,
                    last_attempt: None,
                });
            }
        }
        self.disk.refusing.store(true, Ordering::Release);
    }

    /// The background thread's check, a few times a second (and when the reserve changes):
    /// measures the free space, notices a failure fjall met in the background, and resumes
    /// writes when the disk has room again, reopening fjall first if a write failed.
    pub(super) fn tick(&self) {
        let Some(available) = self.measure() else {
            return;
        };
        let (reopen, failures) = {
            let state = self.disk.state.lock();
            let Some(r) = state.as_ref() else {
                drop(state);
                // Flushes nothing new; fails if fjall was poisoned in the background.
                if let Ok(st) = self.store()
                    && let Err(e) = st.db.persist(PersistMode::Buffer)
                {
                    drop(st);
                    self.write_failed(e);
                }
                return;
            };
            let reserve = self.disk.reserve.load(Ordering::Relaxed);
            if !r.disk_full
                || available < reserve.saturating_add(RESUME_HEADROOM)
                || r.last_attempt.is_some_and(|t| t.elapsed() < REOPEN_BACKOFF)
            {
                return;
            }
            (r.reopen, r.failures)
        };
        if reopen && let Err(e) = self.recover() {
            tracing::error!(error = %e, path = %self.config.path.display(),
                "reopening the storage engine after a full disk failed; retrying");
            if let Some(r) = self.disk.state.lock().as_mut() {
                r.last_attempt = Some(Instant::now());
            }
            return;
        }
        let mut state = self.disk.state.lock();
        if state.as_ref().is_some_and(|r| r.failures == failures) {
            *state = None;
            self.disk.refusing.store(false, Ordering::Release);
            tracing::info!(path = %self.config.path.display(), available,
                "the disk has room again: writes resume");
        }
    }

    /// Reopens fjall from its files, after a write failed for want of space: opening
    /// recovers the journal (dropping a partial last record), and the counters and the index
    /// are checked again. Writes wait; reads wait only for the open.
    pub(super) fn recover(&self) -> Result<()> {
        let mut w = self.writer.lock();
        {
            let mut slot = self.store.write();
            drop(slot.take());
            *slot = Some(Store::open(&self.config.path)?);
        }
        w.clear();
        self.recount(&mut w)?;
        // What the journal holds now is fsynced, as after an open.
        let st = self.store()?;
        self.sync.sync_force(&st.db).map_err(backend)?;
        tracing::info!(path = %self.config.path.display(),
            "reopened the storage engine after a full disk");
        Ok(())
    }

    pub(super) fn health(&self) -> EngineHealth {
        if !self.disk.refusing.load(Ordering::Acquire) {
            return EngineHealth::Ok;
        }
        let state = self.disk.state.lock();
        let Some(r) = state.as_ref() else {
            return EngineHealth::Ok;
        };
        let path = self.config.path.display();
        let reserve = self.disk.reserve.load(Ordering::Relaxed);
        let reason = if r.disk_full {
            let why = if r.reopen {
                "a write failed with no space left on device".to_string()
            } else {
                format!("below the free-space reserve of {reserve} bytes")
            };
            format!(
                "disk full: {} bytes free on {path} ({why}); writes are refused until space \
                 returns",
                r.available
            )
        } else {
            format!(
                "storage engine failed on {path} ({}); writes are refused until the node is \
                 restarted",
                r.failure
            )
        };
        EngineHealth::Degraded(Degraded {
            disk_full: r.disk_full,
            reason,
            since_us: r.since_us,
            recovers: r.disk_full,
        })
    }
}
