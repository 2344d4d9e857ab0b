//! Convergence: after heal and quiescence, every replica of a key holds the same sibling set.
//!
//! Sets are compared order-insensitively and without regard to duplicates. A key is reported
//! once, with every replica's set grouped by content (the largest agreeing group first), so
//! the odd one out is visible at a glance. A replica missing from a key's map is not compared
//! (the caller lists the key's replicas; list a replica with an empty set for "not found").

use super::{ReplicaStates, Verdict};
use crate::text;
use meridian_core::Value;
use std::collections::BTreeMap;

/// Checks that, for each key, all listed replicas hold identical sibling sets.
pub fn check(replicas: &ReplicaStates) -> Verdict {
    let mut verdict = Verdict::new("convergence");
    let mut most_replicas = 0;
    for (key, by_replica) in replicas {
        most_replicas = most_replicas.max(by_replica.len());
        let mut groups: BTreeMap<Vec<&Value>, Vec<&str>> = BTreeMap::new();
        for (name, values) in by_replica {
            let mut set: Vec<&Value> = values.iter().collect();
            set.sort();
            set.dedup();
            groups.entry(set).or_default().push(name);
        }
        if groups.len() <= 1 {
            continue;
        }
        let mut groups: Vec<(Vec<&Value>, Vec<&str>)> = groups.into_iter().collect();
        groups.sort_by_key(|(_, names)| std::cmp::Reverse(names.len()));
        let described: Vec<String> = groups
            .iter()
            .map(|(set, names)| {
                format!(
                    "{} hold {}",
                    names.join(", "),
                    text::show_set(set.iter().copied())
                )
            })
            .collect();
        verdict.violation(
            key,
            Vec::new(),
            format!(
                "replicas diverge after quiescence: {}",
                described.join("; ")
            ),
        );
    }
    verdict.checked = format!(
        "{} keys on up to {most_replicas} replicas each",
        replicas.len()
    );
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// A replica's name and sibling values.
    type Replica<'a> = (&'a str, &'a [&'a str]);

    fn states(entries: &[(&str, &[Replica])]) -> ReplicaStates {
        entries
            .iter()
            .map(|(key, reps)| {
                let per = reps
                    .iter()
                    .map(|(name, vals)| {
                        let vals = vals.iter().map(|v| Bytes::from(v.to_string())).collect();
                        (name.to_string(), vals)
                    })
                    .collect();
                (Bytes::from(key.to_string()), per)
            })
            .collect()
    }

    #[test]
    fn identical_sets_in_any_order_pass() {
        let s = states(&[
            (
                "k",
                &[
                    ("n1", &["a", "b"]),
                    ("n2", &["b", "a"]),
                    ("n3", &["a", "b", "a"]),
                ],
            ),
            ("j", &[("n1", &[]), ("n4", &[])]),
            ("lonely", &[("n1", &["x"])]),
        ]);
        let v = check(&s);
        assert!(v.passed(), "{v}");
        assert_eq!(v.checked, "3 keys on up to 3 replicas each");
    }

    #[test]
    fn divergent_replicas_fail_with_every_replica_named() {
        let s = states(&[
            (
                "k",
                &[("n1", &["a", "b"]), ("n2", &["a"]), ("n3", &["b", "a"])],
            ),
            ("j", &[("n1", &["x"]), ("n2", &[])]),
        ]);
        let v = check(&s);
        assert_eq!(v.violations.len(), 2, "{v}");
        assert_eq!(v.violations[0].key, Bytes::from("j"));
        let k = v.violations[1].to_string();
        assert_eq!(
            k,
            "key \"k\": replicas diverge after quiescence: n1, n3 hold {\"a\", \"b\"}; n2 hold {\"a\"}"
        );
    }
}
