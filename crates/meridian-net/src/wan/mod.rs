//! The WAN emulator: a [`Wire`] decorator that delays, loses, duplicates, reorders and cuts
//! messages per link, faithful to experiments.md §5 (see [`model`] for the exact algorithm and
//! [`LinkConfig`] for the delay distribution).
//!
//! One [`WanEmulator`] is shared by every node of a process (`transport.layer(|w|
//! wan.wrap(w))` on each); its settings change at runtime through a [`WanControl`], affecting
//! messages sent afterwards. In multi-process deployments each process runs its own emulator on
//! its egress traffic.
//!
//! Guarantees:
//! - Deterministic: all randomness comes from ChaCha8 RNGs seeded from the configured seed;
//!   under paused tokio time the same seed and the same sends give the same delivery schedule.
//! - A later message on a connection (ordered node pair) is never delivered before an earlier
//!   one, except a message the datagram mode chose to reorder.
//! - Bounded: at most `max_in_flight` messages wait per connection; beyond that `send` fails
//!   with [`NetError::Overloaded`]. If the receiver's inbox is full at delivery time the
//!   connection waits (back-pressure), it does not drop.
//! - A cut link drops messages silently (requests then time out at the caller).
//!
//! Known limits:
//! - Tokio timers tick in whole milliseconds: a message is handed over at the first tick at or
//!   after its scheduled instant, so on the real clock every hop would gain up to 1 ms (a
//!   167 µs LAN hop would cost up to 1 ms). With [`WanConfig::real_time`] the timer is armed
//!   half a tick early, so a message goes at the tick nearest its due time (±½ ms, unbiased),
//!   and a message already due (sub-half-tick LAN delays) is handed over directly, without a
//!   timer (an expired timer would still wait for the driver's next tick). Under paused time timers are exact
//!   and `real_time` stays off. The schedule itself (what the model computes, and the order of
//!   deliveries) is exact either way.
//! - Partitions only drop (the spec's alternative, holding messages until the repair, is not
//!   implemented); they apply when a message is sent, not to messages already in flight.
//! - The bulk-transfer window limit (`min(B, socket_buffer / RTT)`, large-objects.md §6) is
//!   modelled per stream of payload-carrying messages, as a pacing of one buffer per RTT;
//!   TCP's slow start and loss recovery are not.

pub mod config;
pub mod model;

pub use config::{
    Cut, DcLink, DeliveryMode, LinkConfig, NodeLink, Placement, Scope, WanConfig, format_duration,
    parse_duration,
};
pub use model::{Plan, WanStats};

use crate::NetError;
use crate::envelope::{self, Envelope, Message};
use crate::transport::{BoxFuture, Wire};
use meridian_core::{DcId, NodeId};
use model::Model;
use parking_lot::Mutex;
use std::cmp::Ordering as CmpOrdering;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;

struct Shared {
    model: Mutex<Model>,
    seq: AtomicU64,
}

/// A WAN emulator instance: wrap each node's wire with it, steer it with [`WanControl`].
/// Cheap to clone; clones are the same emulator.
#[derive(Clone)]
pub struct WanEmulator {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WanEmulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WanEmulator").finish_non_exhaustive()
    }
}

impl WanEmulator {
    /// An emulator with `config` (validated first).
    pub fn new(config: WanConfig) -> Result<Self, NetError> {
        config.validate()?;
        Ok(Self {
            shared: Arc::new(Shared {
                model: Mutex::new(Model::new(&config)),
                seq: AtomicU64::new(0),
            }),
        })
    }

    /// The handle for changing the emulator's settings at runtime.
    pub fn control(&self) -> WanControl {
        WanControl {
            shared: self.shared.clone(),
        }
    }

    /// Wraps `inner` so every envelope it carries first crosses the emulated WAN. Must be
    /// called (and the result used) inside a tokio runtime: each connection gets a delivery
    /// task when it first carries a message.
    pub fn wrap<M: Message>(&self, inner: Arc<dyn Wire<M>>) -> Arc<dyn Wire<M>> {
        Arc::new(WanWire {
            shared: self.shared.clone(),
            inner,
            conns: Mutex::new(BTreeMap::new()),
        })
    }
}

/// Runtime control of a [`WanEmulator`]: links, placement, partitions, statistics. Changes
/// apply to messages sent afterwards; messages already in flight keep their schedule.
#[derive(Clone)]
pub struct WanControl {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WanControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WanControl").finish_non_exhaustive()
    }
}

impl WanControl {
    fn with<T>(&self, f: impl FnOnce(&mut Model) -> T) -> T {
        f(&mut self.shared.model.lock())
    }

    /// Sets the directed DC link `from → to`.
    pub fn set_dc_link(&self, from: DcId, to: DcId, link: LinkConfig) -> Result<(), NetError> {
        link.validate()?;
        self.with(|m| m.set_dc_link(from, to, link));
        Ok(())
    }

