#!/usr/bin/env bash
# Meridian's RESP load generator (crates/meridian-bench, example resp_loadgen) against
# redis-benchmark and go-ycsb, side by side on one redis-server on loopback.
#
#   bash bench/resp-loadgen.sh [ROUNDS]
#
# Issue requirement: with the same clients and pipeline depth the generator drives at least 90 %
# of redis-benchmark's throughput, and as much as go-ycsb's redis binding on workload A.
#
# Per round and per (clients, pipeline) setting in SETTINGS (default "50:1 50:16 4:1"), runs
# `redis-benchmark -t set,get -c C -P P -n N -r 100000 -d 3` and our generator with
# `--clients C --pipeline P` (C connections, C×P closed-loop threads) on a SET-only and a
# GET-only workload (3-byte values, keys uniform in 100 000), alternating which tool goes
# first. Prints medians over rounds and the ratio ours / redis-benchmark.
# Then, if go-ycsb can be installed (`go install`, into target/go-bin), runs its redis binding
# and our generator on the canonical workload A with the same thread count.
#
# Environment: RUN_SECONDS (measured seconds per run of ours, default 3), N_P1 / N_PN
# (redis-benchmark requests at pipeline 1 / deeper, default 300000 / 2000000), SETTINGS,
# YCSB_THREADS (default 50), YCSB_OPS (go-ycsb operationcount, default 200000), GO_YCSB (a
# go-ycsb binary to use instead of installing one).
# The machine's cores are shared by redis-server and the load generator being measured: only
# the side-by-side ratios mean something, not the absolute figures.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
run_seconds=${RUN_SECONDS:-3}
n_p1=${N_P1:-300000}
n_pn=${N_PN:-2000000}
settings=${SETTINGS:-"50:1 50:16 4:1"}
ycsb_threads=${YCSB_THREADS:-50}
ycsb_ops=${YCSB_OPS:-200000}

bash scripts/ensure-redis-tools.sh --server
cargo build -q --release -p meridian-bench --example resp_loadgen
gen="${CARGO_TARGET_DIR:-target}/release/examples/resp_loadgen"

out=bench/out; mkdir -p "$out"
stamp=$(date +%Y%m%d-%H%M%S)
csv="$out/resp-loadgen-$stamp.csv"
# Below Linux's ephemeral range (32768+), where client sockets would collide.
port=$((20000 + RANDOM % 10000))
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  >"$out/resp-loadgen-redis.log" 2>&1 &
rpid=$!
trap 'kill $rpid 2>/dev/null || true; wait $rpid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.1; done
# The server answering must be ours (a taken port would have us measure, and flush, another).
if ! kill -0 "$rpid" 2>/dev/null || ! redis-cli -p "$port" INFO server | grep -q "^process_id:$rpid"; then
  echo "redis-server did not start on port $port (taken?); see $out/resp-loadgen-redis.log" >&2
  exit 1
fi
addr="127.0.0.1:$port"

# ours JSON line -> "ops_per_s,p50_ms,p99_ms,errors"
ours_fields() {
  python3 -c 'import json,sys; j=json.loads(sys.stdin.readline()); print("%s,%.3f,%.3f,%s" % (j["ops_per_s"], j["p50_us"] / 1000, j["p99_us"] / 1000, j["errors"]))'
}

