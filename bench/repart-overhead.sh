#!/usr/bin/env bash
# What the worker-shard executor costs a standalone node on single-key traffic: the same
# release binary with `--repart off`, with the executor in each mode named in MODES, and stock
# redis-server, side by side under the same redis-benchmark load, in alternation.
#
#   bash bench/repart-overhead.sh [ROUNDS] [REQUESTS_P1] [REQUESTS_P16]
#   MODES="round_robin non_stop round_robin/tasks" SHARDS=8 bash bench/repart-overhead.sh 5
#
# A mode may name what runs the shards after a slash (`non_stop/tasks`: `--repart-workers
# tasks`; without one, threads), after a second where new keys go
# (`round_robin/threads/round_robin`: `--repart-new-keys round_robin`; without one, hash),
# and after a third how many shards (`round_robin/tasks/hash/64`; without one, SHARDS).
#
# Each round runs SET and GET with 500-byte values, 50 clients, random keys out of 100k, at
# pipeline 1 and 16, against every server in a rotating order. Prints medians over rounds and
# each configuration's ratio to `off` and to Redis. The issue's target: executor on, single-key
# workload, ≥ 0.95 of `off`.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
n_p1=${2:-200000}
n_p16=${3:-1000000}
modes=(${MODES:-round_robin round_robin/tasks non_stop/tasks})
shards=${SHARDS:-8}
bash scripts/ensure-redis-tools.sh --server
cargo build -q --release -p meridian
bin="${CARGO_TARGET_DIR:-target}/release/meridian"

out=bench/out; mkdir -p "$out"
csv="$out/repart-overhead-$(date +%Y%m%d-%H%M%S).csv"
base=$((20000 + RANDOM % 9000))
names=(off "${modes[@]}" redis)
ports=() pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for i in "${!names[@]}"; do
  name=${names[$i]}; port=$((base + 2 * i)); ports+=("$port")
  if [[ $name == redis ]]; then
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
      >"$out/redis.log" 2>&1 &
  else
    IFS=/ read -r mode workers new_keys mode_shards <<<"$name"
    "$bin" node --resp "127.0.0.1:$port" --http "127.0.0.1:$((port + 1))" \
      --repart "$mode" --repart-shards "${mode_shards:-$shards}" --repart-workers "${workers:-threads}" \
      --repart-new-keys "${new_keys:-hash}" \
      >"$out/meridian-${name//\//-}.log" 2>&1 &
  fi
  pids+=($!)
done
for p in "${ports[@]}"; do
  for _ in $(seq 1 100); do redis-cli -p "$p" PING >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$p" PING >/dev/null 2>&1 || { echo "server on port $p did not start; see $out/*.log" >&2; exit 1; }
done

echo "server,round,pipeline,test,rps,avg_ms,min_ms,p50_ms,p95_ms,p99_ms,max_ms" >"$csv"
n=${#names[@]}
for round in $(seq 1 "$rounds"); do
  for pipeline in 1 16; do
    reqs=$n_p1; [[ $pipeline -eq 16 ]] && reqs=$n_p16
    for k in $(seq 0 $((n - 1))); do
      i=$(((k + round) % n))
      echo "round $round, pipeline $pipeline: ${names[$i]}" >&2
      redis-benchmark -p "${ports[$i]}" -t set,get -n "$reqs" -c 50 -d 500 -r 100000 -P "$pipeline" --csv 2>/dev/null \
        | tail -n +2 | tr -d '"' | sed "s|^|${names[$i]},$round,$pipeline,|" >>"$csv"
    done
  done
done
echo "raw results: $csv" >&2
python3 - "$csv" "${names[@]}" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
names = sys.argv[2:]
med = lambda xs: statistics.median(float(x) for x in xs)
def rps(s, test, p):
    return med([r["rps"] for r in rows if r["server"] == s and r["test"] == test and r["pipeline"] == p])
print("| test | pipeline | " + " | ".join(f"{n} ops/s" for n in names) + " | "
      + " | ".join(f"{n}/off" for n in names if n not in ("off", "redis")) + " | off/redis |")
print("|---" * (2 + len(names) + len(names) - 2 + 1) + "|")
for test in ("SET", "GET"):
    for p in ("1", "16"):
        v = {n: rps(n, test, p) for n in names}
        ratios = " | ".join(f"**{v[n]/v['off']:.2f}**" for n in names if n not in ("off", "redis"))
        print(f"| {test} | {p} | " + " | ".join(f"{v[n]:,.0f}" for n in names) + f" | {ratios} | {v['off']/v['redis']:.2f} |")
print(f"\nmedians of {len(set(r['round'] for r in rows))} rounds; 500-byte values, 50 clients, keys random in 100k")
PY
