#!/usr/bin/env bash
# Transactions against Redis Cluster, side by side in one run (issue 14's figures):
#
#   bash bench/txn-compare.sh [ROUNDS] [SECONDS] [REQUESTS]
#
# Starts, on loopback:
#   redis     Redis Cluster, 3 masters (Debian's redis-server, persistence off)
#   meridian  `meridian up --dcs 1 --nodes-per-dc 3` (one DC, no WAN delay), bucket `bank`
#             transactional (Clock-SI), bucket `tl` a timeline bucket with the spec's defaults,
#             bucket `q` eventual (N=3, R=W=quorum), and the default bucket as `meridian up`
#             makes it (timeline, masters in the inserting DC, failover); on both timeline
#             buckets MULTI/EXEC is one timeline group at the records' master
# Each round, the target order alternating:
#   multi   50 clients, `MULTI; INCRBY {t}a 1; INCRBY {t}b 1; EXEC` back to back for SECONDS
#           (crates/meridian-server/examples/multi_exec_load.rs; tags random in 10k, so both
#           keys share a slot, as Redis Cluster requires; each transaction sent to the node
#           CLUSTER SLOTS names for its slot, on every target)
#   mget8   redis-benchmark, 50 clients, `MGET` of 8 keys of one partition (one hash tag):
#           on Meridian's transactional bucket that is one read-only snapshot transaction at
#           one leader; on its eventual bucket, 8 quorum reads; on the default bucket, 8 reads
#           at the records' master; on Redis Cluster, one MGET.
# Prints medians over rounds and the ratios.
#
# Ports: 21100-21102 (Redis), 22400.. (Meridian); below the ephemeral range.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
secs=${2:-10}
requests=${3:-100000}
bash scripts/ensure-redis-tools.sh --server
cargo build -q --release -p meridian
cargo build -q --release -p meridian-server --example multi_exec_load
target="${CARGO_TARGET_DIR:-target}"
bin="$PWD/$target/release/meridian"
load="$PWD/$target/release/examples/multi_exec_load"
out=bench/out/txn; rm -rf "$out"; mkdir -p "$out"
csv="$out/results.csv"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

rbase=21100
raddrs=()
for i in 0 1 2; do
  port=$((rbase + i)); dir="$out/redis-$i"; mkdir -p "$dir"
  redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file nodes.conf \
    --dir "$dir" --save "" --appendonly no --daemonize no >"$dir/log" 2>&1 &
  pids+=($!)
  raddrs+=("127.0.0.1:$port")
done
for i in 0 1 2; do
  for _ in $(seq 1 100); do redis-cli -p $((rbase + i)) PING >/dev/null 2>&1 && break; sleep 0.1; done
done
redis-cli --cluster create "${raddrs[@]}" --cluster-replicas 0 --cluster-yes >"$out/redis-create.log" 2>&1
for _ in $(seq 1 100); do
  redis-cli -p $rbase CLUSTER INFO | grep -q 'cluster_state:ok' && break; sleep 0.2
done

mbase=22400
"$bin" up --dcs 1 --nodes-per-dc 3 --base-port "$mbase" --wan-latency 0ms --misrouted serve >"$out/meridian.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do grep -q '^ready' "$out/meridian.log" && break; sleep 0.1; done
curl -sf -X PUT "127.0.0.1:$((mbase + 1000))/buckets/bank" -H 'content-type: application/json' \
  -d '{"type":"transactional"}' >/dev/null
curl -sf -X PUT "127.0.0.1:$((mbase + 1000))/buckets/tl" -H 'content-type: application/json' \
  -d '{"type":"timeline"}' >/dev/null
curl -sf -X PUT "127.0.0.1:$((mbase + 1000))/buckets/q" -H 'content-type: application/json' \
  -d '{"type":"eventual"}' >/dev/null

keys() { # keys PREFIX: 8 keys of one hash tag
  for i in 1 2 3 4 5 6 7 8; do printf '%s{acct}k%d ' "$1" "$i"; done
}
# The keys exist (100-byte values), so every read returns data.
val=$(head -c 100 /dev/zero | tr '\0' v)
for k in $(keys bank:) $(keys q:) $(keys ""); do redis-cli -p "$mbase" SET "$k" "$val" >/dev/null; done
for k in $(keys ""); do redis-cli -c -p "$rbase" SET "$k" "$val" >/dev/null; done
# redis-benchmark --cluster does not route custom commands: send the MGET to the tag's master.
rowner=$rbase
for i in 0 1 2; do
  if [[ $(redis-cli -p $((rbase + i)) GET '{acct}k1') == "$val" ]]; then rowner=$((rbase + i)); fi
