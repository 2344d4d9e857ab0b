//! The timestamp oracle of the TSO baseline (spec §4): the RPC served by one node, and the
//! two clients every node runs — `unbatched` (one RPC per timestamp) and `batched` (one RPC
//! in flight per node, carrying the count of every caller waiting meanwhile).
//!
//! The oracle is the lowest-numbered member of the bucket's `tso_dc` (default: the
//! lowest-numbered member of the cluster). It serves RPCs in arrival order, at most
//! `tso_max_rate` per second, and persists its bound (with fsync) before handing out a range
//! above it, so a restarted oracle starts above everything it served.

use super::Result;
use crate::kernel::{Msg, Node};
use meridian_core::{DcId, NodeId, Timestamp};
use meridian_txn::{TsoBatching, TsoServer, TxnError, TxnMsg, TxnProps};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a client waits for the oracle.
const ORACLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The oracle's state on the node that serves it, and the batched client's queue.
#[derive(Debug, Default)]
pub(crate) struct Oracle {
    server: Mutex<Option<TsoServer>>,
    batch: Mutex<Batch>,
}

#[derive(Debug, Default)]
struct Batch {
    in_flight: bool,
    waiters: Vec<oneshot::Sender<Result<Timestamp>>>,
}

impl Node {
    /// The node serving the oracle for a bucket with `props`: the lowest-numbered member of
    /// `tso_dc` (validated against the layout), else of the cluster. Every node computes the
    /// same one from the same metadata, so there is one oracle.
    pub fn oracle_node(&self, props: &TxnProps) -> NodeId {
        let v = self.kernel().view.read();
        let members = &v.meta.members;
        let lowest = members.iter().map(|m| m.id).min().unwrap_or(self.id());
        props
            .tso_dc
            .map(DcId)
            .and_then(|dc| members.iter().filter(|m| m.dc == dc).map(|m| m.id).min())
            .unwrap_or(lowest)
    }

    /// Serves an RPC for `count` timestamps (on the oracle node).
    pub(crate) async fn oracle_serve(
        &self,
        count: u32,
        max_rate: Option<u32>,
    ) -> Result<(u64, u32)> {
        let t = self.txn_state();
        let serve_at = {
            let mut s = t.oracle.server.lock();
            let server = match s.as_mut() {
                Some(server) => server,
                None => s.insert(TsoServer::recover(t.store.tso_bound()?, max_rate)),
            };
            server.set_max_rate(max_rate);
            server.admit(self.kernel().clock.now().0)
        };
        let now = self.kernel().clock.now().0;
        if serve_at > now {
            tokio::time::sleep(Duration::from_micros(serve_at - now)).await;
        }
        let mut s = t.oracle.server.lock();
        let server = s
            .as_mut()
            .ok_or_else(|| TxnError::BadRequest("the oracle was reset".into()))?;
        let g = server.grant(self.kernel().clock.now().0, count);
        if let Some(bound) = g.persist {
            t.store.persist_tso_bound(bound)?;
        }
        Ok((g.first, g.count))
    }

    async fn oracle_rpc(&self, count: u32, props: &TxnProps) -> Result<(u64, u32)> {
        let c = &self.txn_state().counters;
        c.tso_rpcs.fetch_add(1, Ordering::Relaxed);
        c.tso_timestamps
            .fetch_add(u64::from(count), Ordering::Relaxed);
        let oracle = self.oracle_node(props);
        if oracle == self.id() {
            return self.oracle_serve(count, props.tso_max_rate).await;
        }
        let msg = TxnMsg::TsoGet {
            count,
            max_rate: props.tso_max_rate,
        };
        match self
            .kernel()
            .transport
            .request(oracle, msg.into(), ORACLE_TIMEOUT)
            .await
        {
            Ok(Msg::Txn(TxnMsg::TsoRange(r))) => r,
            Ok(other) => Err(TxnError::BadRequest(format!(
                "the oracle {oracle} answered {other:?}"
            ))),
            Err(e) => Err(meridian_txn::Abort::Timeout(format!("oracle {oracle}: {e}")).into()),
        }
    }

    /// One timestamp from the oracle, through the bucket's client.
    pub(crate) async fn oracle_get(&self, props: &TxnProps) -> Result<Timestamp> {
        if props.tso_batching.unwrap_or_default() == TsoBatching::Unbatched {
            return self.oracle_rpc(1, props).await.map(|(t, _)| Timestamp(t));
        }
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut b = self.txn_state().oracle.batch.lock();
            b.waiters.push(tx);
            !std::mem::replace(&mut b.in_flight, true)
        };
        if start {
            let node = self.clone();
            let props = *props;
            tokio::spawn(async move { node.oracle_batches(props).await });
        }
        rx.await
            .map_err(|_| TxnError::BadRequest("the oracle client stopped".into()))?
    }

    /// The batched client's loop: one RPC for every caller queued while the last was out.
    async fn oracle_batches(self, props: TxnProps) {
        loop {
            let waiters = {
                let mut b = self.txn_state().oracle.batch.lock();
                if b.waiters.is_empty() {
                    b.in_flight = false;
                    return;
                }
                std::mem::take(&mut b.waiters)
            };
            let n = u32::try_from(waiters.len()).unwrap_or(u32::MAX);
            match self.oracle_rpc(n, &props).await {
                Ok((first, _)) => {
                    for (i, w) in waiters.into_iter().enumerate() {
                        let _ = w.send(Ok(Timestamp(first + i as u64)));
                    }
                }
                Err(e) => {
                    for w in waiters {
                        let _ = w.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}
