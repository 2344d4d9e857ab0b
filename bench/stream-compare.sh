#!/usr/bin/env bash
# Streams, Meridian vs stock redis-server, side by side, in alternation: XADD, and a consumer
# group's XREADGROUP then XACK.
#
#   bash bench/stream-compare.sh [ROUNDS] [REQUESTS]
#
# Starts a release-built Meridian node and redis-server (persistence off) on loopback. Each
# round, against each server in turn (the order alternates every round), at pipeline 1 and 16
# with 50 clients, redis-benchmark runs REQUESTS (default 100000) of:
#   - XADD   `XADD stream:<random of 100> MAXLEN ~ 1000 * field value` (IDs from the clock,
#            trimmed by whole nodes as Redis trims);
#   - XREADGROUP `XREADGROUP GROUP g c<random of 50> COUNT 1 STREAMS q >` over a stream of
#            REQUESTS entries loaded first (IDs 1-1, 2-1, ...), each call delivering one entry
#            into the group's pending list;
#   - XACK   `XACK q g <random of REQUESTS>-1`, acknowledging those deliveries.
# The XREADGROUP+XACK figure is one delivery plus its acknowledgement: 1 / (1/read + 1/ack).
# Prints medians over rounds and the ratios. NO_BUILD=1 uses the release binary already built.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
requests=${2:-100000}
bash scripts/ensure-redis-tools.sh --server
[[ -n "${NO_BUILD:-}" ]] || cargo build -q --release -p meridian

out=bench/out; mkdir -p "$out"
csv="$out/stream-compare-$(date +%Y%m%d-%H%M%S).csv"
source bench/start-pair.sh
start_pair "$out"
load="$out/stream-load.txt"
seq 1 "$requests" | awk '{print "XADD q " $1 "-1 field value"}' >"$load"

pair_header "$csv"
for round in $(seq 1 "$rounds"); do
  for pipeline in 1 16; do
    if (( round % 2 )); then order="meridian redis"; else order="redis meridian"; fi
    for s in $order; do
      port=$mport; [[ $s == redis ]] && port=$rport
      echo "round $round, pipeline $pipeline: $s" >&2
      redis-cli -p "$port" FLUSHALL >/dev/null
      bench_row "$csv" "$s" "$round" "$pipeline" XADD 50 "$port" -r 100 \
        XADD stream:__rand_int__ MAXLEN '~' 1000 '*' field value
      redis-cli -p "$port" --pipe <"$load" >/dev/null
      redis-cli -p "$port" XGROUP CREATE q g 0 >/dev/null
      bench_row "$csv" "$s" "$round" "$pipeline" XREADGROUP 50 "$port" -r 50 \
        XREADGROUP GROUP g c__rand_int__ COUNT 1 STREAMS q '>'
      bench_row "$csv" "$s" "$round" "$pipeline" XACK 50 "$port" -r "$requests" \
        XACK q g __rand_int__-1
    done
  done
done
echo "raw results: $csv" >&2
python3 bench/pair_table.py "$csv" --pair XREADGROUP+XACK --note "; 50 clients"
