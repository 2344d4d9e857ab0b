//! `-MOVED`: where a key command belongs in cluster mode, as Redis Cluster redirects it.
//!
//! A key command whose keys all hash to one slot, sent to a node that is not that slot's
//! master in the node's own DC's view (the master `CLUSTER SLOTS` names, by
//! [`reported_lead`]), is answered `-MOVED <slot> <host>:<port>` naming that master, and does
//! nothing. Cluster clients follow it and refresh their map, so after a failover (or a dead
//! node's return) they reach the range's new master instead of being served one hop away for
//! ever — or, when the DC had no live replica, across the WAN after the DC's own node is back.
//!
//! Not redirected, because Meridian can serve them where Redis Cluster cannot:
//! - commands whose keys span several slots (Redis answers `-CROSSSLOT`; any Meridian node
//!   coordinates them);
//! - commands queued inside `MULTI`: `EXEC` runs them all where their keys' bucket decides (a
//!   timeline group at the records' master, a transaction across slots on a transactional
//!   bucket), so a transaction over keys of several slots, queued one key at a time, is not
//!   cut apart by the first key that is mastered elsewhere;
//! - read-only commands on a connection that sent `READONLY` (Redis serves them on the slot's
//!   replicas; any Meridian node reads any key correctly);
//! - everything, with `resp.misrouted = "serve"`: for clients that are not cluster-aware and
//!   send every key to one node.
//!
//! Keyless commands never are. A master whose RESP address is unknown (not yet gossiped) is
//! not named: the node serves the command instead of sending the client nowhere.
//!
//! A client connected over TLS is sent to the master's TLS address, a plaintext client to
//! its plaintext one (`MemberRecord::client_resp`, as Redis 7 picks a node's port by the
//! asking connection), so each can follow the redirect on the transport it speaks.

use crate::config::Misrouted;
use crate::resp::cluster_cmd::reported_lead;
use crate::resp::context::RespContext;
use meridian_cluster::slot_of;
use meridian_core::{DcId, NodeId};
use meridian_redis::{Args, Cmd};
use smallvec::SmallVec;

/// What of the sending connection decides whether a command is redirected.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionState {
    /// Inside `MULTI`: the command is queued.
    pub in_multi: bool,
    /// `READONLY` was sent.
    pub readonly: bool,
    /// Connected over TLS: the redirect names the master's TLS port (Redis 7 with
    /// `tls-cluster yes`), which a TLS client can follow.
    pub tls: bool,
}

/// The `-MOVED` line for a misrouted key command, or `None` to run it here (see the module
/// docs).
pub(crate) fn moved(
    ctx: &RespContext,
    conn: ConnectionState,
    cmd: Cmd,
    args: Args<'_>,
) -> Option<String> {
    let cluster = ctx.cluster.as_ref()?;
    if ctx.config.misrouted == Misrouted::Serve
        || conn.in_multi
        || conn.readonly && is_read_only(cmd)
    {
        return None;
    }
    let slot = one_slot(cmd, args)?;
    let node = &cluster.node;
    let master = slot_master(node, slot)?;
    if master == node.id() {
        return None;
    }
    let addr = node.member_resp(master, conn.tls)?;
    Some(format!("MOVED {slot} {addr}"))
}

/// Whether Redis marks `cmd` read-only (what `READONLY` lets a replica serve).
fn is_read_only(cmd: Cmd) -> bool {
    cmd.spec().flags.contains(&"readonly")
}

/// The slot every key of the command hashes to; `None` for a keyless command or keys of
/// several slots.
fn one_slot(cmd: Cmd, args: Args<'_>) -> Option<u16> {
    let mut positions = cmd.spec().key_positions(&args);
    let slot = slot_of(args.get(positions.next()?));
    positions
        .all(|i| slot_of(args.get(i)) == slot)
        .then_some(slot)
}

/// The master of `slot` in `node`'s DC's view: its partition's replicas, in claim order,
/// through [`reported_lead`] with the node's failure detector.
fn slot_master(node: &meridian_replication::EventualNode, slot: u16) -> Option<NodeId> {
    let replicas: SmallVec<[(NodeId, DcId); 8]> = {
        let layout = node.layout();
        let topology = layout.topology();
        let p = layout.ring().partition_of_slot(slot);
        layout
            .replicas(p)
            .iter()
            .filter_map(|&n| topology.dc_of(n).map(|dc| (n, dc)))
            .collect()
    };
    let dcs: SmallVec<[DcId; 8]> = replicas.iter().map(|&(_, dc)| dc).collect();
    let lead = reported_lead(&dcs, |i| node.is_up(replicas[i].0), node.dc())?;
    Some(replicas[lead].0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_redis::OwnedArgs;
    use std::cell::RefCell;

    fn args(parts: &[&str]) -> OwnedArgs {
        OwnedArgs::from_slices(parts.iter().map(|p| p.as_bytes()))
    }

    fn slot(parts: &[&str]) -> Option<u16> {
        let a = args(parts);
        one_slot(Cmd::lookup(parts[0].as_bytes()).unwrap(), a.get())
    }

    #[test]
    fn a_command_has_one_slot_only_when_every_key_shares_it() {
        assert_eq!(slot(&["GET", "k"]), Some(slot_of(b"k")));
        assert_eq!(slot(&["SET", "k", "v", "NX"]), Some(slot_of(b"k")));
        assert_ne!(slot_of(b"a"), slot_of(b"b"));
        assert_eq!(slot(&["MGET", "a", "b"]), None, "keys of two slots");
        assert_eq!(slot(&["MGET", "{t}a", "{t}b"]), Some(slot_of(b"t")));
        // MSET's keys are every other argument: the values do not count.
        assert_eq!(
            slot(&["MSET", "{t}a", "x", "{t}b", "y"]),
            Some(slot_of(b"t"))
        );
        assert_eq!(slot(&["PING"]), None, "keyless");
        assert_eq!(slot(&["DBSIZE"]), None, "keyless");
    }

    #[test]
    fn only_redis_read_only_commands_pass_on_a_readonly_connection() {
        assert!(is_read_only(Cmd::Get));
        assert!(is_read_only(Cmd::Mget));
        assert!(!is_read_only(Cmd::Set));
        assert!(!is_read_only(Cmd::Incr));
    }

    #[test]
    fn the_lead_asks_liveness_lazily_and_prefers_the_dc() {
        let (d0, d1) = (DcId(0), DcId(1));
        let asked = RefCell::new(Vec::new());
        let up = |alive: &'static [bool]| {
            let asked = &asked;
            move |i: usize| {
                asked.borrow_mut().push(i);
                alive[i]
            }
        };
        // The DC's first replica is up: nobody else is asked.
        assert_eq!(
            reported_lead(&[d1, d0, d0], up(&[true, true, true]), d0),
            Some(1)
        );
        assert_eq!(asked.take(), vec![1]);
        // It is down: the DC's next one.
        assert_eq!(
            reported_lead(&[d1, d0, d0], up(&[true, false, true]), d0),
            Some(2)
        );
        assert_eq!(asked.take(), vec![1, 2]);
        // The DC has none up: the first up of any DC.
        assert_eq!(
            reported_lead(&[d0, d1, d1], up(&[false, false, true]), d0),
            Some(2)
        );
        // Nobody up: the DC's first, else the first.
        assert_eq!(reported_lead(&[d1, d0], up(&[false, false]), d0), Some(1));
        assert_eq!(reported_lead(&[d1, d1], up(&[false, false]), d0), Some(0));
        assert_eq!(reported_lead(&[], up(&[]), d0), None);
    }
}
