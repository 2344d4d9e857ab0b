//! Design files (spec `experiments.md` §1): factors, levels and fixed parameters; resumable
//! factorial runs and their reports. This is the engine of `meridian experiment plan.toml`,
//! independent of how one run is executed (the caller supplies an [`Executor`]).
//!
//! - [`Design::parse`] reads a design file; [`Design::cells`] enumerates its cells and
//!   [`Design::runs`] its runs (cells × replications) in a seeded random order.
//! - [`run_design`] executes the runs into `results/<cell>/<rep>/`, skipping finished ones.
//! - [`analyze_design`] computes per-cell means ± t-CIs, CVs and the allocation of variation
//!   of a general full factorial (any number of levels); [`write_report`] writes `summary.md`.
//!
//! Guarantees:
//! - **File order.** Factors keep the order of the design file (read from the parser's key
//!   spans, so the workspace's `toml` needs no `preserve_order` feature). The first factor
//!   varies slowest in [`Design::cells`].
//! - **Stable seeds and order.** A run's seed is [`run_seed`]`(order_seed, cell name,
//!   replication)`, a splitmix64 chain over those values (not std's `DefaultHasher`, whose
//!   output may change between Rust releases); the run order is a Fisher–Yates shuffle driven
//!   by ChaCha8 seeded with `order_seed`. Both are identical on every platform and release.
//! - **One design per directory.** `results/design.toml` keeps the design file's text; a
//!   later run into the same directory with a design of another [`Design::fingerprint`] is
//!   refused unless forced ([`RunOptions::force`]).
//! - **Crash safety.** Every result file is written to a temporary name and renamed; a run
//!   counts as done only once its `result.json` exists, parses and describes the same run.
//! - **Determinism.** No OS clock reads (the executor measures time), no global randomness,
//!   and every map is ordered: the same inputs give byte-identical files.

mod anova;
mod report;
mod run;

pub use anova::{
    Allocation, AllocationRow, CONFIDENCE, CellResponse, CellStats, DesignAnalysis, Response,
    RunValues, Stat, allocation_of_variation, analyze_design,
};
pub use report::{PlotFn, SUPPRESS_BELOW, render_summary, write_report};
pub use run::{
    DesignRun, Event, Executor, RunFailure, RunOptions, RunOutcome, RunRecord, check_results_dir,
    load_records, percentiles_csv, run_design, run_design_with,
};

use meridian_core::splitmix64;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::BenchError;

fn invalid(reason: impl Into<String>) -> BenchError {
    BenchError::InvalidDesign {
        reason: reason.into(),
    }
}

/// Top-level keys a design file may contain.
pub const TOP_LEVEL_KEYS: [&str; 8] = [
    "name",
    "design",
    "factors",
    "fixed",
    "load",
    "phases",
    "wan",
    "responses",
];

/// Keys of the `design` table.
pub const DESIGN_KEYS: [&str; 3] = ["kind", "replications", "order_seed"];

/// One level of a factor, or one fixed parameter: a TOML scalar.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Level {
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A finite float.
    Float(f64),
    /// A string.
    Str(String),
}

impl Level {
    /// The level as a number, if it is one (integers and floats).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Level::Int(i) => Some(*i as f64),
            Level::Float(f) => Some(*f),
            Level::Bool(_) | Level::Str(_) => None,
        }
    }

    /// The level as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Level::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The level's token in cell names: its text with every character outside
    /// `[A-Za-z0-9._+-]` replaced by `-` (so `2:1` becomes `2-1`). Floats keep a decimal
    /// point (`1.0`), so `1` and `1.0` stay distinct.
    pub fn token(&self) -> String {
        sanitize(&self.to_string())
    }

    fn from_toml(value: &toml::Value) -> Option<Level> {
        match value {
            toml::Value::String(s) => Some(Level::Str(s.clone())),
            toml::Value::Integer(i) => Some(Level::Int(*i)),
            toml::Value::Float(f) if f.is_finite() => Some(Level::Float(*f)),
            toml::Value::Boolean(b) => Some(Level::Bool(*b)),
            _ => None,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Level::Bool(b) => write!(f, "{b}"),
            Level::Int(i) => write!(f, "{i}"),
            // Debug keeps the `.0` of whole floats, which Display drops.
            Level::Float(x) => write!(f, "{x:?}"),
            Level::Str(s) => f.write_str(s),
        }
    }
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn type_name(value: &toml::Value) -> &'static str {
    value.type_str()
}

