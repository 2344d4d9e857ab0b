//! SIGINT and SIGTERM, taken by one thread with `sigwait` rather than by a handler.
//!
//! Why no handler: METIS's GKlib, linked for the repartitioner, installs handlers of its own
//! for SIGTERM and SIGABRT with `signal()` for the length of every partitioning call, and
//! puts the previous ones back afterwards. A SIGTERM arriving meanwhile turns into an error
//! return of that call on the partitioner's thread — the shutdown request is lost — or, on
//! any other thread, into a `longjmp` through a buffer that thread never set. Here both
//! signals are blocked in every thread (the mask is set before the first thread starts, and
//! threads inherit it), so no handler ever runs for them, whoever installed it: they stay
//! pending until the watcher thread takes them with `sigwait`. Child processes start with an
//! empty mask (the standard library clears it on spawn).

use anyhow::Context as _;
use nix::sys::signal::{SigSet, Signal};
use tokio::sync::mpsc;

/// The process's SIGINT and SIGTERM, in arrival order.
pub(crate) struct ShutdownSignals {
    rx: mpsc::UnboundedReceiver<Signal>,
}

impl ShutdownSignals {
    /// Blocks SIGINT and SIGTERM in this thread and every thread started from it from now
    /// on, and starts the thread that takes them. Must run before any other thread starts:
    /// a thread started earlier would still run whatever handler is installed.
    pub(crate) fn install() -> anyhow::Result<Self> {
        let mut set = SigSet::empty();
        set.add(Signal::SIGINT);
        set.add(Signal::SIGTERM);
        set.thread_block().context("blocking SIGINT and SIGTERM")?;
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("meridian-signals".into())
            .spawn(move || {
                loop {
                    match set.wait() {
                        Ok(sig) => {
                            if tx.send(sig).is_err() {
                                break;
                            }
                        }
                        Err(e) => {
                            eprintln!("meridian: waiting for signals failed: {e}");
                            break;
                        }
                    }
                }
            })
            .context("starting the signal thread")?;
        Ok(Self { rx })
    }

    /// The next signal; `None` if the watcher stopped (the process can then only be
    /// stopped with SIGKILL, which it logs).
    pub(crate) async fn recv(&mut self) -> Option<Signal> {
        self.rx.recv().await
    }

    /// For commands without a graceful shutdown: the first signal exits the process with the
    /// shell's code for it (128 + its number), as the default disposition would.
    pub(crate) fn exit_on_first(mut self) {
        std::thread::spawn(move || {
            if let Some(sig) = self.rx.blocking_recv() {
                std::process::exit(128 + sig as i32);
            }
        });
    }
}
