//! YCSB core workload properties (spec `experiments.md` §6, issue 6 point 1): YCSB's own
//! workload files (Java properties) parsed into a [`CoreWorkload`], plus the operation mix,
//! YCSB key names and cheap deterministic record values.
//!
//! Guarantees:
//! - YCSB's canonical files A–F (bundled under `workloads/`, see [`canonical`]) parse unchanged;
//!   defaults are YCSB's `CoreWorkload` defaults, so a file means what it means in YCSB;
//! - unknown properties never stop a run, they come back as warnings; YCSB's standard
//!   properties that do not change the operations (`workload=site.ycsb.workloads.CoreWorkload`,
//!   `db`, `measurementtype`, ... — [`IGNORED_PROPERTIES`]) are accepted silently, and those a
//!   flag replaces (`threadcount`, `target`, `maxexecutiontime`) warn naming the flag;
//!   malformed values and proportions that do not sum to 1 are refused with
//!   [`BenchError::InvalidProperty`] naming the property;
//! - every random choice takes the caller's RNG: same seed, same operations.

use meridian_core::mix::{GOLDEN_GAMMA, splitmix64};
use std::collections::BTreeMap;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::generator::{DEFAULT_PARETO_ALPHA, Distribution, KeyChooser, fnv_hash64};

/// How far the five proportions may sum from 1 (files write decimals such as 0.95 + 0.05).
pub const PROPORTION_TOLERANCE: f64 = 1e-3;

/// One YCSB operation type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Read one record.
    Read,
    /// Overwrite an existing record.
    Update,
    /// Insert a new record (the key space grows).
    Insert,
    /// Read a range of records starting at a key.
    Scan,
    /// Read a record, then write it back (exercises conditional writes).
    ReadModifyWrite,
}

/// Order of inserted keys (YCSB `insertorder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InsertOrder {
    /// Key numbers are FNV-hashed into the name, so inserts spread over the key range.
    Hashed,
    /// Key numbers appear as is: inserts append at the end of the key range.
    Ordered,
}

/// Distribution of scan lengths (YCSB `scanlengthdistribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanLengthDistribution {
    /// Uniform in `[minscanlength, maxscanlength]`.
    Uniform,
    /// Zipfian over `[minscanlength, maxscanlength]`, short scans most frequent.
    Zipfian,
}

/// A YCSB core workload, with Meridian's extensions for the geo study's factors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreWorkload {
    /// Records loaded before the run (`recordcount`, YCSB default 0).
    pub record_count: u64,
    /// Operations in the run (`operationcount`, YCSB default 0).
    pub operation_count: u64,
    /// First key number loaded (`insertstart`, default 0).
    pub insert_start: u64,
    /// Share of reads (`readproportion`, default 0.95).
    pub read_proportion: f64,
    /// Share of updates (`updateproportion`, default 0.05).
    pub update_proportion: f64,
    /// Share of inserts (`insertproportion`, default 0).
    pub insert_proportion: f64,
    /// Share of scans (`scanproportion`, default 0).
    pub scan_proportion: f64,
    /// Share of read-modify-writes (`readmodifywriteproportion`, default 0).
    pub read_modify_write_proportion: f64,
    /// Fields per record (`fieldcount`, default 10).
    pub field_count: u32,
    /// Bytes per field (`fieldlength`, default 100).
    pub field_length: u32,
    /// Reads fetch every field (`readallfields`, default true).
    pub read_all_fields: bool,
    /// Updates write every field (`writeallfields`, default false).
    pub write_all_fields: bool,
    /// Key popularity (`requestdistribution` and its parameters, default uniform).
    pub request_distribution: Distribution,
    /// Shortest scan (`minscanlength`, default 1).
    pub min_scan_length: u64,
    /// Longest scan (`maxscanlength`, default 1000).
    pub max_scan_length: u64,
    /// Scan length distribution (`scanlengthdistribution`, default uniform).
    pub scan_length_distribution: ScanLengthDistribution,
    /// Insert order (`insertorder`, default hashed).
    pub insert_order: InsertOrder,
    /// Meridian: probability that a client reads a key homed in its own DC (`locality`),
    /// `None` when the file does not set it (keys then ignore DCs).
    pub locality: Option<f64>,
    /// Meridian: number of data centres keys are homed in (`dcs`, default 1).
    pub dcs: u32,
}

