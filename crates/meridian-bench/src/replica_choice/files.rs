//! The study's files: CSVs of the runs, time series and copies, and the plots, written under
//! one output directory.

use super::{
    F_SWEEP, KeyDist, LAMBDA_MAIN, LAMBDAS, PAPER_STRATEGIES, RunResult, SERVICE_US,
    SWEEP_STRATEGIES, StudyResults, copies_word, dist_name, find, summary_markdown, variant_label,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use meridian_replication::{ServiceModel, Strategy};

use crate::BenchError;
use crate::output::write_file;
use crate::plot::{CdfSeries, XyAxes, XySeries, latency_cdf, xy_lines};

fn part_runs(res: &StudyResults) -> Vec<(&'static str, &RunResult)> {
    let mut v: Vec<(&'static str, &RunResult)> = Vec::new();
    v.extend(res.dynamic.iter().map(|r| ("dynamic", r)));
    v.extend(res.baselines.iter().map(|r| ("baselines", r)));
    v.extend(res.capacity.iter().map(|r| ("capacity", r)));
    v.extend(res.fsweep.iter().map(|r| ("fsweep", r)));
    v.extend(res.hetero.iter().map(|r| ("hetero", r)));
    v.extend(res.dynamic_exp.iter().map(|r| ("dynamic_exp", r)));
    v.extend(res.fsweep_exp.iter().map(|r| ("fsweep_exp", r)));
    v.extend(res.dynamic_cancel.iter().map(|r| ("dynamic_cancel", r)));
    v.extend(res.fsweep_cancel.iter().map(|r| ("fsweep_cancel", r)));
    v
}

fn service_name(m: ServiceModel) -> String {
    match m {
        ServiceModel::Real => "real".into(),
        ServiceModel::Fixed { us } => format!("fixed:{}", us as f64 / 1e3),
        ServiceModel::Exp { mean_us } => format!("exp:{}", mean_us as f64 / 1e3),
    }
}

fn csv_num(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else {
        format!("{v:.4}")
    }
}

/// One row per run.
pub fn runs_csv(res: &StudyResults) -> String {
    let mut s = String::from(
        "part,label,strategy,extra_copies,claim,service,lambda,f,phases,requests,completed,failed,unfinished,mean_s,p50_ms,p99_ms,p999_ms,max_ms,phase_means_s,makespan_s,arrivals_end_s,throughput,duplicate_services,cancelled,extra_reads,extra_misses,c3_overloads,copy_create_ms_p50,copy_create_ms_max\n",
    );
    for (part, r) in part_runs(res) {
        let sc = &r.scenario;
        let phases: Vec<String> = sc.phases.iter().map(|d| d.short()).collect();
        let means: Vec<String> = (0..sc.phases.len())
            .map(|p| csv_num(r.phase_mean_s(p)))
            .collect();
        let _ = writeln!(
            s,
            "{part},\"{}\",{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            sc.label,
            sc.strategy.name(),
            sc.extra_copies,
            sc.claim,
            service_name(sc.service),
            sc.lambda().map_or(String::new(), |l| l.to_string()),
            sc.f,
            phases.join("-"),
            sc.requests,
            r.completed,
            r.failed,
            r.unfinished,
            csv_num(r.mean_s()),
            csv_num(r.q_ms(0.5)),
            csv_num(r.q_ms(0.99)),
            csv_num(r.q_ms(0.999)),
            csv_num(r.q_ms(1.0)),
            means.join(";"),
            csv_num(r.makespan_s),
            csv_num(r.arrivals_end_s),
            csv_num(r.throughput()),
            r.duplicate_services,
            r.cancelled,
            r.extra_reads,
            r.extra_misses,
            r.c3_overloads,
            csv_num(r.copy_ms_q(0.5)),
            csv_num(r.copy_ms_q(1.0)),
        );
    }
    s
}

/// Per second of every dynamic and baseline run.
pub fn timeseries_csv(res: &StudyResults) -> String {
    let mut s = String::from(
        "strategy,extra_copies,lambda,second,issued,mean_latency_ms,max_latency_ms,completed,copies_listed\n",
    );
    for r in res.dynamic.iter().chain(res.baselines.iter()) {
        for (t, b) in r.bins.iter().enumerate() {
            let _ = writeln!(
                s,
                "{},{},{},{t},{},{:.1},{:.1},{},{}",
                r.scenario.strategy.name(),
                r.scenario.extra_copies,
                r.scenario.lambda().unwrap_or(0.0),
                b.issued,
                b.mean_ms,
                b.max_ms,
                b.completed,
                b.copies
            );
        }
    }
    s
}

/// Per Zipf phase of every run with copies.
pub fn copies_csv(res: &StudyResults) -> String {
    let mut s = String::from(
        "strategy,lambda,phase,top_object,first_usable_s,all_coordinators_s,peak_copies,peak90_s\n",
    );
    let o = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
    for r in res.dynamic.iter().chain(res.baselines.iter()) {
        for c in &r.copies {
            if !r.scenario.extra_copies {
                continue;
            }
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{}",
                r.scenario.strategy.name(),
                r.scenario.lambda().unwrap_or(0.0),
                c.phase,
                c.top,
                o(c.first_s),
                o(c.all_s),
                c.peak,
                o(c.peak90_s)
            );
        }
    }
    s
}

fn latency_series(r: &RunResult, label: String) -> XySeries {
    XySeries {
        label,
        points: r
            .bins
            .iter()
            .enumerate()
            .filter(|(_, b)| b.issued > 0 && b.mean_ms > 0.0)
            .map(|(t, b)| (t as f64 + 0.5, b.mean_ms))
            .collect(),
    }
}

fn throughput_series(r: &RunResult, label: String) -> XySeries {
    XySeries {
        label,
        points: r
            .bins
            .iter()
            .enumerate()
            .map(|(t, b)| (t as f64 + 0.5, b.completed as f64))
            .collect(),
    }
}

/// Writes `summary.md`, the CSVs and the plots into `out`; returns the summary's path.
pub fn write_results(res: &StudyResults, out: &Path) -> Result<PathBuf, BenchError> {
    write_file(&out.join("runs.csv"), runs_csv(res).as_bytes())?;
    write_file(&out.join("timeseries.csv"), timeseries_csv(res).as_bytes())?;
    write_file(&out.join("copies.csv"), copies_csv(res).as_bytes())?;
    let summary = out.join("summary.md");
    write_file(&summary, summary_markdown(res).as_bytes())?;
    let markers = |r: &RunResult| {
        r.phase_starts_s
            .iter()
            .skip(1)
            .copied()
            .collect::<Vec<f64>>()
    };
    // Fig. 1: one figure per λ, every paper variant.
    for &l in &LAMBDAS {
        let mut series = Vec::new();
        let mut marks = Vec::new();
        for st in PAPER_STRATEGIES {
            for copies in [false, true] {
                if let Some(r) = find(&res.dynamic, st, copies, l) {
                    marks = markers(r);
                    series.push(latency_series(r, variant_label(st, copies)));
                }
            }
        }
        xy_lines(
            &out.join(format!("fig1_latency_lambda{l}")),
            &XyAxes {
                title: format!("Latency over time, λ = {l} req/s (cf. Fig. 1); phases U Z U Z U"),
                x_desc: "time of the request's arrival (s)".into(),
                y_desc: "mean latency of the second's requests (ms, log)".into(),
                log_y: true,
                markers: marks,
            },
            &series,
        )?;
    }
    // Fig. 2: throughput at 256, with and without copies.
    for copies in [true, false] {
        let mut series = Vec::new();
        let mut marks = Vec::new();
        for st in PAPER_STRATEGIES {
            if let Some(r) = find(&res.dynamic, st, copies, LAMBDA_MAIN) {
                marks = markers(r);
                series.push(throughput_series(r, variant_label(st, copies)));
            }
        }
        xy_lines(
            &out.join(format!(
                "fig2_throughput_lambda{LAMBDA_MAIN}_{}",
                if copies { "copies" } else { "nocopies" }
            )),
            &XyAxes {
                title: format!(
                    "Throughput, λ = {LAMBDA_MAIN} req/s, {} (cf. Fig. 2)",
                    copies_word(copies)
                ),
                x_desc: "time (s)".into(),
                y_desc: "reads completed per second".into(),
                log_y: false,
                markers: marks,
            },
            &series,
        )?;
    }
    // Baselines.
    for copies in [false, true] {
        let mut series = Vec::new();
        let mut marks = Vec::new();
        let runs = res.baselines.iter().chain(find(
            &res.dynamic,
            Strategy::DynamicSnitch,
            copies,
            LAMBDA_MAIN,
        ));
        for r in runs.filter(|r| r.scenario.extra_copies == copies) {
            marks = markers(r);
            series.push(latency_series(
                r,
                variant_label(r.scenario.strategy, copies),
            ));
        }
        xy_lines(
            &out.join(format!(
                "baselines_latency_lambda{LAMBDA_MAIN}_{}",
                if copies { "copies" } else { "nocopies" }
            )),
            &XyAxes {
                title: format!(
                    "Baselines, latency over time, λ = {LAMBDA_MAIN}, {}",
                    copies_word(copies)
                ),
                x_desc: "time of the request's arrival (s)".into(),
                y_desc: "mean latency of the second's requests (ms, log)".into(),
                log_y: true,
                markers: marks,
            },
            &series,
        )?;
    }
    // f sweep.
    for dist in [KeyDist::Partition, KeyDist::Zipf(1.0)] {
        let mut series = Vec::new();
        for (runs, suffix) in [(&res.fsweep, ", fixed:30"), (&res.fsweep_exp, ", exp:30")] {
            for st in SWEEP_STRATEGIES {
                series.push(XySeries {
                    label: format!("{}{suffix}", st.name()),
                    points: runs
                        .iter()
                        .filter(|r| {
                            r.scenario.strategy == st && r.scenario.phases.first() == Some(&dist)
                        })
                        .map(|r| (f64::from(r.scenario.f), r.makespan_s))
                        .collect(),
                });
            }
        }
        if dist == KeyDist::Partition {
            series.push(XySeries {
                label: "ideal R·30 ms / f".into(),
                points: F_SWEEP
                    .iter()
                    .map(|&f| {
                        (
                            f64::from(f),
                            res.options.batch_requests as f64 * SERVICE_US as f64
                                / 1e6
                                / f64::from(f),
                        )
                    })
                    .collect(),
            });
        }
        xy_lines(
            &out.join(format!("fsweep_{}", dist_name(dist).replace(' ', "_"))),
            &XyAxes {
                title: format!(
                    "Batch completion time vs f, {} ({} requests)",
                    dist_name(dist),
                    res.options.batch_requests
                ),
                x_desc: "replication factor f".into(),
                y_desc: "completion time (s, log)".into(),
                log_y: true,
                markers: Vec::new(),
            },
            &series,
        )?;
    }
    // Heterogeneous: CDFs with the slow node.
    let cdfs: Vec<CdfSeries<'_>> = res
        .hetero
        .iter()
        .filter(|r| r.scenario.slow.is_some())
        .map(|r| CdfSeries {
            label: r.scenario.strategy.name().into(),
            histogram: &r.latency,
        })
        .collect();
    latency_cdf(
        &out.join("hetero_cdf"),
        "Latency CDF, one node 3× slower (exp:30, f = 3, λ = 512)",
        &cdfs,
    )?;
    Ok(summary)
}
