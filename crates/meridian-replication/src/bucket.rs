//! Buckets: named namespaces carrying a replication type and default request parameters
//! (spec §4), and the [`Buckets`] registry a node resolves every request against.
//!
//! Guarantees:
//! - [`BucketProps`] deserializes from a TOML `[buckets.NAME]` table (or any serde format)
//!   and rejects unknown fields, so a typo (`n_vall = 3`) is an error, not a silent default;
//!   quorum values are `"one"`, `"quorum"`, `"all"` or a number;
//! - every bucket in a [`Buckets`] registry has passed [`BucketProps::validate`] against the
//!   cluster's shape: the type is implemented, `1 ≤ N ≤ target_n`, every quorum value fits in
//!   N, R and W are at least 1, the timeout is positive, and `N < D` (fewer replicas than
//!   DCs) is refused unless the bucket sets `dc_rule = false` (then a warning is logged);
//! - a registry always has a `default` bucket, and a key whose bucket is not registered uses
//!   the `default` bucket's properties (Riak's implicit buckets);
//! - parameter resolution is request, else bucket, else the spec's default
//!   ([`meridian_cluster::Params::resolve`]).

use crate::error::{ReplicationError, Result};
use meridian_cluster::{Layout, Params, Props, Quorum, ReadFanout};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The name of the bucket every registry has.
pub const DEFAULT_BUCKET_NAME: &str = "default";

/// A bucket's consistency model. Only `eventual` is implemented; the other names are
/// reserved so configurations can be written for them, and validation refuses them for now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BucketType {
    /// N/R/W quorums, causal contexts, siblings or LWW (spec `placement-and-quorums.md`).
    #[default]
    Eventual,
    /// Per-record master, ordered propagation (not implemented yet).
    Timeline,
    /// Clock-SI transactions (not implemented yet).
    Transactional,
}

/// A bucket's properties as configured: every parameter optional (unset means the spec's
/// default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BucketProps {
    /// The consistency model (TOML key `type`).
    #[serde(rename = "type")]
    pub bucket_type: BucketType,
    /// Replicas (default 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_val: Option<u32>,
    /// Replies needed for a GET (default `quorum`).
    #[serde(with = "opt_quorum", skip_serializing_if = "Option::is_none")]
    pub r: Option<Quorum>,
    /// Acks needed for a PUT (default `quorum`).
    #[serde(with = "opt_quorum", skip_serializing_if = "Option::is_none")]
    pub w: Option<Quorum>,
    /// Durable acks (default `quorum`; with `MemEngine` a durable ack is an ack).
    #[serde(with = "opt_quorum", skip_serializing_if = "Option::is_none")]
    pub dw: Option<Quorum>,
    /// GET replies that must come from primaries (default 0).
    #[serde(with = "opt_quorum", skip_serializing_if = "Option::is_none")]
    pub pr: Option<Quorum>,
    /// PUT acks that must come from primaries (default 0).
    #[serde(with = "opt_quorum", skip_serializing_if = "Option::is_none")]
    pub pw: Option<Quorum>,
    /// Acks from at least this many distinct nodes (default 0).
    #[serde(with = "opt_quorum", skip_serializing_if = "Option::is_none")]
    pub node_confirms: Option<Quorum>,
    /// Acks from at least this many distinct DCs (default 0).
    #[serde(with = "opt_quorum", skip_serializing_if = "Option::is_none")]
    pub dc_confirms: Option<Quorum>,
    /// Whether a notfound counts as an ok reply (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notfound_ok: Option<bool>,
    /// Fail a GET early after a majority of not-ok replies (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub basic_quorum: Option<bool>,
    /// Keep siblings (true, default) or resolve last-writer-wins (false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_mult: Option<bool>,
    /// Where GETs go (default `all`; `quorum` is accepted and currently behaves as `all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_fanout: Option<ReadFanout>,
    /// Whole-request timeout in milliseconds (default 60000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Whether N must be at least the number of DCs (default true; spec §2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dc_rule: Option<bool>,
}

/// What bucket validation needs to know about the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterShape {
    /// The layout's `target_n` (the largest N any bucket may use).
    pub target_n: usize,
    /// The number of DCs.
    pub dcs: usize,
}

impl ClusterShape {
    /// The shape of `layout`.
    pub fn of(layout: &Layout) -> ClusterShape {
        ClusterShape {
            target_n: layout.target_n(),
            dcs: layout.topology().dc_count(),
        }
    }
}

impl BucketProps {
    /// The quorum parameters as a [`Props`] (for [`Params::resolve`]).
    pub fn props(&self) -> Props {
        Props {
            n_val: self.n_val,
            r: self.r,
            w: self.w,
            dw: self.dw,
            pr: self.pr,
            pw: self.pw,
            node_confirms: self.node_confirms,
            dc_confirms: self.dc_confirms,
            notfound_ok: self.notfound_ok,
            basic_quorum: self.basic_quorum,
            allow_mult: self.allow_mult,
            read_fanout: self.read_fanout,
            timeout_ms: self.timeout_ms,
        }
    }

