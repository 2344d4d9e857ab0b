//! Transfer admission control (spec §7): queue, then fail clearly.
//!
//! [`Admission`] bounds the transfers a node runs at once (`max_active`; each parallel stream
//! is one transfer). The limit is shared by three [`TransferClass`]es by weight (50/25/25 by
//! default): a class's *share* is `max_active × weight / Σweights`, at least 1 when its weight
//! is not 0.
//!
//! **Rules.** A request is admitted at once when fewer than `max_active` transfers run and
//! either its class is below its share, or no *other* class that is below its share has
//! waiters (idle share is lent). Otherwise it waits in its class's FIFO; all waiters together
//! are at most `max_queued`. When a permit is released the freed slot goes first to the
//! waiting classes below their share, then to the others, and among equals to the earliest
//! arrival (one global arrival order), so no class starves and each class is FIFO. A lent slot
//! is not taken back from a running transfer: a class that wants its share back gets the next
//! slots released. A request fails with [`TooManyTransfers`] — never anything else — when the
//! queue is full or its wait exceeds `queue_timeout` (tokio time, so paused-time tests work).
//!
//! **Guarantees.**
//! - At most `max_active` [`TransferPermit`]s exist at any moment; a permit releases its slot
//!   when dropped and hands it to the next waiter under the same lock.
//! - Cancellation-safe: dropping an [`Admission::admit`] future while it waits removes its
//!   waiter; if a slot was granted to it concurrently, the slot is released (and passed on)
//!   instead of leaking. A grant that races a timeout is kept: the request is admitted.
//!
//! **`retry_after_ms`.** The time the queue ahead of a new request should take to drain at
//! the observed pace: an exponentially weighted mean of how long permits were held (weight
//! 1/8 per release), times `(queued + 1) / max_active`. Before any permit has been released
//! the estimate is `queue_timeout / max(1, active)`. Either is bounded to `1..=60 000` ms.
//!
//! [`InflightBytes`] is the other limit of §7: it caps the bytes in flight on a node with a
//! semaphore. It applies backpressure and never fails.

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::Instant;

/// Who a transfer is for; each class has its own share of the active limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferClass {
    /// A client's upload or download.
    Client,
    /// Handoff, anti-entropy and read repair.
    Repair,
    /// Extra copies of hot objects.
    HotCopy,
}

impl TransferClass {
    /// Every class, in the order of the per-class arrays ([`AdmissionConfig::weights`],
    /// [`AdmissionStats`]).
    pub const ALL: [TransferClass; 3] = [
        TransferClass::Client,
        TransferClass::Repair,
        TransferClass::HotCopy,
    ];

    /// The class's name in metrics labels and errors: `client`, `repair`, `hot_copy`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransferClass::Client => "client",
            TransferClass::Repair => "repair",
            TransferClass::HotCopy => "hot_copy",
        }
    }

    /// The class's position in the per-class arrays.
    pub fn index(self) -> usize {
        match self {
            TransferClass::Client => 0,
            TransferClass::Repair => 1,
            TransferClass::HotCopy => 2,
        }
    }
}

impl std::fmt::Display for TransferClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The limits of [`Admission`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Transfers running at once on the node, all classes together (`max_active_transfers`,
    /// default 64).
    pub max_active: usize,
    /// Weights of client, repair and hot-copy transfers (default 50/25/25).
    pub weights: [u32; 3],
    /// Waiters in the queue, all classes together (`max_queued`, default 1024; 0 fails at
    /// once when the limit is reached).
    pub max_queued: usize,
    /// How long a request may wait (`queue_timeout_ms`, default 30 s).
    pub queue_timeout: Duration,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            max_active: 64,
            weights: [50, 25, 25],
            max_queued: 1024,
            queue_timeout: Duration::from_secs(30),
        }
    }
}

impl AdmissionConfig {
    /// The longest `queue_timeout` accepted.
    pub const MAX_QUEUE_TIMEOUT: Duration = Duration::from_secs(3600);

