//! Pub/sub fan-out across the cluster: a message published on one node is sent, one-way, to
//! every other member, whose front end hands it to its own subscribers.
//!
//! The protocol knows nothing of subscribers: a front end installs a [`Sink`] once
//! ([`Node::set_pubsub_sink`]) and publishes with [`Node::publish_to_peers`] after delivering
//! locally. Guarantees: each member receives a message at most once per publish (one-way
//! sends, never retried); messages from one node reach another in the order it published
//! them (the transport is in order per link); a node without a sink drops what arrives; a
//! message larger than [`MAX_MESSAGE`] in all is neither sent nor delivered.

use crate::kernel::{Incoming, Msg, Node, Protocol};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// The largest channel plus message a node sends or accepts from a peer (Redis's default
/// `proto-max-bulk-len`).
pub const MAX_MESSAGE: usize = 512 << 20;

/// The pub/sub protocol's messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PubSubMsg {
    /// A message published on the sending node.
    Publish {
        /// A shard channel (SPUBLISH) rather than a channel (PUBLISH).
        shard: bool,
        /// The channel.
        channel: Bytes,
        /// The message.
        message: Bytes,
    },
}

/// Where a node delivers messages published elsewhere: `(shard, channel, message)`.
pub type Sink = Arc<dyn Fn(bool, &[u8], &[u8]) + Send + Sync>;

/// The protocol's state: the front end's sink, once installed.
#[derive(Default)]
pub struct PubSub {
    sink: OnceLock<Sink>,
}

impl std::fmt::Debug for PubSub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PubSub")
            .field("sink", &self.sink.get().is_some())
            .finish()
    }
}

impl Protocol for PubSub {
    type Msg = PubSubMsg;

    fn handle(&self, _node: &Node, _req: Incoming, msg: PubSubMsg) {
        let PubSubMsg::Publish {
            shard,
            channel,
            message,
        } = msg;
        if channel.len().saturating_add(message.len()) > MAX_MESSAGE {
            return;
        }
        if let Some(sink) = self.sink.get() {
            sink(shard, &channel, &message);
        }
    }
}

impl Node {
    fn pubsub_state(&self) -> &PubSub {
        self.protocol::<PubSub>()
    }

    /// Installs where messages published on other nodes are delivered; a second call
    /// changes nothing.
    pub fn set_pubsub_sink(&self, sink: Sink) {
        let _ = self.pubsub_state().sink.set(sink);
    }

    /// Sends a message published here to every other member (see the module docs).
    pub fn publish_to_peers(&self, shard: bool, channel: &[u8], message: &[u8]) {
        if channel.len().saturating_add(message.len()) > MAX_MESSAGE {
            return;
        }
        let me = self.id();
        let peers: Vec<_> = {
            let v = self.kernel().view.read();
            v.meta
                .members
                .iter()
                .map(|m| m.id)
                .filter(|&id| id != me)
                .collect()
        };
        if peers.is_empty() {
            return;
        }
        let msg = PubSubMsg::Publish {
            shard,
            channel: Bytes::copy_from_slice(channel),
            message: Bytes::copy_from_slice(message),
        };
        for peer in peers {
            let _ = self.kernel().transport.send(peer, Msg::PubSub(msg.clone()));
        }
    }
}