/// How the cells of a design are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DesignKind {
    /// Every combination of levels.
    FullFactorial,
    /// Every combination of levels, every factor having exactly 2 levels (the first is the
    /// low level); analysed with [`crate::doe::analyze`] as well.
    TwoK,
    /// The baseline (the first level of every factor), then each other level of each factor
    /// with the others at their baseline.
    OneAtATime,
}

impl DesignKind {
    /// The kind's name in design files.
    pub fn as_str(self) -> &'static str {
        match self {
            DesignKind::FullFactorial => "full_factorial",
            DesignKind::TwoK => "two_k",
            DesignKind::OneAtATime => "one_at_a_time",
        }
    }
}

/// A factor and its levels, in the design file's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Factor {
    /// The factor's name (a key of `factors`).
    pub name: String,
    /// Its levels; at least one, no two with the same [`Level::token`].
    pub levels: Vec<Level>,
}

/// A parsed design file (spec §1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Design {
    /// The experiment's name: `name` in the file, else the caller's default (see
    /// [`Design::with_default_name`], [`Design::load`]); `None` if neither was given.
    pub name: Option<String>,
    /// How cells are chosen.
    pub kind: DesignKind,
    /// Runs per cell (≥ 1).
    pub replications: usize,
    /// Seed of the run order and of every run's seed (default 0).
    pub order_seed: u64,
    /// Factors in file order.
    pub factors: Vec<Factor>,
    /// Fixed parameters (scalars), by name.
    pub fixed: BTreeMap<String, Level>,
    /// The `load` table, free-form, for the executor.
    pub load: toml::Table,
    /// The `phases` table, free-form, for the executor.
    pub phases: toml::Table,
    /// The `wan` table, free-form, for the executor.
    pub wan: toml::Table,
    /// Responses the allocation of variation analyses (`op.scope.stat` or `throughput`);
    /// empty means the default set (see [`Response::defaults`]).
    pub responses: Vec<String>,
    /// The design file's text, as given.
    #[serde(skip)]
    pub text: String,
}

fn table_of(root: &toml::Table, key: &str, what: &str) -> Result<Option<toml::Table>, BenchError> {
    match root.get(key) {
        None => Ok(None),
        Some(toml::Value::Table(t)) => Ok(Some(t.clone())),
        Some(other) => Err(invalid(format!(
            "`{key}` is a {}, but it must be a table ({what}), e.g. `{key} = {{ ... }}`",
            type_name(other)
        ))),
    }
}

/// The keys of the top-level `factors` table in the order they appear in `text`.
fn factor_order(text: &str) -> Result<Vec<String>, BenchError> {
    let doc = toml::de::DeTable::parse(text)
        .map_err(|e| invalid(format!("the design file is not valid TOML: {e}")))?;
    let Some((_, factors)) = doc.get_ref().iter().find(|(k, _)| k.get_ref() == "factors") else {
        return Ok(Vec::new());
    };
    let Some(table) = factors.get_ref().as_table() else {
        return Ok(Vec::new());
    };
    let mut keys: Vec<(usize, String)> = table
        .iter()
        .map(|(k, _)| (k.span().start, k.get_ref().to_string()))
        .collect();
    keys.sort();
    Ok(keys.into_iter().map(|(_, k)| k).collect())
}

impl Design {
    /// Parses a design file (spec §1; see the crate's experiment module header).
    ///
    /// # Errors
    /// [`BenchError::InvalidDesign`] saying what is wrong and what to do: invalid TOML, an
    /// unknown top-level or `design` key, an unknown kind, replications < 1, a missing or
    /// empty `factors` table, a factor with no levels, a non-scalar or non-finite level,
    /// duplicate levels, a `two_k` factor without exactly 2 levels, a non-scalar fixed
    /// parameter, a factor also in `fixed`, or a malformed response.
    pub fn parse(text: &str) -> Result<Design, BenchError> {
        let root: toml::Table = toml::from_str(text)
            .map_err(|e| invalid(format!("the design file is not valid TOML: {e}")))?;
        for key in root.keys() {
            if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
                return Err(invalid(format!(
                    "unknown top-level key `{key}`; the accepted keys are {}. Move executor settings into `load`, `phases` or `wan`, or fix the spelling",
                    TOP_LEVEL_KEYS.join(", ")
                )));
            }
        }

