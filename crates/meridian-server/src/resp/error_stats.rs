//! Redis's error statistics: INFO's `errorstats` section (`errorstat_<CODE>:count=N`) and
//! `total_error_replies`.
//!
//! Guarantees: every error reply a request ends with, and every error among EXEC's replies,
//! is counted once, under its code — the first word of the error, `ERR` or `WRONGTYPE` say —
//! in the total and, for at
//! most [`MAX_CODES`] distinct codes (as Redis keeps), under that code; a later new code is
//! counted in the total only, so a client inventing codes cannot grow the table. CONFIG
//! RESETSTAT clears both.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The most distinct error codes tracked (Redis's `ERROR_STATS_NUMBER`).
pub(crate) const MAX_CODES: usize = 128;

/// Counts of the error replies sent, by code.
#[derive(Debug, Default)]
pub(crate) struct ErrorStats {
    by_code: Mutex<BTreeMap<Box<[u8]>, u64>>,
    total: AtomicU64,
}

impl ErrorStats {
    /// Counts `reply` (one reply's RESP bytes) if it is an error; anything else is ignored.
    pub(crate) fn record(&self, reply: &[u8]) {
        let Some(text) = reply.strip_prefix(b"-") else {
            return;
        };
        self.total.fetch_add(1, Ordering::Relaxed);
        let end = text
            .iter()
            .position(|&b| b == b' ' || b == b'\r')
            .unwrap_or(text.len());
        let code = &text[..end];
        let mut by_code = self.by_code.lock();
        if let Some(n) = by_code.get_mut(code) {
            *n += 1;
        } else if by_code.len() < MAX_CODES {
            by_code.insert(code.into(), 1);
        }
    }

    /// `total_error_replies`.
    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The `errorstat_` lines, by code in byte order (Redis's order).
    pub(crate) fn render(&self, out: &mut String) {
        for (code, n) in self.by_code.lock().iter() {
            let _ = write!(
                out,
                "errorstat_{}:count={n}\r\n",
                String::from_utf8_lossy(code)
            );
        }
    }

    /// CONFIG RESETSTAT.
    pub(crate) fn reset(&self) {
        self.by_code.lock().clear();
        self.total.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(s: &ErrorStats) -> String {
        let mut out = String::new();
        s.render(&mut out);
        out
    }

    #[test]
    fn errors_count_under_their_code_and_in_the_total() {
        let s = ErrorStats::default();
        s.record(b"-ERR unknown command 'x'\r\n");
        s.record(b"-WRONGTYPE Operation against a key\r\n");
        s.record(b"-ERR syntax error\r\n");
        s.record(b"-NOSPACE\r\n");
        s.record(b"+OK\r\n");
        assert_eq!(s.total(), 4, "a status reply is not an error");
        assert_eq!(
            rendered(&s),
            "errorstat_ERR:count=2\r\nerrorstat_NOSPACE:count=1\r\nerrorstat_WRONGTYPE:count=1\r\n"
        );
        s.reset();
        assert_eq!((s.total(), rendered(&s)), (0, String::new()));
    }

    #[test]
    fn invented_codes_cannot_grow_the_table() {
        let s = ErrorStats::default();
        for i in 0..1000 {
            s.record(format!("-CODE{i} x\r\n").as_bytes());
        }
        s.record(b"-CODE0 again\r\n");
        assert_eq!(s.total(), 1001);
        assert_eq!(s.by_code.lock().len(), MAX_CODES);
        assert!(rendered(&s).contains("errorstat_CODE0:count=2\r\n"));
    }
}