impl Default for CoreWorkload {
    fn default() -> Self {
        CoreWorkload {
            record_count: 0,
            operation_count: 0,
            insert_start: 0,
            read_proportion: 0.95,
            update_proportion: 0.05,
            insert_proportion: 0.0,
            scan_proportion: 0.0,
            read_modify_write_proportion: 0.0,
            field_count: 10,
            field_length: 100,
            read_all_fields: true,
            write_all_fields: false,
            request_distribution: Distribution::Uniform,
            min_scan_length: 1,
            max_scan_length: 1000,
            scan_length_distribution: ScanLengthDistribution::Uniform,
            insert_order: InsertOrder::Hashed,
            locality: None,
            dcs: 1,
        }
    }
}

/// A parsed workload and what was ignored on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The workload.
    pub workload: CoreWorkload,
    /// One line per ignored (unknown) property, for the run's report.
    pub warnings: Vec<String>,
}

/// Every property [`CoreWorkload::from_properties`] reads; anything else is a warning.
pub const KNOWN_PROPERTIES: &[&str] = &[
    "recordcount",
    "operationcount",
    "insertstart",
    "readproportion",
    "updateproportion",
    "insertproportion",
    "scanproportion",
    "readmodifywriteproportion",
    "fieldcount",
    "fieldlength",
    "readallfields",
    "writeallfields",
    "requestdistribution",
    "zipfianconstant",
    "hotspotdatafraction",
    "hotspotopnfraction",
    "paretoalpha",
    "paretoseed",
    "zipfexponent",
    "zipfseed",
    "minscanlength",
    "maxscanlength",
    "scanlengthdistribution",
    "insertorder",
    "locality",
    "dcs",
];

/// YCSB's class names of its core workload: a `workload` property naming one of them is what
/// Meridian runs, so it is accepted silently (any other class is a warning).
pub const CORE_WORKLOAD_CLASSES: &[&str] = &[
    "site.ycsb.workloads.CoreWorkload",
    "com.yahoo.ycsb.workloads.CoreWorkload",
];

/// Standard YCSB properties that do not change the operations a run issues — the database
/// binding, the table name, measurement and reporting settings, load retries — accepted
/// silently and ignored: Meridian's target flag and its own report take their place.
pub const IGNORED_PROPERTIES: &[&str] = &[
    "db",
    "table",
    "exporter",
    "exportfile",
    "measurementtype",
    "measurement.interval",
    "measurement.trackjvm",
    "measurement.histogram.verbose",
    "measurement.raw.output_file",
    "measurement.raw.separate_files",
    "measurement.raw.no_summary",
    "histogram.buckets",
    "timeseries.granularity",
    "hdrhistogram.percentiles",
    "hdrhistogram.fileoutput",
    "hdrhistogram.output.path",
    "status.interval",
    "reportlatencyforeacherror",
    "latencytrackederrors",
    "core_workload_insertion_retry_limit",
    "core_workload_insertion_retry_interval",
];

/// YCSB properties that a `meridian bench` flag replaces: ignored with a warning naming it.
const REPLACED_BY_FLAGS: &[(&str, &str)] = &[
    ("threadcount", "--threads"),
    ("target", "--open-rate or --rate-per-thread"),
    ("maxexecutiontime", "--duration"),
];

/// The warnings for the properties of `props` that [`CoreWorkload::from_properties`] does not
/// use, in key order; none for known, silently ignored and core-workload `workload` ones.
fn property_warnings(props: &BTreeMap<String, String>) -> Vec<String> {
    props
        .iter()
        .filter_map(|(k, v)| {
            let k = k.as_str();
            if KNOWN_PROPERTIES.contains(&k) || IGNORED_PROPERTIES.contains(&k) {
                return None;
            }
            if k == "workload" {
                return (!CORE_WORKLOAD_CLASSES.contains(&v.as_str())).then(|| {
                    format!("workload class `{v}` is not supported: running YCSB's CoreWorkload")
                });
            }
            if let Some((_, flag)) = REPLACED_BY_FLAGS.iter().find(|(p, _)| *p == k) {
                return Some(format!("workload property `{k}` ignored: use {flag}"));
            }
            Some(format!("unknown workload property `{k}` ignored"))
        })
        .collect()
}

