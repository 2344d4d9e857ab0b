#!/usr/bin/env bash
# What ACL checks cost: the same redis-benchmark load against one release-built Meridian node,
# as the `default` user (allowed everything: the check is one flag test) and as a restricted
# user (`~key:* +@all -debug`: every request pays the command bit, the key glob and the
# channel check), in alternating rounds.
#
#   bash bench/acl-cost.sh [ROUNDS] [REQUESTS_P1] [REQUESTS_P16]
#
# SET and GET, 500-byte values, 50 clients, random keys out of 100k, pipelines 1 and 16.
# Prints medians over rounds and restricted/default ratios (issue 42: at most 2 % lost).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
n_p1=${2:-200000}
n_p16=${3:-1000000}
bash scripts/ensure-redis-tools.sh --server
[[ -n "${NO_BUILD:-}" ]] || cargo build -q --release -p meridian

out=bench/out; mkdir -p "$out"
csv="$out/acl-cost-$(date +%Y%m%d-%H%M%S).csv"
port=$((20000 + RANDOM % 10000))
"${CARGO_TARGET_DIR:-target}/release/meridian" node --resp "127.0.0.1:$port" \
  --http "127.0.0.1:$((port + 1))" >"$out/meridian-acl.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$port" ACL SETUSER bench on '>benchpass' '~key:*' '&*' '+@all' '-debug' >/dev/null

echo "user,round,pipeline,test,rps" >"$csv"
run() { # run USER ROUND PIPELINE REQUESTS
  local auth=()
  [[ $1 == restricted ]] && auth=(--user bench -a benchpass)
  redis-cli -p "$port" FLUSHALL >/dev/null
  redis-benchmark -p "$port" "${auth[@]}" -t set,get -n "$4" -c 50 -d 500 -r 100000 -P "$3" \
    --csv 2>/dev/null | tail -n +2 | tr -d '"' | cut -d, -f1,2 | sed "s/^/$1,$2,$3,/" >>"$csv"
}
for r in $(seq 1 "$rounds"); do
  for p in 1 16; do
    n=$n_p1; [[ $p == 16 ]] && n=$n_p16
    if (( r % 2 )); then run default "$r" "$p" "$n"; run restricted "$r" "$p" "$n"
    else run restricted "$r" "$p" "$n"; run default "$r" "$p" "$n"; fi
  done
done

python3 - "$csv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def med(user, p, t):
    return statistics.median(float(r["rps"]) for r in rows
                             if r["user"] == user and r["pipeline"] == p and r["test"] == t)
print(f"{'test':<5} {'P':>3} {'default':>10} {'restricted':>11} {'ratio':>6}")
for t in ("SET", "GET"):
    for p in ("1", "16"):
        d, x = med("default", p, t), med("restricted", p, t)
        print(f"{t:<5} {p:>3} {d:>10.0f} {x:>11.0f} {x / d:>6.3f}")
print(f"rows: {sys.argv[1]}")
EOF
