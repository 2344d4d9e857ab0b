//! Analysis of a design's runs (spec §3): responses, per-cell mean ± 95 % t-CI and CV over
//! replications, CV across cells, and the allocation of variation of a general balanced full
//! factorial (factors with any number of levels; Montgomery's effects model), which for
//! two-level factors equals Jain's 2^k·r allocation of [`crate::doe::analyze`].
//!
//! Guarantees: the allocation is computed only from balanced data (every cell, every
//! replication); otherwise [`allocation_of_variation`] refuses and [`analyze_design`]
//! reports the per-run and per-cell tables with the missing runs named. Latency responses
//! are in milliseconds.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{Design, RunRecord};
use crate::BenchError;
use crate::doe;
use crate::stats::{Scope, Summary};

fn invalid(reason: impl Into<String>) -> BenchError {
    BenchError::InvalidDesign {
        reason: reason.into(),
    }
}

/// Confidence of every CI in the analysis (per-cell means and 2^k effects).
pub const CONFIDENCE: f64 = 0.95;

/// Largest number of factors the allocation of variation decomposes (2^k effects).
const MAX_FACTORS: usize = doe::MAX_FACTORS;

/// A latency statistic of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    /// Mean latency.
    Mean,
    /// 10th percentile.
    P10,
    /// Median.
    P50,
    /// 90th percentile.
    P90,
    /// 99th percentile.
    P99,
    /// 99.9th percentile (`p99_9`).
    P999,
}

impl Stat {
    /// The statistic's name in response names.
    pub fn as_str(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::P10 => "p10",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P99 => "p99",
            Stat::P999 => "p99_9",
        }
    }

    /// The statistic of `summary`, in milliseconds.
    pub fn of_ms(self, summary: &Summary) -> f64 {
        let us = match self {
            Stat::Mean => return summary.mean_us / 1e3,
            Stat::P10 => summary.p10_us,
            Stat::P50 => summary.p50_us,
            Stat::P90 => summary.p90_us,
            Stat::P99 => summary.p99_us,
            Stat::P999 => summary.p99_9_us,
        };
        us as f64 / 1e3
    }
}

/// A response of a run: `op.scope.stat` (latency in ms) or `throughput` (ops/s).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Response {
    /// A latency statistic of one op in one scope.
    Latency {
        /// Operation type.
        op: String,
        /// Total, local or remote.
        scope: Scope,
        /// Statistic.
        stat: Stat,
    },
    /// The run's mean throughput.
    Throughput,
}

impl Response {
    /// Parses `throughput` or `op.scope.stat` with scope ∈ total, local, remote and stat ∈
    /// mean, p10, p50, p90, p99, p99_9 (`p99.9` is accepted too).
    ///
    /// # Errors
    /// [`BenchError::InvalidDesign`] naming the part that is wrong and the accepted values.
    pub fn parse(name: &str) -> Result<Response, BenchError> {
        if name == "throughput" {
            return Ok(Response::Throughput);
        }
        let mut parts = name.splitn(3, '.');
        let (Some(op), Some(scope), Some(stat)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(invalid(format!(
                "response `{name}` is neither `throughput` nor `op.scope.stat` (e.g. `read.total.p90`)"
            )));
        };
        if op.is_empty() {
            return Err(invalid(format!("response `{name}` has an empty op name")));
        }
        let scope = match scope {
            "total" => Scope::Total,
            "local" => Scope::Local,
            "remote" => Scope::Remote,
            other => {
                return Err(invalid(format!(
                    "response `{name}`: unknown scope `{other}`; use total, local or remote"
                )));
            }
        };
        let stat = match stat {
            "mean" => Stat::Mean,
            "p10" => Stat::P10,
            "p50" => Stat::P50,
            "p90" => Stat::P90,
            "p99" => Stat::P99,
            "p99_9" | "p99.9" => Stat::P999,
            other => {
                return Err(invalid(format!(
                    "response `{name}`: unknown statistic `{other}`; use mean, p10, p50, p90, p99 or p99_9"
                )));
            }
        };
        Ok(Response::Latency {
            op: op.to_string(),
            scope,
            stat,
        })
    }