    /// Checks these properties for a bucket called `name` in a cluster of `shape`.
    pub fn validate(&self, name: &str, shape: ClusterShape) -> Result<()> {
        let bad = |reason: String| ReplicationError::InvalidBucket {
            bucket: name.to_owned(),
            reason,
        };
        if self.bucket_type != BucketType::Eventual {
            return Err(bad(format!(
                "type {:?} is not implemented yet (only eventual)",
                self.bucket_type
            )));
        }
        let p = Params::resolve(&Props::default(), &self.props());
        let n = p.n_val;
        if n == 0 {
            return Err(bad("n_val must be at least 1".into()));
        }
        if n as usize > shape.target_n {
            return Err(bad(format!(
                "n_val={n} exceeds the layout's target_n={}",
                shape.target_n
            )));
        }
        let named = [
            ("r", p.r),
            ("w", p.w),
            ("dw", p.dw),
            ("pr", p.pr),
            ("pw", p.pw),
            ("node_confirms", p.node_confirms),
            ("dc_confirms", p.dc_confirms),
        ];
        for (field, q) in named {
            let v = q.resolve(n);
            if v > n {
                return Err(bad(format!("{field}={v} exceeds n_val={n}")));
            }
            if (field == "r" || field == "w") && v == 0 {
                return Err(bad(format!("{field} must be at least 1")));
            }
        }
        if p.timeout_ms == 0 {
            return Err(bad("timeout_ms must be positive".into()));
        }
        if (n as usize) < shape.dcs {
            if self.dc_rule.unwrap_or(true) {
                return Err(bad(format!(
                    "n_val={n} is below the number of DCs ({}): set dc_rule = false to allow it",
                    shape.dcs
                )));
            }
            tracing::warn!(
                bucket = name,
                n,
                dcs = shape.dcs,
                "bucket has fewer replicas than DCs: some DCs hold no copy of its keys"
            );
        }
        Ok(())
    }
}

/// The registry of buckets a node knows. Always holds [`DEFAULT_BUCKET_NAME`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets {
    shape: ClusterShape,
    map: BTreeMap<String, BucketProps>,
}

impl Buckets {
    /// A registry with only a `default` bucket with the spec's defaults.
    ///
    /// # Errors
    /// If the defaults do not fit `shape` (e.g. `target_n < 3`): then set a `default` bucket
    /// explicitly with [`Buckets::from_map`].
    pub fn new(shape: ClusterShape) -> Result<Buckets> {
        Buckets::from_map(shape, BTreeMap::new())
    }

    /// A registry from configured buckets (e.g. a TOML `[buckets]` table), each validated;
    /// a `default` bucket with the spec's defaults is added when the map has none.
    pub fn from_map(shape: ClusterShape, map: BTreeMap<String, BucketProps>) -> Result<Buckets> {
        let mut b = Buckets {
            shape,
            map: BTreeMap::new(),
        };
        if !map.contains_key(DEFAULT_BUCKET_NAME) {
            b.set(DEFAULT_BUCKET_NAME, BucketProps::default())?;
        }
        for (name, props) in map {
            b.set(&name, props)?;
        }
        Ok(b)
    }

    /// Creates or replaces bucket `name` after validating `props`.
    pub fn set(&mut self, name: &str, props: BucketProps) -> Result<()> {
        props.validate(name, self.shape)?;
        self.map.insert(name.to_owned(), props);
        Ok(())
    }

    /// The properties of bucket `name` if it is registered.
    pub fn get(&self, name: &str) -> Option<&BucketProps> {
        self.map.get(name)
    }

    /// The properties a key of bucket `name` (raw bytes from the key) uses: its own, or the
    /// `default` bucket's.
    pub fn props_for(&self, name: &[u8]) -> &BucketProps {
        std::str::from_utf8(name)
            .ok()
            .and_then(|n| self.map.get(n))
            .unwrap_or_else(|| &self.map[DEFAULT_BUCKET_NAME])
    }

    /// Resolves a request's parameters against bucket `name`.
    pub fn resolve(&self, name: &[u8], request: &Props) -> Params {
        Params::resolve(request, &self.props_for(name).props())
    }

    /// Registered bucket names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }
}

