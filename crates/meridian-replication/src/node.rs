//! The wiring of a node: the one module that knows every protocol. It builds the kernel,
//! builds each protocol's state and registers it with the kernel as a value, routes each
//! [`Msg`] variant to the protocol that owns it, and starts every protocol's background tasks.
//!
//! The kernel ([`crate::kernel`]) names no protocol: it holds their states in a registry
//! (read by [`Node::protocol`] through each protocol's own accessor) and calls the router this
//! module gives it. Protocols never import this module.
//!
//! Guarantees:
//! - **Determinism.** The node's RNG is drawn in a fixed order: at construction anti-entropy's
//!   round-robin start, then timeline's catch-up start, then read balancing's seed; at
//!   [`Node::spawn`] each task's start offset, in the order the tasks are listed there (a new
//!   protocol's draws go last, so existing seeds replay unchanged).
//! - **Static dispatch.** Routing is one `match` on the outer variant of [`Msg`] and a direct
//!   call of that protocol's [`Protocol::handle`]: no boxing, no dynamic call per protocol.
//!
//! Adding a protocol inside this crate: a module with its message enum (in its
//! `messages.rs`, wrapped by one variant of [`Msg`]), its state with `impl Protocol`, and an
//! accessor `impl Node { fn x_state(&self) -> &X { self.protocol::<X>() } }`; here, one
//! `register` in [`protocol_states`], one arm in [`route`] and, if it has background work, one
//! task in [`Node::spawn`]. No other protocol's code and no kernel code changes.

use crate::anti_entropy::{Aae, AaeTrees};
use crate::balance::Balance;
use crate::blob::Blob;
use crate::eventual::Eventual;
use crate::handoff::Handoff;
use crate::kernel::{Incoming, Kernel, Msg, Node, NodeConfig, Protocol, Protocols};
use crate::membership::ClusterMeta;
use crate::pubsub::PubSub;
use crate::timeline::{Timeline, TlStore};
use crate::txn::Txn;
use meridian_core::Clock;
use meridian_net::{Inbox, Transport};
use rand::Rng;
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

impl Node {
    /// A node storing its objects (and hints) in `engine`, stamping writes with `clock`,
    /// talking over `transport`, and following the cluster metadata `meta` (layout, members,
    /// buckets) until a newer version arrives. Call [`Node::spawn`] to start serving. A node
    /// started to join a cluster gets a version-0 document ([`ClusterMeta::joining`]) and
    /// serves no client request until a member sends it the cluster's.
    ///
    /// # Panics
    /// If `meta` has no member record for `config.id`, or its buckets do not validate
    /// (documents from [`ClusterMeta::new`] always do).
    pub fn new(
        config: NodeConfig,
        engine: Arc<dyn meridian_storage::Engine>,
        clock: Arc<dyn Clock>,
        transport: Transport<Msg>,
        meta: ClusterMeta,
    ) -> Node {
        let kernel = Kernel::new(config, engine, clock, transport, meta);
        attach_anti_entropy_trees(&kernel);
        let protocols = protocol_states(&kernel);
        Node::assemble(kernel, protocols, route)
    }

    /// Starts the node's background tasks: serving the inbox (the kernel), heartbeats (the
    /// kernel), hinted and ownership handoff, anti-entropy, timeline propagation and catch-up,
    /// transaction recovery, read balancing, the expiry sweep and `maxmemory` eviction.
    /// They stop when `shutdown` is cancelled; the handle completes then.
    pub fn spawn(&self, inbox: Inbox<Msg>, shutdown: CancellationToken) -> JoinHandle<()> {
        let (a, b, c, d) = (self.clone(), self.clone(), self.clone(), self.clone());
        let (e, f, g) = (self.clone(), self.clone(), self.clone());
        let (h, i, j, k) = (self.clone(), self.clone(), self.clone(), self.clone());
        let s = shutdown;
        let (s1, s2, s3, s4, s5) = (s.clone(), s.clone(), s.clone(), s.clone(), s.clone());
        let (s6, s7, s8, s9, s10) = (s.clone(), s.clone(), s.clone(), s.clone(), s.clone());
        // Polled in this order, so the tasks draw their start offsets from the RNG in this
        // order: a new protocol's task goes last.
        tokio::spawn(async move {
            tokio::join!(
                a.serve(inbox, s1),
                b.heartbeats(s2),
                c.handoffs(s3),
                d.anti_entropy(s4),
                e.tl_streams(s5),
                f.tl_catch_up(s6),
                g.txn_recovery(s7),
                h.serve_read_queue(s8),
                i.balance_ticks(s9),
                j.expiry_sweep(s10),
                k.eviction(s)
            );
        })
    }
}