    /// The response's canonical name (`read.total.p99_9`, `throughput`).
    pub fn name(&self) -> String {
        match self {
            Response::Throughput => "throughput".to_string(),
            Response::Latency { op, scope, stat } => {
                format!("{op}.{}.{}", scope.as_str(), stat.as_str())
            }
        }
    }

    /// The default responses: for every op in `records` (in name order) its total mean,
    /// p10 and p90 (p10 stands for local and p90 for remote requests in the geo study), then
    /// `throughput`.
    pub fn defaults(records: &[RunRecord]) -> Vec<Response> {
        let ops: BTreeSet<&str> = records
            .iter()
            .flat_map(|r| r.outcome.report.summaries.iter().map(|s| s.op.as_str()))
            .collect();
        let mut out: Vec<Response> = ops
            .into_iter()
            .flat_map(|op| {
                [Stat::Mean, Stat::P10, Stat::P90].map(|stat| Response::Latency {
                    op: op.to_string(),
                    scope: Scope::Total,
                    stat,
                })
            })
            .collect();
        out.push(Response::Throughput);
        out
    }

    /// The response's value in `record` (ms or ops/s); `None` if the run has no such op.
    pub fn value(&self, record: &RunRecord) -> Option<f64> {
        match self {
            Response::Throughput => Some(record.outcome.mean_throughput),
            Response::Latency { op, scope, stat } => record
                .outcome
                .report
                .summary(op, *scope)
                .map(|s| stat.of_ms(s)),
        }
    }
}

/// The allocation of variation of one response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    /// Effect names: factor names, interactions joined by `·`; main effects first, then
    /// two-factor interactions, ..., each group in factor order.
    pub effects: Vec<String>,
    /// Sum of squares of each effect.
    pub ss: Vec<f64>,
    /// Fraction of the total variation each effect explains (0 when SST = 0).
    pub fractions: Vec<f64>,
    /// Sum of squared errors over replications.
    pub sse: f64,
    /// `SST = Σ (y − ȳ)² = Σ SS + SSE`.
    pub sst: f64,
    /// `SSE / SST` (0 when SST = 0).
    pub error_fraction: f64,
    /// Replications per cell.
    pub r: usize,
}

impl Allocation {
    /// The fraction of the effect named `name`.
    pub fn fraction(&self, name: &str) -> Option<f64> {
        self.effects
            .iter()
            .position(|e| e == name)
            .map(|i| self.fractions[i])
    }
}