/// Splits Java-properties text into key/value pairs: `key=value`, `key: value` or
/// `key value`; `#` and `!` start comment lines; surrounding whitespace is dropped; a line
/// ending in an odd number of `\` continues on the next. Later keys override earlier ones, as
/// in `java.util.Properties`. (Unicode escapes are not decoded: YCSB files do not use them.)
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(first) = lines.next() {
        let mut line = first.trim_start().to_owned();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        while line.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1 {
            line.pop();
            match lines.next() {
                Some(next) => line.push_str(next.trim_start()),
                None => break,
            }
        }
        let split = line
            .find(|c: char| c == '=' || c == ':' || c.is_whitespace())
            .unwrap_or(line.len());
        let key = line[..split].to_owned();
        let mut rest = line[split..].trim_start();
        if let Some(stripped) = rest.strip_prefix(['=', ':']) {
            rest = stripped.trim_start();
        }
        out.insert(key, rest.trim_end().to_owned());
    }
    out
}

fn invalid(property: &str, reason: impl Into<String>) -> BenchError {
    BenchError::InvalidProperty {
        property: property.to_owned(),
        reason: reason.into(),
    }
}

/// Typed access to the property map, each error naming the property and the value.
struct Props<'a>(&'a BTreeMap<String, String>);

impl Props<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    fn u64(&self, name: &str, default: u64) -> Result<u64, BenchError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| invalid(name, format!("`{v}` is not a non-negative integer"))),
        }
    }

    fn u32(&self, name: &str, default: u32) -> Result<u32, BenchError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| invalid(name, format!("`{v}` is not an integer in 0..={}", u32::MAX))),
        }
    }

    fn fraction(&self, name: &str, default: f64) -> Result<f64, BenchError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => match v.parse::<f64>() {
                Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
                _ => Err(invalid(name, format!("`{v}` is not a number in [0, 1]"))),
            },
        }
    }

    fn f64(&self, name: &str, default: f64) -> Result<f64, BenchError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(x),
                _ => Err(invalid(name, format!("`{v}` is not a finite number"))),
            },
        }
    }

    fn bool(&self, name: &str, default: bool) -> Result<bool, BenchError> {
        match self.get(name) {
            None => Ok(default),
            // Java's Boolean.parseBoolean is case-insensitive.
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(invalid(name, format!("`{v}` is neither true nor false"))),
        }
    }
}

impl CoreWorkload {
    /// Parses a YCSB workload file (Java properties).
    pub fn parse(text: &str) -> Result<Parsed, BenchError> {
        CoreWorkload::from_properties(&parse_properties(text))
    }

