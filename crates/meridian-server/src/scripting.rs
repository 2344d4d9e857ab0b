//! The node's Lua scripting state: two interpreters ([`meridian_lua::Engine`]), one for EVAL
//! scripts and one for FUNCTION libraries (so SCRIPT FLUSH leaves the libraries, as in
//! Redis), and what the node's other connections need to know about the script running.
//!
//! Guarantees:
//! - scripts run one at a time, each as one atomic unit over the keyspace (the RESP layer
//!   runs it inside a keyspace transaction). Connections take *turns* ([`Scripts::turn`]), a
//!   first-come first-served queue waited on asynchronously, so no thread ever blocks on
//!   another connection's script; the interpreters' lock underneath is then uncontended;
//! - while a script runs, another connection's command waits for the turn the same way;
//!   once the script has run longer than `busy-reply-threshold`, such commands are answered
//!   `-BUSY` instead, except those Redis allows while busy (SCRIPT KILL among them);
//! - [`Scripts::halt`] (the node shutting down) stops the running script and every later
//!   one, whatever they wrote;
//! - SCRIPT KILL stops a script that has not written (Redis's `UNKILLABLE` otherwise), at its
//!   next check, whatever the script catches.

use meridian_lua::{Config, Control, Engine};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::OwnedMutexGuard;

/// A connection's turn at the interpreters, held while its command runs.
pub type Turn = OwnedMutexGuard<()>;

/// Redis's default `busy-reply-threshold` (formerly `lua-time-limit`), in milliseconds.
pub const DEFAULT_BUSY_MS: u64 = 5000;

/// Script calls run inline on their worker thread: most are short, and handing the worker
/// off for each (`block_in_place`) cost more than the script itself. What a call that has
/// run [`meridian_lua::LONG_RUN`] runs instead (from the interpreters' hook, every
/// `LONG_RUN`): on a multi-thread runtime's worker, `block_in_place` long enough for the replacement thread tokio starts to take the worker's core (and its
/// queued tasks) away from this thread, which then finishes the call alone. A thread that
/// already gave its core away (a later check) just pauses as briefly.
fn hand_off_worker() {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(|| std::thread::sleep(Duration::from_micros(100)));
    }
}

/// `-BUSY` while a script (EVAL) runs.
pub const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

/// `-BUSY` while a function (FCALL) runs.
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";

/// What is running: an EVAL script or an FCALL function.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// Whether it is an EVAL script (SCRIPT KILL stops it) rather than a function
    /// (FUNCTION KILL).
    pub eval: bool,
    /// The script's SHA-1 or the function's name.
    pub name: String,
    /// The command that runs it, as text.
    pub command: String,
}

/// The script running now.
#[derive(Debug)]
struct Running {
    started: Instant,
    /// Whether it ran a write command: then it cannot be killed.
    wrote: Arc<AtomicBool>,
    info: RunInfo,
}

/// The two interpreters, locked together: one script or function runs at a time.
#[derive(Debug)]
pub struct Engines {
    /// EVAL's scripts.
    pub eval: Engine,
    /// FUNCTION's libraries.
    pub functions: Engine,
}

/// The node's scripting state (see the module docs).
#[derive(Debug)]
pub struct Scripts {
    engine: Mutex<Engines>,
    control: Arc<Control>,
    running: Mutex<Option<Running>>,
    busy: AtomicBool,
    turn: Arc<tokio::sync::Mutex<()>>,
    busy_after_ms: AtomicU64,
    /// FUNCTION STATS's counts: libraries and functions, as of the last change.
    library_counts: Mutex<(usize, usize)>,
}

impl Scripts {
    /// Fresh interpreters (see [`Config`]), stopped by one [`Control`].
    pub fn new(config: Config) -> Result<Self, meridian_lua::Error> {
        let eval = Engine::new(config.clone())?;
        let control = eval.control();
        control.on_long(hand_off_worker);
        let functions = Engine::with_control(config, control.clone())?;
        Ok(Self {
            control,
            engine: Mutex::new(Engines { eval, functions }),
            running: Mutex::new(None),
            busy: AtomicBool::new(false),
            turn: Arc::default(),
            busy_after_ms: AtomicU64::new(DEFAULT_BUSY_MS),
            library_counts: Mutex::new((0, 0)),
        })
    }