    /// Sets the DC link in both directions.
    pub fn set_dc_link_both(&self, a: DcId, b: DcId, link: LinkConfig) -> Result<(), NetError> {
        self.set_dc_link(a, b, link.clone())?;
        self.set_dc_link(b, a, link)
    }

    /// Overrides the link `from → to` for one node pair.
    pub fn set_node_link(
        &self,
        from: NodeId,
        to: NodeId,
        link: LinkConfig,
    ) -> Result<(), NetError> {
        link.validate()?;
        self.with(|m| m.set_node_link(from, to, Some(link)));
        Ok(())
    }

    /// Removes a node-pair override (the DC link applies again).
    pub fn clear_node_link(&self, from: NodeId, to: NodeId) {
        self.with(|m| m.set_node_link(from, to, None));
    }

    /// Sets the default link between nodes of the same DC.
    pub fn set_intra_dc(&self, link: LinkConfig) -> Result<(), NetError> {
        link.validate()?;
        self.with(|m| m.set_intra_dc(link));
        Ok(())
    }

    /// Sets the default link between DCs without their own entry.
    pub fn set_inter_dc(&self, link: LinkConfig) -> Result<(), NetError> {
        link.validate()?;
        self.with(|m| m.set_inter_dc(link));
        Ok(())
    }

    /// Sets the socket buffer of bulk connections (see [`WanConfig::bulk_buffer`]).
    pub fn set_bulk_buffer(&self, buffer: Option<usize>) {
        self.with(|m| m.set_bulk_buffer(buffer));
    }

    /// Switches between stream and datagram semantics.
    pub fn set_mode(&self, mode: DeliveryMode) {
        self.with(|m| m.set_mode(mode));
    }

    /// Places `node` in `dc` (nodes without a placement talk over ideal links).
    pub fn place(&self, node: NodeId, dc: DcId) {
        self.with(|m| m.place(node, dc));
    }

    /// Cuts `from → to` (one way). Returns whether the cut is new.
    pub fn cut(&self, from: Scope, to: Scope) -> bool {
        self.with(|m| m.cut(Cut { from, to }))
    }

    /// Cuts both directions between `a` and `b`.
    pub fn cut_both(&self, a: Scope, b: Scope) {
        self.cut(a, b);
        self.cut(b, a);
    }

    /// Cuts a node off from everyone, both ways.
    pub fn isolate(&self, node: NodeId) {
        self.cut_both(Scope::Node(node), Scope::Any);
    }

    /// Heals the one-way cut `from → to` (exactly that rule). Returns whether it existed.
    pub fn heal(&self, from: Scope, to: Scope) -> bool {
        self.with(|m| m.heal(Cut { from, to }))
    }

    /// Heals both directions between `a` and `b`.
    pub fn heal_both(&self, a: Scope, b: Scope) {
        self.heal(a, b);
        self.heal(b, a);
    }

    /// Heals every partition.
    pub fn heal_all(&self) {
        self.with(|m| m.heal_all());
    }

    /// Whether messages from `from` to `to` are currently dropped by a partition.
    pub fn is_cut(&self, from: NodeId, to: NodeId) -> bool {
        self.with(|m| m.is_cut(from, to))
    }

    /// What the emulator has done so far.
    pub fn stats(&self) -> WanStats {
        self.with(|m| m.stats())
    }

    /// The current settings (for a run's report).
    pub fn config(&self) -> WanConfig {
        self.with(|m| m.config())
    }
}

/// A message waiting on the emulated link, ordered by (delivery time, send order).
struct Scheduled<M> {
    at: Instant,
    seq: u64,
    env: Envelope<M>,
    _permit: OwnedSemaphorePermit,
}

impl<M> PartialEq for Scheduled<M> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<M> Eq for Scheduled<M> {}
impl<M> PartialOrd for Scheduled<M> {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl<M> Ord for Scheduled<M> {
    /// Reversed, so `BinaryHeap` pops the earliest first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

struct Conn<M> {
    tx: mpsc::UnboundedSender<Scheduled<M>>,
    permits: Arc<Semaphore>,
}

impl<M> Clone for Conn<M> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            permits: self.permits.clone(),
        }
    }
}

struct WanWire<M> {
    shared: Arc<Shared>,
    inner: Arc<dyn Wire<M>>,
    conns: Mutex<BTreeMap<(NodeId, NodeId), Conn<M>>>,
}