    /// Builds a workload from already split properties (a file, then `-p` overrides).
    pub fn from_properties(props: &BTreeMap<String, String>) -> Result<Parsed, BenchError> {
        let warnings = property_warnings(props);
        let p = Props(props);
        let d = CoreWorkload::default();

        let request_distribution = match p.get("requestdistribution").unwrap_or("uniform") {
            "uniform" => Distribution::Uniform,
            // YCSB's `zipfian` is the scrambled one (spec §6).
            "zipfian" => Distribution::Zipfian {
                theta: p.f64(
                    "zipfianconstant",
                    crate::generator::DEFAULT_ZIPFIAN_CONSTANT,
                )?,
                scrambled: true,
            },
            "latest" => Distribution::Latest {
                theta: p.f64(
                    "zipfianconstant",
                    crate::generator::DEFAULT_ZIPFIAN_CONSTANT,
                )?,
            },
            "hotspot" => Distribution::Hotspot {
                hot_data_fraction: p.fraction("hotspotdatafraction", 0.2)?,
                hot_op_fraction: p.fraction("hotspotopnfraction", 0.8)?,
            },
            "pareto" => Distribution::Pareto {
                alpha: p.f64("paretoalpha", DEFAULT_PARETO_ALPHA)?,
                permutation_seed: p.u64("paretoseed", 0)?,
            },
            "zipf" => Distribution::Zipf {
                s: p.f64("zipfexponent", 1.0)?,
                permutation_seed: p.u64("zipfseed", 0)?,
            },
            other => {
                return Err(invalid(
                    "requestdistribution",
                    format!(
                        "`{other}` is not one of uniform, zipfian, latest, hotspot, pareto, zipf"
                    ),
                ));
            }
        };
        request_distribution.validate()?;

        let scan_length_distribution = match p.get("scanlengthdistribution").unwrap_or("uniform") {
            "uniform" => ScanLengthDistribution::Uniform,
            "zipfian" => ScanLengthDistribution::Zipfian,
            other => {
                return Err(invalid(
                    "scanlengthdistribution",
                    format!("`{other}` is not one of uniform, zipfian"),
                ));
            }
        };
        let insert_order = match p.get("insertorder").unwrap_or("hashed") {
            "hashed" => InsertOrder::Hashed,
            "ordered" => InsertOrder::Ordered,
            other => {
                return Err(invalid(
                    "insertorder",
                    format!("`{other}` is not one of hashed, ordered"),
                ));
            }
        };

        let w = CoreWorkload {
            record_count: p.u64("recordcount", d.record_count)?,
            operation_count: p.u64("operationcount", d.operation_count)?,
            insert_start: p.u64("insertstart", d.insert_start)?,
            read_proportion: p.fraction("readproportion", d.read_proportion)?,
            update_proportion: p.fraction("updateproportion", d.update_proportion)?,
            insert_proportion: p.fraction("insertproportion", d.insert_proportion)?,
            scan_proportion: p.fraction("scanproportion", d.scan_proportion)?,
            read_modify_write_proportion: p
                .fraction("readmodifywriteproportion", d.read_modify_write_proportion)?,
            field_count: p.u32("fieldcount", d.field_count)?,
            field_length: p.u32("fieldlength", d.field_length)?,
            read_all_fields: p.bool("readallfields", d.read_all_fields)?,
            write_all_fields: p.bool("writeallfields", d.write_all_fields)?,
            request_distribution,
            min_scan_length: p.u64("minscanlength", d.min_scan_length)?,
            max_scan_length: p.u64("maxscanlength", d.max_scan_length)?,
            scan_length_distribution,
            insert_order,
            locality: match p.get("locality") {
                None => None,
                Some(_) => Some(p.fraction("locality", 0.0)?),
            },
            dcs: p.u32("dcs", d.dcs)?,
        };
        w.validate()?;
        Ok(Parsed {
            workload: w,
            warnings,
        })
    }

    /// Checks the cross-property constraints (proportions, scan bounds, DCs).
    pub fn validate(&self) -> Result<(), BenchError> {
        let sum = self.proportions().iter().map(|(_, p)| p).sum::<f64>();
        if (sum - 1.0).abs() > PROPORTION_TOLERANCE {
            return Err(invalid(
                "readproportion",
                format!(
                    "read + update + insert + scan + readmodifywrite proportions sum to {sum}, \
                     not 1 (unset ones default to read 0.95, update 0.05, others 0)"
                ),
            ));
        }
        if self.min_scan_length == 0 || self.min_scan_length > self.max_scan_length {
            return Err(invalid(
                "maxscanlength",
                format!(
                    "scan lengths need 1 ≤ minscanlength ({}) ≤ maxscanlength ({})",
                    self.min_scan_length, self.max_scan_length
                ),
            ));
        }
        if self.dcs == 0 {
            return Err(invalid("dcs", "there must be at least one data centre"));
        }
        if self.field_count == 0 {
            return Err(invalid("fieldcount", "a record needs at least one field"));
        }
        self.request_distribution.validate()
    }

    /// The five operation shares, in YCSB's order.
    pub fn proportions(&self) -> [(Op, f64); 5] {
        [
            (Op::Read, self.read_proportion),
            (Op::Update, self.update_proportion),
            (Op::Insert, self.insert_proportion),
            (Op::Scan, self.scan_proportion),
            (Op::ReadModifyWrite, self.read_modify_write_proportion),
        ]
    }

    /// The operation chooser for this mix.
    pub fn op_chooser(&self) -> OpChooser {
        OpChooser::new(&self.proportions())
    }

    /// The key chooser for `requestdistribution`.
    pub fn key_chooser(&self) -> Result<KeyChooser, BenchError> {
        KeyChooser::new(&self.request_distribution)
    }

