//! The kvpaxos YCSB request generator and request-file format (spec `repartitioning.md` §5,
//! "Workload fidelity for the reproduction"), ported from `douglaspereira04/kvpaxos` at
//! `2afa8abd04abf150e4c0a171eb3df0789c2ffb88`:
//!
//! - generation: `generate_export_requests` and `next_operation` in
//!   `src/request/request_generation.cpp`, with the distributions in
//!   `src/request/{zipfian,scrambled_zipfian,skewed_latest}_int_distribution.cpp` and the insert
//!   counter in `src/request/acknowledged_counter.cpp`;
//! - workloads: `experiments/workloads/ycsb_{d,e}_1000000.toml` ([`Workload::ycsb_d`],
//!   [`Workload::ycsb_e`], [`Workload::from_kvpaxos_toml`]);
//! - population: `initialize_scheduler` in `src/replica.cpp` ([`population`]);
//! - file format: the writer in `generate_export_requests` and the reader `import_cs_request`
//!   ([`write_requests`], [`read_requests`]).
//!
//! # What is reproduced
//!
//! - **Operation choice.** The operations with a positive proportion, in kvpaxos' order READ,
//!   UPDATE, INSERT, SCAN, are normalised by their sum and chosen by one uniform draw in [0, 1).
//! - **Inserts.** Sequential keys from `n_records`. The "last value" that reads are bounded by
//!   starts at `n_records − 1` and becomes the newest inserted key.
//! - **Reads and updates.** The key is redrawn until it is `< last value`: strictly below, so the
//!   newest key is never read. That is kvpaxos' bound, kept on purpose.
//! - **Scans.** The length is drawn first, uniform in `[min_scan_length, max_scan_length]` (2
//!   and 8 in both workload files). The start key is then redrawn until
//!   `key + length < last value`. A scan touches `[key, key + length)` (kvpaxos'
//!   `update_graph`).
//! - **`UNIFORM`.** Uniform over `[0, n_records]`, a fixed range that does not grow with inserts.
//! - **`ZIPFIAN`.** YCSB's scrambled zipfian, with θ = 0.99:
//!   - ranks come from a zipfian over 10¹⁰ items with the precomputed ζ = 26.469…;
//!   - a rank is hashed with FNV-64 and reduced modulo the item count
//!     `n_records + expected_inserts + 1`, where
//!     `expected_inserts = ⌊n_operations · insert_proportion · 2⌋`.
//! - **`LATEST`.** Skewed latest: `last − zipf(last)`. The zipfian is built over `n_records` items
//!   and extends its ζ incrementally as `last` grows. It computes η with the *initial* item
//!   count, never the current one (YCSB's `ZipfianGenerator` does the same).
//! - **Uniform variate.** Each zipfian draw takes one 32-bit word `r` and uses `u = r / (2³² − 1)`,
//!   as kvpaxos does with `std::mt19937`. So `u = 1` is possible, exactly as there.
//!
//! The zipfian, scrambled and latest outputs match the repository's C++ for the same 32-bit
//! words. The tests hold vectors produced by compiling the repository's headers with g++ 12.
//!
//! # Departures
//!
//! - **Random source.** kvpaxos seeds a separate `std::mt19937` from `std::random_device` for
//!   each generator, so its files cannot be reproduced. Here, three `ChaCha8Rng` streams of
//!   one seed (operation, key, scan length) make [`generate`] deterministic.
//!   - The *distributions* are kvpaxos'; the exact sequence is not.
//!   - To replay the very stream of a kvpaxos run, read its file with [`read_requests`].
//! - **The FNV fold.** The scrambled hash reproduces what kvpaxos *compiles to*, not YCSB:
//!   - `scrambled_zipfian_int_distribution::fnvhash64` returns `abs(hashval)` on a `long`;
//!   - with the headers it includes, the only `abs` in scope is C's `int abs(int)`;
//!   - so the 64-bit FNV value is truncated to its low 32 bits, as `i32`, before `abs`. This was
//!     checked with g++ 12.2 and the toml11 3.4.0 include set;
//!   - YCSB's Java `Math.abs(long)` keeps all 64 bits, and
//!     [`crate::generator::fnv_hash64`] is that one;
//!   - the sets of hot keys therefore differ from YCSB's, but the popularity is the same;
//!   - on the one 32-bit value `i32::MIN`, C's `abs` is undefined, and kvpaxos could produce a
//!     negative key. We take `2³¹` there instead.
//! - **Scan lengths.** Only the `UNIFORM` scan-length distribution is ported. Both workload files
//!   use it. kvpaxos' `ZIPFIAN` scan lengths, scrambled over `[0, n_records]`, can produce
//!   length 0, which kvpaxos cannot execute.
//! - **Validation.** [`Workload::validate`] rejects workloads on which kvpaxos would loop forever,
//!   because no key satisfies the redraw bound (for example `n_records ≤ max_scan_length + 1`
//!   with scans). It also rejects scans longer than [`MAX_SCAN_LENGTH`] and key spaces beyond
//!   `u32`.
//! - **Keys.** Keys are `u32` here; kvpaxos' are `int`. The replay stores a key as 4 big-endian
//!   bytes ([`key_bytes`]).
//! - **UPDATE.** kvpaxos generates UPDATE requests (code 5) and counts them, but never executes
//!   them. Meridian executes them. Neither D nor E contains any.
//!
//! # File format
//!
//! One request per line, `type,key,arg,`, with a trailing comma and no header:
//! - `type` is 0 READ, 1 WRITE (= insert), 2 SCAN or 5 UPDATE;
//! - `arg` is the scan length, and is empty for the other types (`0,17,,`);
//! - codes 3 SYNC, 4 ERROR and 6 DUMMY are kvpaxos-internal and are refused.
//!
//! kvpaxos reads the file with `sscanf("%d,%d,%d")` and checks nothing. [`read_requests`] instead:
//! - validates every field;
//! - bounds line length and request count;
//! - names the line and field of the first fault.

