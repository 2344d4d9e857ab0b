//! 2^k·r factorial designs (Jain 1991, *The Art of Computer Systems Performance Analysis*,
//! ch. 17–18; spec `experiments.md` §3): sign table with all interactions, effects, allocation
//! of variation, effect confidence intervals; plus the per-sample statistics the experiment
//! report needs (coefficient of variation, mean ± t-CI, sample size), and the Student t and
//! standard normal quantiles they use (implemented here, no statistics crate).
//!
//! **Cell order (standard / Yates order).** Cell `i` (0-based) of a 2^k design has factor `f`
//! at its *high* level iff bit `f` of `i` is set: the **first factor varies fastest**. For two
//! factors A, B the cells are (A−,B−), (A+,B−), (A−,B+), (A+,B+).
//!
//! **Effect order.** Effect `j` (0-based) is the product of the factors whose bits are set in
//! `j`: `I, A, B, AB, C, AC, BC, ABC, …`. Its sign in cell `i` is
//! `s_ij = Π_{f ∈ j} (+1 if f high in i else −1)`.
//!
//! Guarantees: inputs are validated (cell count = 2^k, equal r ≥ 1 per cell, finite values,
//! 1 ≤ k ≤ 16) with a [`BenchError::InvalidDesign`] saying what is wrong; confidence intervals
//! need r ≥ 2 and are `None` otherwise. Quantiles are accurate to ~1e-9.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::BenchError;

fn invalid(reason: impl Into<String>) -> BenchError {
    BenchError::InvalidDesign {
        reason: reason.into(),
    }
}

/// Largest number of factors accepted (65 536 cells).
pub const MAX_FACTORS: usize = 16;

/// The 2^k sign table: `signs[i][j]` is the sign of effect `j` in cell `i` (see the module
/// header for both orders).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignTable {
    /// Effect names: `I`, then factor names joined by `·` (a single factor keeps its name).
    pub effects: Vec<String>,
    /// One row per cell, one ±1 per effect.
    pub signs: Vec<Vec<i8>>,
}

/// Name of effect `j` given the factor names (`I` for j = 0, `A·B` for an interaction).
fn effect_name(factors: &[String], j: usize) -> String {
    if j == 0 {
        return "I".to_string();
    }
    factors
        .iter()
        .enumerate()
        .filter(|(f, _)| j & (1 << f) != 0)
        .map(|(_, name)| name.as_str())
        .collect::<Vec<_>>()
        .join("·")
}

fn sign(cell: usize, effect: usize) -> i8 {
    // −1 for every factor of the effect that is at its low level in the cell.
    if (effect & !cell).count_ones().is_multiple_of(2) {
        1
    } else {
        -1
    }
}

/// The sign table of a 2^k design with the given factor names.
///
/// # Errors
/// [`BenchError::InvalidDesign`] if there are no factors, more than [`MAX_FACTORS`], or two
/// factors share a name.
pub fn sign_table(factors: &[String]) -> Result<SignTable, BenchError> {
    check_factors(factors)?;
    let n = 1usize << factors.len();
    Ok(SignTable {
        effects: (0..n).map(|j| effect_name(factors, j)).collect(),
        signs: (0..n)
            .map(|i| (0..n).map(|j| sign(i, j)).collect())
            .collect(),
    })
}

fn check_factors(factors: &[String]) -> Result<(), BenchError> {
    if factors.is_empty() {
        return Err(invalid("a 2^k design needs at least one factor"));
    }
    if factors.len() > MAX_FACTORS {
        return Err(invalid(format!(
            "{} factors is more than the {MAX_FACTORS} supported",
            factors.len()
        )));
    }
    for (i, a) in factors.iter().enumerate() {
        if factors[..i].contains(a) {
            return Err(invalid(format!("factor `{a}` is listed twice")));
        }
    }
    Ok(())
}

