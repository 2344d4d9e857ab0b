//! Meridian's node-to-node networking.
//!
//! Node logic talks to a [`Transport`] (send one-way messages, make requests with timeouts) and
//! reads an [`Inbox`] (requests carry a [`Responder`]). Underneath, a [`Wire`] moves
//! [`Envelope`]s: in-process ([`mem::MemNetwork`]), over TCP ([`tcp::start`]), and through the
//! WAN emulator ([`wan::WanEmulator`]), a decorator that applies per-link latency, jitter, loss,
//! duplication, reordering, bandwidth and partitions from a seeded RNG.
//!
//! ```
//! use meridian_core::{DcId, NodeId};
//! use meridian_net::wan::{LinkConfig, Placement, WanConfig, WanEmulator};
//! use meridian_net::MemNetwork;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), meridian_net::NetError> {
//! // Two nodes in one process, in two DCs 100 ms (round trip) apart.
//! let wan = WanEmulator::new(WanConfig {
//!     seed: 7,
//!     inter_dc: LinkConfig::wan(Duration::from_millis(100), 0.0),
//!     nodes: vec![
//!         Placement { node: NodeId(1), dc: DcId(0) },
//!         Placement { node: NodeId(2), dc: DcId(1) },
//!     ],
//!     ..WanConfig::default()
//! })?;
//! let net = MemNetwork::<String>::new();
//! let (t1, _inbox1) = net.join(NodeId(1))?;
//! let (t2, mut inbox2) = net.join(NodeId(2))?;
//! t1.layer(|w| wan.wrap(w));
//! t2.layer(|w| wan.wrap(w));
//!
//! // Node 2 answers requests.
//! tokio::spawn(async move {
//!     while let Some(m) = inbox2.recv().await {
//!         if let Some(reply) = m.reply {
//!             let _ = reply.respond(format!("hello, {}", m.from));
//!         }
//!     }
//! });
//! let start = tokio::time::Instant::now();
//! let answer = t1.request(NodeId(2), "hi".into(), Duration::from_secs(1)).await?;
//! assert_eq!(answer, "hello, n1");
//! assert_eq!(start.elapsed(), Duration::from_millis(100));
//! # Ok(())
//! # }
//! ```
//!
//! Over TCP, [`tcp::start`] takes the node's listener, an [`tcp::AddressBook`] of its peers and
//! a shutdown token, and returns the same `(Transport, Inbox)` pair.
//!
//! Modules, lowest first: [`frame`] (length-delimited frames), [`auth`] (the cluster secret
//! peer links prove), [`envelope`] (postcard message encoding and the TCP handshake), [`payload`] (bulk bytes beside a message), [`transport`] (the abstraction), [`mem`], [`tcp`], [`wan`].
//! Beside them, [`tls`] (PEM files → rustls configurations, reloadable: what every TLS
//! listener of the node and, with `tls-cluster`, its peer links use) and [`tls_certs`] (a private CA and the certificates it issues).

pub mod auth;
pub mod envelope;
pub mod error;
pub mod frame;
pub mod mem;
pub mod payload;
mod peer_stream;
pub mod tcp;
pub mod tls;
pub mod tls_certs;
pub mod transport;
pub mod wan;

pub use auth::ClusterSecret;
pub use envelope::{Envelope, Kind, Message};
pub use error::NetError;
pub use frame::FrameCodec;
pub use mem::MemNetwork;
pub use payload::{FileSlice, Payload, PayloadData};
pub use transport::{Dispatcher, Inbox, Incoming, Responder, Transport, Wire};