use std::fmt;
use std::io::{self, BufRead, BufWriter, Read, Write};
use std::ops::Range;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::BenchError;

/// kvpaxos' zipfian constant θ (`zipfian_int_distribution::ZIPFIAN_CONSTANT`).
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// The rank space of the scrambled zipfian (`scrambled_zipfian_int_distribution::ITEM_COUNT`).
const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
/// ζ(10¹⁰, 0.99), precomputed (`scrambled_zipfian_int_distribution::ZETAN`).
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// The longest scan a request may carry.
///
/// kvpaxos copies the argument into `client_message::args`, a `char[4]`, so a scan length
/// there has at most 3 digits.
pub const MAX_SCAN_LENGTH: u32 = 999;

/// The longest line [`read_requests`] accepts, in bytes, without its `\n`.
///
/// A valid line is at most 26 bytes: `5,4294967295,4294967295,\r`. The bound leaves room for
/// leading zeros.
pub const MAX_LINE_LEN: usize = 64;

/// A request type, with its kvpaxos file code (`enum request_type` in `src/types/types.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// `READ` (0): one key.
    Read,
    /// `WRITE` (1): one key. In generated workloads, an insert of a new, sequential key.
    Write,
    /// `SCAN` (2): the keys `[key, key + arg)`.
    Scan,
    /// `UPDATE` (5): one existing key.
    Update,
}

impl Op {
    /// The code kvpaxos writes for this type.
    pub const fn code(self) -> u8 {
        match self {
            Op::Read => 0,
            Op::Write => 1,
            Op::Scan => 2,
            Op::Update => 5,
        }
    }

    /// The type with file code `code`. Returns `None` for the kvpaxos-internal codes (3 SYNC,
    /// 4 ERROR, 6 DUMMY) and for unknown ones.
    pub const fn from_code(code: u32) -> Option<Op> {
        match code {
            0 => Some(Op::Read),
            1 => Some(Op::Write),
            2 => Some(Op::Scan),
            5 => Some(Op::Update),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Read => "READ",
            Op::Write => "WRITE",
            Op::Scan => "SCAN",
            Op::Update => "UPDATE",
        })
    }
}

/// One kvpaxos request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Request {
    /// The request type.
    pub op: Op,
    /// The key. For a scan, the first key.
    pub key: u32,
    /// For [`Op::Scan`], the length: the number of consecutive integer keys. Otherwise 0 in
    /// generated requests, and ignored.
    pub arg: u32,
}

impl Request {
    /// The keys this request touches: `[key, key + arg)` for a scan, `[key, key + 1)` otherwise.
    ///
    /// The end saturates at `u32::MAX`. [`generate`] and [`read_requests`] never produce a scan
    /// whose range does not fit.
    pub fn keys(&self) -> Range<u32> {
        let len = if self.op == Op::Scan { self.arg } else { 1 };
        self.key..self.key.saturating_add(len)
    }
}

/// A key as the replay stores it: 4 big-endian bytes, so the storage order is the integer order.
pub const fn key_bytes(key: u32) -> [u8; 4] {
    key.to_be_bytes()
}