/// One effect of a 2^k·r analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Effect {
    /// `I`, a factor name, or an interaction (`A·B`).
    pub name: String,
    /// The effect's index in standard order (bit f set ⇔ factor f takes part).
    pub index: usize,
    /// `q_j = (1/2^k) Σ_i s_ij ȳ_i`.
    pub q: f64,
    /// Sum of squares `2^k r q_j²` (0 for `I`, which is not part of SST).
    pub ss: f64,
    /// Fraction of variation explained, `ss / SST` (0 for `I`; 0 when SST is 0).
    pub fraction: f64,
    /// `q_j ± t · s_q` at the analysis's confidence; `None` when r < 2.
    pub ci: Option<(f64, f64)>,
    /// Whether the CI excludes zero; `None` when r < 2.
    pub significant: Option<bool>,
}

/// A 2^k·r analysis (Jain ch. 18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// Factor names, in order (first varies fastest).
    pub factors: Vec<String>,
    /// Replications per cell.
    pub r: usize,
    /// Cell means ȳ_i, in standard order.
    pub cell_means: Vec<f64>,
    /// All 2^k effects, `I` first, in standard order.
    pub effects: Vec<Effect>,
    /// Total variation `SST = Σ (y − ȳ)² = 2^k r Σ_{j≠0} q_j² + SSE`.
    pub sst: f64,
    /// Sum of squared errors over replicates, `Σ_i Σ_k (y_ik − ȳ_i)²`.
    pub sse: f64,
    /// `SSE / SST` (0 when SST is 0).
    pub error_fraction: f64,
    /// Degrees of freedom of the errors, `2^k (r − 1)`.
    pub dof: usize,
    /// Standard deviation of errors `s_e = sqrt(SSE / (2^k (r−1)))`; `None` when r < 2.
    pub s_e: Option<f64>,
    /// Standard deviation of each effect `s_q = s_e / sqrt(2^k r)`; `None` when r < 2.
    pub s_q: Option<f64>,
    /// Two-sided confidence level of the CIs (e.g. 0.90).
    pub confidence: f64,
    /// The t quantile `t_{1−α/2; dof}` used; `None` when r < 2.
    pub t: Option<f64>,
}

/// Analyses a 2^k·r design: `responses[i]` holds the r replicate responses of cell `i` in
/// standard order (first factor fastest); CIs are two-sided at `confidence` (e.g. 0.90).
///
/// # Errors
/// [`BenchError::InvalidDesign`] for bad factors (see [`sign_table`]), a cell count other
/// than 2^k, empty or unequal replicate counts, non-finite responses, or a confidence not in
/// (0, 1).
pub fn analyze(
    factors: &[String],
    responses: &[Vec<f64>],
    confidence: f64,
) -> Result<Analysis, BenchError> {
    check_factors(factors)?;
    let k = factors.len();
    let n = 1usize << k;
    if responses.len() != n {
        return Err(invalid(format!(
            "a 2^{k} design has {n} cells, but {} were given (cells in standard order, first factor varying fastest)",
            responses.len()
        )));
    }
    let r = responses[0].len();
    if r == 0 {
        return Err(invalid("every cell needs at least one response"));
    }
    for (i, cell) in responses.iter().enumerate() {
        if cell.len() != r {
            return Err(invalid(format!(
                "cell {i} has {} responses but cell 0 has {r}: every cell needs the same number of replications",
                cell.len()
            )));
        }
        if let Some(v) = cell.iter().find(|v| !v.is_finite()) {
            return Err(invalid(format!("cell {i} has a non-finite response {v}")));
        }
    }
    if !(confidence > 0.0 && confidence < 1.0) {
        return Err(invalid(format!("confidence {confidence} is not in (0, 1)")));
    }

    let rf = r as f64;
    let nf = n as f64;
    let cell_means: Vec<f64> = responses
        .iter()
        .map(|c| c.iter().sum::<f64>() / rf)
        .collect();
    let sse: f64 = responses
        .iter()
        .zip(&cell_means)
        .map(|(c, m)| c.iter().map(|y| (y - m).powi(2)).sum::<f64>())
        .sum();
    let qs: Vec<f64> = (0..n)
        .map(|j| {
            (0..n)
                .map(|i| f64::from(sign(i, j)) * cell_means[i])
                .sum::<f64>()
                / nf
        })
        .collect();
    let ss: Vec<f64> = qs
        .iter()
        .enumerate()
        .map(|(j, q)| if j == 0 { 0.0 } else { nf * rf * q * q })
        .collect();
    let sst = ss.iter().sum::<f64>() + sse;
    let frac = |x: f64| if sst > 0.0 { x / sst } else { 0.0 };

    let dof = n * (r - 1);
    let (s_e, s_q, t) = if r >= 2 {
        let s_e = (sse / dof as f64).sqrt();
        let s_q = s_e / (nf * rf).sqrt();
        let t = t_quantile(1.0 - (1.0 - confidence) / 2.0, dof as f64)?;
        (Some(s_e), Some(s_q), Some(t))
    } else {
        (None, None, None)
    };

    let effects = (0..n)
        .map(|j| {
            let ci = s_q
                .zip(t)
                .map(|(s_q, t)| (qs[j] - t * s_q, qs[j] + t * s_q));
            Effect {
                name: effect_name(factors, j),
                index: j,
                q: qs[j],
                ss: ss[j],
                fraction: frac(ss[j]),
                ci,
                significant: ci.map(|(lo, hi)| lo > 0.0 || hi < 0.0),
            }
        })
        .collect();

    Ok(Analysis {
        factors: factors.to_vec(),
        r,
        cell_means,
        effects,
        sst,
        sse,
        error_fraction: frac(sse),
        dof,
        s_e,
        s_q,
        confidence,
        t,
    })
}