    /// Checks the limits; the error names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_active == 0 {
            return Err("max_active must be at least 1".to_string());
        }
        if self.weights.iter().all(|&w| w == 0) {
            return Err("weights must not all be 0".to_string());
        }
        if self.queue_timeout > Self::MAX_QUEUE_TIMEOUT {
            return Err(format!(
                "queue_timeout must be at most 1 h (got {} ms)",
                self.queue_timeout.as_millis()
            ));
        }
        Ok(())
    }

    /// Each class's share of `max_active`: `max_active × weight / Σweights`, at least 1 when
    /// the weight is not 0. (The shares may add up to a little more than `max_active` after
    /// rounding up; the total limit still holds.)
    pub fn shares(&self) -> [usize; 3] {
        let sum: u128 = self.weights.iter().map(|&w| u128::from(w)).sum();
        let mut out = [0usize; 3];
        for (share, &w) in out.iter_mut().zip(&self.weights) {
            if w > 0 && sum > 0 {
                let s = self.max_active as u128 * u128::from(w) / sum;
                *share = usize::try_from(s).unwrap_or(usize::MAX).max(1);
            }
        }
        out
    }

    /// The configuration [`Admission::new`] runs with: `max_active` at least 1, equal
    /// weights if all are 0, `queue_timeout` at most 1 h.
    fn sanitized(mut self) -> Self {
        self.max_active = self.max_active.max(1);
        if self.weights.iter().all(|&w| w == 0) {
            self.weights = [1, 1, 1];
        }
        self.queue_timeout = self.queue_timeout.min(Self::MAX_QUEUE_TIMEOUT);
        self
    }
}

/// A transfer was refused: the queue was full, or the wait timed out. HTTP 503 with
/// `Retry-After`; on RESP `-TRYAGAIN ` followed by this error's text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "too_many_transfers class={class} active={active} queued={queued} limit={limit} retry_after_ms={retry_after_ms}"
)]
pub struct TooManyTransfers {
    /// The refused request's class.
    pub class: TransferClass,
    /// Transfers running on the node (all classes) when it was refused.
    pub active: usize,
    /// Requests waiting on the node (all classes) when it was refused.
    pub queued: usize,
    /// The node's `max_active`.
    pub limit: usize,
    /// When to try again (see the module's documentation for the estimate).
    pub retry_after_ms: u64,
}

/// Counters for the `blob_*` metrics; per-class arrays are indexed by
/// [`TransferClass::index`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    /// Transfers running (`blob_active{class}`).
    pub active: [usize; 3],
    /// Requests waiting (`blob_queued{class}`).
    pub queued: [usize; 3],
    /// Requests refused with [`TooManyTransfers`] (`blob_rejected_total{class}`).
    pub rejected_total: [u64; 3],
    /// Requests granted a slot, at once or after waiting.
    pub admitted_total: [u64; 3],
    /// Time granted requests spent waiting, summed, in µs (`blob_queue_wait_ms`).
    pub queue_wait_us_total: u64,
}

struct Waiter {
    seq: u64,
    since: Instant,
    tx: oneshot::Sender<()>,
}

struct State {
    active: [usize; 3],
    /// Per class, ascending `seq`.
    queues: [VecDeque<Waiter>; 3],
    next_seq: u64,
    rejected_total: [u64; 3],
    admitted_total: [u64; 3],
    queue_wait_us_total: u64,
    /// EWMA of how long permits were held, in µs; `None` until the first release.
    hold_ewma_us: Option<f64>,
}

struct Inner {
    cfg: AdmissionConfig,
    shares: [usize; 3],
    state: Mutex<State>,
}

/// Admission control of a node's transfers. Cloning is cheap and shares the limits.
#[derive(Clone)]
pub struct Admission {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("cfg", &self.inner.cfg)
            .field("stats", &self.stats())
            .finish()
    }
}

/// A granted transfer slot; dropping it releases the slot to the next waiter.
#[must_use = "the slot is released as soon as the permit is dropped"]
pub struct TransferPermit {
    inner: Arc<Inner>,
    class: TransferClass,
    since: Instant,
}

impl std::fmt::Debug for TransferPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferPermit")
            .field("class", &self.class)
            .finish()
    }
}

impl TransferPermit {
    /// The class the slot was granted to.
    pub fn class(&self) -> TransferClass {
        self.class
    }
}

impl Drop for TransferPermit {
    fn drop(&mut self) {
        let held_us = self.since.elapsed().as_micros() as f64;
        let mut st = self.inner.state.lock();
        let c = self.class.index();
        st.active[c] = st.active[c].saturating_sub(1);
        st.hold_ewma_us = Some(match st.hold_ewma_us {
            None => held_us,
            Some(avg) => avg + (held_us - avg) / 8.0,
        });
        self.inner.dispatch(&mut st);
    }
}

impl State {
    fn total_active(&self) -> usize {
        self.active.iter().sum()
    }