/// The key popularity (`workload.data_distribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyDistribution {
    /// `UNIFORM`: uniform over `[0, n_records]`.
    Uniform,
    /// `ZIPFIAN`: scrambled zipfian with θ = 0.99 over `n_records + expected_inserts + 1` items.
    Zipfian,
    /// `LATEST`: skewed latest, `last − zipf(last)`.
    Latest,
}

/// A kvpaxos workload: the `workload.*` keys of a kvpaxos workload file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// `n_records`: the initial key count. Keys `0..=n_records` are populated (see [`population`]).
    pub n_records: u32,
    /// `n_operations`: how many requests [`generate`] yields.
    pub n_operations: u64,
    /// `read_proportion`.
    pub read_proportion: f64,
    /// `update_proportion`.
    pub update_proportion: f64,
    /// `insert_proportion`: inserts, written as `WRITE` (code 1).
    pub insert_proportion: f64,
    /// `scan_proportion`.
    pub scan_proportion: f64,
    /// `data_distribution`.
    pub distribution: KeyDistribution,
    /// `min_scan_length`: the scan length is uniform in `[min_scan_length, max_scan_length]`.
    pub min_scan_length: u32,
    /// `max_scan_length`, inclusive.
    pub max_scan_length: u32,
}

fn invalid(property: &str, reason: impl Into<String>) -> BenchError {
    BenchError::InvalidProperty {
        property: property.to_owned(),
        reason: reason.into(),
    }
}

impl Workload {
    /// YCSB D as in `experiments/workloads/ycsb_d_1000000.toml`:
    /// - 95 % reads and 5 % inserts, no update or scan;
    /// - `LATEST` keys;
    /// - scan lengths 2..=8, unused here.
    ///
    /// The repository file uses `n_records = 10⁶` and `n_operations = 5·10⁷`.
    pub fn ycsb_d(n_records: u32, n_operations: u64) -> Workload {
        Workload {
            n_records,
            n_operations,
            read_proportion: 0.95,
            update_proportion: 0.0,
            insert_proportion: 0.05,
            scan_proportion: 0.0,
            distribution: KeyDistribution::Latest,
            min_scan_length: 2,
            max_scan_length: 8,
        }
    }

    /// YCSB E as in `experiments/workloads/ycsb_e_1000000.toml`:
    /// - 95 % scans and 5 % *inserts*, no read or update;
    /// - `ZIPFIAN` keys;
    /// - scan lengths uniform in 2..=8.
    ///
    /// The repository file uses `n_records = 10⁶` and `n_operations = 5·10⁶`. The paper's text
    /// calls E's writes "updates of existing keys", but the file says `insert_proportion = 0.05`
    /// and `update_proportion = 0.0`. This follows the file.
    pub fn ycsb_e(n_records: u32, n_operations: u64) -> Workload {
        Workload {
            n_records,
            n_operations,
            read_proportion: 0.0,
            update_proportion: 0.0,
            insert_proportion: 0.05,
            scan_proportion: 0.95,
            distribution: KeyDistribution::Zipfian,
            min_scan_length: 2,
            max_scan_length: 8,
        }
    }