impl Analysis {
    /// The effect named `name` (`I`, `A`, `A·B`, ...).
    pub fn effect(&self, name: &str) -> Option<&Effect> {
        self.effects.iter().find(|e| e.name == name)
    }

    /// The allocation-of-variation table as Markdown: one row per effect (not `I`) whose
    /// fraction is at least `min_fraction` (e.g. 0.01), then the error row, then a note
    /// saying how many effects were suppressed below the threshold.
    pub fn allocation_markdown(&self, min_fraction: f64) -> String {
        let pct = (self.confidence * 100.0).round();
        let mut out =
            format!("| effect | q | % of variation | {pct} % CI |\n|---|---:|---:|---|\n");
        let mut suppressed = 0;
        for e in self.effects.iter().skip(1) {
            if e.fraction < min_fraction {
                suppressed += 1;
                continue;
            }
            let ci = match e.ci {
                Some((lo, hi)) => format!(
                    "({lo:.4}, {hi:.4}){}",
                    if e.significant == Some(true) {
                        ""
                    } else {
                        " n.s."
                    }
                ),
                None => "— (r = 1)".to_string(),
            };
            let _ = writeln!(
                out,
                "| {} | {:.4} | {:.2} | {ci} |",
                e.name,
                e.q,
                e.fraction * 100.0
            );
        }
        let _ = writeln!(out, "| error | | {:.2} | |", self.error_fraction * 100.0);
        if suppressed > 0 {
            let _ = writeln!(
                out,
                "\n{suppressed} effect(s) explaining less than {:.1} % of the variation each are not shown.",
                min_fraction * 100.0
            );
        }
        out
    }
}

/// Mean, spread and t-CI of one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleStats {
    /// Sample size.
    pub n: usize,
    /// Sample mean x̄.
    pub mean: f64,
    /// Sample standard deviation s (divisor n − 1).
    pub std_dev: f64,
    /// Coefficient of variation `s / x̄` (`None` when x̄ = 0).
    pub cv: Option<f64>,
    /// Two-sided confidence level of the CI.
    pub confidence: f64,
    /// CI half-width `t_{1−α/2; n−1} · s / √n`.
    pub half_width: f64,
    /// `(x̄ − half_width, x̄ + half_width)`.
    pub ci: (f64, f64),
}

