//! The transport abstraction node logic talks to: [`Transport`] (send, request), [`Inbox`]
//! (receive) and [`Responder`] (answer), over a pluggable [`Wire`].
//!
//! Shape: request/response multiplexing, timeouts and inbound dispatch are implemented once,
//! here, in a concrete [`Transport`]. What differs between the in-process network, TCP and the
//! WAN emulator is only how an [`Envelope`] travels to a peer; that is the object-safe [`Wire`]
//! trait, and decorators (the WAN emulator, test filters) wrap one wire in another. Node code
//! therefore holds a plain, cloneable, non-generic-over-transport `Transport<M>`.
//!
//! Guarantees:
//! - `send` and `request` never block on the network: each hop has a bounded queue and a full
//!   queue is reported as [`NetError::Overloaded`]; nothing grows without bound.
//! - A request completes exactly once: with the peer's response, [`NetError::Timeout`], or the
//!   error of the connection it was on (promptly when that connection drops). A late or
//!   duplicated response is discarded.
//! - Inbound requests and one-way messages reach the node through a bounded [`Inbox`];
//!   responses are matched to their request directly and never wait behind the inbox.
//! - A message a node sends to itself is delivered locally, without the wire.

use crate::NetError;
use crate::envelope::{Envelope, Kind, Message};
use crate::payload::Payload;
use meridian_core::NodeId;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// A boxed, sendable future (what [`Wire::transmit_wait`] returns, keeping the trait
/// object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How envelopes travel from the local node towards a peer: the one thing a transport
/// implementation (or a decorator such as the WAN emulator) provides.
///
/// Implementations deliver at most once per `transmit` (a decorator may add duplicates on
/// purpose) and keep per-destination FIFO order unless they document otherwise.
pub trait Wire<M>: Send + Sync + 'static {
    /// Hands `env` to the network for delivery to `to` without waiting. Fails with
    /// [`NetError::Overloaded`] when a queue on the way is full, [`NetError::Unreachable`] when
    /// the peer is known to be unreachable, [`NetError::Closed`] after shutdown.
    fn transmit(&self, to: NodeId, env: Envelope<M>) -> Result<(), NetError>;

    /// Like [`Wire::transmit`], but waits for room in a full queue instead of failing (used by
    /// decorators forwarding delayed messages, so that back-pressure propagates).
    fn transmit_wait(&self, to: NodeId, env: Envelope<M>) -> BoxFuture<'_, Result<(), NetError>>;
}

/// A message received by a node: a request (with a [`Responder`]) or a one-way message.
#[derive(Debug)]
pub struct Incoming<M> {
    /// The sending node.
    pub from: NodeId,
    /// The message.
    pub body: M,
    /// For a request, the handle to answer it with; `None` for a one-way message. Dropping it
    /// without answering leaves the requester to time out.
    pub reply: Option<Responder<M>>,
    /// Bulk bytes sent beside the message, if any.
    pub payload: Option<Payload>,
}

/// The receiving side of a node's transport: requests and one-way messages, in arrival order.
/// Its capacity bounds how much unprocessed inbound work a node can accumulate; when it is full,
/// in-process senders get [`NetError::Overloaded`] and TCP connections stop reading (so the
/// sender's queue fills and it gets `Overloaded`).
#[derive(Debug)]
pub struct Inbox<M> {
    rx: mpsc::Receiver<Incoming<M>>,
}

impl<M> Inbox<M> {
    /// The next inbound message; `None` once the transport is shut down and drained.
    pub async fn recv(&mut self) -> Option<Incoming<M>> {
        self.rx.recv().await
    }

    /// The next inbound message if one is already waiting.
    pub fn try_recv(&mut self) -> Option<Incoming<M>> {
        self.rx.try_recv().ok()
    }

    /// How many messages are waiting.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    /// Whether no message is waiting.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

/// The handle for answering one request. Answering consumes it, so a request is answered at
/// most once.
pub struct Responder<M> {
    core: Weak<Core<M>>,
    to: NodeId,
    id: u64,
}

impl<M> std::fmt::Debug for Responder<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("to", &self.to)
            .field("id", &self.id)
            .finish()
    }
}

impl<M: Message> Responder<M> {
    /// The node that asked.
    pub fn peer(&self) -> NodeId {
        self.to
    }

    /// Sends `body` as the answer. Like [`Transport::send`], it does not wait: a full queue is
    /// [`NetError::Overloaded`].
    pub fn respond(self, body: M) -> Result<(), NetError> {
        self.respond_with(body, None)
    }

    /// Sends `body` as the answer, with `payload` beside it (on a bulk connection where the
    /// transport has them).
    pub fn respond_with(self, body: M, payload: Option<Payload>) -> Result<(), NetError> {
        let core = self.core.upgrade().ok_or(NetError::Closed)?;
        let env = Envelope {
            payload,
            ..Envelope::new(Kind::Response { id: self.id }, core.local, body)
        };
        core.route(self.to, env)
    }
}

