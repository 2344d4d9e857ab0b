#!/usr/bin/env bash
# Simulation speed: the `perf` scenario (2 DCs x 4 nodes, 100 ms one-way WAN, 20 clients at
# 50 ops/s = 1,000 ops/s, 10 virtual minutes, then quiescence and the checkers), ROUNDS times
# with different seeds; prints each round's wall time and the median, and the speed-up
# (virtual seconds per wall second).
#
#   bash bench/sim.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
cargo build -q --release -p meridian
bin="${CARGO_TARGET_DIR:-target}/release/meridian"
walls=()
for seed in $(seq 1 "$rounds"); do
  line=$("$bin" sim --scenario perf --seed "$seed" | tail -n 1)
  # "virtual time 676.5s (workload 600s) in 26.65s of wall time: 25x real time"
  wall=$(sed -E 's/.* in ([0-9.]+)s of wall time.*/\1/' <<<"$line")
  echo "seed $seed: $line"
  walls+=("$wall")
done
median=$(printf '%s\n' "${walls[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "median wall time over $rounds rounds: ${median}s (target: <= 30 s); speed-up $(awk -v m="$median" 'BEGIN {printf "%.0f", 600/m}')x for the 600 s workload"