/// Allocation of variation of a balanced full factorial: `factors` are `(name, number of
/// levels)` in order, `cells[c]` the r replicate responses of cell `c`, cells ordered with
/// the **first factor varying slowest** (as [`Design::cells`]).
///
/// For each set S of factors, the effect `α_S` at each combination of S's levels is
/// `Σ_{T⊆S} (−1)^{|S|−|T|} · m_T` (m_T: the mean of the cell means over the other
/// factors), and `SS_S = N / (Π_{f∈S} n_f) · Σ α_S²` with N the number of observations.
///
/// # Errors
/// [`BenchError::InvalidDesign`] if there are no factors or more than 16, a factor has no
/// levels, the cell count is not the product of the level counts, a cell has no responses or
/// another number than cell 0 (unbalanced), or a response is not finite.
pub fn allocation_of_variation(
    factors: &[(String, usize)],
    cells: &[Vec<f64>],
) -> Result<Allocation, BenchError> {
    let k = factors.len();
    if k == 0 || k > MAX_FACTORS {
        return Err(invalid(format!(
            "the allocation of variation needs 1 to {MAX_FACTORS} factors, got {k}"
        )));
    }
    if let Some((name, _)) = factors.iter().find(|(_, n)| *n == 0) {
        return Err(invalid(format!("factor `{name}` has no levels")));
    }
    let n_levels: Vec<usize> = factors.iter().map(|(_, n)| *n).collect();
    let n_cells: usize = n_levels.iter().product();
    if cells.len() != n_cells {
        return Err(invalid(format!(
            "the design has {n_cells} cells but {} were given (first factor varying slowest)",
            cells.len()
        )));
    }
    let r = cells[0].len();
    for (i, cell) in cells.iter().enumerate() {
        if cell.is_empty() || cell.len() != r {
            return Err(invalid(format!(
                "unbalanced data: cell {i} has {} replication(s) but cell 0 has {r}; the allocation of variation needs every cell with the same number (≥ 1) of replications — finish the missing runs",
                cell.len()
            )));
        }
        if let Some(v) = cell.iter().find(|v| !v.is_finite()) {
            return Err(invalid(format!("cell {i} has a non-finite response {v}")));
        }
    }

    let level_of = |c: usize, f: usize| -> usize {
        let stride: usize = n_levels[f + 1..].iter().product();
        (c / stride) % n_levels[f]
    };
    let members = |mask: usize| -> Vec<usize> { (0..k).filter(|f| mask & (1 << f) != 0).collect() };
    // Mixed-radix index of a combination of the levels of `fs` (first slowest).
    let combo_index = |fs: &[usize], level: &dyn Fn(usize) -> usize| -> usize {
        fs.iter().fold(0, |acc, &f| acc * n_levels[f] + level(f))
    };

    let means: Vec<f64> = cells
        .iter()
        .map(|c| c.iter().sum::<f64>() / r as f64)
        .collect();
    let n_obs = (n_cells * r) as f64;
    let grand = means.iter().sum::<f64>() / n_cells as f64;

    // Marginal means of every factor set (balanced: each combination has equal weight).
    let n_sets = 1usize << k;
    let marginals: Vec<Vec<f64>> = (0..n_sets)
        .map(|mask| {
            let fs = members(mask);
            let size: usize = fs.iter().map(|&f| n_levels[f]).product();
            let mut sums = vec![0.0; size];
            for (c, m) in means.iter().enumerate() {
                sums[combo_index(&fs, &|f| level_of(c, f))] += m;
            }
            let per = (n_cells / size) as f64;
            sums.into_iter().map(|s| s / per).collect()
        })
        .collect();

    let mut order: Vec<usize> = (1..n_sets).collect();
    order.sort_by_key(|&m| (m.count_ones(), members(m)));
    let mut effects = Vec::with_capacity(order.len());
    let mut ss = Vec::with_capacity(order.len());
    for &s_mask in &order {
        let fs = members(s_mask);
        let size: usize = fs.iter().map(|&f| n_levels[f]).product();
        let mut sum_sq = 0.0;
        for combo in 0..size {
            // Decode the combination into a level per factor of S.
            let mut levels = vec![0usize; k];
            let mut rest = combo;
            for &f in fs.iter().rev() {
                levels[f] = rest % n_levels[f];
                rest /= n_levels[f];
            }
            let mut alpha = 0.0;
            let mut t_mask = s_mask;
            loop {
                let ts = members(t_mask);
                let sign = if (s_mask.count_ones() - t_mask.count_ones()).is_multiple_of(2) {
                    1.0
                } else {
                    -1.0
                };
                alpha += sign * marginals[t_mask][combo_index(&ts, &|f| levels[f])];
                if t_mask == 0 {
                    break;
                }
                t_mask = (t_mask - 1) & s_mask;
            }
            sum_sq += alpha * alpha;
        }
        effects.push(
            fs.iter()
                .map(|&f| factors[f].0.as_str())
                .collect::<Vec<_>>()
                .join("·"),
        );
        ss.push(n_obs / size as f64 * sum_sq);
    }

    let sse: f64 = cells
        .iter()
        .zip(&means)
        .map(|(c, m)| c.iter().map(|y| (y - m).powi(2)).sum::<f64>())
        .sum();
    let sst: f64 = cells.iter().flatten().map(|y| (y - grand).powi(2)).sum();
    let frac = |x: f64| if sst > 0.0 { x / sst } else { 0.0 };
    Ok(Allocation {
        fractions: ss.iter().map(|&s| frac(s)).collect(),
        effects,
        ss,
        sse,
        sst,
        error_fraction: frac(sse),
        r,
    })
}

/// One run's response values, in [`DesignAnalysis::responses`] order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunValues {
    /// Cell index.
    pub cell: usize,
    /// Replication.
    pub replication: usize,
    /// Values (`None` where the run has no such op).
    pub values: Vec<Option<f64>>,
}