    fn total_queued(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    /// Removes waiter `seq` of class `c`; false when it is no longer queued (it was granted).
    fn remove_waiter(&mut self, c: usize, seq: u64) -> bool {
        match self.queues[c].binary_search_by_key(&seq, |w| w.seq) {
            Ok(i) => {
                self.queues[c].remove(i);
                true
            }
            Err(_) => false,
        }
    }
}

impl Inner {
    /// Whether a new request of class `c` may run now (rules in the module docs).
    fn admissible_now(&self, st: &State, c: usize) -> bool {
        if st.total_active() >= self.cfg.max_active || !st.queues[c].is_empty() {
            return false;
        }
        st.active[c] < self.shares[c]
            || (0..3).all(|d| d == c || st.queues[d].is_empty() || st.active[d] >= self.shares[d])
    }

    /// Hands free slots to waiters: classes below their share first, then the others; the
    /// earliest arrival among them.
    fn dispatch(&self, st: &mut State) {
        while st.total_active() < self.cfg.max_active {
            let head = |st: &State, under: bool| {
                (0..3)
                    .filter(|&c| !under || st.active[c] < self.shares[c])
                    .filter_map(|c| st.queues[c].front().map(|w| (w.seq, c)))
                    .min()
                    .map(|(_, c)| c)
            };
            let Some(c) = head(st, true).or_else(|| head(st, false)) else {
                return;
            };
            let Some(w) = st.queues[c].pop_front() else {
                return;
            };
            st.active[c] += 1;
            st.admitted_total[c] += 1;
            let waited = w.since.elapsed().as_micros();
            st.queue_wait_us_total = st
                .queue_wait_us_total
                .saturating_add(u64::try_from(waited).unwrap_or(u64::MAX));
            // The waiter's receiver lives as long as its entry in the queue: whoever drops the
            // receiver first removes the entry under this lock, so the send cannot fail.
            let _ = w.tx.send(());
        }
    }

    fn reject(&self, st: &mut State, class: TransferClass) -> TooManyTransfers {
        st.rejected_total[class.index()] += 1;
        let active = st.total_active();
        let queued = st.total_queued();
        let estimate_ms = match st.hold_ewma_us {
            Some(hold_us) => hold_us * (queued as f64 + 1.0) / self.cfg.max_active as f64 / 1000.0,
            None => self.cfg.queue_timeout.as_millis() as f64 / active.max(1) as f64,
        };
        TooManyTransfers {
            class,
            active,
            queued,
            limit: self.cfg.max_active,
            // `as` saturates (and maps NaN to 0) before the clamp.
            retry_after_ms: (estimate_ms.ceil() as u64).clamp(1, 60_000),
        }
    }
}

/// Removes a waiter whose `admit` future ended without taking its permit (cancelled), or
/// releases the slot granted to it meanwhile.
struct WaitGuard {
    inner: Arc<Inner>,
    class: TransferClass,
    seq: u64,
    armed: bool,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut st = self.inner.state.lock();
        let c = self.class.index();
        if !st.remove_waiter(c, self.seq) {
            // Granted concurrently: give the slot back.
            st.active[c] = st.active[c].saturating_sub(1);
        }
        // Either way the queue changed: a class below its share that stopped waiting may let
        // another class borrow.
        self.inner.dispatch(&mut st);
    }
}

impl Admission {
    /// Admission control with these limits. An invalid configuration (see
    /// [`AdmissionConfig::validate`]) is made valid rather than refused: `max_active` 0
    /// becomes 1, all-zero weights become equal, and the timeout is capped at 1 h.
    pub fn new(cfg: AdmissionConfig) -> Admission {
        let cfg = cfg.sanitized();
        let shares = cfg.shares();
        Admission {
            inner: Arc::new(Inner {
                cfg,
                shares,
                state: Mutex::new(State {
                    active: [0; 3],
                    queues: Default::default(),
                    next_seq: 0,
                    rejected_total: [0; 3],
                    admitted_total: [0; 3],
                    queue_wait_us_total: 0,
                    hold_ewma_us: None,
                }),
            }),
        }
    }

    /// The limits in force.
    pub fn config(&self) -> &AdmissionConfig {
        &self.inner.cfg
    }

    /// Each class's share of the active limit.
    pub fn shares(&self) -> [usize; 3] {
        self.inner.shares
    }