        let name = match root.get("name") {
            None => None,
            Some(toml::Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
            Some(other) => {
                return Err(invalid(format!(
                    "`name` must be a non-empty string, got {other}; remove it to name the experiment after the design file"
                )));
            }
        };

        let design = table_of(&root, "design", "kind, replications, order_seed")?.ok_or_else(
            || {
                invalid(
                    "the design file has no `design` table; add e.g. `design = { kind = \"full_factorial\", replications = 2, order_seed = 7 }`",
                )
            },
        )?;
        for key in design.keys() {
            if !DESIGN_KEYS.contains(&key.as_str()) {
                return Err(invalid(format!(
                    "unknown key `design.{key}`; the accepted keys are {}",
                    DESIGN_KEYS.join(", ")
                )));
            }
        }
        let kind = match design.get("kind") {
            Some(toml::Value::String(k)) => match k.as_str() {
                "full_factorial" => DesignKind::FullFactorial,
                "two_k" => DesignKind::TwoK,
                "one_at_a_time" => DesignKind::OneAtATime,
                other => {
                    return Err(invalid(format!(
                        "unknown design kind `{other}`; use full_factorial, two_k or one_at_a_time"
                    )));
                }
            },
            Some(other) => {
                return Err(invalid(format!(
                    "`design.kind` must be a string (full_factorial, two_k or one_at_a_time), got {other}"
                )));
            }
            None => {
                return Err(invalid(
                    "`design.kind` is missing; set it to full_factorial, two_k or one_at_a_time",
                ));
            }
        };
        let replications = match design.get("replications") {
            None => 1,
            Some(toml::Value::Integer(r)) if *r >= 1 => usize::try_from(*r)
                .map_err(|_| invalid(format!("`design.replications` = {r} is too large")))?,
            Some(other) => {
                return Err(invalid(format!(
                    "`design.replications` must be an integer ≥ 1, got {other}; the spec asks for ≥ 2 (≥ 5 for headline claims)"
                )));
            }
        };
        let order_seed = match design.get("order_seed") {
            None => 0,
            Some(toml::Value::Integer(s)) if *s >= 0 => *s as u64,
            Some(other) => {
                return Err(invalid(format!(
                    "`design.order_seed` must be an integer ≥ 0, got {other}"
                )));
            }
        };

        let factors_table = table_of(&root, "factors", "factor name → list of levels")?
            .ok_or_else(|| {
                invalid(
                    "the design file has no `factors` table; add e.g. `factors = { wan_rtt_ms = [0, 100] }`",
                )
            })?;
        if factors_table.is_empty() {
            return Err(invalid(
                "`factors` is empty; a design needs at least one factor (use `factors = { x = [value] }` for a single cell)",
            ));
        }
        let mut order = factor_order(text)?;
        // Defensive: should the span route ever miss a key, fall back to name order for it
        // rather than dropping a factor.
        for key in factors_table.keys() {
            if !order.contains(key) {
                order.push(key.clone());
            }
        }
        order.retain(|k| factors_table.contains_key(k));

        let mut factors = Vec::with_capacity(order.len());
        for name in order {
            let value = &factors_table[&name];
            let toml::Value::Array(items) = value else {
                return Err(invalid(format!(
                    "factor `{name}` must be a list of levels, got a {}; write e.g. `{name} = [{value}]`",
                    type_name(value)
                )));
            };
            if items.is_empty() {
                return Err(invalid(format!(
                    "factor `{name}` has no levels; give at least one, or move it to `fixed`"
                )));
            }
            let mut levels: Vec<Level> = Vec::with_capacity(items.len());
            for item in items {
                let level = Level::from_toml(item).ok_or_else(|| {
                    invalid(format!(
                        "factor `{name}` has a level {item} ({}); levels must be strings, integers, finite floats or booleans",
                        type_name(item)
                    ))
                })?;
                if let Some(same) = levels.iter().find(|l| l.token() == level.token()) {
                    return Err(invalid(format!(
                        "factor `{name}` lists the level `{level}` twice (as `{same}` and `{level}`, both named `{}` in result directories); remove the duplicate",
                        level.token()
                    )));
                }
                levels.push(level);
            }
            if kind == DesignKind::TwoK && levels.len() != 2 {
                return Err(invalid(format!(
                    "a two_k design needs exactly 2 levels per factor, but `{name}` has {}; use kind = \"full_factorial\" or give it a low and a high level",
                    levels.len()
                )));
            }
            factors.push(Factor { name, levels });
        }

        let mut fixed = BTreeMap::new();
        if let Some(table) = table_of(&root, "fixed", "parameter name → scalar")? {
            for (key, value) in &table {
                let level = Level::from_toml(value).ok_or_else(|| {
                    invalid(format!(
                        "fixed parameter `{key}` is a {} ({value}); fixed values must be strings, integers, finite floats or booleans — put structured settings in `load`, `phases` or `wan`",
                        type_name(value)
                    ))
                })?;
                if factors.iter().any(|f| &f.name == key) {
                    return Err(invalid(format!(
                        "`{key}` is both a factor and a fixed parameter; remove it from `fixed` to vary it, or from `factors` to fix it"
                    )));
                }
                fixed.insert(key.clone(), level);
            }
        }

        let responses = match root.get("responses") {
            None => Vec::new(),
            Some(toml::Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    let toml::Value::String(s) = item else {
                        return Err(invalid(format!(
                            "`responses` must list strings such as \"read.total.mean\" or \"throughput\", got {item}"
                        )));
                    };
                    Response::parse(s)?;
                    if out.contains(s) {
                        return Err(invalid(format!(
                            "response `{s}` is listed twice in `responses`; remove the duplicate"
                        )));
                    }
                    out.push(s.clone());
                }
                out
            }
            Some(other) => {
                return Err(invalid(format!(
                    "`responses` must be a list of strings such as [\"read.total.mean\", \"throughput\"], got {other}"
                )));
            }
        };