    /// The scan length chooser.
    pub fn scan_length_chooser(&self) -> Result<ScanLengthChooser, BenchError> {
        ScanLengthChooser::new(
            self.scan_length_distribution,
            self.min_scan_length,
            self.max_scan_length,
        )
    }

    /// Bytes of one record's value: `fieldcount × fieldlength`.
    pub fn record_size(&self) -> usize {
        self.field_count as usize * self.field_length as usize
    }

    /// YCSB's name for key number `keynum`.
    pub fn key_name(&self, keynum: u64) -> String {
        key_name(keynum, self.insert_order)
    }

    /// The value of record `keynum` at `version`: [`CoreWorkload::record_size`] bytes.
    pub fn value(&self, keynum: u64, version: u64) -> Vec<u8> {
        record_value(keynum, version, self.record_size())
    }
}

/// YCSB's `CoreWorkload.buildKeyName`: `user` followed by the key number, FNV-hashed when
/// inserts are `hashed` (so consecutive inserts do not all land at the end of the key range).
pub fn key_name(keynum: u64, order: InsertOrder) -> String {
    let n = match order {
        InsertOrder::Hashed => fnv_hash64(keynum),
        InsertOrder::Ordered => keynum,
    };
    format!("user{n}")
}

/// A deterministic value of `len` printable bytes for `(keynum, version)`: one hash per 8
/// bytes (cheap enough to never be the load generator's bottleneck), different across keys and
/// versions so that a reader can tell which write it saw.
pub fn record_value(keynum: u64, version: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut state = keynum.wrapping_mul(GOLDEN_GAMMA) ^ version.rotate_left(32);
    while out.len() < len {
        let z = splitmix64(state);
        state = state.wrapping_add(GOLDEN_GAMMA);
        for b in z.to_le_bytes() {
            if out.len() == len {
                break;
            }
            // 64 printable ASCII characters from '0': values stay readable in redis-cli.
            out.push(b'0' + (b & 63));
        }
    }
    out
}

/// Draws operations by proportion (YCSB's `DiscreteGenerator`).
#[derive(Debug, Clone, PartialEq)]
pub struct OpChooser {
    /// Cumulative normalized shares, operations with share 0 left out.
    cumulative: Vec<(f64, Op)>,
}

impl OpChooser {
    /// A chooser over `(op, weight)`; weights are normalized. At least one must be positive.
    pub fn new(weights: &[(Op, f64)]) -> Self {
        let total: f64 = weights.iter().map(|(_, w)| w).sum();
        assert!(total > 0.0, "an operation mix needs a positive proportion");
        let mut acc = 0.0;
        let cumulative = weights
            .iter()
            .filter(|(_, w)| *w > 0.0)
            .map(|&(op, w)| {
                acc += w / total;
                (acc, op)
            })
            .collect();
        OpChooser { cumulative }
    }

    /// Draws the next operation.
    pub fn next_op<R: Rng + ?Sized>(&self, rng: &mut R) -> Op {
        let u: f64 = rng.random();
        self.cumulative
            .iter()
            .find(|(c, _)| u < *c)
            // Rounding can leave the last cumulative share just below 1.
            .or(self.cumulative.last())
            .map(|&(_, op)| op)
            .expect("at least one operation has a positive share")
    }
}

/// Draws scan lengths in `[min, max]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanLengthChooser {
    min: u64,
    max: u64,
    zipfian: Option<crate::generator::ZipfianGenerator>,
}

impl ScanLengthChooser {
    /// A chooser over `[min, max]` (`1 ≤ min ≤ max`).
    pub fn new(
        distribution: ScanLengthDistribution,
        min: u64,
        max: u64,
    ) -> Result<Self, BenchError> {
        if min == 0 || min > max {
            return Err(invalid(
                "maxscanlength",
                format!("scan lengths need 1 ≤ min ({min}) ≤ max ({max})"),
            ));
        }
        let zipfian = match distribution {
            ScanLengthDistribution::Uniform => None,
            ScanLengthDistribution::Zipfian => Some(crate::generator::ZipfianGenerator::new(
                crate::generator::DEFAULT_ZIPFIAN_CONSTANT,
            )),
        };
        Ok(ScanLengthChooser { min, max, zipfian })
    }

    /// Draws a scan length.
    pub fn next_length<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        let span = self.max - self.min + 1;
        match &mut self.zipfian {
            None => self.min + rng.random_range(0..span),
            Some(z) => self.min + z.next_rank(rng, span),
        }
    }
}