    /// Waits for a transfer slot of `class`: at once when the rules allow, otherwise in the
    /// class's FIFO for at most `queue_timeout`. Fails with [`TooManyTransfers`] when the
    /// queue is full or the wait times out. Cancellation-safe.
    pub async fn admit(&self, class: TransferClass) -> Result<TransferPermit, TooManyTransfers> {
        let c = class.index();
        let permit = || TransferPermit {
            inner: self.inner.clone(),
            class,
            since: Instant::now(),
        };
        let (seq, rx) = {
            let mut st = self.inner.state.lock();
            if self.inner.admissible_now(&st, c) {
                st.active[c] += 1;
                st.admitted_total[c] += 1;
                return Ok(permit());
            }
            if st.total_queued() >= self.inner.cfg.max_queued {
                return Err(self.inner.reject(&mut st, class));
            }
            let seq = st.next_seq;
            st.next_seq += 1;
            let (tx, rx) = oneshot::channel();
            st.queues[c].push_back(Waiter {
                seq,
                since: Instant::now(),
                tx,
            });
            (seq, rx)
        };
        let mut guard = WaitGuard {
            inner: self.inner.clone(),
            class,
            seq,
            armed: true,
        };
        let granted = matches!(
            tokio::time::timeout(self.inner.cfg.queue_timeout, rx).await,
            Ok(Ok(()))
        );
        guard.armed = false;
        if granted {
            return Ok(permit());
        }
        let mut st = self.inner.state.lock();
        if st.remove_waiter(c, seq) {
            self.inner.dispatch(&mut st);
            Err(self.inner.reject(&mut st, class))
        } else {
            // Granted just as the wait ran out: take it.
            Ok(permit())
        }
    }

    /// The current counters.
    pub fn stats(&self) -> AdmissionStats {
        let st = self.inner.state.lock();
        AdmissionStats {
            active: st.active,
            queued: [st.queues[0].len(), st.queues[1].len(), st.queues[2].len()],
            rejected_total: st.rejected_total,
            admitted_total: st.admitted_total,
            queue_wait_us_total: st.queue_wait_us_total,
        }
    }
}

/// A cap on the bytes a node has in flight (`max_inflight_bytes`, spec §7). Reserving waits
/// while the cap is reached — backpressure: the caller stops reading its socket — and never
/// fails. Cloning is cheap and shares the cap.
///
/// Caps up to 4 GiB are counted in bytes; above that in units of `ceil(max / (2³² − 1))`
/// bytes (a reservation is rounded up to whole units). A reservation larger than the cap is
/// clamped to the cap, so it waits for everything else to finish instead of deadlocking.
#[derive(Debug, Clone)]
pub struct InflightBytes {
    sem: Arc<Semaphore>,
    unit: u64,
    units: u32,
    max: u64,
}

/// Bytes reserved in an [`InflightBytes`]; released when dropped.
#[derive(Debug)]
#[must_use = "the bytes are released as soon as the permit is dropped"]
pub struct InflightPermit {
    _permit: OwnedSemaphorePermit,
    bytes: u64,
}

impl InflightPermit {
    /// The bytes reserved (after clamping to the cap).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Moves `n` of this permit's bytes (at most all of them) into a permit of their own;
    /// `None` once this permit holds no bytes. Lets one reservation cover several buffers.
    pub fn split(&mut self, n: u64) -> Option<InflightPermit> {
        if self.bytes == 0 {
            return None;
        }
        let n = n.min(self.bytes);
        let held = self._permit.num_permits();
        // Units in proportion, rounded up, and all of them for the last bytes.
        let units = if n == self.bytes {
            held
        } else {
            let unit = self.bytes.div_ceil(held.max(1) as u64).max(1);
            usize::try_from(n.div_ceil(unit)).unwrap_or(held).min(held)
        };
        let permit = self._permit.split(units)?;
        self.bytes -= n;
        Some(InflightPermit {
            _permit: permit,
            bytes: n,
        })
    }
}

impl InflightBytes {
    /// A cap of `max_bytes` in flight (0 is taken as 1).
    pub fn new(max_bytes: u64) -> InflightBytes {
        let max = max_bytes.max(1);
        let unit = max.div_ceil(u64::from(u32::MAX));
        let units = u32::try_from(max / unit).unwrap_or(u32::MAX);
        InflightBytes {
            sem: Arc::new(Semaphore::new(units as usize)),
            unit,
            units,
            max,
        }
    }

    /// Reserves `n` bytes (clamped to the cap), waiting while they are not free. Waiters are
    /// served in order, so a large reservation is not starved by small ones.
    pub async fn reserve(&self, n: u64) -> InflightPermit {
        let n = n.min(self.max);
        let units = u32::try_from(n.div_ceil(self.unit))
            .unwrap_or(u32::MAX)
            .min(self.units);
        loop {
            // The semaphore is never closed, so this only fails in theory; retrying keeps the
            // "never errors" promise without a panic.
            if let Ok(permit) = self.sem.clone().acquire_many_owned(units).await {
                return InflightPermit {
                    _permit: permit,
                    bytes: n,
                };
            }
            tokio::task::yield_now().await;
        }
    }