        Ok(Design {
            name,
            kind,
            replications,
            order_seed,
            factors,
            fixed,
            load: table_of(&root, "load", "load generator settings")?.unwrap_or_default(),
            phases: table_of(&root, "phases", "phase settings")?.unwrap_or_default(),
            wan: table_of(&root, "wan", "WAN emulator settings")?.unwrap_or_default(),
            responses,
            text: text.to_string(),
        })
    }

    /// Reads and parses the design file at `path`; without a `name` key the experiment is
    /// named after the file's stem (`geo.toml` → `geo`).
    ///
    /// # Errors
    /// [`BenchError::Io`] if the file cannot be read, else as [`Design::parse`].
    pub fn load(path: &Path) -> Result<Design, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::Io {
            path: path.display().to_string(),
            reason: format!("cannot read the design file: {e}"),
        })?;
        let design = Design::parse(&text)?;
        Ok(match path.file_stem().and_then(|s| s.to_str()) {
            Some(stem) => design.with_default_name(stem),
            None => design,
        })
    }

    /// Names the experiment `name` unless the file named it.
    pub fn with_default_name(mut self, name: &str) -> Design {
        if self.name.is_none() {
            self.name = Some(name.to_string());
        }
        self
    }

    /// The experiment's name, or `experiment` if it has none.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or("experiment")
    }

    /// Factor names in file order.
    pub fn factor_names(&self) -> Vec<String> {
        self.factors.iter().map(|f| f.name.clone()).collect()
    }

    /// Whether every combination of levels is a cell (full factorial or two_k).
    pub fn is_factorial(&self) -> bool {
        self.kind != DesignKind::OneAtATime
    }

    /// Whether every factor has exactly 2 levels and every combination is a cell, so the
    /// 2^k·r analysis of [`crate::doe::analyze`] applies.
    pub fn is_two_level(&self) -> bool {
        self.is_factorial() && self.factors.iter().all(|f| f.levels.len() == 2)
    }

    /// The cells: for factorial kinds every combination of levels with the **first factor
    /// varying slowest**; for `one_at_a_time` the baseline (every first level) then, factor
    /// by factor in file order, each other level with the rest at baseline.
    pub fn cells(&self) -> Vec<Cell> {
        let combos: Vec<Vec<usize>> = match self.kind {
            DesignKind::FullFactorial | DesignKind::TwoK => {
                let total: usize = self.factors.iter().map(|f| f.levels.len()).product();
                (0..total)
                    .map(|mut i| {
                        let mut idx = vec![0; self.factors.len()];
                        for (f, factor) in self.factors.iter().enumerate().rev() {
                            idx[f] = i % factor.levels.len();
                            i /= factor.levels.len();
                        }
                        idx
                    })
                    .collect()
            }
            DesignKind::OneAtATime => {
                let mut out = vec![vec![0; self.factors.len()]];
                for (f, factor) in self.factors.iter().enumerate() {
                    for l in 1..factor.levels.len() {
                        let mut idx = vec![0; self.factors.len()];
                        idx[f] = l;
                        out.push(idx);
                    }
                }
                out
            }
        };
        combos
            .into_iter()
            .enumerate()
            .map(|(index, idx)| Cell {
                index,
                levels: self
                    .factors
                    .iter()
                    .zip(&idx)
                    .map(|(f, &l)| (f.name.clone(), f.levels[l].clone()))
                    .collect(),
                level_indices: idx,
            })
            .collect()
    }

    /// Every run (each cell × each replication) in a random order seeded by `order_seed`:
    /// a Fisher–Yates shuffle of the cell-major list driven by ChaCha8.
    pub fn runs(&self) -> Vec<RunSpec> {
        let mut runs: Vec<RunSpec> = self
            .cells()
            .into_iter()
            .flat_map(|cell| {
                (0..self.replications).map(move |replication| (cell.clone(), replication))
            })
            .map(|(cell, replication)| RunSpec {
                seed: run_seed(self.order_seed, &cell.name(), replication),
                cell,
                replication,
                fixed: self.fixed.clone(),
            })
            .collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(self.order_seed);
        // Our own shuffle, not `SliceRandom::shuffle`, so the order cannot change with rand.
        for i in (1..runs.len()).rev() {
            let j = uniform_below(&mut rng, i as u64 + 1) as usize;
            runs.swap(i, j);
        }
        runs
    }

    /// Fixed parameters and the cell's levels (a level wins over nothing: parsing refuses a
    /// name in both).
    pub fn params(&self, cell: &Cell) -> BTreeMap<String, Level> {
        let mut out = self.fixed.clone();
        out.extend(cell.levels.iter().cloned());
        out
    }

    /// Everything that defines the runs' results, as canonical JSON: two designs with the
    /// same fingerprint produce interchangeable results, whatever their comments, layout,
    /// `name` or `responses` (which only choose what the analysis reports).
    pub fn fingerprint(&self) -> String {
        let mut runs_only = self.clone();
        runs_only.name = None;
        runs_only.responses.clear();
        serde_json::to_string(&runs_only).expect("a design serializes: string keys, finite floats")
    }
}