    /// Parses a kvpaxos workload file, such as `experiments/workloads/ycsb_e_1000000.toml`.
    ///
    /// It reads the keys kvpaxos' `generate_export_requests` reads and ignores the others
    /// (`export`, `output.*`, `execution.*`).
    /// - `scan_length_distribution`, `min_scan_length` and `max_scan_length` are required only
    ///   when `scan_proportion > 0`, as in kvpaxos. Without them the lengths default to 2..=8.
    /// - `workload.single_distribution = false` is refused: kvpaxos generates nothing then.
    ///
    /// The result is validated.
    pub fn from_kvpaxos_toml(text: &str) -> Result<Workload, BenchError> {
        let root: toml::Table =
            toml::from_str(text).map_err(|e| invalid("workload", format!("not TOML: {e}")))?;
        let w = root
            .get("workload")
            .and_then(toml::Value::as_table)
            .ok_or_else(|| invalid("workload", "missing [workload] table"))?;
        let int = |name: &str| -> Result<i64, BenchError> {
            w.get(name)
                .ok_or_else(|| invalid(&format!("workload.{name}"), "missing"))?
                .as_integer()
                .ok_or_else(|| invalid(&format!("workload.{name}"), "not an integer"))
        };
        let float = |name: &str| -> Result<f64, BenchError> {
            match w.get(name) {
                Some(toml::Value::Float(f)) => Ok(*f),
                Some(toml::Value::Integer(i)) => Ok(*i as f64),
                Some(_) => Err(invalid(&format!("workload.{name}"), "not a number")),
                None => Err(invalid(&format!("workload.{name}"), "missing")),
            }
        };
        let string = |name: &str| -> Result<&str, BenchError> {
            w.get(name)
                .ok_or_else(|| invalid(&format!("workload.{name}"), "missing"))?
                .as_str()
                .ok_or_else(|| invalid(&format!("workload.{name}"), "not a string"))
        };
        if let Some(single) = w.get("single_distribution")
            && single.as_bool() != Some(true)
        {
            return Err(invalid(
                "workload.single_distribution",
                "kvpaxos only generates requests when this is true",
            ));
        }
        let n_records = u32::try_from(int("n_records")?)
            .map_err(|_| invalid("workload.n_records", "must be in 0..=4294967295"))?;
        let n_operations = u64::try_from(int("n_operations")?)
            .map_err(|_| invalid("workload.n_operations", "must not be negative"))?;
        let distribution = match string("data_distribution")? {
            "UNIFORM" => KeyDistribution::Uniform,
            "ZIPFIAN" => KeyDistribution::Zipfian,
            "LATEST" => KeyDistribution::Latest,
            other => {
                return Err(invalid(
                    "workload.data_distribution",
                    format!("`{other}`: expected UNIFORM, ZIPFIAN or LATEST"),
                ));
            }
        };
        let scan_proportion = float("scan_proportion")?;
        let (mut min_scan_length, mut max_scan_length) = (2, 8);
        if scan_proportion > 0.0 {
            let dist = string("scan_length_distribution")?;
            if dist != "UNIFORM" {
                return Err(invalid(
                    "workload.scan_length_distribution",
                    format!("`{dist}`: only UNIFORM is ported"),
                ));
            }
            let len = |name: &str| {
                u32::try_from(int(name)?)
                    .map_err(|_| invalid(&format!("workload.{name}"), "must not be negative"))
            };
            min_scan_length = len("min_scan_length")?;
            max_scan_length = len("max_scan_length")?;
        }
        let workload = Workload {
            n_records,
            n_operations,
            read_proportion: float("read_proportion")?,
            update_proportion: float("update_proportion")?,
            insert_proportion: float("insert_proportion")?,
            scan_proportion,
            distribution,
            min_scan_length,
            max_scan_length,
        };
        workload.validate()?;
        Ok(workload)
    }

    /// The operations with a positive proportion, in kvpaxos' order: READ, UPDATE, INSERT, SCAN.
    fn operation_weights(&self) -> Vec<(Op, f64)> {
        [
            (Op::Read, self.read_proportion),
            (Op::Update, self.update_proportion),
            (Op::Write, self.insert_proportion),
            (Op::Scan, self.scan_proportion),
        ]
        .into_iter()
        .filter(|&(_, p)| p > 0.0)
        .collect()
    }

    /// kvpaxos' `expectednewkeys`: `(int)(n_operations · insert_proportion · 2.0)`.
    pub fn expected_new_keys(&self) -> u64 {
        (self.n_operations as f64 * self.insert_proportion * 2.0) as u64
    }

    /// Checks that the workload is well-formed and that every redraw loop can terminate.
    /// Errors are [`BenchError::InvalidProperty`] and name the property.
    pub fn validate(&self) -> Result<(), BenchError> {
        for (name, p) in [
            ("read_proportion", self.read_proportion),
            ("update_proportion", self.update_proportion),
            ("insert_proportion", self.insert_proportion),
            ("scan_proportion", self.scan_proportion),
        ] {
            if !p.is_finite() || p < 0.0 {
                return Err(invalid(
                    &format!("workload.{name}"),
                    format!("{p}: must be finite and ≥ 0"),
                ));
            }
        }
        let sum = self.read_proportion
            + self.update_proportion
            + self.insert_proportion
            + self.scan_proportion;
        if !(sum > 0.0 && sum.is_finite()) {
            return Err(invalid(
                "workload.read_proportion",
                "the proportions must have a positive, finite sum",
            ));
        }
        // Reads need a key `< last`, where `last` starts at `n_records − 1`.
        if self.n_records < 2 {
            return Err(invalid(
                "workload.n_records",
                format!(
                    "{}: must be ≥ 2 (reads take keys < n_records − 1)",
                    self.n_records
                ),
            ));
        }
        if self.scan_proportion > 0.0 {
            if self.min_scan_length == 0 || self.min_scan_length > self.max_scan_length {
                return Err(invalid(
                    "workload.min_scan_length",
                    format!(
                        "scan lengths [{}, {}]: need 1 ≤ min ≤ max",
                        self.min_scan_length, self.max_scan_length
                    ),
                ));
            }
            if self.max_scan_length > MAX_SCAN_LENGTH {
                return Err(invalid(
                    "workload.max_scan_length",
                    format!(
                        "{}: at most {MAX_SCAN_LENGTH} (kvpaxos' 3-digit argument)",
                        self.max_scan_length
                    ),
                ));
            }
            // A scan needs `key + len < last` with `last ≥ n_records − 1`.
            if u64::from(self.n_records) < u64::from(self.max_scan_length) + 2 {
                return Err(invalid(
                    "workload.n_records",
                    format!(
                        "{}: must be ≥ max_scan_length + 2 = {}, or no scan can start",
                        self.n_records,
                        u64::from(self.max_scan_length) + 2
                    ),
                ));
            }
        }
        if u64::from(self.n_records) + self.n_operations > u64::from(u32::MAX) {
            return Err(invalid(
                "workload.n_operations",
                format!(
                    "n_records + n_operations = {} exceeds the u32 key space",
                    u64::from(self.n_records) + self.n_operations
                ),
            ));
        }
        Ok(())
    }
}

