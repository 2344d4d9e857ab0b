//! `summary.md` of a design (spec §7): the design, per-run results with their seeds, per-cell
//! means ± 95 % CIs, the allocation-of-variation table in the geo study's layout (one row
//! per response, one column per effect, columns below 1 % suppressed and named), the CVs,
//! and the plots. The output depends only on its inputs (ordered maps, fixed precision).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{Design, DesignAnalysis, RunRecord};
use crate::BenchError;
use crate::output::write_file;
use crate::stats::Scope;

/// Effect columns whose fraction is below this for every response are suppressed.
pub const SUPPRESS_BELOW: f64 = 0.01;

/// Draws a design's plots into a directory from its records and returns the image paths.
pub type PlotFn<'a> = dyn Fn(&Path, &[RunRecord]) -> Result<Vec<PathBuf>, BenchError> + 'a;

/// Writes `dir/summary.md` (atomically) and returns its path. `plots(dir, records)` draws the
/// plots and returns their paths, which are embedded as Markdown images relative to `dir`.
///
/// # Errors
/// The error of `plots`, or [`BenchError::Io`] if the file cannot be written.
pub fn write_report(
    design: &Design,
    records: &[RunRecord],
    analysis: &DesignAnalysis,
    dir: &Path,
    plots: &PlotFn<'_>,
) -> Result<PathBuf, BenchError> {
    let images = plots(dir, records)?;
    let text = render_summary(design, records, analysis, dir, &images);
    let path = dir.join("summary.md");
    write_file(&path, text.as_bytes())?;
    Ok(path)
}

/// Decimals that show `x` with at least 3 significant digits (1 for large values).
/// Confidence of the accuracy the report gives for each mean (spec §3).
const ACCURACY_CONFIDENCE: f64 = 0.99;

fn decimals(x: f64) -> usize {
    let a = x.abs();
    if !a.is_finite() || a >= 100.0 || a == 0.0 {
        1
    } else {
        // 10 ≤ a < 100 → 2, 1 ≤ a < 10 → 3, 0.1 ≤ a < 1 → 4, ...
        (3.0 - a.log10().floor()).clamp(1.0, 12.0) as usize
    }
}

/// A number with precision suited to its magnitude.
fn num(x: f64) -> String {
    format!("{x:.*}", decimals(x))
}

fn pct(x: f64) -> String {
    format!("{:.1}", x * 100.0)
}