/// A uniform integer in `[0, bound)` by rejection, so every value is exactly equally likely.
fn uniform_below(rng: &mut impl RngCore, bound: u64) -> u64 {
    let zone = u64::MAX - u64::MAX % bound;
    loop {
        let x = rng.next_u64();
        if x < zone {
            return x % bound;
        }
    }
}

/// One combination of levels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Position in [`Design::cells`].
    pub index: usize,
    /// `(factor, level)` in factor order.
    pub levels: Vec<(String, Level)>,
    /// Index of each factor's level in its level list, in factor order.
    pub level_indices: Vec<usize>,
}

impl Cell {
    /// A stable, filesystem-safe name: `factor=level` joined by `_`, in factor order, with
    /// [`Level::token`]s (e.g. `mode=ind1_wan_rtt_ms=100_jitter_pct=0_locality=0.9`).
    pub fn name(&self) -> String {
        self.levels
            .iter()
            .map(|(f, l)| format!("{}={}", sanitize(f), l.token()))
            .collect::<Vec<_>>()
            .join("_")
    }

    /// The level of `factor` in this cell.
    pub fn level(&self, factor: &str) -> Option<&Level> {
        self.levels
            .iter()
            .find(|(f, _)| f == factor)
            .map(|(_, l)| l)
    }
}

/// One run: a cell, a replication and the run's seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The cell.
    pub cell: Cell,
    /// Replication number, 0-based.
    pub replication: usize,
    /// [`run_seed`]`(order_seed, cell name, replication)`: the seed of everything random in
    /// the run (workload, emulator, ...), derived by the executor.
    pub seed: u64,
    /// The design's fixed parameters.
    pub fixed: BTreeMap<String, Level>,
}

impl Design {
    /// The value of parameter `name` for `run`: a factor level or fixed parameter, else a key
    /// of the `load`, `phases` or `wan` table (in that order); `None` if absent or not a
    /// scalar. The one lookup executors and reports share, so both see the same value.
    pub fn param(&self, run: &RunSpec, name: &str) -> Option<Level> {
        run.cell
            .level(name)
            .or_else(|| run.fixed.get(name))
            .cloned()
            .or_else(|| {
                [&self.load, &self.phases, &self.wan]
                    .into_iter()
                    .find_map(|t| t.get(name).and_then(Level::from_toml))
            })
    }
}

impl RunSpec {
    /// Fixed parameters and the cell's levels.
    pub fn params(&self) -> BTreeMap<String, Level> {
        let mut out = self.fixed.clone();
        out.extend(self.cell.levels.iter().cloned());
        out
    }

    /// The run's directory relative to the results directory: `<cell name>/<replication>`.
    pub fn rel_dir(&self) -> std::path::PathBuf {
        Path::new(&self.cell.name()).join(self.replication.to_string())
    }

