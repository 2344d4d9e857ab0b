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

pub use crate::bucket_type::BucketType;
use crate::error::{ReplicationError, Result};
use crate::timeline::TimelineProps;
use meridian_cluster::quorum::MAX_PROPERTY_MS;
use meridian_cluster::{Layout, Params, Props};
use meridian_txn::TxnProps;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The name of the bucket every registry has.
pub const DEFAULT_BUCKET_NAME: &str = "default";

/// A bucket's properties as configured: its type, the quorum parameters ([`Props`], every
/// one optional: unset means the spec's default), and the DC rule. Serialized flat, as a TOML
/// `[buckets.NAME]` table writes it (`type = "eventual"`, `n_val = 3`, `r = "quorum"`, ...);
/// unknown keys are refused when parsing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "BucketTable")]
pub struct BucketProps {
    /// The consistency model (key `type`).
    #[serde(rename = "type")]
    pub bucket_type: BucketType,
    /// Default request parameters (N, R, W, DW, PR, PW, confirms, notfound_ok, basic_quorum,
    /// allow_mult, read_fanout, hedge_ms, timeout_ms).
    #[serde(flatten)]
    pub props: Props,
    /// Whether N must be at least the number of DCs (default true; spec §2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dc_rule: Option<bool>,
    /// Whether the DC roots give this bucket's hot keys extra copies (default false; spec
    /// `load-balancing.md` §4). Eventual and timeline buckets only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_copies: Option<bool>,
    /// Whether the bucket belongs to the S3 endpoint (set by its CreateBucket): its keys are
    /// then refused to RESP/HTTP clients without the node's `requirepass`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3: Option<bool>,
    /// Timeline properties (`migration_threshold`, `timeline_w`, `initial_master`,
    /// `master_timeout_ms`, `read_latest_fanout`, `failover`); only timeline buckets read
    /// them.
    #[serde(flatten)]
    pub timeline: TimelineProps,
    /// Transaction properties (`timestamps`, `snapshot_delta_us`, `tso_batching`,
    /// `tso_max_rate`, `tso_dc`, `txn_backups`); only transactional buckets read them.
    #[serde(flatten)]
    pub txn: TxnProps,
}

impl BucketProps {
    /// The properties of a transactional bucket (Clock-SI unless `txn` says otherwise).
    pub fn transactional(txn: TxnProps) -> BucketProps {
        BucketProps {
            bucket_type: BucketType::Transactional,
            txn,
            ..BucketProps::default()
        }
    }

    /// The `default` bucket of a cluster that its configuration does not describe: what a
    /// Redis Cluster application relies on (ARCHITECTURE.md, "Which mechanism the default
    /// bucket is"). A timeline bucket — each record's master orders its writes, so one-key
    /// read-modify-writes are atomic and MULTI/EXEC runs as one group — whose records start
    /// mastered in the DC that inserts them and whose masters fail over by themselves.
    pub fn redis_default() -> BucketProps {
        let mut b = BucketProps::timeline();
        b.timeline.initial_master = crate::timeline::InitialMaster::InserterDc;
        b.timeline.failover = true;
        b
    }

    /// The properties of a timeline bucket with the spec's defaults.
    pub fn timeline() -> BucketProps {
        BucketProps {
            bucket_type: BucketType::Timeline,
            ..BucketProps::default()
        }
    }
}

/// [`BucketProps`] as parsed: the same keys plus whatever else the table held, so unknown keys
/// can be refused (serde's `deny_unknown_fields` does not work with flattened fields).
#[derive(Deserialize)]
struct BucketTable {
    #[serde(rename = "type", default)]
    bucket_type: BucketType,
    #[serde(flatten)]
    props: Props,
    #[serde(default)]
    dc_rule: Option<bool>,
    #[serde(default)]
    extra_copies: Option<bool>,
    #[serde(default)]
    s3: Option<bool>,
    #[serde(flatten)]
    timeline: TimelineProps,
    #[serde(flatten)]
    txn: TxnProps,
    #[serde(flatten)]
    unknown: BTreeMap<String, serde::de::IgnoredAny>,
}

impl TryFrom<BucketTable> for BucketProps {
    type Error = String;