/// A node's endpoint: send one-way messages and make requests to other nodes. Cheap to clone;
/// all clones share the same pending-request table and wire.
pub struct Transport<M> {
    core: Arc<Core<M>>,
}

impl<M> Clone for Transport<M> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.clone(),
        }
    }
}

impl<M> std::fmt::Debug for Transport<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("local", &self.core.local)
            .finish_non_exhaustive()
    }
}

impl<M: Message> Transport<M> {
    /// Assembles a transport for `local` from a wire, with an inbox of `inbox_capacity`
    /// messages. The wire is told where to deliver inbound envelopes through the returned
    /// [`Dispatcher`]; transports in this crate do this for you.
    pub fn assemble(
        local: NodeId,
        wire: Arc<dyn Wire<M>>,
        inbox_capacity: usize,
    ) -> (Self, Inbox<M>, Dispatcher<M>) {
        let (tx, rx) = mpsc::channel(inbox_capacity.max(1));
        let core = Arc::new(Core {
            local,
            next_id: AtomicU64::new(1),
            pending: Mutex::new(BTreeMap::new()),
            inbox: tx,
            inbox_capacity: inbox_capacity.max(1),
            wire: RwLock::new(wire),
            closed: AtomicBool::new(false),
        });
        let dispatcher = Dispatcher {
            core: Arc::downgrade(&core),
        };
        (Self { core }, Inbox { rx }, dispatcher)
    }

    /// This node's id.
    pub fn local(&self) -> NodeId {
        self.core.local
    }

    /// Wraps the outgoing wire in a decorator, e.g. `t.layer(|w| wan.wrap(w))`. Applies to every
    /// clone of this transport and to responders created afterwards; do it before traffic starts.
    pub fn layer(&self, f: impl FnOnce(Arc<dyn Wire<M>>) -> Arc<dyn Wire<M>>) {
        let mut wire = self.core.wire.write();
        *wire = f(wire.clone());
    }

    /// Sends a one-way message to `to` without waiting. `Ok` means the message was accepted by
    /// the first queue on its way, not that it arrived.
    pub fn send(&self, to: NodeId, body: M) -> Result<(), NetError> {
        self.send_with(to, body, None)
    }

    /// [`Transport::send`] with `payload` beside the message.
    pub fn send_with(&self, to: NodeId, body: M, payload: Option<Payload>) -> Result<(), NetError> {
        self.core.check_open()?;
        let env = Envelope {
            payload,
            ..Envelope::new(Kind::OneWay, self.core.local, body)
        };
        self.core.route(to, env)
    }

    /// Sends a request to `to` and waits up to `timeout` for its response. Fails with
    /// [`NetError::Timeout`] when nothing arrives in time, and earlier with
    /// [`NetError::Unreachable`] / [`NetError::Closed`] when the connection drops. Dropping the
    /// future abandons the request (a late response is then discarded).
    pub async fn request(&self, to: NodeId, body: M, timeout: Duration) -> Result<M, NetError> {
        self.request_with(to, body, None, timeout)
            .await
            .map(|(body, _)| body)
    }

    /// [`Transport::request`] with `payload` beside the request; returns the response and the
    /// payload that came with it.
    pub async fn request_with(
        &self,
        to: NodeId,
        body: M,
        payload: Option<Payload>,
        timeout: Duration,
    ) -> Result<(M, Option<Payload>), NetError> {
        let core = &self.core;
        core.check_open()?;
        let id = core.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        core.pending.lock().insert(id, Pending { peer: to, tx });
        let guard = PendingGuard { core, id };
        let env = Envelope {
            payload,
            ..Envelope::new(Kind::Request { id }, core.local, body)
        };
        core.route(to, env)?;
        let result = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(NetError::Closed),
            Err(_) => Err(NetError::Timeout {
                peer: to,
                after: timeout,
            }),
        };
        drop(guard);
        result
    }

    /// How many requests are waiting for a response.
    pub fn pending_requests(&self) -> usize {
        self.core.pending.lock().len()
    }

    /// Marks the transport closed: every pending request fails with [`NetError::Closed`] and
    /// later calls fail with it too.
    pub fn close(&self) {
        self.core.close();
    }
}

/// The inbound side of an assembled transport, held by the wire implementation: it hands
/// received envelopes to the node (responses to their waiting request, the rest to the inbox).
/// Holds the transport weakly, so a wire never keeps a node alive.
pub struct Dispatcher<M> {
    core: Weak<Core<M>>,
}

impl<M> Clone for Dispatcher<M> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.clone(),
        }
    }
}

impl<M: Message> Dispatcher<M> {
    /// Delivers `env` without waiting; a full inbox is [`NetError::Overloaded`] (reported to the
    /// in-process sender).
    pub fn deliver(&self, env: Envelope<M>) -> Result<(), NetError> {
        self.core()?.deliver(env)
    }

