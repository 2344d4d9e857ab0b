#!/usr/bin/env bash
# A/B of two Meridian binaries under the same redis-benchmark load, in alternation.
#
#   bash bench/meridian-ab.sh OLD_BINARY NEW_BINARY [ROUNDS] [TEST] [PIPELINE]
#
# Starts both binaries as in-memory nodes on loopback, then for each round runs
# `redis-benchmark -t TEST -c 50 -d 500 -r 100000 -P PIPELINE -n 200000` against each in
# turn (the order flips every round, so neither always runs on a warmer machine) and prints
# ops/s per round. Build an old binary with `git worktree add ../old REV` and
# `CARGO_TARGET_DIR=../tgt-old cargo build --release -p meridian` there.
set -euo pipefail
old=$1 new=$2 rounds=${3:-6} test=${4:-set} pipeline=${5:-1}
bash "$(dirname "$0")/../scripts/ensure-redis-tools.sh"
base=$((20000 + RANDOM % 10000))
"$old" node --resp "127.0.0.1:$base" --http "127.0.0.1:$((base + 1))" >/dev/null 2>&1 &
op=$!
"$new" node --resp "127.0.0.1:$((base + 2))" --http "127.0.0.1:$((base + 3))" >/dev/null 2>&1 &
np=$!
trap 'kill $op $np 2>/dev/null' EXIT
sleep 1
for r in $(seq 1 "$rounds"); do
  order=(old new)
  (( r % 2 == 0 )) && order=(new old)
  for which in "${order[@]}"; do
    port=$base
    [[ $which == new ]] && port=$((base + 2))
    rps=$(redis-benchmark -p "$port" -t "$test" -c 50 -d 500 -r 100000 -P "$pipeline" -n 200000 -q \
      2>/dev/null | tr '\r' '\n' | grep "requests per second" | tail -1 | awk '{print $2}')
    echo "round $r $which $rps"
  done
done
