//! The in-process transport: a [`MemNetwork`] hub that nodes join to get their
//! [`Transport`] and [`Inbox`], so a whole cluster can live in one process (embedded clusters,
//! the simulator, most tests).
//!
//! Guarantees:
//! - Deterministic: delivery is a synchronous hand-off into the receiver's bounded inbox, done
//!   in the sender's call; no threads or tasks are spawned, and no hash-map order is involved.
//!   Under paused tokio time (and the WAN emulator's seeded RNG) a run replays exactly.
//! - FIFO per sender/receiver pair, exactly once (before any decorator).
//! - A full inbox makes the sender's `send`/`request` fail with [`NetError::Overloaded`] at
//!   once; a node that is not joined (or has [`MemNetwork::leave`]-d) is
//!   [`NetError::Unreachable`], and requests waiting on it fail with that error when it leaves.

use crate::NetError;
use crate::envelope::{Envelope, Message};
use crate::transport::{BoxFuture, Dispatcher, Inbox, Transport, Wire};
use meridian_core::NodeId;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Default inbox capacity of an in-process node, in messages.
pub const DEFAULT_INBOX: usize = 1024;

/// A hub connecting in-process nodes. Cheap to clone; clones are the same network.
pub struct MemNetwork<M> {
    hub: Arc<Hub<M>>,
}

impl<M> Clone for MemNetwork<M> {
    fn clone(&self) -> Self {
        Self {
            hub: self.hub.clone(),
        }
    }
}

struct Hub<M> {
    inbox_capacity: usize,
    nodes: Mutex<BTreeMap<NodeId, Dispatcher<M>>>,
}

impl<M: Message> Default for MemNetwork<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: Message> MemNetwork<M> {
    /// An empty network whose nodes get inboxes of [`DEFAULT_INBOX`] messages.
    pub fn new() -> Self {
        Self::with_inbox_capacity(DEFAULT_INBOX)
    }