    /// Delivers `env`, waiting for room in the inbox (TCP readers use this, so a slow node
    /// stops reading its sockets and back-pressure reaches the senders).
    pub async fn deliver_wait(&self, env: Envelope<M>) -> Result<(), NetError> {
        let core = self.core()?;
        match core.accept(env) {
            Accepted::Done => Ok(()),
            Accepted::Inbound(incoming) => core
                .inbox
                .send(incoming)
                .await
                .map_err(|_| NetError::Closed),
        }
    }

    /// Fails every request waiting on `peer` with `error` (call this when the connection it
    /// was sent on drops).
    pub fn fail_peer(&self, peer: NodeId, error: NetError) {
        if let Some(core) = self.core.upgrade() {
            core.fail_peer(peer, error);
        }
    }

    /// See [`Transport::close`].
    pub fn close(&self) {
        if let Some(core) = self.core.upgrade() {
            core.close();
        }
    }

    /// The node this dispatcher delivers to.
    pub fn local(&self) -> Option<NodeId> {
        self.core.upgrade().map(|c| c.local)
    }

    fn core(&self) -> Result<Arc<Core<M>>, NetError> {
        let core = self.core.upgrade().ok_or(NetError::Closed)?;
        core.check_open()?;
        Ok(core)
    }
}

/// A response and the payload that came with it.
type Answer<M> = (M, Option<Payload>);

struct Pending<M> {
    peer: NodeId,
    tx: oneshot::Sender<Result<Answer<M>, NetError>>,
}

/// Removes a request's pending entry however its future ends (completion, timeout, drop).
struct PendingGuard<'a, M> {
    core: &'a Core<M>,
    id: u64,
}

impl<M> Drop for PendingGuard<'_, M> {
    fn drop(&mut self) {
        self.core.pending.lock().remove(&self.id);
    }
}

enum Accepted<M> {
    Done,
    Inbound(Incoming<M>),
}

pub(crate) struct Core<M> {
    local: NodeId,
    next_id: AtomicU64,
    pending: Mutex<BTreeMap<u64, Pending<M>>>,
    inbox: mpsc::Sender<Incoming<M>>,
    inbox_capacity: usize,
    wire: RwLock<Arc<dyn Wire<M>>>,
    closed: AtomicBool,
}

impl<M: Message> Core<M> {
    fn check_open(&self) -> Result<(), NetError> {
        if self.closed.load(Ordering::Acquire) {
            Err(NetError::Closed)
        } else {
            Ok(())
        }
    }

    /// Sends an outgoing envelope: to ourselves directly, to others over the wire. An empty
    /// payload is no payload (TCP could not tell them apart).
    fn route(self: &Arc<Self>, to: NodeId, mut env: Envelope<M>) -> Result<(), NetError> {
        if env.payload.as_ref().is_some_and(|p| p.is_empty()) {
            env.payload = None;
        }
        if to == self.local {
            return self.deliver(env);
        }
        let wire = self.wire.read().clone();
        wire.transmit(to, env)
    }

    fn deliver(self: &Arc<Self>, env: Envelope<M>) -> Result<(), NetError> {
        match self.accept(env) {
            Accepted::Done => Ok(()),
            Accepted::Inbound(incoming) => self.inbox.try_send(incoming).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => NetError::Overloaded {
                    peer: self.local,
                    queue: "inbox",
                    capacity: self.inbox_capacity,
                },
                mpsc::error::TrySendError::Closed(_) => NetError::Unreachable {
                    peer: self.local,
                    reason: "the node no longer reads its inbox".into(),
                },
            }),
        }
    }

    fn accept(self: &Arc<Self>, env: Envelope<M>) -> Accepted<M> {
        match env.kind {
            Kind::Response { id } => {
                let mut pending = self.pending.lock();
                // Only the peer the request went to may answer it.
                if pending.get(&id).is_some_and(|p| p.peer == env.from) {
                    let p = pending.remove(&id).expect("checked above");
                    drop(pending);
                    let _ = p.tx.send(Ok((env.body, env.payload)));
                } else {
                    tracing::trace!(node = %self.local, from = %env.from, id, "late or unknown response dropped");
                }
                Accepted::Done
            }
            Kind::Request { id } => Accepted::Inbound(Incoming {
                from: env.from,
                body: env.body,
                reply: Some(Responder {
                    core: Arc::downgrade(self),
                    to: env.from,
                    id,
                }),
                payload: env.payload,
            }),
            Kind::OneWay => Accepted::Inbound(Incoming {
                from: env.from,
                body: env.body,
                reply: None,
                payload: env.payload,
            }),
        }
    }

    fn fail_peer(&self, peer: NodeId, error: NetError) {
        let failed: Vec<Pending<M>> = {
            let mut pending = self.pending.lock();
            let ids: Vec<u64> = pending
                .iter()
                .filter(|(_, p)| p.peer == peer)
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| pending.remove(id)).collect()
        };
        for p in failed {
            let _ = p.tx.send(Err(error.clone()));
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let all = std::mem::take(&mut *self.pending.lock());
        for (_, p) in all {
            let _ = p.tx.send(Err(NetError::Closed));
        }
    }
}