fn check_sample(sample: &[f64]) -> Result<(), BenchError> {
    if sample.len() < 2 {
        return Err(invalid(format!(
            "a sample needs at least 2 values for a standard deviation, got {}",
            sample.len()
        )));
    }
    if let Some(v) = sample.iter().find(|v| !v.is_finite()) {
        return Err(invalid(format!("sample has a non-finite value {v}")));
    }
    Ok(())
}

/// Sample mean and standard deviation (divisor n − 1).
///
/// # Errors
/// [`BenchError::InvalidDesign`] if fewer than 2 values or a non-finite value.
pub fn mean_std_dev(sample: &[f64]) -> Result<(f64, f64), BenchError> {
    check_sample(sample)?;
    let n = sample.len() as f64;
    let mean = sample.iter().sum::<f64>() / n;
    let var = sample.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Ok((mean, var.sqrt()))
}

/// Coefficient of variation `s / x̄` of a sample.
///
/// # Errors
/// [`BenchError::InvalidDesign`] if fewer than 2 values, a non-finite value, or a zero mean.
pub fn coefficient_of_variation(sample: &[f64]) -> Result<f64, BenchError> {
    let (mean, sd) = mean_std_dev(sample)?;
    if mean == 0.0 {
        return Err(invalid(
            "the coefficient of variation is undefined for a zero mean",
        ));
    }
    Ok(sd / mean)
}

/// Mean ± two-sided t-CI at `confidence` (0.95 in the spec), with the CV.
///
/// # Errors
/// [`BenchError::InvalidDesign`] if fewer than 2 values, a non-finite value, or a confidence
/// not in (0, 1).
pub fn sample_stats(sample: &[f64], confidence: f64) -> Result<SampleStats, BenchError> {
    let (mean, std_dev) = mean_std_dev(sample)?;
    if !(confidence > 0.0 && confidence < 1.0) {
        return Err(invalid(format!("confidence {confidence} is not in (0, 1)")));
    }
    let n = sample.len();
    let t = t_quantile(1.0 - (1.0 - confidence) / 2.0, (n - 1) as f64)?;
    let half_width = t * std_dev / (n as f64).sqrt();
    Ok(SampleStats {
        n,
        mean,
        std_dev,
        cv: (mean != 0.0).then(|| std_dev / mean),
        confidence,
        half_width,
        ci: (mean - half_width, mean + half_width),
    })
}

/// Jain's sample size `n = (100·z·s / (r·x̄))²`, rounded up, for a mean within ±`accuracy_pct`
/// % at two-sided `confidence` (z = 2.576 at 0.99), from a pilot sample's `mean` and `std_dev`.
///
/// # Errors
/// [`BenchError::InvalidDesign`] for a zero or non-finite mean, a negative or non-finite s,
/// an accuracy ≤ 0, or a confidence not in (0, 1).
pub fn sample_size(
    mean: f64,
    std_dev: f64,
    accuracy_pct: f64,
    confidence: f64,
) -> Result<u64, BenchError> {
    if !mean.is_finite() || mean == 0.0 {
        return Err(invalid(format!(
            "sample size needs a finite non-zero mean, got {mean}"
        )));
    }
    if !std_dev.is_finite() || std_dev < 0.0 {
        return Err(invalid(format!(
            "sample size needs a finite s ≥ 0, got {std_dev}"
        )));
    }
    if !(accuracy_pct.is_finite() && accuracy_pct > 0.0) {
        return Err(invalid(format!(
            "accuracy must be > 0 %, got {accuracy_pct}"
        )));
    }
    let z = normal_quantile(1.0 - (1.0 - confidence) / 2.0)?;
    let n = (100.0 * z * std_dev / (accuracy_pct * mean.abs())).powi(2);
    Ok(n.ceil() as u64)
}