/// YCSB's canonical core workload files, bundled unchanged apart from a provenance header.
pub mod canonical {
    /// Workload A: 50 % read, 50 % update, zipfian.
    pub const A: &str = include_str!("../workloads/workloada");
    /// Workload B: 95 % read, 5 % update, zipfian.
    pub const B: &str = include_str!("../workloads/workloadb");
    /// Workload C: 100 % read, zipfian.
    pub const C: &str = include_str!("../workloads/workloadc");
    /// Workload D: 95 % read, 5 % insert, latest.
    pub const D: &str = include_str!("../workloads/workloadd");
    /// Workload E: 95 % scan (length U[1, 100]), 5 % insert, zipfian.
    pub const E: &str = include_str!("../workloads/workloade");
    /// Workload F: 50 % read, 50 % read-modify-write, zipfian.
    pub const F: &str = include_str!("../workloads/workloadf");

    /// All six, by letter.
    pub const ALL: [(char, &str); 6] = [('a', A), ('b', B), ('c', C), ('d', D), ('e', E), ('f', F)];

    /// The file for workload `letter` (`a`–`f`, either case).
    pub fn by_letter(letter: char) -> Option<&'static str> {
        ALL.iter()
            .find(|(l, _)| *l == letter.to_ascii_lowercase())
            .map(|(_, text)| *text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn parse(text: &str) -> CoreWorkload {
        CoreWorkload::parse(text).unwrap().workload
    }

    fn err_property(text: &str) -> String {
        match CoreWorkload::parse(text) {
            Err(BenchError::InvalidProperty { property, .. }) => property,
            other => panic!("expected InvalidProperty, got {other:?}"),
        }
    }

    /// The spec's table (§6): mix as (read, update, insert, scan, rmw), distribution.
    #[test]
    fn canonical_files_match_the_spec_table() {
        let zipf = Distribution::ycsb_zipfian();
        let table: [(char, [f64; 5], Distribution); 6] = [
            ('a', [0.5, 0.5, 0.0, 0.0, 0.0], zipf.clone()),
            ('b', [0.95, 0.05, 0.0, 0.0, 0.0], zipf.clone()),
            ('c', [1.0, 0.0, 0.0, 0.0, 0.0], zipf.clone()),
            (
                'd',
                [0.95, 0.0, 0.05, 0.0, 0.0],
                Distribution::Latest { theta: 0.99 },
            ),
            ('e', [0.0, 0.0, 0.05, 0.95, 0.0], zipf.clone()),
            ('f', [0.5, 0.0, 0.0, 0.0, 0.5], zipf),
        ];
        for (letter, mix, dist) in table {
            let text = canonical::by_letter(letter).unwrap();
            // Every bundled file pins its distribution (go-ycsb's default differs, spec §6).
            assert!(parse_properties(text).contains_key("requestdistribution"));
            let parsed = CoreWorkload::parse(text).unwrap();
            let w = parsed.workload;
            let got: Vec<f64> = w.proportions().iter().map(|(_, p)| *p).collect();
            assert_eq!(got, mix, "workload {letter}");
            assert_eq!(w.request_distribution, dist, "workload {letter}");
            assert_eq!((w.field_count, w.field_length), (10, 100), "1 KB records");
            assert_eq!(w.record_size(), 1000);
            assert_eq!(w.insert_order, InsertOrder::Hashed);
            // `workload=site.ycsb.workloads.CoreWorkload` is what runs: no warning.
            assert!(
                parsed.warnings.is_empty(),
                "{letter}: {:?}",
                parsed.warnings
            );
        }
        let e = parse(canonical::E);
        assert_eq!((e.min_scan_length, e.max_scan_length), (1, 100));
        assert_eq!(e.scan_length_distribution, ScanLengthDistribution::Uniform);
        assert_eq!(canonical::by_letter('A'), Some(canonical::A));
        assert_eq!(canonical::by_letter('g'), None);
    }

    /// YCSB's own files and harmless standard properties run without a warning; what is
    /// really ignored still warns, naming the flag that replaces it when there is one.
    #[test]
    fn standard_ycsb_properties_are_accepted_silently() {
        let text = "workload=site.ycsb.workloads.CoreWorkload\ndb=site.ycsb.BasicDB\n\
                    measurementtype=hdrhistogram\nstatus.interval=10\ntable=usertable\n\
                    exporter=site.ycsb.measurements.exporter.TextMeasurementsExporter\n\
                    readallfields=true\nrequestdistribution=zipfian\n";
        assert_eq!(
            CoreWorkload::parse(text).unwrap().warnings,
            Vec::<String>::new()
        );
        let legacy = "workload=com.yahoo.ycsb.workloads.CoreWorkload\n";
        assert!(CoreWorkload::parse(legacy).unwrap().warnings.is_empty());

        let text = "workload=site.ycsb.workloads.RestWorkload\nthreadcount=8\nfrobnicate=1\n";
        assert_eq!(
            CoreWorkload::parse(text).unwrap().warnings,
            vec![
                "unknown workload property `frobnicate` ignored".to_owned(),
                "workload property `threadcount` ignored: use --threads".to_owned(),
                "workload class `site.ycsb.workloads.RestWorkload` is not supported: running \
                 YCSB's CoreWorkload"
                    .to_owned(),
            ]
        );
    }

    #[test]
    fn properties_syntax() {
        let p = parse_properties(
            "# comment\n  ! also comment\n\na=1\n b : 2 \nc 3\nd=x=y\ne\\\n  f=4\na=5\nempty=\n",
        );
        assert_eq!(p.get("a").map(String::as_str), Some("5"));
        assert_eq!(p.get("b").map(String::as_str), Some("2"));
        assert_eq!(p.get("c").map(String::as_str), Some("3"));
        assert_eq!(p.get("d").map(String::as_str), Some("x=y"));
        assert_eq!(p.get("ef").map(String::as_str), Some("4"));
        assert_eq!(p.get("empty").map(String::as_str), Some(""));
        assert_eq!(p.len(), 6);
    }

    #[test]
    fn defaults_are_ycsbs() {
        let w = parse("");
        assert_eq!(w, CoreWorkload::default());
        assert_eq!(w.read_proportion, 0.95);
        assert_eq!(w.max_scan_length, 1000);
    }

    #[test]
    fn distribution_parameters_and_extensions() {
        let w = parse(
            "requestdistribution=hotspot\nhotspotdatafraction=0.1\nhotspotopnfraction=0.9\n\
             locality=0.9\ndcs=2\nrecordcount=128000\noperationcount=10\n\
             readproportion=0.6667\nupdateproportion=0.3333\nfieldcount=1\nfieldlength=500",
        );
        assert_eq!(
            w.request_distribution,
            Distribution::Hotspot {
                hot_data_fraction: 0.1,
                hot_op_fraction: 0.9
            }
        );
        assert_eq!((w.locality, w.dcs, w.record_count), (Some(0.9), 2, 128_000));
        assert_eq!(w.record_size(), 500);
        let w = parse("requestdistribution=pareto\nparetoalpha=1.5\nparetoseed=7");
        assert_eq!(
            w.request_distribution,
            Distribution::Pareto {
                alpha: 1.5,
                permutation_seed: 7
            }
        );
        let w = parse("requestdistribution=zipfian\nzipfianconstant=0.5");
        assert_eq!(
            w.request_distribution,
            Distribution::Zipfian {
                theta: 0.5,
                scrambled: true
            }
        );
    }

    #[test]
    fn malformed_values_are_refused_with_the_property() {
        assert_eq!(err_property("recordcount=lots"), "recordcount");
        assert_eq!(err_property("recordcount=-1"), "recordcount");
        assert_eq!(err_property("readproportion=1.5"), "readproportion");
        assert_eq!(err_property("readallfields=yes"), "readallfields");
        assert_eq!(
            err_property("requestdistribution=gaussian"),
            "requestdistribution"
        );
        assert_eq!(err_property("insertorder=random"), "insertorder");
        assert_eq!(
            err_property("scanlengthdistribution=normal"),
            "scanlengthdistribution"
        );
        assert_eq!(
            err_property("requestdistribution=zipfian\nzipfianconstant=1.2"),
            "zipfianconstant"
        );
        assert_eq!(
            err_property("requestdistribution=pareto\nparetoalpha=0.9"),
            "paretoalpha"
        );
        assert_eq!(
            err_property("minscanlength=10\nmaxscanlength=5"),
            "maxscanlength"
        );
        assert_eq!(err_property("dcs=0"), "dcs");
        assert_eq!(err_property("locality=2"), "locality");
        // The default update share (0.05) makes this sum to 1.05.
        assert_eq!(err_property("readproportion=1"), "readproportion");
        let msg = CoreWorkload::parse("readproportion=0.5")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("sum to 0.55"), "{msg}");
    }

