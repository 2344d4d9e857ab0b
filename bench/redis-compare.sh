#!/usr/bin/env bash
# Meridian vs stock redis-server, side by side, same redis-benchmark load, in alternation.
#
#   bash bench/redis-compare.sh [ROUNDS] [REQUESTS_P1] [REQUESTS_P16]
#
# Starts a release-built Meridian node (in-memory engine) and redis-server (persistence off) on
# loopback, then for each round runs SET and GET with 500-byte values, 50 clients, random keys
# out of 100k, at pipeline 1 and 16 against each server (the order alternates every round so
# neither always runs on a warmer machine). Prints medians over rounds and the Meridian/Redis
# ratios. Extra flags for the Meridian node can be given in MERIDIAN_FLAGS.
#
# TESTS picks redis-benchmark's tests (default set,get), e.g. the collection commands:
#   TESTS=lpush,rpush,lpop,rpop,sadd,spop,zadd,zpopmin,lrange_100 bash bench/redis-compare.sh 3 100000 100000
# Both servers are flushed before every run, so a list grows from empty in each. DATA_SIZE
# sets the value size (default 500 bytes; redis-benchmark's own default is 3).
#
# DURABLE=always|everysec compares durable configurations instead: Meridian on the fjall
# engine with that fsync policy against Redis with AOF (`appendfsync` the same), both writing
# to fresh directories under bench/out.
#
# TLS=1 serves both over TLS only (`--port 0 --tls-port`, `--tls-auth-clients no`), with a CA
# and certificate from `meridian tls gen`, and drives them with `redis-benchmark --tls`.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
n_p1=${2:-200000}
n_p16=${3:-1000000}
bash scripts/ensure-redis-tools.sh --server
# NO_BUILD=1: use the release binary already built.
[[ -n "${NO_BUILD:-}" ]] || cargo build -q --release -p meridian

out=bench/out; mkdir -p "$out"
durable=${DURABLE:-}
mflags=() rflags=(--save "" --appendonly no)
if [[ -n "$durable" ]]; then
  [[ "$durable" == always || "$durable" == everysec ]] || { echo "DURABLE must be always or everysec" >&2; exit 2; }
  ddir=$(mktemp -d "$PWD/$out/durable.XXXXXX")
  mflags=(--engine fjall --data-dir "$ddir/meridian" --fsync "$durable")
  rflags=(--save "" --appendonly yes --appendfsync "$durable" --dir "$ddir")
fi
ctls=()
if [[ -n "${TLS:-}" ]]; then
  tdir=$(mktemp -d "$PWD/$out/tls.XXXXXX")
  "${CARGO_TARGET_DIR:-target}/release/meridian" tls gen --dir "$tdir" >/dev/null
  tfiles=(--tls-cert-file "$tdir/node.crt" --tls-key-file "$tdir/node.key"
          --tls-ca-cert-file "$tdir/ca.crt" --tls-auth-clients no)
  ctls=(--tls --cacert "$tdir/ca.crt")
fi
csv="$out/redis-compare-$(date +%Y%m%d-%H%M%S).csv"
# Ports below Linux's ephemeral range (32768+), where client sockets would collide.
mport=$((20000 + RANDOM % 10000)); rport=$((mport + 1)); hport=$((mport + 2))
rlisten=(--port "$rport")
if [[ -n "${TLS:-}" ]]; then
  mflags+=(--port 0 --tls-port "$mport" "${tfiles[@]}")
  rlisten=(--port 0 --tls-port "$rport" "${tfiles[@]}")
fi
"${CARGO_TARGET_DIR:-target}/release/meridian" node --resp "127.0.0.1:$mport" --http "127.0.0.1:$hport" \
  "${mflags[@]}" ${MERIDIAN_FLAGS:-} \
  >"$out/meridian.log" 2>&1 &
mpid=$!
redis-server "${rlisten[@]}" --bind 127.0.0.1 "${rflags[@]}" --daemonize no \
  >"$out/redis.log" 2>&1 &
rpid=$!
trap 'kill $mpid $rpid 2>/dev/null || true; wait 2>/dev/null || true; [[ -n "${ddir:-}" ]] && rm -rf "$ddir"; [[ -n "${tdir:-}" ]] && rm -rf "$tdir"' EXIT
for p in "$mport" "$rport"; do
  for _ in $(seq 1 100); do redis-cli "${ctls[@]}" -p "$p" PING >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli "${ctls[@]}" -p "$p" PING >/dev/null 2>&1 || { echo "server on port $p did not start; see $out/*.log" >&2; exit 1; }
done

echo "server,round,pipeline,test,rps,avg_ms,min_ms,p50_ms,p95_ms,p99_ms,max_ms" >"$csv"
tests=${TESTS:-set,get}
run() { # run SERVER PORT ROUND PIPELINE REQUESTS
  redis-cli "${ctls[@]}" -p "$2" FLUSHALL >/dev/null
  redis-benchmark "${ctls[@]}" -p "$2" -t "$tests" -n "$5" -c 50 -d "${DATA_SIZE:-500}" -r 100000 -P "$4" --csv 2>/dev/null \
    | tail -n +2 | tr -d '"' | sed "s/^/$1,$3,$4,/" >>"$csv"
}
for round in $(seq 1 "$rounds"); do
  for pipeline in 1 16; do
    n=$n_p1; [[ $pipeline -eq 16 ]] && n=$n_p16
    if (( round % 2 )); then order="meridian redis"; else order="redis meridian"; fi
    for s in $order; do
      port=$mport; [[ $s == redis ]] && port=$rport
      echo "round $round, pipeline $pipeline: $s" >&2
      run "$s" "$port" "$round" "$pipeline" "$n"
    done
  done
done
redis-cli "${ctls[@]}" -p "$mport" INFO server | grep -E '^(redis|meridian)_version' >&2 || true
echo "raw results: $csv" >&2
python3 - "$csv" "${DATA_SIZE:-500}" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
tests = list(dict.fromkeys(r["test"] for r in rows))
med = lambda xs: statistics.median(float(x) for x in xs)
print(f"| test | pipeline | Meridian ops/s | Redis ops/s | ratio | Meridian p50/p99 ms | Redis p50/p99 ms | p99 ratio |")
print("|---|---|---|---|---|---|---|---|")
for test in tests:
    for p in ("1", "16"):
        pick = lambda s, k: [r[k] for r in rows if r["server"] == s and r["test"] == test and r["pipeline"] == p]
        m, r = med(pick("meridian", "rps")), med(pick("redis", "rps"))
        mp50, mp99 = med(pick("meridian", "p50_ms")), med(pick("meridian", "p99_ms"))
        rp50, rp99 = med(pick("redis", "p50_ms")), med(pick("redis", "p99_ms"))
        print(f"| {test} | {p} | {m:,.0f} | {r:,.0f} | **{m/r:.2f}** | {mp50:.3f} / {mp99:.3f} | {rp50:.3f} / {rp99:.3f} | {mp99/rp99:.2f} |")
print(f"\nmedians of {len(set(r['round'] for r in rows))} rounds; {sys.argv[2]}-byte values, 50 clients, keys random in 100k")
PY