    fn try_from(t: BucketTable) -> std::result::Result<Self, String> {
        if let Some(key) = t.unknown.keys().next() {
            return Err(format!(
                "unknown bucket property `{key}`: expected type, n_val, r, w, dw, pr, pw, \
                 node_confirms, dc_confirms, notfound_ok, basic_quorum, allow_mult, read_fanout, \
                 replica_selection, extra_copies, s3, \
                 hedge_ms, timeout_ms, dc_rule, migration_threshold, timeline_w, \
                 initial_master, master_timeout_ms, read_latest_fanout, failover, timestamps, \
                 snapshot_delta_us, tso_batching, tso_max_rate, tso_dc or txn_backups"
            ));
        }
        Ok(BucketProps {
            bucket_type: t.bucket_type,
            props: t.props,
            dc_rule: t.dc_rule,
            extra_copies: t.extra_copies,
            s3: t.s3,
            timeline: t.timeline,
            txn: t.txn,
        })
    }
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
        self.props
    }

    /// Checks these properties for a bucket called `name` in a cluster of `shape`.
    pub fn validate(&self, name: &str, shape: ClusterShape) -> Result<()> {
        let bad = |reason: String| ReplicationError::InvalidBucket {
            bucket: name.to_owned(),
            reason,
        };
        if self.bucket_type == BucketType::Transactional {
            self.txn.validate().map_err(bad)?;
            if let Some(dc) = self.txn.tso_dc
                && dc as usize >= shape.dcs
            {
                return Err(bad(format!(
                    "tso_dc={dc}: the cluster has DCs 0..{} (the oracle runs on the lowest-numbered node of that DC)",
                    shape.dcs.saturating_sub(1)
                )));
            }
        }
        if self.bucket_type == BucketType::Transactional && self.extra_copies == Some(true) {
            return Err(bad(
                "extra_copies: transactional buckets read from their partition leader at a \
                 snapshot, which an extra copy cannot serve; use an eventual or timeline bucket"
                    .into(),
            ));
        }
        let p = Params::resolve(&Props::default(), &self.props());
        let n = p.n_val;
        if self.bucket_type == BucketType::Timeline {
            self.timeline.validate(n).map_err(|e| bad(e.reason))?;
        }
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
        for (field, ms) in [("timeout_ms", p.timeout_ms), ("hedge_ms", p.hedge_ms)] {
            if ms > MAX_PROPERTY_MS {
                return Err(bad(format!(
                    "{field}={ms} exceeds the maximum of {MAX_PROPERTY_MS} ms (30 days)"
                )));
            }
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

    /// Whether any bucket is transactional.
    pub fn has_transactional(&self) -> bool {
        self.map
            .values()
            .any(|p| p.bucket_type == BucketType::Transactional)
    }

    /// Whether any bucket has extra copies of hot keys.
    pub fn has_extra_copies(&self) -> bool {
        self.map.values().any(|p| p.extra_copies == Some(true))
    }

    /// Whether any bucket belongs to the S3 endpoint.
    pub fn has_s3(&self) -> bool {
        self.map.values().any(|p| p.s3 == Some(true))
    }

    /// Registered bucket names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_cluster::Quorum;

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
    fn loads_timeline_buckets_with_their_properties() {
        let c: Config = toml::from_str(
            r#"
            [buckets.profiles]
            type = "timeline"
            migration_threshold = 5
            initial_master = "inserter_dc"
            master_timeout_ms = 2000
            "#,
        )
        .unwrap();
        let b = Buckets::from_map(SHAPE, c.buckets).unwrap();
        let p = b.get("profiles").unwrap();
        assert_eq!(p.bucket_type, BucketType::Timeline);
        assert_eq!(p.timeline.migration_threshold, 5);
        assert_eq!(
            p.timeline.initial_master,
            crate::timeline::InitialMaster::InserterDc
        );
        assert_eq!(p.timeline.master_timeout_ms, 2000);
        assert_eq!(
            p.timeline.timeline_w, 1,
            "unset keys keep the spec's default"
        );
        let e =
            toml::from_str::<Config>("[buckets.x]\ntype = \"timeline\"\nmigration_treshold = 2\n")
                .unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown bucket property `migration_treshold`"),
            "{e}"
        );
    }

    #[test]
    fn unknown_fields_and_bad_quorums_are_rejected() {
        let e = toml::from_str::<Config>("[buckets.x]\nn_vall = 3\n").unwrap_err();
        assert!(
            e.to_string().contains("unknown bucket property `n_vall`"),
            "{e}"
        );
        let e = toml::from_str::<Config>("[buckets.x]\nr = \"most\"\n").unwrap_err();
        assert!(e.to_string().contains("most"), "{e}");
    }

    #[test]
    fn a_bucket_table_round_trips_flat() {
        let text = "type = \"eventual\"\nn_val = 3\nr = \"one\"\nw = 2\nallow_mult = false\ndc_rule = false\n";
        let props: BucketProps = toml::from_str(text).unwrap();
        assert_eq!(props.props.r, Some(Quorum::One));
        assert_eq!(props.props.w, Some(Quorum::Count(2)));
        let written = toml::to_string(&props).unwrap();
        assert!(!written.contains("props"), "written flat:\n{written}");
        assert!(
            !written.contains("dw"),
            "unset parameters are left out:\n{written}"
        );
        assert_eq!(toml::from_str::<BucketProps>(&written).unwrap(), props);
    }

    #[test]
    fn validation_names_the_problem() {
        let mut b = Buckets::new(SHAPE).unwrap();
        let cases = [
            (
                BucketProps {
                    props: Props {
                        n_val: Some(4),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                "n_val=4 exceeds the layout's target_n=3",
            ),
            (
                BucketProps {
                    props: Props {
                        r: Some(Quorum::Count(4)),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                "r=4 exceeds n_val=3",
            ),
            (
                BucketProps {
                    props: Props {
                        w: Some(Quorum::Count(0)),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                "w must be at least 1",
            ),
            (
                BucketProps {
                    props: Props {
                        n_val: Some(1),
                        r: Some(Quorum::One),
                        w: Some(Quorum::One),
                        dw: Some(Quorum::One),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                "set dc_rule = false",
            ),
            (
                BucketProps::transactional(TxnProps {
                    txn_backups: Some(1),
                    ..Default::default()
                }),
                "txn_backups=1: only 0 is supported",
            ),
            (
                BucketProps::transactional(TxnProps {
                    tso_dc: Some(7),
                    ..Default::default()
                }),
                "tso_dc=7: the cluster has DCs 0..1",
            ),
            (
                BucketProps::transactional(TxnProps {
                    tso_max_rate: Some(0),
                    ..Default::default()
                }),
                "tso_max_rate must be at least 1",
            ),
            (
                BucketProps {
                    timeline: TimelineProps {
                        timeline_w: 4,
                        ..Default::default()
                    },
                    ..BucketProps::timeline()
                },
                "timeline_w=4 exceeds n_val=3",
            ),
            (
                BucketProps {
                    props: Props {
                        timeout_ms: Some(0),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                "timeout_ms must be positive",
            ),
            (
                BucketProps {
                    props: Props {
                        timeout_ms: Some(u64::MAX),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                "timeout_ms=18446744073709551615 exceeds the maximum",
            ),
            (
                BucketProps {
                    props: Props {
                        hedge_ms: Some(MAX_PROPERTY_MS + 1),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                "hedge_ms=2592000001 exceeds the maximum",
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
                dc_rule: Some(false),
                props: Props {
                    n_val: Some(1),
                    r: Some(Quorum::One),
                    w: Some(Quorum::One),
                    dw: Some(Quorum::One),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(b.resolve(b"one", &Props::default()).n_val, 1);
    }

    #[test]
    fn props_round_trip_through_toml() {
        let p = BucketProps {
            props: Props {
                n_val: Some(3),
                r: Some(Quorum::All),
                pw: Some(Quorum::Count(2)),
                allow_mult: Some(false),
                ..Default::default()
            },
            ..Default::default()
        };
        let text = toml::to_string(&p).unwrap();
        assert_eq!(toml::from_str::<BucketProps>(&text).unwrap(), p);
    }
}
