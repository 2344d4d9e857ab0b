//! What benchmark runs leave on disk (spec `experiments.md` §7): the report as JSON and
//! CSV, the run's settings, and the plots, for one run ([`write_run`]), several runs compared
//! side by side ([`write_comparison`], e.g. one per mode), or a design's runs
//! ([`design_plots`], the geo study's box plots).
//!
//! Guarantees: every file is written whole or not at all (temp file, then rename); plots are
//! PNG and SVG; the same results give byte-identical files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::BenchError;
use crate::experiment::RunRecord;
use crate::plot::{self, BoxFacet, BoxSpec, CdfSeries, ThroughputSeries};
use crate::runner::RunResult;
use crate::stats::{Report, Scope, Summary};

/// Writes `contents` to `path` whole or not at all, creating its directory: a temporary
/// sibling, synced, then renamed into place, so a crash leaves the old file or the new one
/// (and a result file that exists is complete: resuming an experiment relies on it).
pub fn write_file(path: &Path, contents: &[u8]) -> Result<(), BenchError> {
    use std::io::Write as _;
    let io = |p: &Path, what: &str, e: std::io::Error| BenchError::Io {
        path: p.display().to_string(),
        reason: format!("{what}: {e}; check the directory is writable and the disk has room"),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, "cannot create the directory", e))?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let mut file = std::fs::File::create(&tmp).map_err(|e| io(&tmp, "cannot create", e))?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(|e| io(&tmp, "cannot write", e))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| io(path, "cannot rename the temporary file into place", e))
}

/// Every op name of `reports`, sorted, once.
fn ops_of<'a>(reports: impl Iterator<Item = &'a Report>) -> Vec<String> {
    let ops: std::collections::BTreeSet<&str> = reports.flat_map(Report::ops).collect();
    ops.into_iter().map(str::to_owned).collect()
}

/// The box of one summary: its percentile vector, or "no data" when it has no sample.
fn box_of(label: &str, s: Option<&Summary>) -> BoxSpec {
    BoxSpec {
        label: label.to_owned(),
        percentiles_us: s
            .filter(|s| s.count > 0)
            .map(|s| s.percentiles_us.clone())
            .unwrap_or_default(),
    }
}

/// Writes one run: `report.json`, `report.csv`, `histograms.hlog` (the HdrHistogram interval
/// log), `settings.json`, and the plots `cdf`
/// (every op, local and remote), `boxes` (one facet per op: total, local, remote) and
/// `throughput`. Returns every path written.
pub fn write_run(
    dir: &Path,
    title: &str,
    result: &RunResult,
    settings: &serde_json::Value,
) -> Result<Vec<PathBuf>, BenchError> {
    let mut written = Vec::new();
    let mut put = |name: &str, bytes: &[u8]| -> Result<(), BenchError> {
        let p = dir.join(name);
        write_file(&p, bytes)?;
        written.push(p);
        Ok(())
    };
    put("report.json", result.report.to_json().as_bytes())?;
    put("report.csv", result.report.to_csv().as_bytes())?;
    put(
        "histograms.hlog",
        &result.recorder.interval_log(result.measured)?,
    )?;
    let settings = serde_json::to_string_pretty(settings).unwrap_or_default();
    put("settings.json", settings.as_bytes())?;
    written.extend(write_comparison(dir, title, &[(String::new(), result)])?);
    Ok(written)
}

/// Plots several runs side by side (labels such as mode names): `cdf` (each run × op ×
/// local/remote), `boxes` (facets op × local/remote, one box per run) and `throughput`.
/// With one run and an empty label, the boxes are total / local / remote per op.
pub fn write_comparison(
    dir: &Path,
    title: &str,
    runs: &[(String, &RunResult)],
) -> Result<Vec<PathBuf>, BenchError> {
    let all_ops = ops_of(runs.iter().map(|(_, r)| &r.report));
    let join = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_owned()
        } else {
            format!("{a} {b}")
        }
    };

    let histograms: Vec<(String, hdrhistogram::Histogram<u64>)> = runs
        .iter()
        .flat_map(|(label, r)| {
            all_ops.iter().flat_map(move |op| {
                [Scope::Local, Scope::Remote]
                    .into_iter()
                    .filter_map(move |scope| {
                        let h = r.recorder.histogram(op, scope);
                        (!h.is_empty())
                            .then(|| (join(label, &format!("{op} {}", scope.as_str())), h))
                    })
            })
        })
        .collect();
    let series: Vec<CdfSeries<'_>> = histograms
        .iter()
        .map(|(label, h)| CdfSeries {
            label: label.clone(),
            histogram: h,
        })
        .collect();
    let mut written =
        plot::latency_cdf(&dir.join("cdf"), &format!("{title}: latency CDF"), &series)?;

    let single = runs.len() == 1 && runs[0].0.is_empty();
    let facets: Vec<BoxFacet> = if single {
        let report = &runs[0].1.report;
        all_ops
            .iter()
            .map(|op| BoxFacet {
                title: op.clone(),
                boxes: [Scope::Total, Scope::Local, Scope::Remote]
                    .into_iter()
                    .map(|s| box_of(s.as_str(), report.summary(op, s)))
                    .collect(),
            })
            .collect()
    } else {
        all_ops
            .iter()
            .flat_map(|op| {
                [Scope::Local, Scope::Remote]
                    .into_iter()
                    .map(move |scope| BoxFacet {
                        title: format!("{op} · {}", scope.as_str()),
                        boxes: runs
                            .iter()
                            .map(|(label, r)| box_of(label, r.report.summary(op, scope)))
                            .collect(),
                    })
            })
            .collect()
    };
    written.extend(plot::box_plots(
        &dir.join("boxes"),
        &format!("{title}: latency percentiles (whiskers p1, p99)"),
        &facets,
        true,
    )?);

    let tput: Vec<ThroughputSeries> = runs
        .iter()
        .map(|(label, r)| ThroughputSeries {
            label: if label.is_empty() {
                "ops/s".into()
            } else {
                label.clone()
            },
            per_second: r.report.throughput_per_s.clone(),
            // The warm-up is not drawn as 0 ops/s, nor the run's last partial second as a drop.
            measured: Some((
                r.warmup_end.as_secs_f64(),
                (r.warmup_end + r.measured).as_secs_f64(),
            )),
        })
        .collect();
    written.extend(plot::throughput_over_time(
        &dir.join("throughput"),
        &format!("{title}: throughput"),
        &tput,
    )?);
    Ok(written)
}

