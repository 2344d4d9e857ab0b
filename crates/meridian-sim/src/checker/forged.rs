//! The part of an eventual history that the lost-writes checker can judge when some clients
//! send forged causal contexts.
//!
//! A coordinator caps a client's context at what its own copy of the key has seen
//! (`meridian_cluster::dvv`, "Client contexts"), so a forged write may supersede any value
//! of its key written before it completed, and nothing the client recorded says which. What
//! must still hold, and what a context that corrupted a key's clock breaks (the attack of
//! issue 36: a counter raised to `u64::MAX` made every later write of the key vanish on two
//! replicas of three), is that the writes and deletes of a key that **started after the
//! key's last forged write completed** behave as in any history: each acknowledged one
//! survives, or an operation after it superseded it.
//!
//! [`after_forgeries`] keeps exactly those operations and every read, and drops the values
//! of the others from the final state; the result goes to [`super::lost_writes::check`].
//! A forged write that never completed keeps nothing of its key after it (it may still
//! apply). The filter is sound, not complete: writes that overlap a forgery are not judged.

use super::FinalState;
use crate::error::Error;
use crate::history::{Event, History, Op, OpId};
use meridian_core::Key;
use std::collections::{BTreeMap, BTreeSet};

/// The operations of `history` that no forged write may have superseded, and `final_state`
/// without the values of the others (forged ones, and those written before a forgery
/// ended); `is_forged` tells a forged write by the value it writes.
pub fn after_forgeries(
    history: &History,
    final_state: &FinalState,
    is_forged: impl Fn(&[u8]) -> bool,
) -> Result<(History, FinalState), Error> {
    let by_key = history.operations_by_key()?;
    let mut dropped: BTreeSet<OpId> = BTreeSet::new();
    let mut unjudged: BTreeSet<&[u8]> = BTreeSet::new();
    for ops in by_key.values() {
        let forged = |op: &Op| op.written_value().is_some_and(|v| is_forged(v));
        // The last completion of a forged write on this key; `None` inside: one never ended.
        let last_forgery: Option<Option<u64>> = ops
            .iter()
            .filter(|o| forged(&o.op))
            .map(|o| o.completed_at)
            .reduce(|a, b| a.zip(b).map(|(a, b)| a.max(b)));
        let Some(last) = last_forgery else { continue };
        for o in ops {
            let overlaps = last.is_none_or(|end| o.invoked_at <= end);
            if forged(&o.op) || (!matches!(o.op, Op::Read) && overlaps) {
                dropped.insert(o.id);
                unjudged.extend(o.op.written_value().map(|v| &v[..]));
            }
        }
    }
    let kept = history.events().iter().filter(|e| {
        let id = match e {
            Event::Invoke { op_id, .. } | Event::Complete { op_id, .. } => op_id,
        };
        !dropped.contains(id)
    });
    let honest: BTreeMap<Key, Vec<_>> = final_state
        .iter()
        .map(|(k, vs)| {
            let judged = vs
                .iter()
                .filter(|v| !is_forged(v) && !unjudged.contains(&v[..]));
            (k.clone(), judged.cloned().collect())
        })
        .collect();
    Ok((History::from_events(kept.cloned().collect()), honest))
}

#[cfg(test)]
mod tests {
    use super::super::lost_writes;
    use super::*;
    use crate::history::{ClientId, Outcome};
    use bytes::Bytes;
    use meridian_core::DcId;

    fn forged(v: &[u8]) -> bool {
        v.starts_with(b"f")
    }

    fn write(h: &mut History, value: &str, sup: &[&str], at: (u64, u64)) {
        let op = Op::write(
            Bytes::from(value.to_owned()),
            sup.iter().map(|s| s.to_string()),
        );
        let id = h.invoke(ClientId(0), DcId(0), "k", op, at.0);
        h.complete(id, Outcome::done(), at.1);
    }

    fn state(values: &[&str]) -> FinalState {
        let vs = values.iter().map(|v| Bytes::from(v.to_string())).collect();
        BTreeMap::from([(Key::from("k"), vs)])
    }

    #[test]
    fn a_write_after_the_last_forgery_must_survive() {
        let mut h = History::new();
        write(&mut h, "c1", &[], (0, 1));
        write(&mut h, "f1", &[], (2, 3));
        write(&mut h, "c2", &[], (4, 5));
        // The corruption of issue 36: the forged write's clock hides the later write.
        let (h2, f2) = after_forgeries(&h, &state(&["f1"]), forged).expect("well formed");
        let v = lost_writes::check(&h2, &f2).expect("well formed");
        assert!(
            !v.passed(),
            "c2 started after the forgery ended and is gone"
        );
        // What a capped forged context may do: supersede what was written before it.
        let (h3, f3) = after_forgeries(&h, &state(&["f1", "c2"]), forged).expect("well formed");
        assert!(lost_writes::check(&h3, &f3).expect("well formed").passed());
    }

    #[test]
    fn writes_overlapping_a_forgery_are_not_judged() {
        let mut h = History::new();
        write(&mut h, "c1", &[], (0, 10));
        write(&mut h, "f1", &[], (2, 3));
        let (h2, f2) = after_forgeries(&h, &state(&["f1"]), forged).expect("well formed");
        assert!(lost_writes::check(&h2, &f2).expect("well formed").passed());
        assert_eq!(h2.len(), 0, "c1 overlapped the forgery: {h2:?}");
    }
}