/// Serde for `Option<Quorum>` as `"one" | "quorum" | "all" | <number>`.
mod opt_quorum {
    use meridian_cluster::Quorum;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(u32),
        Name(String),
    }

    pub fn serialize<S: Serializer>(q: &Option<Quorum>, s: S) -> Result<S::Ok, S::Error> {
        match q {
            None => s.serialize_none(),
            Some(Quorum::One) => s.serialize_str("one"),
            Some(Quorum::Quorum) => s.serialize_str("quorum"),
            Some(Quorum::All) => s.serialize_str("all"),
            Some(Quorum::Count(k)) => s.serialize_u32(*k),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Quorum>, D::Error> {
        let r = Repr::deserialize(d)?;
        Ok(Some(match r {
            Repr::Number(k) => Quorum::Count(k),
            Repr::Name(s) => match s.as_str() {
                "one" => Quorum::One,
                "quorum" => Quorum::Quorum,
                "all" => Quorum::All,
                other => {
                    return Err(serde::de::Error::custom(format!(
                        "invalid quorum value {other:?}: expected one, quorum, all or a number"
                    )));
                }
            },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: ClusterShape = ClusterShape {
        target_n: 3,
        dcs: 2,
    };

    #[derive(Debug, Deserialize)]
    struct Config {
        buckets: BTreeMap<String, BucketProps>,
    }

    #[test]
    fn loads_toml_tables_with_symbolic_and_numeric_quorums() {
        let c: Config = toml::from_str(
            r#"
            [buckets.default]
            r = "one"
            w = 2

            [buckets.sessions]
            type = "eventual"
            n_val = 3
            allow_mult = false
            pw = "quorum"
            read_fanout = "all"
            timeout_ms = 5000
            "#,
        )
        .unwrap();
        let b = Buckets::from_map(SHAPE, c.buckets).unwrap();
        assert_eq!(b.names().collect::<Vec<_>>(), ["default", "sessions"]);
        let d = b.resolve(b"nope", &Props::default());
        assert_eq!((d.r, d.w), (Quorum::One, Quorum::Count(2)));
        let s = b.resolve(b"sessions", &Props::default());
        assert!(!s.allow_mult);
        assert_eq!(s.pw, Quorum::Quorum);
        assert_eq!(s.timeout_ms, 5000);
        // A request override wins over the bucket.
        let o = b.resolve(
            b"sessions",
            &Props {
                timeout_ms: Some(7),
                ..Props::default()
            },
        );
        assert_eq!(o.timeout_ms, 7);
    }

    #[test]
    fn unknown_fields_and_bad_quorums_are_rejected() {
        let e = toml::from_str::<Config>("[buckets.x]\nn_vall = 3\n").unwrap_err();
        assert!(e.to_string().contains("n_vall"), "{e}");
        let e = toml::from_str::<Config>("[buckets.x]\nr = \"most\"\n").unwrap_err();
        assert!(e.to_string().contains("most"), "{e}");
    }

    #[test]
    fn validation_names_the_problem() {
        let mut b = Buckets::new(SHAPE).unwrap();
        let cases = [
            (
                BucketProps {
                    n_val: Some(4),
                    ..Default::default()
                },
                "n_val=4 exceeds the layout's target_n=3",
            ),
            (
                BucketProps {
                    r: Some(Quorum::Count(4)),
                    ..Default::default()
                },
                "r=4 exceeds n_val=3",
            ),
            (
                BucketProps {
                    w: Some(Quorum::Count(0)),
                    ..Default::default()
                },
                "w must be at least 1",
            ),
            (
                BucketProps {
                    n_val: Some(1),
                    r: Some(Quorum::One),
                    w: Some(Quorum::One),
                    dw: Some(Quorum::One),
                    ..Default::default()
                },
                "set dc_rule = false",
            ),
            (
                BucketProps {
                    bucket_type: BucketType::Timeline,
                    ..Default::default()
                },
                "not implemented",
            ),
            (
                BucketProps {
                    timeout_ms: Some(0),
                    ..Default::default()
                },
                "timeout_ms must be positive",
            ),
        ];
        for (props, want) in cases {
            let e = b.set("x", props).unwrap_err();
            assert_eq!(e.code(), "invalid_bucket");
            assert!(e.to_string().contains(want), "{e} should say {want}");
        }
        assert!(b.get("x").is_none());
        b.set(
            "one",
            BucketProps {
                n_val: Some(1),
                r: Some(Quorum::One),
                w: Some(Quorum::One),
                dw: Some(Quorum::One),
                dc_rule: Some(false),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(b.resolve(b"one", &Props::default()).n_val, 1);
    }

    #[test]
    fn props_round_trip_through_toml() {
        let p = BucketProps {
            n_val: Some(3),
            r: Some(Quorum::All),
            pw: Some(Quorum::Count(2)),
            allow_mult: Some(false),
            ..Default::default()
        };
        let text = toml::to_string(&p).unwrap();
        assert_eq!(toml::from_str::<BucketProps>(&text).unwrap(), p);
    }
}