/// One response of one cell over its replications.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellResponse {
    /// Replications with a value.
    pub n: usize,
    /// Their mean (`None` when n = 0).
    pub mean: Option<f64>,
    /// 95 % t-CI half-width (`None` when n < 2).
    pub half_width: Option<f64>,
    /// CV across replications (`None` when n < 2 or the mean is 0).
    pub cv: Option<f64>,
}

/// Statistics of one cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellStats {
    /// Cell index.
    pub cell: usize,
    /// Cell name.
    pub name: String,
    /// Per response, in [`DesignAnalysis::responses`] order.
    pub responses: Vec<CellResponse>,
}

/// One row of the allocation-of-variation table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocationRow {
    /// Response name.
    pub response: String,
    /// Its allocation.
    pub allocation: Allocation,
}

/// Everything [`analyze_design`] computes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesignAnalysis {
    /// Response names, in order.
    pub responses: Vec<String>,
    /// Runs of the design with no record (`cell name #rep`), in cell then replication order.
    pub missing: Vec<String>,
    /// Per run, by cell then replication.
    pub runs: Vec<RunValues>,
    /// Per cell, in cell order (cells without any run included, with n = 0).
    pub cells: Vec<CellStats>,
    /// Allocation of variation per response; empty for a partial or one-at-a-time design.
    pub allocation: Vec<AllocationRow>,
    /// For designs whose factors all have 2 levels: Jain's 2^k·r analysis per response
    /// (effects with 95 % CIs), from [`doe::analyze`].
    pub two_k: Vec<(String, doe::Analysis)>,
    /// Per response: CV of the cell means across the cells (`None` if undefined).
    pub cv_across_cells: Vec<Option<f64>>,
    /// Per response: mean over cells of the CV across replications (`None` if undefined).
    pub mean_cv_replications: Vec<Option<f64>>,
    /// Why parts of the analysis are absent.
    pub notes: Vec<String>,
}

impl DesignAnalysis {
    /// Whether every run of the design has a record.
    pub fn is_complete(&self) -> bool {
        self.missing.is_empty()
    }
}

