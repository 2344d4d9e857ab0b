#!/usr/bin/env bash
# EVALSHA of a three-command script, Meridian vs stock redis-server, side by side, in
# alternation.
#
#   bash bench/script-compare.sh [ROUNDS] [REQUESTS]
#
# Starts a release-built Meridian node and redis-server (persistence off) on loopback, loads
# the same script into both (SCRIPT LOAD: one INCRBY, one GET and one EXPIRE of the key it
# declares), then each round, against each server in turn (the order alternates every
# round), redis-benchmark runs REQUESTS (default 100000) `EVALSHA <sha> 1 key:<random of
# 10000>` from 50 clients at pipeline 1 and 16. The figure bounds one script call: parse,
# interpreter entry, three commands under the key's lock, reply conversion. Prints medians
# over rounds and the ratios. NO_BUILD=1 uses the release binary already built.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
requests=${2:-100000}
bash scripts/ensure-redis-tools.sh --server
[[ -n "${NO_BUILD:-}" ]] || cargo build -q --release -p meridian

out=bench/out; mkdir -p "$out"
csv="$out/script-compare-$(date +%Y%m%d-%H%M%S).csv"
source bench/start-pair.sh
start_pair "$out"
script="redis.call('incrby', KEYS[1], 1) local v = redis.call('get', KEYS[1]) redis.call('expire', KEYS[1], 3600) return v"
for p in "$mport" "$rport"; do
  sha=$(redis-cli -p "$p" SCRIPT LOAD "$script")
done

pair_header "$csv"
for round in $(seq 1 "$rounds"); do
  for pipeline in 1 16; do
    if (( round % 2 )); then order="meridian redis"; else order="redis meridian"; fi
    for s in $order; do
      port=$mport; [[ $s == redis ]] && port=$rport
      echo "round $round, pipeline $pipeline: $s" >&2
      bench_row "$csv" "$s" "$round" "$pipeline" "EVALSHA (3 commands)" 50 "$port" -r 10000 \
        EVALSHA "$sha" 1 key:__rand_int__
    done
  done
done
echo "raw results: $csv" >&2
python3 bench/pair_table.py "$csv" --note "; 50 clients, 10000 keys"