    /// Whether `other` is the same run: same cell, replication and seed, and the same
    /// levels and fixed parameters. Floats compare within 1e-12 (relative), because
    /// serde_json's default float parsing may be one ULP off, and a record read back from
    /// `result.json` must still count as this run.
    pub fn is_same_run(&self, other: &RunSpec) -> bool {
        fn same_level(a: &Level, b: &Level) -> bool {
            match (a, b) {
                (Level::Float(x), Level::Float(y)) => {
                    (x - y).abs() <= 1e-12 * x.abs().max(y.abs()).max(f64::MIN_POSITIVE)
                }
                _ => a == b,
            }
        }
        let same_pairs = |a: &[(String, Level)], b: &[(String, Level)]| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|((ka, la), (kb, lb))| ka == kb && same_level(la, lb))
        };
        let fixed_a: Vec<(String, Level)> = self.fixed.clone().into_iter().collect();
        let fixed_b: Vec<(String, Level)> = other.fixed.clone().into_iter().collect();
        self.cell.index == other.cell.index
            && self.cell.level_indices == other.cell.level_indices
            && self.replication == other.replication
            && self.seed == other.seed
            && same_pairs(&self.cell.levels, &other.cell.levels)
            && same_pairs(&fixed_a, &fixed_b)
    }

    /// `cell name #replication`, for messages.
    pub fn label(&self) -> String {
        format!("{} #{}", self.cell.name(), self.replication)
    }
}

/// A run's seed: a splitmix64 chain over `order_seed`, the cell name's length and bytes (in
/// 8-byte little-endian words) and the replication. Stable across platforms and releases.
pub fn run_seed(order_seed: u64, cell_name: &str, replication: usize) -> u64 {
    let bytes = cell_name.as_bytes();
    let mut h = splitmix64(order_seed);
    h = splitmix64(h ^ bytes.len() as u64);
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = splitmix64(h ^ u64::from_le_bytes(word));
    }
    splitmix64(h ^ replication as u64)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Spec §1's example, with a name and responses.
    pub(crate) const GEO: &str = r#"
