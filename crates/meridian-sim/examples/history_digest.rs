//! Writes the full outputs of a few seeded runs of every scenario (history JSON lines, timeline
//! logs, report) to a directory, so two builds can be compared byte for byte:
//! `cargo run --release -p meridian-sim --example history_digest -- DIR [SECONDS] [SEEDS]`.

use meridian_sim::scenario::{run, scenarios};
use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("an output directory"));
    let secs: u64 = args.next().map_or(20, |s| s.parse().expect("seconds"));
    let seeds: u64 = args.next().map_or(2, |s| s.parse().expect("seeds"));
    std::fs::create_dir_all(&dir).expect("the output directory");
    for mut s in scenarios() {
        if s.name == "perf" {
            continue;
        }
        s.duration = s.duration.min(Duration::from_secs(secs));
        for seed in 1..=seeds {
            let r = run(&s, seed);
            let stem = dir.join(format!("{}-{seed}", s.name));
            let mut hist = Vec::new();
            r.history.save(&mut hist).expect("history");
            std::fs::write(stem.with_extension("history.jsonl"), hist).expect("write");
            if let Some(tl) = &r.timeline {
                std::fs::write(stem.with_extension("timeline.txt"), tl.dump()).expect("write");
            }
            std::fs::write(
                stem.with_extension("report.txt"),
                format!("{r}\nmessages {}\n", r.messages),
            )
            .expect("write");
            println!(
                "{} seed {seed}: passed={} messages={}",
                s.name, r.passed, r.messages
            );
        }
    }
}