/// The initial population, as kvpaxos' `initialize_scheduler` (`src/replica.cpp`) performs it:
/// a `WRITE` of each key in `0..=n_records`.
///
/// - That is `n_records + 1` writes: the loop bound is inclusive. The last one, key
///   `n_records`, is also the first key [`generate`] inserts.
/// - kvpaxos runs each write through `process_populate_request`:
///   - it maps the key round-robin to a partition;
///   - it stores an empty value;
///   - unless the method is `ROUND_ROBIN`, it adds the key to the co-access graph, with window
///     expiry when the window is positive.
/// - Populated keys therefore count as accesses in the first graph.
pub fn population(n_records: u32) -> impl Iterator<Item = Request> + Clone {
    (0..=n_records).map(|key| Request {
        op: Op::Write,
        key,
        arg: 0,
    })
}

/// Sums `1/(i+1)^θ` for `i` in `start..end`, starting from `initial` (kvpaxos' `zetastatic`).
fn zeta(start: u64, end: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in start..end {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// One uniform variate in [0, 1] from one 32-bit word, as kvpaxos derives it from `mt19937`.
fn unit_from_u32<R: RngCore + ?Sized>(rng: &mut R) -> f64 {
    f64::from(rng.next_u32()) / f64::from(u32::MAX)
}

/// kvpaxos' `zipfian_int_distribution` (YCSB's `ZipfianGenerator`), with base 0.
#[derive(Debug, Clone)]
struct Zipfian {
    /// The item count it was built for. η always uses this count.
    items: u64,
    theta: f64,
    alpha: f64,
    zeta2theta: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: u64,
}

impl Zipfian {
    /// `init(0, items − 1, θ, zetan)`.
    fn with_zetan(items: u64, zetan: f64) -> Zipfian {
        let theta = ZIPFIAN_CONSTANT;
        let mut z = Zipfian {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2theta: zeta(0, 2, theta, 0.0),
            zetan,
            eta: 0.0,
            count_for_zeta: items,
        };
        z.eta = z.eta();
        z
    }

    /// `init(0, items − 1)`: ζ computed over `items`.
    fn new(items: u64) -> Zipfian {
        Zipfian::with_zetan(items, zeta(0, items, ZIPFIAN_CONSTANT, 0.0))
    }

    fn eta(&self) -> f64 {
        (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta))
            / (1.0 - self.zeta2theta / self.zetan)
    }

    /// `next(urng, itemcount)`: a value in `[0, itemcount]`.
    ///
    /// ζ is extended when `itemcount` grows. Item-count decrease is not allowed, as in kvpaxos,
    /// so ζ then stays as it was.
    fn next<R: RngCore + ?Sized>(&mut self, rng: &mut R, itemcount: u64) -> u64 {
        if itemcount > self.count_for_zeta {
            self.zetan = zeta(self.count_for_zeta, itemcount, self.theta, self.zetan);
            self.count_for_zeta = itemcount;
            self.eta = self.eta();
        }
        let u = unit_from_u32(rng);
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        (itemcount as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }
}

/// kvpaxos' `fnvhash64` as compiled: FNV over the 8 low-to-high bytes, then C's `int abs(int)`
/// on the low 32 bits (see the module header). `i32::MIN` gives 2³¹, where C is undefined.
fn kvpaxos_fnv_hash(val: u64) -> u64 {
    let hash = crate::generator::fnv1_64(val);
    u64::from((hash as u32 as i32).unsigned_abs())
}

/// The key chooser of one workload.
#[derive(Debug, Clone)]
enum KeyGen {
    /// Uniform over `[0, max]`.
    Uniform { max: u64 },
    /// Scrambled zipfian over `item_count` keys `[0, item_count)`.
    Zipfian { ranks: Zipfian, item_count: u64 },
    /// `last − zipf(last)`.
    Latest { zipf: Zipfian },
}

impl KeyGen {
    fn new(w: &Workload) -> KeyGen {
        match w.distribution {
            KeyDistribution::Uniform => KeyGen::Uniform {
                max: u64::from(w.n_records),
            },
            KeyDistribution::Zipfian => KeyGen::Zipfian {
                // kvpaxos: init(0, ITEM_COUNT) with the precomputed ZETAN, so 10¹⁰ + 1 items.
                ranks: Zipfian::with_zetan(SCRAMBLED_ITEM_COUNT + 1, SCRAMBLED_ZETAN),
                item_count: u64::from(w.n_records) + w.expected_new_keys() + 1,
            },
            // kvpaxos: zipfian_int_distribution(0, insertkeysequence->last_value()), where
            // last_value() = n_records − 1, so n_records items.
            KeyDistribution::Latest => KeyGen::Latest {
                zipf: Zipfian::new(u64::from(w.n_records)),
            },
        }
    }

    /// One draw. `last` is the insert counter's last value. Returns `None` for a value below 0,
    /// which the caller's redraw bound rejects as well.
    fn draw<R: RngCore + ?Sized>(&mut self, rng: &mut R, last: u64) -> Option<u64> {
        match self {
            KeyGen::Uniform { max } => Some(rng.random_range(0..=*max)),
            KeyGen::Zipfian { ranks, item_count } => {
                let rank = ranks.next(rng, ranks.items);
                Some(kvpaxos_fnv_hash(rank) % *item_count)
            }
            KeyGen::Latest { zipf } => last.checked_sub(zipf.next(rng, last)),
        }
    }
}

/// The request stream of a [`Workload`]: an iterator of `n_operations` requests, built by
/// [`generate`].
#[derive(Debug, Clone)]
pub struct Generator {
    remaining: u64,
    ops: Vec<(Op, f64)>,
    op_sum: f64,
    keys: KeyGen,
    min_scan_length: u32,
    max_scan_length: u32,
    /// The next insert key (`acknowledged_counter::counter_`).
    next_insert: u64,
    /// The highest acknowledged insert (`acknowledged_counter::limit_`), starting at
    /// `n_records − 1`.
    last: u64,
    op_rng: ChaCha8Rng,
    key_rng: ChaCha8Rng,
    len_rng: ChaCha8Rng,
}

impl Generator {
    /// The insert counter's last value. Reads and updates take keys strictly below it, and scans
    /// end strictly below it.
    pub fn last_value(&self) -> u32 {
        self.last as u32
    }

    /// kvpaxos' `next_operation`: walk the normalised proportions with one uniform draw.
    fn next_op(&mut self) -> Op {
        let mut val: f64 = self.op_rng.random();
        for &(op, p) in &self.ops {
            let vw = p / self.op_sum;
            if val < vw {
                return op;
            }
            val -= vw;
        }
        // kvpaxos throws here; only rounding can get here, so take the last operation.
        self.ops[self.ops.len() - 1].0
    }

    /// Redraws until `key + span < last` (span 0 for reads and updates, the length for scans).
    fn bounded_key(&mut self, span: u64) -> u32 {
        loop {
            if let Some(key) = self.keys.draw(&mut self.key_rng, self.last)
                && key + span < self.last
            {
                return key as u32;
            }
        }
    }
}

impl Iterator for Generator {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let op = self.next_op();
        let request = match op {
            Op::Read | Op::Update => Request {
                op,
                key: self.bounded_key(0),
                arg: 0,
            },
            Op::Scan => {
                let len = self
                    .len_rng
                    .random_range(self.min_scan_length..=self.max_scan_length);
                Request {
                    op,
                    key: self.bounded_key(u64::from(len)),
                    arg: len,
                }
            }
            Op::Write => {
                let key = self.next_insert;
                self.next_insert += 1;
                self.last = self.last.max(key);
                Request {
                    op,
                    key: key as u32,
                    arg: 0,
                }
            }
        };
        Some(request)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl ExactSizeIterator for Generator {}

/// The request stream of `workload`, deterministic in `seed`.
///
/// The operation, key and scan-length draws come from three independent `ChaCha8Rng` streams
/// of `seed`. Changing the operation mix does not disturb the scan lengths.
///
/// The stream starts after the [`population`]. It fails only when [`Workload::validate`] fails.
pub fn generate(workload: &Workload, seed: u64) -> Result<Generator, BenchError> {
    workload.validate()?;
    let ops = workload.operation_weights();
    let op_sum = ops.iter().map(|&(_, p)| p).sum();
    let stream = |s: u64| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(s);
        rng
    };
    Ok(Generator {
        remaining: workload.n_operations,
        ops,
        op_sum,
        keys: KeyGen::new(workload),
        min_scan_length: workload.min_scan_length,
        max_scan_length: workload.max_scan_length,
        next_insert: u64::from(workload.n_records),
        last: u64::from(workload.n_records) - 1,
        op_rng: stream(0),
        key_rng: stream(1),
        len_rng: stream(2),
    })
}

/// Writes `requests` in kvpaxos' format, one `type,key,arg,` line each, with `\n` endings.
///
/// `arg` is written for scans, and for other types only when it is not 0, so generated files
/// are byte-for-byte kvpaxos' (`0,17,,`). Returns the number of lines. The writer is buffered
/// internally and flushed at the end.
pub fn write_requests<W, I>(w: W, requests: I) -> io::Result<u64>
where
    W: Write,
    I: IntoIterator<Item = Request>,
{
    let mut out = BufWriter::new(w);
    let mut n = 0u64;
    for r in requests {
        if r.op == Op::Scan || r.arg != 0 {
            writeln!(out, "{},{},{},", r.op.code(), r.key, r.arg)?;
        } else {
            writeln!(out, "{},{},,", r.op.code(), r.key)?;
        }
        n += 1;
    }
    out.flush()?;
    Ok(n)
}

/// The part of a request line an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// The line as a whole: empty, too long, extra fields, unreadable.
    Line,
    /// The first field, the type code.
    Type,
    /// The second field, the key.
    Key,
    /// The third field, the argument (the scan length).
    Arg,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Line => "line",
            Field::Type => "type",
            Field::Key => "key",
            Field::Arg => "arg",
        })
    }
}

