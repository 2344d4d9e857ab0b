//! Determinism rules clippy cannot see: a `tokio::select!` without `biased;` lets tokio's
//! runtime RNG pick among ready branches, so a run would not replay from its seed. Every crate
//! the simulator runs must bias its selects (clippy.toml in those crates bans the rest: OS
//! time, unseeded randomness, threads, hash-ordered collections).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_select_in_simulated_crates_is_biased() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut unbiased = Vec::new();
    let crates_run = [
        "meridian-replication",
        "meridian-cluster",
        "meridian-core",
        "meridian-net",
        "meridian-sim",
    ];
    for name in crates_run {
        let mut files = Vec::new();
        rust_files(&crates.join(name).join("src"), &mut files);
        files.sort();
        // The TCP transport never runs in simulation (the in-process network does).
        files.retain(|f| !f.ends_with("meridian-net/src/tcp.rs"));
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            for (i, l) in lines.iter().enumerate() {
                let t = l.trim_start();
                if t.starts_with("//") || !t.contains("select! {") {
                    continue;
                }
                if lines.get(i + 1).map(|n| n.trim()) != Some("biased;") {
                    unbiased.push(format!("{}:{}", f.display(), i + 1));
                }
            }
        }
    }
    assert!(
        unbiased.is_empty(),
        "select! without `biased;` (nondeterministic branch choice):\n{}",
        unbiased.join("\n")
    );
}
