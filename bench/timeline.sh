#!/usr/bin/env bash
# Timeline buckets (issue 5 figures) on the embedded 2-DC x 3-node cluster, N=3, 100 ms one-way
# emulated WAN (round trip 200 ms), no jitter, T=3, in real time.
#
#   bash bench/timeline.sh [ROUNDS] [DURATION_SECS] [RATE_OPS] [-- MORE EXAMPLE OPTIONS]
#
# Each round starts a fresh cluster, loads the keys (half homed in each DC), warms up with
# update-only traffic at 90% write locality (15 = 5*T writes per key, spec section 9), then
# measures DURATION_SECS of open-loop 2:1 read/write traffic at RATE_OPS (clients in both DCs,
# each using a round-robin node of its DC as coordinator; latency from the intended start).
# Prints each round and a Markdown table of the medians over rounds: read_any, writes from the
# master's DC, all writes, read_latest from the other DC (p50/p90/p99/max), the share of writes
# served locally, the fraction of keys mastered in their home DC, and migrations.
# Defaults (3 rounds, 30 s, 1000 ops/s) take about 2.5 minutes after the build.
# See `cargo run --release -p meridian-server --example timeline_bench -- --help`.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
duration=${2:-30}
rate=${3:-1000}
shift $(($# < 3 ? $# : 3))
[ "${1:-}" = "--" ] && shift
cargo build -q --release -p meridian-server --example timeline_bench
exec cargo run -q --release -p meridian-server --example timeline_bench -- \
  --rounds "$rounds" --duration "$duration" --rate "$rate" "$@"