echo "tool,round,clients,pipeline,test,ops_per_s,p50_ms,p99_ms,errors" >"$csv"
run_redis_benchmark() { # ROUND C P
  local n=$n_p1; [[ $3 -gt 1 ]] && n=$n_pn
  redis-benchmark -p "$port" -t set,get -c "$2" -P "$3" -n "$n" -r 100000 -d 3 -q --csv 2>/dev/null \
    | tail -n +2 | tr -d '"' \
    | awk -F, -v r="$1" -v c="$2" -v p="$3" '{print "redis-benchmark," r "," c "," p "," $1 "," $2 "," $5 "," $7 ",0"}' >>"$csv"
}
run_ours() { # ROUND C P
  local test line
  for test in set get; do
    line=$("$gen" --addr "$addr" --clients "$2" --pipeline "$3" --seconds "$run_seconds" \
      --warmup 1 --workload "$test" | ours_fields)
    echo "ours,$1,$2,$3,${test^^},$line" >>"$csv"
  done
}
for round in $(seq 1 "$rounds"); do
  for s in $settings; do
    c=${s%%:*} p=${s##*:}
    echo "round $round: clients $c, pipeline $p" >&2
    if (( round % 2 )); then
      run_redis_benchmark "$round" "$c" "$p"; run_ours "$round" "$c" "$p"
    else
      run_ours "$round" "$c" "$p"; run_redis_benchmark "$round" "$c" "$p"
    fi
  done
done
echo "raw results: $csv" >&2

python3 - "$csv" "$rounds" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = lambda xs: statistics.median(float(x) for x in xs) if xs else float("nan")
print("| clients | pipeline | test | ours ops/s | redis-benchmark ops/s | **ours / rb** | ours p50/p99 ms | rb p50/p99 ms | ours errors |")
print("|---|---|---|---|---|---|---|---|---|")
keys = []
for r in rows:
    k = (r["clients"], r["pipeline"], r["test"])
    if k not in keys:
        keys.append(k)
for c, p, t in keys:
    pick = lambda tool, f: [r[f] for r in rows if r["tool"] == tool and (r["clients"], r["pipeline"], r["test"]) == (c, p, t)]
    o, b = med(pick("ours", "ops_per_s")), med(pick("redis-benchmark", "ops_per_s"))
    print(f"| {c} | {p} | {t} | {o:,.0f} | {b:,.0f} | **{o / b:.2f}** | "
          f"{med(pick('ours', 'p50_ms')):.3f} / {med(pick('ours', 'p99_ms')):.3f} | "
          f"{med(pick('redis-benchmark', 'p50_ms')):.3f} / {med(pick('redis-benchmark', 'p99_ms')):.3f} | "
          f"{sum(int(e) for e in pick('ours', 'errors'))} |")
print(f"\nmedians of {sys.argv[2]} rounds; 3-byte values, keys uniform in 100k; ours = C connections x P "
      f"pipeline, C*P closed-loop threads")
PY

# ---- go-ycsb, workload A ----------------------------------------------------------------
gobin="$(realpath -m "${CARGO_TARGET_DIR:-target}")/go-bin"
# GO_YCSB=/path/to/go-ycsb uses a go-ycsb built by hand (the module proxy refuses go-ycsb, so
# `go install` fails here; see BENCHMARKS.md for how it was built for the recorded figures).
ycsb="${GO_YCSB:-$gobin/go-ycsb}"
skip=""
if [[ ! -x "$ycsb" ]]; then
  if ! command -v go >/dev/null 2>&1; then
    skip="go is not installed, so go-ycsb cannot be built"
  else
    echo "installing go-ycsb into $gobin (go install; up to 10 minutes)" >&2
    mkdir -p "$gobin"
    if ! GOBIN="$gobin" timeout 600 go install github.com/pingcap/go-ycsb/cmd/go-ycsb@latest \
      >"$out/go-ycsb-install.log" 2>&1; then
      skip="go install github.com/pingcap/go-ycsb/cmd/go-ycsb@latest failed: $(grep -m1 -E 'go: |error' "$out/go-ycsb-install.log" || tail -n1 "$out/go-ycsb-install.log")"
    fi
  fi
fi
echo
echo "### Workload A (50/50 read/update, zipfian, 1 KB records), $ycsb_threads threads"
echo
if [[ -n "$skip" ]]; then
  echo "go-ycsb skipped: $skip"
  echo
fi
workload=crates/meridian-bench/workloads/workloada
redis-cli -p "$port" FLUSHALL >/dev/null
echo "| tool | ops/s | p50 / p99 ms | errors |"
echo "|---|---|---|---|"
if [[ -z "$skip" ]]; then
  # Pinned: hashes (plain Redis has no JSON type), one connection per thread, errors shown.
  ycsb_props=(-p redis.addr="$addr" -p redis.datatype=hash -p redis.pool_size="$ycsb_threads"
    -p threadcount="$ycsb_threads" -p silence=false)
  "$ycsb" load redis -P "$workload" "${ycsb_props[@]}" >"$out/go-ycsb-load.log" 2>&1
  "$ycsb" run redis -P "$workload" "${ycsb_props[@]}" -p operationcount="$ycsb_ops" \
    >"$out/go-ycsb-run.log" 2>&1
  # go-ycsb prints e.g. "TOTAL  - Takes(s): 2.0, Count: 200000, OPS: 99000.5, Avg(us): 500, ..."
  total=$(grep -E '^TOTAL' "$out/go-ycsb-run.log" | tail -n1 || true)
  ops=$(sed -nE 's/.*OPS: ([0-9.]+).*/\1/p' <<<"$total")
  p50=$(sed -nE 's/.*50th\(us\): ([0-9]+).*/\1/p' <<<"$total")
  p99=$(sed -nE 's/.*99th\(us\): ([0-9]+).*/\1/p' <<<"$total")
  echo "| go-ycsb (redis binding) | ${ops:-?} | ${p50:-?} / ${p99:-?} us | see $out/go-ycsb-run.log |"
  redis-cli -p "$port" FLUSHALL >/dev/null
fi
line=$("$gen" --addr "$addr" --clients "$ycsb_threads" --pipeline 1 --seconds "$run_seconds" \
  --warmup 1 --workload a --commands hash | ours_fields)
IFS=, read -r ops p50 p99 errs <<<"$line"
echo "| ours (HSET/HGETALL, $ycsb_threads connections) | $ops | $p50 / $p99 ms | $errs |"