/// Analyses the records of `design`'s runs (see the module header).
///
/// # Errors
/// [`BenchError::InvalidDesign`] if a record is not a run of this design (unknown cell,
/// replication out of range, other seed), a run has two records, or a configured response
/// does not parse. Missing runs are not an error: they are listed and the allocation is
/// left out.
pub fn analyze_design(
    design: &Design,
    records: &[RunRecord],
) -> Result<DesignAnalysis, BenchError> {
    let cells = design.cells();
    let runs = design.runs();
    let mut by_run: BTreeMap<(usize, usize), &RunRecord> = BTreeMap::new();
    for record in records {
        let spec = &record.run;
        let Some(expected) = runs
            .iter()
            .find(|r| r.cell.index == spec.cell.index && r.replication == spec.replication)
        else {
            return Err(invalid(format!(
                "the record of {} is not a run of design `{}` (cell {} of {}, replication {} of {}); analyse it with the design that made it",
                spec.label(),
                design.display_name(),
                spec.cell.index,
                cells.len(),
                spec.replication,
                design.replications
            )));
        };
        if !expected.is_same_run(spec) {
            return Err(invalid(format!(
                "the record of {} differs from this design's run (cell levels, seed or fixed parameters); analyse it with the design that made it",
                spec.label()
            )));
        }
        if by_run
            .insert((spec.cell.index, spec.replication), record)
            .is_some()
        {
            return Err(invalid(format!(
                "two records of run {}; keep one",
                spec.label()
            )));
        }
    }

    let responses: Vec<Response> = if design.responses.is_empty() {
        Response::defaults(records)
    } else {
        design
            .responses
            .iter()
            .map(|s| Response::parse(s))
            .collect::<Result<_, _>>()?
    };
    let names: Vec<String> = responses.iter().map(Response::name).collect();
    let mut notes = Vec::new();

    let mut missing = Vec::new();
    for cell in &cells {
        for rep in 0..design.replications {
            if !by_run.contains_key(&(cell.index, rep)) {
                missing.push(format!("{} #{rep}", cell.name()));
            }
        }
    }

    let run_values: Vec<RunValues> = by_run
        .iter()
        .map(|(&(cell, replication), record)| RunValues {
            cell,
            replication,
            values: responses.iter().map(|resp| resp.value(record)).collect(),
        })
        .collect();

    // samples[cell][response] = values over replications (in replication order).
    let mut samples: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); responses.len()]; cells.len()];
    let mut absent: BTreeSet<usize> = BTreeSet::new();
    for rv in &run_values {
        for (j, v) in rv.values.iter().enumerate() {
            match v {
                Some(v) => samples[rv.cell][j].push(*v),
                None => {
                    absent.insert(j);
                }
            }
        }
    }
    for &j in &absent {
        notes.push(format!(
            "some runs have no `{}` (the op did not occur): its cell statistics use the runs that have it, and it has no allocation of variation",
            names[j]
        ));
    }

    let cell_stats: Vec<CellStats> = cells
        .iter()
        .map(|cell| CellStats {
            cell: cell.index,
            name: cell.name(),
            responses: samples[cell.index]
                .iter()
                .map(|sample| cell_response(sample))
                .collect(),
        })
        .collect();

    let cv_across_cells = (0..responses.len())
        .map(|j| {
            let means: Vec<f64> = cell_stats
                .iter()
                .filter_map(|c| c.responses[j].mean)
                .collect();
            doe::coefficient_of_variation(&means).ok()
        })
        .collect();
    let mean_cv_replications = (0..responses.len())
        .map(|j| {
            let cvs: Vec<f64> = cell_stats
                .iter()
                .filter_map(|c| c.responses[j].cv)
                .collect();
            (!cvs.is_empty()).then(|| cvs.iter().sum::<f64>() / cvs.len() as f64)
        })
        .collect();

    let mut allocation = Vec::new();
    let mut two_k = Vec::new();
    if !design.is_factorial() {
        notes.push(
            "a one_at_a_time design has no allocation of variation (it does not cross the factors); compare the cells with the baseline instead"
                .to_string(),
        );
    } else if !missing.is_empty() {
        notes.push(format!(
            "{} of {} runs are missing, so the allocation of variation (which needs balanced data) is left out; finish them and analyse again",
            missing.len(),
            cells.len() * design.replications
        ));
    } else {
        let factors: Vec<(String, usize)> = design
            .factors
            .iter()
            .map(|f| (f.name.clone(), f.levels.len()))
            .collect();
        for (j, name) in names.iter().enumerate() {
            if absent.contains(&j) {
                continue;
            }
            let data: Vec<Vec<f64>> = samples.iter().map(|c| c[j].clone()).collect();
            allocation.push(AllocationRow {
                response: name.clone(),
                allocation: allocation_of_variation(&factors, &data)?,
            });
            if design.is_two_level() {
                two_k.push((name.clone(), two_k_analysis(design, &data)?));
            }
        }
    }

    Ok(DesignAnalysis {
        responses: names,
        missing,
        runs: run_values,
        cells: cell_stats,
        allocation,
        two_k,
        cv_across_cells,
        mean_cv_replications,
        notes,
    })
}

fn cell_response(sample: &[f64]) -> CellResponse {
    match sample.len() {
        0 => CellResponse {
            n: 0,
            mean: None,
            half_width: None,
            cv: None,
        },
        1 => CellResponse {
            n: 1,
            mean: Some(sample[0]),
            half_width: None,
            cv: None,
        },
        n => match doe::sample_stats(sample, CONFIDENCE) {
            Ok(s) => CellResponse {
                n,
                mean: Some(s.mean),
                half_width: Some(s.half_width),
                cv: s.cv,
            },
            // Only non-finite values fail here; keep the mean visible.
            Err(_) => CellResponse {
                n,
                mean: Some(sample.iter().sum::<f64>() / n as f64),
                half_width: None,
                cv: None,
            },
        },
    }
}

