#!/usr/bin/env bash
# The embedded 2-DC x 3-node cluster under an emulated WAN, measured over RESP.
#
#   bash bench/cluster.sh [REQUESTS_LATENCY] [REQUESTS_THROUGHPUT]
#
# 1. WAN faithfulness, with L = 100 ms one-way between DCs and no jitter: the p50 of a write that
#    must be acknowledged in both DCs (MERIDIAN.PUT ... W 3 DW 3) against the emulated round trip
#    (2L = 200 ms), and the p50 of local operations (R 1 reads, W 1 DW 1 writes).
# 2. Throughput with N=3, R=W=DW=1, 500-byte values, 50 clients, pipeline 16, plain SET and GET
#    against one node, side by side with a single in-memory node in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
n_lat=${1:-400}
n_tput=${2:-300000}
bash scripts/ensure-redis-tools.sh
cargo build -q --release -p meridian
bin="${CARGO_TARGET_DIR:-target}/release/meridian"
out=bench/out; mkdir -p "$out"
base=$((20000 + RANDOM % 5000))   # below the ephemeral range (32768+)
"$bin" up --dcs 2 --nodes-per-dc 3 --wan-latency 100ms --jitter 0% --base-port "$base" --misrouted serve \
  >"$out/cluster.log" 2>&1 &
upid=$!
single=$((base + 3000))
"$bin" node --resp "127.0.0.1:$single" --http "127.0.0.1:$((single + 1))" >"$out/single.log" 2>&1 &
spid=$!
trap 'kill $upid $spid 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do grep -q '^ready' "$out/cluster.log" && break; sleep 0.1; done
grep -q '^ready' "$out/cluster.log" || { echo "cluster did not start; see $out/cluster.log" >&2; exit 1; }

p50() { # p50 (ms) of one redis-benchmark command run: p50 ARGS...
  redis-benchmark --csv "$@" 2>/dev/null | tail -1 | tr -d '"' | cut -d, -f5
}
rps() {
  redis-benchmark --csv "$@" 2>/dev/null | tail -n +2 | tr -d '"' | cut -d, -f1,2
}

echo "## WAN faithfulness (L = 100 ms one-way, emulated round trip 200 ms), p50 in ms"
echo "| operation | p50 ms |"
echo "|---|---|"
echo "| write acknowledged in both DCs (W 3 DW 3) | $(p50 -p "$base" -c 10 -n "$n_lat" -r 100000 MERIDIAN.PUT 'wan:__rand_int__' v W 3 DW 3) |"
echo "| local write (W 1 DW 1) | $(p50 -p "$base" -c 10 -n "$((n_lat * 10))" -r 100000 MERIDIAN.PUT 'wan:__rand_int__' v W 1 DW 1) |"
echo "| local read (R 1) | $(p50 -p "$base" -c 10 -n "$((n_lat * 10))" -r 100000 MERIDIAN.GET 'wan:__rand_int__' R 1) |"

echo
echo "## Throughput, N=3, R=W=DW=1, 500-byte values, 50 clients, pipeline 16"
for i in 0 1 2 3 4 5; do
  curl -sf -X PUT "127.0.0.1:$((base + 1000 + i))/buckets/default" \
    -H 'content-type: application/json' -d '{"type":"eventual","r":1,"w":1,"dw":1}' >/dev/null
done
echo "| target | test | ops/s |"
echo "|---|---|---|"
for round in 1 2 3; do
  rps -p "$base" -t set,get -n "$n_tput" -c 50 -d 500 -r 100000 -P 16 | sed "s/^/cluster,$round,/"
  rps -p "$single" -t set,get -n "$n_tput" -c 50 -d 500 -r 100000 -P 16 | sed "s/^/single,$round,/"
done | python3 -c '
import sys, statistics
rows = [l.strip().split(",") for l in sys.stdin if l.strip()]
for target in ("cluster", "single"):
    for test in ("SET", "GET"):
        v = [float(r[3]) for r in rows if r[0] == target and r[2] == test]
        print(f"| {target} | {test} | {statistics.median(v):,.0f} (median of {len(v)}) |")
'