/// Why a kvpaxos request file was refused. Every variant carries the 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvpaxosError {
    /// A field is missing, not a number, or out of range.
    #[error("line {line}: {field}: {reason}")]
    Malformed {
        /// The line, counted from 1.
        line: u64,
        /// The faulty field.
        field: Field,
        /// What is wrong, and what is accepted.
        reason: String,
    },
    /// A line is longer than [`MAX_LINE_LEN`] bytes. Reading stops there, and the rest of the
    /// line is never buffered.
    #[error("line {line}: longer than {max} bytes (a request line is `type,key,arg,`)")]
    LineTooLong {
        /// The line, counted from 1.
        line: u64,
        /// [`MAX_LINE_LEN`].
        max: usize,
    },
    /// The file holds more requests than the caller's bound.
    #[error("line {line}: more than {max} requests")]
    TooManyRequests {
        /// The first line beyond the bound.
        line: u64,
        /// The caller's `max_requests`.
        max: usize,
    },
    /// The underlying reader failed.
    #[error("line {line}: read failed ({kind:?}): {reason}")]
    Io {
        /// The line being read.
        line: u64,
        /// The I/O error's kind.
        kind: io::ErrorKind,
        /// The I/O error's message.
        reason: String,
    },
}

impl KvpaxosError {
    /// The 1-based line number the error is about.
    pub fn line(&self) -> u64 {
        match self {
            KvpaxosError::Malformed { line, .. }
            | KvpaxosError::LineTooLong { line, .. }
            | KvpaxosError::TooManyRequests { line, .. }
            | KvpaxosError::Io { line, .. } => *line,
        }
    }