/// [`doe::analyze`] on data in [`Design::cells`] order (first factor slowest), reordered to
/// doe's standard order (first factor fastest, level 0 = low).
fn two_k_analysis(design: &Design, data: &[Vec<f64>]) -> Result<doe::Analysis, BenchError> {
    let k = design.factors.len();
    let standard: Vec<Vec<f64>> = (0..1usize << k)
        .map(|i| {
            let ours = (0..k).fold(0, |acc, f| acc * 2 + ((i >> f) & 1));
            data[ours].clone()
        })
        .collect();
    doe::analyze(&design.factor_names(), &standard, CONFIDENCE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::Executor;
    use crate::experiment::run::tests::Fake;

    fn names(n: &[(&str, usize)]) -> Vec<(String, usize)> {
        n.iter().map(|(s, l)| (s.to_string(), *l)).collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    /// Jain's Example 18.1 (2²·3), given first-factor-slowest: equals doe::analyze.
    #[test]
    fn equals_jain_2x2x3() {
        // doe order: (A−B−), (A+B−), (A−B+), (A+B+); ours: (A−B−), (A−B+), (A+B−), (A+B+).
        let doe_cells = vec![
            vec![15.0, 18.0, 12.0],
            vec![45.0, 48.0, 51.0],
            vec![25.0, 28.0, 19.0],
            vec![75.0, 75.0, 81.0],
        ];
        let ours = vec![
            doe_cells[0].clone(),
            doe_cells[2].clone(),
            doe_cells[1].clone(),
            doe_cells[3].clone(),
        ];
        let a = allocation_of_variation(&names(&[("A", 2), ("B", 2)]), &ours).unwrap();
        let j = doe::analyze(&["A".into(), "B".into()], &doe_cells, 0.9).unwrap();
        assert_eq!(a.effects, ["A", "B", "A·B"]);
        for (name, want) in [("A", 0.7888), ("B", 0.1540), ("A·B", 0.0427)] {
            let got = a.fraction(name).unwrap();
            assert!(close(got, j.effect(name).unwrap().fraction), "{name}");
            assert!((got - want).abs() < 5e-5, "{name} {got}");
        }
        assert!(close(a.sst, 7032.0) && close(a.sse, 102.0));
        assert!(close(a.error_fraction, j.error_fraction));
        assert_eq!(
            a.ss.iter().map(|s| s.round()).collect::<Vec<_>>(),
            [5547.0, 1083.0, 300.0]
        );
    }

    /// Jain's 2³ workstation example (r = 1 and r = 2): equals doe::analyze.
    #[test]
    fn equals_jain_2x3() {
        let y = [14.0, 22.0, 10.0, 34.0, 46.0, 58.0, 50.0, 86.0];
        for r in [1, 2] {
            let doe_cells: Vec<Vec<f64>> = y
                .iter()
                .map(|v| {
                    if r == 1 {
                        vec![*v]
                    } else {
                        vec![v - 1.0, v + 1.0]
                    }
                })
                .collect();
            // Our cell a·4 + b·2 + c is doe's cell a + 2b + 4c.
            let ours: Vec<Vec<f64>> = (0..8)
                .map(|c| {
                    let (a, b, cc) = (c >> 2 & 1, c >> 1 & 1, c & 1);
                    doe_cells[a + 2 * b + 4 * cc].clone()
                })
                .collect();
            let f = names(&[("A", 2), ("B", 2), ("C", 2)]);
            let a = allocation_of_variation(&f, &ours).unwrap();
            let j = doe::analyze(&["A".into(), "B".into(), "C".into()], &doe_cells, 0.9).unwrap();
            assert_eq!(a.effects, ["A", "B", "C", "A·B", "A·C", "B·C", "A·B·C"]);
            for e in &j.effects[1..] {
                assert!(
                    close(a.fraction(&e.name).unwrap(), e.fraction),
                    "{}",
                    e.name
                );
                assert!(close(
                    a.ss[a.effects.iter().position(|n| *n == e.name).unwrap()],
                    e.ss
                ));
            }
            assert!(close(a.sst, j.sst) && close(a.sse, j.sse));
            assert_eq!((a.fraction("C").unwrap() * 100.0).round(), 71.0);
        }
    }

    /// A 3 × 2 design computed by hand (see the comments).
    #[test]
    fn three_level_by_hand() {
        // Cells (A slowest): A1B1 = 1, A1B2 = 3, A2B1 = 2, A2B2 = 6, A3B1 = 3, A3B2 = 9.
        // μ = 4; A means 2, 4, 6 → α_A = −2, 0, 2, SS_A = 6/3 · 8 = 16;
        // B means 2, 6 → α_B = ∓2, SS_B = 6/2 · 8 = 24;
        // α_AB = m_ab − m_a − m_b + μ = 1, −1, 0, 0, −1, 1 → SS_AB = 4; SST = 44.
        let y = [1.0, 3.0, 2.0, 6.0, 3.0, 9.0];
        let f = names(&[("A", 3), ("B", 2)]);
        let a = allocation_of_variation(&f, &y.map(|v| vec![v])).unwrap();
        assert_eq!(a.effects, ["A", "B", "A·B"]);
        assert!(
            close(a.ss[0], 16.0) && close(a.ss[1], 24.0) && close(a.ss[2], 4.0),
            "{:?}",
            a.ss
        );
        assert!(close(a.sst, 44.0) && close(a.sse, 0.0));
        assert!(close(a.fractions[0], 16.0 / 44.0));
        // r = 2 at ±0.5: N doubles every SS, SSE = 12 · 0.25 = 3.
        let a = allocation_of_variation(&f, &y.map(|v| vec![v - 0.5, v + 0.5])).unwrap();
        assert!(close(a.ss[0], 32.0) && close(a.ss[1], 48.0) && close(a.ss[2], 8.0));
        assert!(close(a.sse, 3.0) && close(a.sst, 91.0));
        assert!(close(a.error_fraction, 3.0 / 91.0));
        let total: f64 = a.fractions.iter().sum::<f64>() + a.error_fraction;
        assert!(close(total, 1.0));

        // One factor, 3 levels: [1,3], [4,6], [7,9] → SS_A = 36, SSE = 6, SST = 42.
        let a = allocation_of_variation(
            &names(&[("A", 3)]),
            &[vec![1.0, 3.0], vec![4.0, 6.0], vec![7.0, 9.0]],
        )
        .unwrap();
        assert!(close(a.ss[0], 36.0) && close(a.sse, 6.0) && close(a.sst, 42.0));
    }

    #[test]
    fn unbalanced_data_is_refused() {
        let f = names(&[("A", 3)]);
        let err =
            allocation_of_variation(&f, &[vec![1.0, 2.0], vec![1.0], vec![3.0, 4.0]]).unwrap_err();
        assert!(
            err.to_string().contains("unbalanced data: cell 1 has 1"),
            "{err}"
        );
        assert!(allocation_of_variation(&f, &[vec![1.0], vec![2.0]]).is_err());
        assert!(allocation_of_variation(&f, &[vec![], vec![], vec![]]).is_err());
        assert!(allocation_of_variation(&[], &[vec![1.0]]).is_err());
        assert!(allocation_of_variation(&f, &[vec![1.0], vec![f64::NAN], vec![2.0]]).is_err());
    }

    #[test]
    fn responses_parse_and_name() {
        let r = Response::parse("read.remote.p99.9").unwrap();
        assert_eq!(r.name(), "read.remote.p99_9");
        assert_eq!(Response::parse("throughput").unwrap(), Response::Throughput);
        assert!(Response::parse("read.total").is_err());
        assert!(Response::parse("read.everywhere.mean").is_err());
        assert!(Response::parse(".total.mean").is_err());
    }

    fn records_of(design: &Design) -> Vec<RunRecord> {
        let mut exec = Fake {
            calls: 0,
            fail: vec![],
        };
        design
            .runs()
            .into_iter()
            .map(|run| RunRecord {
                outcome: exec.execute(design, &run).unwrap(),
                run,
            })
            .collect()
    }

    #[test]
    fn analyses_a_design() {
        let design = Design::parse(
            "design = { kind = \"two_k\", replications = 2, order_seed = 1 }\nfactors = { b = [0, 100], a = [\"x\", \"y\"] }\n",
        )
        .unwrap();
        let records = records_of(&design);
        let an = analyze_design(&design, &records).unwrap();
        assert!(an.is_complete());
        assert_eq!(
            an.responses,
            [
                "read.total.mean",
                "read.total.p10",
                "read.total.p90",
                "update.total.mean",
                "update.total.p10",
                "update.total.p90",
                "throughput"
            ]
        );
        assert_eq!(an.runs.len(), 8);
        assert_eq!(an.cells.len(), 4);
        // Throughput is 500 + cell index for every replication: no error, CV 0.
        let t = an.responses.len() - 1;
        let cell3 = &an.cells[3].responses[t];
        assert_eq!(
            (cell3.n, cell3.mean, cell3.half_width, cell3.cv),
            (2, Some(503.0), Some(0.0), Some(0.0))
        );
        // Throughput 500, 501, 502, 503 over cells b slowest: b explains 4/5, a 1/5.
        let row = &an.allocation[t];
        assert_eq!(row.response, "throughput");
        assert!(close(row.allocation.fraction("b").unwrap(), 0.8));
        assert!(close(row.allocation.fraction("a").unwrap(), 0.2));
        assert!(close(row.allocation.error_fraction, 0.0));
        // And the 2^k analysis agrees, in doe's order.
        let (name, jain) = &an.two_k[t];
        assert_eq!(name, "throughput");
        assert_eq!(jain.factors, ["b", "a"]);
        assert!(close(jain.effect("b").unwrap().fraction, 0.8));
        assert!(close(jain.effect("b").unwrap().q, 1.0));
        assert!(close(jain.effect("a").unwrap().q, 0.5));
        let means: Vec<f64> = (0..4).map(|c| 500.0 + c as f64).collect();
        assert!(close(
            an.cv_across_cells[t].unwrap(),
            doe::coefficient_of_variation(&means).unwrap()
        ));
        assert_eq!(an.mean_cv_replications[t], Some(0.0));
        // Latency responses are in ms: read mean of cell 0 rep 0 is ≈ 1 ms + 25 ms remote.
        let mean0 = an.runs[0].values[0].unwrap();
        assert!((mean0 - 26.0495).abs() < 0.05, "{mean0}");

        // A partial design: per-run tables only, with the missing runs named.
        let partial: Vec<RunRecord> = records
            .iter()
            .filter(|r| !(r.run.cell.index == 2 && r.run.replication == 1))
            .cloned()
            .collect();
        let an = analyze_design(&design, &partial).unwrap();
        assert!(!an.is_complete());
        assert_eq!(an.missing, ["b=100_a=x #1"]);
        assert!(an.allocation.is_empty() && an.two_k.is_empty());
        assert!(
            an.notes
                .iter()
                .any(|n| n.contains("1 of 8 runs are missing"))
        );
        assert_eq!(an.cells[2].responses[t].n, 1);

        // A record of another design is refused; so is a duplicate.
        let mut dup = records.clone();
        dup.push(records[0].clone());
        assert!(
            analyze_design(&design, &dup)
                .unwrap_err()
                .to_string()
                .contains("two records")
        );
        let mut alien = records[0].clone();
        alien.run.seed ^= 1;
        assert!(
            analyze_design(&design, &[alien])
                .unwrap_err()
                .to_string()
                .contains("differs")
        );
    }

    #[test]
    fn one_at_a_time_has_cells_but_no_allocation() {
        let design = Design::parse(
            "design = { kind = \"one_at_a_time\", replications = 2 }\nfactors = { a = [1, 2, 3], b = [\"x\", \"y\"] }\n",
        )
        .unwrap();
        let an = analyze_design(&design, &records_of(&design)).unwrap();
        assert!(an.is_complete());
        assert_eq!(an.cells.len(), 4);
        assert!(an.allocation.is_empty() && an.two_k.is_empty());
        assert!(an.notes.iter().any(|n| n.contains("one_at_a_time")));
    }

    #[test]
    fn configured_responses_and_absent_ops() {
        let design = Design::parse(
            "design = { kind = \"full_factorial\", replications = 2 }\nfactors = { a = [1, 2, 3] }\nresponses = [\"read.remote.p99\", \"scan.total.mean\"]\n",
        )
        .unwrap();
        let records = records_of(&design);
        let an = analyze_design(&design, &records).unwrap();
        assert_eq!(an.responses, ["read.remote.p99", "scan.total.mean"]);
        assert_eq!(an.allocation.len(), 1);
        assert!(an.two_k.is_empty());
        assert!(an.notes.iter().any(|n| n.contains("scan.total.mean")));
        assert_eq!(an.cells[0].responses[1].n, 0);
    }
}