done

echo "round,test,target,ops_per_s,p50_ms,p99_ms,nil,errors" >"$csv"
multi() { # multi ROUND TARGET
  local r
  case $2 in
    redis) r=$("$load" "127.0.0.1:$rbase" 50 "$secs" --cluster) ;;
    # Every target's clients route by CLUSTER SLOTS, as a cluster client does.
    meridian) r=$("$load" "127.0.0.1:$mbase" 50 "$secs" bank: --cluster) ;;
    meridian-tl) r=$("$load" "127.0.0.1:$mbase" 50 "$secs" tl: --cluster) ;;
    meridian-default) r=$("$load" "127.0.0.1:$mbase" 50 "$secs" "" --cluster) ;;
  esac
  read -r tps p50 p99 nil errors <<<"$r"
  echo "$1,multi,$2,$tps,$(awk "BEGIN{print $p50/1000}"),$(awk "BEGIN{print $p99/1000}"),$nil,$errors" >>"$csv"
}
mget() { # mget ROUND TARGET
  local port=$mbase prefix=""
  case $2 in
    redis) port=$rowner ;;
    meridian-txn) prefix=bank: ;;
    meridian-quorum) prefix=q: ;;
    meridian-default) ;;
  esac
  # shellcheck disable=SC2046
   line=$(redis-benchmark -p "$port" -n "$requests" -c 50 --csv MGET $(keys "$prefix") \
    2>"$out/last.err" | tail -n 1 | tr -d '"')
  [[ -n "$line" ]] || { echo "redis-benchmark failed against $2" >&2; cat "$out/last.err" >&2; exit 1; }
  IFS=, read -r _ rps _ _ p50 _ p99 _ <<<"$line"
  echo "$1,mget8,$2,$rps,$p50,$p99,0,0" >>"$csv"
}
for r in $(seq 1 "$rounds"); do
  if ((r % 2)); then order=(redis meridian meridian-tl meridian-default)
  else order=(meridian-default meridian-tl meridian redis); fi
  for t in "${order[@]}"; do multi "$r" "$t"; done
  if ((r % 2)); then order=(redis meridian-txn meridian-quorum meridian-default)
  else order=(meridian-default meridian-quorum meridian-txn redis); fi
  for t in "${order[@]}"; do mget "$r" "$t"; done
  echo "round $r done" >&2
done

python3 - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def med(test, target, col):
    v = [float(r[col]) for r in rows if r["test"] == test and r["target"] == target]
    return statistics.median(v) if v else float("nan")
print("| test | target | ops/s | p50 ms | p99 ms | ratio to Redis Cluster |")
print("|---|---|---|---|---|---|")
for test, targets in [("multi", ["redis", "meridian", "meridian-tl", "meridian-default"]), ("mget8", ["redis", "meridian-txn", "meridian-quorum", "meridian-default"])]:
    base = med(test, "redis", "ops_per_s")
    for t in targets:
        ops = med(test, t, "ops_per_s")
        print(f"| {test} | {t} | {ops:,.0f} | {med(test, t, 'p50_ms'):.3f} | {med(test, t, 'p99_ms'):.3f} | {ops / base:.2f} |")
txn = med("mget8", "meridian-txn", "ops_per_s")
quorum = med("mget8", "meridian-quorum", "ops_per_s")
print(f"\nread-only transaction (8 keys, one partition) vs 8 quorum reads: throughput {txn / quorum:.2f}x, "
      f"p50 {med('mget8', 'meridian-txn', 'p50_ms') / med('mget8', 'meridian-quorum', 'p50_ms'):.2f}x the latency")
for t in ["meridian", "meridian-tl", "meridian-default"]:
    nil = sum(int(r["nil"]) for r in rows if r["target"] == t)
    err = sum(int(r["errors"]) for r in rows if r["target"] == t)
    print(f"{t} MULTI/EXEC: {nil} nil EXECs, {err} errors over all rounds")
PY