    /// The field the error is about ([`Field::Line`] for the whole-line variants).
    pub fn field(&self) -> Field {
        match self {
            KvpaxosError::Malformed { field, .. } => *field,
            _ => Field::Line,
        }
    }
}

/// Shows at most 16 bytes of hostile input, escaped.
fn shown(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(16)];
    let mut s = head.escape_ascii().to_string();
    if bytes.len() > 16 {
        s.push('…');
    }
    s
}

/// A decimal `u32`: ASCII digits only (no sign, no space), and no overflow.
fn parse_u32(bytes: &[u8]) -> Result<u32, String> {
    if bytes.is_empty() {
        return Err("missing".to_owned());
    }
    let mut v: u32 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return Err(format!(
                "`{}` is not a non-negative decimal integer",
                shown(bytes)
            ));
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u32::from(b - b'0')))
            .ok_or_else(|| format!("`{}` does not fit a u32", shown(bytes)))?;
    }
    Ok(v)
}

fn parse_line(line: u64, text: &[u8]) -> Result<Request, KvpaxosError> {
    let err = |field, reason: String| KvpaxosError::Malformed {
        line,
        field,
        reason,
    };
    if text.is_empty() {
        return Err(err(
            Field::Line,
            "empty line (expected `type,key,arg,`)".to_owned(),
        ));
    }
    let mut fields = text.split(|&b| b == b',');
    let type_field = fields.next().unwrap_or_default();
    let key_field = fields
        .next()
        .ok_or_else(|| err(Field::Key, "missing (expected `type,key,arg,`)".to_owned()))?;
    let arg_field = fields
        .next()
        .ok_or_else(|| err(Field::Arg, "missing (expected `type,key,arg,`)".to_owned()))?;
    // kvpaxos ends each line with a comma. Accept its absence, refuse anything after it.
    match (fields.next(), fields.next()) {
        (None, _) | (Some(b""), None) => {}
        _ => {
            return Err(err(
                Field::Line,
                "extra fields after `type,key,arg,`".to_owned(),
            ));
        }
    }

    let code = parse_u32(type_field).map_err(|r| err(Field::Type, r))?;
    let op = Op::from_code(code).ok_or_else(|| {
        let what = match code {
            3 => "SYNC, kvpaxos-internal",
            4 => "ERROR, kvpaxos-internal",
            6 => "DUMMY, kvpaxos-internal",
            _ => "unknown",
        };
        err(
            Field::Type,
            format!("type code {code} ({what}): expected 0 READ, 1 WRITE, 2 SCAN or 5 UPDATE"),
        )
    })?;
    let key = parse_u32(key_field).map_err(|r| err(Field::Key, r))?;
    let arg = if op == Op::Scan {
        let len = parse_u32(arg_field).map_err(|r| err(Field::Arg, format!("scan length {r}")))?;
        if !(1..=MAX_SCAN_LENGTH).contains(&len) {
            return Err(err(
                Field::Arg,
                format!("scan length {len}: must be in 1..={MAX_SCAN_LENGTH}"),
            ));
        }
        if key.checked_add(len).is_none() {
            return Err(err(
                Field::Arg,
                format!("scan [{key}, {key} + {len}) leaves the u32 key space"),
            ));
        }
        len
    } else if arg_field.is_empty() {
        0
    } else {
        // kvpaxos writes no argument for these types and ignores one. Keep it if it is a number.
        parse_u32(arg_field).map_err(|r| err(Field::Arg, r))?
    };
    Ok(Request { op, key, arg })
}