    /// The interpreters, locked: a caller that runs a script must [`Scripts::begin`] first.
    pub(crate) fn engine(&self) -> parking_lot::MutexGuard<'_, Engines> {
        self.engine.lock()
    }

    /// For INFO: EVAL's interpreter memory, its cached scripts and their bytes; `None` while
    /// a script holds the interpreters.
    pub fn stats(&self) -> Option<(usize, usize, usize)> {
        let mut engines = self.engine.try_lock()?;
        // What the scripts' interpreter holds live, not the garbage a collection would free.
        engines.eval.collect_garbage_fully();
        let (count, bytes) = engines.eval.cached();
        Some((engines.eval.used_memory(), count, bytes))
    }

    /// Marks a script as running until the guard drops; `wrote` is set by the host when the
    /// script runs a write.
    pub(crate) fn begin(&self, wrote: Arc<AtomicBool>, info: RunInfo) -> RunGuard<'_> {
        *self.running.lock() = Some(Running {
            started: Instant::now(),
            wrote,
            info,
        });
        self.busy.store(true, Ordering::Release);
        RunGuard { scripts: self }
    }

    /// Whether a script is running (one atomic load: the check every command makes).
    pub fn is_running(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

    /// `busy-reply-threshold` in milliseconds.
    pub fn busy_after_ms(&self) -> u64 {
        self.busy_after_ms.load(Ordering::Relaxed)
    }

    /// Sets `busy-reply-threshold` (0: answer `-BUSY` at once).
    pub fn set_busy_after_ms(&self, ms: u64) {
        self.busy_after_ms.store(ms, Ordering::Relaxed);
    }

    /// How many libraries and functions are loaded.
    pub fn library_counts(&self) -> (usize, usize) {
        *self.library_counts.lock()
    }

    /// Records the counts after FUNCTION changed the libraries.
    pub(crate) fn set_library_counts(&self, counts: (usize, usize)) {
        *self.library_counts.lock() = counts;
    }

    /// What runs now and for how long (FUNCTION STATS).
    pub fn running(&self) -> Option<(RunInfo, Duration)> {
        let running = self.running.lock();
        running
            .as_ref()
            .map(|r| (r.info.clone(), r.started.elapsed()))
    }

    /// The `-BUSY` error for what runs now.
    pub fn busy_error(&self) -> &'static str {
        match self.running.lock().as_ref() {
            Some(r) if !r.info.eval => BUSY_FUNCTION,
            _ => BUSY_EVAL,
        }
    }

    /// Waits for this connection's turn (first come, first served; without holding a
    /// thread) and returns it when `keep`, else gives it back at once: a command that only
    /// has to wait for the running script. Without `keep` and with no script running, returns
    /// at once. `Err(())` when the running script has passed `busy-reply-threshold` (the
    /// command is answered `-BUSY`).
    pub async fn turn(&self, keep: bool) -> Result<Option<Turn>, ()> {
        if !keep && !self.is_running() {
            return Ok(None);
        }
        let lock = self.turn.clone().lock_owned();
        tokio::pin!(lock);
        loop {
            let busy_after = Duration::from_millis(self.busy_after_ms());
            let since = self.running_since();
            let deadline = since.unwrap_or_else(Instant::now) + busy_after;
            match tokio::time::timeout_at(deadline.into(), &mut lock).await {
                Ok(turn) => return Ok(keep.then_some(turn)),
                // Past the threshold: BUSY. Otherwise another script started meanwhile (or
                // the holder has not begun yet): wait on, for that one's threshold.
                Err(_)
                    if self
                        .running_since()
                        .is_some_and(|s| s.elapsed() >= busy_after) =>
                {
                    return Err(());
                }
                Err(_) => {}
            }
        }
    }

    fn running_since(&self) -> Option<Instant> {
        self.running.lock().as_ref().map(|r| r.started)
    }

    /// Stops the running script and every later one for good, their writes discarded (the
    /// node is shutting down).
    pub fn halt(&self) {
        self.control.halt();
    }

    /// Whether [`Scripts::halt`] was called.
    pub fn is_halted(&self) -> bool {
        self.control.is_halted()
    }

    /// Stops the running script at its next check, whatever it has done (the node restarts
    /// it with more locks: see `resp::scripting`).
    pub(crate) fn abandon_run(&self) {
        self.control.kill();
    }

    /// SCRIPT KILL (`eval`) or FUNCTION KILL: `Ok` if the running script was asked to
    /// stop, else Redis's error (each kills only its own kind).
    pub fn kill(&self, eval: bool) -> Result<(), &'static str> {
        let running = self.running.lock();
        let Some(r) = running.as_ref() else {
            return Err("NOTBUSY No scripts in execution right now.");
        };
        if r.wrote.load(Ordering::Acquire) {
            return Err(
                "UNKILLABLE Sorry the script already executed write commands against the \
                 dataset. You can either wait the script termination or kill the server in a \
                 hard way using the SHUTDOWN NOSAVE command.",
            );
        }
        match (eval, r.info.eval) {
            (true, false) => return Err(BUSY_FUNCTION),
            (false, true) => return Err(BUSY_EVAL),
            _ => {}
        }
        self.control.kill();
        Ok(())
    }
}

/// A running script's registration: cleared, and waiters woken, on drop.
pub(crate) struct RunGuard<'a> {
    scripts: &'a Scripts,
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        *self.scripts.running.lock() = None;
        self.scripts.busy.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn turns_queue_then_busy_and_kill_follows_redis() {
        let s = Arc::new(Scripts::new(Config::default()).unwrap());
        assert_eq!(
            s.kill(true),
            Err("NOTBUSY No scripts in execution right now.")
        );
        assert!(
            s.turn(false).await.unwrap().is_none(),
            "nothing to wait for"
        );
        s.set_busy_after_ms(50);
        let running = s.turn(true).await.unwrap().expect("a turn");
        let wrote = Arc::new(AtomicBool::new(false));
        let info = RunInfo {
            eval: true,
            name: "x".into(),
            command: "eval x 0".into(),
        };
        let guard = s.begin(wrote.clone(), info);
        // A waiter, script or not, is told BUSY once the threshold has passed.
        assert_eq!(s.turn(false).await.unwrap_err(), ());
        assert_eq!(s.turn(true).await.unwrap_err(), ());
        assert_eq!(s.busy_error(), BUSY_EVAL);
        assert_eq!(
            s.kill(false),
            Err(BUSY_EVAL),
            "FUNCTION KILL does not stop a script"
        );
        assert_eq!(s.kill(true), Ok(()));
        wrote.store(true, Ordering::Release);
        assert!(s.kill(true).unwrap_err().starts_with("UNKILLABLE"));
        // The script ends; the next connection waits for the turn, then gets it.
        drop(guard);
        let next = {
            let s = s.clone();
            tokio::spawn(async move { s.turn(true).await.map(|t| t.is_some()) })
        };
        tokio::task::yield_now().await;
        drop(running);
        assert_eq!(next.await.unwrap(), Ok(true));
        assert!(!s.is_running());
        s.halt();
        assert!(s.is_halted());
    }
}