    /// An empty network whose nodes get inboxes of `capacity` messages.
    pub fn with_inbox_capacity(capacity: usize) -> Self {
        Self {
            hub: Arc::new(Hub {
                inbox_capacity: capacity.max(1),
                nodes: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// Joins `node` to the network. Fails with [`NetError::Config`] if a node with that id is
    /// already joined (leave first to simulate a restart).
    pub fn join(&self, node: NodeId) -> Result<(Transport<M>, Inbox<M>), NetError> {
        let mut nodes = self.hub.nodes.lock();
        if nodes.get(&node).is_some_and(|d| d.local().is_some()) {
            return Err(NetError::Config(format!(
                "{node} is already joined to this in-process network"
            )));
        }
        let wire: Arc<dyn Wire<M>> = Arc::new(MemWire {
            hub: self.hub.clone(),
        });
        let (transport, inbox, dispatcher) =
            Transport::assemble(node, wire, self.hub.inbox_capacity);
        nodes.insert(node, dispatcher);
        Ok((transport, inbox))
    }

    /// Takes `node` off the network, as if it crashed: messages to it fail with
    /// [`NetError::Unreachable`], other nodes' requests waiting on it fail promptly with the same
    /// error, and its own transport is closed. Returns whether it was joined.
    pub fn leave(&self, node: NodeId) -> bool {
        let (gone, others): (Option<Dispatcher<M>>, Vec<Dispatcher<M>>) = {
            let mut nodes = self.hub.nodes.lock();
            let gone = nodes.remove(&node);
            (gone, nodes.values().cloned().collect())
        };
        let Some(gone) = gone else { return false };
        gone.close();
        for other in others {
            other.fail_peer(
                node,
                NetError::Unreachable {
                    peer: node,
                    reason: "the node left the in-process network".into(),
                },
            );
        }
        true
    }

    /// The joined nodes, in id order.
    pub fn nodes(&self) -> Vec<NodeId> {
        self.hub.nodes.lock().keys().copied().collect()
    }
}

/// Holds the hub strongly (the hub only holds nodes weakly, through their dispatchers), so the
/// network lives as long as any of its transports.
struct MemWire<M> {
    hub: Arc<Hub<M>>,
}

impl<M: Message> MemWire<M> {
    fn target(&self, to: NodeId) -> Result<Dispatcher<M>, NetError> {
        let nodes = self.hub.nodes.lock();
        nodes
            .get(&to)
            .cloned()
            .ok_or_else(|| NetError::Unreachable {
                peer: to,
                reason: "not joined to the in-process network".into(),
            })
    }
}

fn unreachable_if_closed(to: NodeId, e: NetError) -> NetError {
    match e {
        NetError::Closed => NetError::Unreachable {
            peer: to,
            reason: "the node has shut down".into(),
        },
        other => other,
    }
}

impl<M: Message> Wire<M> for MemWire<M> {
    fn transmit(&self, to: NodeId, env: Envelope<M>) -> Result<(), NetError> {
        self.target(to)?
            .deliver(env)
            .map_err(|e| unreachable_if_closed(to, e))
    }

    fn transmit_wait(&self, to: NodeId, env: Envelope<M>) -> BoxFuture<'_, Result<(), NetError>> {
        Box::pin(async move {
            let target = self.target(to)?;
            target
                .deliver_wait(env)
                .await
                .map_err(|e| unreachable_if_closed(to, e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    /// Answers every request with `body + 1000` after `delay(body)`.
    fn serve(mut inbox: Inbox<u64>, delay: fn(u64) -> Duration) {
        tokio::spawn(async move {
            while let Some(m) = inbox.recv().await {
                if let Some(reply) = m.reply {
                    tokio::spawn(async move {
                        tokio::time::sleep(delay(m.body)).await;
                        let _ = reply.respond(m.body + 1000);
                    });
                }
            }
        });
    }

    #[tokio::test(start_paused = true)]
    async fn request_response_and_one_way() {
        let net = MemNetwork::<u64>::new();
        let (a, _ia) = net.join(n(1)).unwrap();
        let (b, mut ib) = net.join(n(2)).unwrap();
        a.send(n(2), 7).unwrap();
        let m = ib.recv().await.unwrap();
        assert_eq!((m.from, m.body, m.reply.is_none()), (n(1), 7, true));
        serve(ib, |_| Duration::ZERO);
        assert_eq!(a.request(n(2), 5, Duration::from_secs(1)).await, Ok(1005));
        assert_eq!(b.local(), n(2));
        assert_eq!(a.pending_requests(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_complete_out_of_order() {
        let net = MemNetwork::<u64>::new();
        let (a, _ia) = net.join(n(1)).unwrap();
        let (_b, ib) = net.join(n(2)).unwrap();
        // Later requests are answered sooner.
        serve(ib, |body| Duration::from_millis(100 - body));
        let mut set = tokio::task::JoinSet::new();
        for i in 0..50u64 {
            let a = a.clone();
            set.spawn(async move {
                let r = a.request(n(2), i, Duration::from_secs(1)).await.unwrap();
                (i, r, tokio::time::Instant::now())
            });
        }
        let mut done = Vec::new();
        while let Some(r) = set.join_next().await {
            done.push(r.unwrap());
        }
        for (i, r, _) in &done {
            assert_eq!(*r, i + 1000);
        }
        done.sort_by_key(|(_, _, at)| *at);
        assert_eq!(done.first().unwrap().0, 49, "the fastest answer came first");
    }

    #[tokio::test(start_paused = true)]
    async fn unanswered_request_times_out_and_is_forgotten() {
        let net = MemNetwork::<u64>::new();
        let (a, _ia) = net.join(n(1)).unwrap();
        let (_b, _ib) = net.join(n(2)).unwrap(); // never answers
        let after = Duration::from_millis(250);
        let r = a.request(n(2), 1, after).await;
        assert_eq!(r, Err(NetError::Timeout { peer: n(2), after }));
        assert_eq!(a.pending_requests(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_peer_is_unreachable_at_once() {
        let net = MemNetwork::<u64>::new();
        let (a, _ia) = net.join(n(1)).unwrap();
        let r = a.request(n(9), 1, Duration::from_secs(3600)).await;
        assert!(matches!(r, Err(NetError::Unreachable { peer, .. }) if peer == n(9)));
        assert!(matches!(a.send(n(9), 1), Err(NetError::Unreachable { .. })));
    }

    #[tokio::test(start_paused = true)]
    async fn leaving_fails_waiting_requests_promptly_and_rejoin_works() {
        let net = MemNetwork::<u64>::new();
        let (a, _ia) = net.join(n(1)).unwrap();
        let (b, _ib) = net.join(n(2)).unwrap();
        let start = tokio::time::Instant::now();
        let a2 = a.clone();
        let waiting =
            tokio::spawn(async move { a2.request(n(2), 1, Duration::from_secs(3600)).await });
        tokio::task::yield_now().await;
        assert!(net.leave(n(2)));
        let r = waiting.await.unwrap();
        assert!(matches!(r, Err(NetError::Unreachable { .. })), "{r:?}");
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "failed without waiting for the timeout"
        );
        assert_eq!(b.send(n(1), 1), Err(NetError::Closed));
        assert!(net.join(n(1)).is_err(), "n1 is still joined");
        let (_b2, ib2) = net.join(n(2)).unwrap();
        serve(ib2, |_| Duration::ZERO);
        assert_eq!(a.request(n(2), 1, Duration::from_secs(1)).await, Ok(1001));
        assert_eq!(net.nodes(), vec![n(1), n(2)]);
    }

    #[tokio::test(start_paused = true)]
    async fn stalled_receiver_yields_overloaded_not_memory_growth() {
        let net = MemNetwork::<u64>::with_inbox_capacity(8);
        let (a, _ia) = net.join(n(1)).unwrap();
        let (_b, ib) = net.join(n(2)).unwrap(); // never read
        for i in 0..8 {
            a.send(n(2), i).unwrap();
        }
        assert_eq!(
            a.send(n(2), 8),
            Err(NetError::Overloaded {
                peer: n(2),
                queue: "inbox",
                capacity: 8
            })
        );
        assert_eq!(ib.len(), 8);
    }

    #[tokio::test(start_paused = true)]
    async fn responses_do_not_wait_behind_a_full_inbox() {
        let net = MemNetwork::<u64>::with_inbox_capacity(1);
        let (a, _ia) = net.join(n(1)).unwrap();
        let (b, mut ib) = net.join(n(2)).unwrap();
        // Fill a's own inbox: responses to a must still get through.
        b.send(n(1), 0).unwrap();
        let a2 = a.clone();
        let req = tokio::spawn(async move { a2.request(n(2), 3, Duration::from_secs(1)).await });
        let m = ib.recv().await.unwrap();
        m.reply.unwrap().respond(m.body * 2).unwrap();
        assert_eq!(req.await.unwrap(), Ok(6));
    }

    #[tokio::test(start_paused = true)]
    async fn self_send_is_local() {
        let net = MemNetwork::<u64>::new();
        let (a, ia) = net.join(n(1)).unwrap();
        serve(ia, |_| Duration::ZERO);
        assert_eq!(a.request(n(1), 1, Duration::from_secs(1)).await, Ok(1001));
    }
}
