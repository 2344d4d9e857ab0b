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

echo "server,round,pipeline,rps,p50_ms,p99_ms" >"$csv"
for round in $(seq 1 "$rounds"); do
  for pipeline in 1 16; do
    if (( round % 2 )); then order="meridian redis"; else order="redis meridian"; fi
    for s in $order; do
      port=$mport; [[ $s == redis ]] && port=$rport
      echo "round $round, pipeline $pipeline: $s" >&2
      redis-benchmark -p "$port" -n "$requests" -c 50 -P "$pipeline" -r 10000 --csv \
        EVALSHA "$sha" 1 key:__rand_int__ 2>/dev/null \
        | tail -n +2 | tr -d '"' \
        | awk -F, -v s="$s" -v r="$round" -v p="$pipeline" '{print s","r","p","$2","$5","$7}' >>"$csv"
    done
  done
done
echo "raw results: $csv" >&2
python3 - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = lambda xs: statistics.median(float(x) for x in xs)
print("| test | pipeline | Meridian calls/s | Redis calls/s | ratio | Meridian p50/p99 ms | Redis p50/p99 ms |")
print("|---|---|---|---|---|---|---|")
for p in ("1", "16"):
    pick = lambda s, k: [r[k] for r in rows if r["server"] == s and r["pipeline"] == p]
    m, r = med(pick("meridian", "rps")), med(pick("redis", "rps"))
    print(f"| EVALSHA, 3 commands | {p} | {m:,.0f} | {r:,.0f} | **{m/r:.2f}** | "
          f"{med(pick('meridian', 'p50_ms')):.3f} / {med(pick('meridian', 'p99_ms')):.3f} | "
          f"{med(pick('redis', 'p50_ms')):.3f} / {med(pick('redis', 'p99_ms')):.3f} |")
print(f"\nmedians of {len(set(r['round'] for r in rows))} rounds; 50 clients, 10000 keys")
PY
