//! MULTI/EXEC and WATCH in cluster mode: where a transaction's queued commands and watched
//! keys meet the replication layer.
//!
//! The connection runs the state machine (`multi`) in both modes; in cluster mode it calls
//! [`watch`] for `WATCH key...` (outside MULTI) and [`exec`] for an EXEC that may run (inside
//! MULTI, nothing refused while queuing). After [`exec`] the connection discards the
//! transaction and the watched keys, whatever happened.
//!
//! Today no bucket type offers multi-key atomicity across replicas, so [`watch`] only records
//! the keys and [`exec`] applies nothing and answers `-EXECABORT Transaction discarded:
//! transactions in cluster mode need a transactional bucket`. A transactional path runs the
//! queued commands with [`crate::strings::exec_on_view`] over its own
//! [`crate::strings::StringView`], storing values in the same envelope
//! ([`crate::strings::encode`]).

use crate::cluster::ClusterBackend;
use crate::resp::multi::MultiState;
use crate::resp::reply::Reply;
use bytes::Bytes;
use std::borrow::Cow;

/// The refusal of a transaction no bucket can run yet.
const NO_TRANSACTIONS: &str =
    "EXECABORT Transaction discarded: transactions in cluster mode need a transactional bucket";

/// WATCH `keys` (outside MULTI): `Ok` replies `+OK`; an error is the whole reply line
/// (without the leading `-`). Records the keys in `state.cluster_watched`.
pub(crate) async fn watch(
    _backend: &ClusterBackend,
    state: &mut MultiState,
    keys: Vec<Bytes>,
) -> Result<(), Cow<'static, str>> {
    for k in keys {
        if !state.cluster_watched.contains(&k) {
            state.cluster_watched.push(k);
        }
    }
    Ok(())
}

/// EXEC: runs `state.queued` (each a known command with checked arity) if no key of
/// `state.cluster_watched` changed since WATCH, writing the whole reply: the array of the
/// commands' replies, the null array (`reply.null_array()`) when a watched key changed, or
/// an error line.
pub(crate) async fn exec(_backend: &ClusterBackend, _state: &mut MultiState, reply: &mut Reply) {
    reply.error(NO_TRANSACTIONS);
}