    #[test]
    fn readallfields_is_case_insensitive_like_java() {
        let w = parse("readallfields=TRUE\nwriteallfields=True");
        assert!(w.read_all_fields && w.write_all_fields);
    }

    #[test]
    fn op_mix_follows_proportions() {
        let w = parse(canonical::B);
        let chooser = w.op_chooser();
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut counts = BTreeMap::new();
        for _ in 0..100_000 {
            *counts.entry(chooser.next_op(&mut rng)).or_insert(0u32) += 1;
        }
        let reads = f64::from(counts[&Op::Read]) / 100_000.0;
        assert!((reads - 0.95).abs() < 0.005, "reads {reads}");
        assert_eq!(counts.len(), 2, "only read and update: {counts:?}");
        let f = parse(canonical::F).op_chooser();
        let rmw = (0..10_000)
            .filter(|_| f.next_op(&mut rng) == Op::ReadModifyWrite)
            .count();
        assert!((4_700..5_300).contains(&rmw), "rmw {rmw}");
    }

    #[test]
    fn key_names_like_ycsb() {
        assert_eq!(key_name(42, InsertOrder::Ordered), "user42");
        assert_eq!(
            key_name(42, InsertOrder::Hashed),
            format!("user{}", fnv_hash64(42))
        );
        assert_ne!(
            key_name(1, InsertOrder::Hashed),
            key_name(2, InsertOrder::Hashed)
        );
    }