name = "geo-consistency"
design  = { kind = "full_factorial", replications = 2, order_seed = 7 }  # order randomized
factors = { mode = ["ind1","ind2","lt_qqer","lt_rec"], wan_rtt_ms = [0,100,200,300], jitter_pct = [0,60], locality = [0.5,0.9] }
fixed   = { nodes = 16, dcs = 2, n_val = 3, ring_q = 256, objects = 128000, value_bytes = 500, rw = "2:1", popularity = "uniform" }
load    = { generator = "paced", instances_per_dc = 2, threads = 32, rate_per_thread = 15 }
phases  = { load = "all", warmup = { kind = "update_existing", until = "migrations<1%", max_s = 300 }, measure_s = 600, cooldown_s = 15 }
wan     = { mode = "stream", bandwidth_mbps = 100, lan_rtt_us = 167, lan_jitter_us = 90, loss = 0.0, dup = 0.0, reorder = 0.0 }
responses = ["read.total.mean", "update.total.p90", "throughput"]
"#;

    fn reason(text: &str) -> String {
        match Design::parse(text) {
            Err(BenchError::InvalidDesign { reason }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn parses_the_spec_example() {
        let d = Design::parse(GEO).unwrap();
        assert_eq!(d.name.as_deref(), Some("geo-consistency"));
        assert_eq!(d.kind, DesignKind::FullFactorial);
        assert_eq!((d.replications, d.order_seed), (2, 7));
        // File order, not alphabetical.
        assert_eq!(
            d.factor_names(),
            ["mode", "wan_rtt_ms", "jitter_pct", "locality"]
        );
        assert_eq!(d.factors[0].levels[2], Level::Str("lt_qqer".into()));
        assert_eq!(d.factors[1].levels[3], Level::Int(300));
        assert_eq!(d.factors[3].levels[1], Level::Float(0.9));
        assert_eq!(d.fixed["nodes"], Level::Int(16));
        assert_eq!(d.fixed["rw"], Level::Str("2:1".into()));
        assert_eq!(d.load["threads"].as_integer(), Some(32));
        assert_eq!(d.phases["warmup"]["max_s"].as_integer(), Some(300));
        assert_eq!(d.wan["mode"].as_str(), Some("stream"));
        assert_eq!(d.responses.len(), 3);
        assert!(d.is_factorial() && !d.is_two_level());
        assert_eq!(d.text, GEO);

        // Factor order also follows the file with a standard table, and without a name the
        // caller's default applies.
        let d = Design::parse(
            "design = { kind = \"two_k\" }\n[factors]\nzeta = [1, 2]\nalpha = [\"a\", \"b\"]\nmid = [true, false]\n",
        )
        .unwrap();
        assert_eq!(d.factor_names(), ["zeta", "alpha", "mid"]);
        assert_eq!((d.replications, d.order_seed), (1, 0));
        assert!(d.is_two_level());
        assert_eq!(d.clone().with_default_name("plan").display_name(), "plan");
        assert_eq!(
            Design::parse(GEO)
                .unwrap()
                .with_default_name("plan")
                .display_name(),
            "geo-consistency"
        );
    }

    #[test]
    fn load_names_after_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("screening.toml");
        std::fs::write(
            &path,
            "design = { kind = \"full_factorial\" }\nfactors = { x = [1] }\n",
        )
        .unwrap();
        assert_eq!(Design::load(&path).unwrap().display_name(), "screening");
        let err = Design::load(&dir.path().join("nope.toml")).unwrap_err();
        assert!(matches!(err, BenchError::Io { .. }), "{err}");
    }

    #[test]
    fn refusals_say_what_and_what_to_do() {
        let base = |extra: &str, factors: &str, kind: &str| {
            format!(
                "design = {{ kind = \"{kind}\", replications = 2 }}\nfactors = {{ {factors} }}\n{extra}"
            )
        };
        let ok_factors = "a = [1, 2]";
        let r = reason("not toml = = =");
        assert!(r.contains("not valid TOML"), "{r}");
        let r = reason(&base("colour = 3", ok_factors, "full_factorial"));
        assert!(
            r.contains("`colour`") && r.contains("name, design, factors"),
            "{r}"
        );
        let r = reason(&base("", "a = []", "full_factorial"));
        assert!(r.contains("`a` has no levels"), "{r}");
        let r = reason(&base("", "a = [1, [2]]", "full_factorial"));
        assert!(r.contains("levels must be strings"), "{r}");
        let r = reason(&base("", "a = [1, { x = 1 }]", "full_factorial"));
        assert!(r.contains("levels must be strings"), "{r}");
        let r = reason(&base("", "a = [1, nan]", "full_factorial"));
        assert!(r.contains("finite"), "{r}");
        let r = reason(&base("", "a = [\"x\", \"y\", \"x\"]", "full_factorial"));
        assert!(r.contains("twice"), "{r}");
        // Distinct strings that would share a directory name are duplicates too.
        let r = reason(&base("", "a = [\"2:1\", \"2/1\"]", "full_factorial"));
        assert!(r.contains("twice") && r.contains("2-1"), "{r}");
        let r = reason(&base("", "a = 5", "full_factorial"));
        assert!(r.contains("list of levels"), "{r}");
        let r = reason(&base("", "a = [1, 2, 3]", "two_k"));
        assert!(
            r.contains("exactly 2 levels") && r.contains("`a` has 3"),
            "{r}"
        );
        let r = reason(&base("fixed = { a = 3 }", ok_factors, "full_factorial"));
        assert!(r.contains("both a factor and a fixed"), "{r}");
        let r = reason(&base("fixed = { b = [3] }", ok_factors, "full_factorial"));
        assert!(r.contains("fixed parameter `b`"), "{r}");
        let r = reason(&base("", ok_factors, "latin_square"));
        assert!(r.contains("unknown design kind"), "{r}");
        let r = reason("design = { kind = \"two_k\", replications = 0 }\nfactors = { a = [1, 2] }");
        assert!(r.contains("replications") && r.contains("≥ 1"), "{r}");
        let r = reason("design = { kind = \"two_k\", reps = 2 }\nfactors = { a = [1, 2] }");
        assert!(r.contains("design.reps"), "{r}");
        let r = reason("design = { replications = 2 }\nfactors = { a = [1, 2] }");
        assert!(r.contains("design.kind` is missing"), "{r}");
        let r = reason("factors = { a = [1, 2] }");
        assert!(r.contains("no `design` table"), "{r}");
        let r = reason("design = { kind = \"two_k\" }");
        assert!(r.contains("no `factors` table"), "{r}");
        let r = reason("design = { kind = \"two_k\" }\nfactors = {}");
        assert!(r.contains("`factors` is empty"), "{r}");
        let r = reason(&base("load = 3", ok_factors, "full_factorial"));
        assert!(
            r.contains("`load` is a integer") || r.contains("`load` is a"),
            "{r}"
        );
        let r = reason(&base(
            "responses = [\"read.total.p42\"]",
            ok_factors,
            "full_factorial",
        ));
        assert!(r.contains("p42"), "{r}");
        let r = reason(&base(
            "responses = \"throughput\"",
            ok_factors,
            "full_factorial",
        ));
        assert!(r.contains("list of strings"), "{r}");
    }

    #[test]
    fn cells_enumerate_first_factor_slowest() {
        let d = Design::parse(GEO).unwrap();
        let cells = d.cells();
        assert_eq!(cells.len(), 4 * 4 * 2 * 2);
        assert!(cells.iter().enumerate().all(|(i, c)| c.index == i));
        assert_eq!(
            cells[0].name(),
            "mode=ind1_wan_rtt_ms=0_jitter_pct=0_locality=0.5"
        );
        assert_eq!(
            cells[1].name(),
            "mode=ind1_wan_rtt_ms=0_jitter_pct=0_locality=0.9"
        );
        assert_eq!(
            cells[2].name(),
            "mode=ind1_wan_rtt_ms=0_jitter_pct=60_locality=0.5"
        );
        assert_eq!(
            cells[4].name(),
            "mode=ind1_wan_rtt_ms=100_jitter_pct=0_locality=0.5"
        );
        assert_eq!(
            cells[63].name(),
            "mode=lt_rec_wan_rtt_ms=300_jitter_pct=60_locality=0.9"
        );
        assert_eq!(cells[16].level("mode"), Some(&Level::Str("ind2".into())));
        let mut names: Vec<String> = cells.iter().map(Cell::name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 64);
        let params = d.params(&cells[5]);
        assert_eq!(params["nodes"], Level::Int(16));
        assert_eq!(params["wan_rtt_ms"], Level::Int(100));
        assert_eq!(params.len(), 8 + 4);

        let oat = Design::parse(
            "design = { kind = \"one_at_a_time\" }\nfactors = { a = [1, 2, 3], b = [\"x\", \"y\"] }",
        )
        .unwrap();
        let names: Vec<String> = oat.cells().iter().map(Cell::name).collect();
        assert_eq!(names, ["a=1_b=x", "a=2_b=x", "a=3_b=x", "a=1_b=y"]);
        assert!(!oat.is_factorial());
    }

    #[test]
    fn runs_are_a_seeded_permutation() {
        let d = Design::parse(GEO).unwrap();
        let runs = d.runs();
        assert_eq!(runs.len(), 128);
        let mut keys: Vec<(usize, usize)> =
            runs.iter().map(|r| (r.cell.index, r.replication)).collect();
        let shuffled = keys.clone();
        keys.sort();
        let expected: Vec<(usize, usize)> =
            (0..64).flat_map(|c| (0..2).map(move |r| (c, r))).collect();
        assert_eq!(keys, expected);
        assert_ne!(shuffled, expected, "the order is randomized");
        // Same seed, same order; another seed, another order (same per-run seeds apart
        // from order_seed's own influence).
        let again: Vec<(usize, usize)> = d
            .runs()
            .iter()
            .map(|r| (r.cell.index, r.replication))
            .collect();
        assert_eq!(again, shuffled);
        let other = Design::parse(&GEO.replace("order_seed = 7", "order_seed = 8")).unwrap();
        let other: Vec<(usize, usize)> = other
            .runs()
            .iter()
            .map(|r| (r.cell.index, r.replication))
            .collect();
        assert_ne!(other, shuffled);
        let p = runs[0].params();
        assert_eq!(p["popularity"], Level::Str("uniform".into()));
        assert_eq!(
            runs[0].rel_dir(),
            Path::new(&runs[0].cell.name()).join(runs[0].replication.to_string())
        );
    }

    #[test]
    fn seeds_are_stable() {
        // Hard-coded: a change of the hash changes every result's seed, so it must be
        // deliberate.
        assert_eq!(
            run_seed(7, "mode=ind1_wan_rtt_ms=100_jitter_pct=0_locality=0.9", 1),
            SEED_7
        );
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        let d = Design::parse(GEO).unwrap();
        let run = d
            .runs()
            .into_iter()
            .find(|r| {
                r.cell.name() == "mode=ind1_wan_rtt_ms=100_jitter_pct=0_locality=0.9"
                    && r.replication == 1
            })
            .unwrap();
        assert_eq!(run.seed, SEED_7);
        // Every run has its own seed.
        let mut seeds: Vec<u64> = d.runs().iter().map(|r| r.seed).collect();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), 128);
        assert_ne!(run_seed(7, "a=1", 0), run_seed(7, "a=1", 1));
        assert_ne!(run_seed(7, "a=1", 0), run_seed(8, "a=1", 0));
    }

    const SEED_7: u64 = 11_343_272_877_517_207_976;

    #[test]
    fn level_tokens_and_serde() {
        assert_eq!(Level::Float(1.0).token(), "1.0");
        assert_eq!(Level::Int(1).token(), "1");
        assert_eq!(Level::Str("2:1 x".into()).token(), "2-1-x");
        for l in [
            Level::Bool(true),
            Level::Int(-3),
            Level::Float(2.0),
            Level::Float(0.5),
            Level::Str("lt_rec".into()),
        ] {
            let back: Level = serde_json::from_str(&serde_json::to_string(&l).unwrap()).unwrap();
            assert_eq!(back, l);
        }
    }
}