/// Builds the anti-entropy trees over what the store holds and attaches them to it, unless
/// anti-entropy is disabled. Nobody else can write through the node yet, so the scan and the
/// attach cannot miss a write.
fn attach_anti_entropy_trees(kernel: &Kernel) {
    let config = &kernel.cfg;
    if config.anti_entropy_interval.is_zero() {
        return;
    }
    let built = {
        let view = kernel.view.read();
        let held = crate::kernel::held(&view.meta.layout, config.id);
        AaeTrees::build(
            kernel.store.engine().as_ref(),
            config.anti_entropy_tree,
            view.meta.layout.ring(),
            held.iter().copied(),
            config.anti_entropy_scan_page,
        )
    };
    match built {
        Ok(t) => {
            kernel.store.attach_trees(Arc::new(t));
        }
        Err(e) => {
            tracing::error!(node = %config.id, error = %e, "anti-entropy trees not built; anti-entropy disabled");
        }
    }
}

/// Every protocol's state, built over `kernel` and registered as a value. The order of the
/// RNG draws (anti-entropy, then timeline, then balance) is part of a seed's replay.
fn protocol_states(kernel: &Kernel) -> Protocols {
    let config = &kernel.cfg;
    let (members, dc_nodes) = {
        let meta = &kernel.view.read().meta;
        let dc_nodes = meta.members.iter().filter(|m| m.dc == kernel.dc).count();
        (meta.members.len() as u32, dc_nodes as u32)
    };
    let mut rng = kernel.rng.lock();
    let aae = Aae::new(rng.random_range(0..1usize << 20));
    let tl_store = TlStore::new(kernel.store.engine().clone(), kernel.clock.clone())
        .with_marks(kernel.marks.clone());
    let tl = Timeline::new(tl_store, rng.random_range(0..1usize << 20));
    let balance = Balance::new(config, members, dc_nodes, rng.random_range(0..u64::MAX));
    drop(rng);
    let txn = Txn::new(
        kernel.store.engine().clone(),
        kernel.clock.now(),
        config.txn,
    );
    let mut protocols = Protocols::new();
    protocols.register(Eventual::default());
    protocols.register(Handoff::default());
    protocols.register(aae);
    protocols.register(tl);
    protocols.register(txn);
    protocols.register(balance);
    protocols.register(Blob::default());
    protocols.register(PubSub::default());
    protocols
}

/// Hands an incoming message to the protocol that owns it (the node's [`crate::kernel::Router`]).
fn route(node: &Node, req: Incoming, body: Msg) {
    match body {
        Msg::Kernel(m) => node.kernel().handle(node, req, m),
        Msg::Eventual(m) => node.protocol::<Eventual>().handle(node, req, m),
        Msg::Timeline(m) => node.protocol::<Timeline>().handle(node, req, m),
        Msg::Handoff(m) => node.protocol::<Handoff>().handle(node, req, m),
        Msg::Aae(m) => node.protocol::<Aae>().handle(node, req, m),
        Msg::Txn(m) => node.protocol::<Txn>().handle(node, req, m),
        Msg::Balance(m) => node.protocol::<Balance>().handle(node, req, m),
        Msg::Blob(m) => node.protocol::<Blob>().handle(node, req, m),
        Msg::PubSub(m) => node.protocol::<PubSub>().handle(node, req, m),
        Msg::Error(e) => req.unexpected(node, &e),
    }
}