fn cell_text(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A cell's factor levels as table cells, in factor order.
fn level_cells(cell: &super::Cell) -> Vec<String> {
    cell.levels
        .iter()
        .map(|(_, l)| cell_text(&l.to_string()))
        .collect()
}

fn table_header(out: &mut String, columns: &[String], right_from: usize) {
    let _ = writeln!(out, "| {} |", columns.join(" | "));
    let aligns: Vec<&str> = (0..columns.len())
        .map(|i| if i >= right_from { "---:" } else { "---" })
        .collect();
    let _ = writeln!(out, "|{}|", aligns.join("|"));
}

fn row(out: &mut String, cells: &[String]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

fn ms(us: u64) -> String {
    num(us as f64 / 1e3)
}

/// Renders `summary.md` (see the module header); image paths are made relative to `dir`.
pub fn render_summary(
    design: &Design,
    records: &[RunRecord],
    analysis: &DesignAnalysis,
    dir: &Path,
    images: &[PathBuf],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Experiment `{}`\n", design.display_name());

    // --- Design.
    let runners: BTreeSet<&str> = records.iter().map(|r| r.outcome.runner.as_str()).collect();
    let _ = writeln!(out, "## Design\n");
    let _ = writeln!(
        out,
        "- kind: {}; {} cells × {} replication(s) = {} runs; run order seed {}",
        design.kind.as_str(),
        design.cells().len(),
        design.replications,
        design.cells().len() * design.replications,
        design.order_seed
    );
    let _ = writeln!(
        out,
        "- runner: {}",
        if runners.is_empty() {
            "none (no run finished)".to_string()
        } else {
            runners.into_iter().collect::<Vec<_>>().join(", ")
        }
    );
    let _ = writeln!(
        out,
        "- runs finished: {} of {}\n",
        records.len(),
        design.cells().len() * design.replications
    );
    table_header(&mut out, &["factor".into(), "levels".into()], 2);
    for f in &design.factors {
        let levels: Vec<String> = f.levels.iter().map(|l| format!("`{l}`")).collect();
        row(
            &mut out,
            &[cell_text(&f.name), cell_text(&levels.join(", "))],
        );
    }
    out.push('\n');
    if !design.fixed.is_empty() {
        table_header(&mut out, &["fixed".into(), "value".into()], 2);
        for (k, v) in &design.fixed {
            row(
                &mut out,
                &[cell_text(k), format!("`{}`", cell_text(&v.to_string()))],
            );
        }
        out.push('\n');
    }
    let mut settings = toml::Table::new();
    for (key, table) in [
        ("load", &design.load),
        ("phases", &design.phases),
        ("wan", &design.wan),
    ] {
        if !table.is_empty() {
            settings.insert(key.to_string(), toml::Value::Table(table.clone()));
        }
    }
    if !settings.is_empty() {
        let _ = writeln!(
            out,
            "```toml\n{}```\n",
            toml::to_string(&settings).unwrap_or_default()
        );
    }

    if !analysis.missing.is_empty() {
        let _ = writeln!(out, "**Missing runs** ({}):\n", analysis.missing.len());
        for m in &analysis.missing {
            let _ = writeln!(out, "- `{m}`");
        }
        out.push('\n');
    }
    for note in &analysis.notes {
        let _ = writeln!(out, "> {note}\n");
    }

    // --- Per run.
    let mut sorted: Vec<&RunRecord> = records.iter().collect();
    sorted.sort_by_key(|r| (r.run.cell.index, r.run.replication));
    let ops: BTreeSet<&str> = records
        .iter()
        .flat_map(|r| r.outcome.report.ops())
        .collect();
    let _ = writeln!(out, "## Runs\n");
    let _ = writeln!(
        out,
        "Latencies in ms (total p50 / p90 / p99 / p99.9; local and remote p50 / p99); throughput in ops/s.\n"
    );
    let mut columns: Vec<String> = design.factors.iter().map(|f| cell_text(&f.name)).collect();
    columns.push("runner".into());
    let first_numeric = columns.len();
    columns.extend(["rep", "seed", "elapsed s", "throughput"].map(String::from));
    for op in &ops {
        let op = cell_text(op);
        for c in [
            "p50",
            "p90",
            "p99",
            "p99.9",
            "local p50",
            "local p99",
            "remote p50",
            "remote p99",
            "errors",
        ] {
            columns.push(format!("{op} {c}"));
        }
    }
    table_header(&mut out, &columns, first_numeric);
    for r in &sorted {
        let mut cells: Vec<String> = level_cells(&r.run.cell);
        cells.push(cell_text(&r.outcome.runner));
        cells.push(r.run.replication.to_string());
        cells.push(r.run.seed.to_string());
        cells.push(num(r.outcome.elapsed_s));
        cells.push(num(r.outcome.mean_throughput));
        for op in &ops {
            match r.outcome.report.summary(op, Scope::Total) {
                Some(t) => {
                    cells.extend([ms(t.p50_us), ms(t.p90_us), ms(t.p99_us), ms(t.p99_9_us)]);
                }
                None => cells.extend(std::iter::repeat_n("—".to_string(), 4)),
            }
            for scope in [Scope::Local, Scope::Remote] {
                match r.outcome.report.summary(op, scope).filter(|s| s.count > 0) {
                    Some(s) => cells.extend([ms(s.p50_us), ms(s.p99_us)]),
                    None => cells.extend(std::iter::repeat_n("—".to_string(), 2)),
                }
            }
            cells.push(
                r.outcome
                    .report
                    .summary(op, Scope::Total)
                    .map_or("—".to_string(), |t| t.errors.to_string()),
            );
        }
        row(&mut out, &cells);
    }
    out.push('\n');

    // --- Protocol counters.
    let counters: BTreeSet<&str> = records
        .iter()
        .flat_map(|r| r.outcome.counters.keys().map(String::as_str))
        .collect();
    if !counters.is_empty() {
        let _ = writeln!(out, "### Protocol counters\n");
        let mut columns: Vec<String> = design.factors.iter().map(|f| cell_text(&f.name)).collect();
        let first_numeric = columns.len();
        columns.push("rep".into());
        columns.extend(counters.iter().map(|c| cell_text(c)));
        table_header(&mut out, &columns, first_numeric);
        for r in &sorted {
            let mut cells: Vec<String> = level_cells(&r.run.cell);
            cells.push(r.run.replication.to_string());
            cells.extend(counters.iter().map(|c| {
                r.outcome
                    .counters
                    .get(*c)
                    .map_or("—".to_string(), |v| num(*v))
            }));
            row(&mut out, &cells);
        }
        out.push('\n');
    }

    // --- Per cell.
    let _ = writeln!(out, "## Cells\n");
    let _ = writeln!(
        out,
        "Mean ± 95 % t-CI half-width over replications (CV across replications in %); latencies in ms.\n"
    );
    let cells_of_design = design.cells();
    let mut columns: Vec<String> = design.factors.iter().map(|f| cell_text(&f.name)).collect();
    let first_numeric = columns.len();
    columns.push("n".into());
    columns.extend(analysis.responses.iter().map(|r| cell_text(r)));
    table_header(&mut out, &columns, first_numeric);
    for cs in &analysis.cells {
        let mut cells: Vec<String> = level_cells(&cells_of_design[cs.cell]);
        cells.push(
            cs.responses
                .iter()
                .map(|r| r.n)
                .max()
                .unwrap_or(0)
                .to_string(),
        );
        for r in &cs.responses {
            cells.push(match (r.mean, r.half_width) {
                (None, _) => "—".to_string(),
                (Some(m), None) => num(m),
                // The half-width at the mean's precision, so the two read together.
                (Some(m), Some(h)) => format!(
                    "{} ± {:.*}{}",
                    num(m),
                    decimals(m),
                    h,
                    r.cv.map_or(String::new(), |cv| format!(" ({} %)", pct(cv)))
                ),
            });
        }
        row(&mut out, &cells);
    }
    out.push('\n');

    // --- Allocation of variation.
    if !analysis.allocation.is_empty() {
        let _ = writeln!(out, "## Allocation of variation\n");
        let _ = writeln!(
            out,
            "Percentage of the variation of each response explained by each effect.\n"
        );
        let effects = &analysis.allocation[0].allocation.effects;
        let shown: Vec<usize> = (0..effects.len())
            .filter(|&i| {
                analysis
                    .allocation
                    .iter()
                    .any(|row| row.allocation.fractions[i] >= SUPPRESS_BELOW)
            })
            .collect();
        let mut columns = vec!["response".to_string()];
        columns.extend(shown.iter().map(|&i| cell_text(&effects[i])));
        columns.push("error".into());
        table_header(&mut out, &columns, 1);
        for arow in &analysis.allocation {
            let mut cells = vec![cell_text(&arow.response)];
            cells.extend(shown.iter().map(|&i| pct(arow.allocation.fractions[i])));
            cells.push(pct(arow.allocation.error_fraction));
            row(&mut out, &cells);
        }
        let hidden: Vec<&str> = (0..effects.len())
            .filter(|i| !shown.contains(i))
            .map(|i| effects[i].as_str())
            .collect();
        if !hidden.is_empty() {
            let _ = writeln!(
                out,
                "\nNot shown, explaining less than {} % of the variation of every response: {}.",
                pct(SUPPRESS_BELOW),
                hidden.join(", ")
            );
        }
        out.push('\n');
    }
    if !analysis.two_k.is_empty() {
        let _ = writeln!(out, "### 2^k·r effects\n");
        for (name, a) in &analysis.two_k {
            let _ = writeln!(out, "#### {}\n", cell_text(name));
            let _ = writeln!(out, "{}", a.allocation_markdown(SUPPRESS_BELOW));
        }
    }

    // --- CVs.
    let _ = writeln!(out, "## Coefficients of variation\n");
    table_header(
        &mut out,
        &[
            "response".into(),
            "CV across cells %".into(),
            "mean CV across replications %".into(),
        ],
        1,
    );
    for (j, name) in analysis.responses.iter().enumerate() {
        let show = |x: Option<f64>| x.map_or("—".to_string(), pct);
        row(
            &mut out,
            &[
                cell_text(name),
                show(analysis.cv_across_cells[j]),
                show(analysis.mean_cv_replications[j]),
            ],
        );
    }
    out.push('\n');

    // --- Accuracy of the means (spec §3: 99 % confidence, 1 % accuracy; 2 % for lt_rec).
    let accuracy: Vec<(String, Vec<String>)> = sorted
        .iter()
        .map(|r| {
            let cells = ops
                .iter()
                .map(|op| {
                    r.outcome
                        .report
                        .summary(op, Scope::Total)
                        .and_then(|s| s.mean_accuracy_pct(ACCURACY_CONFIDENCE))
                        .map_or("—".to_string(), |a| format!("±{a:.2}"))
                })
                .collect();
            (r.run.label(), cells)
        })
        .collect();
    if accuracy.iter().any(|(_, c)| c.iter().any(|v| v != "—")) {
        let _ = writeln!(
            out,
            "## Accuracy of the mean latencies
"
        );
        let _ = writeln!(
            out,
            "Half-width of each run's 99 % confidence interval of the mean, in % of the mean \
             (`100·z·s / (x̄·√n)`; the geo study aimed at 1 %, 2 % for lt_rec).\n"
        );
        let mut columns = vec!["run".to_string()];
        columns.extend(ops.iter().map(|op| format!("{op} mean ± %")));
        table_header(&mut out, &columns, 1);
        for (label, cells) in accuracy {
            let mut line = vec![cell_text(&label)];
            line.extend(cells);
            row(&mut out, &line);
        }
        out.push('\n');
    }

    // --- Plots.
    if !images.is_empty() {
        let _ = writeln!(out, "## Plots\n");
        for image in images {
            let rel = image.strip_prefix(dir).unwrap_or(image);
            let rel: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let rel = rel.join("/");
            let title = image
                .file_stem()
                .map_or(rel.clone(), |s| s.to_string_lossy().into_owned());
            let _ = writeln!(out, "![{title}]({})\n", rel.replace(' ', "%20"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::run::tests::Fake;
    use crate::experiment::{analyze_design, run_design};

    #[test]
    fn summary_has_every_section() {
        let dir = tempfile::tempdir().unwrap();
        let design = Design::parse(
            "name = \"screen\"\ndesign = { kind = \"full_factorial\", replications = 2, order_seed = 5 }\nfactors = { mode = [\"ind1\", \"lt_rec\", \"ind2\"], wan_rtt_ms = [0, 200] }\nfixed = { nodes = 6 }\nload = { threads = 32 }\nresponses = [\"throughput\", \"read.local.p50\"]\n",
        )
        .unwrap();
        let mut exec = Fake {
            calls: 0,
            fail: vec![],
        };
        let out = run_design(&design, dir.path(), &mut exec, &mut |_| {}).unwrap();
        let analysis = analyze_design(&design, &out.records).unwrap();
        let plots = |d: &Path, _: &[RunRecord]| -> Result<Vec<PathBuf>, BenchError> {
            Ok(vec![d.join("plots").join("box plot.svg")])
        };
        let path = write_report(&design, &out.records, &analysis, dir.path(), &plots).unwrap();
        assert_eq!(path, dir.path().join("summary.md"));
        let md = std::fs::read_to_string(&path).unwrap();
        assert!(md.starts_with("# Experiment `screen`"), "{md}");
        assert!(md.contains("| mode | `ind1`, `lt_rec`, `ind2` |"), "{md}");
        assert!(md.contains("| nodes | `6` |"), "{md}");
        assert!(md.contains("[load]\nthreads = 32"), "{md}");
        assert!(md.contains("- runner: virtual"), "{md}");
        // Per-run table: 12 rows, seeds listed.
        let seed = out.records[0].run.seed.to_string();
        assert!(
            md.contains(&format!(
                "| ind1 | 0 | virtual | 0 | {seed} | 1.500 | 500.0 |"
            )),
            "{md}"
        );
        assert!(md.contains("read p99.9"), "{md}");
        assert!(md.contains("update remote p99"), "{md}");
        assert!(md.contains("| 0 | 0 | 3.000 |"), "{md}");
        assert!(md.contains("| 1.048 ± 0.006 (0.1 %) |"), "{md}");
        // Allocation table: both responses are additive in the cell index (mode-major), so
        // the interaction explains nothing and its column is suppressed.
        assert!(md.contains("## Allocation of variation"), "{md}");
        assert!(md.contains("| response | mode | wan_rtt_ms |"), "{md}");
        assert!(md.contains("Not shown, explaining less than 1.0 % of the variation of every response: mode·wan_rtt_ms."), "{md}");
        assert!(md.contains("## Coefficients of variation"), "{md}");
        assert!(md.contains("![box plot](plots/box%20plot.svg)"), "{md}");
        // Deterministic.
        let again = render_summary(
            &design,
            &out.records,
            &analysis,
            dir.path(),
            &plots(dir.path(), &[]).unwrap(),
        );
        assert_eq!(again, md);

        // A partial design: no allocation, the missing run named.
        let partial: Vec<RunRecord> = out.records[1..].to_vec();
        let analysis = analyze_design(&design, &partial).unwrap();
        let md = render_summary(&design, &partial, &analysis, dir.path(), &[]);
        assert!(!md.contains("## Allocation of variation"), "{md}");
        assert!(
            md.contains("**Missing runs** (1):\n\n- `mode=ind1_wan_rtt_ms=0 #0`"),
            "{md}"
        );
    }

    #[test]
    fn two_level_designs_show_effects() {
        let dir = tempfile::tempdir().unwrap();
        let design = Design::parse(
            "design = { kind = \"two_k\", replications = 2 }\nfactors = { a = [1, 2], b = [1, 2] }\n",
        )
        .unwrap()
        .with_default_name("tk");
        let mut exec = Fake {
            calls: 0,
            fail: vec![],
        };
        let out = run_design(&design, dir.path(), &mut exec, &mut |_| {}).unwrap();
        let analysis = analyze_design(&design, &out.records).unwrap();
        let md = render_summary(&design, &out.records, &analysis, dir.path(), &[]);
        assert!(md.contains("### 2^k·r effects"), "{md}");
        assert!(md.contains("#### throughput"), "{md}");
        assert!(
            md.contains("| effect | q | % of variation | 95 % CI |"),
            "{md}"
        );
    }
}
