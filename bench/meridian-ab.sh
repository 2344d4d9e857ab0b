#!/usr/bin/env bash
# A/B of two Meridian binaries under the same redis-benchmark load, in alternation; with
# WITH_REDIS=1, Debian's redis-server runs as a third target in the same rotation.
#
#   [WITH_REDIS=1] bash bench/meridian-ab.sh OLD_BINARY NEW_BINARY [ROUNDS] [TEST] [PIPELINE]
#
# Starts both binaries as in-memory nodes on loopback, then for each round runs
# `redis-benchmark -t TEST -c 50 -d 500 -r 100000 -P PIPELINE -n 200000` against each in
# turn (the order rotates every round, so no target always runs on a warmer machine), prints
# ops/s per round, then the medians and the median of the per-round ratios new/old (and
# new/redis). Build an old binary with `git worktree add ../old REV` and
# `CARGO_TARGET_DIR=../tgt-old cargo build --release -p meridian` there.
set -euo pipefail
old=$1 new=$2 rounds=${3:-6} test=${4:-set} pipeline=${5:-1}
if [[ ${WITH_REDIS:-0} == 1 ]]; then
  bash "$(dirname "$0")/../scripts/ensure-redis-tools.sh" --server
else
  bash "$(dirname "$0")/../scripts/ensure-redis-tools.sh"
fi
base=$((20000 + RANDOM % 10000))
"$old" node --resp "127.0.0.1:$base" --http "127.0.0.1:$((base + 1))" >/dev/null 2>&1 &
pids=($!)
"$new" node --resp "127.0.0.1:$((base + 2))" --http "127.0.0.1:$((base + 3))" >/dev/null 2>&1 &
pids+=($!)
targets=(old new)
if [[ ${WITH_REDIS:-0} == 1 ]]; then
  redis-server --port $((base + 4)) --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
  pids+=($!)
  targets+=(redis)
fi
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
sleep 1
out=$(mktemp)
n=${#targets[@]}
for r in $(seq 1 "$rounds"); do
  for i in $(seq 0 $((n - 1))); do
    which=${targets[$(( (i + r) % n ))]}
    case $which in
      old) port=$base ;;
      new) port=$((base + 2)) ;;
      redis) port=$((base + 4)) ;;
    esac
    rps=$(redis-benchmark -p "$port" -t "$test" -c 50 -d 500 -r 100000 -P "$pipeline" -n 200000 -q \
      2>/dev/null | tr '\r' '\n' | grep "requests per second" | tail -1 | awk '{print $2}')
    echo "round $r $which $rps" | tee -a "$out"
  done
done
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
for t in "${targets[@]}"; do
  echo "median $t $(awk -v t="$t" '$3==t {print $4}' "$out" | median)"
done
ratio() {
  awk -v a="$1" -v b="$2" '$3==a {x[$2]=$4} $3==b {y[$2]=$4} END {for (r in x) if (y[r] > 0) print x[r]/y[r]}' "$out" | median
}
echo "median ratio new/old $(ratio new old)"
[[ ${WITH_REDIS:-0} == 1 ]] && echo "median ratio new/redis $(ratio new redis)"
rm -f "$out"
