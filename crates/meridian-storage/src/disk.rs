//! The disk under a durable engine: how much space is free ([`SpaceProbe`]), and whether the
//! engine is healthy ([`EngineHealth`]).
//!
//! The durable engine refuses writes with [`crate::StorageError::DiskFull`] while the free
//! space of its data directory's filesystem is below a reserve, or after the filesystem
//! answered a journal write with `ENOSPC` (or `EDQUOT`); it watches the free space and
//! resumes by itself once it is back. [`Statvfs`] is the real probe; [`FaultySpace`] is the
//! seam tests inject a full disk through, without filling a real one.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Whether an engine accepts writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum EngineHealth {
    /// Reads and writes are served.
    #[default]
    Ok,
    /// Writes are refused; reads are still served.
    Degraded(Degraded),
}

impl EngineHealth {
    /// Whether writes are served.
    pub fn is_ok(&self) -> bool {
        matches!(self, EngineHealth::Ok)
    }
}

/// Why an engine refuses writes, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Degraded {
    /// The disk is full (or below the free-space reserve): the engine resumes by itself when
    /// space returns. Otherwise the engine failed in a way it does not recover from by itself
    /// (the reason says what; restarting the node reopens it).
    pub disk_full: bool,
    /// A sentence for logs, `/health` and `INFO`.
    pub reason: String,
    /// When writes started being refused, in µs since the Unix epoch.
    pub since_us: u64,
    /// Whether the engine recovers by itself.
    pub recovers: bool,
}

/// Measures the free space under a data directory. The engine asks it a few times a second
/// and whenever the bytes written since the last answer could have used up the headroom.
pub trait SpaceProbe: Send + Sync + fmt::Debug {
    /// Bytes available to unprivileged writers on the filesystem holding `path`.
    fn available(&self, path: &Path) -> io::Result<u64>;

    /// An error to fail the next journal write with instead of writing it, as a full
    /// filesystem would. Only fault-injection probes return one.
    fn write_fault(&self) -> Option<io::Error> {
        None
    }
}

/// The real probe: `statvfs(2)` (`f_bavail × f_frsize`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Statvfs;

impl SpaceProbe for Statvfs {
    fn available(&self, path: &Path) -> io::Result<u64> {
        let st = rustix::fs::statvfs(path)?;
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }
}

/// A fault-injection probe for tests: reports the real free space, or a figure set with
/// [`FaultySpace::set_available`]; while [`FaultySpace::set_full`] is on, it reports 0 bytes
/// free and fails every journal write with `ENOSPC`, as a disk filled by someone else would.
#[derive(Debug, Default)]
pub struct FaultySpace {
    full: AtomicBool,
    /// `u64::MAX`: the real figure.
    available: AtomicU64,
}

impl FaultySpace {
    /// A probe reporting the real free space, with no fault.
    pub fn new() -> Self {
        Self {
            full: AtomicBool::new(false),
            available: AtomicU64::new(u64::MAX),
        }
    }

    /// Fills (`true`) or empties the simulated disk.
    pub fn set_full(&self, full: bool) {
        self.full.store(full, Ordering::SeqCst);
    }

    /// Reports `bytes` free (`None`: the real figure).
    pub fn set_available(&self, bytes: Option<u64>) {
        self.available
            .store(bytes.unwrap_or(u64::MAX), Ordering::SeqCst);
    }
}

impl SpaceProbe for FaultySpace {
    fn available(&self, path: &Path) -> io::Result<u64> {
        if self.full.load(Ordering::SeqCst) {
            return Ok(0);
        }
        match self.available.load(Ordering::SeqCst) {
            u64::MAX => Statvfs.available(path),
            n => Ok(n),
        }
    }

    fn write_fault(&self) -> Option<io::Error> {
        self.full
            .load(Ordering::SeqCst)
            .then(|| io::Error::from_raw_os_error(ENOSPC))
    }
}

/// `ENOSPC` on Linux and the BSDs.
const ENOSPC: i32 = 28;
/// `EDQUOT` on Linux.
const EDQUOT: i32 = 122;

/// Whether an I/O error means the filesystem has no room (no space, or the quota is used up).
pub fn is_out_of_space(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    ) || matches!(e.raw_os_error(), Some(ENOSPC | EDQUOT))
}

/// Whether `e` or an error it wraps is an I/O error [`is_out_of_space`] recognises.
pub(crate) fn caused_by_full_disk(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>()
            && is_out_of_space(io)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statvfs_reports_some_space_and_the_fault_probe_none_when_full() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Statvfs.available(dir.path()).unwrap() > 0);
        let p = FaultySpace::new();
        assert!(p.available(dir.path()).unwrap() > 0);
        assert!(p.write_fault().is_none());
        p.set_available(Some(7));
        assert_eq!(p.available(dir.path()).unwrap(), 7);
        p.set_full(true);
        assert_eq!(p.available(dir.path()).unwrap(), 0);
        assert!(is_out_of_space(&p.write_fault().unwrap()));
        p.set_full(false);
        p.set_available(None);
        assert!(p.available(dir.path()).unwrap() > 7);
    }

    #[test]
    fn out_of_space_errors_are_recognised_through_wrappers() {
        let enospc = io::Error::from_raw_os_error(ENOSPC);
        assert!(is_out_of_space(&enospc));
        assert!(is_out_of_space(&io::Error::from_raw_os_error(EDQUOT)));
        assert!(!is_out_of_space(&io::Error::from_raw_os_error(5)));
        let wrapped = fjall::Error::Io(io::Error::from_raw_os_error(ENOSPC));
        assert!(caused_by_full_disk(&wrapped));
        let deeper =
            fjall::Error::Storage(fjall::LsmError::Io(io::Error::from_raw_os_error(ENOSPC)));
        assert!(caused_by_full_disk(&deeper));
        assert!(!caused_by_full_disk(&fjall::Error::Poisoned));
    }
}