// ---------------------------------------------------------------------------------------
// Quantiles.

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9; relative error ~1e-15).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Continued fraction of the incomplete beta function (modified Lentz).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-15;
    let qab = a + b;
    let qap = a + 1.0;
    let qam = a - 1.0;
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..10_000 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        // One Lentz step: the next convergent's ratio for partial numerator `aa`.
        let mut step = |aa: f64| {
            d = 1.0 + aa * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + aa / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            d * c
        };
        h *= step(m * (b - m) * x / ((qam + m2) * (a + m2)));
        let del = step(-(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)));
        h *= del;
        if (del - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

/// Regularized incomplete beta I_x(a, b).
fn inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

/// CDF of Student's t with `dof` degrees of freedom.
pub fn t_cdf(t: f64, dof: f64) -> f64 {
    let t2 = t * t;
    // Evaluate whichever side keeps x away from 1, where `1 − x` would lose precision.
    let tail = if t2 < dof {
        0.5 * (1.0 - inc_beta(0.5, dof / 2.0, t2 / (dof + t2)))
    } else {
        0.5 * inc_beta(dof / 2.0, 0.5, dof / (dof + t2))
    };
    if t >= 0.0 { 1.0 - tail } else { tail }
}

/// Standard normal CDF Φ(x), via erf's everywhere-positive series
/// `erf(x) = 2/√π · e^{−x²} Σ 2^n x^{2n+1} / (1·3·…·(2n+1))`.
pub fn normal_cdf(x: f64) -> f64 {
    let y = x.abs() / std::f64::consts::SQRT_2;
    if y > 9.0 {
        return if x > 0.0 { 1.0 } else { 0.0 };
    }
    let mut term = y;
    let mut sum = y;
    let mut n = 0.0;
    while term > sum * 1e-17 {
        n += 1.0;
        term *= 2.0 * y * y / (2.0 * n + 1.0);
        sum += term;
    }
    let erf = (2.0 / std::f64::consts::PI.sqrt() * (-y * y).exp() * sum).min(1.0);
    if x >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

/// Inverts a monotone CDF by bisection on [−hi, hi] after growing `hi` until it brackets p.
fn invert(p: f64, cdf: impl Fn(f64) -> f64) -> f64 {
    let mut hi = 1.0;
    while cdf(hi) < p && hi < 1e12 {
        hi *= 2.0;
    }
    let mut lo = -hi;
    while cdf(lo) > p && lo > -1e12 {
        lo *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if cdf(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-12 * hi.abs().max(1.0) {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// The `p` quantile of Student's t with `dof` degrees of freedom: `t_cdf(t_quantile(p)) = p`
/// (e.g. `t_quantile(0.975, 8.0) ≈ 2.306`).
///
/// # Errors
/// [`BenchError::InvalidDesign`] if p is not in (0, 1) or dof is not a finite positive number.
pub fn t_quantile(p: f64, dof: f64) -> Result<f64, BenchError> {
    if !(p > 0.0 && p < 1.0) {
        return Err(invalid(format!(
            "t quantile: probability {p} is not in (0, 1)"
        )));
    }
    if !(dof.is_finite() && dof > 0.0) {
        return Err(invalid(format!(
            "t quantile: {dof} degrees of freedom (replications r ≥ 2 are needed for confidence intervals)"
        )));
    }
    Ok(invert(p, |t| t_cdf(t, dof)))
}

/// The `p` quantile of the standard normal distribution (e.g. `normal_quantile(0.995) ≈ 2.576`).
///
/// # Errors
/// [`BenchError::InvalidDesign`] if p is not in (0, 1).
pub fn normal_quantile(p: f64) -> Result<f64, BenchError> {
    if !(p > 0.0 && p < 1.0) {
        return Err(invalid(format!(
            "normal quantile: probability {p} is not in (0, 1)"
        )));
    }
    Ok(invert(p, normal_cdf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn t_quantiles_match_tables() {
        // (p, dof, table value to 3 decimals)
        let table = [
            (0.95, 8.0, 1.860),
            (0.975, 8.0, 2.306),
            (0.995, 10.0, 3.169),
            (0.95, 1.0, 6.314),
            (0.975, 1.0, 12.706),
            (0.995, 1.0, 63.657),
            (0.975, 2.0, 4.303),
            (0.90, 5.0, 1.476),
            (0.975, 30.0, 2.042),
            (0.999, 20.0, 3.552),
            (0.975, 120.0, 1.980),
        ];
        for (p, dof, want) in table {
            let got = t_quantile(p, dof).unwrap();
            assert!(
                close(got, want, 6e-4),
                "t_{{{p};{dof}}} = {got}, table {want}"
            );
            // Symmetry.
            assert!(close(t_quantile(1.0 - p, dof).unwrap(), -got, 1e-9));
        }
        // Exact closed forms: dof = 1 is Cauchy, dof = 2 has t = (2p−1)·sqrt(2/(4p(1−p))).
        let p: f64 = 0.9;
        assert!(close(
            t_quantile(p, 1.0).unwrap(),
            (std::f64::consts::PI * (p - 0.5)).tan(),
            1e-8
        ));
        let exact2 = (2.0 * p - 1.0) * (2.0 / (4.0 * p * (1.0 - p))).sqrt();
        assert!(close(t_quantile(p, 2.0).unwrap(), exact2, 1e-8));
        assert!(close(t_quantile(0.5, 7.0).unwrap(), 0.0, 1e-9));
    }

    #[test]
    fn normal_quantiles_match_tables() {
        assert!(close(normal_quantile(0.995).unwrap(), 2.5758, 1e-4));
        assert!(close(normal_quantile(0.975).unwrap(), 1.9600, 1e-4));
        assert!(close(normal_quantile(0.95).unwrap(), 1.6449, 1e-4));
        assert!(close(normal_quantile(0.5).unwrap(), 0.0, 1e-9));
        assert!(close(normal_quantile(0.025).unwrap(), -1.9600, 1e-4));
        // Large dof t approaches the normal.
        assert!(close(t_quantile(0.975, 1e6).unwrap(), 1.95996, 1e-4));
    }

    #[test]
    fn bad_quantile_inputs_are_refused() {
        assert!(t_quantile(1.0, 3.0).is_err());
        assert!(t_quantile(0.0, 3.0).is_err());
        assert!(t_quantile(0.9, 0.0).is_err());
        assert!(normal_quantile(1.5).is_err());
    }

    #[test]
    fn sign_table_two_and_three_factors() {
        let t = sign_table(&names(&["A", "B"])).unwrap();
        assert_eq!(t.effects, ["I", "A", "B", "A·B"]);
        assert_eq!(
            t.signs,
            vec![
                vec![1, -1, -1, 1],
                vec![1, 1, -1, -1],
                vec![1, -1, 1, -1],
                vec![1, 1, 1, 1]
            ]
        );
        let t = sign_table(&names(&["A", "B", "C"])).unwrap();
        assert_eq!(
            t.effects,
            ["I", "A", "B", "A·B", "C", "A·C", "B·C", "A·B·C"]
        );
        // Columns are orthogonal and each non-I column sums to zero.
        for j in 0..8 {
            for l in 0..8 {
                let dot: i32 = t
                    .signs
                    .iter()
                    .map(|row| i32::from(row[j]) * i32::from(row[l]))
                    .sum();
                assert_eq!(dot, if j == l { 8 } else { 0 });
            }
        }
        assert_eq!(t.signs[5], [1, 1, -1, -1, 1, 1, -1, -1]); // A+ B− C+
    }

    /// Jain 1991, Example 18.1 (memory × cache, r = 3).
    #[test]
    fn jain_2x2x3_memory_cache() {
        let responses = vec![
            vec![15.0, 18.0, 12.0],
            vec![45.0, 48.0, 51.0],
            vec![25.0, 28.0, 19.0],
            vec![75.0, 75.0, 81.0],
        ];
        let a = analyze(&names(&["A", "B"]), &responses, 0.90).unwrap();
        let q: Vec<f64> = a.effects.iter().map(|e| e.q).collect();
        assert_eq!(q, [41.0, 21.5, 9.5, 5.0]);
        assert_eq!(a.cell_means, [15.0, 48.0, 24.0, 77.0]);
        assert!(close(a.sse, 102.0, 1e-9));
        assert!(close(a.sst, 7032.0, 1e-9));
        let ss: Vec<f64> = a.effects.iter().map(|e| e.ss).collect();
        assert_eq!(ss, [0.0, 5547.0, 1083.0, 300.0]);
        // Jain reports 78.88 %, 15.40 %, 4.27 %, 1.45 %.
        let pct = |x: f64| (x * 10_000.0).round() / 100.0;
        assert_eq!(pct(a.effect("A").unwrap().fraction), 78.88);
        assert_eq!(pct(a.effect("B").unwrap().fraction), 15.40);
        assert_eq!(pct(a.effect("A·B").unwrap().fraction), 4.27);
        assert_eq!(pct(a.error_fraction), 1.45);
        let total: f64 = a.effects.iter().map(|e| e.fraction).sum::<f64>() + a.error_fraction;
        assert!(close(total, 1.0, 1e-12));
        // s_e = sqrt(102/8) = 3.57, s_q = 1.03, t_{0.95;8} = 1.86, CIs ±1.92.
        assert_eq!(a.dof, 8);
        assert!(close(a.s_e.unwrap(), (102.0f64 / 8.0).sqrt(), 1e-12));
        assert!(close(
            a.s_q.unwrap(),
            (102.0f64 / 8.0).sqrt() / 12f64.sqrt(),
            1e-12
        ));
        assert!(close(a.t.unwrap(), 1.860, 6e-4));
        let (lo, hi) = a.effect("A").unwrap().ci.unwrap();
        assert!(
            close(lo, 19.58, 0.01) && close(hi, 23.42, 0.01),
            "({lo}, {hi})"
        );
        let (lo, hi) = a.effect("I").unwrap().ci.unwrap();
        assert!(
            close(lo, 39.08, 0.01) && close(hi, 42.92, 0.01),
            "({lo}, {hi})"
        );
        let (lo, hi) = a.effect("A·B").unwrap().ci.unwrap();
        assert!(
            close(lo, 3.08, 0.01) && close(hi, 6.92, 0.01),
            "({lo}, {hi})"
        );
        assert!(a.effects.iter().all(|e| e.significant == Some(true)));

        let md = a.allocation_markdown(0.05);
        assert!(md.contains("| A | 21.5000 | 78.88 |"), "{md}");
        assert!(md.contains("| error | | 1.45 | |"), "{md}");
        assert!(!md.contains("| A·B |"), "{md}");
        assert!(
            md.contains("1 effect(s) explaining less than 5.0 %"),
            "{md}"
        );
    }

    /// Jain 1991, Example 17.? (2^3 workstation design: cache, memory, processors; r = 1):
    /// effects 40, 10, 5, 20, 5, 2, 3, 1; C explains 71 %, A 18 %.
    #[test]
    fn jain_2x3_workstation() {
        let y = [14.0, 22.0, 10.0, 34.0, 46.0, 58.0, 50.0, 86.0];
        let responses: Vec<Vec<f64>> = y.iter().map(|v| vec![*v]).collect();
        let a = analyze(&names(&["A", "B", "C"]), &responses, 0.90).unwrap();
        let q: Vec<f64> = a.effects.iter().map(|e| e.q).collect();
        assert_eq!(q, [40.0, 10.0, 5.0, 5.0, 20.0, 2.0, 3.0, 1.0]);
        assert_eq!(a.sst, 4512.0);
        assert_eq!(a.sse, 0.0);
        assert_eq!(a.s_e, None);
        assert!(a.effects.iter().all(|e| e.ci.is_none()));
        let pct = |n: &str| (a.effect(n).unwrap().fraction * 100.0).round();
        assert_eq!(
            [
                pct("A"),
                pct("B"),
                pct("C"),
                pct("A·B"),
                pct("A·C"),
                pct("B·C"),
                pct("A·B·C")
            ],
            [18.0, 4.0, 71.0, 4.0, 1.0, 2.0, 0.0]
        );

        // Two replicates ±1 around the same cells: same effects, SSE = 8·2·1 = 16, dof 8.
        let responses: Vec<Vec<f64>> = y.iter().map(|v| vec![v - 1.0, v + 1.0]).collect();
        let b = analyze(&names(&["A", "B", "C"]), &responses, 0.95).unwrap();
        assert_eq!(b.effects.iter().map(|e| e.q).collect::<Vec<_>>(), q);
        assert!(close(b.sse, 16.0, 1e-12));
        assert_eq!(b.dof, 8);
        assert!(close(b.sst, 2.0 * 4512.0 + 16.0, 1e-9));
        let half = 2.306 * (16.0f64 / 8.0).sqrt() / 16f64.sqrt();
        let (lo, hi) = b.effect("A·B·C").unwrap().ci.unwrap();
        assert!(close(lo, 1.0 - half, 1e-3) && close(hi, 1.0 + half, 1e-3));
        assert_eq!(b.effect("A·B·C").unwrap().significant, Some(true));
    }

    #[test]
    fn invalid_designs_are_refused() {
        let two = names(&["A", "B"]);
        let err = analyze(&two, &vec![vec![1.0, 2.0]; 3], 0.9).unwrap_err();
        assert!(
            matches!(&err, BenchError::InvalidDesign { reason } if reason.contains("4 cells")),
            "{err}"
        );
        let err = analyze(
            &two,
            &[vec![1.0, 2.0], vec![1.0], vec![1.0, 2.0], vec![1.0, 2.0]],
            0.9,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("same number of replications"),
            "{err}"
        );
        assert!(analyze(&two, &vec![vec![]; 4], 0.9).is_err());
        assert!(analyze(&two, &vec![vec![1.0, f64::NAN]; 4], 0.9).is_err());
        assert!(analyze(&two, &vec![vec![1.0, 2.0]; 4], 1.0).is_err());
        assert!(analyze(&[], &[vec![1.0]], 0.9).is_err());
        assert!(analyze(&names(&["A", "A"]), &vec![vec![1.0]; 4], 0.9).is_err());
        let many: Vec<String> = (0..17).map(|i| format!("f{i}")).collect();
        assert!(sign_table(&many).is_err());
    }

    #[test]
    fn sample_statistics() {
        let s = [10.0, 12.0, 14.0, 16.0, 18.0];
        let (mean, sd) = mean_std_dev(&s).unwrap();
        assert!(close(mean, 14.0, 1e-12));
        assert!(close(sd, 10f64.sqrt(), 1e-12));
        assert!(close(
            coefficient_of_variation(&s).unwrap(),
            10f64.sqrt() / 14.0,
            1e-12
        ));
        let st = sample_stats(&s, 0.95).unwrap();
        // t_{0.975;4} = 2.776
        let half = 2.776 * 10f64.sqrt() / 5f64.sqrt();
        assert!(close(st.half_width, half, 2e-3), "{}", st.half_width);
        assert!(close(st.ci.0, 14.0 - st.half_width, 1e-12));
        assert!(close(st.ci.1, 14.0 + st.half_width, 1e-12));
        assert!(mean_std_dev(&[1.0]).is_err());
        assert!(coefficient_of_variation(&[-1.0, 1.0]).is_err());
        assert_eq!(sample_stats(&[-1.0, 1.0], 0.95).unwrap().cv, None);
    }

    #[test]
    fn sample_size_formula() {
        // Jain Example 13.? : x̄ = 20, s = 5, ±1 % at 95 % → n = (100·1.96·5/(1·20))² = 2401.
        assert_eq!(sample_size(20.0, 5.0, 1.0, 0.95).unwrap(), 2401);
        // 99 %: z = 2.576 → (100·2.576·5/(5·20))² = 165.9 → 166.
        assert_eq!(sample_size(20.0, 5.0, 5.0, 0.99).unwrap(), 166);
        assert_eq!(sample_size(20.0, 0.0, 5.0, 0.99).unwrap(), 0);
        assert!(sample_size(0.0, 5.0, 5.0, 0.99).is_err());
        assert!(sample_size(20.0, 5.0, 0.0, 0.99).is_err());
        assert!(sample_size(20.0, 5.0, 5.0, 1.0).is_err());
    }
}
