#!/usr/bin/env bash
# Fuzzing (see SECURITY.md): builds every cargo-fuzz target under fuzz/ and runs each in turn
# for FUZZ_SECONDS (default 600: the long run); `FUZZ_SECONDS=10 scripts/fuzz.sh` is CI's
# short run. FUZZ_TARGETS="a b" runs only those. One libFuzzer process at a time (the
# machines have two cores). Each target's corpus grows in fuzz/work/<target> (not committed),
# seeded from fuzz/corpus/<target>; a crash is saved under fuzz/artifacts/<target>/ and fails
# the run, after the other targets have run.
#
# cargo-fuzz is installed from crates.io into .tools/ when missing. Its builds pass nightly
# flags (-Zsanitizer, sanitizer-coverage passes): RUSTC_BOOTSTRAP=1 lets the stable toolchain
# take them. No sanitizer (`-s none`): the project forbids unsafe code, so AddressSanitizer
# would only slow the runs down; debug assertions and overflow checks stay on.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${FUZZ_SECONDS:-600}
cargo_fuzz_version=0.13.2
export PATH=$root/.tools/bin:$PATH
export RUSTC_BOOTSTRAP=1 CARGO_INCREMENTAL=0

if ! cargo fuzz --version 2>/dev/null | grep -q "$cargo_fuzz_version"; then
  cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked --root "$root/.tools"
fi

cd fuzz
targets=${FUZZ_TARGETS:-$(cargo fuzz list)}
cargo fuzz build -s none
passed=0 failed=0
for t in $targets; do
  mkdir -p "work/$t" "corpus/$t"
  echo "== fuzz $t for ${seconds}s"
  if cargo fuzz run -s none "$t" "$root/fuzz/work/$t" "$root/fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -timeout=20 -print_final_stats=1 >"work/$t.log" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    tail -n 60 "work/$t.log"
    echo "!! $t failed: see fuzz/work/$t.log and fuzz/artifacts/$t/"
  fi
  # libFuzzer's final stats: executions, speed, coverage, corpus.
  grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)|^#[0-9]+.*(DONE|cov:)' "work/$t.log" | tail -n 4 || true
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
