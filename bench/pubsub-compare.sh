#!/usr/bin/env bash
# PUBLISH fan-out, Meridian vs stock redis-server, side by side, in alternation.
#
#   bash bench/pubsub-compare.sh [ROUNDS] [REQUESTS] [SUBSCRIBERS]
#
# Starts a release-built Meridian node and redis-server (persistence off) on loopback. Each
# round, against each server in turn (the order alternates every round): SUBSCRIBERS
# (default 50) `redis-cli SUBSCRIBE` processes read the channel into /dev/null, and
# redis-benchmark runs REQUESTS (default 100000) `PUBLISH channel <16 bytes>` from 10 clients
# at pipeline 1 and 16; then the subscribers go. Each publish is written to every
# subscriber, so the figure bounds how fast a node fans messages out (the subscribers' own
# reading shares the 2 cores with both servers). Prints medians over rounds and the ratios.
# NO_BUILD=1 uses the release binary already built.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
requests=${2:-100000}
subscribers=${3:-50}
bash scripts/ensure-redis-tools.sh --server
[[ -n "${NO_BUILD:-}" ]] || cargo build -q --release -p meridian

out=bench/out; mkdir -p "$out"
csv="$out/pubsub-compare-$(date +%Y%m%d-%H%M%S).csv"
source bench/start-pair.sh
start_pair "$out"
subs=()
stop_subscribers() { for p in "${subs[@]}"; do kill "$p" 2>/dev/null || true; done; subs=(); }
trap 'stop_subscribers; kill $mpid $rpid 2>/dev/null || true; wait 2>/dev/null || true' EXIT

pair_header "$csv"
run() { # run SERVER PORT ROUND PIPELINE
  for _ in $(seq 1 "$subscribers"); do
    redis-cli -p "$2" SUBSCRIBE bench >/dev/null 2>&1 &
    subs+=($!)
  done
  # Every subscriber registered before the first publish.
  for _ in $(seq 1 100); do
    n=$(redis-cli -p "$2" PUBSUB NUMSUB bench | tail -n 1)
    [[ "$n" -ge "$subscribers" ]] && break
    sleep 0.1
  done
  bench_row "$csv" "$1" "$3" "$4" "PUBLISH to $subscribers" 10 "$2" PUBLISH bench 0123456789abcdef
  stop_subscribers
}
for round in $(seq 1 "$rounds"); do
  for pipeline in 1 16; do
    if (( round % 2 )); then order="meridian redis"; else order="redis meridian"; fi
    for s in $order; do
      port=$mport; [[ $s == redis ]] && port=$rport
      echo "round $round, pipeline $pipeline: $s" >&2
      run "$s" "$port" "$round" "$pipeline"
    done
  done
done
echo "raw results: $csv" >&2
python3 bench/pair_table.py "$csv" --unit publishes --note "; 10 publishing clients, 16-byte messages"
