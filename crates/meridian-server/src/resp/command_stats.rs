//! Redis's `INFO commandstats`: per command, `calls` (that ran), `usec`, `usec_per_call`,
//! `rejected_calls` (refused before running: arity, authentication, memory, replicas) and
//! `failed_calls` (ran and answered an error).
//!
//! The figures come from the RESP front end's per-command [`OpStats`], which are Prometheus
//! counters and never go back; CONFIG RESETSTAT records a baseline here instead, and INFO
//! shows what was counted since. Commands a script calls are not counted (Redis counts
//! them), nor are refusals of commands a cluster node runs concurrently (pipelined) told
//! apart from failures.

use crate::metrics::OpStats;
use meridian_redis::Cmd;
use parking_lot::Mutex;
use std::fmt::Write as _;
use std::sync::Arc;

/// One command's counters at the last CONFIG RESETSTAT.
#[derive(Clone, Copy, Debug, Default)]
struct Baseline {
    calls: u64,
    errors: u64,
    rejected: u64,
    usec: u64,
}

impl Baseline {
    fn of(op: &OpStats) -> Self {
        Self {
            calls: op.calls(),
            errors: op.errors(),
            rejected: op.rejected(),
            usec: op.latency_sum_us(),
        }
    }
}

/// The zero of INFO commandstats (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct CommandStats {
    /// Per command (by `Cmd as usize`); empty until the first reset.
    baseline: Mutex<Vec<Baseline>>,
}

impl CommandStats {
    /// CONFIG RESETSTAT: counts start again from now.
    pub(crate) fn reset(&self, ops: &[Arc<OpStats>]) {
        *self.baseline.lock() = ops.iter().map(|o| Baseline::of(o)).collect();
    }

    /// The section's lines: one per command called since the last reset, in table order.
    pub(crate) fn render(&self, ops: &[Arc<OpStats>], out: &mut String) {
        let baseline = self.baseline.lock();
        for (i, op) in ops.iter().enumerate() {
            let now = Baseline::of(op);
            let zero = baseline.get(i).copied().unwrap_or_default();
            let rejected = now.rejected.saturating_sub(zero.rejected);
            let all = now.calls.saturating_sub(zero.calls);
            if all == 0 {
                continue;
            }
            let calls = all.saturating_sub(rejected);
            let failed = now
                .errors
                .saturating_sub(zero.errors)
                .saturating_sub(rejected);
            let usec = now.usec.saturating_sub(zero.usec);
            let per_call = if calls == 0 {
                0.0
            } else {
                usec as f64 / calls as f64
            };
            let Some(cmd) = Cmd::ALL.get(i) else { continue };
            let _ = write!(
                out,
                "cmdstat_{}:calls={calls},usec={usec},usec_per_call={per_call:.2},\
                 rejected_calls={rejected},failed_calls={failed}\r\n",
                cmd.spec().name
            );
        }
    }
}