impl<M: Message> WanWire<M> {
    fn conn(&self, from: NodeId, to: NodeId) -> Conn<M> {
        let mut conns = self.conns.lock();
        conns
            .entry((from, to))
            .or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                let max = self.shared.model.lock().max_in_flight();
                let real_time = self.shared.model.lock().real_time();
                tokio::spawn(deliver_loop(to, rx, self.inner.clone(), real_time));
                Conn {
                    tx,
                    permits: Arc::new(Semaphore::new(max)),
                }
            })
            .clone()
    }

    fn overloaded(&self, to: NodeId) -> NetError {
        let mut model = self.shared.model.lock();
        model.count_overloaded();
        NetError::Overloaded {
            peer: to,
            queue: "WAN emulator link",
            capacity: model.max_in_flight(),
        }
    }

    fn schedule(&self, conn: &Conn<M>, to: NodeId, env: Envelope<M>, permit: OwnedSemaphorePermit) {
        let now = Instant::now();
        let plan = self.shared.model.lock().plan(
            env.from,
            to,
            || envelope::encoded_len(&env),
            env.payload.as_ref().map(|p| p.stream()),
            now,
        );
        let Plan::Deliver { at, copy } = plan else {
            return;
        };
        let duplicate = copy.and_then(|at2| {
            let permit = conn.permits.clone().try_acquire_owned().ok()?;
            let (mut copy, _) = envelope::encode(&env, usize::MAX)
                .and_then(|b| envelope::decode::<M>(&b))
                .ok()?;
            copy.payload = env.payload.clone();
            Some((at2, copy, permit))
        });
        let push = |at, env, permit| {
            let seq = self.shared.seq.fetch_add(1, Ordering::Relaxed);
            let _ = conn.tx.send(Scheduled {
                at,
                seq,
                env,
                _permit: permit,
            });
        };
        push(at, env, permit);
        if let Some((at2, copy, permit)) = duplicate {
            push(at2, copy, permit);
        }
    }
}

impl<M: Message> Wire<M> for WanWire<M> {
    fn transmit(&self, to: NodeId, env: Envelope<M>) -> Result<(), NetError> {
        let conn = self.conn(env.from, to);
        let permit = conn
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| self.overloaded(to))?;
        self.schedule(&conn, to, env, permit);
        Ok(())
    }

    fn transmit_wait(&self, to: NodeId, env: Envelope<M>) -> BoxFuture<'_, Result<(), NetError>> {
        Box::pin(async move {
            let conn = self.conn(env.from, to);
            let permit = conn
                .permits
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| NetError::Closed)?;
            self.schedule(&conn, to, env, permit);
            Ok(())
        })
    }
}

/// One connection's delivery task: holds its scheduled messages in time order and hands each
/// to the inner wire when due, waiting (not dropping) if the inner wire is full. Ends once the
/// wrapping wire is gone and everything scheduled has been delivered.
async fn deliver_loop<M: Message>(
    to: NodeId,
    mut rx: mpsc::UnboundedReceiver<Scheduled<M>>,
    inner: Arc<dyn Wire<M>>,
    real_time: bool,
) {
    let mut heap: BinaryHeap<Scheduled<M>> = BinaryHeap::new();
    let mut open = true;
    loop {
        if real_time {
            // A timer whose deadline has already passed still waits for the timer driver's
            // next turn (up to a whole tick): hand due messages over directly instead, after
            // taking in what arrived meanwhile so due-time order is kept.
            while open {
                match rx.try_recv() {
                    Ok(s) => heap.push(s),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => open = false,
                }
            }
            if heap
                .peek()
                .is_some_and(|s| timer_deadline(s.at, true) <= Instant::now())
            {
                let Scheduled { env, _permit, .. } = heap.pop().expect("peeked");
                if let Err(e) = inner.transmit_wait(to, env).await {
                    tracing::debug!(%to, error = %e, "WAN emulator could not deliver a message");
                }
                continue;
            }
        }
        let next = heap.peek().map(|s| timer_deadline(s.at, real_time));
        if !open && next.is_none() {
            return;
        }
        tokio::select! {
            biased;
            m = rx.recv(), if open => match m {
                Some(s) => heap.push(s),
                None => open = false,
            },
            () = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                let Scheduled { env, _permit, .. } = heap.pop().expect("peeked");
                if let Err(e) = inner.transmit_wait(to, env).await {
                    tracing::debug!(%to, error = %e, "WAN emulator could not deliver a message");
                }
            }
        }
    }
}

/// Tokio's timer resolution: a timer fires at the first tick at or after its deadline.
const TIMER_TICK: std::time::Duration = std::time::Duration::from_millis(1);

/// When to arm the timer for a message due at `at`. Under paused time timers are exact, so
/// `at` itself. On the real clock, half a tick earlier: the timer then fires at the tick
/// nearest `at` (within ±½ tick) instead of up to a whole tick late, and a message due within
/// half a tick is handed over at once. Order is kept either way: the heap still releases
/// messages in (due time, send order).
fn timer_deadline(at: Instant, real_time: bool) -> Instant {
    if real_time {
        at.checked_sub(TIMER_TICK / 2).unwrap_or(at)
    } else {
        at
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod timer_tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn real_time_arms_half_a_tick_early_and_paused_time_is_exact() {
        let now = Instant::now();
        let due = now + Duration::from_millis(100);
        assert_eq!(timer_deadline(due, false), due);
        assert_eq!(timer_deadline(due, true), due - Duration::from_micros(500));
        // A LAN hop shorter than half a tick is due "now" on the real clock: no timer wait.
        let lan = now + Duration::from_micros(167);
        assert!(timer_deadline(lan, true) <= now);
    }
}