/// Reads a kvpaxos request file: `type,key,arg,` lines, `\n` or `\r\n` endings, no header.
///
/// The input may be hostile:
/// - no input panics;
/// - at most [`MAX_LINE_LEN`] + 1 bytes of a line are ever buffered;
/// - the result holds at most `max_requests` requests. One more line yields
///   [`KvpaxosError::TooManyRequests`].
///
/// The first faulty line stops the read, with an error naming the line (from 1) and the field.
/// Refused:
/// - unknown or kvpaxos-internal type codes;
/// - keys that are not a decimal `u32`;
/// - missing or extra fields;
/// - empty lines and whitespace;
/// - scans without a length, with length 0 or above [`MAX_SCAN_LENGTH`], or with a range past
///   `u32::MAX`.
pub fn read_requests<R: BufRead>(
    mut r: R,
    max_requests: usize,
) -> Result<Vec<Request>, KvpaxosError> {
    let mut out = Vec::with_capacity(max_requests.min(1 << 16));
    let mut buf = Vec::with_capacity(MAX_LINE_LEN + 1);
    let mut line: u64 = 0;
    loop {
        line += 1;
        buf.clear();
        let n = (&mut r)
            .take(MAX_LINE_LEN as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| KvpaxosError::Io {
                line,
                kind: e.kind(),
                reason: e.to_string(),
            })?;
        if n == 0 {
            return Ok(out);
        }
        let mut text = buf.as_slice();
        if let Some(stripped) = text.strip_suffix(b"\n") {
            text = stripped;
        } else if text.len() > MAX_LINE_LEN {
            return Err(KvpaxosError::LineTooLong {
                line,
                max: MAX_LINE_LEN,
            });
        }
        if let Some(stripped) = text.strip_suffix(b"\r") {
            text = stripped;
        }
        if out.len() == max_requests {
            return Err(KvpaxosError::TooManyRequests {
                line,
                max: max_requests,
            });
        }
        out.push(parse_line(line, text)?);
    }
}

#[cfg(test)]
mod tests;