    /// Bytes reserved now (rounded up to whole units for caps above 4 GiB).
    pub fn in_use(&self) -> u64 {
        let free = u64::try_from(self.sem.available_permits()).unwrap_or(u64::MAX);
        (u64::from(self.units).saturating_sub(free) * self.unit).min(self.max)
    }

    /// The cap in bytes.
    pub fn max(&self) -> u64 {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Poll;
    use tokio::task::JoinSet;

    const CLIENT: TransferClass = TransferClass::Client;
    const REPAIR: TransferClass = TransferClass::Repair;
    const HOT: TransferClass = TransferClass::HotCopy;

    fn cfg(max_active: usize, max_queued: usize) -> AdmissionConfig {
        AdmissionConfig {
            max_active,
            max_queued,
            ..AdmissionConfig::default()
        }
    }

    /// Polls a future once; `Some` if it finished.
    async fn poll_once<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            Poll::Ready(match Pin::new(&mut *f).poll(cx) {
                Poll::Ready(v) => Some(v),
                Poll::Pending => None,
            })
        })
        .await
    }

    /// Lets spawned tasks run until they block.
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    #[test]
    fn class_names_and_serde() {
        assert_eq!(CLIENT.as_str(), "client");
        assert_eq!(HOT.to_string(), "hot_copy");
        assert_eq!(serde_json::to_string(&HOT).unwrap(), "\"hot_copy\"");
        assert_eq!(
            serde_json::from_str::<TransferClass>("\"repair\"").unwrap(),
            REPAIR
        );
        for (i, c) in TransferClass::ALL.into_iter().enumerate() {
            assert_eq!(c.index(), i);
        }
    }

    #[test]
    fn config_defaults_validation_and_shares() {
        let d = AdmissionConfig::default();
        assert_eq!(d.validate(), Ok(()));
        assert_eq!(d.shares(), [32, 16, 16]);
        assert_eq!(d.queue_timeout, Duration::from_secs(30));
        let bad = AdmissionConfig {
            max_active: 0,
            ..d.clone()
        };
        assert!(bad.validate().unwrap_err().contains("max_active"));
        let bad = AdmissionConfig {
            weights: [0; 3],
            ..d.clone()
        };
        assert!(bad.validate().unwrap_err().contains("weights"));
        let bad = AdmissionConfig {
            queue_timeout: Duration::from_secs(3601),
            ..d.clone()
        };
        assert!(bad.validate().unwrap_err().contains("queue_timeout"));
        assert_eq!(
            AdmissionConfig {
                max_active: 1,
                ..d.clone()
            }
            .shares(),
            [1, 1, 1]
        );
        assert_eq!(
            AdmissionConfig {
                weights: [1, 0, 0],
                ..d.clone()
            }
            .shares(),
            [64, 0, 0]
        );
        let big = AdmissionConfig {
            weights: [u32::MAX; 3],
            max_active: usize::MAX,
            ..d
        };
        assert_eq!(big.shares(), [usize::MAX / 3; 3]);
        // An invalid configuration still yields a working admission.
        let a = Admission::new(AdmissionConfig {
            max_active: 0,
            weights: [0; 3],
            ..cfg(0, 0)
        });
        assert_eq!(a.config().max_active, 1);
        assert_eq!(a.shares(), [1, 1, 1]);
    }

    #[test]
    fn error_text() {
        let e = TooManyTransfers {
            class: CLIENT,
            active: 64,
            queued: 1024,
            limit: 64,
            retry_after_ms: 1000,
        };
        assert_eq!(
            e.to_string(),
            "too_many_transfers class=client active=64 queued=1024 limit=64 retry_after_ms=1000"
        );
    }

    /// Spec invariant 5: with limit L, queue Q and L+Q+X concurrent requests, exactly L run at
    /// once, Q wait, the X others fail with `TooManyTransfers`, and every queued one runs.
    #[tokio::test(start_paused = true)]
    async fn invariant_5_limit_queue_reject() {
        const L: usize = 8;
        const Q: usize = 16;
        const X: usize = 5;
        let adm = Admission::new(cfg(L, Q));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let mut tasks = JoinSet::new();
        for i in 0..L + Q + X {
            let (adm, running, peak) = (adm.clone(), running.clone(), peak.clone());
            let class = TransferClass::ALL[i % 3];
            tasks.spawn(async move {
                let permit = adm.admit(class).await?;
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                drop(permit);
                Ok::<(), TooManyTransfers>(())
            });
        }
        settle().await;
        let s = adm.stats();
        assert_eq!(s.active.iter().sum::<usize>(), L);
        assert_eq!(s.queued.iter().sum::<usize>(), Q);
        assert_eq!(s.rejected_total.iter().sum::<u64>(), X as u64);
        let (mut ok, mut rejected) = (0, 0);
        while let Some(r) = tasks.join_next().await {
            match r.unwrap() {
                Ok(()) => ok += 1,
                Err(e) => {
                    assert_eq!((e.limit, e.active, e.queued), (L, L, Q));
                    assert!((1..=60_000).contains(&e.retry_after_ms));
                    rejected += 1;
                }
            }
        }
        assert_eq!((ok, rejected), (L + Q, X));
        assert_eq!(peak.load(Ordering::SeqCst), L);
        let s = adm.stats();
        assert_eq!(s.active, [0; 3]);
        assert_eq!(s.queued, [0; 3]);
        assert_eq!(s.admitted_total.iter().sum::<u64>(), (L + Q) as u64);
        // Q waiters waited 10 ms (the first wave) or 20 ms (the second).
        assert_eq!(s.queue_wait_us_total, 8 * 10_000 + 8 * 20_000);
    }

    /// Experiment E4's shape: 768 transfers against 480 active and a queue of 1024 all
    /// complete, 480 at once; with a queue of 0 the failures are only `TooManyTransfers`.
    #[tokio::test(start_paused = true)]
    async fn e4_768_transfers() {
        for (queue, want_ok) in [(1024, 768), (0, 480)] {
            let adm = Admission::new(cfg(480, queue));
            let peak = Arc::new(AtomicUsize::new(0));
            let running = Arc::new(AtomicUsize::new(0));
            let mut tasks = JoinSet::new();
            for i in 0..768u64 {
                let (adm, peak, running) = (adm.clone(), peak.clone(), running.clone());
                tasks.spawn(async move {
                    let _p = adm.admit(CLIENT).await?;
                    peak.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100 + i % 50)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok::<(), TooManyTransfers>(())
                });
            }
            let mut ok = 0;
            while let Some(r) = tasks.join_next().await {
                ok += usize::from(r.unwrap().is_ok());
            }
            assert_eq!(ok, want_ok);
            assert_eq!(peak.load(Ordering::SeqCst), 480);
            assert_eq!(adm.stats().rejected_total[0], 768 - want_ok as u64);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn queue_zero_fails_at_once() {
        let adm = Admission::new(cfg(2, 0));
        let _a = adm.admit(CLIENT).await.unwrap();
        let _b = adm.admit(REPAIR).await.unwrap();
        let e = adm.admit(HOT).await.unwrap_err();
        assert_eq!((e.class, e.active, e.queued, e.limit), (HOT, 2, 0, 2));
        // No release yet: queue_timeout / active.
        assert_eq!(e.retry_after_ms, 15_000);
    }

    #[tokio::test(start_paused = true)]
    async fn wait_times_out() {
        let adm = Admission::new(cfg(1, 10));
        let held = adm.admit(CLIENT).await.unwrap();
        let start = Instant::now();
        let e = adm.admit(REPAIR).await.unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_secs(30));
        assert_eq!((e.class, e.active, e.queued, e.limit), (REPAIR, 1, 0, 1));
        let s = adm.stats();
        assert_eq!(s.queued, [0; 3]);
        assert_eq!(s.rejected_total, [0, 1, 0]);
        drop(held);
        assert_eq!(adm.stats().active, [0; 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_follows_observed_hold_time() {
        let adm = Admission::new(cfg(2, 0));
        let p = adm.admit(CLIENT).await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        drop(p);
        let _a = adm.admit(CLIENT).await.unwrap();
        let _b = adm.admit(CLIENT).await.unwrap();
        // 400 ms per transfer × (0 queued + 1) / 2 slots.
        assert_eq!(adm.admit(CLIENT).await.unwrap_err().retry_after_ms, 200);
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_are_served_in_arrival_order() {
        let adm = Admission::new(cfg(1, 100));
        let held = adm.admit(CLIENT).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = JoinSet::new();
        for i in 0..20usize {
            let (a, order) = (adm.clone(), order.clone());
            tasks.spawn(async move {
                let _p = a.admit(TransferClass::ALL[i % 3]).await.unwrap();
                order.lock().push(i);
                tokio::time::sleep(Duration::from_millis(1)).await;
            });
            // Make sure task i is queued before task i + 1 arrives.
            settle().await;
            assert_eq!(adm.stats().queued.iter().sum::<usize>(), i + 1);
        }
        drop(held);
        while tasks.join_next().await.is_some() {}
        assert_eq!(*order.lock(), (0..20).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn idle_share_is_lent_and_given_back() {
        // Shares 2 / 1 / 1.
        let adm = Admission::new(cfg(4, 10));
        assert_eq!(adm.shares(), [2, 1, 1]);
        // Nobody else wants slots: clients borrow all four.
        let mut clients: Vec<_> = Vec::new();
        for _ in 0..4 {
            clients.push(adm.admit(CLIENT).await.unwrap());
        }
        let mut late_client = Box::pin(adm.admit(CLIENT));
        assert!(poll_once(&mut late_client).await.is_none());
        let mut repair = Box::pin(adm.admit(REPAIR));
        assert!(poll_once(&mut repair).await.is_none());
        assert_eq!(adm.stats().queued, [1, 1, 0]);
        // The freed slot goes to repair (below its share) although the client came first.
        drop(clients.pop());
        let r = poll_once(&mut repair)
            .await
            .expect("repair admitted")
            .unwrap();
        assert!(poll_once(&mut late_client).await.is_none());
        assert_eq!(adm.stats().active, [3, 1, 0]);
        // Next free slot: no class below its share waits, so the client borrows again.
        drop(clients.pop());
        let c = poll_once(&mut late_client)
            .await
            .expect("client admitted")
            .unwrap();
        assert_eq!(adm.stats().active, [3, 1, 0]);
        // Repair is at its share now; hot copies, below theirs, get the next slot ahead of a
        // client that arrived first.
        let mut client2 = Box::pin(adm.admit(CLIENT));
        assert!(poll_once(&mut client2).await.is_none());
        let mut hot = Box::pin(adm.admit(HOT));
        assert!(poll_once(&mut hot).await.is_none());
        drop(r);
        let h = poll_once(&mut hot)
            .await
            .expect("hot copy admitted")
            .unwrap();
        assert!(poll_once(&mut client2).await.is_none());
        drop((c, h, clients));
        assert!(poll_once(&mut client2).await.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn borrowing_waits_for_classes_below_their_share() {
        // Shares 1 / 1 / 1 of 3: hot copies borrow the idle repair share; once repair waits,
        // the next free slot is its, ahead of a hot copy that asked first.
        let adm = Admission::new(AdmissionConfig {
            weights: [1, 1, 1],
            ..cfg(3, 10)
        });
        let c1 = adm.admit(CLIENT).await.unwrap();
        let h1 = adm.admit(HOT).await.unwrap();
        let h2 = adm.admit(HOT).await.unwrap();
        let mut h3 = Box::pin(adm.admit(HOT));
        assert!(poll_once(&mut h3).await.is_none());
        let mut repair = Box::pin(adm.admit(REPAIR));
        assert!(poll_once(&mut repair).await.is_none());
        drop(h1);
        let r = poll_once(&mut repair)
            .await
            .expect("repair admitted")
            .unwrap();
        assert!(poll_once(&mut h3).await.is_none());
        assert_eq!(adm.stats().active, [1, 1, 1]);
        // No class below its share waits now: the hot copy borrows the client's slot.
        drop(c1);
        let h3 = poll_once(&mut h3)
            .await
            .expect("hot copy admitted")
            .unwrap();
        assert_eq!(adm.stats().active, [0, 1, 2]);
        drop((h2, h3, r));
        assert_eq!(adm.stats().active, [0; 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_waiter_leaves_no_ghost() {
        let adm = Admission::new(cfg(1, 1));
        let held = adm.admit(CLIENT).await.unwrap();
        // Give up after 1 ms: the waiter is dropped while queued.
        assert!(
            tokio::time::timeout(Duration::from_millis(1), adm.admit(REPAIR))
                .await
                .is_err()
        );
        assert_eq!(adm.stats().queued, [0; 3]);
        // Its queue place is free again, and the release goes to a live waiter.
        let mut next = Box::pin(adm.admit(HOT));
        assert!(poll_once(&mut next).await.is_none());
        drop(held);
        let p = next.await.unwrap();
        assert_eq!(adm.stats().active, [0, 0, 1]);
        drop(p);
        assert_eq!(adm.stats().active, [0; 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn slot_granted_to_a_cancelled_waiter_is_not_leaked() {
        let adm = Admission::new(cfg(1, 4));
        let held = adm.admit(CLIENT).await.unwrap();
        let mut first = Box::pin(adm.admit(CLIENT));
        assert!(poll_once(&mut first).await.is_none());
        let mut second = Box::pin(adm.admit(REPAIR));
        assert!(poll_once(&mut second).await.is_none());
        // The release grants the slot to `first`, which is dropped before it sees the grant.
        drop(held);
        assert_eq!(adm.stats().active, [1, 0, 0]);
        drop(first);
        // The slot passed on to `second` instead of leaking.
        assert_eq!(adm.stats().active, [0, 1, 0]);
        assert_eq!(adm.stats().queued, [0; 3]);
        let p = poll_once(&mut second)
            .await
            .expect("second admitted")
            .unwrap();
        drop(p);
        assert_eq!(adm.stats().active, [0; 3]);
        drop(adm.admit(HOT).await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn many_cancellations_under_load_keep_counts_exact() {
        let adm = Admission::new(cfg(4, 64));
        let mut tasks = JoinSet::new();
        for i in 0..200u64 {
            let adm = adm.clone();
            tasks.spawn(async move {
                // Every third request gives up after a short wait.
                let patience = if i % 3 == 0 { i % 7 + 1 } else { 10_000 };
                let r = tokio::time::timeout(
                    Duration::from_millis(patience),
                    adm.admit(TransferClass::ALL[(i % 3) as usize]),
                )
                .await;
                if let Ok(Ok(_p)) = r {
                    tokio::time::sleep(Duration::from_millis(i % 5 + 1)).await;
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let s = adm.stats();
        assert_eq!(s.active, [0; 3]);
        assert_eq!(s.queued, [0; 3]);
        // All four slots are still there.
        let mut permits = Vec::new();
        for _ in 0..4 {
            permits.push(adm.admit(CLIENT).await.unwrap());
        }
        assert_eq!(adm.stats().active, [4, 0, 0]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn inflight_bytes_never_exceed_the_cap() {
        const MAX: u64 = 256 * 1024;
        let inflight = InflightBytes::new(MAX);
        let held = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut tasks = JoinSet::new();
        for i in 0..768u64 {
            let (inflight, held, peak) = (inflight.clone(), held.clone(), peak.clone());
            tasks.spawn(async move {
                // Sizes up to 2× the cap: the big ones are clamped.
                let want = (i * 7919) % (2 * MAX) + 1;
                let p = inflight.reserve(want).await;
                assert_eq!(p.bytes(), want.min(MAX));
                let now = held.fetch_add(p.bytes(), Ordering::SeqCst) + p.bytes();
                peak.fetch_max(now, Ordering::SeqCst);
                assert!(now <= MAX);
                assert!(inflight.in_use() <= inflight.max());
                tokio::task::yield_now().await;
                held.fetch_sub(p.bytes(), Ordering::SeqCst);
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= MAX);
        assert_eq!(inflight.in_use(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn inflight_bytes_applies_backpressure() {
        let inflight = InflightBytes::new(100);
        let a = inflight.reserve(60).await;
        assert_eq!(inflight.in_use(), 60);
        let mut b = Box::pin(inflight.reserve(50));
        assert!(poll_once(&mut b).await.is_none());
        drop(a);
        let b = poll_once(&mut b).await.expect("reserved after the release");
        assert_eq!((b.bytes(), inflight.in_use()), (50, 50));
        drop(b);
        // A zero cap is one byte; a huge cap counts in units.
        let tiny = InflightBytes::new(0);
        assert_eq!(tiny.reserve(10).await.bytes(), 1);
        let huge = InflightBytes::new(u64::MAX);
        let p = huge.reserve(u64::MAX).await;
        assert_eq!(huge.in_use(), u64::MAX);
        drop(p);
        let p = huge.reserve(1).await;
        assert!(huge.in_use() >= 1 && huge.in_use() <= huge.max());
        drop(p);
        assert_eq!(huge.in_use(), 0);
        assert_eq!(huge.reserve(0).await.bytes(), 0);
    }

    #[tokio::test]
    async fn a_split_permit_releases_its_bytes_on_its_own() {
        let inflight = InflightBytes::new(100);
        let mut whole = inflight.reserve(90).await;
        let a = whole.split(40).expect("40 of 90");
        let b = whole.split(40).expect("40 of 50");
        assert_eq!((a.bytes(), b.bytes(), whole.bytes()), (40, 40, 10));
        drop(a);
        assert_eq!(inflight.in_use(), 50);
        let c = whole.split(40).expect("the last 10");
        assert_eq!(c.bytes(), 10);
        assert!(whole.split(1).is_none());
        drop((b, c, whole));
        assert_eq!(inflight.in_use(), 0);
    }
}