/// A design's box plots, as the geo study drew them: one figure per combination of the
/// factors other than `mode` and `locality`, with one facet per op × locality level and one
/// box per mode (total latencies of each cell's first replication). Without a `mode` factor
/// the boxes are the cells. Returns the paths written under `dir/plots/`.
pub fn design_plots(dir: &Path, records: &[RunRecord]) -> Result<Vec<PathBuf>, BenchError> {
    let first: Vec<&RunRecord> = {
        let mut v: Vec<&RunRecord> = records.iter().filter(|r| r.run.replication == 0).collect();
        v.sort_by_key(|r| r.run.cell.index);
        v
    };
    let level = |r: &RunRecord, f: &str| r.run.cell.level(f).map(|l| l.to_string());
    // Figures: keyed by the other factors' levels, in cell order.
    let mut figures: BTreeMap<(usize, String), Vec<&RunRecord>> = BTreeMap::new();
    let mut order: BTreeMap<String, usize> = BTreeMap::new();
    for r in &first {
        let key: Vec<String> = r
            .run
            .cell
            .levels
            .iter()
            .filter(|(f, _)| f != "mode" && f != "locality")
            .map(|(f, l)| format!("{f}={}", l.token()))
            .collect();
        let key = key.join("_");
        let n = order.len();
        let idx = *order.entry(key.clone()).or_insert(n);
        figures.entry((idx, key)).or_default().push(r);
    }
    let mut written = Vec::new();
    for ((_, key), recs) in figures {
        let all_ops = ops_of(recs.iter().map(|r| &r.outcome.report));
        let mut localities: Vec<Option<String>> = Vec::new();
        for r in &recs {
            let l = level(r, "locality");
            if !localities.contains(&l) {
                localities.push(l);
            }
        }
        let mut facets = Vec::new();
        for op in &all_ops {
            for loc in &localities {
                let boxes = recs
                    .iter()
                    .filter(|r| &level(r, "locality") == loc)
                    .map(|r| {
                        let label = level(r, "mode").unwrap_or_else(|| r.run.cell.name());
                        box_of(&label, r.outcome.report.summary(op, Scope::Total))
                    })
                    .collect();
                let title = match loc {
                    Some(l) => format!("{op} · locality {l}"),
                    None => op.clone(),
                };
                facets.push(BoxFacet { title, boxes });
            }
        }
        let name = if key.is_empty() {
            "boxplots".to_owned()
        } else {
            format!("boxplots_{key}")
        };
        let levels: Vec<String> = recs[0]
            .run
            .cell
            .levels
            .iter()
            .filter(|(f, _)| f != "mode" && f != "locality")
            .map(|(f, l)| format!("{f} = {l}"))
            .collect();
        let title = if levels.is_empty() {
            "latency by mode".to_owned()
        } else {
            format!("latency by mode, {}", levels.join(", "))
        };
        written.extend(plot::box_plots(
            &dir.join("plots").join(name),
            &title,
            &facets,
            true,
        )?);
    }
    Ok(written)
}

/// A Markdown table comparing runs: per op, local and remote p50 / p99 (ms), their counts,
/// and the run's throughput and errors.
pub fn comparison_table(runs: &[(String, &RunResult)]) -> String {
    let all_ops = ops_of(runs.iter().map(|(_, r)| &r.report));
    let ms = |us: u64| us as f64 / 1e3;
    let mut out = String::from(
        "| run | op | local p50 | local p99 | remote p50 | remote p99 | remote share | ops/s | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (label, r) in runs {
        let errors: u64 = r.report.errors_by_code.values().sum();
        for op in &all_ops {
            let l = r.report.summary(op, Scope::Local);
            let m = r.report.summary(op, Scope::Remote);
            let cell = |s: Option<&Summary>, f: fn(&Summary) -> u64| match s {
                Some(s) if s.count > 0 => format!("{:.2}", ms(f(s))),
                _ => "–".into(),
            };
            let (nl, nr) = (l.map_or(0, |s| s.count), m.map_or(0, |s| s.count));
            let share = if nl + nr == 0 {
                "–".into()
            } else {
                format!("{:.1} %", 100.0 * nr as f64 / (nl + nr) as f64)
            };
            let _ = writeln!(
                out,
                "| {label} | {op} | {} | {} | {} | {} | {share} | {:.0} | {errors} |",
                cell(l, |s| s.p50_us),
                cell(l, |s| s.p99_us),
                cell(m, |s| s.p50_us),
                cell(m, |s| s.p99_us),
                r.mean_throughput,
            );
        }
    }
    out
}
