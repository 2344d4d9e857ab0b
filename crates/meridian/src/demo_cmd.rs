//! `meridian demo`: the embedded 2-DC cluster, a short mixed workload in each consistency
//! mode (ind1, ind2, lt_qqer, lt_rec), a comparison table of local and remote latencies, and
//! the plots: what consistency costs across a WAN, in under a minute.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use meridian_bench::cell::{self, CellConfig, Clock, WarmupConfig};
use meridian_bench::cluster::{ClusterSpec, Mode};
use meridian_bench::output;
use meridian_bench::runner::{Arrival, RunConfig};
use meridian_bench::workload::CoreWorkload;

use crate::bench_cmd::{Display, MAX_PHASE, duration_arg, host_settings};

/// Arguments of `meridian demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Measured seconds per mode.
    #[arg(long, default_value_t = 6.0)]
    seconds: f64,
    /// Round-trip time between the two DCs, ms.
    #[arg(long, default_value_t = 100.0)]
    wan_rtt_ms: f64,
    /// Keys (half homed in each DC).
    #[arg(long, default_value_t = 500)]
    keys: u64,
    /// Probability that a client accesses a key homed in its own DC.
    #[arg(long, default_value_t = 0.9)]
    locality: f64,
    /// Run on the simulator in virtual time instead of the real-time embedded cluster.
    #[arg(long)]
    r#virtual: bool,
    /// Where the plots and reports go.
    #[arg(long, default_value = "results/demo")]
    out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Runs `meridian demo`.
pub fn run(args: DemoArgs) -> Result<()> {
    let clock = if args.r#virtual {
        Clock::Virtual
    } else {
        Clock::Real
    };
    println!(
        "Meridian demo: 2 DCs x 3 nodes, N = 3, {} ms between DCs, {} keys, locality {}, \
         2:1 reads:writes, 32 clients at 15 ops/s each, {} s per mode ({} time)",
        args.wan_rtt_ms,
        args.keys,
        args.locality,
        args.seconds,
        clock.as_str()
    );
    let workload = CoreWorkload {
        record_count: args.keys,
        read_proportion: 2.0 / 3.0,
        update_proportion: 1.0 / 3.0,
        field_count: 1,
        field_length: 500,
        locality: Some(args.locality),
        dcs: 2,
        ..CoreWorkload::default()
    };
    let mut results = Vec::new();
    for mode in Mode::ALL {
        let display = Display::new(args.quiet, args.seconds + 1.0);
        display.phase(&format!("{mode}: starting the cluster"));
        let mut run = RunConfig::new(
            Arrival::Paced {
                threads: 32,
                rate_per_thread: 15.0,
            },
            duration_arg("seconds", args.seconds, Duration::from_secs(1), MAX_PHASE)?,
        );
        run.warmup = Duration::from_secs(1);
        let cfg = CellConfig {
            cluster: ClusterSpec {
                mode,
                wan_rtt: duration_arg(
                    "wan-rtt-ms",
                    args.wan_rtt_ms,
                    Duration::from_millis(1),
                    meridian_net::wan::config::MAX_RTT,
                )?,
                ..ClusterSpec::default()
            },
            workload: workload.clone(),
            run,
            load_threads: 64,
            warmup: WarmupConfig {
                max_passes: 6,
                ..WarmupConfig::default()
            },
            clock,
        };
        let r = cell::run_cell(
            &cfg,
            &mut |p| display.phase(&format!("{mode} {p}")),
            &mut |p| display.progress(p),
        )?;
        display.finish();
        let settings = serde_json::json!({
            "host": host_settings(),
            "clock": clock.as_str(),
            "cluster": cfg.cluster,
            "phases": r.phases,
            "counters": r.counters,
        });
        output::write_run(
            &args.out.join(mode.as_str()),
            mode.as_str(),
            &r.run,
            &settings,
        )?;
        eprintln!(
            "{mode}: {:.0} ops/s{}",
            r.run.mean_throughput,
            r.phases
                .home_mastered_after_warmup
                .map(|h| format!(", {:.0} % of keys mastered in their home DC", h * 100.0))
                .unwrap_or_default()
        );
        results.push((mode.as_str().to_owned(), r.run));
    }
    let runs: Vec<(String, &_)> = results.iter().map(|(m, r)| (m.clone(), r)).collect();
    println!();
    print!("{}", output::comparison_table(&runs));
    let written = output::write_comparison(&args.out, "consistency modes", &runs)?;
    println!();
    println!(
        "Latencies in ms. Local ops stay in the client's DC; remote ones cross the WAN \
         ({} ms round trip).",
        args.wan_rtt_ms
    );
    println!(
        "ind1/ind2: eventual, R=1 with W=1/W=2; lt_qqer/lt_rec: timeline, read_any/read_latest."
    );
    println!(
        "Plots: {} (and per mode under {}/<mode>/)",
        written
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "png"))
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        args.out.display()
    );
    Ok(())
}
