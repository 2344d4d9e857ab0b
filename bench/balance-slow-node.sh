#!/usr/bin/env bash
# Replica selection against a slow node, in real time on `meridian up` (issue 15's benchmark).
#
#   bash bench/balance-slow-node.sh [ROUNDS] [REQUESTS]
#   PART=real bash bench/balance-slow-node.sh     # only the second part (cost of selection)
#
# Starts `meridian up` (2 DCs x 3 nodes, the default 100 ms WAN, layout N = 4 so that every key
# has two replicas in each DC: a strategy chooses among a DC's own replicas) with every node's
# reads modelled at 1 ms of worker time (`--service-model fixed:1 --read-workers 4`: 4 000
# reads/s per node), a default bucket of one-replica reads (N=4, R=1, read_fanout=quorum), and
# keys 0..9999 written once. Each round, for each strategy (local_first, least_outstanding, c3,
# dynamic_snitch), in rotating order:
#   healthy  redis-benchmark GET (50 clients, pipeline 1, random keys) through each coordinator
#            of DC 0 in turn;
#   slow     the same with node 1 of DC 0 slowed 10x (PUT /balance/service-model fixed:10).
# It prints medians over rounds of throughput and GET p50/p99 per strategy, the p99 ratio
# slow/healthy (the issue's target: <= 1.5 for c3 and least_outstanding; local_first reported),
# and the throughput ratio of each strategy to local_first when healthy (the cost of selection).
# A second part measures that cost without the service model (the engine's own time): GET
# throughput per strategy, rounds alternating, medians.
#
# Ports: 24000-25999.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
requests=${2:-20000}
bash scripts/ensure-redis-tools.sh
cargo build -q --release -p meridian
bin="$(realpath -m "${CARGO_TARGET_DIR:-target}")/release/meridian"
part=${PART:-all}
out=bench/out/balance; mkdir -p "$out"
[ "$part" = all ] && rm -f "$out"/*.txt
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
wait_for() { # wait_for FILE PATTERN
  for _ in $(seq 1 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1" >&2; cat "$1" >&2; exit 1
}
strategies=(local_first least_outstanding c3 dynamic_snitch)

start_up() { # start_up NAME BASE [FLAGS...]
  local name=$1 base=$2; shift 2
  "$bin" up --dcs 2 --nodes-per-dc 3 --n 4 --base-port "$base" --misrouted serve "$@" >"$out/$name.log" 2>&1 &
  pids+=($!)
  wait_for "$out/$name.log" '^ready'
}
# Node i of `meridian up --base-port B` serves RESP on B+i and HTTP on B+1000+i (i from 0).
set_bucket() { # set_bucket HTTP_PORT STRATEGY
  curl -sf -X PUT "127.0.0.1:$1/buckets/default" -H 'content-type: application/json' \
    -d "{\"type\":\"eventual\",\"n_val\":4,\"r\":1,\"read_fanout\":\"quorum\",\"replica_selection\":\"$2\"}" >/dev/null
}
set_model() { # set_model HTTP_PORT MODEL
  curl -sf -X PUT "127.0.0.1:$1/balance/service-model" -H 'content-type: application/json' \
    -d "{\"model\":\"$2\"}" >/dev/null
}
# GET through each DC-0 coordinator; prints "rps p50 p99" summed / worst over coordinators.
get_load() { # get_load BASE
  local base=$1 total=0 p50=0 p99=0
  for i in 0 1 2; do
    line=$(redis-benchmark -p $((base + i)) -t get -n "$requests" -c 50 -r 10000 -d 100 --csv -q 2>/dev/null | grep '^"GET"' || true)
    [ -n "$line" ] || { echo "0 0 0"; return; }
    rps=$(echo "$line" | cut -d, -f2 | tr -d '"')
    a=$(echo "$line" | cut -d, -f5 | tr -d '"'); b=$(echo "$line" | cut -d, -f7 | tr -d '"')
    total=$(echo "$total + $rps" | bc -l)
    p50=$(echo "if ($a > $p50) $a else $p50" | bc -l); p99=$(echo "if ($b > $p99) $b else $p99" | bc -l)
  done
  echo "$total $p50 $p99"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# ---- part 1: a slow node under the service model ----
base=24000
if [ "$part" = all ]; then
start_up model $base --service-model fixed:1 --read-workers 4
redis-benchmark -p $base -t set -n 10000 -c 20 -r 10000 -d 100 -q >/dev/null 2>&1 || true
for r in $(seq 1 "$rounds"); do
  n=${#strategies[@]}
  for k in $(seq 0 $((n - 1))); do
    s=${strategies[$(((k + r) % n))]}
    set_bucket $((base + 1000)) "$s"
    for i in 0 1 2 3 4 5; do set_model $((base + 1000 + i)) fixed:1; done
    read -r rps p50 p99 <<<"$(get_load $base)"
    echo "$r $s healthy $rps $p50 $p99" | tee -a "$out/model.txt"
    set_model $((base + 1000)) fixed:10
    read -r rps p50 p99 <<<"$(get_load $base)"
    echo "$r $s slow $rps $p50 $p99" | tee -a "$out/model.txt"
  done
done
kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; pids=()
fi

# ---- part 2: the cost of selection, engine time only ----
base=25000
rm -f "$out/real.txt"
start_up real $base
redis-benchmark -p $base -t set -n 10000 -c 20 -r 10000 -d 100 -q >/dev/null 2>&1 || true
for r in $(seq 1 "$rounds"); do
  n=${#strategies[@]}
  for k in $(seq 0 $((n - 1))); do
    s=${strategies[$(((k + r) % n))]}
    set_bucket $((base + 1000)) "$s"
    read -r rps p50 p99 <<<"$(get_load $base)"
    echo "$r $s real $rps $p50 $p99" | tee -a "$out/real.txt"
  done
done

echo
echo "== medians over $rounds rounds (GET through each DC-0 coordinator, 50 clients each) =="
printf '%-18s %10s %8s %8s | %10s %8s %8s | %9s | %10s %8s\n' strategy "rps" "p50ms" "p99ms" "slow rps" "p50ms" "p99ms" "p99 ratio" "real rps" "vs lf"
lf_real=$(awk '$2=="local_first" {print $4}' "$out/real.txt" | median)
for s in "${strategies[@]}"; do
  m() { awk -v s="$s" -v c="$2" -v f="$3" '$2==s && $3==c {print $f}' "$1" | median; }
  h_rps=$(m "$out/model.txt" healthy 4); h50=$(m "$out/model.txt" healthy 5); h99=$(m "$out/model.txt" healthy 6)
  s_rps=$(m "$out/model.txt" slow 4); s50=$(m "$out/model.txt" slow 5); s99=$(m "$out/model.txt" slow 6)
  r_rps=$(m "$out/real.txt" real 4)
  printf '%-18s %10.0f %8.2f %8.2f | %10.0f %8.2f %8.2f | %9.2f | %10.0f %8.3f\n' "$s" "$h_rps" "$h50" "$h99" \
    "$s_rps" "$s50" "$s99" "$(echo "$s99 / $h99" | bc -l)" "$r_rps" "$(echo "$r_rps / $lf_real" | bc -l)"
done | tee "$out/summary.txt"