    #[test]
    fn values_are_sized_deterministic_and_distinct() {
        let w = parse(canonical::A);
        let v = w.value(3, 0);
        assert_eq!(v.len(), 1000);
        assert_eq!(v, w.value(3, 0));
        assert_ne!(v, w.value(3, 1));
        assert_ne!(v, w.value(4, 0));
        assert!(v.iter().all(|b| b.is_ascii_graphic()));
        assert!(record_value(0, 0, 0).is_empty());
        assert_eq!(record_value(9, 9, 13).len(), 13);
    }

    #[test]
    fn scan_lengths_in_bounds() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for dist in [
            ScanLengthDistribution::Uniform,
            ScanLengthDistribution::Zipfian,
        ] {
            let mut c = ScanLengthChooser::new(dist, 2, 8).unwrap();
            let mut seen = [false; 9];
            for _ in 0..2_000 {
                let l = c.next_length(&mut rng);
                assert!((2..=8).contains(&l));
                seen[l as usize] = true;
            }
            assert!(seen[2..].iter().all(|&s| s), "{dist:?} covers [2, 8]");
        }
        assert!(ScanLengthChooser::new(ScanLengthDistribution::Uniform, 0, 5).is_err());
    }

    proptest! {
        #[test]
        fn op_chooser_deterministic_and_never_picks_zero_share(
            weights in proptest::collection::vec(0u8..4, 5), seed: u64
        ) {
            prop_assume!(weights.iter().any(|&w| w > 0));
            let ops = [Op::Read, Op::Update, Op::Insert, Op::Scan, Op::ReadModifyWrite];
            let mix: Vec<(Op, f64)> =
                ops.iter().zip(&weights).map(|(&o, &w)| (o, f64::from(w))).collect();
            let chooser = OpChooser::new(&mix);
            let draw = || {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                (0..100).map(|_| chooser.next_op(&mut rng)).collect::<Vec<_>>()
            };
            let drawn = draw();
            prop_assert_eq!(&drawn, &draw());
            for op in drawn {
                let i = ops.iter().position(|&o| o == op).unwrap();
                prop_assert!(weights[i] > 0);
            }
        }

        #[test]
        fn parser_never_panics(text in "[a-z=:#! \\\\\n0-9.]{0,200}") {
            let _ = CoreWorkload::parse(&text);
        }
    }
}
