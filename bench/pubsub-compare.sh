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

echo "server,round,pipeline,rps,p50_ms,p99_ms" >"$csv"
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
  redis-benchmark -p "$2" -n "$requests" -c 10 -P "$4" --csv PUBLISH bench 0123456789abcdef 2>/dev/null \
    | tail -n +2 | tr -d '"' | awk -F, -v s="$1" -v r="$3" -v p="$4" '{print s","r","p","$2","$5","$7}' >>"$csv"
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
python3 - "$csv" "$subscribers" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = lambda xs: statistics.median(float(x) for x in xs)
print("| test | pipeline | Meridian publishes/s | Redis publishes/s | ratio | Meridian p50/p99 ms | Redis p50/p99 ms |")
print("|---|---|---|---|---|---|---|")
for p in ("1", "16"):
    pick = lambda s, k: [r[k] for r in rows if r["server"] == s and r["pipeline"] == p]
    m, r = med(pick("meridian", "rps")), med(pick("redis", "rps"))
    print(f"| PUBLISH to {sys.argv[2]} | {p} | {m:,.0f} | {r:,.0f} | **{m/r:.2f}** | "
          f"{med(pick('meridian', 'p50_ms')):.3f} / {med(pick('meridian', 'p99_ms')):.3f} | "
          f"{med(pick('redis', 'p50_ms')):.3f} / {med(pick('redis', 'p99_ms')):.3f} |")
print(f"\nmedians of {len(set(r['round'] for r in rows))} rounds; 10 publishing clients, 16-byte messages")
PY
